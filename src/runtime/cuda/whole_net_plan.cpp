// The whole-network plan (whole_net_plan.h): one walk over the engine's steps, each turned into a
// layer of the table by the builder of its op (kBuilders), or the walk stops with the reason. The
// geometry of convolutions and pools comes from core/infer/nn_geometry.h, the rules shape inference
// and the CPU kernels use, so auto_pad, ceil_mode and default strides resolve the same way here.
#include "runtime/cuda/whole_net_plan.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <span>
#include <variant>

#include "core/half.h"
#include "core/infer/nn_geometry.h"
#include "core/layout.h"
#include "core/op_kind.h"
#include "runtime/engine_impl.h"

namespace kiln::gpu {

namespace {

using detail::EngineImpl;
using detail::StepRec;
using detail::TensorKind;
using detail::TensorRec;

// A refusal inside the walk: carries the reason up to plan_whole_network.
struct Refusal {
  std::string why;
};
[[noreturn]] void refuse(std::string why) { throw Refusal{std::move(why)}; }

bool is_float(DataType t) { return t == DataType::kFloat32 || t == DataType::kFloat16 || t == DataType::kBFloat16; }

int64_t numel(const TensorRec& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return n;
}

size_t round16(size_t bytes) { return (bytes + 15) / 16 * 16; }

constexpr int64_t kMaxSampleBytes = int64_t{1} << 24;

std::string kib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024.0);
  return buf;
}

struct Walk {
  const EngineImpl& e;
  const StepRec* step = nullptr;

  const TensorRec& tensor(size_t i) const { return e.tensors[static_cast<size_t>(step->inputs[i])]; }
  bool has(size_t i) const { return i < step->inputs.size() && step->inputs[i] >= 0; }
  const TensorRec& x() const { return tensor(0); }
  const TensorRec& y() const { return e.tensors[static_cast<size_t>(step->outputs[0])]; }

  // Input i, which must be a constant of the engine (a weight).
  const TensorRec& weight(size_t i, const char* what) const {
    if (!has(i)) refuse(std::string(what) + " is missing");
    const TensorRec& t = tensor(i);
    if (t.kind != TensorKind::kWeight) refuse(std::string(what) + " '" + t.name + "' is not a constant");
    return t;
  }
  void no_input(size_t i, const char* what) const {
    if (has(i)) refuse(std::string("it has ") + what);
  }
  // A float value of a one-element constant, as the CPU kernel reads it.
  float scalar(const TensorRec& t) const {
    const uint8_t* p = e.weight_data(t);
    switch (t.dtype) {
      case DataType::kFloat32: {
        float f;
        std::memcpy(&f, p, 4);
        return f;
      }
      case DataType::kFloat16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        return Half::to_float(h);
      }
      case DataType::kBFloat16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
      }
      default: refuse("a bound of type " + std::string(dtype_name(t.dtype)));
    }
  }
};

void set_epilogue(WnLayer& l, const EpilogueAttrs& ep) {
  if (ep.activation2 != Activation::kNone) refuse("a second activation (after a residual)");
  l.act = ep.activation;
  l.act_alpha = ep.activation_alpha;
  l.act_beta = ep.activation_beta;
}

void set_window(WnLayer& l, const nn::WindowGeometry& g) {
  if (g.rank() != 2) refuse("it is not 2-D");
  l.h = static_cast<int32_t>(g.in[0]);
  l.w = static_cast<int32_t>(g.in[1]);
  l.oh = static_cast<int32_t>(g.out[0]);
  l.ow = static_cast<int32_t>(g.out[1]);
  l.kh = static_cast<int32_t>(g.kernel[0]);
  l.kw = static_cast<int32_t>(g.kernel[1]);
  l.sh = static_cast<int32_t>(g.strides[0]);
  l.sw = static_cast<int32_t>(g.strides[1]);
  l.dh = static_cast<int32_t>(g.dilations[0]);
  l.dw = static_cast<int32_t>(g.dilations[1]);
  l.ph = static_cast<int32_t>(g.pads[0]);
  l.pw = static_cast<int32_t>(g.pads[1]);
  l.ph_end = static_cast<int32_t>(g.pads[2]);
  l.pw_end = static_cast<int32_t>(g.pads[3]);
}

