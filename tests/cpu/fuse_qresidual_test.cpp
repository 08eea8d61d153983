// Tests for the fuse-qresidual pass: kiln.QConv -> Add(residual) [-> Relu] -> QuantizeLinear
// becomes one kiln.QConv reading the residual in int8. A calibrated two-block residual network
// (--int8) fuses both blocks (the first residual through its QuantizeLinear, the second through the
// DequantizeLinear the first rewrite leaves) and stays within quantization tolerance of the
// unfused engine; an explicit Q/DQ block whose residual is a DQ is bit-exact with the unfused
// engine (the same float32 operations in the same order), as is a float32 residual without a
// quantized form. Negative tests for the guards a model meets (two readers, graph output, an
// activation before the Add, a broadcasting Add), and --disable-pass. A shortcut's producer left
// with its QuantizeLinear as its only reader takes that Q, unless the shortcut is a graph output.
#include <cmath>
#include <functional>

#include "int8_test_util.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {

using namespace kiln::build;  // build_engine, BuildOptions: the passes run inside a build
namespace {

using namespace kiln::test;

// x[1,4,8,8] -> conv0 -> relu0 -> h0, then two residual blocks
//   conv_a -> relu -> conv_b -> Add(conv_b, input) -> relu
// (the second with the Add's operands swapped), then a 1x1 conv -> y. r2 (the second block's
// output) is a graph output too.
OnnxModel two_blocks() {
  OnnxModel m("resnet");
  m.input("x", {1, 4, 8, 8});
  m.output("y");
  m.output("r2");
  m.init_rand("w0", {8, 4, 3, 3}, -0.3f, 0.3f);
  m.init_rand("b0", {8}, -0.1f, 0.1f);
  attr_ints(m.node("Conv", "conv0", {"x", "w0", "b0"}, {"c0"}), "pads", {1, 1, 1, 1});
  m.node("Relu", "relu0", {"c0"}, {"h0"});
  std::string in = "h0";
  for (int b : {1, 2}) {
    const std::string k = std::to_string(b);
    m.init_rand("wa" + k, {8, 8, 3, 3}, -0.2f, 0.2f);
    m.init_rand("wb" + k, {8, 8, 3, 3}, -0.2f, 0.2f);
    m.init_rand("bb" + k, {8}, -0.1f, 0.1f);
    attr_ints(m.node("Conv", "conv" + k + "a", {in, "wa" + k}, {"ca" + k}), "pads", {1, 1, 1, 1});
    m.node("Relu", "relu" + k + "a", {"ca" + k}, {"ra" + k});
    attr_ints(m.node("Conv", "conv" + k + "b", {"ra" + k, "wb" + k, "bb" + k}, {"cb" + k}), "pads", {1, 1, 1, 1});
    if (b == 1)
      m.node("Add", "add" + k, {"cb" + k, in}, {"s" + k});
    else
      m.node("Add", "add" + k, {in, "cb" + k}, {"s" + k});
    m.node("Relu", "relu" + k, {"s" + k}, {"r" + k});
    in = "r" + k;
  }
  m.init_rand("w3", {3, 8, 1, 1}, -0.3f, 0.3f);
  m.node("Conv", "conv3", {"r2", "w3"}, {"y"});
  return m;
}

BuildOptions int8_options(const TempDir& dir, std::vector<std::string> disabled = {}) {
  BuildOptions o;
  o.int8 = true;
  o.force_int8 = true;  // the INT8 engine, whether or not it is faster here
  o.calib.data = dir / "calib";
  write_batches(dir.path() / "calib", 3, {1, 4, 8, 8}, -1.f, 1.f);
  o.disabled_passes = std::move(disabled);
  return o;
}

std::vector<StepInfo> steps(const Built& b) { return Engine::from_bytes(b.engine)->summary().steps; }

// 1 if the kiln.QConv named `name` writes int8 (it quantizes in its epilogue), 0 if it writes
// float, -1 if there is none.
int int8_output_of(const Built& b, const std::string& name) {
  for (const graph::Node& n : b.graph.nodes)
    if (n.kind == OpKind::kQConv && n.name == name)
      return has_input(n, 7) && b.graph.value(n.outputs[0]).dtype == DataType::kInt8 ? 1 : 0;
  return -1;
}

TEST(FuseQresidual, BothBlocksOfACalibratedResidualNetFuse) {
  TempDir dir;
  const Built f = build_model(two_blocks(), int8_options(dir));
  const Built u = build_model(two_blocks(), int8_options(dir, {"fuse-qresidual"}));
  EXPECT_EQ(u.count("Add"), 2);
  EXPECT_EQ(f.count("Add"), 0);
  EXPECT_EQ(f.count("Relu"), 0);
  // Per block the Add, the Relu and the QuantizeLinear go. The graph output r2 is read from a DQ
  // of the int8 output; the DQ the first rewrite gives the second block's Add goes when that Add
  // is fused (its z is the int8 tensor), so no other DQ remains.
  EXPECT_EQ(u.count("DequantizeLinear"), 0);
  EXPECT_EQ(f.count("DequantizeLinear"), 1);
  // conv0's output h0, the first block's shortcut, is left with one reader, the QuantizeLinear
  // conv1a reads: that Q moves into conv0, which then writes int8.
  EXPECT_EQ(f.ops.size() + 6, u.ops.size());
  EXPECT_TRUE(has(f.details.at("fuse-qresidual"), "2 residual Add(s) into kiln.QConv, 2 with Relu"))
      << f.details.at("fuse-qresidual");
  EXPECT_TRUE(has(f.details.at("fuse-qresidual"), "1 QuantizeLinear into the kiln.QConv"))
      << f.details.at("fuse-qresidual");
  EXPECT_EQ(int8_output_of(f, "conv0"), 1);
  EXPECT_EQ(int8_output_of(u, "conv0"), 0);
  int named = 0;
  for (const StepInfo& s : steps(f))
    named += s.op == "kiln.QConv" && (s.name == "conv1b + add1 + relu1" || s.name == "conv2b + add2 + relu2");
  EXPECT_EQ(named, 2);
  // The residual is used in its quantized form: within a few quantization steps of the unfused engine.
  const std::map<std::string, std::vector<float>> feed = {{"x", random_vec(256, 3)}};
  auto yf = run_engine(f.engine, feed, {"y", "r2"}), yu = run_engine(u.engine, feed, {"y", "r2"});
  ASSERT_EQ(yf["r2"].size(), 512u);
  EXPECT_LT(rel_error(yf["r2"], yu["r2"]), 0.05);
  EXPECT_LT(rel_error(yf["y"], yu["y"]), 0.05);
}

// ResNet's downsampling block: the shortcut is a convolution too, x -> conv_d -> d, and the block
// ends Add(cb, d) -> Relu. quantize-int8 quantizes d (the Add's operand later in node order) at its
// producer, so conv_d writes int8 and conv_b, left with a float output, reads it as an int8
// residual, a quarter of float32's bytes.
OnnxModel downsampling_block(bool shortcut_is_output = false) {
  OnnxModel m("down");
  m.input("x", {1, 4, 8, 8});
  m.output("y");
  if (shortcut_is_output) m.output("d");
  m.init_rand("wa", {8, 4, 3, 3}, -0.3f, 0.3f);
  m.init_rand("wb", {8, 8, 3, 3}, -0.2f, 0.2f);
  m.init_rand("wd", {8, 4, 1, 1}, -0.5f, 0.5f);
  m.init_rand("wy", {3, 8, 1, 1}, -0.3f, 0.3f);
  attr_ints(m.node("Conv", "conv_a", {"x", "wa"}, {"ca"}), "pads", {1, 1, 1, 1});
  m.node("Relu", "relu_a", {"ca"}, {"ra"});
  attr_ints(m.node("Conv", "conv_b", {"ra", "wb"}, {"cb"}), "pads", {1, 1, 1, 1});
  m.node("Conv", "conv_d", {"x", "wd"}, {"d"});
  m.node("Add", "add", {"cb", "d"}, {"s"});
  m.node("Relu", "relu", {"s"}, {"r"});
  m.node("Conv", "conv_y", {"r", "wy"}, {"y"});
  return m;
}

// The kiln.QConvs of b that read a residual z of type `dtype`.
int residuals_of(const Built& b, DataType dtype) {
  int n = 0;
  for (const graph::Node& node : b.graph.nodes)
    n += node.kind == OpKind::kQConv && has_input(node, 9) && b.graph.value(node.inputs[9]).dtype == dtype;
  return n;
}

TEST(FuseQresidual, DownsamplingShortcutIsReadInInt8) {
  TempDir dir;
  const Built f = build_model(downsampling_block(), int8_options(dir));
  EXPECT_EQ(f.count("Add"), 0);
  EXPECT_TRUE(has(f.details.at("quantize-int8"), "4 nodes quantized, 4 activation ranges"))
      << f.details.at("quantize-int8");
  EXPECT_EQ(residuals_of(f, DataType::kInt8), 1);
  int int8_shortcuts = 0;
  for (const graph::Node& n : f.graph.nodes)
    int8_shortcuts += n.kind == OpKind::kQConv && n.name == "conv_d" && f.graph.value(n.outputs[0]).dtype == DataType::kInt8;
  EXPECT_EQ(int8_shortcuts, 1);
  // Within a few quantization steps of the unfused INT8 engine, and within this small random
  // network's INT8 error (0.076 with or without the shortcut quantized) of the float engine.
  const Built u = build_model(downsampling_block(), int8_options(dir, {"fuse-qresidual"}));
  const Built ref = build_model(downsampling_block(), BuildOptions{});
  const std::map<std::string, std::vector<float>> feed = {{"x", random_vec(256, 5)}};
  auto yf = run_engine(f.engine, feed, {"y"}), yu = run_engine(u.engine, feed, {"y"}),
       yr = run_engine(ref.engine, feed, {"y"});
  EXPECT_LT(rel_error(yf["y"], yu["y"]), 0.05);
  EXPECT_LT(rel_error(yf["y"], yr["y"]), 0.1);
}

// ResNet's last block: nothing quantizes the block's output (a GlobalAveragePool reads it), so the
// fused kiln.QConv writes it in float32; the Add and the Relu go all the same.
TEST(FuseQresidual, LastBlockWithoutQuantizeLinearWritesFloat) {
  OnnxModel m("last_block");
  m.input("x", {1, 4, 8, 8});
  m.output("y");
  m.init_rand("w0", {8, 4, 3, 3}, -0.3f, 0.3f);
  m.init_rand("wa", {8, 8, 3, 3}, -0.2f, 0.2f);
  m.init_rand("wb", {8, 8, 3, 3}, -0.2f, 0.2f);
  attr_ints(m.node("Conv", "conv0", {"x", "w0"}, {"c0"}), "pads", {1, 1, 1, 1});
  m.node("Relu", "relu0", {"c0"}, {"h0"});
  attr_ints(m.node("Conv", "conv_a", {"h0", "wa"}, {"ca"}), "pads", {1, 1, 1, 1});
  m.node("Relu", "relu_a", {"ca"}, {"ra"});
  attr_ints(m.node("Conv", "conv_b", {"ra", "wb"}, {"cb"}), "pads", {1, 1, 1, 1});
  m.node("Add", "add", {"cb", "h0"}, {"s"});
  m.node("Relu", "relu", {"s"}, {"r"});
  m.node("GlobalAveragePool", "pool", {"r"}, {"y"});
  TempDir dir;
  const Built f = build_model(m, int8_options(dir));
  const Built u = build_model(m, int8_options(dir, {"fuse-qresidual"}));
  EXPECT_EQ(u.count("Add"), 1);
  EXPECT_EQ(f.count("Add"), 0);
  EXPECT_EQ(f.count("Relu"), 0);
  EXPECT_TRUE(has(f.details.at("fuse-qresidual"), "1 residual Add(s) into kiln.QConv, 1 with Relu"))
      << f.details.at("fuse-qresidual");
  int float_out = 0;
  for (const graph::Node& n : f.graph.nodes)
    float_out += n.kind == OpKind::kQConv && n.name == "conv_b" && n.inputs.size() > 9 &&
                 f.graph.value(n.outputs[0]).dtype == DataType::kFloat32 && !has_input(n, 7);
  EXPECT_EQ(float_out, 1);
  const std::map<std::string, std::vector<float>> feed = {{"x", random_vec(256, 7)}};
  auto yf = run_engine(f.engine, feed, {"y"}), yu = run_engine(u.engine, feed, {"y"});
  EXPECT_LT(rel_error(yf["y"], yu["y"]), 0.05);
}

// The shortcut has another reader (here it is a graph output too): quantize-int8 leaves it in float
// (its readers expect the float value), so the block reads it as a float32 residual.
TEST(FuseQresidual, ShortcutWithAnotherReaderStaysFloat) {
  TempDir dir;
  const Built f = build_model(downsampling_block(true), int8_options(dir));
  EXPECT_EQ(f.count("Add"), 0);
  EXPECT_TRUE(has(f.details.at("quantize-int8"), "4 nodes quantized, 3 activation ranges"))
      << f.details.at("quantize-int8");
  EXPECT_EQ(residuals_of(f, DataType::kFloat32), 1);
}

// The blocks fuse, but conv0 keeps writing float and its QuantizeLinear stays: h0's float value
// is needed.
void expect_shortcut_keeps_its_quantizer(const OnnxModel& m) {
  TempDir dir;
  const Built f = build_model(m, int8_options(dir));
  EXPECT_EQ(f.count("Add"), 0);
  EXPECT_TRUE(has(f.details.at("fuse-qresidual"), "0 QuantizeLinear into")) << f.details.at("fuse-qresidual");
  EXPECT_EQ(int8_output_of(f, "conv0"), 0);
}

// The shortcut h0 is a graph output as well.
TEST(FuseQresidual, ShortcutThatIsAGraphOutputKeepsItsQuantizeLinear) {
  OnnxModel m = two_blocks();
  m.output("h0");
  expect_shortcut_keeps_its_quantizer(m);
}

// The shortcut h0 has a float reader besides its QuantizeLinear (a Neg).
TEST(FuseQresidual, ShortcutWithAFloatReaderKeepsItsQuantizeLinear) {
  OnnxModel m = two_blocks();
  m.node("Neg", "neg", {"h0"}, {"n"});
  m.output("n");
  expect_shortcut_keeps_its_quantizer(m);
}

TEST(FuseQresidual, DisablePassKeepsTheAdds) {
  TempDir dir;
  const Built u = build_model(two_blocks(), int8_options(dir, {"fuse-qresidual"}));
  EXPECT_EQ(u.count("Add"), 2);
  EXPECT_EQ(u.details.count("fuse-qresidual"), 0u);
}

// ---- explicit Q/DQ blocks --------------------------------------------------------------------

constexpr float kSy = 0.04f;

void init_weights(OnnxModel& m) {
  std::vector<int32_t> w(4 * 4 * 9);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<int32_t>((i * 37) % 255) - 127;
  init_ints(m, "wq", {4, 4, 3, 3}, w, onnx::TensorProto::INT8);
  init_floats(m, "sw", {4}, {0.002f, 0.003f, 0.004f, 0.005f});
  attr_int(m.node("DequantizeLinear", "dqw", {"wq", "sw"}, {"wd"}), "axis", 0);
  m.init_rand("b", {4}, -0.2f, 0.2f);
}

// x -> Q/DQ -> xd; p = Conv(xd, DQ(w), b) [-> act]; s = Add(p, r) -> Relu -> Q/DQ -> y, where r is
// xd unless `residual` names another tensor.
struct Block {
  std::string residual = "xd";
  bool conv_relu = false;      // a Relu between the Conv and the Add
  bool p_output = false;       // p is a graph output too
  bool p_two_readers = false;  // p is read by a Neg (graph output "n") too
};

OnnxModel block(const Block& b, const std::function<void(OnnxModel&)>& extra = nullptr) {
  OnnxModel m("qblock");
  m.input("x", {1, 4, 5, 5});
  init_floats(m, "sx", {}, {0.02f});
  init_ints(m, "zx", {}, {3}, onnx::TensorProto::INT8);
  m.node("QuantizeLinear", "qx", {"x", "sx", "zx"}, {"xq"});
  m.node("DequantizeLinear", "dqx", {"xq", "sx", "zx"}, {"xd"});
  if (extra) extra(m);
  init_weights(m);
  attr_ints(m.node("Conv", "conv", {"xd", "wd", "b"}, {b.conv_relu ? "c" : "p"}), "pads", {1, 1, 1, 1});
  if (b.conv_relu) m.node("Relu", "conv_relu", {"c"}, {"p"});
  m.node("Add", "add", {"p", b.residual}, {"s"});
  m.node("Relu", "relu", {"s"}, {"r"});
  init_floats(m, "sy", {}, {kSy});
  init_ints(m, "zy", {}, {-5}, onnx::TensorProto::INT8);
  m.node("QuantizeLinear", "qy", {"r", "sy", "zy"}, {"yq"});
  m.node("DequantizeLinear", "dqy", {"yq", "sy", "zy"}, {"y"});
  m.output("y");
  if (b.p_output) m.output("p");
  if (b.p_two_readers) {
    m.node("Neg", "neg", {"p"}, {"n"});
    m.output("n");
  }
  return m;
}

BuildOptions without_qresidual() {
  BuildOptions o;
  o.disabled_passes = {"fuse-qresidual"};
  return o;
}

TEST(FuseQresidual, DequantizedResidualIsBitExact) {
  const Built f = build_model(block({}), BuildOptions{}), u = build_model(block({}), without_qresidual());
  EXPECT_EQ(f.ops, (std::vector<std::string>{"QuantizeLinear", "kiln.QConv", "DequantizeLinear"}));
  EXPECT_EQ(u.count("Add"), 1);
  const std::map<std::string, std::vector<float>> feed = {{"x", random_vec(100, 5)}};
  auto yf = run_engine(f.engine, feed, {"y"}), yu = run_engine(u.engine, feed, {"y"});
  EXPECT_EQ(yf["y"], yu["y"]);
}

// A residual r read by a per-tensor QuantizeLinear (its quantized form) fuses too.
TEST(FuseQresidual, QuantizedResidualFuses) {
  Block b;
  b.residual = "r_in";
  const auto extra = [](OnnxModel& m) {
    m.input("r_in", {1, 4, 5, 5});
    init_floats(m, "sr", {}, {0.03f});
    init_ints(m, "zr", {}, {0}, onnx::TensorProto::INT8);
    m.node("QuantizeLinear", "qr", {"r_in", "sr", "zr"}, {"rq"});
    m.node("DequantizeLinear", "dqr", {"rq", "sr", "zr"}, {"rd"});
    m.node("Identity", "keep", {"rd"}, {"rd_out"});
    m.output("rd_out");
  };
  const Built f = build_model(block(b, extra), BuildOptions{}), u = build_model(block(b, extra), without_qresidual());
  EXPECT_EQ(f.count("Add"), 0);
  const std::map<std::string, std::vector<float>> feed = {{"x", random_vec(100, 5)}, {"r_in", random_vec(100, 6)}};
  auto yf = run_engine(f.engine, feed, {"y"}), yu = run_engine(u.engine, feed, {"y"});
  ASSERT_EQ(yf["y"].size(), yu["y"].size());
  // r loses at most half a step of its scale (0.03), which moves y by at most one step of kSy.
  for (size_t i = 0; i < yf["y"].size(); ++i) EXPECT_NEAR(yf["y"][i], yu["y"][i], kSy * 1.001) << i;
}

// The Add of a float32 residual goes into the QConv as z in float32: the same float32 operations
// in the same order as the unfused engine, so bit-exact.
void expect_fused_float_residual(const OnnxModel& m) {
  const Built f = build_model(m, BuildOptions{}), u = build_model(m, without_qresidual());
  EXPECT_EQ(f.count("Add"), 0);
  EXPECT_EQ(u.count("Add"), 1);
  const std::map<std::string, std::vector<float>> feed = {{"x", random_vec(100, 5)}, {"r_in", random_vec(100, 6)}};
  auto yf = run_engine(f.engine, feed, {"y"}), yu = run_engine(u.engine, feed, {"y"});
  EXPECT_EQ(yf["y"], yu["y"]);
}

// ---- guards: the Add stays ---------------------------------------------------------------------

void expect_not_fused(const OnnxModel& m) {
  const Built b = build_model(m, BuildOptions{});
  EXPECT_EQ(b.count("Add"), 1);
  EXPECT_EQ(b.details.at("fuse-qresidual"), "");
}

TEST(FuseQresidual, NotWhenTheConvOutputHasTwoReaders) {
  Block b;
  b.p_two_readers = true;
  expect_not_fused(block(b));
}

TEST(FuseQresidual, NotWhenTheConvOutputIsAGraphOutput) {
  Block b;
  b.p_output = true;
  expect_not_fused(block(b));
}

TEST(FuseQresidual, NotWhenTheQConvHasAnActivation) {
  Block b;
  b.conv_relu = true;
  expect_not_fused(block(b));
}

TEST(FuseQresidual, NotWhenTheAddBroadcasts) {
  Block b;
  b.residual = "rd";
  expect_not_fused(block(b, [](OnnxModel& m) {
    m.input("r_in", {1, 4, 1, 1});
    init_floats(m, "sr", {}, {0.03f});
    m.node("QuantizeLinear", "qr", {"r_in", "sr"}, {"rq"});
    m.node("DequantizeLinear", "dqr", {"rq", "sr"}, {"rd"});
  }));
}

// A residual without a quantized form (here a graph input; in ResNet another QConv's float output)
// is added in float32: the fused engine computes what the unfused one does.
TEST(FuseQresidual, AResidualWithoutAQuantizedFormIsAddedInFloat) {
  Block b;
  b.residual = "r_in";
  expect_fused_float_residual(block(b, [](OnnxModel& m) { m.input("r_in", {1, 4, 5, 5}); }));
}

}  // namespace
}  // namespace kiln::passes
