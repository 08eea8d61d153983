// Softmax, LogSoftmax and Hardmax on the GPU, with the CPU kernels' formulas
// (runtime/cpu/reduce/softmax.cpp): m = max (NaN if any NaN), softmax = exp(x - m) * (1 / sum),
// log-softmax = (x - m) - log(sum), hardmax = 1 at the first maximum (the first NaN if any). Sums
// are float (the CPU: double), or double for float64. coerce_2d (pre-opset-13 semantics) flattens
// the dims from the axis on into one.
// Two kernels:
//  - rows: the axis is the last dim (inner == 1) and at most 8192 long. Each row is read once into
//    registers and written once: a power-of-two group of threads up to a warp per row (several
//    rows per block when short), or a block per row for long rows, or when there are too few rows
//    to fill the GPU with warps ([N, 1000] logits at small N); 16-byte loads and stores when every
//    row is 16-byte aligned (attention [B, H, S, S] with S a multiple of 8).
//  - lines: anything else. A group of G threads per line (a block for long rows, a warp for
//    medium ones, a thread per line when the axis is not the innermost dim, so neighbouring
//    threads read neighbouring addresses); three passes over the line (max, sum, write), the
//    later ones mostly from cache. Hardmax always takes this one.
// float32, float16, bfloat16, float64 (the CPU kernel's types).
#include <cmath>

#include "runtime/cuda/reduce/reduce_internal.cuh"

namespace kiln::gpu::red {

namespace {

enum class Mode { kSoftmax, kLogSoftmax, kHardmax };

// Max that keeps a NaN (the CPU's `greater`): commutative up to which NaN. F is float or double.
template <class F>
__device__ __forceinline__ F max_nan(F a, F b) {
  return (b > a || (b != b && a == a)) ? b : a;
}

template <class F>
struct MaxNanOp {
  using Acc = F;
  __device__ F init() const { return -INFINITY; }
  __device__ void merge(F& a, const F& b) const { a = max_nan(a, b); }
};

template <class F>
struct FloatSumOp {
  using Acc = F;
  __device__ F init() const { return F(0); }
  __device__ void merge(F& a, const F& b) const { a += b; }
};

template <class F>
struct FirstMaxAcc {
  F v;
  int pad;
  int64_t i;
};
template <class F>
struct FirstMaxOp {
  using Acc = FirstMaxAcc<F>;
  __device__ Acc init() const { return {F(0), 0, -1}; }
  __device__ void merge(Acc& a, const Acc& b) const {
    if (arg_beats<true, false>(b.v, b.i, a.v, a.i)) a = b;
  }
};

// TPR threads per row (a power of two up to a warp, several rows per 128-thread block; or kBlock,
// a block per row), each holding K elements in registers. kVec: every row starts 16-byte aligned,
// so each thread loads V neighbouring elements at once; element e of thread t's chunk c is then
// (c * TPR + t) * V + e, else element k is k * TPR + t.
template <class T, Mode M, int TPR, int K, bool kVec>
__global__ void __launch_bounds__(TPR > 32 ? TPR : 128)
    softmax_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int len) {
  constexpr int kThreads = TPR > 32 ? TPR : 128;
  constexpr int kRows = kThreads / TPR;
  constexpr int V = kVec ? ew::kVecWidth<T> : 1;
  static_assert(K % V == 0, "whole vectors per thread");
  using F = FloatAcc<T>;
  const int lane = static_cast<int>(threadIdx.x) % TPR;
  auto index = [&](int k) { return ((k / V) * TPR + lane) * V + k % V; };
  for (int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRows; r0 < rows;
       r0 += static_cast<int64_t>(gridDim.x) * kRows) {
    // Every thread takes part in the reductions; rows past the end only skip loads and stores.
    const int64_t row = r0 + threadIdx.x / TPR;
    const bool valid = row < rows;
    const T* xr = x + (valid ? row : 0) * len;
    T* yr = y + (valid ? row : 0) * len;
    F v[K];
#pragma unroll
    for (int c = 0; c < K / V; ++c) {
      const int i0 = index(c * V);
      if (valid && i0 < len) {  // kVec: len % V == 0, so the whole vector is in the row
        const ew::Vec<T, V> q = *reinterpret_cast<const ew::Vec<T, V>*>(xr + i0);
#pragma unroll
        for (int e = 0; e < V; ++e) v[c * V + e] = load(q.v[e]);
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e) v[c * V + e] = -INFINITY;
      }
    }
    F m = -INFINITY;
#pragma unroll
    for (int k = 0; k < K; ++k) m = max_nan(m, v[k]);
    if constexpr (TPR > 32) {
      m = group_allreduce<TPR>(m, MaxNanOp<F>{});
    } else {
#pragma unroll
      for (int off = TPR / 2; off >= 1; off >>= 1) m = max_nan(m, __shfl_xor_sync(0xffffffffu, m, off, TPR));
    }
    F sum = 0;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (index(k) < len) {
        const F e = exp(v[k] - m);
        sum += e;
        if constexpr (M == Mode::kSoftmax) v[k] = e;
      }
    }
    if constexpr (TPR > 32) {
      sum = group_allreduce<TPR>(sum, FloatSumOp<F>{});
    } else {
#pragma unroll
      for (int off = TPR / 2; off >= 1; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off, TPR);
    }
    if (!valid) continue;
    const F f = M == Mode::kSoftmax ? F(1) / sum : log(sum);
#pragma unroll
    for (int c = 0; c < K / V; ++c) {
      const int i0 = index(c * V);
      if (i0 >= len) continue;
      ew::Vec<T, V> q;
#pragma unroll
      for (int e = 0; e < V; ++e) q.v[e] = store<T>(M == Mode::kSoftmax ? v[c * V + e] * f : (v[c * V + e] - m) - f);
      *reinterpret_cast<ew::Vec<T, V>*>(yr + i0) = q;
    }
  }
}

