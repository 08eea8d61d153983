// Conv, ConvTranspose and FusedConv on the GPU through cuDNN's descriptor API (float32, float16,
// bfloat16, float64: the CPU kernel's types).
//
// Conv is cudnnConvolutionForward; ConvTranspose is the data gradient of the Conv that maps Y back
// onto X (cudnnConvolutionBackwardData), which also covers output_padding and output_shape: Y's
// view already has its final size. The bias, and FusedConv's epilogue (core/attrs.h), run inside
// cudnnConvolutionBiasActivationForward where cuDNN can: it computes act(conv + z + bias) with act
// Relu or identity, identity with the IMPLICIT_PRECOMP_GEMM algorithm only. Otherwise the
// epilogue kernel (nn_epilogue.cu) adds the bias and applies the rest in one pass over Y
// (cudnnAddTensor is 3x slower on NCHW float16). float32
// runs with CUDNN_FMA_MATH (no TF32) and without the Winograd algorithms (less accurate), float16
// and bfloat16 as half tensors with float accumulation (CUDNN_TENSOR_OP_MATH), float64 with FMA
// math. A 1x1 Conv can also run as a batched cuBLASLt GEMM (plan_pointwise). The bias is fused for
// float32 and float16 only. Shapes for which cuDNN offers no algorithm (bfloat16 ones, say) take
// the direct kernel.
//
// cuDNN pads symmetrically. Conv with pads that differ at the two ends of an axis (auto_pad
// SAME_* with an odd total, or explicit pads) runs on a copy of X in the workspace that carries
// the difference as explicit zeros; ConvTranspose with such pads (or negative ones, or an
// output_padding of a stride or more) computes a larger result in the workspace and copies the
// window that Y needs out of it, zero where it has none. 1-D convolutions run as 2-D ones with a
// height of 1. More than 3 spatial axes, tensors beyond 2^31 elements and pointers below 16-byte
// alignment take the direct kernel (nn_conv_kernels.cu) instead.
//
// Everything host-side (geometry, descriptors, the algorithm choice) is kept in the step's state.
// The tactics: 100 + i for the GEMM form of a 1x1 Conv with cuBLASLt algorithm i (the default where
// it exists), then cuDNN's algorithm ids, best heuristic guess first; for FusedConv also 200 + id,
// the same algorithm with the epilogue kernel where cuDNN could have fused it (timing decides).
#include <algorithm>
#include <climits>
#include <optional>
#include <string>
#include <vector>

#include "core/infer/nn_geometry.h"
#include "runtime/cuda/nn_gemm.h"
#include "runtime/cuda/nn_internal.cuh"

