// GPU training backend: convolution (cuDNN) and linear layers (cuBLASLt), with their biases.
//
// Each convolution shape gets a plan (descriptors) the first time it runs, and each direction
// (forward, backward data, backward filter) its algorithm the first time it runs: the fastest of
// cudnnFind*AlgorithmEx's results that cuDNN marks CUDNN_DETERMINISTIC (the contract: the same bits
// on the same device), within kFindWorkspace. Finding runs the algorithms on the op's own buffers
// and waits for the device, once per shape. float32 convolutions run with CUDNN_FMA_MATH (no TF32)
// and without Winograd (about ten times less accurate, as the runtime found); float16 ones with
// tensor cores and float accumulation. Bias gradients are deterministic channel sums
// (cuda_internal.cuh), not cudnnConvolutionBackwardBias.
#include <climits>
#include <optional>
#include <sstream>

#include "runtime/cuda/shared.h"
#include "train/algorithm_cache.h"
#include "train/cuda_internal.cuh"

namespace kiln::train {

using namespace cuda_detail;
using gpu::check_cudnn;

namespace {

constexpr size_t kFindWorkspace = size_t{256} << 20;

int to_int(int64_t v, const char* op) {
  require(v >= 0 && v <= INT_MAX, op, "a dimension beyond cuDNN's 32-bit sizes");
  return static_cast<int>(v);
}

cudnnDataType_t cudnn_type(DataType t) { return t == DataType::kFloat16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT; }

// Shapes of x [N,C,H,W], w [O,C/groups,KH,KW] and y [N,O,OH,OW], checked against the geometry.
void check_conv(const Tensor& x, const Tensor& w, const Tensor& y, const ConvGeometry& g, const char* op) {
  require(x.rank() == 4 && w.rank() == 4 && y.rank() == 4, op, "expected 4-D x, w and y");
  const int64_t c = x.dim(1), o = w.dim(0);
  require(g.groups >= 1 && c % g.groups == 0 && o % g.groups == 0 && w.dim(1) == c / g.groups, op,
          "channels do not divide into groups");
  require(y.dim(0) == x.dim(0) && y.dim(1) == o, op, "output batch or channels differ from input and filter");
  require(y.dim(2) == window_out(x.dim(2), w.dim(2), g.stride[0], g.pad[0], g.dilation[0]) &&
              y.dim(3) == window_out(x.dim(3), w.dim(3), g.stride[1], g.pad[1], g.dilation[1]),
          op, "output size does not match the geometry");
  require(x.dtype() == y.dtype(), op, "x and y differ in dtype");
  dispatch_act(x.dtype(), op, [](auto) {});
  require(w.dtype() == DataType::kFloat32 || w.dtype() == x.dtype(), op, "w must be float32 or of x's type");
}

// float32 takes FMA kernels only (CUDNN_DEFAULT_MATH results run with FMA math too) and no
// Winograd; float16 takes every algorithm.
bool allowed_math(DataType t, cudnnMathType_t m) {
  return t == DataType::kFloat16 || m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH;
}

bool fwd_winograd(int a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool data_winograd(int a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool filter_winograd(int a) { return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED; }

std::string conv_what(const Tensor& x, const Tensor& w) {
  return "x " + shape_string(x.shape()) + ", w " + shape_string(w.shape()) + " (" + std::string(dtype_name(x.dtype())) +
         ")";
}

// The fastest of cudnnFind's results (sorted by time) that is deterministic, allowed and fits,
// added to the algorithm cache under `key`.
template <class Perf>
int64_t fastest(const Perf* perf, int n, DataType t, bool (*winograd)(int), const char* op, const Tensor& x,
                const Tensor& w, const std::string& key) {
  for (int i = 0; i < n; ++i) {
    const Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.determinism != CUDNN_DETERMINISTIC || p.memory > kFindWorkspace ||
        !allowed_math(t, p.mathType) || (t != DataType::kFloat16 && winograd(static_cast<int>(p.algo))))
      continue;
    AlgorithmCache::instance().put(key, static_cast<int64_t>(p.algo));
    return static_cast<int64_t>(p.algo);
  }
  throw Error(std::string("train op ") + op + ": cuDNN has no deterministic algorithm for " + conv_what(x, w));
}

std::string cached_what(const char* op) {
  const std::filesystem::path& f = AlgorithmCache::instance().file();
  return std::string(op) + (f.empty() ? "" : " (if the algorithm came from the timing cache " + f.string() +
                                                 ", delete it to measure afresh)");
}

// y[n, c, p] += b[c] over [N, C, P].
template <class T>
void add_channel_bias(T* y, const float* b, int64_t n, int64_t c, int64_t p, cudaStream_t s, const char* op) {
  for_each(
      s, n * c * p, [=] __device__(int64_t i) { st(y, i, ld(y, i) + b[(i / p) % c]); }, op);
}

// db[c] = sum over n and p of dy[n, c, p], in double.
template <class T>
void channel_bias_grad(CudaBackend& be, const T* dy, float* db, int64_t n, int64_t c, int64_t p, const char* op) {
  channel_sums<1>(
      be, channel_grid(n, c, p), [=] __device__(int64_t i, int64_t, double* v) { v[0] = ld(dy, i); },
      [=] __device__(int64_t ch, const double* s) { db[ch] = static_cast<float>(s[0]); }, op);
}

void bias_grad(CudaBackend& be, const Tensor& dy, const Tensor& db, int64_t n, int64_t c, int64_t p, const char* op) {
  if (!db.defined()) return;
  require(db.numel() == c, op, "the bias gradient must have one value per output channel");
  require_f32(db, op, "the bias gradient");
  dispatch_act(dy.dtype(), op, [&](auto t) {
    using T = decltype(t);
    channel_bias_grad(be, dy.data<T>(), db.data<float>(), n, c, p, op);
  });
}

void add_bias(const Tensor& y, const Tensor& b, int64_t n, int64_t c, int64_t p, cudaStream_t s, const char* op) {
  if (!b.defined()) return;
  require(b.numel() == c, op, "the bias must have one value per output channel");
  require_f32(b, op, "the bias");
  dispatch_act(y.dtype(), op,
               [&](auto t) { add_channel_bias(y.data<decltype(t)>(), b.data<float>(), n, c, p, s, op); });
}

}  // namespace

std::string CudaBackend::conv_key(const char* direction, const Tensor& x, const Tensor& w, const Tensor& y,
                                  const ConvGeometry& g) const {
  std::ostringstream k;
  k << gpu_name_ << "|cudnn " << cudnnGetVersion() << "|" << direction << "|" << dtype_name(x.dtype()) << "|x"
    << shape_string(x.shape()) << "|w" << shape_string(w.shape()) << "|y" << shape_string(y.shape());
  for (const int64_t* v : {g.kernel, g.stride, g.pad, g.dilation}) k << "|" << v[0] << "," << v[1];
  k << "|g" << g.groups;
  return k.str();
}

ConvPlan& CudaBackend::conv_plan(const Tensor& x, const Tensor& w, const Tensor& y, const ConvGeometry& g,
                                 const char* op) {
  std::vector<int64_t> key = {static_cast<int64_t>(x.dtype())};
  for (const Tensor* t : {&x, &w, &y}) key.insert(key.end(), t->shape().begin(), t->shape().end());
  for (const int64_t* v : {g.kernel, g.stride, g.pad, g.dilation}) key.insert(key.end(), v, v + 2);
  key.push_back(g.groups);
  auto it = conv_plans_.find(key);
  if (it != conv_plans_.end()) return *it->second;

  auto p = std::make_unique<ConvPlan>();
  const cudnnDataType_t type = cudnn_type(x.dtype());
  check_cudnn(cudnnCreateTensorDescriptor(&p->x), op);
  check_cudnn(cudnnCreateTensorDescriptor(&p->y), op);
  check_cudnn(cudnnCreateFilterDescriptor(&p->w), op);
  check_cudnn(cudnnCreateConvolutionDescriptor(&p->conv), op);
  check_cudnn(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, type, to_int(x.dim(0), op), to_int(x.dim(1), op),
                                         to_int(x.dim(2), op), to_int(x.dim(3), op)),
              op);
  check_cudnn(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, type, to_int(y.dim(0), op), to_int(y.dim(1), op),
                                         to_int(y.dim(2), op), to_int(y.dim(3), op)),
              op);
  check_cudnn(cudnnSetFilter4dDescriptor(p->w, type, CUDNN_TENSOR_NCHW, to_int(w.dim(0), op), to_int(w.dim(1), op),
                                         to_int(w.dim(2), op), to_int(w.dim(3), op)),
              op);
  check_cudnn(cudnnSetConvolution2dDescriptor(
                  p->conv, to_int(g.pad[0], op), to_int(g.pad[1], op), to_int(g.stride[0], op), to_int(g.stride[1], op),
                  to_int(g.dilation[0], op), to_int(g.dilation[1], op), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
              op);
  check_cudnn(cudnnSetConvolutionGroupCount(p->conv, to_int(g.groups, op)), op);
  p->math = x.dtype() == DataType::kFloat16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
  check_cudnn(cudnnSetConvolutionMathType(p->conv, p->math), op);
  return *conv_plans_.emplace(std::move(key), std::move(p)).first->second;
}

void CudaBackend::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                                 const ConvGeometry& g) {
  const char* op = "conv2d_forward";
  check_conv(x, w, y, g, op);
  if (x.dim(0) == 0) return;
  ConvPlan& p = conv_plan(x, w, y, g, op);
  const void* wp = weights_as(w, x.dtype(), Slot::kWeight16);
  if (!p.fwd_found) {
    const std::string key = conv_key("forward", x, w, y, g);
    std::optional<int64_t> algo = AlgorithmCache::instance().find(key);
    if (!algo) {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      int n = 0;
      void* ws = scratch(Slot::kWorkspace, kFindWorkspace);
      check_cudnn(cudnnFindConvolutionForwardAlgorithmEx(cudnn_, p.x, x.data<void>(), p.w, wp, p.conv, p.y,
                                                         y.data<void>(), CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf,
                                                         ws, kFindWorkspace),
                  op);
      algo = fastest(perf, n, x.dtype(), fwd_winograd, op, x, w, key);
    }
    p.fwd_algo = static_cast<cudnnConvolutionFwdAlgo_t>(*algo);
    check_cudnn(cudnnGetConvolutionForwardWorkspaceSize(cudnn_, p.x, p.w, p.conv, p.y, p.fwd_algo, &p.fwd_ws),
                cached_what(op));
    p.fwd_found = true;
  }
  const float one = 1, zero = 0;
  void* ws = scratch(Slot::kWorkspace, p.fwd_ws);
  check_cudnn(cudnnConvolutionForward(cudnn_, &one, p.x, x.data<void>(), p.w, wp, p.conv, p.fwd_algo, ws, p.fwd_ws,
                                      &zero, p.y, y.data<void>()),
              op);
  add_bias(y, b, y.dim(0), y.dim(1), y.dim(2) * y.dim(3), stream(), op);
}