template <class T, Mode M, int G>
__global__ void __launch_bounds__(kBlock)
    softmax_lines_kernel(const T* __restrict__ x, T* __restrict__ y, AxisSplit s) {
  using F = FloatAcc<T>;
  constexpr int kGroups = kBlock / G;
  const int t = static_cast<int>(threadIdx.x) % G;
  const int64_t lines = s.outer * s.inner;
  for (int64_t l0 = static_cast<int64_t>(blockIdx.x) * kGroups; l0 < lines;
       l0 += static_cast<int64_t>(gridDim.x) * kGroups) {
    const int64_t line = l0 + threadIdx.x / G;
    if (line >= lines) continue;  // G == 1 only
    const int64_t o = line / s.inner, j = line - o * s.inner;
    const T* xl = x + o * s.len * s.inner + j;
    T* yl = y + o * s.len * s.inner + j;
    const int64_t st = s.inner;
    if constexpr (M == Mode::kHardmax) {
      FirstMaxAcc<F> a{F(0), 0, -1};
      for (int64_t i = t; i < s.len; i += G) {
        const F v = load(xl[i * st]);
        if (arg_beats<true, false>(v, i, a.v, a.i)) a = {v, 0, i};
      }
      a = group_allreduce<G>(a, FirstMaxOp<F>{});
      for (int64_t i = t; i < s.len; i += G) yl[i * st] = store<T>(i == a.i ? F(1) : F(0));
    } else {
      F m = -INFINITY;
      for (int64_t i = t; i < s.len; i += G) m = max_nan(m, static_cast<F>(load(xl[i * st])));
      m = group_allreduce<G>(m, MaxNanOp<F>{});
      F sum = 0;
      for (int64_t i = t; i < s.len; i += G) sum += exp(static_cast<F>(load(xl[i * st])) - m);
      sum = group_allreduce<G>(sum, FloatSumOp<F>{});
      const F f = M == Mode::kSoftmax ? F(1) / sum : log(sum);
      for (int64_t i = t; i < s.len; i += G) {
        const F v = load(xl[i * st]);
        yl[i * st] = store<T>(M == Mode::kSoftmax ? exp(v - m) * f : (v - m) - f);
      }
    }
  }
}

// The vector form when every row is 16-byte aligned and K holds whole vectors.
template <class T, Mode M, int TPR, int K>
void launch_rows(const T* x, T* y, int64_t rows, int len, GpuEnv& env) {
  constexpr int kThreads = TPR > 32 ? TPR : 128;
  const unsigned grid = grid_for(rows, kThreads / TPR);
  constexpr int V = ew::kVecWidth<T>;
  const bool vec = len % V == 0 && ew::aligned_to(x, 16) && ew::aligned_to(y, 16);
  if constexpr (K % V == 0) {
    if (vec) {
      softmax_rows_kernel<T, M, TPR, K, true><<<grid, kThreads, 0, env.stream>>>(x, y, rows, len);
      return;
    }
  }
  softmax_rows_kernel<T, M, TPR, K, false><<<grid, kThreads, 0, env.stream>>>(x, y, rows, len);
}

// Rows up to kMaxRowLen long: a warp per row (fewer threads for short rows), or a block per row
// when the rows are long or too few to give every SM several warps.
constexpr int kMaxRowLen = 8192;

