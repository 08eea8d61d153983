// Broadcasting binary and variadic CUDA kernels: Add Sub Mul Div Mod PRelu Pow, Max Min Sum Mean
// (variadic), comparisons, And Or Xor, BitShift, and Where. Formulas and element types mirror the CPU
// kernels (runtime/cpu/elementwise/binary.cpp); float64 computes in double. An integer divisor
// of 0 (Div, Mod) and an integer 0 raised to a negative power, which the CPU kernel throws for,
// set kGpuBadValue in the step's error flag (a GPU kernel cannot read the divisor on the host) and
// give 0.
#include <cmath>

#include "runtime/cuda/elementwise/elementwise_internal.cuh"

namespace kiln::gpu::ew {

namespace {

// Integer add/sub/mul wrap modulo 2^bits: computed in an unsigned type of at least 32 bits (no
// signed-overflow UB; the small types would promote to int, where uint16 * uint16 overflows), then
// narrowed.
template <class C>
using Wide = std::conditional_t<(sizeof(C) < 4), uint32_t, std::make_unsigned_t<C>>;
template <class C>
__device__ __forceinline__ C wrap(Wide<C> v) {
  return static_cast<C>(v);
}

__device__ __forceinline__ void report_bad_value(int* error) {
  if (error) atomicCAS(error, 0, kGpuBadValue);
}

// Integer -a modulo 2^bits (INT_MIN / -1 and the like overflow).
template <class C>
__device__ __forceinline__ C wrap_neg(C a) {
  return static_cast<C>(Wide<C>(0) - static_cast<Wide<C>>(a));
}

template <OpKind K>
struct BinOp;

template <>
struct BinOp<OpKind::kAdd> : NoInit {
  explicit BinOp(const Attrs&) {}
  template <class C>
  __device__ C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>)
      return wrap<C>(static_cast<Wide<C>>(a) + static_cast<Wide<C>>(b));
    else
      return a + b;
  }
};
template <>
struct BinOp<OpKind::kSub> : NoInit {
  explicit BinOp(const Attrs&) {}
  template <class C>
  __device__ C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>)
      return wrap<C>(static_cast<Wide<C>>(a) - static_cast<Wide<C>>(b));
    else
      return a - b;
  }
};
template <>
struct BinOp<OpKind::kMul> : NoInit {
  explicit BinOp(const Attrs&) {}
  template <class C>
  __device__ C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>)
      return wrap<C>(static_cast<Wide<C>>(a) * static_cast<Wide<C>>(b));
    else
      return a * b;
  }
};
// Floats: IEEE division (no fast math). Integers truncate toward zero; INT_MIN / -1 wraps to
// INT_MIN.
template <>
struct BinOp<OpKind::kDiv> : NoInit {
  int* error = nullptr;
  explicit BinOp(const Attrs&) {}
  template <class C>
  __device__ C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) {
      if (b == C(0)) {
        report_bad_value(error);
        return C(0);
      }
      if constexpr (std::is_signed_v<C>)
        if (b == C(-1)) return wrap_neg(a);
      return static_cast<C>(a / b);
    } else {
      return a / b;
    }
  }
};
// fmod = 1: C's fmod (the sign of the dividend); fmod = 0 (integers only, inference checks): the
// sign of the divisor, as Python's %.
template <>
struct BinOp<OpKind::kMod> : NoInit {
  int* error = nullptr;
  bool c_fmod;
  explicit BinOp(const Attrs& a) : c_fmod(attrs_as<ModAttrs>(a).fmod != 0) {}
  template <class C>
  __device__ C operator()(C a, C b) const {
    if constexpr (!std::is_integral_v<C>) {
      return fmod(a, b);
    } else {
      if (b == C(0)) {
        report_bad_value(error);
        return C(0);
      }
      if constexpr (std::is_unsigned_v<C>) {
        return static_cast<C>(a % b);
      } else {
        if (b == C(-1)) return C(0);  // INT_MIN % -1 overflows
        C r = static_cast<C>(a % b);
        if (!c_fmod && r != 0 && ((r < 0) != (b < 0))) r = static_cast<C>(r + b);
        return r;
      }
    }
  }
};
template <>
struct BinOp<OpKind::kPRelu> : NoInit {
  explicit BinOp(const Attrs&) {}
  template <class C>
  __device__ C operator()(C x, C slope) const {
    if constexpr (std::is_unsigned_v<C>)
      return x;
    else if constexpr (std::is_integral_v<C>)
      return x < 0 ? wrap<C>(static_cast<Wide<C>>(x) * static_cast<Wide<C>>(slope)) : x;
    else
      return x < C(0) ? x * slope : x;
  }
};
// Max/Min propagate NaN like np.maximum/np.minimum (and the CPU kernels).
template <>
struct BinOp<OpKind::kMax> : NoInit {
  explicit BinOp(const Attrs&) {}
  template <class C>
  __device__ C operator()(C a, C b) const {
    if constexpr (!std::is_integral_v<C>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return a < b ? b : a;
  }
};
template <>
struct BinOp<OpKind::kMin> : NoInit {
  explicit BinOp(const Attrs&) {}
  template <class C>
  __device__ C operator()(C a, C b) const {
    if constexpr (!std::is_integral_v<C>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return b < a ? b : a;
  }
};
template <>
struct BinOp<OpKind::kSum> : BinOp<OpKind::kAdd> {
  using BinOp<OpKind::kAdd>::BinOp;
};
template <>
struct BinOp<OpKind::kMean> : BinOp<OpKind::kAdd> {
  using BinOp<OpKind::kAdd>::BinOp;
};

#define KILN_GPU_COMPARE(KIND, EXPR)             \
  template <>                                    \
  struct BinOp<OpKind::KIND> : NoInit {          \
    explicit BinOp(const Attrs&) {}              \
    template <class C>                           \
    __device__ bool operator()(C a, C b) const { \
      return EXPR;                               \
    }                                            \
  };
KILN_GPU_COMPARE(kEqual, a == b)
KILN_GPU_COMPARE(kGreater, a > b)
KILN_GPU_COMPARE(kGreaterOrEqual, a >= b)
KILN_GPU_COMPARE(kLess, a < b)
KILN_GPU_COMPARE(kLessOrEqual, a <= b)
KILN_GPU_COMPARE(kAnd, a&& b)  // C is bool here (Bool8 loads as bool)
KILN_GPU_COMPARE(kOr, a || b)
KILN_GPU_COMPARE(kXor, a != b)
#undef KILN_GPU_COMPARE

// Add, Sub, Mul, Div, Mod, PRelu: same dtype in and out, every numeric type.
template <OpKind K>
void arith_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                  GpuEnv& env) {
  BinOp<K> f(attrs);
  if constexpr (K == OpKind::kDiv || K == OpKind::kMod) f.error = env.error;
  dispatch_ew_numeric(in[0].dtype, name_of(K), [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_binary<T, T, T>(in[0], in[1], out[0], env, f, name_of(K));
  });
}

template <OpKind K>
void compare_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                    GpuEnv& env) {
  const BinOp<K> f(attrs);
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_binary<T, T, Bool8>(in[0], in[1], out[0], env, f, name_of(K));
  };
  if constexpr (K == OpKind::kEqual)
    dispatch_ew_all(in[0].dtype, name_of(K), run);  // bools compare as bools
  else
    dispatch_ew_numeric(in[0].dtype, name_of(K), run);
}

