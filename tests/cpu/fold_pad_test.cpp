// Tests for the fold-pad pass: a zero constant Pad of the spatial axes joins the pads of the Conv
// (or counting AveragePool) that reads it, with numeric parity against the pass disabled; every
// guard keeps the Pad.
#include <gtest/gtest.h>

#include "pass_test_util.h"

namespace kiln::passes {
namespace {

using namespace kiln::test;
using Strings = std::vector<std::string>;

const char* kPass = "fold-pad";

onnx::NodeProto* node_named(PassModel& m, const std::string& name) {
  for (auto& n : *m.g()->mutable_node())
    if (n.name() == name) return &n;
  ADD_FAILURE() << "no node " << name;
  return nullptr;
}

// x [2,3,6,7] -> Pad(pads, value 0) -> Conv(W [4,3,3,3], B, conv_pads) -> y.
PassModel pad_conv(const I64s& pads, const I64s& conv_pads = {1, 0, 1, 2}, bool value_input = true) {
  PassModel m("pad_conv");
  m.input("x", {2, 3, 6, 7});
  m.init_i64("pads", {8}, pads);
  std::vector<std::string> pad_ins{"x", "pads"};
  if (value_input) {
    m.init_f("value", {}, {0.f});
    pad_ins.push_back("value");
  }
  m.init_rand("w", {4, 3, 3, 3});
  m.init_rand("b", {4});
  m.node("Pad", "pad1", pad_ins, {"p"});
  auto* c = m.node("Conv", "conv1", {"p", "w", "b"}, {"y"});
  if (!conv_pads.empty()) attr_ints(c, "pads", conv_pads);
  m.output("y");
  return m;
}

TEST(FoldPad, IntoConvPads) {
  PassModel m = pad_conv({0, 0, 1, 2, 0, 0, 2, 1});
  Built on = check_pass(m, kPass, 1, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Conv"}));
  EXPECT_EQ(step_names(on.engine), (Strings{"pad1 + conv1"}));
  EXPECT_EQ(on.detail, "Pad + Conv 1");
  EXPECT_NE(Engine::from_bytes(on.engine)->summary().steps[0].attrs.find("pads=[2,2,3,3]"), std::string::npos)
      << Engine::from_bytes(on.engine)->summary().steps[0].attrs;
}

TEST(FoldPad, NoValueInputAndValidConv) {
  PassModel m = pad_conv({0, 0, 1, 1, 0, 0, 1, 1}, {}, false);
  attr_string(node_named(m, "conv1"), "auto_pad", "VALID");
  Built on = check_pass(m, kPass, 1, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Conv"}));
}

TEST(FoldPad, PadWithAxesInput) {
  PassModel m("axes", 18);
  m.input("x", {1, 2, 5, 5});
  m.init_i64("pads", {4}, {2, 0, 1, 3});
  m.init_i64("axes", {2}, {-2, -1});
  m.init_rand("w", {3, 2, 3, 3});
  m.node("Pad", "pad1", {"x", "pads", "", "axes"}, {"p"});
  m.node("Conv", "conv1", {"p", "w"}, {"y"});
  m.output("y");
  Built on = check_pass(m, kPass, 1, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Conv"}));
}

TEST(FoldPad, Conv1dWithStridesAndDilations) {
  PassModel m("conv1d");
  m.input("x", {2, 3, 11});
  m.init_i64("pads", {6}, {0, 0, 3, 0, 0, 1});
  m.init_rand("w", {2, 3, 3});
  m.node("Pad", "pad1", {"x", "pads"}, {"p"});
  auto* c = m.node("Conv", "conv1", {"p", "w"}, {"y"});
  attr_ints(c, "strides", {2});
  attr_ints(c, "dilations", {2});
  m.output("y");
  check_pass(m, kPass, 1, {"y"});
}

// x [1,2,6,6] -> Pad(pads) -> AveragePool(kernel 3, count_include_pad 1) -> y.
PassModel pad_pool(const std::string& op, const I64s& pads, int64_t count_include_pad = 1) {
  PassModel m("pad_pool");
  m.input("x", {1, 2, 6, 6});
  m.init_i64("pads", {8}, pads);
  m.node("Pad", "pad1", {"x", "pads"}, {"p"});
  auto* pool = m.node(op, "pool1", {"p"}, {"y"});
  attr_ints(pool, "kernel_shape", {3, 3});
  if (op == "AveragePool") attr_int(pool, "count_include_pad", count_include_pad);
  m.output("y");
  return m;
}

TEST(FoldPad, IntoAveragePoolThatCountsPads) {
  Built on = check_pass(pad_pool("AveragePool", {0, 0, 1, 2, 0, 0, 2, 1}), kPass, 1, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"AveragePool"}));
}

// ---- guards: the Pad stays -----------------------------------------------------------------------

void expect_pad_kept(const PassModel& m, const Strings& outputs = {"y"}) {
  Built on = check_pass(m, kPass, 0, outputs);
  EXPECT_EQ(count_of(step_ops(on.engine), "Pad"), 1);
}

TEST(FoldPadGuards, NonZeroValue) {
  PassModel m = pad_conv({0, 0, 1, 1, 0, 0, 1, 1});
  m.g()->mutable_initializer(1)->set_float_data(0, 0.5f);  // "value"
  ASSERT_EQ(m.g()->initializer(1).name(), "value");
  expect_pad_kept(m);
}

TEST(FoldPadGuards, ValueNotConstant) {
  PassModel m = pad_conv({0, 0, 1, 1, 0, 0, 1, 1}, {1, 0, 1, 2}, false);
  m.input("v", {1});
  node_named(m, "pad1")->add_input("v");
  expect_pad_kept(m);
}

TEST(FoldPadGuards, ReflectAndEdgeModes) {
  for (const char* mode : {"reflect", "edge"}) {
    SCOPED_TRACE(mode);
    PassModel m = pad_conv({0, 0, 1, 1, 0, 0, 1, 1}, {1, 0, 1, 2}, false);
    attr_string(node_named(m, "pad1"), "mode", mode);
    expect_pad_kept(m);
  }
}

TEST(FoldPadGuards, PadsOnBatchOrChannels) {
  // C padded to 4 channels: the conv's weights need 4 input channels.
  PassModel m("channels");
  m.input("x", {2, 3, 5, 5});
  m.init_i64("pads", {8}, {0, 1, 1, 1, 0, 0, 1, 1});
  m.init_rand("w", {2, 4, 3, 3});
  m.node("Pad", "pad1", {"x", "pads"}, {"p"});
  m.node("Conv", "conv1", {"p", "w"}, {"y"});
  m.output("y");
  expect_pad_kept(m);
  expect_pad_kept(pad_conv({1, 0, 1, 1, 0, 0, 1, 1}));  // N
}

TEST(FoldPadGuards, NegativePads) { expect_pad_kept(pad_conv({0, 0, -1, 1, 0, 0, 1, 1})); }

TEST(FoldPadGuards, ConvWithAutoPadSame) {
  PassModel m = pad_conv({0, 0, 1, 1, 0, 0, 1, 1}, {});
  attr_string(node_named(m, "conv1"), "auto_pad", "SAME_UPPER");
  expect_pad_kept(m);
}

TEST(FoldPadGuards, PadOutputReadTwice) {
  PassModel m = pad_conv({0, 0, 1, 1, 0, 0, 1, 1});
  m.node("Relu", "relu", {"p"}, {"z"});
  m.output("z");
  expect_pad_kept(m, {"y", "z"});
}

TEST(FoldPadGuards, PadOutputIsAGraphOutput) {
  PassModel m = pad_conv({0, 0, 1, 1, 0, 0, 1, 1});
  m.output("p");
  expect_pad_kept(m, {"y", "p"});
}

TEST(FoldPadGuards, PoolsThatDoNotCountZeros) {
  expect_pad_kept(pad_pool("AveragePool", {0, 0, 1, 1, 0, 0, 1, 1}, 0));
  expect_pad_kept(pad_pool("MaxPool", {0, 0, 1, 1, 0, 0, 1, 1}));
}

TEST(FoldPadGuards, AveragePoolWithCeilMode) {
  // 6 + 1 + 1 = 8, kernel 3, stride 2, ceil: the padded input has 4 windows, the last one starting
  // in the Pad's zeros; folded, that window would start in the pool's own end padding and be dropped.
  PassModel m = pad_pool("AveragePool", {0, 0, 1, 1, 0, 0, 1, 1});
  attr_int(node_named(m, "pool1"), "ceil_mode", 1);
  attr_ints(node_named(m, "pool1"), "strides", {2, 2});
  expect_pad_kept(m);
}

TEST(FoldPadGuards, PoolPadsWouldReachTheKernel) {
  // Pads of 3 before a 3x3 pool: the first window sees padding only, which a pool's pads may not.
  expect_pad_kept(pad_pool("AveragePool", {0, 0, 3, 0, 0, 0, 0, 0}));
}

}  // namespace
}  // namespace kiln::passes
