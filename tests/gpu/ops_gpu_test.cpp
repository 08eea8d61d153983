// Every op of the CUDA kernel table against the CPU kernel (the reference) on random inputs:
// odd, zero-size, scalar and broadcasting shapes (up to 8 dims that cannot merge), special values
// (NaN, inf, -0, rounding ties), every element type the CPU kernel takes (the four float types,
// the eight integer types, bool); each op also misaligned (scalar paths) and under stream capture
// (no synchronizing, no allocating). Integer Div, Mod and Pow: the sign cases, negative and zero
// exponents, wrapping, and the device error for a zero divisor. Plus: outputs beyond 2^31 elements
// (64-bit indices), error reporting, and a list of the ops that run on the CPU but not yet on the
// GPU. Skips without a GPU.
#include <algorithm>
#include <iostream>
#include <regex>

#include "gpu_harness.h"

namespace kiln::gpu_test {
namespace {

using Inputs = std::vector<HostTensor>;
using InputSets = std::vector<Inputs>;

struct OpCase {
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
OpCase unary(OpKind k, double lo, double hi, Accuracy acc, Attrs attrs = NoAttrs{}, std::string variant = "",
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

OpCase binary(OpKind k, Range a, Range b, Accuracy acc, std::vector<DT> dtypes, bool specials = false,
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

OpCase with_suffix(OpCase c, const std::string& variant) {
  c.name += suffix_of(variant);
  return c;
}

OpCase variadic(OpKind k, std::vector<DT> dtypes, Accuracy acc) {
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

OpCase compare(OpKind k, std::vector<DT> dtypes) {
  return binary(k, {-3, 3, true}, {-3, 3, true}, Accuracy::kExact, std::move(dtypes), true);
}

OpCase pow_case() {
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
OpCase int_division_case(OpKind k, Attrs attrs, const std::string& variant) {
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
OpCase int_pow_case() {
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

OpCase where_case() {
  return {"Where", OpKind::kWhere, NoAttrs{}, kAll, [](DT dt) {
            InputSets s;
            for (const auto& sh : kWhereShapes)
              s.push_back(
                  {rand_tensor(DT::kBool, sh[0], 0, 1), rand_tensor(dt, sh[1], -9, 9), rand_tensor(dt, sh[2], -9, 9)});
            return s;
          }};
}

OpCase clip_case() {
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

OpCase cast_case(OpKind k, DT to) {
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

OpCase copy_case(OpKind k, std::vector<DT> dtypes, size_t n_out, std::string variant) {
  OpCase c{std::string(op_name(k)) + suffix_of(variant), k, NoAttrs{}, std::move(dtypes), [k](DT dt) {
             InputSets s;
             for (const Shape& sh : kUnaryShapes) s.push_back({rand_tensor(dt, sh, -9, 9)});
             if (k == OpKind::kDropout) s.push_back({rand_tensor(dt, {4099}, -9, 9), make(dt, {}, {0.3})});
             return s;
           }};
  c.n_out = n_out;
  return c;
}

// QuantizeLinear / DequantizeLinear: per tensor (with each zero-point type, and none), per axis
// and blocked. x covers saturation both ways, NaN and infinities, and rounding ties (x / scale =
// k + 0.5 with scale 0.5); float16 x with a float32 scale too (the kernels' vectorized path).
QuantizeAttrs quant_attrs(int64_t axis, int64_t block) {
  QuantizeAttrs a;
  a.axis = axis;
  a.block_size = block;
  return a;
}

std::vector<OpCase> quant_cases() {
  const std::vector<DT> kQuantFloat = {DT::kFloat32, DT::kFloat16};
  std::vector<OpCase> c;
  c.push_back({"QuantizeLinear", OpKind::kQuantizeLinear, QuantizeAttrs{}, kQuantFloat, [](DT dt) {
                 InputSets s;
                 for (const Shape& sh : std::vector<Shape>{{}, {0}, {7}, {3, 5, 2}, {4099}}) {
                   s.push_back({rand_tensor(dt, sh, -20, 20), make(dt, {}, {0.05})});
                   s.push_back({rand_tensor(dt, sh, -20, 20), make(dt, {}, {0.05}), make(DT::kUInt8, {}, {128})});
                   s.push_back({rand_tensor(dt, sh, -5, 5), make(dt, {}, {0.03}), make(DT::kInt8, {}, {-3})});
                   s.push_back({rand_tensor(dt, sh, -500, 500), make(dt, {}, {0.01}), make(DT::kInt16, {}, {7})});
                   s.push_back({rand_tensor(dt, sh, 0, 500), make(dt, {}, {0.01}), make(DT::kUInt16, {}, {9})});
                   // A float32 scale with float16 x: what to-fp16 leaves before a QuantizeLinear.
                   s.push_back({rand_tensor(dt, sh, -5, 5), make(DT::kFloat32, {}, {0.03}), make(DT::kInt8, {}, {-3})});
                   s.push_back({rand_tensor(dt, sh, -5, 5), make(DT::kFloat32, {}, {0.03})});
                 }
                 // The vectorized per-tensor path over 16-byte vectors and a tail.
                 s.push_back({rand_tensor(dt, {2, 1029}, -9, 9), make(DT::kFloat32, {}, {0.05}),
                              make(DT::kUInt8, {}, {100})});
                 s.push_back({special_tensor(dt, {37}, -4, 4), make(DT::kFloat32, {}, {0.5}), make(DT::kInt8, {}, {1})});
                 s.push_back({make(dt, {6}, {0.25, 0.75, -0.25, -0.75, 1.25, 2.5}), make(DT::kFloat32, {}, {0.5})});
                 s.push_back({special_tensor(dt, {37}, -4, 4), make(dt, {}, {0.5}), make(DT::kInt8, {}, {1})});
                 s.push_back({make(dt, {6}, {0.25, 0.75, -0.25, -0.75, 1.25, 2.5}), make(dt, {}, {0.5})});  // ties
                 // Zeros of both signs (the kernel skips their division) with zero, negative and
                 // positive scales: 0 / 0 is NaN, which gives the zero point.
                 for (double scale : {0.0, -0.5, 0.25})
                   s.push_back({make(dt, {8}, {0.0, -0.0, 0.0, 1.0, -1.0, 0.0, 3.0, -0.0}), make(DT::kFloat32, {}, {scale}),
                                make(DT::kInt8, {}, {5})});
                 return s;
               }});
  c.push_back({"QuantizeLinear_axis", OpKind::kQuantizeLinear, quant_attrs(1, 0), kQuantFloat, [](DT dt) {
                 return InputSets{{rand_tensor(dt, {2, 3, 5}, -3, 3), rand_tensor(dt, {3}, 0.01, 0.1),
                                   rand_tensor(DT::kUInt8, {3}, 0, 255, true)},
                                  {rand_tensor(dt, {4, 3}, -3, 3), rand_tensor(dt, {3}, 0.01, 0.1),
                                   rand_tensor(DT::kInt8, {3}, -100, 100, true)}};
               }});
  c.push_back({"QuantizeLinear_blocked", OpKind::kQuantizeLinear, quant_attrs(1, 2), kQuantFloat, [](DT dt) {
                 return InputSets{{rand_tensor(dt, {2, 4, 3}, -3, 3), rand_tensor(dt, {2, 2, 3}, 0.01, 0.1),
                                   rand_tensor(DT::kInt8, {2, 2, 3}, -50, 50, true)}};
               }});
  const std::vector<DT> kQuantized = {DT::kInt8, DT::kUInt8, DT::kInt16, DT::kUInt16, DT::kInt32};
  for (DT scale_dt : {DT::kFloat32, DT::kFloat16}) {
    const std::string suffix = scale_dt == DT::kFloat32 ? "" : "_to_float16";
    c.push_back({"DequantizeLinear" + suffix, OpKind::kDequantizeLinear, QuantizeAttrs{}, kQuantized,
                 [scale_dt](DT dt) {
                   InputSets s;
                   for (const Shape& sh : std::vector<Shape>{{}, {0}, {7}, {3, 5, 2}, {4099}}) {
                     s.push_back({rand_tensor(dt, sh, 0, 120, true), make(scale_dt, {}, {0.05})});
                     if (dt != DT::kInt32)
                       s.push_back({rand_tensor(dt, sh, 0, 120, true), make(scale_dt, {}, {0.05}), make(dt, {}, {3})});
                   }
                   if (dt != DT::kInt32)
                     s.push_back({rand_tensor(dt, {2, 3, 5}, 0, 100, true), rand_tensor(scale_dt, {3}, 0.01, 0.1),
                                  rand_tensor(dt, {3}, 0, 20, true)});
                   if (dt == DT::kInt8)  // negative values and zero point (the per-tensor fast path's sign)
                     s.push_back({rand_tensor(dt, {4099}, -128, 127, true), make(scale_dt, {}, {0.05}),
                                  make(dt, {}, {-7})});
                   return s;
                 },
                 Accuracy::kExact});
  }
  c.push_back(
      {"DequantizeLinear_axis", OpKind::kDequantizeLinear, quant_attrs(0, 0), {DT::kInt8, DT::kUInt8}, [](DT dt) {
         return InputSets{{rand_tensor(dt, {4, 3}, 0, 100, true), rand_tensor(DT::kFloat32, {4}, 0.01, 0.1),
                           rand_tensor(dt, {4}, 0, 20, true)}};
       }});
  return c;
}

// ---- BitShift --------------------------------------------------------------------------------
const std::vector<std::pair<Shape, Shape>> kShiftShapes = {
    {{7}, {7}}, {{2, 3, 4}, {4}}, {{3, 1, 5}, {1, 4, 1}},   {{}, {3}},
    {{5}, {}},  {{0, 3}, {3}},    {{300, 129}, {300, 129}}, {{64, 1}, {1, 513}}};

OpCase bitshift_case(BitShiftDirection dir) {
  return {std::string("BitShift_") + (dir == BitShiftDirection::kLeft ? "left" : "right"), OpKind::kBitShift,
          BitShiftAttrs{dir}, {DT::kUInt8, DT::kUInt16, DT::kUInt32, DT::kUInt64}, [](DT dt) {
            InputSets s;
            const int bits = static_cast<int>(dtype_size(dt)) * 8;
            const double hi = bits == 8 ? 255 : bits == 16 ? 65535 : bits == 32 ? 4294967295.0 : 1099511627775.0;
            for (const auto& [sa, sb] : kShiftShapes)
              s.push_back({rand_tensor(dt, sa, 0, hi), rand_tensor(dt, sb, 0, bits + 3)});  // past the width: 0
            return s;
          }};
}

std::vector<OpCase> all_cases() {
  using A = Accuracy;
  using K = OpKind;
  const A kT = A::kTranscendental, kE = A::kExact;
  std::vector<OpCase> c = {
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
  for (OpCase& q : quant_cases()) c.push_back(std::move(q));
  c.push_back(bitshift_case(BitShiftDirection::kLeft));
  c.push_back(bitshift_case(BitShiftDirection::kRight));
  for (DT to : kAll) {
    c.push_back(cast_case(K::kCast, to));
    c.push_back(cast_case(K::kCastLike, to));
  }
  return c;
}

const std::vector<OpCase>& cases() {
  static const std::vector<OpCase> c = all_cases();
  return c;
}

int64_t total_elements(const Inputs& in) {
  int64_t n = 0;
  for (const HostTensor& t : in) n += t.exists ? t.numel() : 0;
  return n;
}

// ---- the op tests ------------------------------------------------------------------------------
class GpuOps : public testing::TestWithParam<OpCase> {};

TEST_P(GpuOps, MatchesCpu) {
  KILN_SKIP_WITHOUT_GPU();
  const OpCase& c = GetParam();
  rng().seed(static_cast<uint32_t>(std::hash<std::string>{}(c.name)));
  for (DT dt : c.dtypes) {
    SCOPED_TRACE(std::string("dtype ") + std::string(dtype_name(dt)));
    const InputSets sets = c.inputs(dt);
    for (const Inputs& in : sets) check_op(c.kind, c.attrs, in, c.n_out, c.acc);
    // The largest set (where the vector paths run) again, misaligned and under stream capture.
    const Inputs& big = *std::max_element(sets.begin(), sets.end(), [](const Inputs& a, const Inputs& b) {
      return total_elements(a) < total_elements(b);
    });
    check_op(c.kind, c.attrs, big, c.n_out, c.acc, GpuMode::kMisaligned);
    check_op(c.kind, c.attrs, big, c.n_out, c.acc, GpuMode::kCaptured);
  }
}

void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

// Training-mode Dropout with ratio 0 is the identity with an all-true mask (PyTorch 1.13 exports
// Swin-T so); with another ratio, or none (0.5), the device reports an error instead of copying.
// training_mode and ratio are run-time inputs here, which only the device reads.
TEST(GpuDropout, TrainingModeCopiesWithRatioZeroOnly) {
  KILN_SKIP_WITHOUT_GPU();
  for (DT dt : {DT::kFloat32, DT::kFloat16, DT::kFloat64}) {
    SCOPED_TRACE(std::string("dtype ") + std::string(dtype_name(dt)));
    const HostTensor x = rand_tensor(dt, {1031}, -9, 9), training = make(DT::kBool, {}, {1});
    const std::vector<OutputType> types{{dt, {1031}}, {DT::kBool, {1031}}};
    for (double zero : {0.0, -0.0}) {
      const std::vector<HostTensor> y =
          run_gpu(OpKind::kDropout, NoAttrs{}, {x, make(dt, {}, {zero}), training}, types, GpuMode::kDirect);
      expect_match(y[0], x, Tolerance{}, "Dropout output");
      expect_match(y[1], make(DT::kBool, {1031}, std::vector<double>(1031, 1.0)), Tolerance{}, "Dropout mask");
    }
    for (const HostTensor& ratio : {make(dt, {}, {0.3}), make(dt, {}, {1e-3}), absent()})
      EXPECT_THROW(run_gpu(OpKind::kDropout, NoAttrs{}, {x, ratio, training}, types, GpuMode::kDirect), Error);
    // Not training: any ratio copies.
    const std::vector<HostTensor> y = run_gpu(
        OpKind::kDropout, NoAttrs{}, {x, make(dt, {}, {0.3}), make(DT::kBool, {}, {0})}, types, GpuMode::kDirect);
    expect_match(y[0], x, Tolerance{}, "Dropout output");
  }
}

INSTANTIATE_TEST_SUITE_P(Elementwise, GpuOps, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<OpCase>& info) { return info.param.name; });

// ---- coverage ----------------------------------------------------------------------------------
// A GPU op without a case here would go untested.
TEST(GpuCoverage, EveryGpuOpHasCases) {
  KILN_SKIP_WITHOUT_GPU();
  std::string dup;
  EXPECT_TRUE(gpu::gpu_kernel_table_valid(&dup)) << "ops with several GPU kernels: " << dup;
  // This file tests the elementwise family (and QuantizeLinear / DequantizeLinear of the quant
  // family); the other families have their own *_gpu_test.cpp.
  for (const gpu::GpuKernelEntry& e : gpu::elementwise_gpu_kernels()) {
    const bool tested = std::any_of(cases().begin(), cases().end(), [&](const OpCase& c) { return c.kind == e.kind; });
    EXPECT_TRUE(tested) << op_name(e.kind) << " has a GPU kernel but no case in ops_gpu_test.cpp";
  }
}

// Every op the CPU backend runs has a GPU kernel (the GPU runtime issue asks for all of them).
TEST(GpuCoverage, EveryCpuOpHasAGpuKernel) {
  std::string missing;
  int n = 0, on_gpu = 0;
  for (const OpInfo& info : kOpTable) {
    if (gpu::gpu_kernel(info.kind))
      ++on_gpu;
    else if (cpu::cpu_kernel(info.kind)) {
      missing += (n++ % 12 == 0 ? "\n  " : " ") + std::string(info.name);
    }
  }
  std::cout << "[ GPU ops  ] " << on_gpu << " of " << kOpCount << " ops have a GPU kernel; " << n
            << " run on the CPU only:" << missing << "\n";
  EXPECT_EQ(n, 0) << "ops without a GPU kernel:" << missing;
}

// ---- device, errors ----------------------------------------------------------------------------
TEST(GpuDevice, TargetNamesTheComputeCapability) {
  KILN_SKIP_WITHOUT_GPU();
  const std::string t = gpu::gpu_target();
  EXPECT_TRUE(std::regex_match(t, std::regex("sm_[0-9]+"))) << t;
  std::cout << "[ device   ] " << t << "\n";
}

// Bool arithmetic (which shape inference and the CPU kernel reject too) throws naming the backend.
TEST(GpuErrors, UnsupportedDtypeThrowsNamingTheBackend) {
  KILN_SKIP_WITHOUT_GPU();
  const HostTensor a = rand_tensor(DT::kBool, {4}, 0, 1);
  expect_cuda_backend_error(OpKind::kAdd, NoAttrs{}, {a, a}, {OutputType{DT::kBool, {4}}});
}

// What the CPU kernels throw for, the GPU kernels report through the step's error flag: an
// integer divisor of 0 (Div, Mod) and an integer 0 raised to a negative power.
TEST(GpuErrors, IntegerDivisionByZeroIsADeviceError) {
  KILN_SKIP_WITHOUT_GPU();
  struct Bad {
    OpKind kind;
    Attrs attrs;
    HostTensor a, b;
  };
  const std::vector<Bad> bad = {
      {OpKind::kDiv, NoAttrs{}, make(DT::kInt32, {4}, {1, 2, 3, 4}), make(DT::kInt32, {4}, {1, 0, 1, 1})},
      {OpKind::kDiv, NoAttrs{}, make(DT::kUInt8, {3}, {1, 2, 3}), make(DT::kUInt8, {}, {0})},
      {OpKind::kMod, ModAttrs{0}, make(DT::kInt64, {3}, {5, -5, 7}), make(DT::kInt64, {3}, {2, 0, 3})},
      {OpKind::kMod, ModAttrs{1}, make(DT::kInt16, {2}, {5, -5}), make(DT::kInt16, {2}, {0, 3})},
      {OpKind::kPow, NoAttrs{}, make(DT::kInt32, {3}, {2, 0, 3}), make(DT::kInt64, {}, {-1})},
  };
  for (const Bad& c : bad) {
    const std::vector<OutputType> types = infer_shapes(c.kind, c.attrs, infer_views(c.kind, {c.a, c.b}), 1);
    EXPECT_THROW((void)run_cpu(c.kind, c.attrs, {c.a, c.b}, types), Error) << describe(c.kind, {c.a, c.b});
    try {
      (void)run_gpu(c.kind, c.attrs, {c.a, c.b}, types, GpuMode::kDirect);
      ADD_FAILURE() << describe(c.kind, {c.a, c.b}) << " should report a device error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), gpu::gpu_error_message(gpu::kGpuBadValue)) << describe(c.kind, {c.a, c.b});
    }
  }
}

TEST(GpuErrors, MoreThanEightUnmergeableDimsThrow) {
  KILN_SKIP_WITHOUT_GPU();
  const HostTensor a = rand_tensor(DT::kFloat32, {2, 1, 2, 1, 2, 1, 2, 1, 2}, -1, 1);
  const HostTensor b = rand_tensor(DT::kFloat32, {1, 2, 1, 2, 1, 2, 1, 2, 1}, -1, 1);
  try {
    (void)run_gpu(OpKind::kAdd, NoAttrs{}, {a, b}, {OutputType{DT::kFloat32, Shape(9, 2)}}, GpuMode::kDirect);
    FAIL() << "a 9-dim broadcast should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most 8"), std::string::npos) << e.what();
  }
}

// ---- beyond 2^31 elements ----------------------------------------------------------------------
// float16 [3, M] + [3, 1] with 3M > 2^31: the strided kernel's 64-bit flavour; and [3M] + [] the
// flat kernel past 2^31. Inputs are filled on the device (every half 0x3C3C = 1.05859375) and only
// samples are copied back: near the start, the row boundaries, 2^31 and the end.
TEST(GpuLarge, OutputsBeyond2To31Elements) {
  KILN_SKIP_WITHOUT_GPU();
  const int64_t m = 715827883, n = 3 * m;  // n = 2^31 + 1
  static_assert(3 * int64_t{715827883} > (int64_t{1} << 31));
  size_t free_b = 0, total_b = 0;
  KILN_CUDA_OK(cudaMemGetInfo(&free_b, &total_b));
  const size_t need = static_cast<size_t>(n) * 2 * 2 + (size_t{1} << 30);
  if (free_b < need) GTEST_SKIP() << "needs " << (need >> 20) << " MiB of free GPU memory, has " << (free_b >> 20);
  void *x = nullptr, *y = nullptr, *b = nullptr;
  KILN_CUDA_OK(cudaMalloc(&x, static_cast<size_t>(n) * 2));
  KILN_CUDA_OK(cudaMalloc(&y, static_cast<size_t>(n) * 2));
  KILN_CUDA_OK(cudaMalloc(&b, 16));
  KILN_CUDA_OK(cudaMemset(x, 0x3C, static_cast<size_t>(n) * 2));
  const uint16_t rows[3] = {Half(1.0f).bits, Half(2.0f).bits, Half(3.0f).bits};
  KILN_CUDA_OK(cudaMemcpy(b, rows, sizeof(rows), cudaMemcpyHostToDevice));
  const float x0 = Half::to_float(0x3C3C);

  auto sample = [&](int64_t i) {
    uint16_t h = 0;
    EXPECT_EQ(cudaMemcpy(&h, static_cast<uint16_t*>(y) + i, 2, cudaMemcpyDeviceToHost), cudaSuccess);
    return Half::to_float(h);
  };
  std::vector<int64_t> at;
  for (int64_t base : {int64_t{0}, m - 4, 2 * m - 4, (int64_t{1} << 31) - 4, n - 8})
    for (int64_t i = base; i < base + 8 && i < n; ++i) at.push_back(i);

  gpu::GpuEnv env;
  const Shape s2{3, m}, sb{3, 1}, s1{n}, s0{};
  {  // strided: [3, M] + [3, 1]
    KILN_CUDA_OK(cudaMemset(y, 0xFF, static_cast<size_t>(n) * 2));
    const std::vector<TensorView> in = {{DT::kFloat16, s2, x}, {DT::kFloat16, sb, b}};
    const std::vector<TensorView> out = {{DT::kFloat16, s2, y}};
    gpu::gpu_kernel(OpKind::kAdd)(OpKind::kAdd, NoAttrs{}, in, out, env);
    KILN_CUDA_OK(cudaDeviceSynchronize());
    for (int64_t i : at) EXPECT_EQ(sample(i), float(Half(x0 + float(i / m + 1)))) << "strided, element " << i;
  }
  {  // flat: [3M] + [] (the scalar 1.0)
    KILN_CUDA_OK(cudaMemset(y, 0xFF, static_cast<size_t>(n) * 2));
    const std::vector<TensorView> in = {{DT::kFloat16, s1, x}, {DT::kFloat16, s0, b}};
    const std::vector<TensorView> out = {{DT::kFloat16, s1, y}};
    gpu::gpu_kernel(OpKind::kAdd)(OpKind::kAdd, NoAttrs{}, in, out, env);
    KILN_CUDA_OK(cudaDeviceSynchronize());
    for (int64_t i : at) EXPECT_EQ(sample(i), float(Half(x0 + 1.0f))) << "flat, element " << i;
  }
  cudaFree(x);
  cudaFree(y);
  cudaFree(b);
}

}  // namespace
}  // namespace kiln::gpu_test
