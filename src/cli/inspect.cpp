// kiln inspect: what a model or engine takes, gives and does.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "graph/onnx_import.h"
#include "runtime/cuda/device.h"

namespace kiln::cli {

namespace {

nlohmann::json io_json(const std::vector<TensorInfo>& ts) {
  nlohmann::json a = nlohmann::json::array();
  for (const TensorInfo& t : ts) a.push_back({{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}});
  return a;
}

// "[1..64,3,224,224]": a range engine's input or output, its ranged dimensions as ranges.
std::string ranged_shape(const Engine& e, const TensorInfo& t, bool input) {
  std::vector<std::string> d;
  for (int64_t x : t.shape) d.push_back(std::to_string(x));
  for (const ShapeRangeInfo& r : e.ranges())
    for (const auto& [name, axis] : input ? r.inputs : r.outputs)
      if (name == t.name && axis >= 0) d[static_cast<size_t>(axis)] = fmt::format("{}..{}", r.lo, r.hi);
  return "[" + fmt::format("{}", fmt::join(d, ",")) + "]";
}

int inspect_engine(const InspectOptions& o) {
  std::shared_ptr<const Engine> e = Engine::load(o.model);
  EngineSummary s = e->summary();
  if (o.json) {
    nlohmann::json steps = nlohmann::json::array();
    for (const StepInfo& st : s.steps)
      steps.push_back({{"op", st.op},
                       {"name", st.name},
                       {"attrs", st.attrs},
                       {"inputs", st.inputs},
                       {"outputs", st.outputs},
                       {"tactic", st.tactic},
                       {"side_after", st.side_after}});
    nlohmann::json views = nlohmann::json::array();
    for (const ViewInfo& v : s.views)
      views.push_back({{"name", v.name}, {"base", v.base}, {"offset", v.offset}, {"bytes", v.bytes}});
    nlohmann::json j = {{"file", o.model},
                        {"format_version", s.format_version},
                        {"producer", s.producer},
                        {"target", s.target},
                        {"cuda_version", s.cuda_version},
                        {"cudnn_version", s.cudnn_version},
                        {"cublaslt_version", s.cublaslt_version},
                        {"kernel_arch", s.kernel_arch},
                        {"model", s.model_name},
                        {"file_bytes", s.file_bytes},
                        {"weight_bytes", s.weight_bytes},
                        {"arena_bytes", s.arena_bytes},
                        {"activation_bytes", s.activation_bytes},
                        {"peak_live_bytes", s.peak_live_bytes},
                        {"inputs", io_json(e->inputs())},
                        {"outputs", io_json(e->outputs())},
                        {"steps", steps},
                        {"views", views}};
    if (!s.ranges.empty()) {
      nlohmann::json ranges = nlohmann::json::array(), buckets = nlohmann::json::array();
      for (const ShapeRangeInfo& r : s.ranges) {
        nlohmann::json ins = nlohmann::json::array(), outs = nlohmann::json::array();
        for (const auto& [name, axis] : r.inputs) ins.push_back({{"name", name}, {"axis", axis}});
        for (const auto& [name, axis] : r.outputs) outs.push_back({{"name", name}, {"axis", axis}});
        ranges.push_back({{"name", r.name},
                          {"lo", r.lo},
                          {"hi", r.hi},
                          {"buckets", r.buckets},
                          {"inputs", ins},
                          {"outputs", outs},
                          {"pad_rows", r.pad_rows},
                          {"why_exact", r.why_exact}});
      }
      for (const BucketInfo& b : s.buckets)
        buckets.push_back({{"sizes", b.sizes}, {"steps", b.steps}, {"arena_bytes", b.arena_bytes}});
      j["ranges"] = ranges;
      j["buckets"] = buckets;
    }
    if (!s.whole_network.empty()) j["whole_network"] = s.whole_network;
    fmt::print("{}\n", j.dump(2));
    return kExitOk;
  }
  fmt::print("engine     {} ({})\n", o.model, human_bytes(s.file_bytes));
  fmt::print("model      {}\n", s.model_name);
  fmt::print("target     {}\n", s.target == "cpu" ? s.target : gpu::describe_arch(s.target));
  if (s.target != "cpu")
    fmt::print("libraries  {} (a machine with other versions refuses the engine)\n",
               gpu::describe_libraries({s.cuda_version, s.cudnn_version, s.cublaslt_version}));
  if (s.kernel_arch != 0)
    fmt::print("kernels    only those of {} (--target-arch)\n",
               gpu::describe_arch("sm_" + std::to_string(s.kernel_arch)));
  fmt::print("versions   format {}, built by {}\n", s.format_version, s.producer);
  fmt::print("weights    {}\n", human_bytes(s.weight_bytes));
  fmt::print("arena      {} (all activations without sharing: {}; peak of live bytes, the lower bound: {})\n",
             human_bytes(s.arena_bytes), human_bytes(s.activation_bytes), human_bytes(s.peak_live_bytes));
  for (const TensorInfo& t : e->inputs())
    fmt::print("input      {} {}{}\n", t.name, dtype_name(t.dtype), ranged_shape(*e, t, true));
  for (const TensorInfo& t : e->outputs()) {
    const bool bounded =
        std::find(s.bounded_outputs.begin(), s.bounded_outputs.end(), t.name) != s.bounded_outputs.end();
    fmt::print("output     {} {}{}{}\n", t.name, dtype_name(t.dtype), ranged_shape(*e, t, false),
               bounded ? " at most: its size depends on the data" : "");
  }
  for (const ShapeRangeInfo& r : s.ranges)
    fmt::print("range      {} {}..{}: buckets {}; {}\n", r.name, r.lo, r.hi, fmt::join(r.buckets, ","),
               r.pad_rows ? "sizes between them run padded with zero rows"
                          : "only these sizes run (rows not independent: " + r.why_exact + ")");
  for (const BucketInfo& b : s.buckets)
    fmt::print("  plan [{}]: {} steps, arena {}\n", fmt::join(b.sizes, ","), b.steps, human_bytes(b.arena_bytes));
  fmt::print("steps      {}{}\n", s.steps.size(), s.ranges.empty() ? "" : " (the largest bucket's plan)");
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const StepInfo& st = s.steps[i];
    fmt::print("  {:>4}  {:<20} {:<28} {} -> {}{}{}{}\n", i, st.op, st.name, fmt::join(st.inputs, ", "),
               fmt::join(st.outputs, ", "), st.attrs.empty() ? "" : "  {" + st.attrs + "}",
               st.tactic < 0 ? "" : fmt::format("  [tactic {}]", st.tactic),
               st.side_after < -1  ? ""
               : st.side_after < 0 ? "  [side stream, from the start]"
                                   : fmt::format("  [side stream, after step {}]", st.side_after));
  }
  if (!s.views.empty()) fmt::print("views      {} (tensors in another's memory: no step, no copy)\n", s.views.size());
  for (const ViewInfo& v : s.views)
    fmt::print("        {} view of {} at +{} bytes ({})\n", v.name, v.base, v.offset, human_bytes(v.bytes));
  if (!s.whole_network.empty()) fmt::print("whole net  {}\n", s.whole_network);
  return kExitOk;
}

std::string dims_of(const graph::Value& v) {
  if (!v.has_shape) return "[?]";
  std::vector<std::string> d;
  for (size_t i = 0; i < v.shape.size(); ++i)
    d.push_back(v.shape[i] >= 0 ? std::to_string(v.shape[i]) : (i < v.dim_params.size() ? v.dim_params[i] : "?"));
  return "[" + fmt::format("{}", fmt::join(d, ",")) + "]";
}

int inspect_onnx(const InspectOptions& o) {
  graph::Graph g = graph::import_onnx(o.model);
  std::map<std::string, int> ops;
  for (const graph::Node& n : g.nodes) ++ops[std::string(op_name(n.kind))];
  size_t weight_bytes = 0;
  for (const graph::Value& v : g.values)
    if (v.is_constant()) weight_bytes += v.data->size();
  if (o.json) {
    nlohmann::json ins = nlohmann::json::array(), outs = nlohmann::json::array();
    for (graph::ValueId id : g.inputs)
      ins.push_back(
          {{"name", g.value(id).name}, {"dtype", dtype_name(g.value(id).dtype)}, {"shape", dims_of(g.value(id))}});
    for (graph::ValueId id : g.outputs)
      outs.push_back(
          {{"name", g.value(id).name}, {"dtype", dtype_name(g.value(id).dtype)}, {"shape", dims_of(g.value(id))}});
    nlohmann::json j = {{"file", o.model},
                        {"model", g.name},
                        {"nodes", g.nodes.size()},
                        {"weight_bytes", weight_bytes},
                        {"inputs", ins},
                        {"outputs", outs},
                        {"ops", ops}};
    fmt::print("{}\n", j.dump(2));
    return kExitOk;
  }
  fmt::print("model      {} ({})\n", o.model, g.name);
  fmt::print("nodes      {} (all op types supported)\n", g.nodes.size());
  fmt::print("weights    {}\n", human_bytes(weight_bytes));
  for (graph::ValueId id : g.inputs)
    fmt::print("input      {} {}{}\n", g.value(id).name, dtype_name(g.value(id).dtype), dims_of(g.value(id)));
  for (graph::ValueId id : g.outputs)
    fmt::print("output     {} {}{}\n", g.value(id).name, dtype_name(g.value(id).dtype), dims_of(g.value(id)));
  fmt::print("ops        ");
  bool first = true;
  for (const auto& [op, n] : ops) {
    fmt::print("{}{} x{}", first ? "" : ", ", op, n);
    first = false;
  }
  fmt::print("\n");
  return kExitOk;
}

}  // namespace

int run_inspect(const InspectOptions& o) { return is_onnx(o.model) ? inspect_onnx(o) : inspect_engine(o); }

}  // namespace kiln::cli
