// quantize-int8 (kiln optimize --int8): turns the float model into an explicitly quantized one, the
// form onnxruntime's quantizer and NVIDIA ModelOpt write, so that one pass (fuse-qdq) turns both
// into INT8 kernels. For every Conv, Gemm and MatMul with constant float32 weights:
//   - its float32 input X goes through QuantizeLinear -> DequantizeLinear with a per-tensor
//     symmetric INT8 scale amax / 127 (zero point 0); amax comes from calibration (calib/stats.h)
//     or from the calibration cache. One Q/DQ pair per tensor, shared by all the ops reading it.
//   - its weights become int8 constants with symmetric per-output-channel scales
//     (max |W[c]| / 127, values in [-127, 127]) behind a DequantizeLinear along the channel axis;
//     a Conv's, for a CPU without VNNI, even values in [-126, 126] (Int8Plan::even_conv_weights).
// The bias stays float (the INT8 kernels add it in float after scaling). Models that already carry
// Q/DQ nodes are left alone: their scales are what the user asked for.
// Guards (a node is left in float): X not float32 or constant; W not a constant float32 of the
// expected rank; Gemm with transA; MatMul of a vector; on GPU targets, every Gemm and MatMul (the
// GPU's kiln.QMatMul is a WMMA kernel: ResNet-50's classifier took 0.071 ms at batch 256 and 0.060
// ms at batch 1 on an H200, against 0.010 and 0.020 ms for the float16 GEMM), and a Conv that the
// channels-last INT8 convolution (NhwcQConv) cannot run: one that is not 2-D, or neither of one
// group with input and output channels multiples of 4 (cuDNN's and Kiln's tensor-core kernels) nor
// depthwise (group = input channels = output channels, W [C, 1, kh, kw]) with C a multiple of 4
// (Kiln's direct depthwise kernel, runtime/cuda/quant/conv/depthwise/depthwise.cu, which reads 4 channels at a
// time). Grouped convolutions with 1 < group < C stay float: the only other GPU INT8 convolution is
// a channels-first WMMA kernel, slower than the float16 kernels, so such a layer is faster in float.
// Nor a Conv whose input channels are not a multiple of 4 (an RGB stem): the channels-last
// pass could pad them to 4, but cuDNN's one plan for ResNet-50's padded stem took 11.2 ms at batch
// 256 on an H100, against 2.94 ms for the float32 stem. Skipped
// layers are calibrated all the same, so one calibration cache serves CPU and GPU builds. With
// --accuracy-budget, the accuracy guard (accuracy_guard.cpp) may leave more nodes in float.
#include "build/quantize_int8.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "build/calibrate.h"
#include "build/stopwatch.h"
#include "calib/cache.h"
#include "core/infer/nn_geometry.h"
#include "passes/pass.h"
#include "passes/qdq_util.h"
#include "runtime/cpu/onednn.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln::build {

namespace qdq = passes::qdq;
using passes::PassResult;

