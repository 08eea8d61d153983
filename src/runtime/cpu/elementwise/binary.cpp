// Broadcasting binary and variadic kernels: arithmetic, Pow, Mod, PRelu, comparisons, logic,
// Max/Min/Sum/Mean, Where and BitShift. All but BitShift go through make_plan/walk
// (elementwise_internal.h), which turns same-shape operands into one contiguous row and scalar
// operands into stride-0 rows.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/cpu/elementwise/elementwise_internal.h"

namespace kiln::cpu::ew {

namespace {

template <class C>
inline constexpr bool kInt = std::is_integral_v<C>;

template <OpKind K>
struct BinFn;

#define KILN_BINARY_FN(KIND, EXPR)    \
  template <>                         \
  struct BinFn<OpKind::KIND> {        \
    explicit BinFn(const Attrs&) {}   \
    template <class C>                \
    auto operator()(C a, C b) const { \
      return EXPR;                    \
    }                                 \
  };

KILN_BINARY_FN(kGreater, a > b)
KILN_BINARY_FN(kGreaterOrEqual, a >= b)
KILN_BINARY_FN(kLess, a < b)
KILN_BINARY_FN(kLessOrEqual, a <= b)
KILN_BINARY_FN(kEqual, a == b)
KILN_BINARY_FN(kAnd, (a != 0) & (b != 0))  // bools are read as bytes
KILN_BINARY_FN(kOr, (a != 0) | (b != 0))
KILN_BINARY_FN(kXor, (a != 0) != (b != 0))
#undef KILN_BINARY_FN

template <>
struct BinFn<OpKind::kAdd> {
  explicit BinFn(const Attrs&) {}
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (kInt<C>)
      return wrap_add(a, b);
    else
      return a + b;
  }
};
template <>
struct BinFn<OpKind::kSub> {
  explicit BinFn(const Attrs&) {}
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (kInt<C>)
      return wrap_sub(a, b);
    else
      return a - b;
  }
};
template <>
struct BinFn<OpKind::kMul> {
  explicit BinFn(const Attrs&) {}
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (kInt<C>)
      return wrap_mul(a, b);
    else
      return a * b;
  }
};
// Integer divisors were checked for zero before the loop; C++ `/` truncates toward zero, and
// INT_MIN / -1 (which overflows) wraps to INT_MIN.
template <>
struct BinFn<OpKind::kDiv> {
  explicit BinFn(const Attrs&) {}
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (kInt<C> && std::is_signed_v<C>)
      return b == C(-1) ? wrap_neg(a) : static_cast<C>(a / b);
    else
      return static_cast<C>(a / b);
  }
};
// fmod = 1: C fmod (sign of the dividend); fmod = 0 (integers only): the sign of the divisor, as
// Python's %.
template <>
struct BinFn<OpKind::kMod> {
  bool c_fmod;
  explicit BinFn(const Attrs& a) : c_fmod(attrs_as<ModAttrs>(a).fmod != 0) {}
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (!kInt<C>) {
      return std::fmod(a, b);
    } else if constexpr (std::is_unsigned_v<C>) {
      return static_cast<C>(a % b);
    } else {
      if (b == C(-1)) return C(0);  // INT_MIN % -1 overflows
      C r = static_cast<C>(a % b);
      if (!c_fmod && r != 0 && ((r < 0) != (b < 0))) r = static_cast<C>(r + b);
      return r;
    }
  }
};
template <>
struct BinFn<OpKind::kPRelu> {
  explicit BinFn(const Attrs&) {}
  template <class C>
  C operator()(C x, C slope) const {
    if constexpr (std::is_unsigned_v<C>)
      return x;
    else if constexpr (kInt<C>)
      return x < 0 ? wrap_mul(x, slope) : x;
    else
      return x < C(0) ? x * slope : x;
  }
};
// Max/Min propagate NaN like np.maximum/np.minimum.
template <>
struct BinFn<OpKind::kMax> {
  explicit BinFn(const Attrs&) {}
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (!kInt<C>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return a < b ? b : a;
  }
};
template <>
struct BinFn<OpKind::kMin> {
  explicit BinFn(const Attrs&) {}
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (!kInt<C>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return b < a ? b : a;
  }
};
template <>
struct BinFn<OpKind::kSum> : BinFn<OpKind::kAdd> {
  using BinFn<OpKind::kAdd>::BinFn;
};
template <>
struct BinFn<OpKind::kMean> : BinFn<OpKind::kAdd> {
  using BinFn<OpKind::kAdd>::BinFn;
};