template <OpKind K>
void logic_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                  GpuEnv& env) {
  launch_binary<Bool8, Bool8, Bool8>(in[0], in[1], out[0], env, BinOp<K>(attrs), name_of(K));
}

// out / n for Mean, in place.
struct DivideBy : NoInit {
  double n;
  template <class C>
  __device__ C operator()(C x) const {
    return x / static_cast<C>(n);
  }
};

// Max, Min, Sum, Mean: folded pairwise into the output (out = f(in0, in1), then out = f(out,
// in_k)) exactly as the CPU does, so float16 rounds at the same steps; the output is contiguous
// with the final shape, so the in-place fold is element-aligned. Mean divides at the end.
template <OpKind K>
void variadic_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                     GpuEnv& env) {
  const BinOp<K> f(attrs);
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (in.size() == 1) {
      if (out[0].data != in[0].data && out[0].bytes() > 0)
        check_cuda(cudaMemcpyAsync(out[0].data, in[0].data, out[0].bytes(), cudaMemcpyDeviceToDevice, env.stream),
                   name_of(K));
    } else {
      launch_binary<T, T, T>(in[0], in[1], out[0], env, f, name_of(K));
      for (size_t k = 2; k < in.size(); ++k) launch_binary<T, T, T>(out[0], in[k], out[0], env, f, name_of(K));
    }
    if constexpr (K == OpKind::kMean && !std::is_integral_v<T>)
      launch_unary<T, T>(out[0], out[0], env, DivideBy{{}, static_cast<double>(in.size())}, name_of(K));
  };
  // The CPU's Sum and Mean take floats only.
  if constexpr (K == OpKind::kMax || K == OpKind::kMin)
    dispatch_ew_numeric(in[0].dtype, name_of(K), run);
  else
    dispatch_ew_float(in[0].dtype, name_of(K), run);
}