void CudaBackend::conv2d_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx, const ConvGeometry& g) {
  const char* op = "conv2d_backward_data";
  check_conv(dx, w, dy, g, op);
  if (dx.dim(0) == 0) return;
  ConvPlan& p = conv_plan(dx, w, dy, g, op);
  const void* wp = weights_as(w, dx.dtype(), Slot::kWeight16);
  if (!p.data_found) {
    const std::string key = conv_key("backward data", dx, w, dy, g);
    std::optional<int64_t> algo = AlgorithmCache::instance().find(key);
    if (!algo) {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      int n = 0;
      void* ws = scratch(Slot::kWorkspace, kFindWorkspace);
      check_cudnn(cudnnFindConvolutionBackwardDataAlgorithmEx(cudnn_, p.w, wp, p.y, dy.data<void>(), p.conv, p.x,
                                                              dx.data<void>(), CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                                              &n, perf, ws, kFindWorkspace),
                  op);
      algo = fastest(perf, n, dx.dtype(), data_winograd, op, dx, w, key);
    }
    p.data_algo = static_cast<cudnnConvolutionBwdDataAlgo_t>(*algo);
    check_cudnn(cudnnGetConvolutionBackwardDataWorkspaceSize(cudnn_, p.w, p.y, p.conv, p.x, p.data_algo, &p.data_ws),
                cached_what(op));
    p.data_found = true;
  }
  const float one = 1, zero = 0;
  void* ws = scratch(Slot::kWorkspace, p.data_ws);
  check_cudnn(cudnnConvolutionBackwardData(cudnn_, &one, p.w, wp, p.y, dy.data<void>(), p.conv, p.data_algo, ws,
                                           p.data_ws, &zero, p.x, dx.data<void>()),
              op);
}

