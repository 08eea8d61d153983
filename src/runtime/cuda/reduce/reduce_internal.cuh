// Shared machinery of the reduce family's CUDA kernels (private to src/runtime/cuda/reduce/*.cu).
//
// The reduction engine used by Reduce* and ArgMax/ArgMin: an op is a small struct (init, add,
// merge, finish over an accumulator type), and one kernel template runs it over a plan made on
// the host. The plan is either "simple", [outer, R, inner] (the reduced axes form one contiguous
// block), or "general": alternating runs of kept and reduced dims with their strides, decoded per
// element (non-contiguous axis sets; rarer, slower). Each output is reduced by a group of G
// threads: G = 32 (a warp) or 256 (a block) when the reduced elements are contiguous, so the
// group reads them coalesced; G = 1 when the innermost dim is kept, so neighbouring threads own
// neighbouring outputs and read neighbouring addresses. When there are too few outputs to fill
// the GPU, the reduced range is split into slices whose partial accumulators go to the workspace
// and a second kernel merges them. Merges are tree-shaped, so float sums differ from the CPU's
// (sequential, double) in the last bits; the ops' results are otherwise the CPU kernels'.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/cuda/dependent_launch.cuh"
#include "runtime/cuda/elementwise/elementwise_internal.cuh"
#include "runtime/cuda/gpu_kernels.h"

namespace kiln::gpu::red {

using ew::Bool8;
using ew::Compute;
using ew::load;
using ew::store;

inline constexpr int kBlock = 256;
inline constexpr int64_t kMaxGrid = 65536;  // grid-stride loops cover the rest

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline unsigned grid_for(int64_t items, int64_t per_block) {
  return static_cast<unsigned>(std::clamp<int64_t>(ceil_div(items, per_block), 1, kMaxGrid));
}

// [outer, len, inner] around one axis.
struct AxisSplit {
  int64_t outer = 1, len = 1, inner = 1;
};
inline AxisSplit split_at(std::span<const int64_t> shape, int64_t axis) {
  AxisSplit s;
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i)
    (i < axis ? s.outer : i == axis ? s.len : s.inner) *= shape[i];
  return s;
}

inline int64_t numel_of(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

using ew::FloatAcc;
using ew::kIsFloatDev;

// Integers widened to 64 bits (sign- or zero-extended): sums and products modulo 2^64 are the
// element type's own wrapping arithmetic.
template <class T>
__device__ __forceinline__ uint64_t wrap64(T x) {
  return static_cast<uint64_t>(static_cast<int64_t>(x));
}

template <class C>
__device__ __forceinline__ bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>)
    return v != v;
  else
    return false;
}

// The CPU's from_double for integers: truncation toward zero, saturating, NaN -> 0.
template <class T>
__device__ __forceinline__ T int_from_double(double v) {
  if (v != v) return T{0};
  constexpr double kHi = static_cast<double>(std::numeric_limits<T>::max() / 2 + 1) * 2.0;
  constexpr double kLo = static_cast<double>(std::numeric_limits<T>::lowest());
  if (v >= kHi) return std::numeric_limits<T>::max();
  if (v <= kLo) return std::numeric_limits<T>::lowest();
  return static_cast<T>(v);
}

// The element types of Reduce* and CumSum (shape inference's, which the CPU kernels take): the
// float types and the 32- and 64-bit integers.
template <class Fn>
void dispatch_reduce_types(DataType t, const char* op, Fn&& fn) {
  switch (t) {
    case DataType::kInt32: return fn(Tag<int32_t>{});
    case DataType::kUInt32: return fn(Tag<uint32_t>{});
    case DataType::kInt64: return fn(Tag<int64_t>{});
    case DataType::kUInt64: return fn(Tag<uint64_t>{});
    default: return ew::dispatch_ew_float(t, op, fn);
  }
}

// ---- group reductions ----------------------------------------------------------------------
// Any accumulator (a trivially copyable struct of 4-byte multiples) moved through shuffles.
template <class A>
__device__ __forceinline__ A shfl_xor_any(const A& a, int mask) {
  static_assert(sizeof(A) % 4 == 0, "accumulators are made of 4-byte words");
  constexpr int kWords = sizeof(A) / 4;
  int w[kWords];
  memcpy(w, &a, sizeof(A));
#pragma unroll
  for (int i = 0; i < kWords; ++i) w[i] = __shfl_xor_sync(0xffffffffu, w[i], mask);
  A r;
  memcpy(&r, w, sizeof(A));
  return r;
}

