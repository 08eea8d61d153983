// The epilogue of Kiln's INT8 ops kiln.QConv and kiln.QMatMul, shared by the CPU kernels and the
// CUDA kernels so that both round identically (the GPU tests compare them bit for bit):
//   real = float(acc) * alpha[m] + bias[m]        alpha[m] = x_scale * w_scale[m], all in float32
//   zr   = z_scale * float(z - z_zero)            kiln.QConv's optional quantized residual z (y's shape),
//   zr   = z                                      or a float32 residual z as it is
//   v    = activation(real [+ zr])                none, relu, clip(lo, hi), leaky_relu(alpha)
//   y    = v                                      float output (no y_scale), or
//   y    = saturate(rint(v / y_scale) + y_zero)   QuantizeLinear's rule; NaN goes to y_zero
// acc is the exact int32 sum of (x - x_zero) * (w - w_zero[m]) (modulo 2^32). Every operation is
// a separately rounded float32 operation: device code uses the _rn intrinsics so that nvcc does not
// contract a multiply and an add into an FMA (host code is compiled without contraction).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define KILN_HD __host__ __device__ __forceinline__
#else
#define KILN_HD inline
#endif

namespace kiln::qfused {

KILN_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
KILN_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
KILN_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
KILN_HD float to_float(int32_t v) {
#if defined(__CUDA_ARCH__)
  return __int2float_rn(v);
#else
  return static_cast<float>(v);
#endif
}

// Plain data, passed to CUDA kernels by value. act: QActivation's value.
struct Epilogue {
  int act = 0;
  float act_alpha = 0, act_beta = 0;
  bool quantize = false;
  float y_scale = 1, y_zero = 0;
  float qmin = -128, qmax = 127;
  float z_scale = 1;  // kiln.QConv's residual z: the kernels read z at y's element index
  int32_t z_zero = 0;

  KILN_HD float activate(float v) const {
    switch (act) {
      case 1: return v > 0.0f ? v : (v == v ? 0.0f : v);  // relu; NaN stays NaN
      case 2: return v < act_alpha ? act_alpha : (v > act_beta ? act_beta : v);
      case 3: return v < 0.0f ? mul_rn(v, act_alpha) : v;
      default: return v;
    }
  }
  // The real value of one output before the activation.
  KILN_HD static float real(uint32_t acc, float alpha, float bias) {
    return add_rn(mul_rn(to_float(static_cast<int32_t>(acc)), alpha), bias);
  }
  // real plus the residual element z (an int8/uint8 value as int32), rounded as two float32 operations.
  KILN_HD float plus_residual(float real, int32_t z) const {
    return add_rn(real, mul_rn(z_scale, to_float(z - z_zero)));
  }
  // v (after the activation) as a quantized value in [qmin, qmax], as float.
  KILN_HD float quantized(float v) const {
    float q = rintf(div_rn(v, y_scale));
    q = add_rn(q == q ? q : 0.0f, y_zero);
    return q < qmin ? qmin : (q > qmax ? qmax : q);
  }
};

}  // namespace kiln::qfused
