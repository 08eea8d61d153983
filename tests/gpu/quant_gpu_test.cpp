// The quant family's ONNX integer ops on the GPU against the CPU kernels (the reference):
// MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv and DynamicQuantizeLinear. The shapes and
// attribute variants are those of tests/cpu/ops_quant_test.cpp (odd sizes, size 1, zero-size,
// broadcasting batches, per-row / per-column / per-channel quantization parameters, groups,
// strides, dilations, auto_pad, 1-D to 3-D convolutions); results must be bit-exact. Every input
// set runs direct, misaligned and under stream capture. QuantizeLinear and DequantizeLinear:
// ops_gpu_test.cpp; kiln.QConv and kiln.QMatMul: qfused_gpu_test.cpp; NhwcQConv:
// qconv_nhwc_gpu_test.cpp. Skips without a GPU.
#include <algorithm>

#include "gpu_harness.h"

namespace kiln::gpu_test {
namespace {

using Inputs = std::vector<HostTensor>;
using InputSets = std::vector<Inputs>;

struct OpCase {
  std::string name;
  OpKind kind;
  Attrs attrs;
  std::function<InputSets()> inputs;
  Accuracy acc = Accuracy::kExact;
  size_t n_out = 1;
};

const GpuMode kModes[] = {GpuMode::kDirect, GpuMode::kMisaligned, GpuMode::kCaptured};

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

double qlo(DT t) { return t == DT::kInt8 ? -128 : 0; }
double qhi(DT t) { return t == DT::kInt8 ? 127 : 255; }
HostTensor rand_q(DT t, Shape s) { return rand_tensor(t, std::move(s), qlo(t), qhi(t)); }

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

OpCase matmul_integer_case(DT ta, DT tb) {
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

OpCase qlinear_matmul_case(DT ta, DT tb, DT ty) {
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

OpCase conv_integer_case(size_t ci, DT tx, DT tw) {
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

OpCase qlinear_conv_case(size_t ci, DT tx, DT tw, DT ty) {
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
OpCase dynamic_quantize_case() {
  OpCase c{"DynamicQuantizeLinear", OpKind::kDynamicQuantizeLinear, NoAttrs{}, [] {
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

std::vector<OpCase> all_cases() {
  std::vector<OpCase> c;
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

const std::vector<OpCase>& cases() {
  static const std::vector<OpCase> c = all_cases();
  return c;
}

class GpuQuant : public testing::TestWithParam<OpCase> {};

TEST_P(GpuQuant, MatchesCpu) {
  KILN_SKIP_WITHOUT_GPU();
  const OpCase& c = GetParam();
  rng().seed(static_cast<uint32_t>(std::hash<std::string>{}(c.name)));
  const InputSets sets = c.inputs();
  for (size_t i = 0; i < sets.size(); ++i) {
    SCOPED_TRACE("input set " + std::to_string(i));
    for (GpuMode m : kModes) check_op(c.kind, c.attrs, sets[i], c.n_out, c.acc, m);
  }
}

void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

INSTANTIATE_TEST_SUITE_P(Quant, GpuQuant, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<OpCase>& info) { return info.param.name; });

TEST(GpuQuantCoverage, EveryOpHasCases) {
  KILN_SKIP_WITHOUT_GPU();
  for (const gpu::GpuKernelEntry& e : gpu::quant_gpu_kernels()) {
    if (e.kind == OpKind::kQConv || e.kind == OpKind::kQMatMul) continue;  // qfused_gpu_test.cpp
    if (e.kind == OpKind::kNhwcQConv) continue;                            // qconv_nhwc_gpu_test.cpp
    if (e.kind == OpKind::kQuantizeLinear || e.kind == OpKind::kDequantizeLinear) continue;  // ops_gpu_test.cpp
    const bool tested = std::any_of(cases().begin(), cases().end(), [&](const OpCase& c) { return c.kind == e.kind; });
    EXPECT_TRUE(tested) << op_name(e.kind) << " has a GPU kernel but no case here";
  }
}

}  // namespace
}  // namespace kiln::gpu_test
