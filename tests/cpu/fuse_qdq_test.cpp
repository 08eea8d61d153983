// Tests for the fuse-qdq pass on explicitly quantized models built here (the form onnxruntime's
// quantizer writes): Conv / MatMul / Gemm between Q/DQ nodes become kiln.QConv / kiln.QMatMul
// with bias, activation and requantization fused; Q moves above MaxPool; DQ -> op -> Q and
// Q(DQ(x)) pairs disappear; leftover constant DQs fold. One negative test per guard, and each
// rewrite computes what the unfused Q/DQ graph computes (to one quantization step: the fused
// kernels sum exactly in integers where the Q/DQ graph sums dequantized floats).
#include <cmath>

#include "int8_test_util.h"

namespace kiln::passes {

using namespace kiln::build;  // build_engine, BuildOptions: the passes run inside a build
namespace {

using namespace kiln::test;

constexpr float kSy = 0.05f;  // the output scale of the models below

std::vector<int32_t> random_ints(size_t n, int lo, int hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> u(lo, hi);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = u(rng);
  return v;
}

// x -> Q -> DQ, named "xd"; the scale "sx" and zero point "zx" (int8).
void quantize_input(OnnxModel& m, const std::vector<int64_t>& dims, float sx = 0.02f, int zx = 3) {
  m.input("x", dims);
  init_floats(m, "sx", {}, {sx});
  init_ints(m, "zx", {}, {zx}, onnx::TensorProto::INT8);
  m.node("QuantizeLinear", "qx", {"x", "sx", "zx"}, {"xq"});
  m.node("DequantizeLinear", "dqx", {"xq", "sx", "zx"}, {"xd"});
}

// wq [dims] int8 with per-channel scales along `axis` -> DQ -> "wd".
void dequantized_weights(OnnxModel& m, const std::vector<int64_t>& dims, int64_t axis) {
  size_t n = 1;
  for (int64_t d : dims) n *= static_cast<size_t>(d);
  const int64_t c = dims[static_cast<size_t>(axis)];
  init_ints(m, "wq", dims, random_ints(n, -127, 127, 5), onnx::TensorProto::INT8);
  std::vector<float> s(static_cast<size_t>(c));
  for (size_t i = 0; i < s.size(); ++i) s[i] = 0.002f + 0.001f * static_cast<float>(i);
  init_floats(m, "sw", {c}, s);
  attr_int(m.node("DequantizeLinear", "dqw", {"wq", "sw"}, {"wd"}), "axis", axis);
}

// "v" -> Q(kSy, zy) -> DQ -> "y".
void quantize_output(OnnxModel& m, const std::string& v, int zy = -2) {
  init_floats(m, "sy", {}, {kSy});
  init_ints(m, "zy", {}, {zy}, onnx::TensorProto::INT8);
  m.node("QuantizeLinear", "qy", {v, "sy", "zy"}, {"yq"});
  m.node("DequantizeLinear", "dqy", {"yq", "sy", "zy"}, {"y"});
  m.output("y");
}

// x[1,3,6,6] -> Q/DQ -> Conv(DQ(w), b) -> Relu -> Q/DQ -> y
OnnxModel conv_model() {
  OnnxModel m("qconv");
  quantize_input(m, {1, 3, 6, 6});
  dequantized_weights(m, {4, 3, 3, 3}, 0);
  m.init_rand("b", {4});
  attr_ints(m.node("Conv", "conv", {"xd", "wd", "b"}, {"c"}), "pads", {1, 1, 1, 1});
  m.node("Relu", "relu", {"c"}, {"r"});
  quantize_output(m, "r");
  return m;
}

BuildOptions unfused() {
  BuildOptions o;
  o.disabled_passes = {"fuse-qdq"};
  return o;
}

// The fused and the unfused engine agree to one output step (or to float rounding: float_out).
void expect_parity(const OnnxModel& m, size_t n_in, bool float_out = false) {
  const Built f = build_model(m, BuildOptions{}), u = build_model(m, unfused());
  const std::map<std::string, std::vector<float>> feed = {{"x", random_vec(n_in, 3)}};
  auto yf = run_engine(f.engine, feed, {"y"}), yu = run_engine(u.engine, feed, {"y"});
  ASSERT_EQ(yf["y"].size(), yu["y"].size());
  for (size_t i = 0; i < yf["y"].size(); ++i)
    EXPECT_NEAR(yf["y"][i], yu["y"][i], float_out ? 1e-4 * (1 + std::fabs(yu["y"][i])) : kSy * 1.001) << i;
}

TEST(FuseQdq, ConvBiasReluRequantizeBecomeOneStep) {
  const Built b = build_model(conv_model(), BuildOptions{});
  EXPECT_EQ(b.ops, (std::vector<std::string>{"QuantizeLinear", "kiln.QConv", "DequantizeLinear"}));
  EXPECT_TRUE(has(b.details.at("fuse-qdq"), "1 kiln.QConv")) << b.details.at("fuse-qdq");
  expect_parity(conv_model(), 108);
}

TEST(FuseQdq, MatMulAddBecomeOneStepWithBias) {
  OnnxModel m("qmm");
  quantize_input(m, {2, 5, 8});
  dequantized_weights(m, {8, 6}, 1);
  m.init_rand("bias", {6});
  m.node("MatMul", "mm", {"xd", "wd"}, {"p"});
  m.node("Add", "add", {"bias", "p"}, {"a"});
  quantize_output(m, "a");
  const Built b = build_model(m, BuildOptions{});
  EXPECT_EQ(b.ops, (std::vector<std::string>{"QuantizeLinear", "kiln.QMatMul", "DequantizeLinear"}));
  expect_parity(m, 80);
}

TEST(FuseQdq, GemmAlphaBetaTransBWithFloatOutput) {
  OnnxModel m("qgemm");
  quantize_input(m, {3, 8});
  dequantized_weights(m, {6, 8}, 0);
  m.init_rand("c", {6});
  auto* g = m.node("Gemm", "fc", {"xd", "wd", "c"}, {"y"});
  attr_int(g, "transB", 1);
  attr_float(g, "alpha", 0.5f);
  attr_float(g, "beta", 2.0f);
  m.output("y");
  const Built b = build_model(m, BuildOptions{});
  EXPECT_EQ(b.ops, (std::vector<std::string>{"QuantizeLinear", "kiln.QMatMul"}));
  expect_parity(m, 24, true);
}

// ---- guards: the nodes stay as they are ----------------------------------------------------------

TEST(FuseQdq, FloatWeightsAreNotFused) {
  OnnxModel m("floatw");
  quantize_input(m, {1, 3, 6, 6});
  m.init_rand("w", {4, 3, 3, 3});
  m.node("Conv", "conv", {"xd", "w"}, {"c"});
  quantize_output(m, "c");
  const Built b = build_model(m, BuildOptions{});
  EXPECT_EQ(b.count("Conv"), 1);
  EXPECT_EQ(b.count("kiln.QConv"), 0);
}

TEST(FuseQdq, PerChannelActivationScaleIsNotFused) {
  OnnxModel m("axis");
  m.input("x", {1, 3, 6, 6});
  init_floats(m, "sx", {3}, {0.02f, 0.03f, 0.04f});
  m.node("QuantizeLinear", "qx", {"x", "sx"}, {"xq"});
  m.node("DequantizeLinear", "dqx", {"xq", "sx"}, {"xd"});
  dequantized_weights(m, {4, 3, 3, 3}, 0);
  m.node("Conv", "conv", {"xd", "wd"}, {"c"});
  quantize_output(m, "c");
  const Built b = build_model(m, BuildOptions{});
  EXPECT_EQ(b.count("kiln.QConv"), 0);
}

// The conv's output is also read by an Add: the activation and Q cannot be absorbed (they would be
// computed twice), so the conv fuses alone with a float output.
TEST(FuseQdq, SharedConvOutputKeepsActivationApart) {
  OnnxModel m = conv_model();
  m.node("Add", "add", {"c", "c"}, {"z"});
  m.output("z");
  const Built b = build_model(m, BuildOptions{});
  EXPECT_EQ(b.count("kiln.QConv"), 1);
  EXPECT_EQ(b.count("Relu"), 1);
  EXPECT_EQ(b.count("QuantizeLinear"), 2);
}

TEST(FuseQdq, ConvOutputThatIsAGraphOutputKeepsActivationApart) {
  OnnxModel m = conv_model();
  m.output("c");
  const Built b = build_model(m, BuildOptions{});
  EXPECT_EQ(b.count("kiln.QConv"), 1);
  EXPECT_EQ(b.count("Relu"), 1);
}

TEST(FuseQdq, GemmWithTransAIsNotFused) {
  OnnxModel m("ta");
  quantize_input(m, {8, 3});
  dequantized_weights(m, {8, 6}, 1);
  attr_int(m.node("Gemm", "fc", {"xd", "wd"}, {"y"}), "transA", 1);
  m.output("y");
  EXPECT_EQ(build_model(m, BuildOptions{}).count("kiln.QMatMul"), 0);
}

TEST(FuseQdq, GemmWithMatrixBiasIsNotFused) {
  OnnxModel m("cm");
  quantize_input(m, {3, 8});
  dequantized_weights(m, {8, 6}, 1);
  m.init_rand("c", {3, 6});
  m.node("Gemm", "fc", {"xd", "wd", "c"}, {"y"});
  m.output("y");
  EXPECT_EQ(build_model(m, BuildOptions{}).count("kiln.QMatMul"), 0);
}

// ---- moving and removing Q/DQ ----------------------------------------------------------------

// Conv -> Relu -> MaxPool -> Q: the Q moves above the MaxPool, so the conv requantizes and the
// MaxPool runs on int8.
OnnxModel pool_model(bool relu_read_twice) {
  OnnxModel m("pool");
  quantize_input(m, {1, 3, 6, 6});
  dequantized_weights(m, {4, 3, 3, 3}, 0);
  attr_ints(m.node("Conv", "conv", {"xd", "wd"}, {"c"}), "pads", {1, 1, 1, 1});
  m.node("Relu", "relu", {"c"}, {"r"});
  auto* p = m.node("MaxPool", "pool", {"r"}, {"p"});
  attr_ints(p, "kernel_shape", {2, 2});
  attr_ints(p, "strides", {2, 2});
  quantize_output(m, "p");
  if (relu_read_twice) {
    m.node("Neg", "neg", {"r"}, {"z"});
    m.output("z");
  }
  return m;
}

TEST(FuseQdq, QuantizeMovesAboveMaxPool) {
  const Built b = build_model(pool_model(false), BuildOptions{});
  EXPECT_EQ(b.ops, (std::vector<std::string>{"QuantizeLinear", "kiln.QConv", "MaxPool", "DequantizeLinear"}));
  for (const graph::Node& n : b.graph.nodes)
    if (n.kind == OpKind::kMaxPool) {
      EXPECT_EQ(b.graph.value(n.inputs[0]).dtype, DataType::kInt8);
    }
  EXPECT_TRUE(has(b.details.at("fuse-qdq"), "1 Q moved up")) << b.details.at("fuse-qdq");
  expect_parity(pool_model(false), 108);
}

TEST(FuseQdq, QuantizeStaysBelowAnOpWhoseInputIsReadTwice) {
  const Built b = build_model(pool_model(true), BuildOptions{});
  for (const graph::Node& n : b.graph.nodes)
    if (n.kind == OpKind::kMaxPool) {
      EXPECT_EQ(b.graph.value(n.inputs[0]).dtype, DataType::kFloat32);
    }
}

// A float Conv (no DQ on its input: no INT8 kernel) -> Relu -> MaxPool -> Q: the Q cannot fuse into
// the Conv, so it stays below a strided MaxPool, where it quantizes a quarter of the values.
OnnxModel float_stem_model(int64_t stride) {
  OnnxModel m("stem");
  m.input("x", {1, 3, 8, 8});
  m.init_rand("w", {4, 3, 3, 3});
  attr_ints(m.node("Conv", "conv", {"x", "w"}, {"c"}), "pads", {1, 1, 1, 1});
  m.node("Relu", "relu", {"c"}, {"r"});
  auto* p = m.node("MaxPool", "pool", {"r"}, {"p"});
  attr_ints(p, "kernel_shape", {3, 3});
  attr_ints(p, "strides", {stride, stride});
  attr_ints(p, "pads", {1, 1, 1, 1});
  quantize_output(m, "p");
  return m;
}

TEST(FuseQdq, LoneQuantizeStaysBelowStridedMaxPool) {
  const Built b = build_model(float_stem_model(2), BuildOptions{});
  const std::vector<std::string>& ops = b.ops;
  const auto pool = std::find(ops.begin(), ops.end(), "MaxPool");
  const auto q = std::find(ops.begin(), ops.end(), "QuantizeLinear");
  ASSERT_TRUE(pool != ops.end() && q != ops.end());
  EXPECT_LT(pool - ops.begin(), q - ops.begin());
  for (const graph::Node& n : b.graph.nodes)
    if (n.kind == OpKind::kMaxPool) {
      EXPECT_EQ(b.graph.value(n.inputs[0]).dtype, DataType::kFloat32);
    }
  EXPECT_TRUE(has(b.details.at("fuse-qdq"), "1 Q moved below a MaxPool")) << b.details.at("fuse-qdq");
  expect_parity(float_stem_model(2), 192);
}

TEST(FuseQdq, LoneQuantizeMovesAboveUnstridedMaxPool) {
  const Built b = build_model(float_stem_model(1), BuildOptions{});
  for (const graph::Node& n : b.graph.nodes)
    if (n.kind == OpKind::kMaxPool) {
      EXPECT_EQ(b.graph.value(n.inputs[0]).dtype, DataType::kInt8);
    }
  expect_parity(float_stem_model(1), 192);
}

// A QConv with a residual Add and Relu before a strided MaxPool -> Q: the Q stays above the pool,
// where fuse-qresidual makes the block write int8 (step 5 is only for float Convs).
OnnxModel residual_pool_model() {
  OnnxModel m("respool");
  quantize_input(m, {1, 3, 6, 6});
  dequantized_weights(m, {3, 3, 3, 3}, 0);
  attr_ints(m.node("Conv", "conv", {"xd", "wd"}, {"c"}), "pads", {1, 1, 1, 1});
  m.node("Add", "add", {"c", "xd"}, {"s"});
  m.node("Relu", "relu", {"s"}, {"r"});
  auto* p = m.node("MaxPool", "pool", {"r"}, {"p"});
  attr_ints(p, "kernel_shape", {2, 2});
  attr_ints(p, "strides", {2, 2});
  quantize_output(m, "p");
  return m;
}

TEST(FuseQdq, QuantizeAfterQConvResidualStaysAboveStridedMaxPool) {
  const Built b = build_model(residual_pool_model(), BuildOptions{});
  for (const graph::Node& n : b.graph.nodes) {
    if (n.kind == OpKind::kMaxPool) {
      EXPECT_EQ(b.graph.value(n.inputs[0]).dtype, DataType::kInt8);
    }
  }
  EXPECT_FALSE(has(b.details.at("fuse-qdq"), "below a MaxPool")) << b.details.at("fuse-qdq");
  expect_parity(residual_pool_model(), 108);
}

OnnxModel dq_pool_q_model(float s2) {
  OnnxModel m("dqpq");
  quantize_input(m, {1, 2, 4, 4});
  auto* p = m.node("MaxPool", "pool", {"xd"}, {"p"});
  attr_ints(p, "kernel_shape", {2, 2});
  init_floats(m, "s2", {}, {s2});
  m.node("QuantizeLinear", "q2", {"p", "s2", "zx"}, {"pq"});
  m.node("DequantizeLinear", "dq2", {"pq", "s2", "zx"}, {"y"});
  m.output("y");
  return m;
}

TEST(FuseQdq, DequantizeOpQuantizeWithSameScaleRunsOnInt8) {
  const Built b = build_model(dq_pool_q_model(0.02f), BuildOptions{});
  EXPECT_EQ(b.ops, (std::vector<std::string>{"QuantizeLinear", "MaxPool", "DequantizeLinear"}));
  expect_parity(dq_pool_q_model(0.02f), 32);
}

TEST(FuseQdq, DequantizeOpQuantizeWithAnotherScaleStays) {
  const Built b = build_model(dq_pool_q_model(0.03f), BuildOptions{});
  EXPECT_EQ(b.count("QuantizeLinear"), 2);
  EXPECT_EQ(b.count("DequantizeLinear"), 2);
}

TEST(FuseQdq, QuantizeOfDequantizeWithSameParametersCancels) {
  OnnxModel m("cancel");
  quantize_input(m, {2, 3});
  m.node("QuantizeLinear", "q2", {"xd", "sx", "zx"}, {"xq2"});
  m.node("DequantizeLinear", "dq2", {"xq2", "sx", "zx"}, {"y"});
  m.output("y");
  const Built b = build_model(m, BuildOptions{});
  EXPECT_EQ(b.ops, (std::vector<std::string>{"QuantizeLinear", "DequantizeLinear"}));
}

// Weights dequantized for an op without an INT8 kernel fold into a float constant.
TEST(FuseQdq, LeftoverConstantDequantizeFolds) {
  OnnxModel m("fold");
  m.input("x", {8, 6});
  dequantized_weights(m, {8, 6}, 1);
  m.node("Add", "add", {"x", "wd"}, {"y"});
  m.output("y");
  const Built b = build_model(m, BuildOptions{});
  EXPECT_EQ(b.ops, (std::vector<std::string>{"Add"}));
  EXPECT_TRUE(has(b.details.at("fuse-qdq"), "1 constant DQ folded")) << b.details.at("fuse-qdq");
  expect_parity(m, 48, true);
}

}  // namespace
}  // namespace kiln::passes