namespace kiln::gpu::nn {

namespace {

using kiln::nn::WindowGeometry;

constexpr size_t kMaxAlgoWorkspace = size_t{512} << 20;
constexpr int kMaxSpatial = 3;  // cuDNN's limit

template <class T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class CudnnDesc {
 public:
  CudnnDesc() { check_cudnn(Create(&d_), "creating a cuDNN descriptor"); }
  ~CudnnDesc() { Destroy(d_); }
  CudnnDesc(const CudnnDesc&) = delete;
  CudnnDesc& operator=(const CudnnDesc&) = delete;
  operator T() const { return d_; }

 private:
  T d_ = nullptr;
};
using TensorDesc = CudnnDesc<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = CudnnDesc<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc =
    CudnnDesc<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;
using ActDesc =
    CudnnDesc<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor, cudnnDestroyActivationDescriptor>;

// ---- the plan ------------------------------------------------------------------------------------
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

void set_tensor(cudnnTensorDescriptor_t d, cudnnDataType_t t, const std::vector<int64_t>& dims, const char* op) {
  std::vector<int> di(dims.size()), st(dims.size());
  int64_t stride = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    di[i] = to_int(dims[i], op);
    st[i] = to_int(stride, op);
    stride *= dims[i];
  }
  to_int(stride, op);  // cuDNN indexes a tensor with 32-bit offsets
  check_cudnn(cudnnSetTensorNdDescriptor(d, t, static_cast<int>(di.size()), di.data(), st.data()), op);
}

// One cuDNN algorithm the heuristics offer for this step (status success, workspace <= 512 MiB).
struct Candidate {
  int algo;
  cudnnMathType_t math;
};

struct ConvPlan final : StepState {
  std::vector<int64_t> key;
  bool transpose = false;
  bool empty = false;      // Y has no elements: nothing to do
  bool bias_only = false;  // no element of X reaches Y (no input channels, or X empty): Y = B or 0
  bool direct = false;     // cuDNN cannot take these shapes: the direct kernel runs
  DirectConv geometry;     // for the direct kernel (also used at run time with misaligned pointers)
  DataType dtype = DataType::kFloat32;
  size_t elem = 4;
  int64_t y_numel = 0, y_plane = 0, channels = 0;  // Y [N, channels, plane]
  TensorDesc x, y, bias;                           // y: what cuDNN writes (the staged buffer or Y)
  FilterDesc w;
  ConvDesc conv;
  ActDesc activation;  // of the fused call
  std::vector<Candidate> candidates;
  std::vector<int32_t> tactics;
  Candidate chosen{-1, CUDNN_DEFAULT_MATH};
  std::unique_ptr<GemmPlan> pointwise;  // 1x1 Conv as a batched GEMM (null: not one, or no algorithm)
  int pointwise_algo = -1;              // >= 0: the GEMM runs, with this cuBLASLt algorithm
  size_t algo_ws = 0;
  bool fused = false;
  bool staged = false;  // Conv: X padded into the workspace; ConvTranspose: Y computed there
  Window window;
  size_t staged_bytes = 0;

