// kiln run: feed inputs, run, write or check outputs.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <map>
#include <optional>

#include "cli/commands.h"
#include "cli/common.h"
#include "graph/onnx_import.h"
#include "passes/pass.h"

namespace kiln::cli {

namespace {

struct Comparison {
  bool ok = true;
  double max_abs = 0, max_rel = 0;
  int64_t mismatches = 0;
  std::string why;  // shape or dtype mismatch
};

Comparison compare(const TensorInfo& info, std::span<const std::byte> out, const HostTensor& ref, double rtol,
                   double atol) {
  Comparison c;
  if (ref.dtype != info.dtype || ref.shape != info.shape) {
    c.ok = false;
    c.why = fmt::format("expected {}{}, got {}{}", dtype_name(ref.dtype), shape_string(ref.shape),
                        dtype_name(info.dtype), shape_string(info.shape));
    return c;
  }
  TensorView ov{info.dtype, info.shape, const_cast<std::byte*>(out.data()), true};
  HostTensor r = ref;
  std::vector<double> a = ov.to_double(), b = r.view().to_double();
  for (size_t i = 0; i < a.size(); ++i) {
    double x = a[i], y = b[i];
    if (std::isnan(x) && std::isnan(y)) continue;
    if (std::isinf(y) && x == y) continue;
    double diff = std::fabs(x - y);
    if (std::isnan(diff)) diff = INFINITY;
    c.max_abs = std::max(c.max_abs, diff);
    if (y != 0) c.max_rel = std::max(c.max_rel, diff / std::fabs(y));
    if (!(diff <= atol + rtol * std::fabs(y))) ++c.mismatches;
  }
  c.ok = c.mismatches == 0;
  return c;
}

HostTensor to_host(const TensorInfo& info, std::span<const std::byte> bytes) {
  HostTensor t;
  t.name = info.name;
  t.dtype = info.dtype;
  t.shape = info.shape;
  t.data.resize(bytes.size());
  std::memcpy(t.data.data(), bytes.data(), bytes.size());
  return t;
}

std::string preview(const TensorInfo& info, std::span<const std::byte> bytes) {
  TensorView v{info.dtype, info.shape, const_cast<std::byte*>(bytes.data()), true};
  std::vector<double> d = v.to_double();
  std::string s;
  for (size_t i = 0; i < d.size() && i < 8; ++i) s += fmt::format("{}{:.6g}", i ? ", " : "", d[i]);
  return s + (d.size() > 8 ? ", ..." : "");
}

}  // namespace

int run_run(const RunOptions& o) {
  std::filesystem::path model = o.model;
  // An ONNX model's inputs and outputs, some of which may be sequences: each element a tensor of
  // the engine's, NAME[i] (graph::sequence_element), the length taken from the data.
  std::optional<graph::OnnxFile> onnx_file;  // parsed once: its inputs' kinds, then the import
  if (is_onnx(model)) onnx_file.emplace(model);
  const graph::OnnxIo io = onnx_file ? onnx_file->io() : graph::OnnxIo{};
  auto find_io = [](const std::vector<graph::OnnxIoValue>& list, const std::string& name) -> const graph::OnnxIoValue* {
    for (const graph::OnnxIoValue& v : list)
      if (v.name == name) return &v;
    return nullptr;
  };
  graph::ImportOptions import_options;
  std::map<std::string, HostTensor> given;
  auto give_sequence = [&](const std::string& name, std::vector<HostTensor> elements) {
    import_options.sequence_lengths[name] = static_cast<int64_t>(elements.size());
    for (size_t k = 0; k < elements.size(); ++k)
      given[graph::sequence_element(name, static_cast<int64_t>(k))] = std::move(elements[k]);
  };
  auto give = [&](const std::string& name, const std::filesystem::path& file, bool overwrite) {
    const graph::OnnxIoValue* v = find_io(io.inputs, name);
    if (!overwrite && (given.count(name) || import_options.sequence_lengths.count(name) ||
                       import_options.optional_present.count(name)))
      return;
    if (v && v->optional) {
      OptionalValue opt = read_optional_file(file);
      import_options.optional_present[name] = opt.present;
      if (opt.present && opt.sequence) give_sequence(name, std::move(opt.values));
      if (opt.present && !opt.sequence) given[name] = std::move(opt.values.front());
    } else if (v && v->sequence) {
      give_sequence(name, read_sequence_file(file));
    } else {
      given[name] = read_tensor_file(file);
    }
  };
  for (const std::string& in : o.inputs) {
    auto [name, file] = split_assignment(in, "--input");
    give(name, file, true);
  }
  std::vector<HostTensor> positional;  // an engine's, matched to its inputs once it is loaded
  if (!o.inputs_dir.empty()) {
    if (!std::filesystem::is_directory(o.inputs_dir)) throw Error("--inputs " + o.inputs_dir + ": not a folder");
    for (size_t i = 0;; ++i) {
      auto p = std::filesystem::path(o.inputs_dir) / fmt::format("input_{}.pb", i);
      if (!std::filesystem::exists(p)) break;
      if (!is_onnx(model)) {
        positional.push_back(read_tensor_file(p));
        continue;
      }
      if (i >= io.inputs.size())
        throw Error(fmt::format("{}: more input files than the model's {} inputs", o.inputs_dir, io.inputs.size()));
      give(io.inputs[i].name, p, false);
    }
  }

  std::shared_ptr<const Engine> engine;
  std::vector<std::string> input_names;  // the model's inputs, in order, for positional files
  if (is_onnx(model)) {
    for (const auto& [name, t] : given)  // small values the importer may need (a Loop's trip count)
      if (t.data.size() <= 4096) import_options.input_values.emplace(name, t);
    graph::Graph g = onnx_file->import(import_options);
    for (graph::ValueId id : g.inputs) input_names.push_back(g.value(id).name);
    build::BuildOptions bo = build_options(o.build);
    for (const auto& [name, t] : given) {
      if (std::find(input_names.begin(), input_names.end(), name) != input_names.end())
        bo.input_shapes.try_emplace(name, t.shape);  // symbolic dims take the given data's sizes
      else if (!find_io(io.inputs, name))
        throw Error(fmt::format("--input {}: the model has no input of that name (inputs: {})", name,
                                fmt::join(input_names, ", ")));
    }
    for (const std::string& name : passes::shape_determining_inputs(g))
      if (given.count(name) && !bo.constant_inputs.count(name)) bo.constant_inputs[name] = given[name];
    build::BuildReport report;
    std::vector<uint8_t> bytes = build::build_engine(g, bo, &report);
    if (!report.precision_choice.empty()) fmt::print(stderr, "{}\n", report.precision_choice);
    engine = Engine::from_bytes(bytes, model.string());
  } else {
    engine = load_engine(model, o.build);
    for (const TensorInfo& t : engine->inputs()) input_names.push_back(t.name);
    if (positional.size() > input_names.size())
      throw Error(fmt::format("{}: {} input files given, the engine has {} inputs", o.inputs_dir, positional.size(),
                              input_names.size()));
    for (size_t i = 0; i < positional.size(); ++i) given.try_emplace(input_names[i], positional[i]);
  }

  for (const auto& [name, t] : given) {
    bool known = false;
    for (const TensorInfo& in : engine->inputs()) known |= in.name == name;
    const bool frozen = is_onnx(model);  // a model's input frozen by the build (checked against its inputs above)
    if (!known && !frozen) {
      std::vector<std::string> expected;
      for (const TensorInfo& in : engine->inputs())
        expected.push_back(fmt::format("input '{}' ({}{})", in.name, dtype_name(in.dtype), shape_string(in.shape)));
      throw Error(fmt::format("--input {}: the engine has no input of that name; it takes {}", name,
                              fmt::join(expected, ", ")));
    }
  }
  std::unique_ptr<Context> ctx = engine->create_context(o.threads);
  std::map<std::string, std::pair<std::string, int64_t>> range_set_by;  // range -> the input that sized it
  for (const TensorInfo& in : engine->inputs()) {
    auto it = given.find(in.name);
    if (it == given.end())
      throw Error(fmt::format("input '{}' ({}{}) was not given: use --input {}=FILE or --inputs DIR", in.name,
                              dtype_name(in.dtype), shape_string(in.shape), in.name));
    const HostTensor& t = it->second;
    // A range engine takes any shape in range: the data's shape, if the engine has a range there.
    // Inputs that share a range must agree on its size.
    if (engine->ranges().empty() || t.shape.size() != in.shape.size()) continue;
    for (const ShapeRangeInfo& r : engine->ranges())
      for (const auto& [name, axis] : r.inputs) {
        if (name != in.name) continue;
        const int64_t n = t.shape[static_cast<size_t>(axis)];
        auto [set, added] = range_set_by.emplace(r.name, std::pair{in.name, n});
        if (!added && set->second.second != n)
          throw Error(fmt::format("input '{}' gives dimension '{}' size {}, but input '{}' gives it {}", in.name,
                                  r.name, n, set->second.first, set->second.second));
      }
    if (t.shape != ctx->input_shape(in.name)) ctx->set_input_shape(in.name, t.shape);
  }
  for (const TensorInfo& in : engine->inputs()) {
    const HostTensor& t = given.at(in.name);
    const std::vector<int64_t> want = ctx->input_shape(in.name);
    if (t.dtype != in.dtype || t.shape != want)
      throw Error(fmt::format("input '{}' expects {}{}, the file holds {}{}", in.name, dtype_name(in.dtype),
                              shape_string(want), dtype_name(t.dtype), shape_string(t.shape)));
    ctx->set_input(in.name, t.data.data(), t.data.size());
  }
  auto t0 = std::chrono::steady_clock::now();
  ctx->run();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("ran {} in {:.3f} ms\n", model.string(), ms);

  // The expected outputs: an engine's by position; an ONNX model's by name, a sequence's element
  // by element.
  bool all_ok = true;
  const auto& outs = engine->outputs();
  std::map<std::string, std::filesystem::path> expected;        // engine output -> its reference file
  std::map<std::string, std::pair<HostTensor, bool>> elements;  // sequence elements' references, used
  for (size_t j = 0; !o.expect_dir.empty() && j < (is_onnx(model) ? io.outputs.size() : outs.size()); ++j) {
    auto ref_path = std::filesystem::path(o.expect_dir) / fmt::format("output_{}.pb", j);
    if (!is_onnx(model) || (!io.outputs[j].sequence && !io.outputs[j].optional)) {
      expected[is_onnx(model) ? io.outputs[j].name : outs[j].name] = ref_path;
      continue;
    }
    const std::string& name = io.outputs[j].name;
    OptionalValue ref;  // an optional's, or a sequence as one that holds it
    if (io.outputs[j].optional) {
      ref = read_optional_file(ref_path);
    } else {
      ref.present = ref.sequence = true;
      ref.values = read_sequence_file(ref_path);
    }
    for (size_t k = 0; k < ref.values.size(); ++k)
      elements[ref.sequence ? graph::sequence_element(name, static_cast<int64_t>(k)) : name] = {
          std::move(ref.values[k]), false};
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    const TensorInfo info{outs[i].name, outs[i].dtype, ctx->output_shape(outs[i].name)};
    std::span<const std::byte> bytes = ctx->output(info.name);
    if (!o.outputs_dir.empty()) {
      std::filesystem::create_directories(o.outputs_dir);
      HostTensor t = to_host(info, bytes);
      write_tensor_file(std::filesystem::path(o.outputs_dir) / fmt::format("output_{}.pb", i), t);
      if (info.dtype != DataType::kBFloat16)
        write_tensor_file(std::filesystem::path(o.outputs_dir) / fmt::format("output_{}.npy", i), t);
    }
    if (o.expect_dir.empty()) {
      fmt::print("  {} {}{}: {}\n", info.name, dtype_name(info.dtype), shape_string(info.shape), preview(info, bytes));
      continue;
    }
    HostTensor ref;
    if (auto e = elements.find(info.name); e != elements.end()) {
      ref = e->second.first;
      e->second.second = true;
    } else if (auto f = expected.find(info.name); f != expected.end()) {
      ref = read_tensor_file(f->second);
    } else {
      fmt::print(
          "  {}: MISMATCH: the expected outputs have no such tensor (a longer sequence, an optional that holds "
          "one where none is expected?)\n",
          info.name);
      all_ok = false;
      continue;
    }
    Comparison c = compare(info, bytes, ref, o.rtol, o.atol);
    all_ok &= c.ok;
    if (!c.why.empty()) {
      fmt::print("  {}: MISMATCH: {}\n", info.name, c.why);
    } else {
      fmt::print(
          "  {} {}{}: max abs err {:.3g}, max rel err {:.3g}{}\n", info.name, dtype_name(info.dtype),
          shape_string(info.shape), c.max_abs, c.max_rel,
          c.ok ? "" : fmt::format("  MISMATCH ({} elements beyond atol {} + rtol {})", c.mismatches, o.atol, o.rtol));
    }
  }
  for (const auto& [name, e] : elements)
    if (!e.second) {
      fmt::print(
          "  {}: MISMATCH: expected, but the model gives no such output (a shorter sequence, an empty "
          "optional?)\n",
          name);
      all_ok = false;
    }
  if (!o.expect_dir.empty()) {
    fmt::print("{}\n", all_ok ? "all outputs match" : "outputs do NOT match");
    return all_ok ? kExitOk : kExitMismatch;
  }
  return kExitOk;
}

}  // namespace kiln::cli