// Conv, FusedConv, NhwcConv: X, W, optional B; no residual Z, no quantized output, no channels-first X.
WnLayer conv_layer(const Walk& s) {
  WnLayer l;
  l.op = WnOp::kConv;
  l.nhwc = s.step->kind == OpKind::kNhwcConv;
  const TensorRec& w = s.weight(1, "the weight W");
  if (s.x().shape.size() != 4 || w.shape.size() != 4) refuse("it is not 2-D");
  s.no_input(3, "a residual input");
  s.no_input(4, "a quantized output");
  const auto& ca = s.step->kind == OpKind::kConv
                       ? std::get<ConvAttrs>(s.step->attrs)
                       : static_cast<const ConvAttrs&>(std::get<FusedConvAttrs>(s.step->attrs));
  if (s.step->kind != OpKind::kConv) set_epilogue(l, std::get<FusedConvAttrs>(s.step->attrs));
  if (l.nhwc && std::get<FusedConvAttrs>(s.step->attrs).x_channels_first) refuse("it reads a channels-first input");
  const std::vector<int64_t> xs = l.nhwc ? channels_first_shape(s.x().shape) : s.x().shape;
  const std::vector<int64_t> ws = l.nhwc ? channels_first_shape(w.shape) : w.shape;
  set_window(l, nn::conv_geometry(ca, xs, ws));
  l.c = static_cast<int32_t>(xs[1]);
  l.m = static_cast<int32_t>(ws[0]);
  l.groups = static_cast<int32_t>(ca.group);
  l.w_tensor = s.step->inputs[1];
  if (s.has(2)) {
    const TensorRec& b = s.weight(2, "the bias B");
    if (numel(b) != l.m) refuse("its bias is not one value per output channel");
    l.b_tensor = s.step->inputs[2];
  }
  return l;
}

// MaxPool, AveragePool and their channels-last twins; GlobalMaxPool, GlobalAveragePool.
WnLayer pool_layer(const Walk& s) {
  WnLayer l;
  l.op = WnOp::kPool;
  const OpKind k = s.step->kind;
  l.nhwc = k == OpKind::kNhwcMaxPool || k == OpKind::kNhwcAveragePool;
  if (s.x().shape.size() != 4) refuse("it is not 2-D");
  if (s.step->outputs.size() > 1 && s.step->outputs[1] >= 0) refuse("its Indices output is used");
  const std::vector<int64_t> xs = l.nhwc ? channels_first_shape(s.x().shape) : s.x().shape;
  l.c = l.m = static_cast<int32_t>(xs[1]);
  if (k == OpKind::kGlobalMaxPool || k == OpKind::kGlobalAveragePool) {
    l.pool = k == OpKind::kGlobalMaxPool ? WnPool::kGlobalMax : WnPool::kGlobalAverage;
    l.h = l.kh = static_cast<int32_t>(xs[2]);
    l.w = l.kw = static_cast<int32_t>(xs[3]);
    return l;
  }
  const auto& pa = std::get<PoolAttrs>(s.step->attrs);
  l.pool = k == OpKind::kMaxPool || k == OpKind::kNhwcMaxPool ? WnPool::kMax : WnPool::kAverage;
  l.count_include_pad = pa.count_include_pad == 1;
  set_window(l, nn::pool_geometry(pa, xs));
  return l;
}

