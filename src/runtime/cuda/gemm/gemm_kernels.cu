// The GEMM family's own kernels (declared in nn_internal.cuh): the tiled product (the integer
// types, and float products cuBLASLt has no algorithm for) and the broadcast of Gemm's C.
#include <cmath>
#include <limits>
#include <type_traits>

#include "runtime/cuda/elementwise/elementwise_internal.cuh"
#include "runtime/cuda/nn_internal.cuh"

namespace kiln::gpu::nn {

namespace {

// y [m, n] = scale * C broadcast (C element (i, j) at i * crs + j * ccs), in T's compute type.
template <class T, class S>
__global__ void broadcast_c_kernel(const T* __restrict__ c, T* __restrict__ y, int64_t m, int64_t n, int64_t crs,
                                   int64_t ccs, S scale) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x, total = m * n;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t r = i / n, col = i - r * n;
    y[i] = ew::store<T>(scale * static_cast<S>(ew::load(c[r * crs + col * ccs])));
  }
}

// The tiled kernel's arithmetic type: integer products wrap (computed unsigned, as on the CPU);
// float16, bfloat16 and float32 accumulate in float, float64 in double.
template <class T>
struct AccOf {
  using type = std::make_unsigned_t<T>;
};
template <>
struct AccOf<__half> {
  using type = float;
};
template <>
struct AccOf<__nv_bfloat16> {
  using type = float;
};
template <>
struct AccOf<float> {
  using type = float;
};
template <>
struct AccOf<double> {
  using type = double;
};
template <class T>
using Acc = typename AccOf<T>::type;

template <class T>
struct TiledGemmArgs {
  int64_t m, n, k, lda, ldb;
  bool ta, tb, use_c;
  Acc<T> alpha, beta;
  int64_t crs, ccs;  // C element (i, j) at i * crs + j * ccs
  int64_t batches;
  BatchDims batch;
};

template <class T>
__device__ __forceinline__ Acc<T> to_acc(T v) {
  return static_cast<Acc<T>>(ew::load(v));
}

// The integer products, and the float ones where cuBLASLt has no algorithm: 16x16 output tiles
// per block, K in steps of 16 through shared memory; grid-stride over tiles and batches (gridDim.y
// and .z stop at 65535).
constexpr int kTile = 16;

template <class T>
__global__ void tiled_gemm_kernel(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ c,
                                  T* __restrict__ y, TiledGemmArgs<T> p) {
  using U = Acc<T>;
  __shared__ U as[kTile][kTile + 1], bs[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t bz = blockIdx.z; bz < p.batches; bz += gridDim.z) {
    int64_t a_off = 0, b_off = 0, rest = bz;
    for (int d = p.batch.rank - 1; d >= 0; --d) {
      const int64_t idx = rest % p.batch.dims[d];
      rest /= p.batch.dims[d];
      a_off += idx * p.batch.sa[d];
      b_off += idx * p.batch.sb[d];
    }
    T* yb = y + bz * p.m * p.n;
    for (int64_t ti = blockIdx.y; ti * kTile < p.m; ti += gridDim.y) {
      for (int64_t tj = blockIdx.x; tj * kTile < p.n; tj += gridDim.x) {
        const int64_t i = ti * kTile + ty, j = tj * kTile + tx;
        U acc = 0;
        for (int64_t k0 = 0; k0 < p.k; k0 += kTile) {
          const int64_t qa = k0 + tx, qb = k0 + ty;
          as[ty][tx] = i < p.m && qa < p.k ? to_acc(a[a_off + (p.ta ? qa * p.lda + i : i * p.lda + qa)]) : U(0);
          bs[ty][tx] = j < p.n && qb < p.k ? to_acc(b[b_off + (p.tb ? j * p.ldb + qb : qb * p.ldb + j)]) : U(0);
          __syncthreads();
#pragma unroll
          for (int q = 0; q < kTile; ++q) acc += as[ty][q] * bs[q][tx];
          __syncthreads();
        }
        if (i < p.m && j < p.n) {
          U v = p.alpha * acc;
          if (p.use_c) v += p.beta * to_acc(c[i * p.crs + j * p.ccs]);
          yb[i * p.n + j] = ew::store<T>(v);
        }
      }
    }
  }
}