// ---- Pow ---------------------------------------------------------------------------------------
// The CPU kernel's cases, element by element (it converts the exponent tensor once, on the host):
//  - float base, integer exponent: pow in double, rounded to the base type. float32 and the half
//    types use powf (within a few float ulps of that) unless |e| > 2^24, where float cannot hold
//    the exponent's parity (which decides the sign for a negative base);
//  - float base, float exponent: the same; x^2 is x*x (the CPU's rounded double pow, or its x*x
//    shortcut for a one-element exponent), and a one-element exponent of 0.5 takes the CPU's sqrt
//    shortcut (a wider exponent tensor goes through pow, as on the CPU: they differ at -0 and -inf);
//  - integer base, integer exponent: exact power by squaring, wrapping modulo 2^bits; a negative
//    exponent gives the truncated reciprocal (0 unless |base| = 1; 0 itself is an error);
//  - integer base, float exponent: pow in double, converted back saturating (numpy's int ** float).
//    glibc's pow is correctly rounded (below one ulp: exact wherever the result is a double);
//    CUDA's may be 2 ulp off, which the truncation would show (8.999... -> 8). So whole exponents,
//    and half-integer ones of perfect squares, take an exact power by squaring instead.

// The CPU's exponent_values: integer exponents as int64, uint64 beyond int64 keeping its parity.
template <class E>
__device__ __forceinline__ int64_t int_exponent(E e) {
  if constexpr (std::is_same_v<E, uint64_t>)
    return e > uint64_t{INT64_MAX} ? INT64_MAX - int64_t{(e & 1) == 0} : static_cast<int64_t>(e);
  else
    return static_cast<int64_t>(e);
}

// base^e, exact modulo 2^bits: the arithmetic runs in an unsigned type of at least 32 bits.
template <class T>
__device__ T int_pow(T base, int64_t e, int* error) {
  if (e < 0) {
    if (base == T(1)) return T(1);
    if constexpr (std::is_signed_v<T>)
      if (base == T(-1)) return (e & 1) ? T(-1) : T(1);
    if (base == T(0)) report_bad_value(error);
    return T(0);
  }
  using W = std::conditional_t<(sizeof(T) < 4), uint32_t, std::make_unsigned_t<T>>;
  W r = 1, b = static_cast<W>(base);
  for (uint64_t n = static_cast<uint64_t>(e); n; n >>= 1) {
    if (n & 1) r = static_cast<W>(r * b);
    b = static_cast<W>(b * b);
  }
  return static_cast<T>(r);
}

// (xh, xl) *= (yh, yl) in double-double (about 106 bits); overflow gives (+-inf, 0).
__device__ __forceinline__ void dd_mul(double& xh, double& xl, double yh, double yl) {
  const double p = xh * yh;
  if (!isfinite(p)) {
    xh = p;
    xl = 0;
    return;
  }
  const double e = fma(xh, yh, -p) + (xh * yl + xl * yh);
  xh = p + e;
  xl = e - (xh - p);  // |p| >= |e|: the fast two-sum
}

