// NhwcQConv on the GPU: the channels-last INT8 convolution the channels-last pass makes for the
// shapes the GPU's INT8 kernels take (passes/channels_last.cpp, qconv_fits_nhwc): int8 data and
// weights with zero points 0, one group or depthwise (group = C = M), channel counts that are
// multiples of 4. A depthwise step runs Kiln's direct depthwise kernel (quant/conv/depthwise/depthwise.cu: float32
// outputs bit-exact with the CPU, int8 ones within a step at ties), whatever its tactic (it offers
// one, kDepthwiseTactic); everything below is about convolutions of one group.
//
// One cuDNN graph (cudnn_graph.cuh) per step computes the whole op in one kernel:
//   acc = conv(x, w)                 int32 sums
//   v   = acc * w_scale[m] * x_scale (+ bias[m]) (+ z * z_scale, or + z for a float32 z)
//   v   = relu / clip(v)             (when the op has an activation)
//   y   = int8(v * (1 / y_scale))    (or v, for a float32 output)
// Scalars go by value, per-channel arrays are the engine's device constants. Each engine
// configuration cuDNN offers is a tactic the builder times. cuDNN's float arithmetic rounds in its own
// order (and may fuse multiply-adds), so results may differ from the CPU kernel's by one
// quantization step at rounding ties, unlike kiln.QConv's bit-exact kernels.
// Kiln's own tensor-core kernel (quant/conv/igemm/igemm.cu: an implicit GEMM, rounding like cuDNN) is timed
// next to cuDNN's plans where the channels are multiples of 64, one tactic per tile shape; it wins
// where cuDNN's residual epilogue is slow (ResNet-50's stage-1 and stage-2 block ends on an H100).
// So is the streaming kernel (quant/conv/stream/stream.cu, rounding the same way) for 1x1 layers (any stride) with
// 64 to 512 input channels and an int8 output, the memory-bound ones, and on Hopper the 3x3
// window kernel (quant/conv/halo/halo.cuh, the same epilogue) for 3x3 stride-1 layers with pads of 1, 64 or
// 128 input channels and a multiple of 64 output channels.
// Where cuDNN has no engine for a step (older GPUs, unusual shapes), a direct kernel (one thread per
// output, exact integer sums, the CPU's epilogue) computes it instead. Tactic kDirectTactic asks for
// it too (the tests do, to reach it on any GPU); the builder never times it, it is never faster.
#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>

#include "core/infer/nn_geometry.h"
#include "core/layout.h"
#include "runtime/cuda/quant/conv/cudnn_graph.cuh"
#include "runtime/cuda/quant/quant_internal.cuh"
#include "runtime/cuda/nn_internal.cuh"
#include "runtime/cuda/quant/conv/depthwise/depthwise.cuh"
#include "runtime/cuda/quant/conv/halo/halo.cuh"
#include "runtime/cuda/quant/conv/igemm/igemm.cuh"
#include "runtime/cuda/quant/conv/stream/stream.cuh"
#include "runtime/qfused_math.h"