// ReduceMean / ReduceMax over the two spatial axes of [N, C, H, W] or [N, H, W, C] (how the
// channels-last pass writes GlobalAveragePool / GlobalMaxPool): a global pool.
WnLayer reduce_layer(const Walk& s) {
  WnLayer l;
  l.op = WnOp::kPool;
  l.pool = s.step->kind == OpKind::kReduceMax ? WnPool::kGlobalMax : WnPool::kGlobalAverage;
  const std::vector<int64_t>& xs = s.x().shape;
  if (xs.size() != 4) refuse("its input is not 4-D");
  const TensorRec& axes = s.weight(1, "the axes");
  if (axes.dtype != DataType::kInt64 || numel(axes) != 2) refuse("it does not reduce two axes");
  int64_t a[2];
  std::memcpy(a, s.e.weight_data(axes), sizeof a);
  for (int64_t& v : a) v = v < 0 ? v + 4 : v;
  if (std::min(a[0], a[1]) == 1 && std::max(a[0], a[1]) == 2) {
    l.nhwc = true;
    l.c = l.m = static_cast<int32_t>(xs[3]);
    l.h = l.kh = static_cast<int32_t>(xs[1]);
    l.w = l.kw = static_cast<int32_t>(xs[2]);
  } else if (std::min(a[0], a[1]) == 2 && std::max(a[0], a[1]) == 3) {
    l.c = l.m = static_cast<int32_t>(xs[1]);
    l.h = l.kh = static_cast<int32_t>(xs[2]);
    l.w = l.kw = static_cast<int32_t>(xs[3]);
  } else {
    refuse("it does not reduce the spatial axes");
  }
  return l;
}

// Gemm, FusedGemm, MatMul, FusedMatMul with a 2-D A [N, K] (the activation) and a constant B.
WnLayer dense_layer(const Walk& s) {
  WnLayer l;
  l.op = WnOp::kDense;
  const OpKind k = s.step->kind;
  const TensorRec& b = s.weight(1, "B");
  if (s.x().shape.size() != 2 || b.shape.size() != 2 || s.y().shape.size() != 2) refuse("it is not 2-D");
  s.no_input(3, "a residual input");
  l.c = static_cast<int32_t>(s.x().shape[1]);
  l.m = static_cast<int32_t>(s.y().shape[1]);
  l.w_tensor = s.step->inputs[1];
  if (k == OpKind::kGemm || k == OpKind::kFusedGemm) {
    const auto& ga = k == OpKind::kGemm ? std::get<GemmAttrs>(s.step->attrs)
                                        : static_cast<const GemmAttrs&>(std::get<FusedGemmAttrs>(s.step->attrs));
    if (k == OpKind::kFusedGemm) set_epilogue(l, std::get<FusedGemmAttrs>(s.step->attrs));
    if (ga.transA != 0) refuse("transA is set (the batch is not the rows of A)");
    l.trans_b = ga.transB != 0;
    l.alpha = ga.alpha;
    // The CPU kernel leaves C out when beta is 0 (then NaN or Inf in C do not show either).
    if (s.has(2) && ga.beta != 0.0f) {
      const TensorRec& c = s.weight(2, "C");
      if (c.shape.size() > 2) refuse("C has more than 2 dims");
      // C broadcast to [N, M] as the CPU kernel does: element (n, j) at (rows == 1 ? 0 : n) * cols + (cols == 1 ? 0 :
      // j).
      const int64_t rows = c.shape.size() == 2 ? c.shape[0] : 1, cols = c.shape.empty() ? 1 : c.shape.back();
      l.beta = ga.beta;
      l.bias_row = rows == 1 ? 0 : static_cast<int32_t>(cols);
      l.bias_col = cols == 1 ? 0 : 1;
      l.b_tensor = s.step->inputs[2];
    }
    return l;
  }
  if (k == OpKind::kFusedMatMul) {
    set_epilogue(l, std::get<EpilogueAttrs>(s.step->attrs));
    if (s.has(2)) {
      const TensorRec& bias = s.weight(2, "the bias");
      if (numel(bias) != l.m && numel(bias) != 1) refuse("its bias is not one value per column");
      l.beta = 1.0f;
      l.bias_col = numel(bias) == 1 ? 0 : 1;
      l.b_tensor = s.step->inputs[2];
    }
  }
  return l;
}

