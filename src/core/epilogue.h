// The math of a fused epilogue (EpilogueAttrs in core/attrs.h), shared by the CPU kernels and the
// CUDA kernels so that both compute every activation by the same formula as the ONNX op it replaces
// (runtime/cpu/elementwise/unary.cpp): min and max are written as comparisons so that a NaN
// passes Relu and Clip as it does there. C is the compute type: float, or double for float64.
#pragma once

#include <cmath>

#include "core/attrs.h"
#include "core/host_device.h"

namespace kiln::epilogue {

template <class C>
KILN_HOST_DEVICE C min_of(C a, C b) {  // std::min: b only when b < a
  return b < a ? b : a;
}
template <class C>
KILN_HOST_DEVICE C max_of(C a, C b) {  // std::max: b only when a < b
  return a < b ? b : a;
}

template <class C>
KILN_HOST_DEVICE C sigmoid(C x) {
  // Split at 0 so that exp never overflows.
  return x >= C(0) ? C(1) / (C(1) + std::exp(-x)) : std::exp(x) / (C(1) + std::exp(x));
}

template <class C>
KILN_HOST_DEVICE C activate(Activation a, C x, float alpha, float beta) {
  switch (a) {
    case Activation::kNone: return x;
    case Activation::kRelu: return x < C(0) ? C(0) : x;
    case Activation::kLeakyRelu: return x < C(0) ? C(alpha) * x : x;
    case Activation::kClip: {
      const C v = x < C(alpha) ? C(alpha) : x;
      return v > C(beta) ? C(beta) : v;
    }
    case Activation::kSigmoid: return sigmoid(x);
    case Activation::kTanh: return std::tanh(x);
    case Activation::kSilu: return x * sigmoid(x);
    case Activation::kHardSigmoid: return max_of(C(0), min_of(C(1), C(alpha) * x + C(beta)));
    case Activation::kHardSwish: return x * max_of(C(0), min_of(C(1), x * C(1.0 / 6.0) + C(0.5)));
    case Activation::kGelu: return C(0.5) * x * (C(1) + std::erf(x * C(0.7071067811865476)));  // x / sqrt(2)
    case Activation::kGeluTanh: {
      const C k = C(0.7978845608028654);  // sqrt(2 / pi)
      return C(0.5) * x * (C(1) + std::tanh(k * (x + C(0.044715) * x * x * x)));
    }
  }
  return x;
}

// One output element: activation2(activation(p + bias) + z), p the product, z the residual (0
// without one, in which case activation2 is kNone).
template <class C>
KILN_HOST_DEVICE C apply(const EpilogueAttrs& e, C p, C bias, C z, bool has_z) {
  C v = activate(e.activation, p + bias, e.activation_alpha, e.activation_beta);
  if (has_z) v = activate(e.activation2, v + z, e.activation2_alpha, e.activation2_beta);
  return v;
}

}  // namespace kiln::epilogue