namespace kiln::gpu::quant {

namespace {

namespace cg = cudnn_graph;

constexpr int32_t kDirectTactic = 1000;
constexpr int32_t kIgemmTactic = 2000;   // 2000 + i: the tensor-core kernel's tile shape i
constexpr int32_t kStreamTactic = 2100;  // 2100 + i: the streaming 1x1 kernel's tile shape i
constexpr int32_t kHaloTactic = 2200;    // 2200 + i: the 3x3 window kernel's tile shape i
constexpr int32_t kDepthwiseTactic = 3000;

// The largest workspace a candidate plan may ask for.
constexpr size_t kMaxGraphWorkspace = size_t{256} << 20;

// Geometry in cuDNN's order: dims [N, C, H, W] for x and y, [M, C, kh, kw] for w.
struct Shapes {
  std::vector<int64_t> x, w, y;
  cg::ConvGeometry g;
};

Shapes shapes_of(const QConvAttrs& a, const TensorView& X, const TensorView& W, const TensorView& Y) {
  if (X.rank() != 4 || W.rank() != 4 || Y.rank() != 4)
    throw Error("NhwcQConv: the CUDA backend takes 2-D convolutions only");
  Shapes s;
  s.x = channels_first_shape(X.shape);
  s.w = channels_first_shape(W.shape);
  s.y = channels_first_shape(Y.shape);
  const kiln::nn::WindowGeometry geo = kiln::nn::conv_geometry(a.conv(), s.x, s.w);
  s.g.pads_begin = {geo.pads[0], geo.pads[1]};
  s.g.pads_end = {geo.pads[2], geo.pads[3]};
  s.g.strides = {geo.strides[0], geo.strides[1]};
  s.g.dilations = {geo.dilations[0], geo.dilations[1]};
  return s;
}

int64_t align_of(const void* ptr) {
  const auto v = reinterpret_cast<uintptr_t>(ptr);
  int64_t al = 16;
  while (al > 1 && v % static_cast<uintptr_t>(al) != 0) al /= 2;
  return al;
}

// The cuDNN graph of one shape, shared by every step with that shape on one device (its candidate
// plans, finalized when first used, may compile kernels): the descriptors it was made from, the
// graph (null: cuDNN has none, the direct kernel runs) and the tensors it reads and writes, by id.
struct Built {
  std::deque<cg::Desc> keep;
  std::unique_ptr<cg::Graph> graph;
  std::vector<int64_t> uids;
};

struct Plan final : StepState {
  std::vector<int64_t> key;
  Shapes shapes;
  std::shared_ptr<const Built> built;
  float x_scale = 1, z_scale = 1, inv_y_scale = 1;  // the by-value scalars
};

// What the graph depends on: shapes, the convolution's attributes (the geometry follows from them
// and the shapes), types, which inputs are present, the activation and its bounds, and the data
// pointers' alignment. Computed on every call (the step's plan is kept while the key holds).
std::vector<int64_t> plan_key(const QConvAttrs& a, std::span<const TensorView> in, std::span<const TensorView> out) {
  std::vector<int64_t> k{static_cast<int64_t>(a.activation), static_cast<int64_t>(out[0].dtype), a.group,
                         static_cast<int64_t>(a.auto_pad)};
  for (const std::vector<int64_t>* v : {&a.pads, &a.strides, &a.dilations, &a.kernel_shape}) {
    k.push_back(-1);  // separates the lists, which may be empty
    k.insert(k.end(), v->begin(), v->end());
  }
  int32_t bits[2];
  std::memcpy(&bits[0], &a.act_alpha, 4);
  std::memcpy(&bits[1], &a.act_beta, 4);
  k.insert(k.end(), {bits[0], bits[1]});
  for (size_t i = 0; i < 12; ++i) k.push_back(present(in, i) ? in[i].numel() : -1);
  k.push_back(present(in, 9) ? static_cast<int64_t>(in[9].dtype) : -1);
  for (const TensorView* t : {&in[0], &in[3], &out[0]}) k.insert(k.end(), t->shape.begin(), t->shape.end());
  k.insert(k.end(), {align_of(in[0].data), align_of(in[3].data), align_of(out[0].data)});
  if (present(in, 9)) k.push_back(align_of(in[9].data));
  return k;
}

std::shared_ptr<Built> make_graph(const QConvAttrs& a, std::span<const TensorView> in, std::span<const TensorView> out,
                                  const Shapes& s, cudnnHandle_t handle) {
  auto b = std::make_shared<Built>();
  const bool bias = present(in, 6), quantize = present(in, 7), residual = present(in, 9);
  const int64_t M = s.w[0];
  const std::vector<int64_t> one{1, 1, 1, 1}, chan{1, M, 1, 1};
  const std::vector<int64_t> ys = cg::channels_last_strides(s.y);
  try {
    std::deque<cg::Desc>& keep = b->keep;
    auto add = [&](cg::Desc d) -> const cg::Desc& {
      keep.push_back(std::move(d));
      return keep.back();
    };
    int64_t next_virtual = 1000;
    auto virt = [&]() -> const cg::Desc& { return add(cg::tensor(next_virtual++, CUDNN_DATA_FLOAT, s.y, ys, true)); };
    auto by_value = [&](int64_t uid) -> const cg::Desc& {
      cg::Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
      const cudnnDataType_t f = CUDNN_DATA_FLOAT;
      const int64_t al = 4;
      const bool yes = true;
      t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f);
      t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, one.data());
      t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, one.data());
      t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
      t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &al);
      t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
      t.finalize("NhwcQConv: a scalar");
      return add(std::move(t));
    };
    const cg::Desc& x =
        add(cg::tensor('x', CUDNN_DATA_INT8, s.x, cg::channels_last_strides(s.x), false, align_of(in[0].data)));
    const cg::Desc& w =
        add(cg::tensor('w', CUDNN_DATA_INT8, s.w, cg::channels_last_strides(s.w), false, align_of(in[3].data)));
    const std::vector<int64_t>& ws_dims = in[4].numel() == 1 ? one : chan;
    const cg::Desc& wsc = add(cg::tensor('s', CUDNN_DATA_FLOAT, ws_dims, cg::channels_last_strides(ws_dims), false, 4));
    const cg::Desc& xsc = by_value('q');
    b->uids = {'x', 'w', 's', 'q', 'y'};
    // The chain of pointwise operations after the convolution; the last one writes y.
    struct Step {
      cudnnPointwiseMode_t mode;
      const cg::Desc* operand;  // null: the activation
    };
    std::vector<Step> steps{{CUDNN_POINTWISE_MUL, &wsc}, {CUDNN_POINTWISE_MUL, &xsc}};
    if (bias) {
      steps.push_back({CUDNN_POINTWISE_ADD,
                       &add(cg::tensor('b', CUDNN_DATA_FLOAT, chan, cg::channels_last_strides(chan), false, 4))});
      b->uids.push_back('b');
    }
    const cg::Desc* zf = nullptr;
    std::vector<const cg::Desc*> ops;
    if (residual && in[9].dtype == DataType::kFloat32) {
      steps.push_back(
          {CUDNN_POINTWISE_ADD, &add(cg::tensor('z', CUDNN_DATA_FLOAT, s.y, ys, false, align_of(in[9].data)))});
      b->uids.push_back('z');
    } else if (residual) {
      const cg::Desc& z = add(cg::tensor('z', CUDNN_DATA_INT8, s.y, ys, false, align_of(in[9].data)));
      zf = &virt();
      ops.push_back(&add(cg::pointwise(CUDNN_POINTWISE_MUL, z, &by_value('r'), *zf)));
      steps.push_back({CUDNN_POINTWISE_ADD, zf});
      b->uids.push_back('z');
      b->uids.push_back('r');
    }
    if (a.activation != QActivation::kNone) steps.push_back({CUDNN_POINTWISE_RELU_FWD, nullptr});
    if (quantize) {
      steps.push_back({CUDNN_POINTWISE_MUL, &by_value('o')});
      b->uids.push_back('o');
    }
    const cg::Desc& y =
        add(cg::tensor('y', quantize ? CUDNN_DATA_INT8 : CUDNN_DATA_FLOAT, s.y, ys, false, align_of(out[0].data)));
    const cg::Desc* cur = &virt();
    ops.insert(ops.begin(), &add(cg::conv_forward(x, w, *cur, s.g, CUDNN_DATA_INT32)));
    for (size_t i = 0; i < steps.size(); ++i) {
      const cg::Desc& to = i + 1 == steps.size() ? y : virt();
      if (steps[i].operand)
        ops.push_back(&add(cg::pointwise(steps[i].mode, *cur, steps[i].operand, to)));
      else if (a.activation == QActivation::kClip)
        ops.push_back(&add(cg::relu(*cur, to, a.act_alpha, a.act_beta)));
      else
        ops.push_back(&add(cg::relu(*cur, to, 0, std::nullopt)));
      cur = &to;
    }
    b->graph = std::make_unique<cg::Graph>(handle, ops, kMaxGraphWorkspace, "NhwcQConv");
  } catch (const Error& e) {
    b->graph.reset();  // the direct kernel runs (cuDNN has no engine for this graph on this GPU)
  }
  return b;
}