namespace {

using Target = Int8Target;

bool float32_activation(const graph::Graph& g, graph::ValueId v) {
  return v != graph::kNoValue && g.value(v).dtype == DataType::kFloat32 && !g.value(v).is_constant();
}
bool float32_constant(const graph::Graph& g, graph::ValueId v, size_t min_rank, size_t max_rank) {
  if (v == graph::kNoValue) return false;
  const graph::Value& w = g.value(v);
  return w.is_constant() && w.dtype == DataType::kFloat32 && w.shape.size() >= min_rank && w.shape.size() <= max_rank;
}

std::optional<Target> target_of(const graph::Graph& g, size_t i) {
  const graph::Node& n = g.nodes[i];
  if (n.inputs.size() < 2 || !float32_activation(g, n.inputs[0])) return std::nullopt;
  const graph::ValueId x = n.inputs[0], w = n.inputs[1];
  switch (n.kind) {
    case OpKind::kConv:
      if (!float32_constant(g, w, 3, 8)) return std::nullopt;
      return Target{i, x, w, 0};
    case OpKind::kGemm: {
      const auto& a = std::get<GemmAttrs>(n.attrs);
      if (a.transA != 0 || !float32_constant(g, w, 2, 2)) return std::nullopt;
      return Target{i, x, w, a.transB != 0 ? 0 : 1};
    }
    case OpKind::kMatMul:
      if (g.value(x).shape.size() < 2 || !float32_constant(g, w, 2, 2)) return std::nullopt;
      return Target{i, x, w, 1};
    default: return std::nullopt;
  }
}

bool explicitly_quantized(const graph::Graph& g) {
  for (const graph::Node& n : g.nodes)
    if (op_info(n.kind).family == OpFamily::kQuant) return true;
  return false;
}

// amax of every tensor, from the cache if there is one, else calibrated (and cached if asked).
std::vector<double> ranges(const graph::Graph& g, const std::vector<graph::ValueId>& tensors, const BuildOptions& o,
                           std::string* how) {
  namespace fs = std::filesystem;
  const calib::Options& co = o.calib;
  const std::string hash = calib::graph_hash(g);
  std::vector<double> amax(tensors.size());
  if (!co.cache.empty() && fs::exists(co.cache)) {
    const calib::Cache c = calib::read_cache(co.cache);
    calib::check_cache(co.cache, c, hash, co.method);
    for (size_t t = 0; t < tensors.size(); ++t) {
      auto it = c.tensors.find(g.value(tensors[t]).name);
      if (it == c.tensors.end())
        throw Error(co.cache + ": the calibration cache has no range for tensor '" + g.value(tensors[t]).name +
                    "'; delete it to recalibrate");
      amax[t] = it->second.amax;
    }
    *how = "ranges from the calibration cache " + co.cache;
    return amax;
  }
  if (co.data.empty())
    throw Error(
        "--int8 needs calibration data: --calib DATA (a folder of .npy files or images, or an IDX file), "
        "or the calibration cache of an earlier build (--calib-cache FILE)");
  const CalibrationRun run = run_calibration(g, tensors, o);
  calib::Cache c;
  c.model = g.name;
  c.graph_hash = hash;
  c.method = co.method;
  c.samples = run.samples;
  const Stopwatch search;
  cpu::ThreadPool pool(0);  // the entropy and mse searches take ~0.1 s per tensor
  pool.parallel_for(static_cast<int64_t>(tensors.size()), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) amax[t] = run.stats[t].amax(co.method, co.percentile);
  });
  if (o.log)
    o.log("calibration: " + std::to_string(tensors.size()) + " ranges searched (" +
          std::string(calib::method_name(co.method)) + ") on " + std::to_string(pool.size()) + " threads in " +
          std::to_string(static_cast<int>(search.ms())) + " ms");
  for (size_t t = 0; t < tensors.size(); ++t)
    c.tensors[g.value(tensors[t]).name] = {amax[t], run.stats[t].min(), run.stats[t].max()};
  *how =
      "calibrated (" + std::string(calib::method_name(co.method)) + ") on " + std::to_string(run.samples) + " samples";
  if (!co.cache.empty()) {
    calib::write_cache(co.cache, c);
    *how += ", cached in " + co.cache;
  }
  return amax;
}

// Symmetric per-channel INT8 weights along `axis`: q = clamp(round(w / s[c]), -127, 127), s[c] =
// max |W[c]| / 127; with `even`, 7-bit values doubled: q = 2 * clamp(round(w / (2 s[c])), -63, 63),
// s[c] = max |W[c]| / 126 (Int8Plan::even_conv_weights).
struct QuantizedWeights {
  std::vector<int32_t> q;
  std::vector<float> scale;
};
QuantizedWeights quantize_weights(const graph::Value& w, int axis, bool even) {
  const std::vector<double> v = w.view().to_double();
  const auto a = static_cast<size_t>(axis);
  const int64_t channels = w.shape[a];
  int64_t inner = 1;
  for (size_t d = a + 1; d < w.shape.size(); ++d) inner *= w.shape[d];
  auto channel = [&](size_t i) { return static_cast<size_t>((static_cast<int64_t>(i) / inner) % channels); };
  std::vector<double> amax(static_cast<size_t>(channels), 0.0);
  for (size_t i = 0; i < v.size(); ++i) amax[channel(i)] = std::max(amax[channel(i)], std::fabs(v[i]));
  QuantizedWeights out;
  out.scale.resize(amax.size());
  const int step = even ? 2 : 1;
  const double levels = even ? 63 : 127;  // per sign, of step `step`
  for (size_t c = 0; c < amax.size(); ++c)
    out.scale[c] = amax[c] > 0 ? static_cast<float>(amax[c] / (levels * step)) : 1.0f;
  out.q.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double unit = static_cast<double>(out.scale[channel(i)]) * step;
    out.q[i] = step * static_cast<int32_t>(std::clamp(std::nearbyint(v[i] / unit), -levels, levels));
  }
  return out;
}

