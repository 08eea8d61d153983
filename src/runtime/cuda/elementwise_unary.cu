// Unary elementwise CUDA kernels. Each op is a functor UnaryOp<K> whose formula mirrors the CPU
// kernel's (runtime/cpu/ops/elementwise_unary.cpp) in the same compute type, so float32 results
// differ from the CPU only by the math library's last-place error; float16 is stored as half and
// computed in float, like the CPU's Half path. Float ops run on float32 and float16; Abs, Neg,
// Relu and Sign also on int32 and int64; IsInf and IsNaN give bool; Not takes bool.
#include <cmath>

#include "runtime/cuda/elementwise_internal.cuh"

namespace kiln::gpu::ew {

namespace {

// log(1 + e^x) without overflow for large x: x + log1p(e^-x).
__device__ __forceinline__ float softplus(float x) { return x > 0.0f ? x + log1pf(expf(-x)) : log1pf(expf(x)); }

template <OpKind K>
struct UnaryOp;

#define KILN_GPU_UNARY(KIND, EXPR)                              \
  template <>                                                   \
  struct UnaryOp<OpKind::KIND> : NoInit {                       \
    explicit UnaryOp(const Attrs&) {}                           \
    __device__ float operator()(float x) const { return EXPR; } \
  };

KILN_GPU_UNARY(kAcos, acosf(x))
KILN_GPU_UNARY(kAcosh, acoshf(x))
KILN_GPU_UNARY(kAsin, asinf(x))
KILN_GPU_UNARY(kAsinh, asinhf(x))
KILN_GPU_UNARY(kAtan, atanf(x))
KILN_GPU_UNARY(kAtanh, atanhf(x))
KILN_GPU_UNARY(kCos, cosf(x))
KILN_GPU_UNARY(kCosh, coshf(x))
KILN_GPU_UNARY(kSin, sinf(x))
KILN_GPU_UNARY(kSinh, sinhf(x))
KILN_GPU_UNARY(kTan, tanf(x))
KILN_GPU_UNARY(kTanh, tanhf(x))
KILN_GPU_UNARY(kErf, erff(x))
KILN_GPU_UNARY(kExp, expf(x))
KILN_GPU_UNARY(kLog, logf(x))
KILN_GPU_UNARY(kSqrt, sqrtf(x))
KILN_GPU_UNARY(kReciprocal, 1.0f / x)
// Split at 0 so exp never overflows: 1/(1+e^-x) for x >= 0, e^x/(1+e^x) below.
KILN_GPU_UNARY(kSigmoid, x >= 0.0f ? 1.0f / (1.0f + expf(-x)) : expf(x) / (1.0f + expf(x)))
KILN_GPU_UNARY(kSoftplus, softplus(x))
KILN_GPU_UNARY(kSoftsign, x / (1.0f + fabsf(x)))
KILN_GPU_UNARY(kCeil, ceilf(x))
KILN_GPU_UNARY(kFloor, floorf(x))
KILN_GPU_UNARY(kRound, rintf(x))  // half to even, as the CPU's rint in the default rounding mode
KILN_GPU_UNARY(kMish, x* tanhf(softplus(x)))
// x * relu6(x + 3) / 6, written as the CPU writes it: x * clamp(x / 6 + 1/2, 0, 1).
KILN_GPU_UNARY(kHardSwish, x* std_max(0.0f, std_min(1.0f, x* static_cast<float>(1.0 / 6.0) + 0.5f)))
#undef KILN_GPU_UNARY

template <>
struct UnaryOp<OpKind::kGelu> : NoInit {
  bool tanh_approx;
  explicit UnaryOp(const Attrs& a) : tanh_approx(attrs_as<GeluAttrs>(a).approximate == GeluApproximation::kTanh) {}
  __device__ float operator()(float x) const {
    if (tanh_approx) {
      const float k = 0.7978845608028654f;  // sqrt(2/pi)
      return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
    }
    return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));  // x/sqrt(2)
  }
};
template <>
struct UnaryOp<OpKind::kHardSigmoid> : NoInit {
  float alpha, beta;
  explicit UnaryOp(const Attrs& a)
      : alpha(attrs_as<HardSigmoidAttrs>(a).alpha), beta(attrs_as<HardSigmoidAttrs>(a).beta) {}
  __device__ float operator()(float x) const { return std_max(0.0f, std_min(1.0f, alpha * x + beta)); }
};
template <>
struct UnaryOp<OpKind::kElu> : NoInit {
  float alpha;
  explicit UnaryOp(const Attrs& a) : alpha(attrs_as<AlphaAttrs>(a).alpha) {}
  __device__ float operator()(float x) const { return x < 0.0f ? alpha * expm1f(x) : x; }
};
template <>
struct UnaryOp<OpKind::kCelu> : NoInit {
  float alpha;
  explicit UnaryOp(const Attrs& a) : alpha(attrs_as<AlphaAttrs>(a).alpha) {}
  // max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
  __device__ float operator()(float x) const { return std_max(0.0f, x) + std_min(0.0f, alpha * expm1f(x / alpha)); }
};
template <>
struct UnaryOp<OpKind::kLeakyRelu> : NoInit {
  float alpha;
  explicit UnaryOp(const Attrs& a) : alpha(attrs_as<AlphaAttrs>(a).alpha) {}
  __device__ float operator()(float x) const { return x < 0.0f ? alpha * x : x; }
};
template <>
struct UnaryOp<OpKind::kThresholdedRelu> : NoInit {
  float alpha;
  explicit UnaryOp(const Attrs& a) : alpha(attrs_as<AlphaAttrs>(a).alpha) {}
  __device__ float operator()(float x) const { return x > alpha ? x : 0.0f; }
};
template <>
struct UnaryOp<OpKind::kSelu> : NoInit {
  float alpha, gamma;
  explicit UnaryOp(const Attrs& a) : alpha(attrs_as<SeluAttrs>(a).alpha), gamma(attrs_as<SeluAttrs>(a).gamma) {}
  __device__ float operator()(float x) const { return x > 0.0f ? gamma * x : gamma * alpha * expm1f(x); }
};
template <>
struct UnaryOp<OpKind::kShrink> : NoInit {
  float bias, lambd;
  explicit UnaryOp(const Attrs& a) : bias(attrs_as<ShrinkAttrs>(a).bias), lambd(attrs_as<ShrinkAttrs>(a).lambd) {}
  __device__ float operator()(float x) const { return x < -lambd ? x + bias : x > lambd ? x - bias : 0.0f; }
};

// ---- ops defined on integers too (C is float, int32_t or int64_t) ----------------------------
// Integer negation wraps modulo 2^bits (|INT_MIN| = INT_MIN), computed unsigned to avoid UB.
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
      return fabsf(x);
    else
      return x < 0 ? wrap_neg(x) : x;
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
    else
      return static_cast<C>((x > 0) - (x < 0));
  }
};

// ---- bool results ----------------------------------------------------------------------------
struct IsInfOp : NoInit {
  bool neg, pos;
  __device__ bool operator()(float x) const { return isinf(x) && (x > 0.0f ? pos : neg); }
};
struct IsNanOp : NoInit {
  __device__ bool operator()(float x) const { return x != x; }
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
    {OpKind::kErf, float_unary<OpKind::kErf>},
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
    {OpKind::kShrink, float_unary<OpKind::kShrink>},
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
