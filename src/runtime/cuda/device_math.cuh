// Device helpers that several families' CUDA kernels share (pool, norm, resize, quant, loss): warp
// and block sums, the arithmetic that keeps float results equal to the CPU kernels', parameters of
// any float type read and written by dtype code, conversions through double, the device error flag,
// and division by a divisor fixed on the host. The CPU is built without contraction (ISO C++, no
// -ffp-contract=fast), so where a GPU kernel must give the CPU's bits (BatchNormalization, Resize)
// it multiplies and adds with the __fmul_rn/__fadd_rn family, which nvcc never fuses into an FMA.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "runtime/cuda/elementwise/elementwise_internal.cuh"

namespace kiln::gpu {

// Sum (F: float or double) over the aligned groups of G lanes (G a power of two <= 32); every lane
// of the warp must call.
template <int G = 32, class F>
__device__ __forceinline__ F group_sum(F v) {
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 values; the call may be repeated with the same scratch.
template <class F>
__device__ __forceinline__ F block_sum(F v, F* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = group_sum(v);
  __syncthreads();  // a previous call's readers are done with scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : F(0);
  return group_sum(v);
}

// Uncontracted products and sums (see the file comment).
__device__ __forceinline__ float mul_add_nc(float acc, float w, float v) { return __fadd_rn(acc, __fmul_rn(w, v)); }
__device__ __forceinline__ double mul_add_nc(double acc, double w, double v) { return __dadd_rn(acc, __dmul_rn(w, v)); }

// Float element types a parameter tensor may have (BatchNormalization's T1/T2, statistics outputs).
enum class FloatCode : int { kF32, kF16, kF64, kBF16 };

inline FloatCode float_code(DataType t, const char* op) {
  switch (t) {
    case DataType::kFloat32: return FloatCode::kF32;
    case DataType::kFloat16: return FloatCode::kF16;
    case DataType::kFloat64: return FloatCode::kF64;
    case DataType::kBFloat16: return FloatCode::kBF16;
    default: ew::throw_gpu_dtype(t, op);
  }
}

__device__ __forceinline__ double load_any(const void* p, FloatCode c, int64_t i) {
  switch (c) {
    case FloatCode::kF32: return static_cast<const float*>(p)[i];
    case FloatCode::kF16: return __half2float(static_cast<const __half*>(p)[i]);
    case FloatCode::kF64: return static_cast<const double*>(p)[i];
    case FloatCode::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  }
  return 0;
}

// Stores v as the CPU's from_double does: the half types through float.
__device__ __forceinline__ void store_any(void* p, FloatCode c, int64_t i, double v) {
  switch (c) {
    case FloatCode::kF32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case FloatCode::kF16: static_cast<__half*>(p)[i] = __float2half_rn(static_cast<float>(v)); break;
    case FloatCode::kF64: static_cast<double*>(p)[i] = v; break;
    case FloatCode::kBF16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(static_cast<float>(v)); break;
  }
}

// Half types widen through float, then to double; stores narrow double -> float -> half, exactly as
// the CPU's from_d does (T(static_cast<float>(v))).
template <class T>
__device__ __forceinline__ double to_d(T v) {
  if constexpr (std::is_same_v<T, __half>)
    return static_cast<double>(__half2float(v));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return static_cast<double>(__bfloat162float(v));
  else
    return static_cast<double>(v);
}

template <class T>
__device__ __forceinline__ T from_d(double v) {
  if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

// Records the first device error of a launch (kGpuIndexOutOfRange, ...) in *err, if there is one.
__device__ __forceinline__ void set_error(int* err, int code) {
  if (err) atomicCAS(err, 0, code);
}

// n / d for a divisor fixed on the host, by a multiply-high and a shift (PyTorch's IntDivider):
// exact for every n < 2^31, the range of the kernels' 32-bit index paths.
struct FastDiv {
  uint32_t d = 1, m = 1, s = 0;
  FastDiv() = default;
  explicit FastDiv(uint32_t div) : d(div) {
    while (s < 32 && (uint64_t{1} << s) < div) ++s;
    m = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << s) - div)) / div + 1);
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const { return (__umulhi(n, m) + n) >> s; }
};

}  // namespace kiln::gpu