std::unique_ptr<Plan> build_plan(const QConvAttrs& a, std::span<const TensorView> in, std::span<const TensorView> out,
                                 GpuEnv& env) {
  auto p = std::make_unique<Plan>();
  p->key = plan_key(a, in, out);
  p->shapes = shapes_of(a, in[0], in[3], out[0]);
  p->x_scale = host_float(env, 1, "NhwcQConv");
  if (present(in, 7)) p->inv_y_scale = 1.0f / host_float(env, 7, "NhwcQConv");
  if (present(in, 9) && present(in, 10)) p->z_scale = host_float(env, 10, "NhwcQConv");
  static auto* graphs = new cg::GraphCache<Built>("NhwcQConv");  // never freed (cudnn_graph.cuh)
  p->built = graphs->get(p->key, [&](cudnnHandle_t h) { return make_graph(a, in, out, p->shapes, h); });
  return p;
}

Plan& plan_for(const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out, GpuEnv& env,
               std::unique_ptr<Plan>& local) {
  const auto& a = std::get<QConvAttrs>(attrs);
  return nn::step_plan<Plan>(env, plan_key(a, in, out), local, [&] { return build_plan(a, in, out, env); });
}

// The operands and epilogue of one call, for the direct, tensor-core and depthwise kernels.
QConvNhwcArgs args_of(const Shapes& s, const QConvAttrs& a, std::span<const TensorView> in,
                      std::span<const TensorView> out, const GpuEnv& env) {
  const float x_scale = host_float(env, 1, "NhwcQConv");
  QConvNhwcArgs d{s.x[0],
                  s.x[2],
                  s.x[3],
                  s.x[1],
                  s.w[0],
                  s.y[2],
                  s.y[3],
                  s.w[2],
                  s.w[3],
                  s.g.strides[0],
                  s.g.strides[1],
                  s.g.pads_begin[0],
                  s.g.pads_begin[1],
                  s.g.dilations[0],
                  s.g.dilations[1],
                  static_cast<const int8_t*>(in[0].data),
                  static_cast<const int8_t*>(in[3].data),
                  out[0].data,
                  static_cast<const float*>(in[4].data),
                  in[4].numel() != 1,
                  present(in, 6) ? static_cast<const float*>(in[6].data) : nullptr,
                  x_scale,
                  present(in, 9) ? in[9].data : nullptr,
                  present(in, 9) && in[9].dtype == DataType::kFloat32,
                  {}};
  d.epi.act = static_cast<int>(a.activation);
  d.epi.act_alpha = a.act_alpha;
  d.epi.act_beta = a.act_beta;
  d.epi.quantize = present(in, 7);
  if (present(in, 9) && present(in, 10)) d.epi.z_scale = host_float(env, 10, "NhwcQConv");
  if (d.epi.quantize) d.epi.y_scale = host_float(env, 7, "NhwcQConv");
  return d;
}