graph::Node qdq_node(OpKind kind, const std::string& name, std::vector<graph::ValueId> in, graph::ValueId out,
                     int64_t axis) {
  QuantizeAttrs a;
  a.axis = axis;
  return graph::Node{name, kind, a, std::move(in), {out}, ""};
}

// Appends QuantizeLinear -> DequantizeLinear of activation v (per-tensor int8, zero point 0, scale
// from amax) to out and returns the dequantized value.
graph::ValueId append_qdq(graph::Graph& g, std::vector<graph::Node>& out, graph::ValueId v, double amax) {
  const std::string name = g.value(v).name;
  const graph::ValueId s = qdq::add_f32(g, name + "_scale", {}, {calib::int8_scale(amax)});
  const graph::ValueId z = qdq::add_q8(g, name + "_zero", DataType::kInt8, {}, {0});
  graph::Value q = g.value(v);
  q.name = g.unique_name(name + "_int8");
  q.dtype = DataType::kInt8;
  const graph::ValueId qv = g.add_value(q);
  graph::Value d = g.value(v);
  d.name = g.unique_name(name + "_dq");
  const graph::ValueId dv = g.add_value(d);
  out.push_back(qdq_node(OpKind::kQuantizeLinear, g.unique_name(name + "_quantize"), {v, s, z}, qv, 1));
  out.push_back(qdq_node(OpKind::kDequantizeLinear, g.unique_name(name + "_dequantize"), {qv, s, z}, dv, 1));
  return dv;
}

// Per residual tensor to quantize (both convolutions kept): its producer target's node.
std::map<size_t, const Int8Residual*> residuals_by_node(const Int8Plan& plan, const std::vector<char>& keep) {
  std::map<size_t, const Int8Residual*> by_node;
  for (const Int8Residual& r : plan.residuals)
    if (keep[r.producer] && keep[r.partner]) by_node[plan.targets[r.producer].node] = &r;
  return by_node;
}

// Adds of two convolution outputs (ResNet's downsampling blocks: the block's last convolution and
// the shortcut's), each read by the Add alone: one operand (the later in node order) is quantized;
// fuse-qresidual then folds the Add into the other convolution, the one left with a float output,
// and reads the quantized operand as its int8 residual.
void find_residuals(const graph::Graph& g, Int8Plan& plan) {
  const qdq::Uses u = qdq::uses_of(g);
  std::map<size_t, size_t> target_at;  // node -> target
  for (size_t k = 0; k < plan.targets.size(); ++k)
    if (g.nodes[plan.targets[k].node].kind == OpKind::kConv) target_at[plan.targets[k].node] = k;
  for (const graph::Node& n : g.nodes) {
    if (n.kind != OpKind::kAdd || n.inputs.size() != 2 || n.inputs[0] == n.inputs[1]) continue;
    size_t producer[2];
    bool ok = true;
    for (size_t j = 0; j < 2 && ok; ++j) {
      const graph::ValueId v = n.inputs[j];
      const int p = v == graph::kNoValue ? -1 : u.producer[static_cast<size_t>(v)];
      ok = p >= 0 && target_at.count(static_cast<size_t>(p)) && float32_activation(g, v) && qdq::single_use(g, u, v) &&
           g.value(v).shape == g.value(n.inputs[0]).shape;
      if (ok) producer[j] = static_cast<size_t>(p);
    }
    if (!ok) continue;
    const size_t later = producer[0] > producer[1] ? 0 : 1;
    plan.residuals.push_back({plan.tensors.size(), target_at[producer[later]], target_at[producer[1 - later]]});
    plan.tensors.push_back(n.inputs[later]);
  }
}

// The GPU rule: whether NhwcQConv runs a Conv of input shape `xs` and weights of shape `ws` fast.
// One group with C and M multiples of 4, or depthwise (W [C, 1, kh, kw], group = C) with C a
// multiple of 4; 2-D with symmetric pads (as the channels-last pass requires: a TF-style SAME
// padding at stride 2 would leave the QConv channels-first, on the slow WMMA kernel).
bool nhwc_qconv_runs(const ConvAttrs& a, const std::vector<int64_t>& xs, const std::vector<int64_t>& ws) {
  if (ws.size() != 4 || xs.size() != 4) return false;
  const bool fits = a.group == 1 ? ws[0] % 4 == 0 && ws[1] % 4 == 0 : ws[1] == 1 && a.group == ws[0] && ws[0] % 4 == 0;
  if (!fits) return false;
  const nn::WindowGeometry geo = nn::conv_geometry(a, xs, ws);
  return geo.pads[0] == geo.pads[2] && geo.pads[1] == geo.pads[3];
}

