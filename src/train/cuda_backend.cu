// GPU training backend: the device, memory (pool, staging ring, scratch), elementwise ops,
// activations and dropout. Convolution and linear layers are in cuda_conv.cu, pooling and batch
// norm in cuda_pool_norm.cu, the loss, metrics and optimizers in cuda_loss_optim.cu.
#include <bit>
#include <cstring>
#include <limits>

#include "runtime/cuda/shared.h"
#include "train/cuda_internal.cuh"
#include "train/random.h"

namespace kiln::train {

namespace cuda_detail {

// Makes `device` current for a scope (tensors may be released on any thread).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&prev_) == cudaSuccess && prev_ != device && cudaSetDevice(device) == cudaSuccess) return;
    prev_ = -1;
  }
  ~DeviceGuard() {
    if (prev_ >= 0) cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

// The stream and memory pool, shared by the backend and every tensor it allocated, so that a
// tensor released after its backend still frees into a live pool.
struct DeviceState {
  int device = 0;
  cudaStream_t stream = nullptr;
  cudaMemPool_t pool = nullptr;

  ~DeviceState() {
    DeviceGuard g(device);
    if (stream) {
      cudaStreamSynchronize(stream);
      cudaStreamDestroy(stream);
    }
    if (pool) cudaMemPoolDestroy(pool);
  }
};

}  // namespace cuda_detail

using namespace cuda_detail;

namespace {

constexpr size_t kStagingSlots = 8;  // uploads in flight before upload() waits for the oldest

void* pool_alloc(const DeviceState& st, size_t bytes, const std::string& what) {
  void* p = nullptr;
  check_cuda(cudaMallocFromPoolAsync(&p, std::max<size_t>(bytes, 1), st.pool, st.stream),
             std::string("allocating ") + std::to_string(bytes) + " bytes on GPU " + std::to_string(st.device) +
                 " for " + what);
  return p;
}

}  // namespace

CudaBackend::CudaBackend(int device, bool fp16) : device_(device), fp16_(fp16) {
  check_cuda(cudaSetDevice(device), "selecting GPU " + std::to_string(device));
  auto st = std::make_shared<DeviceState>();
  st->device = device;
  check_cuda(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking), "creating a CUDA stream");
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  check_cuda(cudaMemPoolCreate(&st->pool, &props), "creating a CUDA memory pool");
  // Freed memory stays in the pool: steady-state steps never call the driver to allocate.
  uint64_t keep = std::numeric_limits<uint64_t>::max();
  check_cuda(cudaMemPoolSetAttribute(st->pool, cudaMemPoolAttrReleaseThreshold, &keep), "configuring the pool");
  state_ = st;
  cudaDeviceProp prop{};
  gpu_name_ = cudaGetDeviceProperties(&prop, device) == cudaSuccess ? prop.name : "GPU " + std::to_string(device);
  try {
    gpu::check_cudnn(cudnnCreate(&cudnn_), "creating a cuDNN handle");
    gpu::check_cudnn(cudnnSetStream(cudnn_, st->stream), "cudnnSetStream");
    gpu::check_cublas(cublasLtCreate(&lt_), "creating a cuBLASLt handle");
    staging_.resize(kStagingSlots);
    for (Staging& s : staging_)
      check_cuda(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming), "creating a CUDA event");
    loss_stats_ = static_cast<double*>(pool_alloc(*st, 2 * sizeof(double), "the loss statistics"));
    check_cuda(cudaMemsetAsync(loss_stats_, 0, 2 * sizeof(double), st->stream), "cudaMemsetAsync");
    if (fp16) {
      loss_scale_ = static_cast<LossScale*>(pool_alloc(*st, sizeof(LossScale), "the loss scale"));
      const LossScale initial;
      stage(&initial, loss_scale_, sizeof(LossScale));
    }
  } catch (...) {
    release();
    throw;
  }
}

CudaBackend::~CudaBackend() { release(); }