// The direct kernel: y[n][oh][ow][m], one thread each.
__global__ void qconv_nhwc_direct_kernel(QConvNhwcArgs d) {
  const int64_t total = d.N * d.OH * d.OW * d.M;
  for (int64_t e = ew::global_thread(); e < total; e += ew::grid_threads()) {
    const int64_t m = e % d.M, ow = (e / d.M) % d.OW, oh = (e / (d.M * d.OW)) % d.OH, n = e / (d.M * d.OW * d.OH);
    uint32_t acc = 0;
    for (int64_t kh = 0; kh < d.KH; ++kh) {
      const int64_t ih = oh * d.sh - d.ph + kh * d.dh;
      if (ih < 0 || ih >= d.H) continue;
      for (int64_t kw = 0; kw < d.KW; ++kw) {
        const int64_t iw = ow * d.sw - d.pw + kw * d.dw;
        if (iw < 0 || iw >= d.W) continue;
        const int8_t* xp = d.x + ((n * d.H + ih) * d.W + iw) * d.C;
        const int8_t* wp = d.w + ((m * d.KH + kh) * d.KW + kw) * d.C;
        for (int64_t c = 0; c < d.C; ++c) acc += static_cast<uint32_t>(int32_t{xp[c]} * int32_t{wp[c]});
      }
    }
    const float alpha = qfused::mul_rn(d.x_scale, d.w_scale[d.w_scale_per_channel ? m : 0]);
    float v = qfused::Epilogue::real(acc, alpha, d.bias ? d.bias[m] : 0.0f);
    if (d.z)
      v = d.z_float ? qfused::add_rn(v, static_cast<const float*>(d.z)[e])
                    : d.epi.plus_residual(v, int32_t{static_cast<const int8_t*>(d.z)[e]});
    v = d.epi.activate(v);
    if (d.epi.quantize)
      static_cast<int8_t*>(d.y)[e] = static_cast<int8_t>(d.epi.quantized(v));
    else
      static_cast<float*>(d.y)[e] = v;
  }
}

