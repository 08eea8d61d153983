// Building the plan of a Conv, ConvTranspose, FusedConv or NhwcConv step (conv_plan.cuh).
//
// cuDNN pads symmetrically. Conv with pads that differ at the two ends of an axis (auto_pad
// SAME_* with an odd total, or explicit pads) runs on a copy of X in the workspace that carries
// the difference as explicit zeros; ConvTranspose with such pads (or negative ones, or an
// output_padding of a stride or more) computes a larger result in the workspace and copies the
// window that Y needs out of it, zero where it has none. 1-D convolutions run as 2-D ones with a
// height of 1. More than 3 spatial axes, tensors beyond 2^31 elements and pointers below 16-byte
// alignment take the direct kernel (conv_kernels.cu) instead.
// Channels last (NhwcConv): the descriptors say NHWC (W: KRSC), which cuDNN's tensor-core kernels
// read as they are; 2-D with symmetric pads only (what the channels-last pass makes), anything else
// runs the direct kernel. A 1x1 NhwcConv with unit strides is one GEMM, Y [N*P, M] = X [N*P, C] W^T,
// whose cuBLASLt epilogue adds the bias per column and computes what it can of the fused epilogue.
#include <algorithm>
#include <climits>
#include <optional>
#include <string>
#include <vector>

#include "core/infer/nn_geometry.h"
#include "core/layout.h"
#include "runtime/cuda/conv/conv_plan.cuh"

#include "runtime/cuda/conv/small_c.cuh"

