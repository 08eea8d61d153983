// Unary elementwise CUDA kernels. Each op is a functor UnaryOp<K> over the compute type C (float
// for the half types, else the element type) whose formula mirrors the CPU kernel's
// (runtime/cpu/elementwise/unary.cpp): float32 results differ from the CPU only by the math
// library's last-place error, float64 computes in double, and float16/bfloat16 are stored as such
// and computed in float, like the CPU's half paths. The dtypes are the CPU kernels': float ops take
// every float type; Abs, Neg, Relu and Sign every numeric type; Erf and Shrink also take integers
// (through double, converted back saturating); IsInf and IsNaN give bool; Not takes bool.
#include <cmath>

#include "runtime/cuda/elementwise/elementwise_internal.cuh"

namespace kiln::gpu::ew {

namespace {

// log(1 + e^x) without overflow for large x: x + log1p(e^-x). Unqualified math calls pick CUDA's
// float overloads for float and the double functions for double.
template <class C>
__device__ __forceinline__ C softplus(C x) {
  return x > C(0) ? x + log1p(exp(-x)) : log1p(exp(x));
}

template <OpKind K>
struct UnaryOp;

#define KILN_GPU_UNARY(KIND, EXPR)        \
  template <>                             \
  struct UnaryOp<OpKind::KIND> : NoInit { \
    explicit UnaryOp(const Attrs&) {}     \
    template <class C>                    \
    __device__ C operator()(C x) const {  \
      return EXPR;                        \
    }                                     \
  };

KILN_GPU_UNARY(kAcos, acos(x))
KILN_GPU_UNARY(kAcosh, acosh(x))
KILN_GPU_UNARY(kAsin, asin(x))
KILN_GPU_UNARY(kAsinh, asinh(x))
KILN_GPU_UNARY(kAtan, atan(x))
KILN_GPU_UNARY(kAtanh, atanh(x))
KILN_GPU_UNARY(kCos, cos(x))
KILN_GPU_UNARY(kCosh, cosh(x))
KILN_GPU_UNARY(kSin, sin(x))
KILN_GPU_UNARY(kSinh, sinh(x))
KILN_GPU_UNARY(kTan, tan(x))
KILN_GPU_UNARY(kTanh, tanh(x))
KILN_GPU_UNARY(kErf, erf(x))
KILN_GPU_UNARY(kExp, exp(x))
KILN_GPU_UNARY(kLog, log(x))
KILN_GPU_UNARY(kSqrt, sqrt(x))
KILN_GPU_UNARY(kReciprocal, C(1) / x)
// Split at 0 so exp never overflows: 1/(1+e^-x) for x >= 0, e^x/(1+e^x) below.
KILN_GPU_UNARY(kSigmoid, x >= C(0) ? C(1) / (C(1) + exp(-x)) : exp(x) / (C(1) + exp(x)))
KILN_GPU_UNARY(kSoftplus, softplus(x))
KILN_GPU_UNARY(kSoftsign, x / (C(1) + fabs(x)))
KILN_GPU_UNARY(kCeil, ceil(x))
KILN_GPU_UNARY(kFloor, floor(x))
KILN_GPU_UNARY(kRound, rint(x))  // half to even, as the CPU's rint in the default rounding mode
KILN_GPU_UNARY(kMish, x* tanh(softplus(x)))
// x * relu6(x + 3) / 6, written as the CPU writes it: x * clamp(x / 6 + 1/2, 0, 1).
KILN_GPU_UNARY(kHardSwish, x* std_max(C(0), std_min(C(1), x* C(1.0 / 6.0) + C(0.5))))
#undef KILN_GPU_UNARY

template <>
struct UnaryOp<OpKind::kGelu> : NoInit {
  bool tanh_approx;
  explicit UnaryOp(const Attrs& a) : tanh_approx(attrs_as<GeluAttrs>(a).approximate == GeluApproximation::kTanh) {}
  template <class C>
  __device__ C operator()(C x) const {
    if (tanh_approx) {
      const C k = C(0.7978845608028654);  // sqrt(2/pi)
      return C(0.5) * x * (C(1) + tanh(k * (x + C(0.044715) * x * x * x)));
    }
    return C(0.5) * x * (C(1) + erf(x * C(0.7071067811865476)));  // x/sqrt(2)
  }
};
template <>
struct UnaryOp<OpKind::kHardSigmoid> : NoInit {
  float alpha, beta;
  explicit UnaryOp(const Attrs& a)
      : alpha(attrs_as<HardSigmoidAttrs>(a).alpha), beta(attrs_as<HardSigmoidAttrs>(a).beta) {}
  template <class C>
  __device__ C operator()(C x) const {
    return std_max(C(0), std_min(C(1), C(alpha) * x + C(beta)));
  }
};
template <>
struct UnaryOp<OpKind::kElu> : NoInit {
  float alpha;
  explicit UnaryOp(const Attrs& a) : alpha(attrs_as<AlphaAttrs>(a).alpha) {}
  template <class C>
  __device__ C operator()(C x) const {
    return x < C(0) ? C(alpha) * expm1(x) : x;
  }
};
template <>
struct UnaryOp<OpKind::kCelu> : NoInit {
  float alpha;
  explicit UnaryOp(const Attrs& a) : alpha(attrs_as<AlphaAttrs>(a).alpha) {}
  // max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
  template <class C>
  __device__ C operator()(C x) const {
    return std_max(C(0), x) + std_min(C(0), C(alpha) * expm1(x / C(alpha)));
  }
};
template <>
struct UnaryOp<OpKind::kLeakyRelu> : NoInit {
  float alpha;
  explicit UnaryOp(const Attrs& a) : alpha(attrs_as<AlphaAttrs>(a).alpha) {}
  template <class C>
  __device__ C operator()(C x) const {
    return x < C(0) ? C(alpha) * x : x;
  }
};
template <>
struct UnaryOp<OpKind::kThresholdedRelu> : NoInit {
  float alpha;
  explicit UnaryOp(const Attrs& a) : alpha(attrs_as<AlphaAttrs>(a).alpha) {}
  template <class C>
  __device__ C operator()(C x) const {
    return x > C(alpha) ? x : C(0);
  }
};
template <>
struct UnaryOp<OpKind::kSelu> : NoInit {
  float alpha, gamma;
  explicit UnaryOp(const Attrs& a) : alpha(attrs_as<SeluAttrs>(a).alpha), gamma(attrs_as<SeluAttrs>(a).gamma) {}
  template <class C>
  __device__ C operator()(C x) const {
    return x > C(0) ? C(gamma) * x : C(gamma) * C(alpha) * expm1(x);
  }
};
template <>
struct UnaryOp<OpKind::kShrink> : NoInit {
  float bias, lambd;
  explicit UnaryOp(const Attrs& a) : bias(attrs_as<ShrinkAttrs>(a).bias), lambd(attrs_as<ShrinkAttrs>(a).lambd) {}
  template <class C>
  __device__ C operator()(C x) const {
    return x < -C(lambd) ? x + C(bias) : x > C(lambd) ? x - C(bias) : C(0);
  }
};

// ---- ops defined on integers too ---------------------------------------------------------------
// Integer negation wraps modulo 2^bits (|INT_MIN| = INT_MIN), computed unsigned to avoid UB; the
// small types promote to int, whose result the store narrows modulo 2^bits.
template <class C>
__device__ __forceinline__ C wrap_neg(C x) {
  using U = std::make_unsigned_t<C>;
  return static_cast<C>(U(0) - static_cast<U>(x));
}

template <>
struct UnaryOp<OpKind::kAbs> : NoInit {
  explicit UnaryOp(const Attrs&) {}
  template <class C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>)
      return fabs(x);
    else if constexpr (std::is_signed_v<C>)
      return x < 0 ? wrap_neg(x) : x;
    else
      return x;
  }
};
template <>
struct UnaryOp<OpKind::kNeg> : NoInit {
  explicit UnaryOp(const Attrs&) {}
  template <class C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>)
      return -x;
    else
      return wrap_neg(x);
  }
};
template <>
struct UnaryOp<OpKind::kRelu> : NoInit {
  explicit UnaryOp(const Attrs&) {}
  template <class C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>)
      return x;
    else
      return x < C(0) ? C(0) : x;  // a NaN compares false and passes through, as on the CPU
  }
};
template <>
struct UnaryOp<OpKind::kSign> : NoInit {
  explicit UnaryOp(const Attrs&) {}
  template <class C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>)
      return x > C(0) ? C(1) : x < C(0) ? C(-1) : x;  // 0 and NaN stay
    else if constexpr (std::is_signed_v<C>)
      return static_cast<C>((x > 0) - (x < 0));
    else
      return static_cast<C>(x != 0);
  }
};