void CudaBackend::conv2d_backward_filter(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& db,
                                         const ConvGeometry& g) {
  const char* op = "conv2d_backward_filter";
  check_conv(x, dw, dy, g, op);
  require(x.dtype() == dy.dtype(), op, "x and dy differ in dtype");
  if (x.dim(0) == 0) {  // a replica without rows contributes zeros to the all-reduced gradients
    fill(dw, 0);
    if (db.defined()) fill(db, 0);
    return;
  }
  ConvPlan& p = conv_plan(x, dw, dy, g, op);
  // A float32 gradient of float16 activations is computed in half and cast.
  const bool cast = dw.dtype() != x.dtype();
  void* out = cast ? scratch(Slot::kGrad16, static_cast<size_t>(dw.numel()) * sizeof(__half)) : dw.data<void>();
  if (!p.filter_found) {
    const std::string key = conv_key("backward filter", x, dw, dy, g);
    std::optional<int64_t> algo = AlgorithmCache::instance().find(key);
    if (!algo) {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      int n = 0;
      void* ws = scratch(Slot::kWorkspace, kFindWorkspace);
      check_cudnn(cudnnFindConvolutionBackwardFilterAlgorithmEx(cudnn_, p.x, x.data<void>(), p.y, dy.data<void>(),
                                                                p.conv, p.w, out,
                                                                CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf, ws,
                                                                kFindWorkspace),
                  op);
      algo = fastest(perf, n, x.dtype(), filter_winograd, op, x, dw, key);
    }
    p.filter_algo = static_cast<cudnnConvolutionBwdFilterAlgo_t>(*algo);
    check_cudnn(cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnn_, p.x, p.y, p.conv, p.w, p.filter_algo,
                                                               &p.filter_ws),
                cached_what(op));
    p.filter_found = true;
  }
  const float one = 1, zero = 0;
  void* ws = scratch(Slot::kWorkspace, p.filter_ws);
  check_cudnn(cudnnConvolutionBackwardFilter(cudnn_, &one, p.x, x.data<void>(), p.y, dy.data<void>(), p.conv,
                                             p.filter_algo, ws, p.filter_ws, &zero, p.w, out),
              op);
  if (cast) {
    const __half* h = static_cast<const __half*>(out);
    float* f = dw.data<float>();
    for_each(
        stream(), dw.numel(), [=] __device__(int64_t i) { f[i] = __half2float(h[i]); }, op);
  }
  bias_grad(*this, dy, db, dy.dim(0), dy.dim(1), dy.dim(2) * dy.dim(3), op);
}