namespace kiln::gpu::nn {

namespace {

using kiln::nn::WindowGeometry;

constexpr size_t kMaxAlgoWorkspace = size_t{512} << 20;
constexpr int kMaxSpatial = 3;  // cuDNN's limit

cudnnDataType_t cudnn_type(DataType t, const char* op) {
  switch (t) {
    case DataType::kFloat32: return CUDNN_DATA_FLOAT;
    case DataType::kFloat16: return CUDNN_DATA_HALF;
    case DataType::kFloat64: return CUDNN_DATA_DOUBLE;
    case DataType::kBFloat16: return CUDNN_DATA_BFLOAT16;
    default:
      throw Error(std::string(op) + ": element type " + std::string(dtype_name(t)) +
                  " is not supported by the CUDA backend");
  }
}

int to_int(int64_t v, const char* op) {
  if (v < 0 || v > INT_MAX) throw Error(std::string(op) + ": a size exceeds cuDNN's 32-bit range");
  return static_cast<int>(v);
}

// dims in NCHW order; channels_last: stored NHWC (the channel stride 1).
void set_tensor(cudnnTensorDescriptor_t d, cudnnDataType_t t, const std::vector<int64_t>& dims, const char* op,
                bool channels_last = false) {
  std::vector<int> di(dims.size()), st(dims.size());
  std::vector<size_t> order(dims.size());  // innermost last
  for (size_t i = 0; i < dims.size(); ++i) order[i] = i;
  if (channels_last) std::rotate(order.begin() + 1, order.begin() + 2, order.end());  // N, spatial..., C
  int64_t stride = 1;
  for (size_t k = order.size(); k-- > 0;) {
    const size_t i = order[k];
    di[i] = to_int(dims[i], op);
    st[i] = to_int(stride, op);
    stride *= dims[i];
  }
  to_int(stride, op);  // cuDNN indexes a tensor with 32-bit offsets
  check_cudnn(cudnnSetTensorNdDescriptor(d, t, static_cast<int>(di.size()), di.data(), st.data()), op);
}

// The activation of cudnnConvolutionBiasActivationForward (act(conv + z + bias)) that computes
// this epilogue, if one does.
std::optional<cudnnActivationMode_t> cudnn_activation(const EpilogueAttrs* e, bool has_z) {
  if (!e) return CUDNN_ACTIVATION_IDENTITY;
  auto mode = [](Activation a) -> std::optional<cudnnActivationMode_t> {
    if (a == Activation::kNone) return CUDNN_ACTIVATION_IDENTITY;
    if (a == Activation::kRelu) return CUDNN_ACTIVATION_RELU;
    return std::nullopt;
  };
  if (!has_z) return mode(e->activation);
  return e->activation == Activation::kNone ? mode(e->activation2) : std::nullopt;
}

std::vector<int64_t> plan_key(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                              std::span<const TensorView> out, int32_t tactic) {
  std::vector<int64_t> k{static_cast<int64_t>(kind), static_cast<int64_t>(in[0].dtype), tactic, has_input(in, 2),
                         has_input(in, 3), x_channels_first(kind, attrs)};
  if (const EpilogueAttrs* e = conv_epilogue(kind, attrs)) {
    k.push_back(static_cast<int64_t>(e->activation));
    k.push_back(static_cast<int64_t>(e->activation2));
  }
  for (const TensorView* t : {&in[0], &in[1], &out[0]}) {
    k.push_back(-1);
    k.insert(k.end(), t->shape.begin(), t->shape.end());
  }
  return k;
}

// float32 and float64 must not use tensor cores (TF32): FMA kernels only. Nor Winograd: its
// transforms lose about ten times more than a dot product (measured 2e-4 on 3x3 convs with 576
// products in float32), while FFT stays within a dot product's error. float16 and bfloat16 take
// every algorithm: all accumulate in float, below the output's half precision.
bool half_type(DataType dt) { return dt == DataType::kFloat16 || dt == DataType::kBFloat16; }

bool allowed(DataType dt, int algo, bool transpose, cudnnMathType_t m) {
  if (half_type(dt)) return true;
  if (m != CUDNN_FMA_MATH && m != CUDNN_DEFAULT_MATH) return false;
  if (!transpose)
    return algo != CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD && algo != CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
  return algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD && algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}

bool is_cudnn_tactic(int32_t t) { return (t >= 0 && t < kGemmTactic) || t >= kUnfusedTactic; }

// A 1x1 Conv with unit strides, no pads and one group is, per image, Y[n] [M, P] = W [M, C] X[n]
// [C, P]: one strided-batched GEMM (W shared), then B added by the epilogue kernel (cuBLASLt's bias epilogue
// runs along the other axis). cuDNN is up to 4x slower on these in float16 NCHW (measured on
// ResNet-50's 1x1 layers, H200); the builder's timing picks between the two.
// Channels last it is one GEMM (see the file comment).
void plan_pointwise(ConvPlan& p, const TensorView& X, const TensorView& Y, std::span<const TensorView> in,
                    const EpilogueAttrs* epi, GpuEnv& env) {
  const DirectConv& g = p.geometry;
  if (p.transpose || g.G != 1) return;
  for (int i = 0; i < g.rank; ++i)
    if (g.kernel[i] != 1 || g.strides[i] != 1 || g.in[i] != g.out[i]) return;  // in == out: no pads
  const int64_t P = Y.numel() / (g.batch * g.M);
  const size_t es = p.elem;
  GemmDesc d;
  if (p.channels_last) {
    d.dtype = X.dtype;
    d.trans_b = true;
    d.m = g.batch * P;
    d.n = g.M;
    d.k = g.C;
    p.pointwise_lt = lt_epilogue(epi, has_input(in, 3), true, X.dtype);
    p.pointwise = lt_plan(env.cublaslt, d, GemmAlignment{}, has_input(in, 2), epi, &p.pointwise_lt);
    if (p.pointwise->algo_count() == 0) p.pointwise.reset();
    return;
  }
  d.dtype = X.dtype;
  d.m = g.M;
  d.n = P;
  d.k = g.C;
  d.batch = g.batch;
  d.stride_a = 0;
  d.stride_b = g.C * P;
  d.stride_c = g.M * P;
  if (d.batch > INT_MAX) return;
  GemmAlignment al;  // the batch strides decide how aligned the later images are
  al.b = alignment_of(reinterpret_cast<const void*>(d.stride_b * es), 16);
  al.c = alignment_of(reinterpret_cast<const void*>(d.stride_c * es), 16);
  p.pointwise = std::make_unique<GemmPlan>(env.cublaslt, d, al);
  if (p.pointwise->algo_count() == 0) p.pointwise.reset();
}

std::unique_ptr<ConvPlan> build_library_plan(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                                     std::span<const TensorView> out, GpuEnv& env) {
  const char* op = op_name(kind).data();
  auto p = std::make_unique<ConvPlan>();
  p->key = plan_key(kind, attrs, in, out, env.tactic);
  p->transpose = kind == OpKind::kConvTranspose;
  p->channels_last = kind == OpKind::kNhwcConv;
  const ConvAttrs& a = conv_attrs(kind, attrs);
  const TensorView &W = in[1], &Y = out[0];
  // A channels-first X (x_channels_first): the plan is the convolution's on X's channels-last view
  // in W's type, which the small-channel kernel makes as it stages X and other tactics in the
  // workspace (conv.cu).
  const bool x_first = x_channels_first(kind, attrs);
  const std::vector<int64_t> x_last = x_first ? channels_last_shape(in[0].shape) : std::vector<int64_t>{};
  TensorView X = in[0];
  if (x_first) {
    X.shape = x_last;
    X.dtype = W.dtype;
  }
  // Shapes in channels-first order (NhwcConv's W [M, k..., C/group] as [M, C/group, k...]).
  const std::vector<int64_t> xs =
      p->channels_last ? channels_first_shape(X.shape) : std::vector(X.shape.begin(), X.shape.end());
  const std::vector<int64_t> ws =
      p->channels_last ? channels_first_shape(W.shape) : std::vector(W.shape.begin(), W.shape.end());
  const std::vector<int64_t> ys =
      p->channels_last ? channels_first_shape(Y.shape) : std::vector(Y.shape.begin(), Y.shape.end());
  const WindowGeometry g =
      p->transpose ? kiln::nn::conv_transpose_geometry(a, xs, ws) : kiln::nn::conv_geometry(a, xs, ws);
  p->dtype = X.dtype;
  const cudnnDataType_t dt = cudnn_type(X.dtype, op);
  p->elem = dtype_size(X.dtype);
  const int64_t N = xs[0], C = xs[1], M = ys[1], G = a.group;
  p->y_numel = Y.numel();
  p->channels = M;
  p->y_plane = p->channels_last ? 1 : N * M > 0 ? p->y_numel / (N * M) : 0;
  if (p->y_numel == 0) {
    p->empty = true;
    return p;
  }
  if (X.numel() == 0 || W.numel() == 0) {
    p->bias_only = true;
    return p;
  }
  const size_t n = g.rank();
  DirectConv& dg = p->geometry;
  if (n > static_cast<size_t>(kMaxDirectRank))
    throw Error(std::string(op) + ": " + std::to_string(n) + " spatial axes; the CUDA backend supports at most " +
                std::to_string(kMaxDirectRank));
  dg.transpose = p->transpose;
  dg.channels_last = p->channels_last;
  if (x_first) {
    dg.x_first_bytes = static_cast<int>(dtype_size(in[0].dtype));
    const size_t view = align_up(X.bytes());
    p->x_convert_bytes = view + (in[0].dtype != X.dtype ? view : 0);
  }
  dg.rank = static_cast<int>(n);
  dg.batch = N;
  dg.C = C;
  dg.M = M;
  dg.G = G;
  for (size_t i = 0; i < n; ++i) {
    dg.in[i] = g.in[i];
    dg.out[i] = g.out[i];
    dg.kernel[i] = g.kernel[i];
    dg.strides[i] = g.strides[i];
    dg.dilations[i] = g.dilations[i];
    dg.pads[i] = g.pads[i];
  }
  if (n > static_cast<size_t>(kMaxSpatial) || (p->channels_last && n != 2)) {
    p->direct = true;
    return p;
  }

  // Symmetric cuDNN pads plus the staged window (see the file comment).
  std::vector<int64_t> pad(n), staged_dims(n);
  Window& win = p->window;
  win.rank = static_cast<int>(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t pb = g.pads[i], pe = g.pads[n + i], s = g.strides[i];
    const int64_t ek = (g.kernel[i] - 1) * g.dilations[i] + 1;
    if (!p->transpose) {
      pad[i] = std::min(pb, pe);
      staged_dims[i] = g.in[i] + pb + pe - 2 * pad[i];
      p->staged |= pb != pe;
      win.src[i] = g.in[i];
      win.dst[i] = staged_dims[i];
      win.pre[i] = pb - pad[i];
    } else {
      pad[i] = std::max<int64_t>(0, std::min(pb, pe));
      const int64_t full = s * (g.in[i] - 1) + ek;      // the result without output_padding
      const int64_t extra = g.out[i] + pb + pe - full;  // output_padding (or what output_shape implies)
      p->staged |= pb != pad[i] || pe != pad[i] || extra >= s;
      staged_dims[i] = full - 2 * pad[i];
      win.src[i] = staged_dims[i];
      win.dst[i] = g.out[i];
      win.pre[i] = pad[i] - pb;
    }
  }
  if (p->staged && p->channels_last) {  // the staging copies are channels-first
    p->direct = true;
    return p;
  }
  const int64_t staged_channels = p->transpose ? M : C;
  win.planes = N * staged_channels;
  if (p->staged)
    p->staged_bytes = align_up(static_cast<size_t>(p->transpose ? win.src_numel() : win.dst_numel()) * p->elem);

  // cuDNN dims: 1-D runs as 2-D with a leading spatial axis of 1.
  const bool one_d = n == 1;
  auto dims_of = [&](int64_t batch, int64_t ch, const std::vector<int64_t>& sp) {
    std::vector<int64_t> d{batch, ch};
    if (one_d) d.push_back(1);
    d.insert(d.end(), sp.begin(), sp.end());
    return d;
  };
  auto spatial = [&](std::span<const int64_t> s) { return std::vector<int64_t>(s.begin() + 2, s.end()); };
  const std::vector<int64_t> x_sp = p->transpose || !p->staged ? spatial(xs) : staged_dims;
  const std::vector<int64_t> y_sp = !p->transpose || !p->staged ? spatial(ys) : staged_dims;
  set_tensor(p->x, dt, dims_of(N, C, x_sp), op, p->channels_last);
  set_tensor(p->y, dt, dims_of(N, M, y_sp), op, p->channels_last);
  std::vector<int64_t> bias_dims = dims_of(1, M, std::vector<int64_t>(n, 1));
  set_tensor(p->bias, dt, bias_dims, op);
  std::vector<int> wdims;
  for (int64_t d : dims_of(ws[0], ws[1], spatial(ws))) wdims.push_back(to_int(d, op));
  check_cudnn(cudnnSetFilterNdDescriptor(p->w, dt, p->channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                         static_cast<int>(wdims.size()), wdims.data()),
              op);
  std::vector<int> cpad, cstride, cdil;
  if (one_d) {  // the added axis of extent 1
    cpad = {0};
    cstride = cdil = {1};
  }
  for (size_t i = 0; i < n; ++i) {
    cpad.push_back(to_int(pad[i], op));
    cstride.push_back(to_int(g.strides[i], op));
    cdil.push_back(to_int(g.dilations[i], op));
  }
  const cudnnDataType_t compute = X.dtype == DataType::kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  check_cudnn(cudnnSetConvolutionNdDescriptor(p->conv, static_cast<int>(cpad.size()), cpad.data(), cstride.data(),
                                              cdil.data(), CUDNN_CROSS_CORRELATION, compute),
              op);
  check_cudnn(cudnnSetConvolutionGroupCount(p->conv, to_int(G, op)), op);
  const cudnnMathType_t math = half_type(X.dtype) ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
  check_cudnn(cudnnSetConvolutionMathType(p->conv, math), op);

  // Heuristic candidates, best first, one per algorithm.
  auto add = [&](int algo, cudnnStatus_t st, size_t mem, cudnnMathType_t m) {
    if (st != CUDNN_STATUS_SUCCESS || mem > kMaxAlgoWorkspace || !allowed(X.dtype, algo, p->transpose, m)) return;
    for (const Candidate& c : p->candidates)
      if (c.algo == algo) return;
    p->candidates.push_back({algo, half_type(X.dtype) ? m : CUDNN_FMA_MATH});
    p->tactics.push_back(algo);
  };
  int count = 0;
  if (!p->transpose) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    check_cudnn(cudnnGetConvolutionForwardAlgorithm_v7(env.cudnn, p->x, p->w, p->conv, p->y,
                                                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf),
                op);
    for (int i = 0; i < count; ++i) add(perf[i].algo, perf[i].status, perf[i].memory, perf[i].mathType);
  } else {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    check_cudnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(env.cudnn, p->w, p->x, p->conv, p->y,
                                                            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf),
                op);
    for (int i = 0; i < count; ++i) add(perf[i].algo, perf[i].status, perf[i].memory, perf[i].mathType);
  }
  // cuDNN's fused call: needs a bias; identity runs with IMPLICIT_PRECOMP_GEMM only.
  const std::optional<cudnnActivationMode_t> act = cudnn_activation(conv_epilogue(kind, attrs), has_input(in, 3));
  auto fusable = [&](int algo) {
    return !p->transpose && has_input(in, 2) && act &&
           (X.dtype == DataType::kFloat32 || X.dtype == DataType::kFloat16) &&
           (*act == CUDNN_ACTIVATION_RELU || algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
  };
  if (conv_epilogue(kind, attrs))
    for (const Candidate& c : p->candidates)
      if (fusable(c.algo)) p->tactics.push_back(kUnfusedTactic + c.algo);
  plan_pointwise(*p, X, Y, in, conv_epilogue(kind, attrs), env);
  if (p->pointwise) {
    const int count = p->pointwise->algo_count();
    for (int i = count; i-- > 0;) p->tactics.insert(p->tactics.begin(), kGemmTactic + i);
    const bool cudnn_asked = is_cudnn_tactic(env.tactic) && !p->candidates.empty();
    if (env.tactic >= kGemmTactic && env.tactic < kGemmTactic + count)
      p->pointwise_algo = env.tactic - kGemmTactic;
    else if (!cudnn_asked)
      p->pointwise_algo = 0;  // the default
    if (p->pointwise_algo >= 0) return p;
  }
  if (p->candidates.empty()) {  // bfloat16 shapes cuDNN has no kernel for, say
    p->direct = true;
    return p;
  }

  const bool unfused = env.tactic >= kUnfusedTactic;
  const int32_t asked = unfused ? env.tactic - kUnfusedTactic : env.tactic;
  p->chosen = p->candidates[0];
  for (const Candidate& c : p->candidates)
    if (c.algo == asked) p->chosen = c;
  check_cudnn(cudnnSetConvolutionMathType(p->conv, p->chosen.math), op);
  if (!p->transpose) {
    const auto algo = static_cast<cudnnConvolutionFwdAlgo_t>(p->chosen.algo);
    check_cudnn(cudnnGetConvolutionForwardWorkspaceSize(env.cudnn, p->x, p->w, p->conv, p->y, algo, &p->algo_ws), op);
    p->fused = fusable(p->chosen.algo) && !(unfused && p->chosen.algo == asked);
    // A NaN passes Relu, as in the ONNX op.
    if (p->fused) check_cudnn(cudnnSetActivationDescriptor(p->activation, *act, CUDNN_PROPAGATE_NAN, 0.0), op);
  } else {
    const auto algo = static_cast<cudnnConvolutionBwdDataAlgo_t>(p->chosen.algo);
    check_cudnn(cudnnGetConvolutionBackwardDataWorkspaceSize(env.cudnn, p->w, p->x, p->conv, p->y, algo, &p->algo_ws),
                op);
  }
  return p;
}

// The library plan, plus Kiln's small-channel kernels as more tactics where they take the shape.
std::unique_ptr<ConvPlan> build_plan(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                                     std::span<const TensorView> out, GpuEnv& env) {
  std::unique_ptr<ConvPlan> p = build_library_plan(kind, attrs, in, out, env);
  if (p->empty || p->bias_only) return p;
  const bool has_z = has_input(in, 3);
  if (small_c_conv_fits(p->geometry, p->dtype, has_z)) {
    p->tactics.push_back(kSmallCTactic);
    p->small_c = env.tactic == kSmallCTactic;
  }
  if (small_c_wgmma_fits(p->geometry, p->dtype, has_z)) {
    p->tactics.push_back(kSmallCWgmmaTactic);
    p->small_c_wgmma = env.tactic == kSmallCWgmmaTactic;
    p->small_c = p->small_c || p->small_c_wgmma;
  }
  // A channels-first X: the same kernels also on X converted in the workspace first (the Cast and
  // Transpose kernels), which the timing prefers where staging the raw rows costs the kernel more
  // than the two passes over X (large batches).
  if (p->geometry.x_first_bytes) {
    DirectConv converted = p->geometry;
    converted.x_first_bytes = 0;
    if (small_c_conv_fits(converted, p->dtype, has_z)) p->tactics.push_back(kSmallCConvertTactic);
    if (small_c_wgmma_fits(converted, p->dtype, has_z)) p->tactics.push_back(kSmallCWgmmaConvertTactic);
    if (env.tactic == kSmallCConvertTactic || env.tactic == kSmallCWgmmaConvertTactic) {
      p->small_c = p->x_converted = true;
      p->small_c_wgmma = env.tactic == kSmallCWgmmaConvertTactic;
    }
  }
  return p;
}

}  // namespace

const ConvAttrs& conv_attrs(OpKind kind, const Attrs& attrs) {
  if (kind == OpKind::kFusedConv || kind == OpKind::kNhwcConv) return std::get<FusedConvAttrs>(attrs);
  return std::get<ConvAttrs>(attrs);
}
const EpilogueAttrs* conv_epilogue(OpKind kind, const Attrs& attrs) {
  if (kind == OpKind::kFusedConv || kind == OpKind::kNhwcConv) return &std::get<FusedConvAttrs>(attrs);
  return nullptr;
}
bool x_channels_first(OpKind kind, const Attrs& attrs) {
  return kind == OpKind::kNhwcConv && std::get<FusedConvAttrs>(attrs).x_channels_first != 0;
}

ConvPlan& plan_for(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                   GpuEnv& env, std::unique_ptr<ConvPlan>& local) {
  return step_plan<ConvPlan>(env, plan_key(kind, attrs, in, out, env.tactic), local,
                             [&] { return build_plan(kind, attrs, in, out, env); });
}

}  // namespace kiln::gpu::nn