// The CPU rule: a Conv of one input channel and one group (LeNet-5's first) stays float. The
// integer dot products sum 4 channels at a time (VNNI), so its int8 kernel does 4 times the work:
// oneDNN's took 1.8-2.9 ms for LeNet-5's first layer at batch 256 against 1.45-1.75 ms in float32
// (the 2-core build machine, 2026-12-01). Depthwise convolutions (one channel a group) are fast.
bool single_input_channel(const ConvAttrs& a, const std::vector<int64_t>& ws) {
  return a.group == 1 && ws.size() >= 2 && ws[1] == 1;
}

}  // namespace

void insert_qdq(graph::Graph& g, const Int8Plan& plan, const std::vector<char>& keep) {
  std::vector<graph::ValueId> dequantized(plan.tensors.size(), graph::kNoValue);
  std::vector<graph::Node> out;
  const std::map<size_t, const Int8Residual*> residual_at = residuals_by_node(plan, keep);
  // A residual R = Conv(...) becomes DequantizeLinear(QuantizeLinear(R)) for its reader, the Add.
  std::map<graph::ValueId, graph::ValueId> requantized;
  size_t next_target = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (graph::ValueId& v : g.nodes[i].inputs)
      if (auto it = requantized.find(v); it != requantized.end()) v = it->second;
    if (next_target == plan.targets.size() || plan.targets[next_target].node != i) {
      out.push_back(std::move(g.nodes[i]));
      continue;
    }
    const size_t ti = plan.tensor_of[next_target];
    const Target t = plan.targets[next_target];
    if (!keep[next_target++]) {
      out.push_back(std::move(g.nodes[i]));
      continue;
    }
    if (dequantized[ti] == graph::kNoValue) dequantized[ti] = append_qdq(g, out, t.x, plan.amax[ti]);
    const graph::Value& w = g.value(t.w);
    const bool even = plan.even_conv_weights && g.nodes[i].kind == OpKind::kConv;
    const QuantizedWeights qw = quantize_weights(w, t.axis, even);
    const std::string wn = w.name;
    const std::vector<int64_t> w_shape = w.shape;
    const auto channels = static_cast<int64_t>(qw.scale.size());
    const graph::ValueId wq = qdq::add_q8(g, wn + "_int8", DataType::kInt8, w_shape, qw.q);
    const graph::ValueId ws = qdq::add_f32(g, wn + "_scale", {channels}, qw.scale);
    const graph::ValueId wz =
        qdq::add_q8(g, wn + "_zero", DataType::kInt8, {channels}, std::vector<int32_t>(qw.scale.size(), 0));
    graph::Value wd;
    wd.name = g.unique_name(wn + "_dq");
    wd.dtype = DataType::kFloat32;
    wd.shape = w_shape;
    wd.has_shape = true;
    const graph::ValueId wdv = g.add_value(wd);
    out.push_back(qdq_node(OpKind::kDequantizeLinear, g.unique_name(wn + "_dequantize"), {wq, ws, wz}, wdv, t.axis));
    graph::Node n = std::move(g.nodes[i]);
    n.inputs[0] = dequantized[ti];
    n.inputs[1] = wdv;
    out.push_back(std::move(n));
    // Residuals are outputs of kept targets (residuals_by_node), so this is the one place they occur.
    if (const auto it = residual_at.find(i); it != residual_at.end()) {
      const graph::ValueId r = plan.tensors[it->second->tensor];
      requantized[r] = append_qdq(g, out, r, plan.amax[it->second->tensor]);
    }
  }
  g.nodes = std::move(out);
}