// a^n (n >= 0) by squaring in double-double, rounded once: the correctly rounded power.
__device__ double whole_pow(double a, uint64_t n) {
  double rh = 1, rl = 0, bh = a, bl = 0;
  for (;;) {
    if (n & 1) dd_mul(rh, rl, bh, bl);
    n >>= 1;
    if (n == 0) return rh;
    dd_mul(bh, bl, bh, bl);
  }
}

// pow(a, e) for a whole-number a (an integer base), as glibc computes it.
__device__ double int_base_pow(double a, double e) {
  if (fabs(e) < 0x1p62) {
    double n = e, b = a;
    if (n != floor(n) && 2 * n == floor(2 * n) && sqrt(a) == floor(sqrt(a))) {  // a^(k/2) = sqrt(a)^k
      n = 2 * n;
      b = sqrt(a);
    }
    if (n == floor(n)) {
      const double r = whole_pow(b, static_cast<uint64_t>(fabs(n)));
      return n < 0 ? 1.0 / r : r;  // 1/r truncates to 0 unless |r| <= 1, where it is exact
    }
  }
  return pow(a, e);
}

// A and E are the compute types of the base and the exponent.
struct PowOp : NoInit {
  int* error = nullptr;
  bool one_exponent = false;  // the exponent tensor has one element
  template <class A, class E>
  __device__ A operator()(A a, E e) const {
    if constexpr (std::is_integral_v<A>) {
      if constexpr (std::is_integral_v<E>)
        return int_pow(a, int_exponent(e), error);
      else
        return sat_float_to_int<A>(int_base_pow(static_cast<double>(a), static_cast<double>(e)));
    } else if constexpr (std::is_same_v<A, double>) {
      const double b = std::is_integral_v<E> ? static_cast<double>(int_exponent(e)) : static_cast<double>(e);
      if (b == 2.0) return a * a;
      if (b == 0.5 && one_exponent) return sqrt(a);
      return pow(a, b);
    } else {
      if constexpr (std::is_integral_v<E>) {
        const int64_t n = int_exponent(e);
        if (n > (int64_t{1} << 24) || n < -(int64_t{1} << 24))
          return static_cast<float>(pow(static_cast<double>(a), static_cast<double>(n)));
      }
      const float b = std::is_integral_v<E> ? static_cast<float>(int_exponent(e)) : static_cast<float>(e);
      if (b == 2.0f) return a * a;
      if (b == 0.5f && one_exponent) return sqrtf(a);
      return powf(a, b);
    }
  }
};

void pow_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, GpuEnv& env) {
  PowOp f;
  f.error = env.error;
  f.one_exponent = in[1].numel() == 1;
  dispatch_ew_numeric(in[0].dtype, "Pow", [&](auto base_tag) {
    using T = typename decltype(base_tag)::type;
    dispatch_ew_numeric(in[1].dtype, "Pow exponent", [&](auto exp_tag) {
      using E = typename decltype(exp_tag)::type;
      launch_binary<T, E, T>(in[0], in[1], out[0], env, f, "Pow");
    });
  });
}

// ---- Where -------------------------------------------------------------------------------------
template <class T>
void launch_where(std::span<const TensorView> in, const TensorView& out, GpuEnv& env) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const Plan<3> p = make_plan<3>(out.shape, {in[0].shape, in[1].shape, in[2].shape}, "Where");
  const auto* c = static_cast<const Bool8*>(in[0].data);
  const auto* x = static_cast<const T*>(in[1].data);
  const auto* y = static_cast<const T*>(in[2].data);
  auto* o = static_cast<T*>(out.data);
  if (p.flat()) {
    where_flat_kernel<T>
        <<<blocks_for(n), kThreads, 0, env.stream>>>(c, x, y, o, n, p.stride[0][0], p.stride[1][0], p.stride[2][0]);
  } else if (n < (int64_t{1} << 31)) {
    where_strided_kernel<uint32_t, T>
        <<<blocks_for(n), kThreads, 0, env.stream>>>(c, x, y, o, static_cast<uint32_t>(n), p);
  } else {
    where_strided_kernel<uint64_t, T>
        <<<blocks_for(n), kThreads, 0, env.stream>>>(c, x, y, o, static_cast<uint64_t>(n), p);
  }
  check_launch("Where");
}