void run_direct(const QConvNhwcArgs& d, GpuEnv& env) {
  const int64_t total = d.N * d.OH * d.OW * d.M;
  qconv_nhwc_direct_kernel<<<ew::blocks_for(total), ew::kThreads, 0, env.stream>>>(d);
  check_launch("NhwcQConv");
}

// A depthwise convolution: group = C = M, w [C, KH, KW, 1] (x and w of rank 4).
bool depthwise(const QConvAttrs& a, std::span<const TensorView> in) {
  return a.group != 1 && a.group == in[0].shape[3] && a.group == in[3].shape[0] && in[3].shape[3] == 1;
}

// What the channels-last pass guarantees (qconv_fits_nhwc), checked again for crafted engines.
void check_inputs(const QConvAttrs& a, std::span<const TensorView> in, std::span<const TensorView> out,
                  const GpuEnv& env) {
  if (in.size() >= 5 && (in[0].rank() != 4 || in[3].rank() != 4 || a.activation == QActivation::kLeakyRelu ||
                         (a.group == 1 ? in[0].shape[3] != in[3].shape[3] : !depthwise(a, in))))
    throw Error(
        "NhwcQConv: the CUDA backend takes 2-D convolutions of one group, or depthwise ones (group = input "
        "channels = output channels), with ReLU or Clip only");
  if (in.size() < 5 || in[0].dtype != DataType::kInt8 || in[3].dtype != DataType::kInt8 ||
      (present(in, 9) && in[9].dtype != DataType::kInt8 && in[9].dtype != DataType::kFloat32) ||
      (out[0].dtype != DataType::kInt8 && out[0].dtype != DataType::kFloat32) || in[4].dtype != DataType::kFloat32 ||
      (present(in, 6) && in[6].dtype != DataType::kFloat32))
    throw Error(
        "NhwcQConv: the CUDA backend takes int8 x and w, an int8 or float32 z, float32 scales and "
        "bias, and an int8 or float32 y");
  if ((out[0].dtype == DataType::kInt8) != present(in, 7) || out[0].rank() != 4 || out[0].shape[3] != in[3].shape[0] ||
      (present(in, 9) && !std::ranges::equal(in[9].shape, out[0].shape)))
    throw Error(
        "NhwcQConv: y must be int8 exactly when y_scale is given, with w's output channels, and z of "
        "y's shape");
  for (size_t i : {2, 5, 8, 11}) {
    if (!present(in, i)) continue;
    const auto* z = static_cast<const int8_t*>(env.host(i));
    if (!z) throw Error("NhwcQConv: zero points must be build-time constants");
    for (int64_t k = 0; k < in[i].numel(); ++k)
      if (z[k] != 0)
        throw Error("NhwcQConv: the CUDA backend takes zero points of 0 only (input " + std::to_string(i) + ")");
  }
}

// What a step runs: the builder's tactic where it applies on this GPU (a cuDNN plan that builds, or
// a tensor-core tile shape the convolution fits), else cuDNN's first plan that builds; the direct
// kernel where there is none, or for kDirectTactic.
struct Choice {
  enum Kind { kCudnn, kIgemm, kStream, kHalo, kDirect } kind;
  size_t index = 0;
};

