// Unary elementwise kernels. Each op is a functor UnaryFn<K> over the compute type C (float for
// the half types, else the element type); the kernel templates below pick the dtype family.
#include <cmath>

#include "runtime/cpu/elementwise/elementwise_internal.h"

namespace kiln::cpu::ew {

namespace {

template <class C>
inline C softplus(C x) {
  // log(1 + e^x) without overflow for large x: x + log1p(e^-x).
  return x > C(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

template <OpKind K>
struct UnaryFn;

#define KILN_UNARY_FN(KIND, EXPR)     \
  template <>                         \
  struct UnaryFn<OpKind::KIND> {      \
    explicit UnaryFn(const Attrs&) {} \
    template <class C>                \
    C operator()(C x) const {         \
      return EXPR;                    \
    }                                 \
  };

KILN_UNARY_FN(kAcos, std::acos(x))
KILN_UNARY_FN(kAcosh, std::acosh(x))
KILN_UNARY_FN(kAsin, std::asin(x))
KILN_UNARY_FN(kAsinh, std::asinh(x))
KILN_UNARY_FN(kAtan, std::atan(x))
KILN_UNARY_FN(kAtanh, std::atanh(x))
KILN_UNARY_FN(kCos, std::cos(x))
KILN_UNARY_FN(kCosh, std::cosh(x))
KILN_UNARY_FN(kSin, std::sin(x))
KILN_UNARY_FN(kSinh, std::sinh(x))
KILN_UNARY_FN(kTan, std::tan(x))
KILN_UNARY_FN(kTanh, std::tanh(x))
KILN_UNARY_FN(kErf, std::erf(x))
KILN_UNARY_FN(kExp, std::exp(x))
KILN_UNARY_FN(kLog, std::log(x))
KILN_UNARY_FN(kSqrt, std::sqrt(x))
KILN_UNARY_FN(kReciprocal, C(1) / x)
// Split at 0 so exp never overflows: 1/(1+e^-x) for x >= 0, e^x/(1+e^x) below.
KILN_UNARY_FN(kSigmoid, x >= C(0) ? C(1) / (C(1) + std::exp(-x)) : std::exp(x) / (C(1) + std::exp(x)))
KILN_UNARY_FN(kSoftplus, softplus(x))
KILN_UNARY_FN(kSoftsign, x / (C(1) + std::abs(x)))
KILN_UNARY_FN(kCeil, std::ceil(x))
KILN_UNARY_FN(kFloor, std::floor(x))
KILN_UNARY_FN(kRound, std::rint(x))  // default rounding mode: half to even
KILN_UNARY_FN(kMish, x* std::tanh(softplus(x)))
KILN_UNARY_FN(kHardSwish, x* std::max(C(0), std::min(C(1), x* C(1.0 / 6.0) + C(0.5))))
#undef KILN_UNARY_FN

template <>
struct UnaryFn<OpKind::kRelu> {
  explicit UnaryFn(const Attrs&) {}
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>)
      return x;
    else
      return x < C(0) ? C(0) : x;  // a NaN compares false and passes through, like np.maximum
  }
};
template <>
struct UnaryFn<OpKind::kAbs> {
  explicit UnaryFn(const Attrs&) {}
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>)
      return std::abs(x);
    else if constexpr (std::is_signed_v<C>)
      return x < 0 ? wrap_neg(x) : x;  // |INT_MIN| wraps to INT_MIN
    else
      return x;
  }
};
template <>
struct UnaryFn<OpKind::kNeg> {
  explicit UnaryFn(const Attrs&) {}
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>)
      return -x;
    else
      return wrap_neg(x);
  }
};
template <>
struct UnaryFn<OpKind::kSign> {
  explicit UnaryFn(const Attrs&) {}
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>)
      return x > C(0) ? C(1) : x < C(0) ? C(-1) : x;  // 0 and NaN stay
    else if constexpr (std::is_signed_v<C>)
      return static_cast<C>((x > 0) - (x < 0));
    else
      return static_cast<C>(x != 0);
  }
};
template <>
struct UnaryFn<OpKind::kGelu> {
  bool tanh_approx;
  explicit UnaryFn(const Attrs& a) : tanh_approx(attrs_as<GeluAttrs>(a).approximate == GeluApproximation::kTanh) {}
  template <class C>
  C operator()(C x) const {
    if (tanh_approx) {
      const C k = C(0.7978845608028654);  // sqrt(2/pi)
      return C(0.5) * x * (C(1) + std::tanh(k * (x + C(0.044715) * x * x * x)));
    }
    return C(0.5) * x * (C(1) + std::erf(x * C(0.7071067811865476)));  // x/sqrt(2)
  }
};
template <>
struct UnaryFn<OpKind::kHardSigmoid> {
  float alpha, beta;
  explicit UnaryFn(const Attrs& a)
      : alpha(attrs_as<HardSigmoidAttrs>(a).alpha), beta(attrs_as<HardSigmoidAttrs>(a).beta) {}
  template <class C>
  C operator()(C x) const {
    return std::max(C(0), std::min(C(1), C(alpha) * x + C(beta)));
  }
};
template <>
struct UnaryFn<OpKind::kElu> {
  float alpha;
  explicit UnaryFn(const Attrs& a) : alpha(attrs_as<AlphaAttrs>(a).alpha) {}
  template <class C>
  C operator()(C x) const {
    return x < C(0) ? C(alpha) * std::expm1(x) : x;
  }
};
template <>
struct UnaryFn<OpKind::kCelu> {
  float alpha;
  explicit UnaryFn(const Attrs& a) : alpha(attrs_as<AlphaAttrs>(a).alpha) {}
  template <class C>
  C operator()(C x) const {
    // max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
    return std::max(C(0), x) + std::min(C(0), C(alpha) * std::expm1(x / C(alpha)));
  }
};
template <>
struct UnaryFn<OpKind::kLeakyRelu> {
  float alpha;
  explicit UnaryFn(const Attrs& a) : alpha(attrs_as<AlphaAttrs>(a).alpha) {}
  template <class C>
  C operator()(C x) const {
    return x < C(0) ? C(alpha) * x : x;
  }
};
template <>
struct UnaryFn<OpKind::kThresholdedRelu> {
  float alpha;
  explicit UnaryFn(const Attrs& a) : alpha(attrs_as<AlphaAttrs>(a).alpha) {}
  template <class C>
  C operator()(C x) const {
    return x > C(alpha) ? x : C(0);
  }
};
template <>
struct UnaryFn<OpKind::kSelu> {
  float alpha, gamma;
  explicit UnaryFn(const Attrs& a) : alpha(attrs_as<SeluAttrs>(a).alpha), gamma(attrs_as<SeluAttrs>(a).gamma) {}
  template <class C>
  C operator()(C x) const {
    return x > C(0) ? C(gamma) * x : C(gamma) * C(alpha) * std::expm1(x);
  }
};
template <>
struct UnaryFn<OpKind::kShrink> {
  float bias, lambd;
  explicit UnaryFn(const Attrs& a) : bias(attrs_as<ShrinkAttrs>(a).bias), lambd(attrs_as<ShrinkAttrs>(a).lambd) {}
  template <class C>
  C operator()(C x) const {
    return x < -C(lambd) ? x + C(bias) : x > C(lambd) ? x - C(bias) : C(0);
  }
};