const char* name_of(OpKind k) { return op_name(k).data(); }

template <class T>
void check_no_zero(const TensorView& b, OpKind k) {
  const T* p = b.as<const T>();
  const int64_t n = b.numel();
  for (int64_t i = 0; i < n; ++i)
    if (p[i] == T(0)) throw Error(std::string(op_name(k)) + ": integer division by zero");
}

// Add, Sub, Mul, Div, Mod, PRelu: same dtype in and out.
template <OpKind K>
void arith_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                  KernelEnv& env) {
  const BinFn<K> f(attrs);
  dispatch_numeric(in[0].dtype, name_of(K), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!kIsFloat<T> && (K == OpKind::kDiv || K == OpKind::kMod)) check_no_zero<T>(in[1], K);
    run_binary<T, T, T>(in[0], in[1], out[0], env, f);
  });
}

template <OpKind K>
void compare_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                    KernelEnv& env) {
  const BinFn<K> f(attrs);
  if (in[0].dtype == DataType::kBool) {  // Equal only (checked by inference)
    run_binary<uint8_t, uint8_t, bool>(in[0], in[1], out[0], env,
                                       [](uint8_t a, uint8_t b) { return (a != 0) == (b != 0); });
    return;
  }
  dispatch_numeric(in[0].dtype, name_of(K), [&](auto tag) {
    using T = typename decltype(tag)::type;
    run_binary<T, T, bool>(in[0], in[1], out[0], env, f);
  });
}

template <OpKind K>
void logic_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                  KernelEnv& env) {
  run_binary<uint8_t, uint8_t, bool>(in[0], in[1], out[0], env, BinFn<K>(attrs));
}

// Max, Min, Sum, Mean: folded pairwise into the output (out = f(in0, in1), then out = f(out, in_k));
// the output is contiguous and has the final shape, so updating it in place is element-aligned.
template <OpKind K>
void variadic_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                     KernelEnv& env) {
  const BinFn<K> f(attrs);
  constexpr bool kFloatOnly = K == OpKind::kSum || K == OpKind::kMean;
  dispatch_numeric(in[0].dtype, name_of(K), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kFloatOnly && !kIsFloat<T>) {
      throw_unsupported_dtype(in[0].dtype, name_of(K));
    } else {
      if (in.size() == 1) {
        if (out[0].data != in[0].data && out[0].bytes() > 0) std::memcpy(out[0].data, in[0].data, out[0].bytes());
      } else {
        run_binary<T, T, T>(in[0], in[1], out[0], env, f);
        for (size_t k = 2; k < in.size(); ++k) run_binary<T, T, T>(out[0], in[k], out[0], env, f);
      }
      if constexpr (K == OpKind::kMean) {
        using C = ComputeType<T>;
        const C n = static_cast<C>(in.size());
        run_unary<T, T>(out[0], out[0], env, [n](C x) { return x / n; });
      }
    }
  });
}

// ---- Pow -------------------------------------------------------------------------------------
// Exact integer power by squaring, wrapping modulo 2^bits like numpy. Negative exponents give the
// truncated reciprocal (0 unless |base| = 1); 0 to a negative power has no value and throws.
template <class T>
T int_pow(T base, int64_t e) {
  if (e < 0) {
    if (base == T(1)) return T(1);
    if constexpr (std::is_signed_v<T>)
      if (base == T(-1)) return (e & 1) ? T(-1) : T(1);
    if (base == T(0)) throw Error("Pow: integer 0 raised to a negative power");
    return T(0);
  }
  Wide<T> r = 1, b = static_cast<Wide<T>>(base);
  for (uint64_t n = static_cast<uint64_t>(e); n; n >>= 1) {
    if (n & 1) r = static_cast<Wide<T>>(r * b);
    b = static_cast<Wide<T>>(b * b);
  }
  return static_cast<T>(r);
}

