// Shared machinery of the CUDA elementwise kernels (src/runtime/cuda/elementwise/*.cu; the
// other families' kernels build on it too):
// device element types and their load/store through a compute type, host dtype dispatch, the
// broadcast plan (computed on the host, passed to the kernel by value), and the kernel templates
// with their launchers:
//   unary:   contiguous, 16 bytes per thread per step (4 floats, 8 halves) plus a scalar tail;
//   binary:  "flat" when every input is contiguous or a single element (vectorised like unary),
//            else strided: each thread decodes its output index into per-input offsets;
//   ternary: Where, flat or strided, element by element.
// Grid-stride loops; indices are 64-bit in the flat kernels, and the strided kernels come in a
// 32-bit flavour (faster division) used whenever the output has fewer than 2^31 elements.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/shape_infer.h"
#include "runtime/cuda/dependent_launch.cuh"
#include "runtime/cuda/gpu_kernels.h"

namespace kiln::gpu::ew {

// ---- element types -------------------------------------------------------------------------
// ONNX bool: one byte; any non-zero byte reads as true, and stores write 0 or 1.
struct Bool8 {
  uint8_t v;
};

// float16 and bfloat16: the device's __half and __nv_bfloat16, stored rounded to nearest even like
// core/half.h (a NaN may come back with another payload, still a NaN).
template <class T>
inline constexpr bool kIsHalfDev = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
template <class T>
inline constexpr bool kIsFloatDev = std::is_floating_point_v<T> || kIsHalfDev<T>;

// Where sums, means and other reductions of float elements accumulate: double for float64, float
// for float32 and the half types (the CPU kernels: double for every float type).
template <class T>
using FloatAcc = std::conditional_t<std::is_same_v<T, double>, double, float>;

// The type arithmetic is done in: float for the half types, bool for Bool8, else the type itself.
template <class T>
struct ComputeOf {
  using type = T;
};
template <>
struct ComputeOf<__half> {
  using type = float;
};
template <>
struct ComputeOf<__nv_bfloat16> {
  using type = float;
};
template <>
struct ComputeOf<Bool8> {
  using type = bool;
};
template <class T>
using Compute = typename ComputeOf<T>::type;

template <class T>
__device__ __forceinline__ Compute<T> load(T v) {
  if constexpr (std::is_same_v<T, __half>)
    return __half2float(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(v);
  else if constexpr (std::is_same_v<T, Bool8>)
    return v.v != 0;
  else
    return v;
}

template <class T, class C>
__device__ __forceinline__ T store(C v) {
  if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, Bool8>)
    return Bool8{static_cast<uint8_t>(v ? 1 : 0)};
  else
    return static_cast<T>(v);
}

// std::min / std::max exactly (the CPU kernels use them): with a NaN argument these return the
// first argument, unlike fminf / fmaxf, which drop the NaN.
template <class C>
__device__ __forceinline__ C std_min(C a, C b) {
  return b < a ? b : a;
}
template <class C>
__device__ __forceinline__ C std_max(C a, C b) {
  return a < b ? b : a;
}

// Float -> integer with saturation (Cast, and the float results of integer Pow, Erf, Shrink),
// decided in double as the CPU does: the integer type's max() rounds up to a power of two in
// double, so `>=` catches every value not below it.
template <class To>
__device__ __forceinline__ To sat_float_to_int(double d) {
  if (d != d) return To(0);
  constexpr double lo = static_cast<double>(std::numeric_limits<To>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<To>::max());
  if (d <= lo) return std::numeric_limits<To>::min();
  if (d >= hi) return std::numeric_limits<To>::max();
  return static_cast<To>(d);
}

// Functors are built on the host from the op's Attrs and passed to kernels by value; init() runs
// once per thread before the loop (Clip uses it to read its bounds from device memory).
struct NoInit {
  __device__ void init() {}
};

// ---- host dtype dispatch -------------------------------------------------------------------
[[noreturn]] inline void throw_gpu_dtype(DataType t, const char* op) {
  throw Error(std::string(op) + ": element type " + std::string(dtype_name(t)) +
              " is not supported by the CUDA backend");
}

// Every float type the CPU kernels take (core/tensor.h's dispatch_float): float32, float16,
// float64, bfloat16.
template <class Fn>
void dispatch_ew_float(DataType t, const char* op, Fn&& fn) {
  switch (t) {
    case DataType::kFloat32: return fn(Tag<float>{});
    case DataType::kFloat16: return fn(Tag<__half>{});
    case DataType::kFloat64: return fn(Tag<double>{});
    case DataType::kBFloat16: return fn(Tag<__nv_bfloat16>{});
    default: throw_gpu_dtype(t, op);
  }
}
// Every numeric type (dispatch_numeric): the floats and all eight integer types.
template <class Fn>
void dispatch_ew_numeric(DataType t, const char* op, Fn&& fn) {
  switch (t) {
    case DataType::kInt8: return fn(Tag<int8_t>{});
    case DataType::kUInt8: return fn(Tag<uint8_t>{});
    case DataType::kInt16: return fn(Tag<int16_t>{});
    case DataType::kUInt16: return fn(Tag<uint16_t>{});
    case DataType::kInt32: return fn(Tag<int32_t>{});
    case DataType::kUInt32: return fn(Tag<uint32_t>{});
    case DataType::kInt64: return fn(Tag<int64_t>{});
    case DataType::kUInt64: return fn(Tag<uint64_t>{});
    default: return dispatch_ew_float(t, op, fn);
  }
}
// Every type, bool included (dispatch_all).
template <class Fn>
void dispatch_ew_all(DataType t, const char* op, Fn&& fn) {
  if (t == DataType::kBool) return fn(Tag<Bool8>{});
  return dispatch_ew_numeric(t, op, fn);
}

inline const char* name_of(OpKind k) { return op_name(k).data(); }  // the table's names are literals

// ---- launch configuration ------------------------------------------------------------------
inline constexpr int kThreads = 256;
// Grid-stride loops cover the rest; 65536 blocks of 256 threads fill any current GPU many times.
inline constexpr int64_t kMaxBlocks = 65536;

inline unsigned blocks_for(int64_t work_items) {
  return static_cast<unsigned>(std::clamp<int64_t>((work_items + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

// 16 bytes per vector access: the widest load a thread can issue in one instruction.
inline constexpr int kVecBytes = 16;
template <class... Ts>
inline constexpr int kVecWidth = kVecBytes / static_cast<int>(std::max({sizeof(Ts)...}));

template <class T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

inline bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// ---- unary ---------------------------------------------------------------------------------
// out[i] = f(in[i]) over n contiguous elements; `vec` (both pointers 16-byte aligned) takes the
// vector path for the first n / N * N elements. In place (in == out) is fine: every element is
// read and written by the same thread.
template <class TI, class TO, class F>
__global__ void __launch_bounds__(kThreads) unary_kernel(const TI* in, TO* out, int64_t n, bool vec, F f) {
  constexpr int N = kVecWidth<TI, TO>;
  wait_for_inputs();  // a dependent launch (launch_unary)
  start_next_kernel();
  f.init();
  const int64_t tid = global_thread(), step = grid_threads();
  int64_t done = 0;
  if (vec) {
    const int64_t nv = n / N;
    const auto* vi = reinterpret_cast<const Vec<TI, N>*>(in);
    auto* vo = reinterpret_cast<Vec<TO, N>*>(out);
    for (int64_t i = tid; i < nv; i += step) {
      const Vec<TI, N> a = vi[i];
      Vec<TO, N> r;
#pragma unroll
      for (int k = 0; k < N; ++k) r.v[k] = store<TO>(f(load(a.v[k])));
      vo[i] = r;
    }
    done = nv * N;
  }
  for (int64_t i = done + tid; i < n; i += step) out[i] = store<TO>(f(load(in[i])));
}

template <class TI, class TO, class F>
void launch_unary(const TensorView& in, const TensorView& out, GpuEnv& env, const F& f, const char* op) {
  const int64_t n = out.numel();
  if (n == 0) return;
  constexpr int N = kVecWidth<TI, TO>;
  const bool vec = aligned_to(in.data, sizeof(TI) * N) && aligned_to(out.data, sizeof(TO) * N);
  // A programmatic dependent launch (dependent_launch.cuh): the kernel waits for its input first,
  // then lets the next kernel start, so that neither launch adds a gap (a Cast between layers).
  launch_dependent<unary_kernel<TI, TO, F>>(dim3(blocks_for(vec ? std::max<int64_t>(n / N, 1) : n)), kThreads,
                                                   0, env.stream, 1, op, static_cast<const TI*>(in.data),
                                                   static_cast<TO*>(out.data), n, vec, f);
}

// ---- broadcast plan ------------------------------------------------------------------------
// Output shape with per-input element strides (0 along broadcast dims). Size-1 output dims are
// dropped and adjacent dims merged wherever every input stays linear across them (the CPU
// kernels' make_plan), so same-shape inputs become one contiguous dim and "[N,C,H,W] + [1,C,1,1]"
// three dims. At most kMaxDims dims survive merging, else the op throws.
inline constexpr int kMaxDims = 8;

template <int K>
struct Plan {
  int rank = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride[K][kMaxDims] = {};

  // One dim along which every input is contiguous (stride 1) or a single element (stride 0).
  bool flat() const {
    if (rank != 1) return false;
    for (int k = 0; k < K; ++k)
      if (stride[k][0] > 1) return false;
    return true;
  }
};

template <int K>
Plan<K> make_plan(std::span<const int64_t> out, const std::array<std::span<const int64_t>, K>& ins, const char* op) {
  const size_t r = out.size();
  std::array<std::vector<int64_t>, K> full;
  for (int k = 0; k < K; ++k) {
    full[k].assign(r, 0);
    const size_t lead = r - ins[k].size();
    int64_t acc = 1;
    for (size_t i = ins[k].size(); i-- > 0;) {
      full[k][lead + i] = ins[k][i] == 1 ? 0 : acc;
      acc *= ins[k][i];
    }
  }
  std::vector<int64_t> shape;
  std::array<std::vector<int64_t>, K> strides;
  for (size_t i = 0; i < r; ++i) {
    if (out[i] == 1) continue;
    bool merge = !shape.empty();
    for (int k = 0; k < K && merge; ++k) merge = strides[k].back() == full[k][i] * out[i];
    if (merge) {
      shape.back() *= out[i];
      for (int k = 0; k < K; ++k) strides[k].back() = full[k][i];
    } else {
      shape.push_back(out[i]);
      for (int k = 0; k < K; ++k) strides[k].push_back(full[k][i]);
    }
  }
  if (shape.empty()) {
    shape.push_back(1);
    for (int k = 0; k < K; ++k) strides[k].push_back(0);
  }
  if (shape.size() > static_cast<size_t>(kMaxDims))
    throw Error(std::string(op) + ": broadcasting needs " + std::to_string(shape.size()) +
                " dimensions after merging; the CUDA backend supports at most " + std::to_string(kMaxDims));
  Plan<K> p;
  p.rank = static_cast<int>(shape.size());
  for (int d = 0; d < p.rank; ++d) {
    p.shape[d] = shape[d];
    for (int k = 0; k < K; ++k) p.stride[k][d] = strides[k][d];
  }
  return p;
}

// Offsets of output element i in each input: i's digits in the mixed radix p.shape, dotted with
// each input's strides. I is uint32_t when the output has < 2^31 elements (every offset is then
// smaller too: inputs are never larger than the output), else uint64_t.
template <class I, int K>
__device__ __forceinline__ void plan_offsets(const Plan<K>& p, I i, I (&off)[K]) {
#pragma unroll
  for (int k = 0; k < K; ++k) off[k] = 0;
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {
    if (d >= p.rank) continue;
    const I dim = static_cast<I>(p.shape[d]);
    const I q = d > 0 ? i / dim : 0;
    const I idx = i - q * dim;
    i = q;
#pragma unroll
    for (int k = 0; k < K; ++k) off[k] += idx * static_cast<I>(p.stride[k][d]);
  }
}

// ---- binary --------------------------------------------------------------------------------
// o = f(a, b) with a and b each contiguous or a single element (a_one / b_one). In place (o == a,
// as the variadic ops fold) is fine: each element is read and written by the same thread.
template <class TA, class TB, class TO, class F>
__global__ void __launch_bounds__(kThreads)
    binary_flat_kernel(const TA* a, const TB* b, TO* o, int64_t n, bool a_one, bool b_one, bool vec, F f) {
  constexpr int N = kVecWidth<TA, TB, TO>;
  f.init();
  const int64_t tid = global_thread(), step = grid_threads();
  const Compute<TA> a0 = load(a[0]);
  const Compute<TB> b0 = load(b[0]);
  int64_t done = 0;
  if (vec) {
    const int64_t nv = n / N;
    for (int64_t i = tid; i < nv; i += step) {
      Vec<TA, N> va;
      Vec<TB, N> vb;
      if (!a_one) va = reinterpret_cast<const Vec<TA, N>*>(a)[i];
      if (!b_one) vb = reinterpret_cast<const Vec<TB, N>*>(b)[i];
      Vec<TO, N> r;
#pragma unroll
      for (int k = 0; k < N; ++k) r.v[k] = store<TO>(f(a_one ? a0 : load(va.v[k]), b_one ? b0 : load(vb.v[k])));
      reinterpret_cast<Vec<TO, N>*>(o)[i] = r;
    }
    done = nv * N;
  }
  for (int64_t i = done + tid; i < n; i += step) o[i] = store<TO>(f(a_one ? a0 : load(a[i]), b_one ? b0 : load(b[i])));
}

template <class I, class TA, class TB, class TO, class F>
__global__ void __launch_bounds__(kThreads)
    binary_strided_kernel(const TA* a, const TB* b, TO* o, I n, Plan<2> p, F f) {
  f.init();
  const I step = static_cast<I>(grid_threads());
  for (I i = static_cast<I>(global_thread()); i < n; i += step) {
    I off[2];
    plan_offsets(p, i, off);
    o[i] = store<TO>(f(load(a[off[0]]), load(b[off[1]])));
  }
}

// Broadcasting o = f(a, b); TA/TB/TO are device storage types, f takes their compute types.
template <class TA, class TB, class TO, class F>
void launch_binary(const TensorView& a, const TensorView& b, const TensorView& out, GpuEnv& env, const F& f,
                   const char* op) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const Plan<2> p = make_plan<2>(out.shape, {a.shape, b.shape}, op);
  const auto* pa = static_cast<const TA*>(a.data);
  const auto* pb = static_cast<const TB*>(b.data);
  auto* po = static_cast<TO*>(out.data);
  if (p.flat()) {
    constexpr int N = kVecWidth<TA, TB, TO>;
    const bool a_one = p.stride[0][0] == 0, b_one = p.stride[1][0] == 0;
    const bool vec = (a_one || aligned_to(pa, sizeof(TA) * N)) && (b_one || aligned_to(pb, sizeof(TB) * N)) &&
                     aligned_to(po, sizeof(TO) * N);
    binary_flat_kernel<TA, TB, TO, F><<<blocks_for(vec ? std::max<int64_t>(n / N, 1) : n), kThreads, 0, env.stream>>>(
        pa, pb, po, n, a_one, b_one, vec, f);
  } else if (n < (int64_t{1} << 31)) {
    binary_strided_kernel<uint32_t, TA, TB, TO, F>
        <<<blocks_for(n), kThreads, 0, env.stream>>>(pa, pb, po, static_cast<uint32_t>(n), p, f);
  } else {
    binary_strided_kernel<uint64_t, TA, TB, TO, F>
        <<<blocks_for(n), kThreads, 0, env.stream>>>(pa, pb, po, static_cast<uint64_t>(n), p, f);
  }
  check_launch(op);
}

// ---- ternary (Where) -----------------------------------------------------------------------
// o = c ? x : y, T moved as raw bytes of its size. Flat: each of c, x, y contiguous (stride 1)
// or a single element (stride 0), so element i is at i * stride.
template <class T>
__global__ void __launch_bounds__(kThreads)
    where_flat_kernel(const Bool8* c, const T* x, const T* y, T* o, int64_t n, int64_t sc, int64_t sx, int64_t sy) {
  const int64_t step = grid_threads();
  for (int64_t i = global_thread(); i < n; i += step) o[i] = c[i * sc].v ? x[i * sx] : y[i * sy];
}

template <class I, class T>
__global__ void __launch_bounds__(kThreads)
    where_strided_kernel(const Bool8* c, const T* x, const T* y, T* o, I n, Plan<3> p) {
  const I step = static_cast<I>(grid_threads());
  for (I i = static_cast<I>(global_thread()); i < n; i += step) {
    I off[3];
    plan_offsets(p, i, off);
    o[i] = c[off[0]].v ? x[off[1]] : y[off[2]];
  }
}

// ---- kernel entry points implemented in the family's files --------------------------------
std::span<const GpuKernelEntry> unary_gpu_entries();   // unary.cu
std::span<const GpuKernelEntry> binary_gpu_entries();  // binary.cu
std::span<const GpuKernelEntry> misc_gpu_entries();    // misc.cu

}  // namespace kiln::gpu::ew