void CudaBackend::release() {
  DeviceGuard g(device_);
  cudaStream_t s = state_->stream;
  cudaStreamSynchronize(s);  // the staging buffers may still be read
  for (Staging& st : staging_) {
    if (st.host) cudaFreeHost(st.host);
    if (st.done) cudaEventDestroy(st.done);
  }
  staging_.clear();
  for (Scratch& sc : scratch_)
    if (sc.data) cudaFreeAsync(sc.data, s);
  scratch_ = {};
  for (auto& t : param_tables_) cudaFreeAsync(t->device, s);
  param_tables_.clear();
  for (void* p : {static_cast<void*>(counters_), static_cast<void*>(loss_scale_), static_cast<void*>(loss_stats_)})
    if (p) cudaFreeAsync(p, s);
  counters_ = nullptr;
  loss_scale_ = nullptr;
  loss_stats_ = nullptr;
  conv_plans_.clear();
  gemm_plans_.clear();
  if (cudnn_) cudnnDestroy(cudnn_);
  if (lt_) cublasLtDestroy(lt_);
  cudnn_ = nullptr;
  lt_ = nullptr;
}

cudaStream_t CudaBackend::stream() const { return state_->stream; }

std::string CudaBackend::name() const { return gpu_name_ + (fp16_ ? ", mixed precision (FP16)" : ""); }

// ---- memory

Tensor CudaBackend::alloc(DataType dtype, Shape shape) {
  for (int64_t d : shape) require(d >= 0, "alloc", "negative dimension in " + shape_string(shape));
  auto buf = std::make_shared<Buffer>();
  buf->bytes = std::max<size_t>(static_cast<size_t>(numel_of(shape)) * dtype_size(dtype), 1);
  buf->data = pool_alloc(*state_, buf->bytes, "a training tensor " + shape_string(shape));
  buf->device = Device::kGpu;
  buf->release = [st = state_](void* p) {
    DeviceGuard g(st->device);
    cudaFreeAsync(p, st->stream);
  };
  return Tensor(dtype, std::move(shape), std::move(buf));
}

void CudaBackend::stage(const void* host, void* device, size_t bytes) {
  if (bytes == 0) return;
  Staging& s = staging_[next_staging_++ % staging_.size()];
  if (s.pending) check_cuda(cudaEventSynchronize(s.done), "waiting for an upload to leave its staging buffer");
  if (s.capacity < bytes) {
    if (s.host) check_cuda(cudaFreeHost(s.host), "cudaFreeHost");
    s.host = nullptr;
    s.capacity = 0;
    const size_t cap = std::bit_ceil(std::max<size_t>(bytes, size_t{64} << 10));
    check_cuda(cudaHostAlloc(&s.host, cap, cudaHostAllocDefault), "allocating pinned staging memory");
    s.capacity = cap;
  }
  std::memcpy(s.host, host, bytes);
  check_cuda(cudaMemcpyAsync(device, s.host, bytes, cudaMemcpyHostToDevice, stream()), "upload to the GPU");
  check_cuda(cudaEventRecord(s.done, stream()), "cudaEventRecord");
  s.pending = true;
}

void CudaBackend::upload(const void* host, const Tensor& dst) { stage(host, dst.data<void>(), dst.bytes()); }

void CudaBackend::download(const Tensor& src, void* host) {
  if (src.bytes() > 0)  // into pageable memory: returns once the copy (after the stream's work) is done
    check_cuda(cudaMemcpyAsync(host, src.data<void>(), src.bytes(), cudaMemcpyDeviceToHost, stream()),
               "download from the GPU");
  check_cuda(cudaStreamSynchronize(stream()), "waiting for the GPU (an earlier training op failed)");
}

void* CudaBackend::device_alloc(size_t bytes, const std::string& what) { return pool_alloc(*state_, bytes, what); }

void CudaBackend::device_free(void* p) {
  if (p) cudaFreeAsync(p, stream());
}

void* CudaBackend::scratch(Slot slot, size_t bytes) {
  Scratch& s = scratch_[static_cast<size_t>(slot)];
  if (s.data && s.bytes >= bytes) return s.data;
  if (s.data) cudaFreeAsync(s.data, stream());  // stream-ordered: earlier ops still see the old one
  s.data = nullptr;
  s.bytes = 0;
  const size_t cap = std::max({bytes, 2 * s.bytes, size_t{4096}});
  s.data = pool_alloc(*state_, cap, "scratch");
  s.bytes = cap;
  return s.data;
}

unsigned* CudaBackend::counters(int64_t n) {
  if (n <= num_counters_) return counters_;
  const int64_t count = std::max<int64_t>({n, 2 * num_counters_, 1024});
  auto* fresh = static_cast<unsigned*>(pool_alloc(*state_, sizeof(unsigned) * count, "reduction counters"));
  check_cuda(cudaMemsetAsync(fresh, 0, sizeof(unsigned) * count, stream()), "cudaMemsetAsync");
  if (counters_) cudaFreeAsync(counters_, stream());
  counters_ = fresh;
  num_counters_ = count;
  return counters_;
}