// The activations as ops (core/epilogue.h computes each by the CPU kernel's formula), Cast between
// float types, and the copies that views usually make free.
WnLayer unary_layer(const Walk& s) {
  WnLayer l;
  l.op = WnOp::kUnary;
  switch (s.step->kind) {
    case OpKind::kRelu: l.act = Activation::kRelu; break;
    case OpKind::kSigmoid: l.act = Activation::kSigmoid; break;
    case OpKind::kTanh: l.act = Activation::kTanh; break;
    case OpKind::kHardSwish: l.act = Activation::kHardSwish; break;
    case OpKind::kLeakyRelu:
      l.act = Activation::kLeakyRelu;
      l.act_alpha = std::get<AlphaAttrs>(s.step->attrs).alpha;
      break;
    case OpKind::kHardSigmoid:
      l.act = Activation::kHardSigmoid;
      l.act_alpha = std::get<HardSigmoidAttrs>(s.step->attrs).alpha;
      l.act_beta = std::get<HardSigmoidAttrs>(s.step->attrs).beta;
      break;
    case OpKind::kGelu:
      l.act = std::get<GeluAttrs>(s.step->attrs).approximate == GeluApproximation::kTanh ? Activation::kGeluTanh
                                                                                         : Activation::kGelu;
      break;
    case OpKind::kClip: {
      // Bounds that are absent (or not one element, which the CPU kernel ignores too) are -inf / inf.
      l.act = Activation::kClip;
      l.act_alpha = -std::numeric_limits<float>::infinity();
      l.act_beta = std::numeric_limits<float>::infinity();
      if (s.has(1) && numel(s.tensor(1)) == 1) l.act_alpha = s.scalar(s.weight(1, "Clip's min"));
      if (s.has(2) && numel(s.tensor(2)) == 1) l.act_beta = s.scalar(s.weight(2, "Clip's max"));
      break;
    }
    case OpKind::kCast:
      if (std::get<CastAttrs>(s.step->attrs).to != s.y().dtype) refuse("its type does not match its output");
      break;
    default: break;  // Identity, Reshape, Flatten, Squeeze, Unsqueeze: a copy; their shape inputs are constants
  }
  return l;
}

// Transpose of [N, d1, ..., dr] that keeps N first: a permutation of the per-sample axes.
WnLayer transpose_layer(const Walk& s) {
  WnLayer l;
  l.op = WnOp::kTranspose;
  const size_t r = s.x().shape.size();
  std::vector<int64_t> perm = std::get<TransposeAttrs>(s.step->attrs).perm;
  if (perm.empty())
    for (size_t i = 0; i < r; ++i) perm.push_back(static_cast<int64_t>(r - 1 - i));
  if (perm.size() != r || perm[0] != 0) refuse("it moves the batch axis");
  if (r > 5) refuse("it has more than 4 axes per sample");
  const size_t pad = 4 - (r - 1);
  for (size_t i = 0; i + 1 < r; ++i) {
    l.dims[pad + i] = static_cast<int32_t>(s.x().shape[i + 1]);
    l.perm[pad + i] = static_cast<int32_t>(pad + static_cast<size_t>(perm[i + 1]) - 1);
  }
  return l;
}