// Merges the accumulators of a group of G threads (1, 8, 32 or kBlock: aligned lanes of one warp,
// the whole warp or the whole block, every thread of which must call this). The result is valid
// in the group's first thread.
template <int G, class Op>
__device__ __forceinline__ typename Op::Acc group_reduce(typename Op::Acc a, const Op& op) {
  using Acc = typename Op::Acc;
  static_assert(G == 1 || G == 8 || G == 32 || G == kBlock, "group sizes: 1, 8, a warp or a block");
  if constexpr (G > 1) {
#pragma unroll
    for (int m = G >= 32 ? 16 : G / 2; m >= 1; m >>= 1) op.merge(a, shfl_xor_any(a, m));
  }
  if constexpr (G == kBlock) {
    // Raw storage: __shared__ variables may not have constructors.
    __shared__ alignas(16) unsigned char raw[(kBlock / 32) * sizeof(Acc)];
    Acc* sm = reinterpret_cast<Acc*>(raw);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    __syncthreads();  // the previous use of sm is finished
    if (lane == 0) sm[warp] = a;
    __syncthreads();
    if (warp == 0) {
      a = lane < kBlock / 32 ? sm[lane] : op.init();
#pragma unroll
      for (int m = kBlock / 64; m >= 1; m >>= 1) op.merge(a, shfl_xor_any(a, m));
    }
  }
  return a;
}

// group_reduce with the result in every thread of the group.
template <int G, class Op>
__device__ __forceinline__ typename Op::Acc group_allreduce(typename Op::Acc a, const Op& op) {
  using Acc = typename Op::Acc;
  a = group_reduce<G>(a, op);
  if constexpr (G == kBlock) {
    __shared__ alignas(16) unsigned char raw[sizeof(Acc)];
    Acc* sm = reinterpret_cast<Acc*>(raw);
    if (threadIdx.x == 0) *sm = a;
    __syncthreads();
    a = *sm;
    __syncthreads();  // everyone has read it before the next call writes it
  }
  return a;
}

// ---- the reduction plan --------------------------------------------------------------------
inline constexpr int kMaxRuns = 8;

struct RedShape {
  int64_t out_count = 1, red_count = 1;
  int64_t slices = 1, chunk = 0;  // the reduced range in `slices` parts of `chunk` elements
  bool simple = true;             // [out_count / inner, red_count, inner]
  bool inner_reduced = true;      // the innermost non-trivial dim is reduced (contiguous reads)
  int64_t inner = 1;
  int nk = 0, nr = 0;  // general: kept and reduced runs (size, element stride), outermost first
  int64_t ksize[kMaxRuns] = {}, kstride[kMaxRuns] = {}, rsize[kMaxRuns] = {}, rstride[kMaxRuns] = {};
};

// Plan for reducing the dims of `shape` where mask is true (output in kept-dims order).
RedShape plan_reduction(std::span<const int64_t> shape, const std::vector<bool>& mask, const char* op);
// The [outer, len, inner] plan of a single axis.
RedShape plan_axis(const AxisSplit& s);

struct GroupChoice {
  int g = 1;
  int64_t slices = 1;
};
GroupChoice choose_groups(const RedShape& s);

__device__ __forceinline__ int64_t kept_offset(const RedShape& s, int64_t o) {
  int64_t off = 0;
  for (int d = s.nk - 1; d >= 0; --d) {
    const int64_t q = o / s.ksize[d];
    off += (o - q * s.ksize[d]) * s.kstride[d];
    o = q;
  }
  return off;
}

__device__ __forceinline__ int64_t red_offset(const RedShape& s, int64_t r) {
  int64_t off = 0;
  for (int d = s.nr - 1; d >= 0; --d) {
    const int64_t q = r / s.rsize[d];
    off += (r - q * s.rsize[d]) * s.rstride[d];
    r = q;
  }
  return off;
}

// Work item w = slice * out_count + output: with G = 1, neighbouring threads own neighbouring
// outputs of one slice. One slice: the group writes op.finish; else its partial accumulator.
// Groups past the end still take part in the shuffles (G < 32 shares a warp with others).
template <class Op, int G>
__global__ void __launch_bounds__(kBlock)
    reduce_kernel(const typename Op::In* __restrict__ x, typename Op::Out* __restrict__ y,
                  typename Op::Acc* __restrict__ part, RedShape s, Op op) {
  using Acc = typename Op::Acc;
  constexpr int kGroups = kBlock / G;
  const int t = static_cast<int>(threadIdx.x) % G;
  const int64_t items = s.out_count * s.slices;
  for (int64_t w0 = static_cast<int64_t>(blockIdx.x) * kGroups; w0 < items;
       w0 += static_cast<int64_t>(gridDim.x) * kGroups) {
    const int64_t w = w0 + threadIdx.x / G;  // uniform within the group
    const bool valid = w < items;
    const int64_t sl = valid ? w / s.out_count : 0, o = valid ? w - sl * s.out_count : 0;
    const int64_t r0 = sl * s.chunk, r1 = valid ? std::min(s.red_count, r0 + s.chunk) : 0;
    Acc a = op.init();
    if (s.simple) {
      const int64_t outer = o / s.inner, in = o - outer * s.inner;
      const typename Op::In* p = x + outer * s.red_count * s.inner + in;
      if (s.inner == 1) {
#pragma unroll 4
        for (int64_t r = r0 + t; r < r1; r += G) op.add(a, p[r], r);
      } else {
#pragma unroll 4
        for (int64_t r = r0 + t; r < r1; r += G) op.add(a, p[r * s.inner], r);
      }
    } else {
      const typename Op::In* p = x + kept_offset(s, o);
      for (int64_t r = r0 + t; r < r1; r += G) op.add(a, p[red_offset(s, r)], r);
    }
    a = group_reduce<G>(a, op);
    if (t == 0 && valid) {
      if (s.slices == 1)
        y[o] = op.finish(a, s.red_count);
      else
        part[w] = a;
    }
  }
}

