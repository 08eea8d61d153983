// Shared machinery of the tensor family's CUDA kernels (private to src/runtime/cuda/tensor/*.cu):
// raw word types for byte-moving ops, device numeric types (float16 as __half, bfloat16 as BF16
// with the CPU's rounding), launch configuration, index loading and checking, host copies of
// constant inputs, the strided copy used by Transpose/Slice/Expand/Tile, and the entry lists.
// Copy-only ops move raw words of the element's size (1/2/4/8 bytes, 16 where a contiguous run
// allows), so every dtype works without per-type kernels.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/shape_infer.h"
#include "runtime/cuda/gpu_kernels.h"

namespace kiln::gpu::tensor {

// ---- launch configuration ----------------------------------------------------------------------
inline constexpr int kThreads = 256;
inline constexpr int64_t kMaxBlocks = 65536;  // grid-stride loops cover the rest
// Most dims a kernel's plan holds after size-1 dims are dropped and contiguous dims merged.
inline constexpr int kMaxDims = 12;
inline constexpr int64_t k32Bit = int64_t{1} << 31;  // below this, element indices use 32-bit math

inline unsigned blocks_for(int64_t work_items) {
  return static_cast<unsigned>(std::clamp<int64_t>((work_items + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

inline bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

inline const char* name_of(OpKind k) { return op_name(k).data(); }  // the table's names are literals

[[noreturn]] inline void throw_gpu_dtype(DataType t, const char* op) {
  throw Error(std::string(op) + ": element type " + std::string(dtype_name(t)) +
              " is not supported by the CUDA backend");
}

// ---- raw words ---------------------------------------------------------------------------------
// fn(Tag<W>) with the unsigned word of `bytes` (1, 2, 4, 8 or 16) bytes.
template <class Fn>
void dispatch_word(size_t bytes, Fn&& fn) {
  switch (bytes) {
    case 1: return fn(Tag<uint8_t>{});
    case 2: return fn(Tag<uint16_t>{});
    case 4: return fn(Tag<uint32_t>{});
    case 8: return fn(Tag<unsigned long long>{});
    default: return fn(Tag<uint4>{});
  }
}

// The widest word (up to 16 bytes, at least `esize`) that divides every byte count in `sizes`
// and every pointer in `ptrs`.
inline size_t widest_word(size_t esize, std::initializer_list<int64_t> sizes, std::initializer_list<const void*> ptrs) {
  for (size_t w : {size_t{16}, size_t{8}, size_t{4}, size_t{2}}) {
    if (w <= esize) break;
    bool ok = true;
    for (int64_t s : sizes) ok = ok && s % static_cast<int64_t>(w) == 0;
    for (const void* p : ptrs) ok = ok && aligned_to(p, w);
    if (ok) return w;
  }
  return esize;
}

// ---- device numeric types ----------------------------------------------------------------------
// bfloat16 storage; conversions mirror core/half.h (round to nearest even, NaN stays quiet NaN).
struct BF16 {
  uint16_t bits;
};

template <class T>
struct ComputeOf {
  using type = T;
};
template <>
struct ComputeOf<__half> {
  using type = float;
};
template <>
struct ComputeOf<BF16> {
  using type = float;
};
template <class T>
using Compute = typename ComputeOf<T>::type;

template <class T>
__device__ __forceinline__ Compute<T> load(T v) {
  if constexpr (std::is_same_v<T, __half>)
    return __half2float(v);
  else if constexpr (std::is_same_v<T, BF16>)
    return __uint_as_float(static_cast<uint32_t>(v.bits) << 16);
  else
    return v;
}

template <class T, class C>
__device__ __forceinline__ T store(C v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, BF16>) {
    uint32_t x = __float_as_uint(static_cast<float>(v));
    if ((x & 0x7fffffffu) > 0x7f800000u) return BF16{static_cast<uint16_t>((x >> 16) | 0x40u)};
    x += 0x7fffu + ((x >> 16) & 1u);
    return BF16{static_cast<uint16_t>(x >> 16)};
  } else {
    return static_cast<T>(v);
  }
}

// fn(Tag<T>) with the device storage type of every numeric dtype (not bool).
template <class Fn>
void dispatch_device_numeric(DataType t, const char* op, Fn&& fn) {
  switch (t) {
    case DataType::kFloat32: return fn(Tag<float>{});
    case DataType::kFloat64: return fn(Tag<double>{});
    case DataType::kFloat16: return fn(Tag<__half>{});
    case DataType::kBFloat16: return fn(Tag<BF16>{});
    case DataType::kInt8: return fn(Tag<int8_t>{});
    case DataType::kUInt8: return fn(Tag<uint8_t>{});
    case DataType::kInt16: return fn(Tag<int16_t>{});
    case DataType::kUInt16: return fn(Tag<uint16_t>{});
    case DataType::kInt32: return fn(Tag<int32_t>{});
    case DataType::kUInt32: return fn(Tag<uint32_t>{});
    case DataType::kInt64: return fn(Tag<int64_t>{});
    case DataType::kUInt64: return fn(Tag<uint64_t>{});
    default: throw_gpu_dtype(t, op);
  }
}

// ---- indices -----------------------------------------------------------------------------------
// Index tensors are int32 or int64 (inference checks); the width is a kernel argument rather than
// a template parameter, which halves the instantiations at the cost of a uniform branch.
__device__ __forceinline__ int64_t load_index(const void* p, bool i64, int64_t j) {
  return i64 ? static_cast<const int64_t*>(p)[j] : static_cast<int64_t>(static_cast<const int32_t*>(p)[j]);
}

// v normalised into [0, dim), or -1 when it lies outside [-dim, dim).
__device__ __forceinline__ int64_t fix_index(int64_t v, int64_t dim) {
  if (v < -dim || v >= dim) return -1;
  return v < 0 ? v + dim : v;
}

__device__ __forceinline__ void report(int* error, int code) {
  if (error) atomicCAS(error, 0, code);
}

inline bool index64(const TensorView& t) { return t.dtype == DataType::kInt64; }

// Sets kGpuIndexOutOfRange for every index outside [-dims[j % m], dims[j % m]) among n; used when
// an op's output is empty but the CPU kernel still checks its indices.
struct IndexDims {
  int m = 1;
  int64_t dim[kMaxDims] = {};
};
void check_indices(const void* ind, bool i64, int64_t n, const IndexDims& dims, GpuEnv& env, const char* op);

// GatherElements / ScatterElements: element e of the indices (shape ishape) addresses x at e's
// multi-index with the axis coordinate replaced by the index value.
struct ElementsPlan {
  int rank = 0;
  int axis = 0;
  int64_t ishape[kMaxDims] = {};
  int64_t xstride[kMaxDims] = {};
  int64_t dim = 0;          // x.shape[axis]
  int64_t axis_stride = 0;  // x's stride along the axis
};
// Throws for ranks above kMaxDims (index.cu).
ElementsPlan elements_plan(const TensorView& x, const TensorView& ind, int64_t axis_attr, const char* op);

// x's offset of indices element e, the axis coordinate left out (I: uint32_t or uint64_t).
template <class I>
__device__ __forceinline__ I elements_offset(const ElementsPlan& p, I e) {
  I rem = e, off = 0;
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {
    if (d >= p.rank) continue;
    const I dim = static_cast<I>(p.ishape[d]);
    const I q = rem / dim;
    if (d != p.axis) off += (rem - q * dim) * static_cast<I>(p.xstride[d]);
    rem = q;
  }
  return off;
}

// ---- host side ---------------------------------------------------------------------------------
// The inputs with the data of every constant input (the op's const_inputs) replaced by its host
// copy, as shape inference's plans (slice_plan, pad_plan) read them. Throws if a copy is missing.
std::vector<TensorView> with_host_constants(OpKind kind, std::span<const TensorView> in, const GpuEnv& env);

// Device-to-device copy of `bytes` unless the pointers are the same.
void copy_device(void* dst, const void* src, size_t bytes, GpuEnv& env, const char* op);

// dst (contiguous, `shape`) = the view of src that starts at element `base` and has element
// strides `strides` (0: broadcast, negative: reversed). src_numel, the source's size, decides
// whether 32-bit index math suffices. Size-1 dims are dropped and contiguous dims merged; a
// contiguous inner run is moved in words of up to 16 bytes; transposes of a contiguous source dim
// into the inner output dim go through shared-memory tiles.
void strided_copy(size_t esize, const std::vector<int64_t>& shape, const std::vector<int64_t>& strides, const void* src,
                  int64_t base, int64_t src_numel, void* dst, GpuEnv& env, const char* op);

// ---- entry lists (one per file) ----------------------------------------------------------------
std::span<const GpuKernelEntry> view_entries();         // view.cu: Reshape Flatten Squeeze Unsqueeze Shape Size
std::span<const GpuKernelEntry> layout_entries();       // layout.cu: Transpose Slice Tile Expand Concat Split Pad
std::span<const GpuKernelEntry> depth_space_entries();  // depth_space.cu: DepthToSpace SpaceToDepth
std::span<const GpuKernelEntry> index_entries();   // index.cu: Gather GatherElements GatherND ScatterElements ScatterND
std::span<const GpuKernelEntry> gen_entries();     // gen.cu: Trilu EyeLike ConstantOfShape Range OneHot
std::span<const GpuKernelEntry> select_entries();  // select.cu: NonZero NonMaxSuppression

}  // namespace kiln::gpu::tensor
