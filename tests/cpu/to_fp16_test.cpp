// Tests for the to-fp16 pass (kiln optimize --fp16): it fires only when asked; float tensors inside
// the graph become float16 while inputs and outputs keep their types and names; constants are
// converted once; shape inputs (Resize scales) and float32-only ops (ReduceSumSquare) keep float32
// with casts at the seams; and the engine computes what the float32 engine computes to float16
// accuracy (run on the CPU backend, whose kernels take float16 too). QuantizeLinear reads float16
// without a Cast; a reduction of an unconverted float32 tensor stays float32, and a classifier's
// small product that reads it (through a Flatten) takes float16 weights with no Cast around it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/half.h"
#include "core/shape_infer.h"
#include "onnx_model_util.h"
#include "build/build.h"

namespace kiln::passes {

using namespace kiln::build;  // build_engine, BuildOptions: the passes run inside a build
namespace {

using namespace kiln::test;

struct Built {
  std::vector<uint8_t> engine;
  EngineSummary summary;
  std::map<std::string, DataType> dtypes;  // engine tensors by name (inputs, outputs, steps' tensors)
  std::string detail;
};

Built build(const OnnxModel& m, bool fp16) {
  graph::Graph g = m.import();
  BuildOptions o;
  o.fp16 = fp16;
  o.disabled_passes = {"fuse-epilogue"};  // these tests count the nodes that to-fp16 sees
  BuildReport r;
  Built b;
  b.engine = build_engine(g, o, &r);
  for (const PassReport& p : r.passes)
    if (p.name == "to-fp16") b.detail = p.detail;
  auto e = Engine::from_bytes(b.engine);
  b.summary = e->summary();
  for (const auto& v : g.values) b.dtypes[v.name] = v.dtype;
  return b;
}

int count_op(const Built& b, const std::string& op) {
  return static_cast<int>(
      std::count_if(b.summary.steps.begin(), b.summary.steps.end(), [&](const StepInfo& s) { return s.op == op; }));
}

// x[1,3,6,6] -> Conv -> Relu -> Add(const) -> y ; shared constant "k" read by Add and Mul.
OnnxModel conv_model() {
  OnnxModel m("conv");
  m.input("x", {1, 3, 6, 6});
  m.output("y");
  m.output("z");
  m.init_rand("w", {4, 3, 3, 3});
  m.init_rand("b", {4});
  m.init_rand("k", {4, 1, 1});
  m.node("Conv", "conv", {"x", "w", "b"}, {"c"});
  m.node("Relu", "relu", {"c"}, {"r"});
  m.node("Add", "add", {"r", "k"}, {"y"});
  m.node("Mul", "mul", {"y", "k"}, {"z"});
  return m;
}

TEST(ToFp16, OffByDefault) {
  Built b = build(conv_model(), false);
  EXPECT_EQ(b.detail, "");
  EXPECT_EQ(count_op(b, "Cast"), 0);
  EXPECT_EQ(b.dtypes["c"], DataType::kFloat32);
}

TEST(ToFp16, InsideHalfBoundaryFloat) {
  Built b = build(conv_model(), true);
  auto e = Engine::from_bytes(b.engine);
  EXPECT_EQ(e->inputs()[0].dtype, DataType::kFloat32);
  ASSERT_EQ(e->outputs().size(), 2u);
  EXPECT_EQ(e->outputs()[0].name, "y");
  EXPECT_EQ(e->outputs()[0].dtype, DataType::kFloat32);
  EXPECT_EQ(e->outputs()[1].dtype, DataType::kFloat32);
  EXPECT_EQ(b.dtypes["c"], DataType::kFloat16);
  EXPECT_EQ(b.dtypes["r"], DataType::kFloat16);
  // One cast in (x), one out per output; the shared constant k is converted once.
  EXPECT_EQ(count_op(b, "Cast"), 3);
  EXPECT_NE(b.detail.find("4 nodes in float16"), std::string::npos) << b.detail;
  EXPECT_NE(b.detail.find("3 constants converted"), std::string::npos) << b.detail;
}

TEST(ToFp16, SameNumbersToHalfPrecision) {
  const OnnxModel m = conv_model();
  Built h = build(m, true), f = build(m, false);
  const std::map<std::string, std::vector<float>> feed = {{"x", random_vec(108, 5)}};
  auto yh = run_engine(h.engine, feed, {"y", "z"}), yf = run_engine(f.engine, feed, {"y", "z"});
  for (const char* out : {"y", "z"}) {
    float scale = 0;
    for (float v : yf[out]) scale = std::max(scale, std::fabs(v));
    ASSERT_GT(scale, 0.f);
    for (size_t i = 0; i < yf[out].size(); ++i) EXPECT_NEAR(yh[out][i], yf[out][i], 2e-3 * scale) << out << " " << i;
  }
}

// ReduceSumSquare stays float32: its input is cast back, and its output is float32.
TEST(ToFp16, Float32OnlyOpKeepsFloat32) {
  OnnxModel m("rss");
  m.input("x", {2, 8});
  m.output("y");
  m.node("Relu", "relu", {"x"}, {"r"});
  m.node("ReduceSumSquare", "rss", {"r"}, {"y"});
  Built b = build(m, true);
  EXPECT_EQ(b.dtypes["r"], DataType::kFloat16);
  EXPECT_EQ(b.dtypes["y"], DataType::kFloat32);
  EXPECT_EQ(count_op(b, "Cast"), 2);  // x to half for Relu, r back to float for ReduceSumSquare
}

// A global pooling of a float32 tensor nothing has converted (here the graph input) pools in
// float32 and casts its small result; one whose input is already float16 pools in float16.
TEST(ToFp16, ReductionOfFloat32InputStaysFloat32) {
  OnnxModel m("gap");
  m.input("x", {2, 8, 4, 4});
  m.output("y");
  m.output("z");
  m.node("GlobalAveragePool", "pool_x", {"x"}, {"px"});
  m.node("Relu", "relu", {"px"}, {"y"});
  m.node("Neg", "neg", {"x"}, {"n"});
  m.node("GlobalMaxPool", "pool_n", {"n"}, {"z"});
  Built h = build(m, true), f = build(m, false);
  EXPECT_EQ(h.dtypes["px"], DataType::kFloat32);
  EXPECT_EQ(h.dtypes["n"], DataType::kFloat16);
  // relu, neg and pool_n (pool_x stays float32)
  EXPECT_TRUE(h.detail.find("3 nodes in float16") != std::string::npos) << h.detail;
  std::vector<float> x = random_vec(256, 3);
  for (float& v : x) v = Half::to_float(Half::from_float(v));
  const auto yh = run_engine(h.engine, {{"x", x}}, {"y", "z"}), yf = run_engine(f.engine, {{"x", x}}, {"y", "z"});
  for (size_t i = 0; i < yf.at("y").size(); ++i) EXPECT_NEAR(yh.at("y")[i], yf.at("y")[i], 1e-3) << i;
  EXPECT_EQ(yh.at("z"), yf.at("z"));  // maxima of float16 values are exact
}

// A ReduceSum with its axes as an input and keepdims 0 stays float32 too (the axes keep int64); a
// reduction that keeps every value (over an axis of size 1) is no smaller, so it goes float16.
TEST(ToFp16, ReductionWithAxesInputAndANonReducingOne) {
  OnnxModel m("rs");
  m.input("x", {2, 8, 4, 4});
  m.input("u", {2, 8, 1, 4});
  m.output("y");
  m.output("z");
  auto* axes = m.g()->add_initializer();
  axes->set_name("axes");
  axes->set_data_type(onnx::TensorProto::INT64);
  axes->add_dims(2);
  for (int64_t v : {2, 3}) axes->add_int64_data(v);
  attr_int(m.node("ReduceSum", "sum", {"x", "axes"}, {"s"}), "keepdims", 0);
  m.node("Relu", "relu", {"s"}, {"y"});
  attr_ints(m.node("ReduceMax", "max", {"u"}, {"mu"}), "axes", {2});
  m.node("Neg", "neg", {"mu"}, {"z"});
  Built h = build(m, true), f = build(m, false);
  EXPECT_EQ(h.dtypes["s"], DataType::kFloat32);
  EXPECT_EQ(h.dtypes["axes"], DataType::kInt64);
  EXPECT_EQ(h.dtypes["mu"], DataType::kFloat16);
  std::vector<float> x = random_vec(256, 4), u = random_vec(64, 5);
  for (std::vector<float>* v : {&x, &u})
    for (float& e : *v) e = Half::to_float(Half::from_float(e));
  const auto yh = run_engine(h.engine, {{"x", x}, {"u", u}}, {"y", "z"});
  const auto yf = run_engine(f.engine, {{"x", x}, {"u", u}}, {"y", "z"});
  ASSERT_EQ(yh.at("y").size(), 16u);
  for (size_t i = 0; i < 16; ++i) EXPECT_NEAR(yh.at("y")[i], yf.at("y")[i], 1e-2) << i;
  EXPECT_EQ(yh.at("z"), yf.at("z"));
}

// Resize's scales determine the output shape: they keep float32 while X becomes float16.
TEST(ToFp16, ShapeInputsKeepTheirType) {
  OnnxModel m("resize");
  m.input("x", {1, 1, 2, 2});
  m.output("y");
  auto* s = m.g()->add_initializer();
  s->set_name("scales");
  s->set_data_type(onnx::TensorProto::FLOAT);
  s->add_dims(4);
  for (float v : {1.f, 1.f, 2.f, 2.f}) s->add_float_data(v);
  m.node("Relu", "relu", {"x"}, {"r"});
  m.node("Resize", "resize", {"r", "", "scales"}, {"y"});
  Built b = build(m, true);
  EXPECT_EQ(b.dtypes["scales"], DataType::kFloat32);
  EXPECT_EQ(b.dtypes["r"], DataType::kFloat16);
  auto e = Engine::from_bytes(b.engine);
  EXPECT_EQ(e->outputs()[0].dtype, DataType::kFloat32);
  EXPECT_EQ(e->outputs()[0].shape, (std::vector<int64_t>{1, 1, 4, 4}));
}

// QuantizeLinear reads a float16 x without a Cast before it, and quantizes it exactly as the
// float32 engine quantizes the same float16-rounded values.
TEST(ToFp16, QuantizeLinearReadsFloat16) {
  OnnxModel m("q");
  m.input("x", {2, 64});
  m.output("y");
  auto* s = m.g()->add_initializer();
  s->set_name("s");
  s->set_data_type(onnx::TensorProto::FLOAT);
  s->add_float_data(0.01f);
  auto* z = m.g()->add_initializer();
  z->set_name("z");
  z->set_data_type(onnx::TensorProto::INT8);
  z->add_int32_data(0);
  m.node("Relu", "relu", {"x"}, {"r"});
  m.node("QuantizeLinear", "q", {"r", "s", "z"}, {"q8"});
  m.node("DequantizeLinear", "dq", {"q8", "s", "z"}, {"y"});
  Built h = build(m, true), f = build(m, false);
  EXPECT_EQ(h.dtypes["r"], DataType::kFloat16);
  EXPECT_EQ(count_op(h, "Cast"), 1);  // x to float16 only
  // Inputs already on float16's grid, so that the float32 engine sees the same numbers.
  std::vector<float> x = random_vec(128, 7);
  for (float& v : x) v = Half::to_float(Half::from_float(v * 2));
  const auto yh = run_engine(h.engine, {{"x", x}}, {"y"}), yf = run_engine(f.engine, {{"x", x}}, {"y"});
  EXPECT_EQ(yh.at("y"), yf.at("y"));
  int nonzero = 0;
  for (float v : yf.at("y")) nonzero += v != 0;
  EXPECT_GT(nonzero, 30);
}

// x [n, 16, 4, 4] -> GlobalAveragePool -> Flatten -> Gemm(w [10, 16], b) -> y: a classifier's
// head; with `second`, Gemm(w [16, 16], b) -> Gemm(w2 [8, 16]) -> y.
OnnxModel head_model(int64_t n, bool second, int64_t trans_b = 1) {
  OnnxModel m("head");
  m.input("x", {n, 16, 4, 4});
  m.output("y");
  const int64_t hidden = second ? 16 : 10;
  m.init_rand("w", trans_b ? I64s{hidden, 16} : I64s{16, hidden});
  m.init_rand("b", {hidden});
  m.node("GlobalAveragePool", "pool", {"x"}, {"p"});
  attr_int(m.node("Flatten", "flat", {"p"}, {"f"}), "axis", 1);
  auto* fc = m.node("Gemm", "fc", {"f", "w", "b"}, {second ? "h" : "y"});
  attr_int(fc, "transB", trans_b);
  if (second) {
    m.init_rand("w2", {8, 16});
    attr_int(m.node("Gemm", "fc2", {"h", "w2"}, {"y"}), "transB", 1);
  }
  return m;
}

void expect_close(const Built& h, const Built& f, int64_t n, uint32_t seed) {
  const std::vector<float> x = random_vec(static_cast<size_t>(n * 256), seed);
  const auto yh = run_engine(h.engine, {{"x", x}}, {"y"}), yf = run_engine(f.engine, {{"x", x}}, {"y"});
  ASSERT_EQ(yh.at("y").size(), yf.at("y").size());
  float scale = 0;
  for (float v : yf.at("y")) scale = std::max(scale, std::fabs(v));
  ASSERT_GT(scale, 0.f);
  for (size_t i = 0; i < yf.at("y").size(); ++i) EXPECT_NEAR(yh.at("y")[i], yf.at("y")[i], 2e-3 * scale) << i;
}

// Constants outside float16's range keep what the float32 graph relies on: F.normalize's epsilon
// (1e-12) stays above zero, so that a zero row divided by max(|x|, eps) is 0, not 0 / 0 = NaN (the
// zero-padded windows of Swin-V2 gave NaN logits); an additive mask of -1e9 stays finite, so that a
// row masked entirely is a plain Softmax, not NaN.
TEST(ToFp16, TinyAndHugeConstantsStayFiniteAndNonZero) {
  OnnxModel m("eps_mask");
  m.input("x", {2, 8});
  m.output("y");
  m.output("z");
  auto constant = [&](const std::string& name, const std::vector<float>& v) {
    auto* t = m.g()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(static_cast<int64_t>(v.size()));
    for (float f : v) t->add_float_data(f);
  };
  constant("eps", {1e-12f});
  constant("mask", {0, 0, 0, 0, -1e9f, -1e9f, -1e9f, -1e9f});
  m.node("Abs", "abs", {"x"}, {"a"});
  m.node("Max", "max", {"a", "eps"}, {"d"});
  m.node("Div", "div", {"x", "d"}, {"y"});
  m.node("Add", "add", {"x", "mask"}, {"s"});
  m.node("Softmax", "softmax", {"s"}, {"z"});
  Built h = build(m, true);
  std::vector<float> x = random_vec(16, 3);
  for (int i = 0; i < 8; ++i) x[i] = 0;  // a zero row
  const auto out = run_engine(h.engine, {{"x", x}}, {"y", "z"});
  for (size_t i = 0; i < 16; ++i) {
    ASSERT_TRUE(std::isfinite(out.at("y")[i])) << "y " << i;
    ASSERT_TRUE(std::isfinite(out.at("z")[i])) << "z " << i;
    const float sign = x[i] > 0 ? 1.f : x[i] < 0 ? -1.f : 0.f;
    EXPECT_NEAR(out.at("y")[i], sign, 1e-3) << i;  // x / |x|, and 0 for the zero row
  }
  EXPECT_NEAR(out.at("z")[0], 0.25f, 1e-3);  // the zero row: four equal logits left unmasked
  EXPECT_NEAR(out.at("z")[4], 0.f, 1e-6);
}

// The pooled float32 vector passes the Flatten as it is, and the Gemm reads it with float16
// weights: no Cast anywhere, float32 output, the float32 engine's numbers to float16 weights'
// accuracy.
TEST(ToFp16, ClassifierHeadTakesFloat16WeightsAndNoCasts) {
  const OnnxModel m = head_model(2, false);
  Built h = build(m, true), f = build(m, false);
  EXPECT_EQ(count_op(h, "Cast"), 0);
  EXPECT_EQ(count_op(h, "FusedGemm"), 1);
  EXPECT_EQ(count_op(h, "Gemm"), 0);
  EXPECT_EQ(h.dtypes["f"], DataType::kFloat32);
  EXPECT_EQ(h.dtypes["y"], DataType::kFloat32);
  int half_constants = 0;
  for (const auto& [name, t] : h.dtypes) half_constants += t == DataType::kFloat16;
  EXPECT_EQ(half_constants, 1);  // w's copy: b stays float32
  EXPECT_NE(h.detail.find("1 matrix-vector product with float16 weights"), std::string::npos) << h.detail;
  expect_close(h, f, 2, 11);
}

// The second product of the head reads the first one's float32 output as it is.
TEST(ToFp16, TwoProductsOfAHeadBothTakeFloat16Weights) {
  const OnnxModel m = head_model(1, true);
  Built h = build(m, true), f = build(m, false);
  EXPECT_EQ(count_op(h, "Cast"), 0);
  EXPECT_EQ(count_op(h, "FusedGemm"), 2);
  EXPECT_NE(h.detail.find("2 matrix-vector products"), std::string::npos) << h.detail;
  expect_close(h, f, 1, 12);
}

// Guards: more rows than a matrix-vector product has (9), B not transposed, and A a graph input
// (not float32 that the engine keeps): the Gemm computes in float16 between Casts as before.
TEST(ToFp16, LargeBatchUntransposedOrInputProductsStayFloat16) {
  for (const auto& [n, trans_b] : {std::pair<int64_t, int64_t>{9, 1}, {2, 0}}) {
    const OnnxModel m = head_model(n, false, trans_b);
    Built h = build(m, true), f = build(m, false);
    EXPECT_EQ(count_op(h, "FusedGemm"), 0) << n;
    EXPECT_EQ(count_op(h, "Gemm"), 1) << n;
    EXPECT_EQ(count_op(h, "Cast"), 2) << n;             // the pooled vector in, the output out
    EXPECT_EQ(h.dtypes["f"], DataType::kFloat32) << n;  // the Cast follows the Flatten
    expect_close(h, f, n, 13);
  }
  OnnxModel m("input");
  m.input("x", {1, 16});
  m.output("y");
  m.init_rand("w", {10, 16});
  attr_int(m.node("Gemm", "fc", {"x", "w"}, {"y"}), "transB", 1);
  Built h = build(m, true);
  EXPECT_EQ(count_op(h, "Gemm"), 1);
  EXPECT_EQ(count_op(h, "Cast"), 2);
}

// Other views pass kept float32 on too: a Reshape (its shape input stays int64) and a Squeeze.
TEST(ToFp16, ReshapeAndSqueezeOfAPoolFeedTheProduct) {
  for (const bool reshape : {true, false}) {
    OnnxModel m("views");
    m.input("x", {2, 16, 4, 4});
    m.output("y");
    m.init_rand("w", {10, 16});
    m.node("GlobalAveragePool", "pool", {"x"}, {"p"});
    auto* axes = m.g()->add_initializer();
    axes->set_name("axes");
    axes->set_data_type(onnx::TensorProto::INT64);
    axes->add_dims(2);
    for (int64_t v : reshape ? std::vector<int64_t>{2, 16} : std::vector<int64_t>{2, 3}) axes->add_int64_data(v);
    m.node(reshape ? "Reshape" : "Squeeze", "view", {"p", "axes"}, {"f"});
    attr_int(m.node("Gemm", "fc", {"f", "w"}, {"y"}), "transB", 1);
    Built h = build(m, true), f = build(m, false);
    EXPECT_EQ(count_op(h, "Cast"), 0) << reshape;
    EXPECT_EQ(count_op(h, "FusedGemm"), 1) << reshape;
    EXPECT_EQ(h.dtypes["axes"], DataType::kInt64);
    expect_close(h, f, 2, 14);
  }
}

// A kept value that is also a graph output (a caller may bind it anywhere) is not read with
// float16 weights: its view goes float16 for the Gemm as before.
TEST(ToFp16, PooledOutputOfTheGraphKeepsTheFloat16Product) {
  OnnxModel m = head_model(1, false);
  m.output("f");
  Built h = build(m, true);
  EXPECT_EQ(count_op(h, "FusedGemm"), 0);
  EXPECT_EQ(count_op(h, "Gemm"), 1);
  EXPECT_EQ(h.dtypes["f"], DataType::kFloat32);
  EXPECT_EQ(count_op(h, "Cast"), 2);
}

// K not a multiple of 8 (12 channels): no float16 weights.
TEST(ToFp16, OddKStaysFloat16) {
  OnnxModel m("odd");
  m.input("x", {1, 12, 4, 4});
  m.output("y");
  m.init_rand("w", {10, 12});
  m.node("GlobalAveragePool", "pool", {"x"}, {"p"});
  attr_int(m.node("Flatten", "flat", {"p"}, {"f"}), "axis", 1);
  attr_int(m.node("Gemm", "fc", {"f", "w"}, {"y"}), "transB", 1);
  Built h = build(m, true);
  EXPECT_EQ(count_op(h, "FusedGemm"), 0);
  EXPECT_EQ(count_op(h, "Cast"), 2);
}

// FusedGemm's mixed form: A float32 with B float16 gives float32; the other way round, or a
// float16 C under a float32 A, is refused.
TEST(ToFp16, MixedFusedGemmTypes) {
  const int64_t a_shape[] = {2, 16}, b_shape[] = {10, 16}, c_shape[] = {10};
  auto view = [](DataType t, std::span<const int64_t> s) {
    TensorView v;
    v.dtype = t;
    v.shape = s;
    return v;
  };
  FusedGemmAttrs a;
  a.transB = 1;
  const Attrs attrs{a};
  std::vector<TensorView> in = {view(DataType::kFloat32, a_shape), view(DataType::kFloat16, b_shape),
                                view(DataType::kFloat32, c_shape)};
  const std::vector<OutputType> y = infer_shapes(OpKind::kFusedGemm, attrs, in, 1);
  EXPECT_EQ(y[0].dtype, DataType::kFloat32);
  EXPECT_EQ(y[0].shape, (std::vector<int64_t>{2, 10}));
  in[2].dtype = DataType::kFloat16;
  EXPECT_THROW(infer_shapes(OpKind::kFusedGemm, attrs, in, 1), Error);
  in = {view(DataType::kFloat16, a_shape), view(DataType::kFloat32, b_shape)};
  EXPECT_THROW(infer_shapes(OpKind::kFusedGemm, attrs, in, 1), Error);
  GemmAttrs plain;
  plain.transB = 1;
  in = {view(DataType::kFloat32, a_shape), view(DataType::kFloat16, b_shape)};
  EXPECT_THROW(infer_shapes(OpKind::kGemm, Attrs{plain}, in, 1), Error);  // ONNX's Gemm keeps one type
}

}  // namespace
}  // namespace kiln::passes