struct Builder {
  OpKind kind;
  WnLayer (*make)(const Walk&);
};
constexpr Builder kBuilders[] = {
    {OpKind::kConv, conv_layer},
    {OpKind::kFusedConv, conv_layer},
    {OpKind::kNhwcConv, conv_layer},
    {OpKind::kMaxPool, pool_layer},
    {OpKind::kAveragePool, pool_layer},
    {OpKind::kNhwcMaxPool, pool_layer},
    {OpKind::kNhwcAveragePool, pool_layer},
    {OpKind::kGlobalMaxPool, pool_layer},
    {OpKind::kGlobalAveragePool, pool_layer},
    {OpKind::kReduceMax, reduce_layer},
    {OpKind::kReduceMean, reduce_layer},
    {OpKind::kGemm, dense_layer},
    {OpKind::kFusedGemm, dense_layer},
    {OpKind::kMatMul, dense_layer},
    {OpKind::kFusedMatMul, dense_layer},
    {OpKind::kRelu, unary_layer},
    {OpKind::kLeakyRelu, unary_layer},
    {OpKind::kClip, unary_layer},
    {OpKind::kSigmoid, unary_layer},
    {OpKind::kTanh, unary_layer},
    {OpKind::kHardSigmoid, unary_layer},
    {OpKind::kHardSwish, unary_layer},
    {OpKind::kGelu, unary_layer},
    {OpKind::kCast, unary_layer},
    {OpKind::kIdentity, unary_layer},
    {OpKind::kReshape, unary_layer},
    {OpKind::kFlatten, unary_layer},
    {OpKind::kSqueeze, unary_layer},
    {OpKind::kUnsqueeze, unary_layer},
    {OpKind::kTranspose, transpose_layer},
};

// Step k reads `cur` (the previous output, or the engine input) as its first input: the tensor
// itself, or a view of it at offset 0 with the same bytes (a Flatten between two steps).
bool reads(const EngineImpl& e, int32_t x, int32_t cur) {
  if (x == cur) return true;
  if (x < 0) return false;
  const TensorRec &t = e.tensors[static_cast<size_t>(x)], &c = e.tensors[static_cast<size_t>(cur)];
  return t.base == cur && t.offset == 0 && t.bytes == c.bytes && t.dtype == c.dtype;
}

// The layers of e, or a refusal; shared memory is laid out afterwards.
std::vector<WnLayer> walk_steps(const EngineImpl& e, int64_t batch) {
  if (e.steps.empty()) refuse("the engine has no steps");
  std::vector<WnLayer> layers;
  int32_t cur = e.input_ids[0];
  auto check_tensor = [&](const TensorRec& t) {
    if (!is_float(t.dtype)) refuse("tensor '" + t.name + "' is " + std::string(dtype_name(t.dtype)));
    if (t.shape.size() < 2 || t.shape[0] != batch)
      refuse("tensor '" + t.name + "' " + shape_string(t.shape) + " does not keep the batch axis first");
    if (numel(t) == 0) refuse("tensor '" + t.name + "' is empty");
    // Beyond any GPU's shared memory; also keeps the per-sample counts well inside int32.
    if (numel(t) / batch * static_cast<int64_t>(dtype_size(t.dtype)) > kMaxSampleBytes)
      refuse("tensor '" + t.name + "' " + shape_string(t.shape) + " is too large for shared memory");
  };
  for (const StepRec& st : e.steps) {
    const std::string where = detail::step_name(st) + ": ";
    try {
      const Builder* b = nullptr;
      for (const Builder& c : kBuilders)
        if (c.kind == st.kind) b = &c;
      if (!b) refuse("no whole-network layer for this op");
      if (st.inputs.empty() || !reads(e, st.inputs[0], cur)) refuse("it does not read the previous step's output");
      for (size_t i = 1; i < st.inputs.size(); ++i)
        if (st.inputs[i] >= 0 && e.tensors[static_cast<size_t>(st.inputs[i])].kind != TensorKind::kWeight)
          refuse("its input " + std::to_string(i) + " is not a constant");
      if (st.outputs.empty() || st.outputs[0] < 0) refuse("it has no output");
      for (size_t i = 1; i < st.outputs.size(); ++i)
        if (st.outputs[i] >= 0) refuse("it has a second output");
      const TensorRec& x = e.tensors[static_cast<size_t>(st.inputs[0])];
      const TensorRec& y = e.tensors[static_cast<size_t>(st.outputs[0])];
      if (y.base >= 0) refuse("its output lies in another tensor's memory");
      check_tensor(x);
      check_tensor(y);
      Walk w{e, &st};
      WnLayer l = b->make(w);
      l.in_dtype = x.dtype;
      l.out_dtype = y.dtype;
      if (l.op != WnOp::kUnary && x.dtype != y.dtype) refuse("its input and output types differ");
      l.in_elems = static_cast<int32_t>(numel(x) / batch);
      l.out_elems = static_cast<int32_t>(numel(y) / batch);
      if (l.op == WnOp::kUnary && l.in_elems != l.out_elems) refuse("its output has another size");
      for (int32_t t : {l.w_tensor, l.b_tensor})
        if (t >= 0 && e.tensors[static_cast<size_t>(t)].dtype != x.dtype) refuse("its constants have another type");
      layers.push_back(l);
    } catch (const Refusal& r) {
      refuse(where + r.why);
    } catch (const Error& err) {  // geometry the engine check let through but the layer cannot take
      refuse(where + err.what());
    }
    cur = st.outputs[0];
  }
  if (cur != e.output_ids[0]) refuse("the last step does not write the engine output");
  return layers;
}

}  // namespace

