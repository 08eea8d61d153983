// GlobalAveragePool and GlobalMaxPool on the GPU: one reduction per [N, C] plane. Planes up to 64
// elements are staged through shared memory (global_tile_kernel), planes up to kGroupMax elements
// take a warp each, longer ones a block each (float64 planes never take the tile: 64 KiB of doubles).
// Sums are float (the CPU sums in double, so the last bits may differ), double for float64; the
// maximum is exact: NaN wins, then the larger value, then the lower index, which is the CPU's
// sequential rule (the first maximum stays, so max(-0, +0) is -0) made order-independent. Every
// float type, as on the CPU.
#include "runtime/cuda/pool/pool_internal.cuh"

namespace kiln::gpu::pool {

namespace {

constexpr int64_t kGroupMax = 4096;
constexpr int64_t kNoIndex = std::numeric_limits<int64_t>::max();

// Does (v, i) come before (bv, bi) in the max order above? F: float or double.
template <class F>
__device__ __forceinline__ bool beats(F v, int64_t i, F bv, int64_t bi) {
  const bool vn = v != v, bn = bv != bv;
  if (vn || bn) return vn && (!bn || i < bi);
  return v > bv || (v == bv && i < bi);
}

template <int G, class F>
__device__ __forceinline__ void group_max(F& v, int64_t& i) {
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) {
    const F ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (beats(ov, oi, v, i)) v = ov, i = oi;
  }
}

// One thread's share of a plane: elements lane, lane + step, ... of xr.
template <class T, bool kAvg, class F>
__device__ __forceinline__ void partial(const T* xr, int64_t len, int64_t lane, int64_t step, F& acc, int64_t& arg) {
  for (int64_t i = lane; i < len; i += step) {
    const F v = load(xr[i]);
    if constexpr (kAvg) {
      acc += v;
    } else if (beats(v, i, acc, arg)) {
      acc = v;
      arg = i;
    }
  }
}

template <class T, bool kAvg, int G>
__global__ void __launch_bounds__(kThreads)
    global_group_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t len) {
  constexpr int kRows = kThreads / G;
  const int lane = threadIdx.x % G;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRows + threadIdx.x / G;
  using F = FloatAcc<T>;
  F acc = kAvg ? F(0) : -F(INFINITY);
  int64_t arg = kNoIndex;
  if (row < rows) partial<T, kAvg>(x + row * len, len, lane, G, acc, arg);
  // Every lane reaches the shuffles, also those past the last row.
  if constexpr (kAvg)
    acc = group_sum<G>(acc);
  else
    group_max<G>(acc, arg);
  if (row < rows && lane == 0) y[row] = store<T>(kAvg ? acc / static_cast<F>(len) : acc);
}

template <class T, bool kAvg>
__global__ void __launch_bounds__(kThreads)
    global_block_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t len) {
  using F = FloatAcc<T>;
  __shared__ F sv[32];
  __shared__ int64_t si[32];
  const int64_t row = blockIdx.x;
  F acc = kAvg ? F(0) : -F(INFINITY);
  int64_t arg = kNoIndex;
  partial<T, kAvg>(x + row * len, len, threadIdx.x, blockDim.x, acc, arg);
  if constexpr (kAvg) {
    acc = block_sum(acc, sv);
  } else {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    group_max<32>(acc, arg);
    if (lane == 0) sv[warp] = acc, si[warp] = arg;
    __syncthreads();
    if (warp == 0) {
      acc = lane < static_cast<int>(blockDim.x >> 5) ? sv[lane] : -F(INFINITY);
      arg = lane < static_cast<int>(blockDim.x >> 5) ? si[lane] : kNoIndex;
      group_max<32>(acc, arg);
    }
  }
  if (threadIdx.x == 0) y[row] = store<T>(kAvg ? acc / static_cast<F>(len) : acc);
}

// Short planes (ResNet's and MobileNet's 7 x 7): a block copies the kTileRows planes it owns, one
// contiguous span, into shared memory with 16-byte loads, then one thread reduces each plane. A
// thread starts its plane at element t % len when len is even, so that the threads of a warp read
// different banks (odd lengths are conflict-free in order).
constexpr int kTileRows = 128;
constexpr int kTileMaxLen = 64;