template <class T, Mode M>
void launch_rows_for(const T* x, T* y, int64_t rows, int n, GpuEnv& env) {
  constexpr int V = ew::kVecWidth<T>;
  const bool block = n > 1024 || (n >= 512 && rows < 2048);
  if (block) {
    if (n <= 1024)
      launch_rows<T, M, kBlock, 4>(x, y, rows, n, env);
    else if (n <= 2048)
      launch_rows<T, M, kBlock, 8>(x, y, rows, n, env);
    else if (n <= 4096)
      launch_rows<T, M, kBlock, 16>(x, y, rows, n, env);
    else
      launch_rows<T, M, kBlock, 32>(x, y, rows, n, env);
  } else if (n > 32 && n <= 32 * V && n % V == 0 && ew::aligned_to(x, 16) && ew::aligned_to(y, 16)) {
    // One vector per thread: fewer threads per row than the scalar form (S = 128 attention rows).
    const int chunks = n / V;
    if (chunks <= 8)
      launch_rows<T, M, 8, V>(x, y, rows, n, env);
    else if (chunks <= 16)
      launch_rows<T, M, 16, V>(x, y, rows, n, env);
    else
      launch_rows<T, M, 32, V>(x, y, rows, n, env);
  } else if (n <= 1) {
    launch_rows<T, M, 1, 1>(x, y, rows, n, env);
  } else if (n <= 2) {
    launch_rows<T, M, 2, 1>(x, y, rows, n, env);
  } else if (n <= 4) {
    launch_rows<T, M, 4, 1>(x, y, rows, n, env);
  } else if (n <= 8) {
    launch_rows<T, M, 8, 1>(x, y, rows, n, env);
  } else if (n <= 16) {
    launch_rows<T, M, 16, 1>(x, y, rows, n, env);
  } else if (n <= 32) {
    launch_rows<T, M, 32, 1>(x, y, rows, n, env);
  } else if (n <= 64) {
    launch_rows<T, M, 32, 2>(x, y, rows, n, env);
  } else if (n <= 128) {
    launch_rows<T, M, 32, 4>(x, y, rows, n, env);
  } else if (n <= 256) {
    launch_rows<T, M, 32, 8>(x, y, rows, n, env);
  } else if (n <= 512) {
    launch_rows<T, M, 32, 16>(x, y, rows, n, env);
  } else {
    launch_rows<T, M, 32, 32>(x, y, rows, n, env);
  }
}

template <class T, Mode M>
void softmax_typed(const T* x, T* y, const AxisSplit& s, GpuEnv& env, const char* name) {
  const int64_t lines = s.outer * s.inner;
  if (lines == 0 || s.len == 0) return;
  if constexpr (M != Mode::kHardmax) {
    if (s.inner == 1 && s.len <= kMaxRowLen) {
      launch_rows_for<T, M>(x, y, s.outer, static_cast<int>(s.len), env);
      check_launch(name);
      return;
    }
  }
  int g = 1;
  if (s.inner == 1)
    g = s.len >= 1024 ? kBlock : s.len >= 32 ? 32 : 1;
  else if (lines < 8192 && s.len >= 256)
    g = 32;
  if (g == 1)
    softmax_lines_kernel<T, M, 1><<<grid_for(lines, kBlock), kBlock, 0, env.stream>>>(x, y, s);
  else if (g == 32)
    softmax_lines_kernel<T, M, 32><<<grid_for(lines, kBlock / 32), kBlock, 0, env.stream>>>(x, y, s);
  else
    softmax_lines_kernel<T, M, kBlock><<<grid_for(lines, 1), kBlock, 0, env.stream>>>(x, y, s);
  check_launch(name);
}

void softmax_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                    GpuEnv& env) {
  const auto& a = attrs_as<SoftmaxAttrs>(attrs);
  const TensorView& x = in[0];
  const char* name = ew::name_of(kind);
  AxisSplit s = split_at(x.shape, normalize_axis(a.axis, static_cast<int64_t>(x.rank())));
  if (a.coerce_2d) {  // [prod(dims < axis), prod(dims >= axis)], along the second dimension
    s.len *= s.inner;
    s.inner = 1;
  }
  ew::dispatch_ew_float(x.dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.data);
    T* yp = static_cast<T*>(out[0].data);
    if (kind == OpKind::kSoftmax)
      softmax_typed<T, Mode::kSoftmax>(xp, yp, s, env, name);
    else if (kind == OpKind::kLogSoftmax)
      softmax_typed<T, Mode::kLogSoftmax>(xp, yp, s, env, name);
    else
      softmax_typed<T, Mode::kHardmax>(xp, yp, s, env, name);
  });
}

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kSoftmax, softmax_kernel},
    {OpKind::kLogSoftmax, softmax_kernel},
    {OpKind::kHardmax, softmax_kernel},
};

}  // namespace

std::span<const GpuKernelEntry> softmax_entries() { return kEntries; }

}  // namespace kiln::gpu::red