void CudaBackend::join_group(const ReplicaGroup& group) {
  require(group.api && group.comm && group.size >= 1 && group.rank >= 0 && group.rank < group.size, "join_group",
          "an invalid replica group");
  group_ = group;
}

void CudaBackend::all_reduce(const void* send, void* recv, size_t count, ncclDataType_t type) {
  if (!grouped() || count == 0) return;
  group_.api->check(group_.api->all_reduce(send, recv, count, type, ncclSum, group_.comm, stream()),
                    "NCCL all-reduce on GPU " + std::to_string(device_));
}

LossScale CudaBackend::loss_scale() {
  LossScale s;
  if (!loss_scale_) return s;
  check_cuda(cudaMemcpyAsync(&s, loss_scale_, sizeof s, cudaMemcpyDeviceToHost, stream()), "reading the loss scale");
  check_cuda(cudaStreamSynchronize(stream()), "waiting for the GPU");
  return s;
}

gpu::GemmPlan& CudaBackend::gemm_plan(const gpu::GemmDesc& d) {
  std::vector<int64_t> key = {static_cast<int64_t>(d.dtype), d.trans_a, d.trans_b, d.m, d.n, d.k, d.bias};
  auto it = gemm_plans_.find(key);
  if (it != gemm_plans_.end()) return *it->second;
  auto plan = std::make_unique<gpu::GemmPlan>(lt_, d);
  if (plan->algo_count() == 0)
    throw Error("linear layer: cuBLASLt has no algorithm for a " + std::to_string(d.m) + "x" + std::to_string(d.k) +
                " by " + std::to_string(d.k) + "x" + std::to_string(d.n) + " product");
  return *gemm_plans_.emplace(std::move(key), std::move(plan)).first->second;
}

// ---- elementwise

namespace {

__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ float widen(__half v) { return __half2float(v); }
__device__ __forceinline__ double widen(double v) { return v; }
template <class D>
__device__ __forceinline__ D from_double(double v) {
  return static_cast<D>(v);
}
template <>
__device__ __forceinline__ __half from_double<__half>(double v) {
  return __float2half_rn(static_cast<float>(v));
}

// Through double, which holds every value of the three types; one rounding to the destination
// (double to half rounds twice, through float).
template <class S, class D>
void cast_n(const S* src, D* dst, int64_t n, cudaStream_t s) {
  for_each(
      s, n, [=] __device__(int64_t i) { dst[i] = from_double<D>(widen(src[i])); }, "cast");
}

// Calls fn(T{}) for float32, float16 and float64.
template <class Fn>
void dispatch_cast(DataType t, const char* op, Fn&& fn) {
  if (t == DataType::kFloat64) return fn(double{});
  dispatch_act(t, op, fn);
}

template <class T, class V>
void fill_n(T* p, int64_t n, V v, cudaStream_t s) {
  for_each(
      s, n, [=] __device__(int64_t i) { p[i] = v; }, "fill");
}

// y = op(a, b) elementwise, in float.
template <class T, class Op>
void binary(const Tensor& a, const Tensor& b, const Tensor& y, cudaStream_t s, Op op, const char* name) {
  const T *pa = a.data<T>(), *pb = b.data<T>();
  T* py = y.data<T>();
  for_each(
      s, a.numel(), [=] __device__(int64_t i) { st(py, i, op(ld(pa, i), ld(pb, i))); }, name);
}

struct Plus {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Times {
  __device__ float operator()(float a, float b) const { return a * b; }
};

}  // namespace

void CudaBackend::fill(const Tensor& t, double value) {
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DataType::kFloat32: return fill_n(t.data<float>(), n, static_cast<float>(value), stream());
    case DataType::kFloat16: return fill_n(t.data<__half>(), n, __float2half_rn(static_cast<float>(value)), stream());
    case DataType::kFloat64: return fill_n(t.data<double>(), n, value, stream());
    case DataType::kInt32: return fill_n(t.data<int32_t>(), n, static_cast<int32_t>(value), stream());
    default: require(false, "fill", "unsupported dtype " + std::string(dtype_name(t.dtype())));
  }
}