Choice chosen(const Plan& p, int32_t tactic, const QConvNhwcArgs& args) {
  if (tactic == kDirectTactic) return {Choice::kDirect};
  if (tactic >= kIgemmTactic && tactic < kIgemmTactic + igemm::configs(args))
    return {Choice::kIgemm, static_cast<size_t>(tactic - kIgemmTactic)};
  if (tactic >= kStreamTactic && stream::runs(tactic - kStreamTactic, args))
    return {Choice::kStream, static_cast<size_t>(tactic - kStreamTactic)};
  if (tactic >= kHaloTactic && tactic < kHaloTactic + halo::configs(args))
    return {Choice::kHalo, static_cast<size_t>(tactic - kHaloTactic)};
  if (!p.built->graph) return {Choice::kDirect};
  const cg::Graph& g = *p.built->graph;
  if (tactic >= 0 && static_cast<size_t>(tactic) < g.candidates() && g.builds(static_cast<size_t>(tactic)))
    return {Choice::kCudnn, static_cast<size_t>(tactic)};
  const std::optional<size_t> first = g.usable(0);
  return first ? Choice{Choice::kCudnn, *first} : Choice{Choice::kDirect};
}

void conv_kernel(const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out, GpuEnv& env) {
  const auto& a = std::get<QConvAttrs>(attrs);
  check_inputs(a, in, out, env);
  if (out[0].numel() == 0) return;
  if (a.group != 1) return depthwise::run(args_of(shapes_of(a, in[0], in[3], out[0]), a, in, out, env), env.stream);
  std::unique_ptr<Plan> local;
  Plan& p = plan_for(attrs, in, out, env, local);
  const QConvNhwcArgs args = args_of(p.shapes, a, in, out, env);
  const Choice c = chosen(p, env.tactic, args);
  if (c.kind == Choice::kDirect) return run_direct(args, env);
  if (c.kind == Choice::kIgemm) return igemm::run(static_cast<int>(c.index), args, env.stream);
  if (c.kind == Choice::kStream) return stream::run(static_cast<int>(c.index), args, env.stream);
  if (c.kind == Choice::kHalo) return halo::run(static_cast<int>(c.index), args, env.stream);
  if (p.built->graph->workspace(c.index) > env.workspace_bytes)
    throw Error("NhwcQConv: the workspace is smaller than the kernel asked for");
  std::vector<void*> data;
  for (int64_t uid : p.built->uids) {
    switch (uid) {
      case 'x': data.push_back(in[0].data); break;
      case 'w': data.push_back(in[3].data); break;
      case 's': data.push_back(in[4].data); break;
      case 'b': data.push_back(in[6].data); break;
      case 'z': data.push_back(in[9].data); break;
      case 'y': data.push_back(out[0].data); break;
      case 'q': data.push_back(&p.x_scale); break;
      case 'r': data.push_back(&p.z_scale); break;
      default: data.push_back(&p.inv_y_scale); break;  // 'o'
    }
  }
  p.built->graph->run(env.cudnn, c.index, p.built->uids, data, env.workspace);
}

size_t conv_workspace(const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                      GpuEnv& env) {
  const auto& a = std::get<QConvAttrs>(attrs);
  check_inputs(a, in, out, env);
  if (a.group != 1) return 0;
  std::unique_ptr<Plan> local;
  const Plan& p = plan_for(attrs, in, out, env, local);
  const Choice c = chosen(p, env.tactic, args_of(p.shapes, a, in, out, env));
  if (c.kind == Choice::kCudnn) return p.built->graph->workspace(c.index);
  // Kiln's kernels need none, but they fall back to cuDNN's first plan where the data pointers
  // bound at run time are not aligned for them (a context sizes its workspace before that).
  if (c.kind != Choice::kCudnn && c.kind != Choice::kDirect && p.built->graph)
    if (const std::optional<size_t> first = p.built->graph->usable(0)) return p.built->graph->workspace(*first);
  return 0;
}

