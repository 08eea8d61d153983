// CumSum on the GPU (the CPU kernel: runtime/cpu/reduce/cumsum.cpp): running sums along the
// axis, optionally exclusive and/or reversed. float32 and the half types accumulate in float (the
// CPU: double), so long sums differ in the last bits; float64 accumulates in double; integers
// wrap modulo 2^64 like the CPU (exact).
// The axis input is a build-time constant (the op table's const_inputs), read from env.host(1).
// Three kernels over the [outer, len, inner] view:
//  - the axis is the last dim and long: a warp per row scans 32 elements per step with shuffles
//    and carries the total to the next step; a block per row when the rows are long and few;
//  - otherwise a thread per line walks it sequentially; neighbouring threads own neighbouring
//    lines, so the reads are coalesced when inner is large.
// The float types and the 32- and 64-bit integers (shape inference's).
#include "runtime/cuda/reduce/reduce_internal.cuh"

namespace kiln::gpu::red {

namespace {

template <class T>
using ScanAcc = std::conditional_t<kIsFloatDev<T>, FloatAcc<T>, uint64_t>;

template <class T>
__device__ __forceinline__ ScanAcc<T> scan_load(T v) {
  if constexpr (kIsFloatDev<T>)
    return load(v);
  else
    return wrap64(v);
}

template <class T>
__device__ __forceinline__ T scan_store(ScanAcc<T> a) {
  if constexpr (kIsFloatDev<T>)
    return store<T>(a);
  else
    return static_cast<T>(a);  // modular
}

template <class T>
__global__ void __launch_bounds__(kBlock)
    cumsum_lines_kernel(const T* __restrict__ x, T* __restrict__ y, AxisSplit s, bool exclusive, bool reverse) {
  const int64_t lines = s.outer * s.inner;
  for (int64_t line = static_cast<int64_t>(blockIdx.x) * kBlock + threadIdx.x; line < lines;
       line += static_cast<int64_t>(gridDim.x) * kBlock) {
    const int64_t o = line / s.inner, j = line - o * s.inner;
    const int64_t base = o * s.len * s.inner + j;
    ScanAcc<T> acc = 0;
    for (int64_t step = 0; step < s.len; ++step) {
      const int64_t off = base + (reverse ? s.len - 1 - step : step) * s.inner;
      const ScanAcc<T> v = scan_load(x[off]);
      if (!exclusive) acc += v;
      y[off] = scan_store<T>(acc);
      if (exclusive) acc += v;
    }
  }
}

// inner == 1: a warp per row.
template <class T>
__global__ void __launch_bounds__(kBlock) cumsum_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows,
                                                             int64_t len, bool exclusive, bool reverse) {
  constexpr int kWarps = kBlock / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  for (int64_t r0 = static_cast<int64_t>(blockIdx.x) * kWarps; r0 < rows;
       r0 += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t row = r0 + threadIdx.x / 32;
    if (row >= rows) continue;  // uniform within the warp
    const T* xr = x + row * len;
    T* yr = y + row * len;
    ScanAcc<T> carry = 0;
    for (int64_t c = 0; c < len; c += 32) {
      const int64_t i = c + lane;
      const int64_t at = reverse ? len - 1 - i : i;
      const ScanAcc<T> v = i < len ? scan_load(xr[at]) : ScanAcc<T>(0);
      ScanAcc<T> incl = v;
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const ScanAcc<T> u = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += u;
      }
      // The exclusive sum is the previous lane's inclusive one (not incl - v: inf - inf).
      ScanAcc<T> excl = __shfl_up_sync(0xffffffffu, incl, 1);
      if (lane == 0) excl = 0;
      if (i < len) yr[at] = scan_store<T>(carry + (exclusive ? excl : incl));
      carry += __shfl_sync(0xffffffffu, incl, 31);
    }
  }
}

// inner == 1, long rows, few of them: a block per row, 4 * kBlock elements per step. Each thread
// scans its 4 neighbours, the block scans the threads' totals (warp shuffles, then the warps'
// totals through shared memory), and the row's running total carries to the next step.
template <class T>
__global__ void __launch_bounds__(kBlock) cumsum_block_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows,
                                                              int64_t len, bool exclusive, bool reverse) {
  using A = ScanAcc<T>;
  constexpr int kPer = 4, kWarps = kBlock / 32;
  __shared__ A warp_total[kWarps];
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * len;
    T* yr = y + row * len;
    A carry = 0;
    for (int64_t c = 0; c < len; c += kPer * kBlock) {
      A run[kPer];
      A total = 0;
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        const int64_t i = c + threadIdx.x * kPer + u;
        const A v = i < len ? scan_load(xr[reverse ? len - 1 - i : i]) : A(0);
        run[u] = total;  // exclusive within the thread
        total += v;
      }
      A incl = total;  // inclusive over the warp's threads
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const A u = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += u;
      }
      if (lane == 31) warp_total[warp] = incl;
      __syncthreads();
      A before = carry;  // everything before this thread's first element
      A block_total = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        if (w < warp) before += warp_total[w];
        block_total += warp_total[w];
      }
      A thread_excl = __shfl_up_sync(0xffffffffu, incl, 1);
      if (lane == 0) thread_excl = 0;
      before += thread_excl;
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        const int64_t i = c + threadIdx.x * kPer + u;
        if (i >= len) break;
        // Inclusive: the exclusive sum of the next element, i.e. run[u + 1], or the thread total.
        const A within = exclusive ? run[u] : (u + 1 < kPer ? run[u + 1] : total);
        yr[reverse ? len - 1 - i : i] = scan_store<T>(before + within);
      }
      carry += block_total;
      __syncthreads();  // warp_total is rewritten by the next step
    }
  }
}

void cumsum_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                   GpuEnv& env) {
  const auto& a = attrs_as<CumSumAttrs>(attrs);
  const TensorView& x = in[0];
  const void* axis_host = env.host(1);
  if (!axis_host) throw Error("CumSum: the CUDA backend needs the axis input to be a constant");
  TensorView axis_view = in[1];
  axis_view.data = const_cast<void*>(axis_host);
  const std::vector<int64_t> axis = axis_view.to_int64();
  if (axis.size() != 1) throw Error("CumSum: axis must be a scalar or a 1-element tensor");
  const AxisSplit s = split_at(x.shape, normalize_axis(axis[0], static_cast<int64_t>(x.rank())));
  const int64_t lines = s.outer * s.inner;
  if (lines == 0 || s.len == 0) return;
  const bool exclusive = a.exclusive != 0, reverse = a.reverse != 0;
  dispatch_reduce_types(x.dtype, "CumSum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.data);
    T* yp = static_cast<T*>(out[0].data);
    if (s.inner == 1 && s.len >= 1024 && s.outer < 2048)
      cumsum_block_kernel<T>
          <<<grid_for(s.outer, 1), kBlock, 0, env.stream>>>(xp, yp, s.outer, s.len, exclusive, reverse);
    else if (s.inner == 1 && s.len >= 16)
      cumsum_rows_kernel<T>
          <<<grid_for(s.outer, kBlock / 32), kBlock, 0, env.stream>>>(xp, yp, s.outer, s.len, exclusive, reverse);
    else
      cumsum_lines_kernel<T><<<grid_for(lines, kBlock), kBlock, 0, env.stream>>>(xp, yp, s, exclusive, reverse);
  });
  check_launch("CumSum");
}

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kCumSum, cumsum_kernel},
};

}  // namespace

std::span<const GpuKernelEntry> cumsum_entries() { return kEntries; }

}  // namespace kiln::gpu::red