void CudaBackend::copy(const Tensor& src, const Tensor& dst) {
  require_same(src, dst, "copy");
  if (src.same_memory(dst) || src.bytes() == 0) return;
  check_cuda(cudaMemcpyAsync(dst.data<void>(), src.data<void>(), src.bytes(), cudaMemcpyDeviceToDevice, stream()),
             "copy");
}

void CudaBackend::cast(const Tensor& src, const Tensor& dst) {
  require(src.numel() == dst.numel(), "cast", "element counts differ");
  dispatch_cast(src.dtype(), "cast", [&](auto s) {
    dispatch_cast(dst.dtype(), "cast", [&](auto d) {
      using S = decltype(s);
      using D = decltype(d);
      cast_n(src.data<S>(), dst.data<D>(), src.numel(), stream());
    });
  });
}

const void* CudaBackend::weights_as(const Tensor& w, DataType dtype, Slot slot) {
  if (w.dtype() == dtype) return w.data<void>();
  require(w.dtype() == DataType::kFloat32 && dtype == DataType::kFloat16, "weights",
          "weights must be float32 or of the activations' type");
  auto* half = static_cast<__half*>(scratch(slot, static_cast<size_t>(w.numel()) * sizeof(__half)));
  cast_n(w.data<float>(), half, w.numel(), stream());
  return half;
}

void CudaBackend::add(const Tensor& a, const Tensor& b, const Tensor& y) {
  require_same(a, b, "add");
  require_same(a, y, "add");
  dispatch_act(a.dtype(), "add", [&](auto t) { binary<decltype(t)>(a, b, y, stream(), Plus{}, "add"); });
}

void CudaBackend::mul(const Tensor& a, const Tensor& b, const Tensor& y) {
  require_same(a, b, "mul");
  require_same(a, y, "mul");
  dispatch_act(a.dtype(), "mul", [&](auto t) { binary<decltype(t)>(a, b, y, stream(), Times{}, "mul"); });
}

namespace {

// Copies between y [N, sum of C_i, ...] and the parts xs [N, C_i, ...] along axis 1, one 2-D copy
// per part (N rows of the part's bytes).
void concat_copy(std::span<const Tensor> xs, const Tensor& y, bool to_y, cudaStream_t s) {
  const int64_t n = y.dim(0);
  const size_t row = n > 0 ? y.bytes() / static_cast<size_t>(n) : 0;
  size_t offset = 0;
  for (const Tensor& x : xs) {
    require(x.dim(0) == n && x.dtype() == y.dtype(), "concat", "parts differ from the output in batch or dtype");
    const size_t part = n > 0 ? x.bytes() / static_cast<size_t>(n) : 0;
    char* yp = y.data<char>() + offset;
    if (n > 0 && part > 0)
      check_cuda(to_y ? cudaMemcpy2DAsync(yp, row, x.data<void>(), part, part, n, cudaMemcpyDeviceToDevice, s)
                      : cudaMemcpy2DAsync(x.data<void>(), part, yp, row, part, n, cudaMemcpyDeviceToDevice, s),
                 to_y ? "concat" : "split");
    offset += part;
  }
  require(n == 0 || offset == row, "concat", "the parts' sizes do not add up to the output's");
}

}  // namespace

void CudaBackend::concat(std::span<const Tensor> xs, const Tensor& y) { concat_copy(xs, y, true, stream()); }

void CudaBackend::split(const Tensor& y, std::span<const Tensor> xs) { concat_copy(xs, y, false, stream()); }

// ---- activations and dropout