// Every cuDNN candidate whose plan builds (finalized in parallel: each may compile a kernel), and
// the tile shapes of the tensor-core and streaming kernels where the convolution fits them; for a
// depthwise one, its kernel alone.
std::vector<int32_t> conv_tactics(const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                                  GpuEnv& env) {
  const auto& a = std::get<QConvAttrs>(attrs);
  check_inputs(a, in, out, env);
  if (a.group != 1) return {kDepthwiseTactic};
  std::unique_ptr<Plan> local;
  const Plan& p = plan_for(attrs, in, out, env, local);
  std::vector<int32_t> t;
  if (p.built->graph) {
    p.built->graph->prepare_all();
    for (size_t i = 0; i < p.built->graph->candidates(); ++i)
      if (p.built->graph->usable(i) == i) t.push_back(static_cast<int32_t>(i));
  }
  const QConvNhwcArgs args = args_of(p.shapes, a, in, out, env);
  for (int i = 0, n = igemm::configs(args); i < n; ++i) t.push_back(kIgemmTactic + i);
  for (int i = 0, n = stream::configs(args); i < n; ++i)
    if (stream::runs(i, args)) t.push_back(kStreamTactic + i);
  for (int i = 0, n = halo::configs(args); i < n; ++i) t.push_back(kHaloTactic + i);
  return t;
}

// ---- pool_mean (fuse-conv-pool): y [N, 1, 1, M], the mean of the convolution's outputs per image ----
// The tensor-core kernel averages in its epilogue where its tiles hold whole images (igemm::pools);
// every other tactic computes the convolution's float32 output into the workspace (after its own)
// and ReduceMean's kernel averages it from there. The plans and tactics are those of the same
// convolution without the pooling.
struct Pooled {
  Attrs conv;                   // the attributes without pool_mean
  std::vector<int64_t> shape;   // the convolution's output, [N, OH, OW, M]
  TensorView full;              // float32, of that shape (no data)
  int64_t axes[2] = {1, 2};     // ReduceMean's axes
  int64_t n_axes = 2;

  Pooled(const QConvAttrs& a, std::span<const TensorView> in) {
    QConvAttrs plain = a;
    plain.pool_mean = 0;
    conv = plain;
    if (in.size() < 4 || in[0].rank() != 4 || in[3].rank() != 4)
      throw Error("NhwcQConv: the CUDA backend takes 2-D convolutions only");
    const std::vector<int64_t> x = channels_first_shape(in[0].shape), w = channels_first_shape(in[3].shape);
    const kiln::nn::WindowGeometry geo = kiln::nn::conv_geometry(plain.conv(), x, w);
    shape = {x[0], geo.out[0], geo.out[1], w[0]};
    full = TensorView{DataType::kFloat32, shape, nullptr, true};
  }
  Pooled(const Pooled&) = delete;
  Pooled& operator=(const Pooled&) = delete;

  // Whether the chosen tactic averages in its own kernel, with these operands (y: the step's); its
  // tile shape and operands in *config and *args_out.
  bool in_kernel(std::span<const TensorView> in, const TensorView& y, GpuEnv& env, QConvNhwcArgs* args_out = nullptr,
                 int* config = nullptr) const {
    if (std::get<QConvAttrs>(conv).group != 1) return false;
    std::unique_ptr<Plan> local;
    const Plan& p = plan_for(conv, in, {&full, 1}, env, local);
    QConvNhwcArgs args = args_of(p.shapes, std::get<QConvAttrs>(conv), in, {&full, 1}, env);
    args.y = y.data;
    args.pool_mean = true;
    const Choice c = chosen(p, env.tactic, args);
    if (c.kind != Choice::kIgemm || !igemm::pools(static_cast<int>(c.index), args)) return false;
    if (args_out) *args_out = args;
    if (config) *config = static_cast<int>(c.index);
    return true;
  }
  // ReduceMean over the spatial axes of `full` into `out`; with `query`, only the workspace it
  // asks for (none is used then), else run in workspace `ws`.
  size_t mean(std::span<const TensorView> out, const GpuEnv& env, void* ws, size_t ws_bytes, bool query) const {
    const void* hosts[2] = {nullptr, axes};
    GpuEnv m = env;
    m.host_in = std::span<const void* const>(hosts, 2);
    m.tactic = -1;
    m.state = nullptr;  // the step's state is the convolution's plan
    m.workspace = ws;
    m.workspace_bytes = ws_bytes;
    const TensorView views[2] = {full, TensorView{DataType::kInt64, {&n_axes, 1}, const_cast<int64_t*>(axes), true}};
    const std::span<const TensorView> in(views);
    const GpuKernelEntry* e = gpu_kernel_entry(OpKind::kReduceMean);
    if (query) return e->workspace ? e->workspace(OpKind::kReduceMean, ReduceAttrs{}, in, out, m) : 0;
    e->fn(OpKind::kReduceMean, ReduceAttrs{}, in, out, m);
    return 0;
  }
};