// Erf and Shrink on integers: the float formula in double, converted back saturating (numpy's
// float result cast to the input type), as the CPU does.
template <class T, class F>
struct ViaDouble : NoInit {
  F f;
  __device__ T operator()(T x) const { return sat_float_to_int<T>(f(static_cast<double>(x))); }
};

// ---- bool results ----------------------------------------------------------------------------
struct IsInfOp : NoInit {
  bool neg, pos;
  template <class C>
  __device__ bool operator()(C x) const {
    return isinf(x) && (x > C(0) ? pos : neg);
  }
};
struct IsNanOp : NoInit {
  template <class C>
  __device__ bool operator()(C x) const {
    return x != x;
  }
};
struct NotOp : NoInit {
  __device__ bool operator()(bool x) const { return !x; }
};

// ---- host entry points -------------------------------------------------------------------------
template <OpKind K>
void float_unary(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                 GpuEnv& env) {
  const UnaryOp<K> f(attrs);
  dispatch_ew_float(in[0].dtype, name_of(K), [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_unary<T, T>(in[0], out[0], env, f, name_of(K));
  });
}

template <OpKind K>
void numeric_unary(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                   GpuEnv& env) {
  const UnaryOp<K> f(attrs);
  dispatch_ew_numeric(in[0].dtype, name_of(K), [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_unary<T, T>(in[0], out[0], env, f, name_of(K));
  });
}