  size_t workspace() const {
    if (empty || bias_only || direct) return 0;
    if (pointwise_algo >= 0) return pointwise->workspace(pointwise_algo);
    return align_up(algo_ws) + staged_bytes;
  }
};

bool has_input(std::span<const TensorView> in, size_t i) { return in.size() > i && in[i].exists; }

const ConvAttrs& conv_attrs(OpKind kind, const Attrs& attrs) {
  if (kind == OpKind::kFusedConv) return std::get<FusedConvAttrs>(attrs);
  return std::get<ConvAttrs>(attrs);
}
const EpilogueAttrs* epilogue_of(OpKind kind, const Attrs& attrs) {
  return kind == OpKind::kFusedConv ? &std::get<FusedConvAttrs>(attrs) : nullptr;
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
                         has_input(in, 3)};
  if (const EpilogueAttrs* e = epilogue_of(kind, attrs)) {
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

// Tactic kGemmTactic + i: the 1x1 Conv as a GEMM with cuBLASLt algorithm i (cuDNN's ids are < 10);
// kUnfusedTactic + id: cuDNN algorithm id, then the epilogue kernel, where the fused call could run.
constexpr int32_t kGemmTactic = 100;
constexpr int32_t kUnfusedTactic = 200;
bool is_cudnn_tactic(int32_t t) { return (t >= 0 && t < kGemmTactic) || t >= kUnfusedTactic; }

// A 1x1 Conv with unit strides, no pads and one group is, per image, Y[n] [M, P] = W [M, C] X[n]
// [C, P]: one strided-batched GEMM (W shared), then B added by the epilogue kernel (cuBLASLt's bias epilogue
// runs along the other axis). cuDNN is up to 4x slower on these in float16 NCHW (measured on
// ResNet-50's 1x1 layers, H200); the builder's timing picks between the two.
void plan_pointwise(ConvPlan& p, const TensorView& X, const TensorView& Y, GpuEnv& env) {
  const DirectConv& g = p.geometry;
  if (p.transpose || g.G != 1) return;
  for (int i = 0; i < g.rank; ++i)
    if (g.kernel[i] != 1 || g.strides[i] != 1 || g.in[i] != g.out[i]) return;  // in == out: no pads
  const int64_t P = Y.numel() / (g.batch * g.M);
  const size_t es = p.elem;
  GemmDesc d;
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

std::unique_ptr<ConvPlan> build_plan(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                                     std::span<const TensorView> out, GpuEnv& env) {
  const char* op = op_name(kind).data();
  auto p = std::make_unique<ConvPlan>();
  p->key = plan_key(kind, attrs, in, out, env.tactic);
  p->transpose = kind == OpKind::kConvTranspose;
  const ConvAttrs& a = conv_attrs(kind, attrs);
  const TensorView &X = in[0], &W = in[1], &Y = out[0];
  const WindowGeometry g = p->transpose ? kiln::nn::conv_transpose_geometry(a, X.shape, W.shape)
                                        : kiln::nn::conv_geometry(a, X.shape, W.shape);
  p->dtype = X.dtype;
  const cudnnDataType_t dt = cudnn_type(X.dtype, op);
  p->elem = dtype_size(X.dtype);
  const int64_t N = X.shape[0], C = X.shape[1], M = Y.shape[1], G = a.group;
  p->y_numel = Y.numel();
  p->channels = M;
  p->y_plane = N * M > 0 ? p->y_numel / (N * M) : 0;
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
  if (n > static_cast<size_t>(kMaxSpatial)) {
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
  const std::vector<int64_t> x_sp = p->transpose || !p->staged ? spatial(X.shape) : staged_dims;
  const std::vector<int64_t> y_sp = !p->transpose || !p->staged ? spatial(Y.shape) : staged_dims;
  set_tensor(p->x, dt, dims_of(N, C, x_sp), op);
  set_tensor(p->y, dt, dims_of(N, M, y_sp), op);
  std::vector<int64_t> bias_dims = dims_of(1, M, std::vector<int64_t>(n, 1));
  set_tensor(p->bias, dt, bias_dims, op);
  std::vector<int> wdims;
  for (int64_t d : dims_of(W.shape[0], W.shape[1], spatial(W.shape))) wdims.push_back(to_int(d, op));
  check_cudnn(cudnnSetFilterNdDescriptor(p->w, dt, CUDNN_TENSOR_NCHW, static_cast<int>(wdims.size()), wdims.data()),
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
  const std::optional<cudnnActivationMode_t> act = cudnn_activation(epilogue_of(kind, attrs), has_input(in, 3));
  auto fusable = [&](int algo) {
    return !p->transpose && has_input(in, 2) && act &&
           (X.dtype == DataType::kFloat32 || X.dtype == DataType::kFloat16) &&
           (*act == CUDNN_ACTIVATION_RELU || algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
  };
  if (kind == OpKind::kFusedConv)
    for (const Candidate& c : p->candidates)
      if (fusable(c.algo)) p->tactics.push_back(kUnfusedTactic + c.algo);
  plan_pointwise(*p, X, Y, env);
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
  if (p->candidates.empty()) {
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

ConvPlan& plan_for(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                   GpuEnv& env, std::unique_ptr<ConvPlan>& local) {
  return step_plan<ConvPlan>(env, plan_key(kind, attrs, in, out, env.tactic), local,
                             [&] { return build_plan(kind, attrs, in, out, env); });
}

// ---- entry points --------------------------------------------------------------------------------
void conv_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                 GpuEnv& env) {
  const char* op = op_name(kind).data();
  std::unique_ptr<ConvPlan> local;
  ConvPlan& p = plan_for(kind, attrs, in, out, env, local);
  const TensorView &X = in[0], &W = in[1], &Y = out[0];
  const void* B = has_input(in, 2) ? in[2].data : nullptr;
  const void* Z = has_input(in, 3) ? in[3].data : nullptr;
  const EpilogueAttrs plain;
  const EpilogueAttrs* epi = epilogue_of(kind, attrs);
  // The epilogue pass over Y, adding `bias` (null: the bias is in Y already).
  auto finish = [&](const void* bias) {
    apply_epilogue(Y.data, bias, Z, epi ? *epi : plain, p.y_numel, p.y_plane, p.channels, p.dtype, env.stream, op);
  };
  if (p.empty) return;
  if (p.bias_only) {
    bias_fill(B, Y.data, p.y_numel, p.y_plane, p.channels, p.elem, env.stream, op);
    return finish(nullptr);
  }
  // cuDNN's kernels need aligned tensors (a Kiln engine's are 64-byte aligned; the tests shift them).
  const bool aligned = alignment_of(X.data, 16) == 16 && alignment_of(W.data, 16) == 16 &&
                       alignment_of(Y.data, 16) == 16 && alignment_of(B, 16) == 16 && alignment_of(Z, 16) == 16;
  if (p.direct || !aligned) {
    direct_conv(p.geometry, p.dtype, X.data, W.data, B, Y.data, env.stream, op);
    return finish(nullptr);
  }
  const float f1 = 1.0f, f0 = 0.0f;
  const double d1 = 1.0, d0 = 0.0;
  const bool dbl = p.dtype == DataType::kFloat64;
  const void* one = dbl ? static_cast<const void*>(&d1) : &f1;
  const void* zero = dbl ? static_cast<const void*>(&d0) : &f0;
  if (p.pointwise_algo >= 0) {
    p.pointwise->run(env.stream, p.pointwise_algo, 1.0, W.data, X.data, 0.0, nullptr, Y.data, nullptr, env.workspace,
                     env.workspace_bytes);
    return finish(B);
  }
  if (env.workspace_bytes < p.workspace())
    throw Error(std::string(op) + ": the workspace is smaller than the step asked for");
  char* ws = static_cast<char*>(env.workspace);
  char* stage = ws + align_up(p.algo_ws);
  if (!p.transpose) {
    const void* x = X.data;
    if (p.staged) {
      window_copy(X.data, stage, p.window, p.elem, env.stream, op);
      x = stage;
    }
    const auto algo = static_cast<cudnnConvolutionFwdAlgo_t>(p.chosen.algo);
    if (p.fused) {  // without a residual, z is Y with a weight of 0
      check_cudnn(cudnnConvolutionBiasActivationForward(env.cudnn, one, p.x, x, p.w, W.data, p.conv, algo, ws,
                                                        p.algo_ws, Z ? one : zero, p.y, Z ? Z : Y.data, p.bias, B,
                                                        p.activation, p.y, Y.data),
                  op);
      return;
    }
    check_cudnn(
        cudnnConvolutionForward(env.cudnn, one, p.x, x, p.w, W.data, p.conv, algo, ws, p.algo_ws, zero, p.y, Y.data),
        op);
  } else {
    const auto algo = static_cast<cudnnConvolutionBwdDataAlgo_t>(p.chosen.algo);
    void* y = p.staged ? static_cast<void*>(stage) : Y.data;
    check_cudnn(cudnnConvolutionBackwardData(env.cudnn, one, p.w, W.data, p.x, X.data, p.conv, algo, ws, p.algo_ws,
                                             zero, p.y, y),
                op);
    if (p.staged) window_copy(stage, Y.data, p.window, p.elem, env.stream, op);
  }
  finish(B);
}

size_t conv_workspace(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                      GpuEnv& env) {
  std::unique_ptr<ConvPlan> local;
  return plan_for(kind, attrs, in, out, env, local).workspace();
}

std::vector<int32_t> conv_tactics(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                                  std::span<const TensorView> out, GpuEnv& env) {
  std::unique_ptr<ConvPlan> local;
  return plan_for(kind, attrs, in, out, env, local).tactics;
}

const GpuKernelEntry kEntries[] = {
    {OpKind::kConv, conv_kernel, conv_workspace, conv_tactics},
    {OpKind::kConvTranspose, conv_kernel, conv_workspace, conv_tactics},
    {OpKind::kFusedConv, conv_kernel, conv_workspace, conv_tactics},
};

}  // namespace

std::span<const GpuKernelEntry> conv_gpu_entries() { return kEntries; }

}  // namespace kiln::gpu::nn
