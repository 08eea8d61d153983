// The accuracy guard of quantize-int8 (--accuracy-budget B --validate DATA). Engines are built from
// copies of the float graph with some of the plan's layers quantized (the passes after
// quantize-int8 run on each copy: fuse-qdq, remove-dead-nodes, to-fp16, materialize-outputs) and
// run over the validation data; the measure is top-1 accuracy against the data's labels, or top-1
// agreement with the float engine where the data has none (the class is the argmax of the first
// output per sample). Then:
//   1. float and all-INT8 accuracy;
//   2. if the all-INT8 drop exceeds the budget, each layer's sensitivity: the accuracy with only
//      that layer left in float;
//   3. if the all-INT8 drop exceeds the budget, layers fall back to float (FP16 with --best), most
//      sensitive first, until the drop is within the budget (re-measured after each), or none is
//      left.
// The table (every layer's sensitivity and choice) goes to options.calib.report. Cost: 2 engine
// builds and validation runs where all-INT8 is within the budget (step 2 is then skipped), else at
// most 2 + 2 x layers.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "calib/data_source.h"
#include "core/half.h"
#include "kiln/engine.h"
#include "build/engine_writer.h"
#include "passes/pass.h"
#include "build/quantize_int8.h"
#include "build/view_plan.h"

namespace kiln::build {

using passes::fuse_qdq;
using passes::materialize_outputs;
using passes::remove_dead_nodes;
using passes::to_fp16;

namespace {

struct Validation {
  std::vector<std::vector<std::vector<uint8_t>>> batches;  // [batch][input] bytes
  std::vector<int64_t> labels;                             // per sample; empty: agreement with float
  int64_t batch = 1, samples = 0;
};

Validation load_validation(const graph::Graph& g, const BuildOptions& o) {
  std::vector<calib::InputSpec> specs;
  for (graph::ValueId id : g.inputs) specs.push_back({g.value(id).name, g.value(id).dtype, g.value(id).shape});
  if (specs.empty()) throw Error("--validate: the model has no inputs");
  auto source = calib::open_data_source(o.calib.validate, specs, o.calib.preprocess, "t10k");
  Validation v;
  v.batch = specs[0].shape.empty() ? 1 : specs[0].shape[0];
  for (;;) {
    std::vector<std::vector<uint8_t>> in;
    if (calib::next_batch(*source, specs, v.batch, in) < v.batch) break;  // a partial last batch is left out
    v.batches.push_back(std::move(in));
    v.samples += v.batch;
  }
  if (v.samples == 0)
    throw Error(source->describe() + ": fewer validation samples than one batch of " + std::to_string(v.batch));
  v.labels = source->labels();
  if (!v.labels.empty() && static_cast<int64_t>(v.labels.size()) < v.samples)
    throw Error(source->describe() + ": " + std::to_string(v.labels.size()) + " labels for " +
                std::to_string(v.samples) + " samples");
  return v;
}

// The class of every validation sample under the engine built from `g` (consumed).
std::vector<int64_t> classes(graph::Graph g, const BuildOptions& o, const Validation& v) {
  const auto enabled = [&](const char* name) {
    return std::find(o.disabled_passes.begin(), o.disabled_passes.end(), name) == o.disabled_passes.end();
  };
  if (enabled("fuse-qdq")) fuse_qdq(g, o);
  if (enabled("remove-dead-nodes")) remove_dead_nodes(g, o);
  if (enabled("to-fp16")) to_fp16(g, o);
  materialize_outputs(g, o);
  const auto engine = Engine::from_bytes(write_engine(plan_views(g, o), o.target, {}, nullptr), "validation engine");
  auto ctx = engine->create_context();
  const TensorInfo& out = engine->outputs().at(0);
  if (out.dtype != DataType::kFloat32 && out.dtype != DataType::kFloat16)
    throw Error("--validate: the model's first output '" + out.name + "' is " + std::string(dtype_name(out.dtype)) +
                "; the accuracy guard compares float scores");
  std::vector<int64_t> cls;
  for (const auto& batch : v.batches) {
    for (size_t i = 0; i < batch.size(); ++i)
      ctx->set_input(engine->inputs()[i].name, batch[i].data(), batch[i].size());
    ctx->run();
    const std::span<const std::byte> y = ctx->output(out.name);
    const size_t per = y.size() / static_cast<size_t>(v.batch) / dtype_size(out.dtype);
    for (int64_t s = 0; s < v.batch; ++s) {
      float best = 0;
      int64_t arg = 0;
      for (size_t c = 0; c < per; ++c) {
        float f;
        if (out.dtype == DataType::kFloat32) {
          std::memcpy(&f, y.data() + (static_cast<size_t>(s) * per + c) * 4, 4);
        } else {
          uint16_t h;
          std::memcpy(&h, y.data() + (static_cast<size_t>(s) * per + c) * 2, 2);
          f = Half::to_float(h);
        }
        if (c == 0 || f > best) best = f, arg = static_cast<int64_t>(c);
      }
      cls.push_back(arg);
    }
  }
  return cls;
}

double percent_equal(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  size_t same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
  return 100.0 * static_cast<double>(same) / static_cast<double>(a.size());
}

}  // namespace

std::vector<char> guard_int8_layers(const graph::Graph& g, const Int8Plan& plan, const std::vector<char>& allowed,
                                    const BuildOptions& o, std::string* detail) {
  if (o.calib.validate.empty()) throw Error("--accuracy-budget needs labelled validation data: --validate DATA");
  const Validation v = load_validation(g, o);
  const size_t n = plan.targets.size();
  auto measure = [&](const std::vector<char>& keep, const std::vector<int64_t>& reference) {
    graph::Graph copy = g;
    insert_qdq(copy, plan, keep);
    return percent_equal(classes(std::move(copy), o, v), reference);
  };
  graph::Graph float_graph = g;
  const std::vector<int64_t> float_classes = classes(std::move(float_graph), o, v);
  const std::vector<int64_t> reference =
      v.labels.empty() ? float_classes : std::vector<int64_t>(v.labels.begin(), v.labels.begin() + v.samples);
  const char* what = v.labels.empty() ? "top-1 agreement with the float engine" : "top-1";
  const double acc_float = percent_equal(float_classes, reference), budget = o.calib.accuracy_budget;
  std::vector<char> keep = allowed;
  const double acc_int8 = measure(keep, reference);
  std::string table = fmt::format(
      "accuracy guard: {} on {} samples: float {:.2f}%, all INT8 {:.2f}% (drop {:.2f}, "
      "budget {:.2f})\n",
      what, v.samples, acc_float, acc_int8, acc_float - acc_int8, budget);
  // Each layer's sensitivity only where some layer must go back to float: every measurement is an
  // engine build and a validation run, and a transformer has about 70 products.
  const bool within_budget = acc_float - acc_int8 <= budget;
  std::vector<double> without(n, acc_int8);
  for (size_t t = 0; t < n && !within_budget; ++t) {
    if (!allowed[t]) continue;
    keep[t] = 0;
    without[t] = measure(keep, reference);
    keep[t] = 1;
  }
  double acc = acc_int8;
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return without[a] > without[b]; });
  for (size_t t : order) {
    if (acc_float - acc <= budget) break;
    if (!allowed[t]) continue;
    keep[t] = 0;
    acc = measure(keep, reference);
  }
  table += fmt::format("  {:<40} {:>22} {:>8}  {}\n", "layer", "with only it in float", "gain", "choice");
  for (size_t t = 0; t < n; ++t) {
    const graph::Node& node = g.nodes[plan.targets[t].node];
    const std::string layer = node.origin.empty() ? node.name : node.origin;
    if (!allowed[t]) {
      table += fmt::format("  {:<40} {:>22} {:>8}  {} (no fast INT8 kernel)\n", layer, "-", "-", o.fp16 ? "FP16" : "FP32");
      continue;
    }
    if (within_budget) {
      table += fmt::format("  {:<40} {:>22} {:>8}  INT8\n", layer, "not measured", "-");
      continue;
    }
    table += fmt::format("  {:<40} {:>21.2f}% {:>+8.2f}  {}\n", layer, without[t], without[t] - acc_int8,
                         keep[t] ? "INT8" : (o.fp16 ? "FP16" : "FP32"));
  }
  if (within_budget) table += "  (the INT8 layers together are within the budget: no layer was measured alone)\n";
  const auto kept = static_cast<size_t>(std::count(keep.begin(), keep.end(), 1));
  table += fmt::format("result: {} of {} layers INT8, {} {:.2f}% (drop {:.2f})", kept, n, what, acc, acc_float - acc);
  if (o.calib.report)
    o.calib.report(table);
  else if (o.log)
    o.log(table);
  *detail = fmt::format("accuracy guard kept {} of {} layers in INT8 (drop {:.2f}, budget {:.2f})", kept, n,
                        acc_float - acc, budget);
  return keep;
}

}  // namespace kiln::build