std::string WholeNetPlan::describe() const {
  if (!eligible()) return "not used: " + refusal;
  return std::to_string(layers.size()) + " layers in one kernel, " + kib(smem_bytes) + " of shared memory per sample";
}

WholeNetPlan plan_whole_network(const EngineImpl& e, size_t max_smem_bytes) {
  WholeNetPlan p;
  try {
    if (e.input_ids.size() != 1 || e.output_ids.size() != 1) refuse("the engine has more than one input or output");
    const TensorRec& in = e.tensors[static_cast<size_t>(e.input_ids[0])];
    p.batch = in.shape.empty() ? 0 : in.shape[0];
    if (p.batch < 1 || p.batch > kWholeNetMaxBatch)
      refuse("batch " + std::to_string(p.batch) + " (the kernel takes 1 to " + std::to_string(kWholeNetMaxBatch) + ")");
    p.layers = walk_steps(e, p.batch);
  } catch (const Refusal& r) {
    p.refusal = r.why;
    p.layers.clear();
    return p;
  }
  // One region; layer i reads at one end and writes at the other (the last layer writes global memory).
  auto bytes = [](int32_t elems, DataType t) { return round16(static_cast<size_t>(elems) * dtype_size(t)); };
  size_t region = 0;
  bool dense_scratch = false;
  for (size_t i = 0; i < p.layers.size(); ++i) {
    const WnLayer& l = p.layers[i];
    const bool last = i + 1 == p.layers.size();
    region = std::max(region, bytes(l.in_elems, l.in_dtype) + (last ? 0 : bytes(l.out_elems, l.out_dtype)));
    dense_scratch |= l.op == WnOp::kDense && !l.trans_b;
  }
  bool low = true;  // the side the layer's input lies on
  for (size_t i = 0; i < p.layers.size(); ++i) {
    WnLayer& l = p.layers[i];
    const bool last = i + 1 == p.layers.size();
    l.in_off = static_cast<uint32_t>(low ? 0 : region - bytes(l.in_elems, l.in_dtype));
    l.out_off = static_cast<uint32_t>(low && !last ? region - bytes(l.out_elems, l.out_dtype) : 0);
    low = !low;
  }
  // After the region: the dense layers' partial sums, then the copy of the layer being run.
  p.scratch_off = static_cast<uint32_t>(region);
  p.layer_off = static_cast<uint32_t>(region + (dense_scratch ? kWholeNetThreads * sizeof(float) : 0));
  p.smem_bytes = p.layer_off + round16(sizeof(WnLayer));
  const WnLayer& first = p.layers.front();
  p.in_bytes = static_cast<int32_t>(static_cast<size_t>(first.in_elems) * dtype_size(first.in_dtype));
  p.out_elems = p.layers.back().out_elems;
  if (p.smem_bytes > max_smem_bytes) {
    p.refusal = "the activations need " + kib(p.smem_bytes) + " of shared memory per sample, more than the " +
                kib(max_smem_bytes) + " a block can have";
    p.layers.clear();
  }
  return p;
}

}  // namespace kiln::gpu