// Rows reduced along a strided dim ([outer, red_count, inner], inner kept, as a global pool over
// channels-last planes): a thread owns V = 16 / sizeof(In) neighbouring outputs and reads them in
// one 16-byte load per step (where inner is a multiple of V and x is 16-byte aligned; reduce_kernel
// reads one element per thread and step: ResNet-50's float16 global pool at batch 256 ran at a
// third of the memory's rate). Where those outputs are few (a global pool at batch 1: 512 vectors
// for 2048 channels, 2 blocks), a group of G lanes shares each vector's rows, so that each lane
// adds a few rows instead of all 49. A programmatic dependent launch (dependent_launch.cuh): it
// waits for its input first, then lets the next kernel start.
template <class Op, int V, int G>
__global__ void __launch_bounds__(kBlock)
    reduce_vec_kernel(const typename Op::In* __restrict__ x, typename Op::Out* __restrict__ y, RedShape s, Op op) {
  using In = typename Op::In;
  using Acc = typename Op::Acc;
  wait_for_inputs();
  start_next_kernel();
  constexpr int kGroups = kBlock / G;
  const int lane = static_cast<int>(threadIdx.x) % G;
  const int64_t items = s.out_count / V;
  // w0 is uniform within the block, so every lane of a group takes part in its shuffles.
  for (int64_t w0 = static_cast<int64_t>(blockIdx.x) * kGroups; w0 < items;
       w0 += static_cast<int64_t>(gridDim.x) * kGroups) {
    const int64_t w = w0 + threadIdx.x / G;
    const bool valid = w < items;
    Acc a[V];
#pragma unroll
    for (int i = 0; i < V; ++i) a[i] = op.init();
    const int64_t o = w * V;
    if (valid) {
      const int64_t outer = o / s.inner, in = o - outer * s.inner;
      const In* p = x + outer * s.red_count * s.inner + in;
#pragma unroll 4
      for (int64_t r = lane; r < s.red_count; r += G) {
        alignas(16) In v[V];
        *reinterpret_cast<uint4*>(v) = *reinterpret_cast<const uint4*>(p + r * s.inner);
#pragma unroll
        for (int i = 0; i < V; ++i) op.add(a[i], v[i], r);
      }
    }
#pragma unroll
    for (int i = 0; i < V; ++i) a[i] = group_reduce<G>(a[i], op);
    if (lane == 0 && valid) {
#pragma unroll
      for (int i = 0; i < V; ++i) y[o + i] = op.finish(a[i], s.red_count);
    }
  }
}

// Lanes per output vector of reduce_vec_kernel: one where the vectors alone fill the GPU, else 8
// or a warp, as far as the rows go round.
inline int vec_group(int64_t vectors, int64_t rows) {
  if (vectors >= 16384 || rows < 4) return 1;
  if (vectors >= 2048 || rows < 16) return 8;
  return 32;
}

// Second pass of a split reduction: a warp per output merges its slices' partials.
template <class Op>
__global__ void __launch_bounds__(kBlock)
    combine_kernel(const typename Op::Acc* __restrict__ part, typename Op::Out* __restrict__ y, RedShape s, Op op) {
  using Acc = typename Op::Acc;
  constexpr int kGroups = kBlock / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  for (int64_t o0 = static_cast<int64_t>(blockIdx.x) * kGroups; o0 < s.out_count;
       o0 += static_cast<int64_t>(gridDim.x) * kGroups) {
    const int64_t o = o0 + threadIdx.x / 32;
    if (o >= s.out_count) continue;  // uniform within the warp
    Acc a = op.init();
    for (int64_t sl = lane; sl < s.slices; sl += 32) op.merge(a, part[sl * s.out_count + o]);
    a = group_reduce<32>(a, op);
    if (lane == 0) y[o] = op.finish(a, s.red_count);
  }
}

