#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <utility>

#include "build/choose_tactics.h"
#include "build/engine_timing.h"
#include "build/engine_writer.h"
#include "build/quantize_int8.h"
#include "build/range_build.h"
#include "build/scratch_file.h"
#include "build/stopwatch.h"
#include "build/view_plan.h"
#include "passes/pass.h"
#include "runtime/cuda/device.h"
#include "runtime/cuda/device_memory.h"

namespace kiln::build {

namespace {

using namespace passes;  // the pipeline lists the rewrites of src/passes

// The pipeline, in order.
constexpr Pass kPipeline[] = {
    // Shapes must be static before anything else: symbolic batch dims get --batch, frozen inputs
    // become constants.
    {"bind-inputs", true, bind_inputs},
    // Types every value and folds nodes whose inputs are all constant (shape computations such as
    // Shape -> Gather -> Concat -> Reshape). Shape operands must be constant to infer what follows,
    // so inference and folding run together, node by node.
    {"infer-and-fold", true, infer_and_fold},
    // Nodes that hand their input on unchanged (Reshape to the same shape, identity Transpose, Cast
    // to the same type, ...): decided from the static shapes above; first among the rewrites so that
    // the pair matches below see through them.
    {"remove-noop", false, remove_noop},
    // Transpose -> Transpose and Reshape-like chains become one node (or none); after remove-noop,
    // before the folds, which then find Conv -> BN behind a Reshape pair that cancelled.
    {"merge-transpose-reshape", false, merge_transpose_reshape},
    // LayerNormalization and Gelu spelled out in elementary ops become the ops; after the removals
    // above (a gamma of ones is gone by then), before the folds that rewrite Mul and Add by constants.
    {"fuse-layernorm", false, fuse_layernorm},
    {"fuse-gelu", false, fuse_gelu},
    // Attention spelled out (MatMul, scale, mask, Softmax, MatMul) becomes the op; after
    // merge-transpose-reshape (one Transpose before the keys), before the folds of Mul and Div.
    {"fuse-attention", false, fuse_attention},
    // Zero Pad -> Conv becomes the Conv's pads; before fold-scale-shift, which then finds
    // x * s -> Conv where x * s -> Pad -> Conv was.
    {"fold-pad", false, fold_pad},
    // Needs the constant BN parameters and static shapes that folding leaves; before the removals.
    {"fold-batchnorm", false, fold_batchnorm},
    // Per-channel Mul/Add/Sub/Div by constants into Conv/Gemm/MatMul weights; after fold-batchnorm,
    // so that Conv -> BN -> Mul -> Add (Caffe's BatchNorm + Scale) folds completely.
    {"fold-scale-shift", false, fold_scale_shift},
    // Identity and inference-mode Dropout only copy; after folding, so that folded chains that end
    // in an Identity disappear too.
    {"remove-identity", false, remove_identity},
    // A Conv whose kernel tiles its input (a patch embedding) becomes a Transpose of the patches
    // and a MatMul; after the folds (its weights final), before quantize-int8 and fuse-epilogue,
    // which then joins the bias.
    {"conv-patches", false, conv_patches},
    // INT8 (--int8): calibrates the cleaned-up float graph (weights folded, so the ranges are those
    // of the tensors the INT8 kernels will see) and inserts Q/DQ nodes.
    {"quantize-int8", false, quantize_int8},
    // Q/DQ pairs, from quantize-int8 or from the model itself, become INT8 kernels; before
    // precision, which keeps the INT8 ops' float parameters in float32.
    {"fuse-qdq", false, fuse_qdq},
    // QConv -> Add(residual) -> Relu -> Q becomes one QConv reading the residual in int8; right
    // after fuse-qdq, which leaves exactly that in residual blocks (a float QConv output, the Add,
    // a Q of the block's output).
    {"fuse-qresidual", false, fuse_qresidual},
    // After the folds and removals, so that Conv -> BN -> Relu reads Conv -> Relu and no Identity
    // sits inside a chain; before to-fp16, so that bias constants fold in float32.
    {"fuse-epilogue", false, fuse_epilogue},
    // Sibling Conv/Gemm/MatMul nodes reading one input become one node and a Split that
    // eliminate-split makes free; after the folds (the weights are final) and remove-identity (an
    // Identity no longer hides a shared input); after fuse-epilogue, so that siblings join with
    // their (identical) epilogues; before to-fp16.
    {"fuse-siblings", false, fuse_siblings},
    // GEMMs whose weights have a column count cuBLASLt cannot align (GPT-2's LM head, 50,257) get
    // zero columns and a Slice (GPU targets); after fuse-siblings (widths final), before to-fp16.
    {"pad-gemm-columns", false, pad_gemm_columns},
    // Last of the rewrites: removes what the passes above left unused.
    {"remove-dead-nodes", false, remove_dead_nodes},
    // Precision last among the rewrites, so that the rewrites above see (and fold) float32
    // constants; only with --fp16.
    {"to-fp16", false, to_fp16},
    // After to-fp16: float16 convolutions and the INT8 ones cuDNN takes switch to the channels-last
    // layout (GPU targets only).
    {"channels-last", false, channels_last},
    // A convolution reads the channels-first image itself where a Cast and a Transpose made its
    // channels-last input (the stem of a float16 or INT8 engine); after channels-last.
    {"fuse-conv-input", false, fuse_conv_input},
    // A stem's QuantizeLinear into the float16 NhwcConv before it (through ResNet's MaxPool); after
    // channels-last, which makes NhwcConv.
    {"fuse-conv-quantize", false, fuse_conv_quantize},
    // An INT8 convolution's float32 output averaged over its pixels (GlobalAveragePool, made a
    // ReduceMean by channels-last) is averaged in the convolution's step; after channels-last.
    {"fuse-conv-pool", false, fuse_conv_pool},
    // Every engine output must be written by a step: outputs that are inputs or constants (or
    // listed twice) get an explicit copy.
    {"materialize-outputs", true, materialize_outputs},
};

std::vector<uint8_t> build_once(graph::Graph& g, const BuildOptions& options, BuildReport& r) {
  r.nodes_in = g.nodes.size();
  std::set<std::string> disabled(options.disabled_passes.begin(), options.disabled_passes.end());
  for (const std::string& name : disabled) {
    bool known = false;
    for (const Pass& p : kPipeline) known |= name == p.name;
    for (const char* stage : kViewStages) known |= name == stage;
    if (!known) {
      std::string names;
      for (const Pass& p : kPipeline) names += (names.empty() ? "" : ", ") + std::string(p.name);
      for (const char* stage : kViewStages) names += ", " + std::string(stage);
      throw Error("--disable-pass " + name + ": no such pass (passes: " + names + ")");
    }
  }
  auto log = [&](const PassReport& p, const std::string& time) {
    if (options.log)
      options.log(p.name + ": " + std::to_string(p.changes) + " change" + (p.changes == 1 ? "" : "s") +
                  (p.detail.empty() ? "" : " (" + p.detail + ")") + time);
  };
  auto ms_of = [](const Stopwatch& t) { return ", " + std::to_string(static_cast<int>(t.ms())) + " ms"; };
  for (const Pass& p : kPipeline) {
    if (disabled.count(p.name)) {
      if (p.required) throw Error(std::string("pass ") + p.name + " is required and cannot be disabled");
      continue;
    }
    const Stopwatch timer;
    PassResult res = p.run(g, options);
    r.passes.push_back({p.name, res.changes, res.detail});
    log(r.passes.back(), ms_of(timer));
    graph::verify(g, p.run != bind_inputs);
  }
  r.nodes_out = g.nodes.size();
  // The view stages (view_plan.h) come after every rewrite: they decide where values live, which
  // any later change to the graph would invalidate. Kernels are chosen for the steps that remain.
  const Stopwatch views;
  EngineProgram program = plan_views(g, options);
  const std::string time = ms_of(views);
  for (size_t k = 0; k < program.stages.size(); ++k) {
    r.passes.push_back(program.stages[k]);
    log(program.stages[k], k + 1 == program.stages.size() ? time + " for the view stages" : "");
  }
  EngineWriter writer;
  if (options.close_calls)
    writer = [&](const std::vector<int32_t>& t) {
      BuildReport scratch;
      return write_engine(program, options.target, t, &scratch);
    };
  const std::vector<int32_t> tactics = choose_tactics(program.graph, options, writer);
  const Stopwatch write;
  std::vector<uint8_t> bytes = write_engine(program, options.target, tactics, &r);
  r.engine_bytes = bytes.size();
  if (options.log) options.log("write-engine: " + std::to_string(bytes.size()) + " bytes" + ms_of(write));
  return bytes;
}

// INT8 steps in a built graph (a model with Q/DQ nodes has them without --int8 too); on GPU
// targets the convolutions are channels-last NhwcQConv by then.
bool has_int8_steps(const graph::Graph& g) {
  for (const graph::Node& n : g.nodes)
    if (n.kind == OpKind::kQConv || n.kind == OpKind::kNhwcQConv || n.kind == OpKind::kQMatMul) return true;
  return false;
}

// The candidates' times per run (INT8, float). A CPU's are measured in turns, 3 rounds of about
// 0.1 s an engine (at least 3 runs, at most 2000), the lower median of each kept: a slower moment
// of a shared machine then falls on both (the 2-core build machine's figures move 10-30% from one
// second to the next). Both run with every core, as a context does by default.
std::pair<double, double> time_candidates(std::span<const uint8_t> int8, std::span<const uint8_t> fl, bool cpu) {
  if (!cpu) return {median_run_ms(int8), median_run_ms(fl)};
  TimedEngine a(int8), b(fl);
  const double once = std::max(a.median_ms(1), b.median_ms(1));
  const int runs = std::clamp(static_cast<int>(100.0 / std::max(once, 1e-3)), 3, 2000);
  double ta = 1e300, tb = 1e300;
  for (int round = 0; round < 3; ++round) {
    ta = std::min(ta, a.median_ms(runs));
    tb = std::min(tb, b.median_ms(runs));
  }
  return {ta, tb};
}

}  // namespace

namespace {

// build_engine's work, within its architecture limit and memory budget.
std::vector<uint8_t> build_within(graph::Graph& g, const BuildOptions& options, BuildReport& r) {
  if (has_ranges(options)) return build_range_engine(g, options, &r);
  if (!options.int8 || options.force_int8) return build_once(g, options, r);
  const bool cpu = options.target == "cpu";
  graph::Graph float_graph = g;
  std::vector<uint8_t> int8 = build_once(g, options, r);
  if (!has_int8_steps(g)) return int8;
  // The build without INT8 is timed against the INT8 engine as a whole, so it makes no close
  // calls; if it wins, it is built again with them, its layers' timings read back from the timing
  // cache (a file of its own when the user gave none).
  graph::Graph float_again = float_graph;
  BuildOptions fo = options;
  fo.int8 = false;
  fo.close_calls = false;
  fo.log = nullptr;
  // The timing cache of the build without INT8: the user's, or a temporary file of its own. Without
  // one (no temporary directory it can write) the build still runs, and if the engine without INT8
  // wins, its rebuild times its layers again.
  const ScratchFile trial_cache(options.timing_cache, "kiln-trial");
  fo.timing_cache = trial_cache.path;
  BuildReport float_report;
  std::vector<uint8_t> fl;
  double t_int8 = 0, t_float = 0;
  try {
    fl = build_once(float_graph, fo, float_report);
    if (has_int8_steps(float_graph)) return int8;  // Q/DQ in the model: INT8 either way
    std::tie(t_int8, t_float) = time_candidates(int8, fl, cpu);
  } catch (const Error& e) {
    r.precision_choice = std::string("kept INT8: the build without INT8 could not be timed (") + e.what() + ")";
    return int8;
  }
  const char* precision = options.fp16 ? "float16" : "float32";
  const char* device = cpu ? "CPU" : "GPU";
  if (t_int8 <= t_float) {
    r.precision_choice = fmt::format("INT8 engine {:.3f} ms vs {} {:.3f} ms per run on this {}: kept INT8", t_int8,
                                     precision, t_float, device);
    return int8;
  }
  const std::string kept = fmt::format(
      "INT8 engine {:.3f} ms vs {} {:.3f} ms per run on this {}: kept {} (no INT8 kernel here is faster; "
      "--force-int8 keeps INT8)",
      t_int8, precision, t_float, device, precision);
  if (cpu) {  // CPU builds make no close calls: the engine timed is the one to keep
    float_report.precision_choice = kept;
    r = std::move(float_report);
    g = std::move(float_graph);
    return fl;
  }
  BuildOptions again = fo;
  again.close_calls = true;
  if (options.log) again.log = [&](const std::string& m) { options.log("without INT8, again: " + m); };
  try {
    BuildReport again_report;
    fl = build_once(float_again, again, again_report);
    float_report = std::move(again_report);
    float_graph = std::move(float_again);
  } catch (const Error& e) {
    if (options.log) options.log(std::string("the engine without INT8 kept its choices made alone: ") + e.what());
  }
  float_report.precision_choice = kept;
  r = std::move(float_report);
  g = std::move(float_graph);
  return fl;
}

// The process's peak resident memory (Linux reports kilobytes).
size_t peak_host_bytes() {
  rusage u{};
  return getrusage(RUSAGE_SELF, &u) == 0 ? static_cast<size_t>(u.ru_maxrss) * 1024 : 0;
}

}  // namespace

std::vector<uint8_t> build_engine(graph::Graph& g, const BuildOptions& options, BuildReport* report) {
  const bool gpu = options.target != "cpu";
  if (!gpu && options.memory_limit != 0)
    throw Error("a memory limit is for GPU builds: a CPU engine's memory is the arena kiln inspect reports");
  if (gpu && options.kernel_arch != 0 && options.kernel_arch < 80)
    throw Error("kernel architecture sm_" + std::to_string(options.kernel_arch) +
                ": Kiln's GPU kernels need compute capability 8.0 or later");
  const gpu::KernelArchScope limit(gpu ? options.kernel_arch : 0);
  const gpu::MemoryBudgetScope memory(options.memory_limit, "--memory-limit");
  BuildReport local;
  BuildReport& r = report ? *report : local;
  const size_t at_start = gpu ? gpu::device_bytes_in_use() : 0;
  std::vector<uint8_t> engine = build_within(g, options, r);
  r.peak_device_bytes = memory.peak();
  r.device_bytes_at_start = at_start;
  r.peak_host_bytes = peak_host_bytes();
  return engine;
}

}  // namespace kiln::build