// ---- linear layers: row-major products through the runtime's GemmPlan (nn_gemm.h).

namespace {

void check_linear(const Tensor& x, const Tensor& w, const Tensor& y, const char* op) {
  require(x.rank() == 2 && w.rank() == 2 && y.rank() == 2 && x.dim(1) == w.dim(1) && y.dim(0) == x.dim(0) &&
              y.dim(1) == w.dim(0),
          op, "expected x [N,K], w [M,K], y [N,M]");
  require(x.dtype() == y.dtype(), op, "x and y differ in dtype");
  dispatch_act(x.dtype(), op, [](auto) {});
  require(w.dtype() == DataType::kFloat32 || w.dtype() == x.dtype(), op, "w must be float32 or of x's type");
}

}  // namespace

void CudaBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  const char* op = "linear_forward";
  check_linear(x, w, y, op);
  const int64_t n = x.dim(0), k = x.dim(1), m = w.dim(0);
  if (n == 0) return;
  require(!b.defined() || b.numel() == m, op, "the bias must be [M]");
  require_f32(b, op, "the bias");
  // cuBLASLt's bias epilogue takes a bias of D's type: fused for float32, a separate add for half.
  const bool fused_bias = b.defined() && x.dtype() == DataType::kFloat32;
  gpu::GemmDesc d;
  d.dtype = x.dtype();
  d.trans_b = true;
  d.m = n;
  d.n = m;
  d.k = k;
  d.bias = fused_bias;
  gpu::GemmPlan& plan = gemm_plan(d);
  const void* wp = weights_as(w, x.dtype(), Slot::kWeight16);
  plan.run(stream(), 0, 1.0, x.data<void>(), wp, 0.0, nullptr, y.data<void>(), fused_bias ? b.data<void>() : nullptr,
           scratch(Slot::kWorkspace, plan.workspace(0)), plan.workspace(0));
  if (!fused_bias) add_bias(y, b, n, m, 1, stream(), op);
}

