// Shared pieces of the quant family's CUDA kernels (private to src/runtime/cuda/quant/): the entry
// spans of the group files (joined into one table in registry.cu) and the kernel functions of the
// files that implement some of their ops, device element loads of float types through double,
// int8/uint8 zero points and float scales read by dtype code on the device or as build-time
// constants on the host, and the device error flag.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/cuda/device_math.cuh"
#include "runtime/cuda/elementwise/elementwise_internal.cuh"

namespace kiln::gpu::quant {

// Whether the op's optional input i is given.
inline bool present(std::span<const TensorView> in, size_t i) { return i < in.size() && in[i].exists; }

// Input i's bytes on the host: a quantization parameter the engine holds as a build-time constant,
// which the host side of a kernel reads (scales passed by value, zero points that choose a path).
inline const void* host_param(const GpuEnv& env, size_t i, const char* op) {
  const void* h = env.host(i);
  if (!h) throw Error(std::string(op) + ": input " + std::to_string(i) + " must be a build-time constant");
  return h;
}
inline float host_float(const GpuEnv& env, size_t i, const char* op) {
  return *static_cast<const float*>(host_param(env, i, op));
}

// ---- quantization parameters on the device -------------------------------------------------------
// A zero point or scale tensor, read element by element by the kernels (they live on the device).
enum ParamKind : int { kParamAbsent = 0, kParamI8, kParamU8, kParamF32, kParamF16, kParamBF16 };

inline ParamKind param_kind(const TensorView& t, const char* op) {
  if (!t.exists) return kParamAbsent;
  switch (t.dtype) {
    case DataType::kInt8: return kParamI8;
    case DataType::kUInt8: return kParamU8;
    case DataType::kFloat32: return kParamF32;
    case DataType::kFloat16: return kParamF16;
    case DataType::kBFloat16: return kParamBF16;
    default: ew::throw_gpu_dtype(t.dtype, op);
  }
}

// Which element a per-row (of A) / per-column (of B) / per-channel parameter uses: mode 0 one
// value, 1 element i, 2 element batch * rows + i (the CPU's RowParam).
struct ParamIndex {
  int mode = 0;
  int64_t rows = 1;
  __device__ __forceinline__ int64_t operator()(int64_t batch, int64_t i) const {
    return mode == 0 ? 0 : mode == 1 ? i : batch * rows + i;
  }
};

struct QParam {
  const void* p = nullptr;
  int kind = kParamAbsent;
  ParamIndex at;
};

// numel 1: one value; rank 1: per row; else per (batch, row) (shape inference checked the shape).
inline QParam make_qparam(std::span<const TensorView> in, size_t i, int64_t rows, const char* op) {
  QParam q;
  q.at.rows = rows;
  if (i >= in.size() || !in[i].exists) return q;
  q.p = in[i].data;
  q.kind = param_kind(in[i], op);
  q.at.mode = in[i].numel() == 1 ? 0 : in[i].rank() == 1 ? 1 : 2;
  return q;
}

__device__ __forceinline__ int32_t load_zero_point(const QParam& q, int64_t i) {
  if (q.kind == kParamI8) return static_cast<const int8_t*>(q.p)[i];
  if (q.kind == kParamU8) return static_cast<const uint8_t*>(q.p)[i];
  return 0;
}

__device__ __forceinline__ float load_scale(const QParam& q, int64_t i) {
  if (q.kind == kParamF16) return __half2float(static_cast<const __half*>(q.p)[i]);
  if (q.kind == kParamBF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(q.p)[i]);
  return static_cast<const float*>(q.p)[i];
}

// round_half_even(v) saturated to [lo, hi], NaN to lo: the CPU's requantize.
__device__ __forceinline__ int32_t requantize(double v, double lo, double hi) {
  if (!(v >= lo)) v = lo;
  if (v > hi) v = hi;
  return static_cast<int32_t>(rint(v));
}

// QLinear output: y = requantize(acc * multiplier + zero_point) with the multiplier formed in float
// as the CPU does ((s_a * s_b) / s_y) and the product and sum each rounded once in double (no FMA
// contraction: the CPU does not contract either).
__device__ __forceinline__ int32_t requantize_acc(int32_t acc, float s_a, float s_b, float s_y, int32_t zy, double lo,
                                                  double hi) {
  const float mult = __fdiv_rn(__fmul_rn(s_a, s_b), s_y);
  return requantize(__dadd_rn(__dmul_rn(static_cast<double>(acc), static_cast<double>(mult)), static_cast<double>(zy)),
                    lo, hi);
}

// ---- the group files' entries (registry.cu joins them) ---------------------------------------------
std::span<const GpuKernelEntry> quantize_entries();  // quantize.cu: QuantizeLinear DequantizeLinear DynamicQuantizeLinear
std::span<const GpuKernelEntry> conv_entries();      // conv.cu: ConvInteger QLinearConv QConv NhwcQConv
std::span<const GpuKernelEntry> matmul_entries();    // matmul.cu: MatMulInteger QLinearMatMul QMatMul

// ---- kernels the group files list --------------------------------------------------------------------
// conv.cu
void conv_integer_kernel(OpKind, const Attrs&, std::span<const TensorView>, std::span<const TensorView>, GpuEnv&);
void qlinear_conv_kernel(OpKind, const Attrs&, std::span<const TensorView>, std::span<const TensorView>, GpuEnv&);
// matmul.cu
void matmul_integer_kernel(OpKind, const Attrs&, std::span<const TensorView>, std::span<const TensorView>, GpuEnv&);
void qlinear_matmul_kernel(OpKind, const Attrs&, std::span<const TensorView>, std::span<const TensorView>, GpuEnv&);
// qfused.cu: QConv and QMatMul, which share one tensor-core implicit GEMM.
void qconv_kernel(OpKind, const Attrs&, std::span<const TensorView>, std::span<const TensorView>, GpuEnv&);
void qmatmul_kernel(OpKind, const Attrs&, std::span<const TensorView>, std::span<const TensorView>, GpuEnv&);
// conv/nhwc.cu: NhwcQConv through Kiln's INT8 kernels (conv/<kind>/) or a cuDNN graph, its
// workspace and tactics (candidate plans).
void qconv_nhwc_kernel(OpKind, const Attrs&, std::span<const TensorView>, std::span<const TensorView>, GpuEnv&);
size_t qconv_nhwc_workspace(OpKind, const Attrs&, std::span<const TensorView>, std::span<const TensorView>, GpuEnv&);
std::vector<int32_t> qconv_nhwc_tactics(OpKind, const Attrs&, std::span<const TensorView>, std::span<const TensorView>,
                                        GpuEnv&);

}  // namespace kiln::gpu::quant