// Any element type: Where moves x's or y's bytes.
void where_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, GpuEnv& env) {
  switch (dtype_size(out[0].dtype)) {
    case 1: return launch_where<uint8_t>(in, out[0], env);
    case 2: return launch_where<uint16_t>(in, out[0], env);
    case 4: return launch_where<uint32_t>(in, out[0], env);
    case 8: return launch_where<uint64_t>(in, out[0], env);
  }
  throw_gpu_dtype(out[0].dtype, "Where");
}

// ---- BitShift --------------------------------------------------------------------------------
// A broadcasting binary op on the unsigned integer types. Shift amounts >= the bit width give 0,
// as on the CPU (a C++ shift by that much is undefined).
template <class T, bool kLeft>
struct ShiftOp : NoInit {
  __device__ T operator()(T x, T s) const {
    constexpr T kBits = sizeof(T) * 8;
    if (s >= kBits) return T(0);
    if constexpr (kLeft)
      return static_cast<T>(static_cast<uint64_t>(x) << s);
    else
      return static_cast<T>(x >> s);
  }
};

void bitshift_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                     GpuEnv& env) {
  const bool left = std::get<BitShiftAttrs>(attrs).direction == BitShiftDirection::kLeft;
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (left)
      launch_binary<T, T, T>(in[0], in[1], out[0], env, ShiftOp<T, true>{}, "BitShift");
    else
      launch_binary<T, T, T>(in[0], in[1], out[0], env, ShiftOp<T, false>{}, "BitShift");
  };
  switch (in[0].dtype) {
    case DataType::kUInt8: return run(Tag<uint8_t>{});
    case DataType::kUInt16: return run(Tag<uint16_t>{});
    case DataType::kUInt32: return run(Tag<uint32_t>{});
    case DataType::kUInt64: return run(Tag<uint64_t>{});
    default: throw_gpu_dtype(in[0].dtype, "BitShift");
  }
}

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kAdd, arith_kernel<OpKind::kAdd>},
    {OpKind::kAnd, logic_kernel<OpKind::kAnd>},
    {OpKind::kBitShift, bitshift_kernel},
    {OpKind::kDiv, arith_kernel<OpKind::kDiv>},
    {OpKind::kEqual, compare_kernel<OpKind::kEqual>},
    {OpKind::kGreater, compare_kernel<OpKind::kGreater>},
    {OpKind::kGreaterOrEqual, compare_kernel<OpKind::kGreaterOrEqual>},
    {OpKind::kLess, compare_kernel<OpKind::kLess>},
    {OpKind::kLessOrEqual, compare_kernel<OpKind::kLessOrEqual>},
    {OpKind::kMax, variadic_kernel<OpKind::kMax>},
    {OpKind::kMean, variadic_kernel<OpKind::kMean>},
    {OpKind::kMin, variadic_kernel<OpKind::kMin>},
    {OpKind::kMod, arith_kernel<OpKind::kMod>},
    {OpKind::kMul, arith_kernel<OpKind::kMul>},
    {OpKind::kOr, logic_kernel<OpKind::kOr>},
    {OpKind::kPRelu, arith_kernel<OpKind::kPRelu>},
    {OpKind::kPow, pow_kernel},
    {OpKind::kSub, arith_kernel<OpKind::kSub>},
    {OpKind::kSum, variadic_kernel<OpKind::kSum>},
    {OpKind::kWhere, where_kernel},
    {OpKind::kXor, logic_kernel<OpKind::kXor>},
};

}  // namespace

std::span<const GpuKernelEntry> binary_gpu_entries() { return kEntries; }

}  // namespace kiln::gpu::ew