namespace {

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;  // 1 / sqrt(2 pi), the Gaussian density's constant

struct ReluF {
  float alpha;
  __device__ float operator()(float v) const { return v > 0 ? v : 0.0f; }
};
struct LeakyF {
  float alpha;
  __device__ float operator()(float v) const { return v > 0 ? v : alpha * v; }
};
struct SigmoidF {
  float alpha;
  __device__ float operator()(float v) const { return 1.0f / (1.0f + expf(-v)); }
};
struct TanhF {
  float alpha;
  __device__ float operator()(float v) const { return tanhf(v); }
};
struct GeluF {
  float alpha;
  __device__ float operator()(float v) const { return 0.5f * v * (1.0f + erff(v * kInvSqrt2)); }
};

// Backward functors: (x, y, dy) -> dx.
struct ReluB {
  float alpha;
  __device__ float operator()(float x, float, float g) const { return x > 0 ? g : 0.0f; }
};
struct LeakyB {
  float alpha;
  __device__ float operator()(float x, float, float g) const { return x > 0 ? g : alpha * g; }
};
struct SigmoidB {
  float alpha;
  __device__ float operator()(float, float y, float g) const { return g * y * (1.0f - y); }
};
struct TanhB {
  float alpha;
  __device__ float operator()(float, float y, float g) const { return g * (1.0f - y * y); }
};
struct GeluB {
  float alpha;
  __device__ float operator()(float x, float, float g) const {
    const float cdf = 0.5f * (1.0f + erff(x * kInvSqrt2));
    return g * (cdf + x * kInvSqrt2Pi * expf(-0.5f * x * x));
  }
};

template <class T, class F>
void map1(const Tensor& x, const Tensor& y, F f, cudaStream_t s) {
  const T* px = x.data<T>();
  T* py = y.data<T>();
  for_each(
      s, x.numel(), [=] __device__(int64_t i) { st(py, i, f(ld(px, i))); }, "activation_forward");
}

template <class T, class F>
void map3(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx, F f, cudaStream_t s) {
  const T *px = x.data<T>(), *py = y.data<T>(), *pg = dy.data<T>();
  T* pd = dx.data<T>();
  for_each(
      s, x.numel(), [=] __device__(int64_t i) { st(pd, i, f(ld(px, i), ld(py, i), ld(pg, i))); },
      "activation_backward");
}

template <class T>
void dropout_n(const T* x, T* mask, T* y, int64_t n, float p, float keep, uint64_t key, uint64_t first,
               cudaStream_t s) {
  for_each(
      s, n,
      [=] __device__(int64_t i) {
        const float m = dropout_uniform(key, first + static_cast<uint64_t>(i)) < p ? 0.0f : keep;
        st(mask, i, m);
        st(y, i, ld(x, i) * ld(mask, i));
      },
      "dropout_forward");
}

}  // namespace

void CudaBackend::activation_forward(Activation a, float alpha, const Tensor& x, const Tensor& y) {
  require_same(x, y, "activation_forward");
  dispatch_act(x.dtype(), "activation_forward", [&](auto t) {
    using T = decltype(t);
    switch (a) {
      case Activation::kRelu: return map1<T>(x, y, ReluF{alpha}, stream());
      case Activation::kLeakyRelu: return map1<T>(x, y, LeakyF{alpha}, stream());
      case Activation::kSigmoid: return map1<T>(x, y, SigmoidF{alpha}, stream());
      case Activation::kTanh: return map1<T>(x, y, TanhF{alpha}, stream());
      case Activation::kGelu: return map1<T>(x, y, GeluF{alpha}, stream());
    }
  });
}

void CudaBackend::activation_backward(Activation a, float alpha, const Tensor& x, const Tensor& y, const Tensor& dy,
                                      const Tensor& dx) {
  require_same(x, dy, "activation_backward");
  require_same(x, dx, "activation_backward");
  require_same(x, y, "activation_backward");
  dispatch_act(x.dtype(), "activation_backward", [&](auto t) {
    using T = decltype(t);
    switch (a) {
      case Activation::kRelu: return map3<T>(x, y, dy, dx, ReluB{alpha}, stream());
      case Activation::kLeakyRelu: return map3<T>(x, y, dy, dx, LeakyB{alpha}, stream());
      case Activation::kSigmoid: return map3<T>(x, y, dy, dx, SigmoidB{alpha}, stream());
      case Activation::kTanh: return map3<T>(x, y, dy, dx, TanhB{alpha}, stream());
      case Activation::kGelu: return map3<T>(x, y, dy, dx, GeluB{alpha}, stream());
    }
  });
}

void CudaBackend::dropout_forward(const Tensor& x, const Tensor& mask, const Tensor& y, float p, uint64_t key,
                                  uint64_t first) {
  require_same(x, mask, "dropout_forward");
  require_same(x, y, "dropout_forward");
  require(p >= 0 && p < 1, "dropout_forward", "p must be in [0, 1)");
  // The CPU's keep factor: 1 / (1 - p) in double, rounded once to the element type.
  const float keep = static_cast<float>(1.0 / (1.0 - p));
  dispatch_act(x.dtype(), "dropout_forward", [&](auto t) {
    using T = decltype(t);
    dropout_n(x.data<T>(), mask.data<T>(), y.data<T>(), x.numel(), p, keep, key, first, stream());
  });
}

}  // namespace kiln::train