template <class T>
void launch_tiled_gemm(const void* a, const void* b, const void* c, void* y, const TiledGemmArgs<T>& p,
                       cudaStream_t stream) {
  const int64_t tm = (p.m + kTile - 1) / kTile, tn = (p.n + kTile - 1) / kTile;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(tn, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(tm, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(p.batches, 65535)));
  tiled_gemm_kernel<T><<<grid, dim3(kTile, kTile), 0, stream>>>(static_cast<const T*>(a), static_cast<const T*>(b),
                                                                static_cast<const T*>(c), static_cast<T*>(y), p);
}

// The CPU's float attribute -> integer multiplier: truncated, saturated to T, NaN -> 0.
template <class T>
Acc<T> int_scalar(float f) {
  if (std::isnan(f)) return 0;
  const double lo = static_cast<double>(std::numeric_limits<T>::lowest());
  const double hi = static_cast<double>(std::numeric_limits<T>::max());
  const double v = std::trunc(static_cast<double>(f));
  if (v <= lo) return static_cast<Acc<T>>(std::numeric_limits<T>::lowest());
  if (v >= hi) return static_cast<Acc<T>>(std::numeric_limits<T>::max());
  return static_cast<Acc<T>>(static_cast<T>(v));
}

// The float types and the integer types of Gemm and MatMul (shape inference's, the CPU's).
template <class Fn>
void dispatch_gemm(DataType t, const char* op, Fn&& fn) {
  switch (t) {
    case DataType::kFloat32: return fn(Tag<float>{});
    case DataType::kFloat16: return fn(Tag<__half>{});
    case DataType::kBFloat16: return fn(Tag<__nv_bfloat16>{});
    case DataType::kFloat64: return fn(Tag<double>{});
    case DataType::kInt32: return fn(Tag<int32_t>{});
    case DataType::kInt64: return fn(Tag<int64_t>{});
    case DataType::kUInt32: return fn(Tag<uint32_t>{});
    case DataType::kUInt64: return fn(Tag<uint64_t>{});
    default: ew::throw_gpu_dtype(t, op);
  }
}

}  // namespace

void tiled_gemm(const TiledGemm& g, DataType dt, const void* a, const void* b, const void* c, void* y,
                cudaStream_t stream, const char* op) {
  if (g.m == 0 || g.n == 0 || g.batches == 0) return;
  dispatch_gemm(dt, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    TiledGemmArgs<T> p{};
    p.m = g.m;
    p.n = g.n;
    p.k = g.k;
    p.lda = g.lda;
    p.ldb = g.ldb;
    p.ta = g.ta;
    p.tb = g.tb;
    p.use_c = g.use_c;
    if constexpr (std::is_integral_v<T>) {
      p.alpha = int_scalar<T>(g.alpha);
      p.beta = int_scalar<T>(g.beta);
    } else {
      p.alpha = static_cast<Acc<T>>(g.alpha);
      p.beta = static_cast<Acc<T>>(g.beta);
    }
    p.crs = g.crs;
    p.ccs = g.ccs;
    p.batches = g.batches;
    p.batch = g.batch;
    launch_tiled_gemm<T>(a, b, c, y, p, stream);
  });
  check_launch(op);
}

void broadcast_c(const void* c, void* y, int64_t m, int64_t n, int64_t crs, int64_t ccs, float scale, DataType dt,
                 cudaStream_t stream, const char* op) {
  if (m * n == 0) return;
  auto launch = [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
    broadcast_c_kernel<T, S><<<ew::blocks_for(m * n), ew::kThreads, 0, stream>>>(
        static_cast<const T*>(c), static_cast<T*>(y), m, n, crs, ccs, static_cast<S>(scale));
  };
  ew::dispatch_ew_float(dt, op, launch);
  check_launch(op);
}

}  // namespace kiln::gpu::nn
