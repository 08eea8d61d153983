// Softmax, LogSoftmax and Hardmax on the GPU, with the CPU kernels' formulas
// (runtime/cpu/ops/reduce_softmax.cpp): m = max (NaN if any NaN), softmax = exp(x - m) * (1 / sum),
// log-softmax = (x - m) - log(sum), hardmax = 1 at the first maximum (the first NaN if any). Sums
// are float (the CPU: double). coerce_2d (pre-opset-13 semantics) flattens the dims from the axis
// on into one.
// Two kernels:
//  - rows: the axis is the last dim (inner == 1) and at most 1024 long: W threads per row (W the
//    power of two >= len, up to a warp), each holding K elements in registers, so the row is read
//    once and written once; several rows per warp when they are short ([N, 1000] logits:
//    a warp per row; attention [B, H, S, S] with S <= 1024 likewise);
//  - lines: anything else. A group of G threads per line (a block for long rows, a warp for
//    medium ones, a thread per line when the axis is not the innermost dim, so neighbouring
//    threads read neighbouring addresses); three passes over the line (max, sum, write), the
//    later ones mostly from cache.
// float32 and float16.
#include <cmath>

#include "runtime/cuda/reduce_internal.cuh"

namespace kiln::gpu::red {

namespace {

enum class Mode { kSoftmax, kLogSoftmax, kHardmax };

// Max that keeps a NaN (the CPU's `greater`): commutative up to which NaN.
__device__ __forceinline__ float max_nan(float a, float b) { return (b > a || (b != b && a == a)) ? b : a; }

struct MaxNanOp {
  using Acc = float;
  __device__ float init() const { return -INFINITY; }
  __device__ void merge(float& a, const float& b) const { a = max_nan(a, b); }
};

struct FloatSumOp {
  using Acc = float;
  __device__ float init() const { return 0.0f; }
  __device__ void merge(float& a, const float& b) const { a += b; }
};

struct FirstMaxAcc {
  float v;
  int pad;
  int64_t i;
};
struct FirstMaxOp {
  using Acc = FirstMaxAcc;
  __device__ Acc init() const { return {0.0f, 0, -1}; }
  __device__ void merge(Acc& a, const Acc& b) const {
    if (arg_beats<true, false>(b.v, b.i, a.v, a.i)) a = b;
  }
};

template <class T, Mode M, int W, int K>
__global__ void __launch_bounds__(128)
    softmax_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int len) {
  constexpr int kRows = 128 / W;
  const int lane = static_cast<int>(threadIdx.x) % W;
  for (int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRows; r0 < rows;
       r0 += static_cast<int64_t>(gridDim.x) * kRows) {
    // Every lane takes part in the shuffles; rows past the end only skip their loads and stores.
    const int64_t row = r0 + threadIdx.x / W;
    const bool valid = row < rows;
    const T* xr = x + (valid ? row : 0) * len;
    T* yr = y + (valid ? row : 0) * len;
    float v[K];
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = k * W + lane;
      v[k] = valid && i < len ? load(xr[i]) : -INFINITY;
      m = max_nan(m, v[k]);
    }
#pragma unroll
    for (int off = W / 2; off >= 1; off >>= 1) m = max_nan(m, __shfl_xor_sync(0xffffffffu, m, off, W));
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (k * W + lane < len) {
        const float e = expf(v[k] - m);
        sum += e;
        if constexpr (M == Mode::kSoftmax) v[k] = e;
      }
    }
#pragma unroll
    for (int off = W / 2; off >= 1; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off, W);
    if (!valid) continue;
    if constexpr (M == Mode::kSoftmax) {
      const float inv = 1.0f / sum;
#pragma unroll
      for (int k = 0; k < K; ++k)
        if (k * W + lane < len) yr[k * W + lane] = store<T>(v[k] * inv);
    } else {
      const float lse = logf(sum);
#pragma unroll
      for (int k = 0; k < K; ++k)
        if (k * W + lane < len) yr[k * W + lane] = store<T>((v[k] - m) - lse);
    }
  }
}

template <class T, Mode M, int G>
__global__ void __launch_bounds__(kBlock)
    softmax_lines_kernel(const T* __restrict__ x, T* __restrict__ y, AxisSplit s) {
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
      FirstMaxAcc a{0.0f, 0, -1};
      for (int64_t i = t; i < s.len; i += G) {
        const float v = load(xl[i * st]);
        if (arg_beats<true, false>(v, i, a.v, a.i)) a = {v, 0, i};
      }
      a = group_allreduce<G>(a, FirstMaxOp{});
      for (int64_t i = t; i < s.len; i += G) yl[i * st] = store<T>(i == a.i ? 1.0f : 0.0f);
    } else {
      float m = -INFINITY;
      for (int64_t i = t; i < s.len; i += G) m = max_nan(m, load(xl[i * st]));
      m = group_allreduce<G>(m, MaxNanOp{});
      float sum = 0.0f;
      for (int64_t i = t; i < s.len; i += G) sum += expf(load(xl[i * st]) - m);
      sum = group_allreduce<G>(sum, FloatSumOp{});
      const float f = M == Mode::kSoftmax ? 1.0f / sum : logf(sum);
      for (int64_t i = t; i < s.len; i += G) {
        const float v = load(xl[i * st]);
        yl[i * st] = store<T>(M == Mode::kSoftmax ? expf(v - m) * f : (v - m) - f);
      }
    }
  }
}

template <class T, Mode M, int W, int K>
void launch_rows(const T* x, T* y, int64_t rows, int len, GpuEnv& env) {
  softmax_rows_kernel<T, M, W, K><<<grid_for(rows, 128 / W), 128, 0, env.stream>>>(x, y, rows, len);
}

template <class T, Mode M>
void softmax_typed(const T* x, T* y, const AxisSplit& s, GpuEnv& env, const char* name) {
  const int64_t lines = s.outer * s.inner;
  if (lines == 0 || s.len == 0) return;
  if constexpr (M != Mode::kHardmax) {
    if (s.inner == 1 && s.len <= 1024) {
      const int n = static_cast<int>(s.len);
      const int64_t rows = s.outer;
      if (n <= 1)
        launch_rows<T, M, 1, 1>(x, y, rows, n, env);
      else if (n <= 2)
        launch_rows<T, M, 2, 1>(x, y, rows, n, env);
      else if (n <= 4)
        launch_rows<T, M, 4, 1>(x, y, rows, n, env);
      else if (n <= 8)
        launch_rows<T, M, 8, 1>(x, y, rows, n, env);
      else if (n <= 16)
        launch_rows<T, M, 16, 1>(x, y, rows, n, env);
      else if (n <= 32)
        launch_rows<T, M, 32, 1>(x, y, rows, n, env);
      else if (n <= 64)
        launch_rows<T, M, 32, 2>(x, y, rows, n, env);
      else if (n <= 128)
        launch_rows<T, M, 32, 4>(x, y, rows, n, env);
      else if (n <= 256)
        launch_rows<T, M, 32, 8>(x, y, rows, n, env);
      else if (n <= 512)
        launch_rows<T, M, 32, 16>(x, y, rows, n, env);
      else
        launch_rows<T, M, 32, 32>(x, y, rows, n, env);
      check_launch(name);
      return;
    }
  }
  int g = 1;
  if (s.inner == 1)
    g = s.len >= 2048 ? kBlock : s.len >= 32 ? 32 : 1;
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
  ew::dispatch_gpu_float(x.dtype, name, [&](auto tag) {
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