PassResult quantize_int8(graph::Graph& g, const BuildOptions& o) {
  PassResult r;
  if (!o.int8) return r;
  if (explicitly_quantized(g)) {
    r.detail = "the model carries Q/DQ nodes: its own scales are used";
    return r;
  }
  Int8Plan plan;
  std::map<graph::ValueId, size_t> tensor_index;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (std::optional<Target> t = target_of(g, i)) {
      plan.targets.push_back(*t);
      auto [it, fresh] = tensor_index.emplace(t->x, plan.tensors.size());
      if (fresh) plan.tensors.push_back(t->x);
      plan.tensor_of.push_back(it->second);
    }
  if (plan.targets.empty()) {
    r.detail = "no Conv, Gemm or MatMul with constant float32 weights";
    return r;
  }
  find_residuals(g, plan);
  plan.even_conv_weights = o.target == "cpu" && cpu::onednn::int8_even_weights();
  std::string how;
  plan.amax = ranges(g, plan.tensors, o, &how);
  // On GPU targets, the layers without a fast INT8 kernel stay float; calibrated all the same, so that
  // one calibration cache serves CPU and GPU builds. The accuracy guard chooses among the others.
  std::vector<char> keep(plan.targets.size(), 1);
  int products_in_float = 0, convs_in_float = 0;  // for the report
  if (o.target == "cpu")
    for (size_t k = 0; k < plan.targets.size(); ++k) {
      const graph::Node& n = g.nodes[plan.targets[k].node];
      if (n.kind == OpKind::kConv &&
          single_input_channel(std::get<ConvAttrs>(n.attrs), g.value(plan.targets[k].w).shape)) {
        keep[k] = 0;
        ++convs_in_float;
      } else if (n.kind != OpKind::kConv && plan.even_conv_weights) {
        // Without VNNI the products' int32 sums run Kiln's int16 kernel, which repacks the weights
        // each run: MobileNetV2's classifier (1280 x 1000) took 7.5 ms at batch 1 against 0.36 ms in
        // float32 (AVX2, 2 threads, 2026-12-02).
        keep[k] = 0;
        ++products_in_float;
      }
    }
  else
    for (size_t k = 0; k < plan.targets.size(); ++k) {
      const graph::Node& n = g.nodes[plan.targets[k].node];
      if (n.kind != OpKind::kConv || !nhwc_qconv_runs(std::get<ConvAttrs>(n.attrs), g.value(plan.targets[k].x).shape,
                                                      g.value(plan.targets[k].w).shape)) {
        keep[k] = 0;
        ++(n.kind == OpKind::kConv ? convs_in_float : products_in_float);
      }
    }
  std::string guard;
  // The guard has nothing to choose where no layer may be INT8 (a transformer on the GPU).
  if (o.calib.accuracy_budget >= 0 && std::count(keep.begin(), keep.end(), 1) > 0)
    keep = guard_int8_layers(g, plan, keep, o, &guard);
  insert_qdq(g, plan, keep);
  r.changes = static_cast<int>(std::count(keep.begin(), keep.end(), 1));
  r.detail = std::to_string(r.changes) + " nodes quantized, " + std::to_string(plan.tensors.size()) +
             " activation ranges " + how + (guard.empty() ? "" : "; " + guard) +
             (plan.even_conv_weights ? "; convolution weights in 7 bits (a CPU without VNNI)" : "");
  // Say why layers stayed float on the GPU (a transformer's --best engine is then float16 throughout).
  std::string in_float;  // "; N Gemm/MatMul left in float: ...; M Conv left in float: ..."
  if (products_in_float > 0)
    in_float += "; " + std::to_string(products_in_float) + " Gemm/MatMul left in float: no INT8 GEMM is faster than " +
                (o.target == "cpu" ? "float32 on a CPU without VNNI"
                                   : "float16 on this GPU (docs/decisions/62-transformer-int8-gpu.md)");
  if (convs_in_float > 0)
    in_float += "; " + std::to_string(convs_in_float) +
                (o.target == "cpu" ? " Conv left in float: one input channel (the CPU's int8 dot products sum 4)"
                                   : " Conv left in float: no fast INT8 kernel on the GPU for their shape "
                                     "(channels, groups, padding)");
  r.detail += in_float;
  // Where no layer may be INT8, the user of --int8/--best hears it without -v, and the guard says it
  // had nothing to choose.
  if (r.changes == 0 && !in_float.empty() && o.calib.report)
    o.calib.report("INT8: no layer quantized on " + o.target + ": " + in_float.substr(2) +
                   (o.calib.accuracy_budget >= 0 ? "; the accuracy guard had no INT8 layer to check" : ""));
  return r;
}

}  // namespace kiln::build
