// The quant family's op cases (tests/ops/op_case.h). QuantizeLinear / DequantizeLinear: per tensor
// (with each zero-point type, and none), per axis and blocked; saturation both ways, NaN and
// infinities, rounding ties. MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv and
// DynamicQuantizeLinear: the shapes and attribute variants of tests/cpu/ops_quant_test.cpp (odd
// sizes, size 1, zero-size, broadcasting batches, per-row / per-column / per-channel parameters,
// groups, strides, dilations, auto_pad, 1-D to 3-D convolutions). Results are bit-exact.
#include "ops/op_case.h"

namespace kiln::optest {
namespace {

using InputSets = std::vector<Inputs>;

struct QLinearCase {
  std::string name;
  OpKind kind;
  Attrs attrs;
  std::vector<DT> dtypes;               // x's types (QuantizeLinear), the quantized types (Dequantize)
  std::function<InputSets(DT)> inputs;  // the input sets for one of them
  Accuracy acc = Accuracy::kExact;
};

// QuantizeLinear / DequantizeLinear: per tensor (with each zero-point type, and none), per axis
// and blocked. x covers saturation both ways, NaN and infinities, and rounding ties (x / scale =
// k + 0.5 with scale 0.5); float16 x with a float32 scale too (the kernels' vectorized path).
QuantizeAttrs quant_attrs(int64_t axis, int64_t block) {
  QuantizeAttrs a;
  a.axis = axis;
  a.block_size = block;
  return a;
}

std::vector<QLinearCase> quantize_linear_cases() {
  const std::vector<DT> kQuantFloat = {DT::kFloat32, DT::kFloat16};
  std::vector<QLinearCase> c;
  c.push_back(
      {"QuantizeLinear", OpKind::kQuantizeLinear, QuantizeAttrs{}, kQuantFloat, [](DT dt) {
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
         s.push_back({rand_tensor(dt, {2, 1029}, -9, 9), make(DT::kFloat32, {}, {0.05}), make(DT::kUInt8, {}, {100})});
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
    c.push_back(
        {"DequantizeLinear" + suffix, OpKind::kDequantizeLinear, QuantizeAttrs{}, kQuantized,
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
             s.push_back({rand_tensor(dt, {4099}, -128, 127, true), make(scale_dt, {}, {0.05}), make(dt, {}, {-7})});
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

const char* short_name(DT t) {
  switch (t) {
    case DT::kUInt8: return "u8";
    case DT::kInt8: return "i8";
    default: return "?";
  }
}

// ---- integer matrix products -----------------------------------------------------------------
const std::vector<std::pair<Shape, Shape>> kMatmulShapes = {
    {{3, 4}, {4, 5}}, {{4}, {4, 5}},          {{3, 4}, {4}},       {{2, 1, 3, 4}, {3, 4, 5}}, {{2, 3, 0}, {0, 5}},
    {{0, 4}, {4, 2}}, {{65, 130}, {130, 67}}, {{1, 7}, {2, 7, 3}}, {{3, 40, 33}, {33, 17}}};
const std::vector<std::pair<DT, DT>> kQ8Pairs = {
    {DT::kUInt8, DT::kUInt8}, {DT::kInt8, DT::kUInt8}, {DT::kUInt8, DT::kInt8}, {DT::kInt8, DT::kInt8}};

// A per-row (of A, is_a) or per-column (of B) parameter: kind 0 scalar [], 1 [1], 2 1-D, 3 the
// operand's shape with the K axis 1 (the CPU test's param_shape).
Shape param_shape(int kind, const Shape& m, bool is_a) {
  const int64_t rows = m.size() == 1 ? 1 : is_a ? m[m.size() - 2] : m.back();
  if (kind == 0) return {};
  if (kind == 1) return {1};
  if (kind == 2 || m.size() < 2) return {rows};
  Shape s = m;
  s[is_a ? s.size() - 1 : s.size() - 2] = 1;
  return s;
}

MixedCase matmul_integer_case(DT ta, DT tb) {
  return {std::string("MatMulInteger_") + short_name(ta) + "_" + short_name(tb), OpKind::kMatMulInteger, NoAttrs{},
          [ta, tb] {
            InputSets s;
            for (const auto& [as, bs] : kMatmulShapes)
              for (int zk = -1; zk < 4; ++zk) {  // -1: no zero points; 2: a's only (b's omitted)
                Inputs in{rand_q(ta, as), rand_q(tb, bs)};
                if (zk >= 0) {
                  in.push_back(rand_q(ta, param_shape(zk, as, true)));
                  in.push_back(zk == 2 ? absent() : rand_q(tb, param_shape(zk, bs, false)));
                }
                s.push_back(std::move(in));
              }
            // Every product at its extreme (-255 * 255): K = 300, and K = 40000, whose sum passes 2^31
            // and wraps modulo 2^32 as the CPU's uint32 accumulation does.
            for (int64_t K : {300, 40000})
              s.push_back({make(ta, {2, K}, {qlo(ta)}), make(tb, {K, 3}, {qhi(tb)}), make(ta, {}, {qhi(ta)}),
                           make(tb, {}, {qlo(tb)})});
            return s;
          }};
}

MixedCase qlinear_matmul_case(DT ta, DT tb, DT ty) {
  return {std::string("QLinearMatMul_") + short_name(ta) + "_" + short_name(tb) + "_to_" + short_name(ty),
          OpKind::kQLinearMatMul, NoAttrs{}, [ta, tb, ty] {
            InputSets s;
            for (const auto& [as, bs] : kMatmulShapes)
              for (int pk : {0, 1, 2, 3}) {
                const Shape pa = param_shape(pk, as, true), pb = param_shape(pk, bs, false);
                const int64_t rows = as.size() >= 2 ? as[as.size() - 2] : 1;
                const Shape py = pk == 2 ? Shape{rows} : Shape{};
                // b's scale as float16 (pk 3) and bfloat16 (pk 1) too: the CPU takes any float scale.
                const DT sbt = pk == 3 ? DT::kFloat16 : pk == 1 ? DT::kBFloat16 : DT::kFloat32;
                s.push_back({rand_q(ta, as), rand_tensor(DT::kFloat32, pa, 0.002, 0.05), rand_q(ta, pa), rand_q(tb, bs),
                             rand_tensor(sbt, pb, 0.002, 0.05), rand_q(tb, pb),
                             rand_tensor(DT::kFloat32, py, 0.05, 0.5), rand_q(ty, py)});
              }
            // An accumulator that wraps past 2^31 (K = 40000 extreme products), then saturates.
            s.push_back({make(ta, {2, 40000}, {qlo(ta)}), make(DT::kFloat32, {}, {0.01}), make(ta, {}, {qhi(ta)}),
                         make(tb, {40000, 3}, {qhi(tb)}), make(DT::kFloat32, {}, {0.01}), make(tb, {}, {qlo(tb)}),
                         make(DT::kFloat32, {}, {1e-3}), make(ty, {}, {0})});
            return s;
          }};
}

// ---- integer convolutions --------------------------------------------------------------------
struct ConvCase {
  Shape x, w;
  int64_t group;
  Shape strides, dilations, pads;
  AutoPad auto_pad = AutoPad::kNotSet;
};

const std::vector<ConvCase> kConvCases = {
    {{1, 3, 5, 5}, {4, 3, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},
    {{2, 4, 7, 6}, {6, 2, 3, 2}, 2, {2, 1}, {1, 2}, {1, 0, 0, 1}},
    {{1, 2, 9}, {3, 2, 3}, 1, {2}, {}, {}},
    {{1, 3, 4, 4, 4}, {2, 3, 2, 2, 2}, 1, {}, {}, {0, 1, 0, 1, 0, 0}},
    {{1, 2, 5, 6}, {2, 2, 3, 3}, 1, {2, 2}, {}, {}, AutoPad::kSameUpper},
    {{2, 8, 20, 20}, {16, 8, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},
    {{0, 2, 3, 3}, {2, 2, 1, 1}, 1, {}, {}, {}},
    {{1, 6, 9, 9}, {6, 1, 3, 3}, 6, {2, 2}, {}, {1, 1, 1, 1}},  // depthwise
};

ConvAttrs conv_attrs(const ConvCase& c) {
  ConvAttrs a;
  a.group = c.group;
  a.strides = c.strides;
  a.dilations = c.dilations;
  a.pads = c.pads;
  a.auto_pad = c.auto_pad;
  return a;
}

std::string conv_name(size_t i) { return "conv" + std::to_string(i); }

MixedCase conv_integer_case(size_t ci, DT tx, DT tw) {
  const ConvCase& c = kConvCases[ci];
  return {std::string("ConvInteger_") + conv_name(ci) + "_" + short_name(tx) + "_" + short_name(tw),
          OpKind::kConvInteger, conv_attrs(c), [c, tx, tw] {
            InputSets s;
            for (int zk = 0; zk < 4; ++zk) {  // 0 none, 1 x only, 2 x + scalar w, 3 x + per-channel w
              Inputs in{rand_q(tx, c.x), rand_q(tw, c.w)};
              if (zk >= 1) in.push_back(rand_q(tx, {}));
              if (zk >= 2) in.push_back(rand_q(tw, zk == 3 ? Shape{c.w[0]} : Shape{1}));
              s.push_back(std::move(in));
            }
            s.push_back({rand_q(tx, c.x), rand_q(tw, c.w), absent(), rand_q(tw, {c.w[0]})});  // w's only
            return s;
          }};
}

MixedCase qlinear_conv_case(size_t ci, DT tx, DT tw, DT ty) {
  const ConvCase& c = kConvCases[ci];
  return {std::string("QLinearConv_") + conv_name(ci) + "_" + short_name(tx) + "_" + short_name(tw) + "_to_" +
              short_name(ty),
          OpKind::kQLinearConv, conv_attrs(c), [c, tx, tw, ty] {
            InputSets s;
            const int64_t M = c.w[0];
            for (int variant = 0; variant < 3; ++variant) {  // 1: per-channel w and a bias; 2: bias only
              const Shape pw = variant == 1 ? Shape{M} : Shape{};
              Inputs in{rand_q(tx, c.x),
                        rand_tensor(DT::kFloat32, {}, 0.005, 0.05),
                        rand_q(tx, {1}),
                        rand_q(tw, c.w),
                        rand_tensor(DT::kFloat32, pw, 0.005, 0.05),
                        rand_q(tw, pw),
                        rand_tensor(DT::kFloat32, {}, 0.2, 2),
                        rand_q(ty, {})};
              if (variant) in.push_back(rand_tensor(DT::kInt32, {M}, -5000, 5000));
              s.push_back(std::move(in));
            }
            return s;
          }};
}

// ---- DynamicQuantizeLinear -------------------------------------------------------------------
MixedCase dynamic_quantize_case() {
  MixedCase c{"DynamicQuantizeLinear", OpKind::kDynamicQuantizeLinear, NoAttrs{}, [] {
                InputSets s;
                s.push_back({make(DT::kFloat32, {6}, {0, 2, -3, -2.5, 1.34, 0.5})});  // ONNX's backend test
                for (auto [shape, lo, hi] :
                     std::vector<std::tuple<Shape, double, double>>{{{3, 4}, -2, 5},
                                                                    {{100000}, -1, 1},
                                                                    {{7}, 0.5, 9},
                                                                    {{2, 3}, -9, -1},
                                                                    {{4}, 0, 0},
                                                                    {{0, 3}, 0, 1},
                                                                    {{}, -3, 3},
                                                                    {{2500003}, -7, 3}})  // > 1024 partial blocks
                  s.push_back({rand_tensor(DT::kFloat32, shape, lo, hi)});
                s.push_back({special_tensor(DT::kFloat32, {37}, -4, 4)});  // NaN, +-inf, ties
                HostTensor nan_only = make(DT::kFloat32, {5}, {kNaN, 1.5, kNaN, -0.5, kNaN});
                s.push_back({nan_only});
                return s;
              }};
  c.n_out = 3;
  return c;
}

std::vector<MixedCase> all_cases() {
  std::vector<MixedCase> c;
  for (const auto& [ta, tb] : kQ8Pairs) {
    c.push_back(matmul_integer_case(ta, tb));
    for (DT ty : {DT::kUInt8, DT::kInt8}) c.push_back(qlinear_matmul_case(ta, tb, ty));
    for (size_t ci = 0; ci < kConvCases.size(); ++ci) {
      c.push_back(conv_integer_case(ci, ta, tb));
      for (DT ty : {DT::kUInt8, DT::kInt8}) c.push_back(qlinear_conv_case(ci, ta, tb, ty));
    }
  }
  c.push_back(dynamic_quantize_case());
  return c;
}

}  // namespace

std::vector<OpCase> quant_cases() {
  std::vector<OpCase> out;
  for (const MixedCase& c : all_cases()) out.push_back(c.op_case());
  for (const QLinearCase& c : quantize_linear_cases())
    out.push_back(
        {c.name, c.kind, c.dtypes, [c](DT dt) { return runs_of(c.attrs, c.inputs(dt), 1, accuracy(c.acc)); }});
  return out;
}

}  // namespace kiln::optest