template <class T, bool kAvg>
__global__ void __launch_bounds__(kThreads)
    global_tile_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int len) {
  constexpr int V = ew::kVecBytes / sizeof(T);
  using VecT = ew::Vec<T, V>;
  __shared__ __align__(16) unsigned char raw[(kTileRows * kTileMaxLen + V) * sizeof(T)];
  T* tile = reinterpret_cast<T*>(raw);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kTileRows;
  const int nrows = static_cast<int>(rows - row0 < kTileRows ? rows - row0 : kTileRows);
  const int count = nrows * len;
  const T* src = x + row0 * len;
  // src[i] goes to tile[shift + i]: the 16-byte-aligned body of src lands 16-byte aligned.
  const int head = min(count, static_cast<int>(((16 - (reinterpret_cast<uintptr_t>(src) & 15)) & 15) / sizeof(T)));
  const int shift = (V - head % V) % V;
  for (int i = threadIdx.x; i < head; i += blockDim.x) tile[shift + i] = src[i];
  const int nvec = (count - head) / V;
  const auto* vs = reinterpret_cast<const VecT*>(src + head);
  auto* vt = reinterpret_cast<VecT*>(tile + shift + head);
#pragma unroll 4
  for (int i = threadIdx.x; i < nvec; i += blockDim.x) vt[i] = vs[i];
  for (int i = head + nvec * V + threadIdx.x; i < count; i += blockDim.x) tile[shift + i] = src[i];
  __syncthreads();
  const int t = threadIdx.x;
  if (t >= nrows) return;
  const T* r = tile + shift + t * len;
  float acc = kAvg ? 0.0f : -INFINITY;
  int64_t arg = kNoIndex;
  int j = len % 2 == 0 ? t % len : 0;
  for (int i = 0; i < len; ++i) {
    const float v = load(r[j]);
    if constexpr (kAvg) {
      acc += v;
    } else if (beats(v, j, acc, arg)) {
      acc = v;
      arg = j;
    }
    if (++j == len) j = 0;
  }
  y[row0 + t] = store<T>(kAvg ? acc / static_cast<float>(len) : acc);
}

template <class T, bool kAvg>
void launch_global(const T* x, T* y, int64_t rows, int64_t len, cudaStream_t s) {
  if constexpr (sizeof(T) <= 4) {
    if (len <= kTileMaxLen) {
      global_tile_kernel<T, kAvg><<<static_cast<unsigned>((rows + kTileRows - 1) / kTileRows), kThreads, 0, s>>>(
          x, y, rows, static_cast<int>(len));
      return;
    }
  }
  if (len > kGroupMax) {
    global_block_kernel<T, kAvg><<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, y, len);
    return;
  }
  // Longer planes than a tile: a warp each.
  const auto blocks = static_cast<unsigned>((rows + kThreads / 32 - 1) / (kThreads / 32));
  global_group_kernel<T, kAvg, 32><<<blocks, kThreads, 0, s>>>(x, y, rows, len);
}

void global_pool_gpu(OpKind kind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                     GpuEnv& env) {
  const TensorView &X = in[0], &Y = out[0];
  const char* name = ew::name_of(kind);
  const int64_t rows = X.shape[0] * X.shape[1];
  if (rows == 0) return;
  const int64_t len = X.numel() / rows;  // shape inference rejects empty planes
  if (rows >= (int64_t{1} << 31)) throw Error(std::string(name) + ": too many planes for the CUDA backend");
  ew::dispatch_ew_float(X.dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto* x = static_cast<const T*>(X.data);
    auto* y = static_cast<T*>(Y.data);
    if (kind == OpKind::kGlobalAveragePool)
      launch_global<T, true>(x, y, rows, len, env.stream);
    else
      launch_global<T, false>(x, y, rows, len, env.stream);
    check_launch(name);
  });
}

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kGlobalAveragePool, global_pool_gpu},
    {OpKind::kGlobalMaxPool, global_pool_gpu},
};

}  // namespace

std::span<const GpuKernelEntry> global_entries() { return kEntries; }

}  // namespace kiln::gpu::pool