// The exponent converted once (it is usually tiny) to int64 (integer exponents) or double.
template <class E>
std::vector<E> exponent_values(const TensorView& e) {
  std::vector<E> v(static_cast<size_t>(e.numel()));
  dispatch_numeric(e.dtype, "Pow", [&](auto tag) {
    using S = typename decltype(tag)::type;
    const S* p = e.as<const S>();
    for (size_t i = 0; i < v.size(); ++i) {
      if constexpr (std::is_same_v<S, uint64_t>) {
        // Beyond int64 only the parity still matters (for base -1); keep it.
        v[i] = p[i] > uint64_t(INT64_MAX) ? E(INT64_MAX - int64_t((p[i] & 1) == 0)) : E(p[i]);
      } else {
        v[i] = static_cast<E>(load(p[i]));
      }
    }
  });
  return v;
}

void pow_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, KernelEnv& env) {
  const TensorView& ev = in[1];
  const bool int_exp = ev.dtype != DataType::kFloat32 && ev.dtype != DataType::kFloat64 &&
                       ev.dtype != DataType::kFloat16 && ev.dtype != DataType::kBFloat16;
  dispatch_numeric(in[0].dtype, "Pow", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = ComputeType<T>;
    if (int_exp) {
      const std::vector<int64_t> e = exponent_values<int64_t>(ev);
      const TensorView e_view{DataType::kInt64, ev.shape, const_cast<int64_t*>(e.data())};
      if constexpr (kIsFloat<T>) {
        if (e.size() == 1 && e[0] == 2) {  // common x^2: skip pow
          run_unary<T, T>(in[0], out[0], env, [](C x) { return x * x; });
          return;
        }
        run_binary<T, int64_t, T>(in[0], e_view, out[0], env, [](C a, int64_t b) {
          return static_cast<C>(std::pow(static_cast<double>(a), static_cast<double>(b)));
        });
      } else {
        run_binary<T, int64_t, T>(in[0], e_view, out[0], env, [](T a, int64_t b) { return int_pow(a, b); });
      }
    } else {
      const std::vector<double> e = exponent_values<double>(ev);
      const TensorView e_view{DataType::kFloat64, ev.shape, const_cast<double*>(e.data())};
      if constexpr (kIsFloat<T>) {
        if (e.size() == 1 && (e[0] == 2.0 || e[0] == 0.5)) {  // x^2 and sqrt fast paths
          if (e[0] == 2.0)
            run_unary<T, T>(in[0], out[0], env, [](C x) { return x * x; });
          else
            run_unary<T, T>(in[0], out[0], env, [](C x) { return std::sqrt(x); });
          return;
        }
        run_binary<T, double, T>(in[0], e_view, out[0], env,
                                 [](C a, double b) { return static_cast<C>(std::pow(static_cast<double>(a), b)); });
      } else {
        // numpy computes int ** float in float64 and casts back; we saturate the cast.
        run_binary<T, double, T>(in[0], e_view, out[0], env, [](T a, double b) {
          return sat_float_to_int<T>(std::pow(static_cast<double>(a), b));
        });
      }
    }
  });
}

// ---- Where -----------------------------------------------------------------------------------
void where_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                  KernelEnv& env) {
  const int64_t n = out[0].numel();
  if (n == 0) return;
  const BroadcastPlan<3> plan = make_plan<3>(out[0].shape, {in[0].shape, in[1].shape, in[2].shape});
  dispatch_bytes(out[0].dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const uint8_t* pc = in[0].as<const uint8_t>();
    const T* px = in[1].as<const T>();
    const T* py = in[2].as<const T>();
    T* po = out[0].as<T>();
    parallel_range(env, n, [&](int64_t begin, int64_t end) {
      walk(plan, begin, end,
           [&](int64_t o, const std::array<int64_t, 3>& off, const std::array<int64_t, 3>& st, int64_t cnt) {
             const uint8_t* c = pc + off[0];
             const T* x = px + off[1];
             const T* y = py + off[2];
             T* d = po + o;
             if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
               for (int64_t i = 0; i < cnt; ++i) d[i] = c[i] ? x[i] : y[i];
             } else {
               for (int64_t i = 0; i < cnt; ++i) d[i] = c[i * st[0]] ? x[i * st[1]] : y[i * st[2]];
             }
           });
    });
  });
}