void CudaBackend::linear_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx) {
  const char* op = "linear_backward_data";
  check_linear(dx, w, dy, op);
  const int64_t n = dy.dim(0), m = w.dim(0), k = w.dim(1);
  if (n == 0) return;
  gpu::GemmDesc d;
  d.dtype = dy.dtype();
  d.m = n;
  d.n = k;
  d.k = m;
  gpu::GemmPlan& plan = gemm_plan(d);
  const void* wp = weights_as(w, dy.dtype(), Slot::kWeight16);
  plan.run(stream(), 0, 1.0, dy.data<void>(), wp, 0.0, nullptr, dx.data<void>(), nullptr,
           scratch(Slot::kWorkspace, plan.workspace(0)), plan.workspace(0));
}

void CudaBackend::linear_backward_weights(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& db) {
  const char* op = "linear_backward_weights";
  check_linear(x, dw, dy, op);
  const int64_t n = x.dim(0), k = x.dim(1), m = dy.dim(1);
  if (n == 0) {
    fill(dw, 0);
    if (db.defined()) fill(db, 0);
    return;
  }
  const bool cast = dw.dtype() != x.dtype();
  void* out = cast ? scratch(Slot::kGrad16, static_cast<size_t>(dw.numel()) * sizeof(__half)) : dw.data<void>();
  gpu::GemmDesc d;  // dw [M, K] = dy^T [M, N] x [N, K]
  d.dtype = x.dtype();
  d.trans_a = true;
  d.m = m;
  d.n = k;
  d.k = n;
  gpu::GemmPlan& plan = gemm_plan(d);
  plan.run(stream(), 0, 1.0, dy.data<void>(), x.data<void>(), 0.0, nullptr, out, nullptr,
           scratch(Slot::kWorkspace, plan.workspace(0)), plan.workspace(0));
  if (cast) {
    const __half* h = static_cast<const __half*>(out);
    float* f = dw.data<float>();
    for_each(
        stream(), dw.numel(), [=] __device__(int64_t i) { f[i] = __half2float(h[i]); }, op);
  }
  bias_grad(*this, dy, db, n, m, 1, op);
}

}  // namespace kiln::train