// Runs op over the plan: x and y are the input and output device pointers. With ws_query set,
// only stores the workspace bytes needed (partials of a split reduction) and launches nothing.
// Without enough workspace the reduction runs unsplit (slower, same result).
template <class Op>
void run_reduction(RedShape s, const void* x, void* y, const Op& op, GpuEnv& env, const char* name, size_t* ws_query) {
  using Acc = typename Op::Acc;
  using In = typename Op::In;
  using Out = typename Op::Out;
  if (ws_query) *ws_query = 0;
  if (s.out_count == 0) return;
  const GroupChoice c = choose_groups(s);
  s.slices = c.slices;
  s.chunk = ceil_div(s.red_count, s.slices);
  const size_t need = s.slices > 1 ? static_cast<size_t>(s.out_count * s.slices) * sizeof(Acc) : 0;
  if (ws_query) {
    *ws_query = need;
    return;
  }
  if (need > 0 && (!env.workspace || env.workspace_bytes < need)) {
    s.slices = 1;
    s.chunk = s.red_count;
  }
  const auto* xp = static_cast<const In*>(x);
  auto* yp = static_cast<Out*>(y);
  Acc* part = s.slices > 1 ? static_cast<Acc*>(env.workspace) : nullptr;
  const int64_t items = s.out_count * s.slices;
  constexpr int64_t V = 16 / sizeof(In);
  if constexpr (sizeof(In) <= 4 && 16 % sizeof(In) == 0) {
    if (c.g == 1 && s.slices == 1 && s.simple && !s.inner_reduced && s.inner % V == 0 &&
        reinterpret_cast<uintptr_t>(x) % 16 == 0) {
      const int64_t vectors = s.out_count / V;
      const int g = vec_group(vectors, s.red_count);
      const dim3 grid(grid_for(vectors, kBlock / g));
      if (g == 1)
        launch_dependent<reduce_vec_kernel<Op, V, 1>>(grid, kBlock, 0, env.stream, 1, name, xp, yp, s, op);
      else if (g == 8)
        launch_dependent<reduce_vec_kernel<Op, V, 8>>(grid, kBlock, 0, env.stream, 1, name, xp, yp, s, op);
      else
        launch_dependent<reduce_vec_kernel<Op, V, 32>>(grid, kBlock, 0, env.stream, 1, name, xp, yp, s, op);
      return;
    }
  }
  if (c.g == 1)
    reduce_kernel<Op, 1><<<grid_for(items, kBlock), kBlock, 0, env.stream>>>(xp, yp, part, s, op);
  else if (c.g == 8)
    reduce_kernel<Op, 8><<<grid_for(items, kBlock / 8), kBlock, 0, env.stream>>>(xp, yp, part, s, op);
  else if (c.g == 32)
    reduce_kernel<Op, 32><<<grid_for(items, kBlock / 32), kBlock, 0, env.stream>>>(xp, yp, part, s, op);
  else
    reduce_kernel<Op, kBlock><<<grid_for(items, 1), kBlock, 0, env.stream>>>(xp, yp, part, s, op);
  check_launch(name);
  if (s.slices > 1) {
    combine_kernel<Op><<<grid_for(s.out_count, kBlock / 32), kBlock, 0, env.stream>>>(part, yp, s, op);
    check_launch(name);
  }
}

// ---- argmax-style comparison ---------------------------------------------------------------
// Whether (bv, bi) beats (av, ai) as the extreme (kMax) or the minimum: a NaN beats every number
// (numpy), equal values (or two NaNs) go by index: the lower wins, or the higher with kLast.
// i < 0 marks an empty accumulator. This is a total order, so any merge order gives the CPU's
// sequential answer.
template <bool kMax, bool kLast, class C>
__device__ __forceinline__ bool arg_beats(C bv, int64_t bi, C av, int64_t ai) {
  if (bi < 0) return false;
  if (ai < 0) return true;
  const bool an = is_nan(av), bn = is_nan(bv);
  if (an || bn) {
    if (an && bn) return kLast ? bi > ai : bi < ai;
    return bn;
  }
  if (bv == av) return kLast ? bi > ai : bi < ai;
  return kMax ? bv > av : bv < av;
}

// ---- entry points of the family's files ----------------------------------------------------
std::span<const GpuKernelEntry> reduce_op_entries();  // reduce.cu: Reduce*
std::span<const GpuKernelEntry> arg_entries();        // arg.cu: ArgMax, ArgMin
std::span<const GpuKernelEntry> softmax_entries();    // softmax.cu: Softmax, LogSoftmax, Hardmax
std::span<const GpuKernelEntry> cumsum_entries();     // cumsum.cu: CumSum
std::span<const GpuKernelEntry> topk_entries();       // topk.cu: TopK
std::span<const GpuKernelEntry> einsum_entries();     // einsum.cu: Einsum

}  // namespace kiln::gpu::red