// ---- BitShift --------------------------------------------------------------------------------
// Shift amounts >= the bit width give 0 (a C++ shift by that much is undefined).

template <class Fn>
void parallel(KernelEnv& env, int64_t n, int64_t work_per_item, Fn&& fn) {
  if (n <= 0) return;
  if (!env.pool || env.pool->team() <= 1 || n < 2 || n * work_per_item < (1 << 15))
    fn(int64_t{0}, n);
  else
    env.pool->parallel_for(n, fn);
}

template <class T, bool kLeft>
inline T shift(T x, T s) {
  constexpr T kBits = sizeof(T) * 8;
  if (s >= kBits) return T(0);
  if constexpr (kLeft)
    return static_cast<T>(static_cast<uint64_t>(x) << s);
  else
    return static_cast<T>(x >> s);
}

template <class T, bool kLeft>
void shift_row(const T* a, int64_t sa, const T* b, int64_t sb, T* o, int64_t n) {
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = shift<T, kLeft>(a[i], b[i]);
  } else if (sa == 1 && sb == 0) {
    const T s = b[0];
    for (int64_t i = 0; i < n; ++i) o[i] = shift<T, kLeft>(a[i], s);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = shift<T, kLeft>(a[i * sa], b[i * sb]);
  }
}

// Broadcast walk: the output split into rows along its last axis; each input's element stride is
// 0 along axes where it has size 1 (or is missing).
template <class T, bool kLeft>
void bitshift_typed(const TensorView& a, const TensorView& b, const TensorView& out, KernelEnv& env) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const size_t r = out.rank();
  const T* pa = a.as<const T>();
  const T* pb = b.as<const T>();
  T* po = out.as<T>();
  if (a.numel() == n && b.numel() == n) {
    parallel(env, (n + 16383) / 16384, 16384, [&](int64_t b0, int64_t b1) {
      const int64_t e0 = b0 * 16384, e1 = std::min(n, b1 * 16384);
      shift_row<T, kLeft>(pa + e0, 1, pb + e0, 1, po + e0, e1 - e0);
    });
    return;
  }
  std::vector<int64_t> sa(r, 0), sb(r, 0);
  auto fill = [&](const TensorView& v, std::vector<int64_t>& s) {
    int64_t acc = 1;
    for (size_t i = v.rank(); i-- > 0;) {
      s[r - v.rank() + i] = v.shape[i] == 1 ? 0 : acc;
      acc *= v.shape[i];
    }
  };
  fill(a, sa);
  fill(b, sb);
  const int64_t inner = r ? out.shape[r - 1] : 1, rows = n / inner;
  parallel(env, rows, inner, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      int64_t oa = 0, ob = 0, rem = row;
      for (size_t i = r - 1; i-- > 0;) {
        const int64_t idx = rem % out.shape[i];
        rem /= out.shape[i];
        oa += idx * sa[i];
        ob += idx * sb[i];
      }
      shift_row<T, kLeft>(pa + oa, r ? sa[r - 1] : 0, pb + ob, r ? sb[r - 1] : 0, po + row * inner, inner);
    }
  });
}

void bitshift_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                     KernelEnv& env) {
  const bool left = std::get<BitShiftAttrs>(attrs).direction == BitShiftDirection::kLeft;
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (left)
      bitshift_typed<T, true>(in[0], in[1], out[0], env);
    else
      bitshift_typed<T, false>(in[0], in[1], out[0], env);
  };
  const DataType t = in[0].dtype;
  if (t == DataType::kUInt8)
    run(Tag<uint8_t>{});
  else if (t == DataType::kUInt16)
    run(Tag<uint16_t>{});
  else if (t == DataType::kUInt32)
    run(Tag<uint32_t>{});
  else if (t == DataType::kUInt64)
    run(Tag<uint64_t>{});
  else
    throw_unsupported_dtype(t, "BitShift");
}

constexpr KernelEntry kEntries[] = {
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

std::span<const KernelEntry> binary_kernel_entries() { return kEntries; }

}  // namespace kiln::cpu::ew