// check_inputs for the convolution, and y: float32 [N, 1, 1, M].
void check_pooled(const Pooled& pl, std::span<const TensorView> in, std::span<const TensorView> out,
                  const GpuEnv& env) {
  check_inputs(std::get<QConvAttrs>(pl.conv), in, {&pl.full, 1}, env);
  const std::vector<int64_t> want{pl.shape[0], 1, 1, pl.shape[3]};
  if (out[0].dtype != DataType::kFloat32 || !std::ranges::equal(out[0].shape, want))
    throw Error("NhwcQConv: with pool_mean, y must be float32 [N, 1, 1, M]");
}

void pooled_kernel(const QConvAttrs& a, std::span<const TensorView> in, std::span<const TensorView> out, GpuEnv& env) {
  Pooled pl(a, in);
  check_pooled(pl, in, out, env);
  if (pl.full.numel() == 0) return;
  QConvNhwcArgs args;
  int config = 0;
  if (pl.in_kernel(in, out[0], env, &args, &config)) return igemm::run(config, args, env.stream);
  const size_t conv_ws = nn::align_up(conv_workspace(pl.conv, in, {&pl.full, 1}, env));
  const size_t full_bytes = nn::align_up(pl.full.bytes());
  const size_t mean_ws = pl.mean(out, env, nullptr, 0, true);
  // The workspace was sized for the pooling kernel when the tensors were aligned then: a caller's
  // buffer bound later is not.
  if (env.workspace_bytes < conv_ws + full_bytes + mean_ws)
    throw Error(
        "NhwcQConv: its pooled output needs 16-byte aligned tensors (a device buffer bound to an input or output "
        "is not; cudaMalloc's are)");
  char* ws = static_cast<char*>(env.workspace);
  pl.full.data = ws + conv_ws;
  GpuEnv conv_env = env;
  conv_env.workspace_bytes = conv_ws;
  conv_kernel(pl.conv, in, {&pl.full, 1}, conv_env);
  pl.mean(out, env, mean_ws ? ws + conv_ws + full_bytes : nullptr, mean_ws, false);
}

size_t pooled_workspace(const QConvAttrs& a, std::span<const TensorView> in, std::span<const TensorView> out,
                        GpuEnv& env) {
  const Pooled pl(a, in);
  check_pooled(pl, in, out, env);
  if (pl.in_kernel(in, out[0], env)) return 0;
  return nn::align_up(conv_workspace(pl.conv, in, {&pl.full, 1}, env)) + nn::align_up(pl.full.bytes()) +
         pl.mean(out, env, nullptr, 0, true);
}

}  // namespace

void qconv_nhwc_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                       GpuEnv& env) {
  const auto& a = std::get<QConvAttrs>(attrs);
  if (a.pool_mean) return pooled_kernel(a, in, out, env);
  conv_kernel(attrs, in, out, env);
}

size_t qconv_nhwc_workspace(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                            GpuEnv& env) {
  const auto& a = std::get<QConvAttrs>(attrs);
  if (a.pool_mean) return pooled_workspace(a, in, out, env);
  return conv_workspace(attrs, in, out, env);
}

std::vector<int32_t> qconv_nhwc_tactics(OpKind, const Attrs& attrs, std::span<const TensorView> in,
                                        std::span<const TensorView> out, GpuEnv& env) {
  const auto& a = std::get<QConvAttrs>(attrs);
  if (!a.pool_mean) return conv_tactics(attrs, in, out, env);
  const Pooled pl(a, in);
  return conv_tactics(pl.conv, in, {&pl.full, 1}, env);
}

}  // namespace kiln::gpu::quant