template <OpKind K>
void numeric_via_double_unary(OpKind, const Attrs& attrs, std::span<const TensorView> in,
                              std::span<const TensorView> out, GpuEnv& env) {
  const UnaryOp<K> f(attrs);
  dispatch_ew_numeric(in[0].dtype, name_of(K), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsFloatDev<T>)
      launch_unary<T, T>(in[0], out[0], env, f, name_of(K));
    else
      launch_unary<T, T>(in[0], out[0], env, ViaDouble<T, UnaryOp<K>>{{}, f}, name_of(K));
  });
}

void is_inf_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                   GpuEnv& env) {
  const auto& a = attrs_as<IsInfAttrs>(attrs);
  IsInfOp f;
  f.neg = a.detect_negative != 0;
  f.pos = a.detect_positive != 0;
  dispatch_ew_float(in[0].dtype, "IsInf", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_unary<T, Bool8>(in[0], out[0], env, f, "IsInf");
  });
}

void is_nan_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, GpuEnv& env) {
  dispatch_ew_float(in[0].dtype, "IsNaN", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_unary<T, Bool8>(in[0], out[0], env, IsNanOp{}, "IsNaN");
  });
}

void not_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, GpuEnv& env) {
  launch_unary<Bool8, Bool8>(in[0], out[0], env, NotOp{}, "Not");
}

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kAbs, numeric_unary<OpKind::kAbs>},
    {OpKind::kAcos, float_unary<OpKind::kAcos>},
    {OpKind::kAcosh, float_unary<OpKind::kAcosh>},
    {OpKind::kAsin, float_unary<OpKind::kAsin>},
    {OpKind::kAsinh, float_unary<OpKind::kAsinh>},
    {OpKind::kAtan, float_unary<OpKind::kAtan>},
    {OpKind::kAtanh, float_unary<OpKind::kAtanh>},
    {OpKind::kCeil, float_unary<OpKind::kCeil>},
    {OpKind::kCelu, float_unary<OpKind::kCelu>},
    {OpKind::kCos, float_unary<OpKind::kCos>},
    {OpKind::kCosh, float_unary<OpKind::kCosh>},
    {OpKind::kElu, float_unary<OpKind::kElu>},
    {OpKind::kErf, numeric_via_double_unary<OpKind::kErf>},
    {OpKind::kExp, float_unary<OpKind::kExp>},
    {OpKind::kFloor, float_unary<OpKind::kFloor>},
    {OpKind::kGelu, float_unary<OpKind::kGelu>},
    {OpKind::kHardSigmoid, float_unary<OpKind::kHardSigmoid>},
    {OpKind::kHardSwish, float_unary<OpKind::kHardSwish>},
    {OpKind::kIsInf, is_inf_kernel},
    {OpKind::kIsNaN, is_nan_kernel},
    {OpKind::kLeakyRelu, float_unary<OpKind::kLeakyRelu>},
    {OpKind::kLog, float_unary<OpKind::kLog>},
    {OpKind::kMish, float_unary<OpKind::kMish>},
    {OpKind::kNeg, numeric_unary<OpKind::kNeg>},
    {OpKind::kNot, not_kernel},
    {OpKind::kReciprocal, float_unary<OpKind::kReciprocal>},
    {OpKind::kRelu, numeric_unary<OpKind::kRelu>},
    {OpKind::kRound, float_unary<OpKind::kRound>},
    {OpKind::kSelu, float_unary<OpKind::kSelu>},
    {OpKind::kShrink, numeric_via_double_unary<OpKind::kShrink>},
    {OpKind::kSigmoid, float_unary<OpKind::kSigmoid>},
    {OpKind::kSign, numeric_unary<OpKind::kSign>},
    {OpKind::kSin, float_unary<OpKind::kSin>},
    {OpKind::kSinh, float_unary<OpKind::kSinh>},
    {OpKind::kSoftplus, float_unary<OpKind::kSoftplus>},
    {OpKind::kSoftsign, float_unary<OpKind::kSoftsign>},
    {OpKind::kSqrt, float_unary<OpKind::kSqrt>},
    {OpKind::kTan, float_unary<OpKind::kTan>},
    {OpKind::kTanh, float_unary<OpKind::kTanh>},
    {OpKind::kThresholdedRelu, float_unary<OpKind::kThresholdedRelu>},
};

}  // namespace

std::span<const GpuKernelEntry> unary_gpu_entries() { return kEntries; }

}  // namespace kiln::gpu::ew
