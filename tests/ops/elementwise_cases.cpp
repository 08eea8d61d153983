// The elementwise family's op cases (tests/ops/op_case.h): odd, zero-size, scalar and broadcasting
// shapes (up to 8 dims that cannot merge), special values (NaN, inf, -0, rounding ties), every
// element type the CPU kernel takes (the four float types, the eight integer types, bool).
// Integer Div, Mod and Pow: the sign cases, negative and zero exponents, wrapping. BitShift, Cast
// and CastLike to every type, Identity and Dropout.
#include "ops/op_case.h"

namespace kiln::optest {
namespace {

using Inputs = std::vector<HostTensor>;
using InputSets = std::vector<Inputs>;

struct ElementwiseCase {
  std::string name;  // test name: the op, plus the attribute variant
  OpKind kind;
  Attrs attrs;
  std::vector<DT> dtypes;               // the main input's element types to test
  std::function<InputSets(DT)> inputs;  // the input sets (one run each) for a dtype
  Accuracy acc = Accuracy::kExact;
  size_t n_out = 1;
};

const std::vector<DT> kFloat = {DT::kFloat32, DT::kFloat16, DT::kFloat64, DT::kBFloat16};
const std::vector<DT> kInt = {DT::kInt8,  DT::kUInt8,  DT::kInt16, DT::kUInt16,
                              DT::kInt32, DT::kUInt32, DT::kInt64, DT::kUInt64};
const std::vector<DT> kSigned = {DT::kInt8, DT::kInt16, DT::kInt32, DT::kInt64};
std::vector<DT> join(std::vector<DT> a, const std::vector<DT>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
const std::vector<DT> kNumeric = join(kFloat, kInt);
const std::vector<DT> kAll = join(kNumeric, {DT::kBool});
const std::vector<DT> kBool = {DT::kBool};

const std::vector<Shape> kUnaryShapes = {{}, {0}, {1}, {7}, {3, 5, 2}, {2, 0, 3}, {1, 1, 33}, {4099}, {129, 257}};

// Pairs: same shape, scalars either side, trailing and middle broadcasts, zero-size, and 8
// alternating dims that the plan cannot merge (the kernels' limit).
const std::vector<std::vector<Shape>> kBinaryShapes = {
    {{3, 5}, {3, 5}},       {{}, {4, 5}},
    {{4, 5}, {}},           {{}, {}},
    {{2, 3, 4}, {4}},       {{2, 1, 4}, {3, 1}},
    {{1}, {7, 1}},          {{2, 3, 4, 5}, {1, 3, 1, 5}},
    {{0, 3}, {1, 3}},       {{5, 1, 7}, {1, 1}},
    {{4097}, {4097}},       {{129, 257}, {257}},
    {{129, 257}, {129, 1}}, {{2, 1, 2, 1, 2, 1, 2, 1}, {1, 2, 1, 2, 1, 2, 1, 2}},
};
// PRelu's slope must broadcast to X's shape.
const std::vector<std::vector<Shape>> kPReluShapes = {
    {{3, 5}, {3, 5}}, {{4, 5}, {}},     {{2, 3, 4}, {4}},    {{2, 3, 4}, {3, 1}},
    {{0, 3}, {1, 3}}, {{4097}, {4097}}, {{129, 257}, {257}}, {{2, 3, 4, 5}, {1, 3, 1, 5}},
};
const std::vector<std::vector<Shape>> kVariadicShapes = {
    {{7}},         {{2, 3, 4}, {4}, {3, 1}}, {{5}, {5}, {5}, {5}}, {{}, {2, 2}}, {{4099}, {4099}},
    {{2, 0}, {1}}, {{1, 4}, {3, 1}, {}},
};
const std::vector<std::vector<Shape>> kWhereShapes = {
    {{5}, {5}, {5}},
    {{3, 1}, {1, 4}, {}},
    {{2, 3, 4}, {2, 3, 4}, {4}},
    {{0, 2}, {1, 2}, {0, 1}},
    {{}, {}, {}},
    {{4099}, {}, {4099}},
    {{129, 257}, {129, 257}, {129, 257}},
    {{2, 1, 2, 1, 2, 1, 2, 1}, {1, 2, 1, 2, 1, 2, 1, 2}, {2, 2, 1, 1, 2, 2, 1, 1}},
};

std::string suffix_of(const std::string& s) { return s.empty() ? "" : "_" + s; }

// ---- case builders ---------------------------------------------------------------------------
ElementwiseCase unary(OpKind k, double lo, double hi, Accuracy acc, Attrs attrs = NoAttrs{}, std::string variant = "",
                      std::vector<DT> dtypes = kFloat, bool specials = false) {
  return {std::string(op_name(k)) + suffix_of(variant),
          k,
          std::move(attrs),
          std::move(dtypes),
          [=](DT dt) {
            InputSets s;
            for (const Shape& sh : kUnaryShapes) s.push_back({rand_tensor(dt, sh, lo, hi)});
            if (specials) s.push_back({special_tensor(dt, {37}, lo, hi)});
            return s;
          },
          acc};
}

struct Range {
  double lo, hi;
  bool integral = false;
};

ElementwiseCase binary(OpKind k, Range a, Range b, Accuracy acc, std::vector<DT> dtypes, bool specials = false,
                       Attrs attrs = NoAttrs{}, const std::vector<std::vector<Shape>>& shapes = kBinaryShapes) {
  return {
      std::string(op_name(k)),
      k,
      std::move(attrs),
      std::move(dtypes),
      [=](DT dt) {
        InputSets s;
        for (const auto& sh : shapes)
          s.push_back({rand_tensor(dt, sh[0], a.lo, a.hi, a.integral), rand_tensor(dt, sh[1], b.lo, b.hi, b.integral)});
        if (specials && is_float(dt)) {
          s.push_back({special_tensor(dt, {37}, a.lo, a.hi), special_tensor(dt, {37}, b.lo, b.hi)});
          s.push_back({special_tensor(dt, {37}, a.lo, a.hi), make(dt, {}, {kNaN})});
          s.push_back({make(dt, {}, {kInf}), special_tensor(dt, {37}, b.lo, b.hi)});
        }
        return s;
      },
      acc};
}

ElementwiseCase with_suffix(ElementwiseCase c, const std::string& variant) {
  c.name += suffix_of(variant);
  return c;
}

ElementwiseCase variadic(OpKind k, std::vector<DT> dtypes, Accuracy acc) {
  return {std::string(op_name(k)),
          k,
          NoAttrs{},
          std::move(dtypes),
          [](DT dt) {
            InputSets s;
            for (const auto& shapes : kVariadicShapes) {
              Inputs in;
              for (const Shape& sh : shapes) in.push_back(rand_tensor(dt, sh, -50, 50));
              s.push_back(std::move(in));
            }
            s.push_back({special_tensor(dt, {37}, -5, 5), special_tensor(dt, {37}, -5, 5), rand_tensor(dt, {}, -1, 1)});
            return s;
          },
          acc};
}

ElementwiseCase compare(OpKind k, std::vector<DT> dtypes) {
  return binary(k, {-3, 3, true}, {-3, 3, true}, Accuracy::kExact, std::move(dtypes), true);
}

ElementwiseCase pow_case() {
  return {"Pow",
          OpKind::kPow,
          NoAttrs{},
          kFloat,
          [](DT dt) {
            InputSets s;
            for (const auto& sh : kBinaryShapes)
              s.push_back({rand_tensor(dt, sh[0], 0.5, 2), rand_tensor(dt, sh[1], -3, 3)});
            for (DT e :
                 {DT::kInt8, DT::kInt32, DT::kInt64, DT::kUInt64, dt == DT::kFloat32 ? DT::kFloat16 : DT::kFloat32}) {
              s.push_back({rand_tensor(dt, {3, 5}, -2, 2), rand_tensor(e, {3, 5}, -3, 3, true)});
              s.push_back({rand_tensor(dt, {2, 3, 4}, -2, 2), rand_tensor(e, {4}, -3, 3, true)});
              s.push_back({rand_tensor(dt, {4099}, -2, 2), make(e, {}, {3})});
            }
            s.push_back({rand_tensor(dt, {4099}, -3, 3), make(dt, {}, {2})});   // x*x
            s.push_back({rand_tensor(dt, {4099}, 0, 9), make(dt, {}, {0.5})});  // sqrt
            s.push_back({rand_tensor(dt, {37}, -2, 2),
                         make(DT::kInt64, {}, {static_cast<double>((int64_t{1} << 40) + 1)})});  // odd, > 2^24
            s.push_back({special_tensor(dt, {37}, 0.5, 2), special_tensor(dt, {37}, -2, 2)});
            return s;
          },
          Accuracy::kTranscendental};
}

// Nonzero integer tensors with both signs (wrapped to large values for the unsigned types).
HostTensor nonzero_int(DT dt, const Shape& shape, double lo, double hi) {
  HostTensor t = rand_tensor(dt, shape, lo, hi, true);
  for (int64_t i = 0; i < t.numel(); ++i)
    if (get(t, i) == 0) set(t, i, i % 2 ? -1 : 1);
  return t;
}

// Integer Div and Mod: random operands (the divisor never 0), and every sign combination with
// exact and inexact quotients, 0 dividends, +-1 divisors and the type's lowest value over -1
// (which overflows: Div wraps, Mod gives 0).
ElementwiseCase int_division_case(OpKind k, Attrs attrs, const std::string& variant) {
  return {std::string(op_name(k)) + "_int" + suffix_of(variant), k, std::move(attrs), kInt, [](DT dt) {
            InputSets s;
            for (const auto& sh : kBinaryShapes)
              s.push_back({rand_tensor(dt, sh[0], -100, 100, true), nonzero_int(dt, sh[1], -9, 9)});
            const double lowest = dispatch_int(dt, "lowest", [](auto tag) {
              return static_cast<double>(std::numeric_limits<typename decltype(tag)::type>::lowest());
            });
            s.push_back({make(dt, {14}, {7, -7, 7, -7, 6, -6, 6, -6, 0, 0, 5, -5, lowest, lowest}),
                         make(dt, {14}, {3, 3, -3, -3, 3, 3, -3, -3, 4, -4, 1, -1, -1, 1})});
            return s;
          }};
}

// Integer bases (every integer type) with integer exponents of several types, negative and zero
// exponents (the truncated reciprocal: 0 unless the base is +-1), powers that wrap modulo 2^bits,
// and float exponents (pow in double, truncated and saturated), some of them whole numbers.
ElementwiseCase int_pow_case() {
  return {"Pow_int", OpKind::kPow, NoAttrs{}, kInt, [](DT dt) {
            InputSets s;
            for (const auto& sh : kBinaryShapes)
              s.push_back({nonzero_int(dt, sh[0], -9, 9), rand_tensor(DT::kInt64, sh[1], -3, 12, true)});
            const HostTensor base = make(dt, {9}, {0, 1, -1, 2, -2, 3, -3, 7, -7});
            for (DT e : {DT::kInt8, DT::kUInt8, DT::kInt32, DT::kUInt32, DT::kInt64, DT::kUInt64})
              for (double v : {0.0, 1.0, 2.0, 3.0, 5.0, 31.0, 64.0, 65.0}) s.push_back({base, make(e, {}, {v})});
            for (double v : {-1.0, -2.0, -3.0})  // 0 is left out: 0 to a negative power is an error
              s.push_back({make(dt, {8}, {1, -1, 2, -2, 3, -3, 7, -7}), make(DT::kInt64, {}, {v})});
            // uint64 exponents beyond int64: 2^64 - 1 (odd) and 2^64 - 2 (even), -1 and -2 wrapped.
            s.push_back({make(dt, {}, {-1}), make(DT::kUInt64, {2}, {-1, -2})});
            for (DT e : {DT::kFloat32, DT::kFloat16, DT::kFloat64, DT::kBFloat16}) {
              s.push_back({nonzero_int(dt, {3, 5}, 0, 9), rand_tensor(e, {3, 5}, -2, 3)});
              s.push_back(
                  {make(dt, {9}, {0, 1, -1, 2, -2, 3, -3, 7, 9}), make(e, {9}, {0, 1, 2, 3, 0.5, -1, 2.5, 10, 0.5})});
            }
            s.push_back({make(dt, {6}, {2, 3, 0, -2, 5, 1}), make(DT::kFloat64, {6}, {64, 40, -1, 63, kInf, kNaN})});
            return s;
          }};
}

ElementwiseCase where_case() {
  return {"Where", OpKind::kWhere, NoAttrs{}, kAll, [](DT dt) {
            InputSets s;
            for (const auto& sh : kWhereShapes)
              s.push_back(
                  {rand_tensor(DT::kBool, sh[0], 0, 1), rand_tensor(dt, sh[1], -9, 9), rand_tensor(dt, sh[2], -9, 9)});
            return s;
          }};
}

ElementwiseCase clip_case() {
  return {"Clip", OpKind::kClip, NoAttrs{}, kNumeric, [](DT dt) {
            InputSets s;
            for (const Shape& sh : std::vector<Shape>{{}, {0}, {7}, {3, 5, 2}, {4099}}) {
              s.push_back({rand_tensor(dt, sh, -4, 4)});
              s.push_back({rand_tensor(dt, sh, -4, 4), make(dt, {}, {-1})});
              s.push_back({rand_tensor(dt, sh, -4, 4), make(dt, {1}, {-1.5}), make(dt, {}, {2})});
              s.push_back({rand_tensor(dt, sh, -4, 4), absent(), make(dt, {}, {1})});
              s.push_back({rand_tensor(dt, sh, -4, 4), make(dt, {}, {2}), make(dt, {}, {-1})});  // lo > hi: all hi
            }
            s.push_back({special_tensor(dt, {37}, -4, 4), make(dt, {}, {-1}), make(dt, {}, {1})});
            return s;
          }};
}

// Cast inputs: ordinary values plus those where the conversion rules matter (NaN, +-inf, -0,
// ties, beyond int32 and float16 ranges, int64 values a float cannot hold exactly).
HostTensor cast_input(DT dt, const Shape& shape) {
  if (dt == DT::kBool) return rand_tensor(dt, shape, 0, 1);
  if (is_float(dt)) {
    HostTensor t = rand_tensor(dt, shape, -300, 300);
    const double v[] = {kNaN, kInf,  -kInf, -0.0,  0.5,  -0.5,         2.5,          -2.7,          3e9,    -3e9,
                        1e20, 65504, 70000, -1e10, 1e-8, 2147483520.0, 2147483648.0, -2147483904.0, 9.3e18, -9.3e18};
    for (int64_t i = 0; i < t.numel(); i += 2) set(t, i, v[(i / 2) % std::size(v)]);
    return t;
  }
  HostTensor t = rand_tensor(dt, shape, -1e6, 1e6);
  const double v[] = {0,     1,     -1,         2147483647.0,        -2147483648.0, 4294967301.0, -1099511627777.0,
                      65504, 65520, 16777217.0, (1LL << 62) + 4096.0};
  for (int64_t i = 0; i < t.numel(); i += 2) set(t, i, v[(i / 2) % std::size(v)]);
  return t;
}

ElementwiseCase cast_case(OpKind k, DT to) {
  return {std::string(op_name(k)) + "_to_" + std::string(dtype_name(to)), k, CastAttrs{to}, kAll, [k, to](DT dt) {
            InputSets s;
            for (const Shape& sh : std::vector<Shape>{{}, {0}, {37}, {3, 5, 2}, {4099}}) {
              Inputs in{cast_input(dt, sh)};
              if (k == OpKind::kCastLike) in.push_back(make(to, {2}, {0}));
              s.push_back(std::move(in));
            }
            return s;
          }};
}

ElementwiseCase copy_case(OpKind k, std::vector<DT> dtypes, size_t n_out, std::string variant) {
  ElementwiseCase c{std::string(op_name(k)) + suffix_of(variant), k, NoAttrs{}, std::move(dtypes), [k](DT dt) {
                      InputSets s;
                      for (const Shape& sh : kUnaryShapes) s.push_back({rand_tensor(dt, sh, -9, 9)});
                      if (k == OpKind::kDropout) s.push_back({rand_tensor(dt, {4099}, -9, 9), make(dt, {}, {0.3})});
                      return s;
                    }};
  c.n_out = n_out;
  return c;
}

// ---- BitShift --------------------------------------------------------------------------------
const std::vector<std::pair<Shape, Shape>> kShiftShapes = {
    {{7}, {7}}, {{2, 3, 4}, {4}}, {{3, 1, 5}, {1, 4, 1}},   {{}, {3}},
    {{5}, {}},  {{0, 3}, {3}},    {{300, 129}, {300, 129}}, {{64, 1}, {1, 513}}};

ElementwiseCase bitshift_case(BitShiftDirection dir) {
  return {std::string("BitShift_") + (dir == BitShiftDirection::kLeft ? "left" : "right"),
          OpKind::kBitShift,
          BitShiftAttrs{dir},
          {DT::kUInt8, DT::kUInt16, DT::kUInt32, DT::kUInt64},
          [](DT dt) {
            InputSets s;
            const int bits = static_cast<int>(dtype_size(dt)) * 8;
            const double hi = bits == 8 ? 255 : bits == 16 ? 65535 : bits == 32 ? 4294967295.0 : 1099511627775.0;
            for (const auto& [sa, sb] : kShiftShapes)
              s.push_back({rand_tensor(dt, sa, 0, hi), rand_tensor(dt, sb, 0, bits + 3)});  // past the width: 0
            return s;
          }};
}

std::vector<ElementwiseCase> all_cases() {
  using A = Accuracy;
  using K = OpKind;
  const A kT = A::kTranscendental, kE = A::kExact;
  std::vector<ElementwiseCase> c = {
      unary(K::kAcos, -0.99, 0.99, kT),
      unary(K::kAcosh, 1, 5, kT),
      unary(K::kAsin, -0.99, 0.99, kT),
      unary(K::kAsinh, -5, 5, kT),
      unary(K::kAtan, -5, 5, kT),
      unary(K::kAtanh, -0.95, 0.95, kT),
      unary(K::kCos, -6, 6, kT),
      unary(K::kCosh, -5, 5, kT),
      unary(K::kSin, -6, 6, kT),
      unary(K::kSinh, -5, 5, kT),
      unary(K::kTan, -1.3, 1.3, kT),
      unary(K::kTanh, -5, 5, kT),
      unary(K::kErf, -3, 3, kT),
      unary(K::kErf, -3, 3, kE, NoAttrs{}, "int", kInt),
      unary(K::kExp, -10, 10, kT),
      unary(K::kLog, 0.01, 100, kT),
      unary(K::kSqrt, 0, 100, kE),
      unary(K::kReciprocal, -4, 4, kE),
      unary(K::kSigmoid, -10, 10, kT, NoAttrs{}, "", kFloat, true),
      unary(K::kSoftplus, -10, 10, kT),
      unary(K::kSoftsign, -5, 5, kE),
      unary(K::kCeil, -5, 5, kE, NoAttrs{}, "", kFloat, true),
      unary(K::kFloor, -5, 5, kE, NoAttrs{}, "", kFloat, true),
      unary(K::kRound, -5, 5, kE, NoAttrs{}, "", kFloat, true),
      unary(K::kMish, -10, 10, kT),
      unary(K::kHardSwish, -5, 5, A::kArith),
      unary(K::kGelu, -5, 5, kT, GeluAttrs{GeluApproximation::kNone}, "erf"),
      unary(K::kGelu, -5, 5, kT, GeluAttrs{GeluApproximation::kTanh}, "tanh"),
      unary(K::kHardSigmoid, -5, 5, A::kArith, HardSigmoidAttrs{0.2f, 0.5f}, "default"),
      unary(K::kHardSigmoid, -5, 5, A::kArith, HardSigmoidAttrs{0.5f, 0.1f}, "alpha_beta"),
      unary(K::kElu, -5, 5, kT, AlphaAttrs{1.0f}, "alpha1"),
      unary(K::kElu, -5, 5, kT, AlphaAttrs{0.5f}, "alpha05"),
      unary(K::kCelu, -5, 5, kT, AlphaAttrs{1.0f}, "alpha1"),
      unary(K::kCelu, -5, 5, kT, AlphaAttrs{2.0f}, "alpha2"),
      unary(K::kLeakyRelu, -5, 5, kE, AlphaAttrs{0.01f}),
      unary(K::kThresholdedRelu, -5, 5, kE, AlphaAttrs{1.0f}),
      unary(K::kSelu, -5, 5, kT, SeluAttrs{}),
      unary(K::kShrink, -3, 3, kE, ShrinkAttrs{0.5f, 1.0f}),
      unary(K::kShrink, -9, 9, kE, ShrinkAttrs{0.5f, 1.0f}, "int", kInt),
      unary(K::kAbs, -9, 9, kE, NoAttrs{}, "", kNumeric, true),
      unary(K::kNeg, -9, 9, kE, NoAttrs{}, "", join(kFloat, kSigned), true),
      unary(K::kRelu, -9, 9, kE, NoAttrs{}, "", join(kFloat, kSigned), true),
      unary(K::kSign, -9, 9, kE, NoAttrs{}, "", kNumeric, true),
      unary(K::kIsNaN, -9, 9, kE, NoAttrs{}, "", kFloat, true),
      unary(K::kIsInf, -9, 9, kE, IsInfAttrs{1, 1}, "both", kFloat, true),
      unary(K::kIsInf, -9, 9, kE, IsInfAttrs{0, 1}, "positive", kFloat, true),
      unary(K::kIsInf, -9, 9, kE, IsInfAttrs{1, 0}, "negative", kFloat, true),
      unary(K::kNot, 0, 1, kE, NoAttrs{}, "", kBool),
      binary(K::kAdd, {-9, 9}, {-9, 9}, kE, kNumeric, true),
      binary(K::kSub, {-9, 9}, {-9, 9}, kE, kNumeric, true),
      binary(K::kMul, {-9, 9}, {-9, 9}, kE, kNumeric, true),
      binary(K::kDiv, {-9, 9}, {0.25, 4}, kE, kFloat, true),
      int_division_case(K::kDiv, NoAttrs{}, ""),
      binary(K::kMod, {-10, 10}, {0.5, 3}, kE, kFloat, true, ModAttrs{1}),
      int_division_case(K::kMod, ModAttrs{0}, "python"),
      int_division_case(K::kMod, ModAttrs{1}, "fmod"),
      binary(K::kPRelu, {-9, 9}, {-1, 1}, kE, kFloat, false, NoAttrs{}, kPReluShapes),
      with_suffix(binary(K::kPRelu, {-9, 9}, {-3, 3, true}, kE, kInt, false, NoAttrs{}, kPReluShapes), "int"),
      pow_case(),
      int_pow_case(),
      variadic(K::kMax, kNumeric, kE),
      variadic(K::kMin, kNumeric, kE),
      variadic(K::kSum, kFloat, kE),
      variadic(K::kMean, kFloat, kE),
      compare(K::kEqual, kAll),
      compare(K::kGreater, kNumeric),
      compare(K::kGreaterOrEqual, kNumeric),
      compare(K::kLess, kNumeric),
      compare(K::kLessOrEqual, kNumeric),
      binary(K::kAnd, {0, 1}, {0, 1}, kE, kBool),
      binary(K::kOr, {0, 1}, {0, 1}, kE, kBool),
      binary(K::kXor, {0, 1}, {0, 1}, kE, kBool),
      where_case(),
      clip_case(),
      copy_case(K::kIdentity, kAll, 1, ""),
      copy_case(K::kDropout, kFloat, 1, ""),
      copy_case(K::kDropout, kFloat, 2, "mask"),
  };
  c.push_back(bitshift_case(BitShiftDirection::kLeft));
  c.push_back(bitshift_case(BitShiftDirection::kRight));
  for (DT to : kAll) {
    c.push_back(cast_case(K::kCast, to));
    c.push_back(cast_case(K::kCastLike, to));
  }
  return c;
}

}  // namespace

std::vector<OpCase> elementwise_cases() {
  std::vector<OpCase> out;
  for (const ElementwiseCase& c : all_cases())
    out.push_back({c.name, c.kind, c.dtypes,
                   [c](DT dt) { return runs_of(c.attrs, c.inputs(dt), c.n_out, accuracy(c.acc)); },
                   GpuModes::kLargestRun});
  return out;
}

}  // namespace kiln::optest