const char* name_of(OpKind k) { return op_name(k).data(); }  // the table's names are literals

// Float-only ops.
template <OpKind K>
void float_unary(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                 KernelEnv& env) {
  const UnaryFn<K> f(attrs);
  dispatch_float(in[0].dtype, name_of(K), [&](auto tag) {
    using T = typename decltype(tag)::type;
    run_unary<T, T>(in[0], out[0], env, f);
  });
}

// Ops whose functor handles integers natively (Abs, Neg, Sign, Relu).
template <OpKind K>
void numeric_unary(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                   KernelEnv& env) {
  const UnaryFn<K> f(attrs);
  dispatch_numeric(in[0].dtype, name_of(K), [&](auto tag) {
    using T = typename decltype(tag)::type;
    run_unary<T, T>(in[0], out[0], env, f);
  });
}

// Float ops that ONNX also defines on integers (Erf, Shrink): integers go through double and
// convert back with saturation, like numpy's float result cast to the input type.
template <OpKind K>
void numeric_via_double_unary(OpKind, const Attrs& attrs, std::span<const TensorView> in,
                              std::span<const TensorView> out, KernelEnv& env) {
  const UnaryFn<K> f(attrs);
  dispatch_numeric(in[0].dtype, name_of(K), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsFloat<T>) {
      run_unary<T, T>(in[0], out[0], env, f);
    } else {
      run_unary<T, T>(in[0], out[0], env, [&](T x) { return sat_float_to_int<T>(f(static_cast<double>(x))); });
    }
  });
}

void is_inf_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                   KernelEnv& env) {
  const auto& a = attrs_as<IsInfAttrs>(attrs);
  const bool neg = a.detect_negative != 0, pos = a.detect_positive != 0;
  dispatch_float(in[0].dtype, "IsInf", [&](auto tag) {
    using T = typename decltype(tag)::type;
    run_unary<T, bool>(in[0], out[0], env, [&](auto x) { return std::isinf(x) && (x > 0 ? pos : neg); });
  });
}

void is_nan_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                   KernelEnv& env) {
  dispatch_float(in[0].dtype, "IsNaN", [&](auto tag) {
    using T = typename decltype(tag)::type;
    run_unary<T, bool>(in[0], out[0], env, [](auto x) { return x != x; });
  });
}

void not_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, KernelEnv& env) {
  run_unary<uint8_t, bool>(in[0], out[0], env, [](uint8_t x) { return x == 0; });
}

constexpr KernelEntry kEntries[] = {
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

std::span<const KernelEntry> unary_kernel_entries() { return kEntries; }

}  // namespace kiln::cpu::ew
