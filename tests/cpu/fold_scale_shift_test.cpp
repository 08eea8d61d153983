// Tests for the fold-scale-shift pass: per-channel Mul / Add / Sub / Div by constants after a Conv,
// ConvTranspose, Gemm or MatMul, and Mul / Div (Add / Sub without padding) before a Conv, fold into
// the weights, with numeric parity against the pass disabled; every guard keeps the arithmetic.
#include <gtest/gtest.h>

#include <limits>

#include "pass_test_util.h"

namespace kiln::passes {

using namespace kiln::build;  // build_engine, BuildOptions: the passes run inside a build
namespace {

using namespace kiln::test;
using Strings = std::vector<std::string>;

const char* kPass = "fold-scale-shift";

// x [2,4,6,6] -> Conv(W [6,4,3,3], pads 1, group `group`) -> c.
PassModel conv_model(int64_t group = 1, bool bias = true) {
  PassModel m("conv");
  m.input("x", {2, 4, 6, 6});
  m.init_rand("w", {6, 4 / group, 3, 3});
  std::vector<std::string> ins{"x", "w"};
  if (bias) {
    m.init_rand("b", {6});
    ins.push_back("b");
  }
  auto* c = m.node("Conv", "conv1", ins, {"c"});
  attr_ints(c, "pads", {1, 1, 1, 1});
  attr_int(c, "group", group);
  return m;
}

TEST(FoldScaleShift, ConvMulAdd) {
  PassModel m = conv_model();
  m.init_rand("s", {1, 6, 1, 1}, 0.5f, 2.f);
  m.init_rand("t", {6, 1, 1});
  m.node("Mul", "mul1", {"c", "s"}, {"cs"});
  m.node("Add", "add1", {"t", "cs"}, {"y"});
  m.output("y");
  Built on = check_pass(m, kPass, 2, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Conv"}));
  EXPECT_EQ(step_names(on.engine), (Strings{"conv1 + mul1 + add1"}));
  EXPECT_EQ(on.detail, "Conv + Add 1, Conv + Mul 1");
  EXPECT_EQ(Engine::from_bytes(on.engine)->outputs()[0].name, "y");
}

TEST(FoldScaleShift, SubDivAndScalarsWithoutBias) {
  PassModel m = conv_model(2, false);
  m.init_f("k", {}, {0.25f});
  m.init_rand("d", {1, 6, 1, 1}, 0.5f, 2.f);
  m.init_rand("t", {1, 6, 1, 1});
  m.node("Add", "add_scalar", {"c", "k"}, {"c1"});
  m.node("Div", "div1", {"c1", "d"}, {"c2"});
  m.node("Sub", "sub1", {"c2", "t"}, {"c3"});
  m.node("Sub", "sub_from", {"t", "c3"}, {"y"});  // t - y: scale -1
  m.output("y");
  Built on = check_pass(m, kPass, 4, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Conv"}));
}

TEST(FoldScaleShift, ConvTransposeWithGroups) {
  PassModel m("convt");
  m.input("x", {2, 4, 5, 5});
  m.init_rand("w", {4, 3, 3, 3});  // group 2: 6 output channels
  m.init_rand("s", {6, 1, 1}, 0.5f, 2.f);
  auto* c = m.node("ConvTranspose", "deconv1", {"x", "w"}, {"c"});
  attr_int(c, "group", 2);
  attr_ints(c, "strides", {2, 2});
  m.node("Mul", "mul1", {"c", "s"}, {"c1"});
  m.node("Add", "add1", {"c1", "s"}, {"y"});
  m.output("y");
  Built on = check_pass(m, kPass, 2, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"ConvTranspose"}));
}

TEST(FoldScaleShift, Gemm) {
  for (int64_t trans_b : {0, 1}) {
    SCOPED_TRACE(trans_b);
    PassModel m("gemm");
    m.input("a", {3, 5});
    m.init_rand("w", trans_b ? I64s{4, 5} : I64s{5, 4});
    m.init_rand("c0", {3, 1});  // per-row C
    m.init_rand("s", {4}, 0.5f, 2.f);
    auto* g = m.node("Gemm", "fc1", {"a", "w", "c0"}, {"g"});
    attr_int(g, "transB", trans_b);
    attr_float(g, "alpha", 0.5f);
    attr_float(g, "beta", 2.f);
    m.node("Mul", "mul1", {"g", "s"}, {"g1"});
    m.node("Sub", "sub1", {"g1", "s"}, {"y"});
    m.output("y");
    Built on = check_pass(m, kPass, 2, {"y"});
    EXPECT_EQ(step_ops(on.engine), (Strings{"Gemm"}));
  }
}

TEST(FoldScaleShift, MatMul2dBecomesGemm) {
  PassModel m("matmul");
  m.input("a", {3, 5});
  m.init_rand("w", {5, 4});
  m.init_rand("bias", {4});
  m.init_rand("s", {1, 4}, 0.5f, 2.f);
  m.node("MatMul", "mm1", {"a", "w"}, {"mm"});
  m.node("Add", "add1", {"mm", "bias"}, {"mb"});
  m.node("Mul", "mul1", {"mb", "s"}, {"y"});
  m.output("y");
  Built on = check_pass(m, kPass, 2, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Gemm"}));
  EXPECT_EQ(step_names(on.engine), (Strings{"mm1 + add1 + mul1"}));
}

TEST(FoldScaleShift, MatMul3dTakesScaleButNotShift) {
  // Only Gemm has a bias and Gemm is 2-D: the Add stays, the Mul before it folds.
  PassModel m("matmul3d");
  m.input("a", {2, 3, 5});
  m.init_rand("w", {5, 4});
  m.init_rand("s", {4}, 0.5f, 2.f);
  m.init_rand("bias", {4});
  m.node("MatMul", "mm1", {"a", "w"}, {"mm"});
  m.node("Mul", "mul1", {"mm", "s"}, {"ms"});
  m.node("Add", "add1", {"ms", "bias"}, {"y"});
  m.output("y");
  Built on = check_pass(m, kPass, 1, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"MatMul", "Add"}));
}

TEST(FoldScaleShift, AfterBatchNorm) {
  // Caffe's BatchNorm + Scale: Conv -> BN -> Mul -> Add, all one Conv.
  PassModel m = conv_model();
  for (const char* p : {"bn.scale", "bn.b", "bn.mean"}) m.init_rand(p, {6});
  m.init_rand("bn.var", {6}, 0.5f, 2.f);
  m.init_rand("s", {1, 6, 1, 1}, 0.5f, 2.f);
  m.init_rand("t", {1, 6, 1, 1});
  m.node("BatchNormalization", "bn1", {"c", "bn.scale", "bn.b", "bn.mean", "bn.var"}, {"n"});
  m.node("Mul", "scale1", {"n", "s"}, {"n1"});
  m.node("Add", "shift1", {"n1", "t"}, {"y"});
  m.output("y");
  Built on = check_pass(m, kPass, 2, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Conv"}));
  EXPECT_EQ(step_names(on.engine), (Strings{"conv1 + bn1 + scale1 + shift1"}));
}

// ---- before the Conv ----------------------------------------------------------------------------

TEST(FoldScaleShift, InputScaleIntoPaddedGroupedConv) {
  PassModel m("input_scale");
  m.input("x", {2, 4, 6, 6});
  m.init_rand("s", {1, 4, 1, 1}, 0.5f, 2.f);
  m.init_rand("d", {4, 1, 1}, 0.5f, 2.f);
  m.init_rand("w", {6, 2, 3, 3});
  m.node("Mul", "mul1", {"s", "x"}, {"xs"});
  m.node("Div", "div1", {"xs", "d"}, {"xd"});
  auto* c = m.node("Conv", "conv1", {"xd", "w"}, {"y"});
  attr_ints(c, "pads", {1, 2, 1, 0});
  attr_int(c, "group", 2);
  m.output("y");
  Built on = check_pass(m, kPass, 2, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Conv"}));
  EXPECT_EQ(step_names(on.engine), (Strings{"mul1 + div1 + conv1"}));
}

TEST(FoldScaleShift, InputNormalizationIntoUnpaddedConv) {
  // (x - mean) / std, then a Conv without padding: both fold.
  PassModel m("normalize");
  m.input("x", {2, 3, 7, 7});
  m.init_rand("mean", {1, 3, 1, 1});
  m.init_rand("std", {1, 3, 1, 1}, 0.5f, 2.f);
  m.init_rand("w", {5, 3, 3, 3});
  m.init_rand("b", {5});
  m.node("Sub", "sub1", {"x", "mean"}, {"xm"});
  m.node("Div", "div1", {"xm", "std"}, {"xn"});
  attr_ints(m.node("Conv", "conv1", {"xn", "w", "b"}, {"y"}), "strides", {2, 2});
  m.output("y");
  Built on = check_pass(m, kPass, 2, {"y"}, 1e-4f);
  EXPECT_EQ(step_ops(on.engine), (Strings{"Conv"}));
}

TEST(FoldScaleShift, InputScaleIntoConvTranspose) {
  PassModel m("input_scale_t");
  m.input("x", {1, 4, 4, 4});
  m.init_rand("s", {4, 1, 1}, 0.5f, 2.f);
  m.init_rand("w", {4, 2, 3, 3});
  m.node("Mul", "mul1", {"x", "s"}, {"xs"});
  attr_int(m.node("ConvTranspose", "deconv1", {"xs", "w"}, {"y"}), "group", 2);
  m.output("y");
  Built on = check_pass(m, kPass, 1, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"ConvTranspose"}));
}

// ---- guards: the arithmetic stays ---------------------------------------------------------------

void expect_kept(const PassModel& m, const Strings& outputs = {"y"}, int arithmetic = 1) {
  Built on = check_pass(m, kPass, 0, outputs);
  int n = 0;
  for (const char* op : {"Mul", "Add", "Sub", "Div"}) n += count_of(step_ops(on.engine), op);
  EXPECT_EQ(n, arithmetic);
}

// Conv -> op(c, constant of `shape`) -> y.
PassModel conv_then(const std::string& op, const I64s& shape, bool constant_first = false) {
  PassModel m = conv_model();
  m.init_rand("k", shape, 0.5f, 2.f);
  m.node(op, "op1", constant_first ? Strings{"k", "c"} : Strings{"c", "k"}, {"y"});
  m.output("y");
  return m;
}

TEST(FoldScaleShiftGuards, ProducerOutputReadTwice) {
  PassModel m = conv_then("Mul", {6, 1, 1});
  m.node("Relu", "relu", {"c"}, {"r"});
  m.output("r");
  expect_kept(m, {"y", "r"});
}

TEST(FoldScaleShiftGuards, ProducerOutputIsAGraphOutput) {
  PassModel m = conv_then("Add", {6, 1, 1});
  m.output("c");
  expect_kept(m, {"y", "c"});
}

TEST(FoldScaleShiftGuards, OperandNotConstant) {
  PassModel m = conv_model();
  m.input("s", {1, 6, 1, 1});
  m.node("Mul", "mul1", {"c", "s"}, {"y"});
  m.output("y");
  expect_kept(m);
}

TEST(FoldScaleShiftGuards, WeightsNotConstant) {
  PassModel m("w_input");
  m.input("x", {2, 4, 6, 6});
  m.input("w", {6, 4, 3, 3});
  m.init_rand("s", {6, 1, 1});
  m.node("Conv", "conv1", {"x", "w"}, {"c"});
  m.node("Mul", "mul1", {"c", "s"}, {"y"});
  m.output("y");
  expect_kept(m);
}

TEST(FoldScaleShiftGuards, NotPerChannel) {
  expect_kept(conv_then("Mul", {6}));              // along W, not C
  expect_kept(conv_then("Add", {1, 6, 6, 1}));     // varies along H too
  expect_kept(conv_then("Mul", {2, 1, 1, 1}));     // along N
  expect_kept(conv_then("Add", {3, 2, 6, 1, 1}));  // broadcasts y to a larger shape
}

TEST(FoldScaleShiftGuards, DivisorZeroOrNonFinite) {
  PassModel m = conv_then("Div", {6, 1, 1});
  m.g()->mutable_initializer(m.g()->initializer_size() - 1)->set_float_data(3, 0.f);
  expect_kept(m);
  PassModel inf = conv_then("Mul", {6, 1, 1});
  inf.g()
      ->mutable_initializer(inf.g()->initializer_size() - 1)
      ->set_float_data(0, std::numeric_limits<float>::infinity());
  Built on = build_with(inf, kPass, true);
  EXPECT_EQ(on.changes, 0);
}

TEST(FoldScaleShiftGuards, ConstantDividedByOutput) { expect_kept(conv_then("Div", {6, 1, 1}, true)); }

TEST(FoldScaleShiftGuards, NonFloatTypes) {
  // Integer values never reach a Conv in a valid model: give the graph ints by hand.
  PassModel m = conv_then("Mul", {6, 1, 1});
  graph::Graph g = inferred(m);
  for (const char* v : {"c", "y"}) g.value(g.find(v)).dtype = DataType::kInt32;
  EXPECT_EQ(fold_scale_shift(g, BuildOptions{}).changes, 0);
  graph::Graph control = inferred(m);
  EXPECT_EQ(fold_scale_shift(control, BuildOptions{}).changes, 1);

  PassModel before("input_int");
  before.input("x", {1, 4, 5, 5});
  before.init_rand("s", {4, 1, 1});
  before.init_rand("w", {2, 4, 3, 3});
  before.node("Mul", "mul1", {"x", "s"}, {"xs"});
  before.node("Conv", "conv1", {"xs", "w"}, {"y"});
  before.output("y");
  graph::Graph gb = inferred(before);
  gb.value(gb.find("xs")).dtype = DataType::kBFloat16;
  EXPECT_EQ(fold_scale_shift(gb, BuildOptions{}).changes, 0);
}

// x -> op(x, k [1,4,1,1]) -> Conv(pads) -> y.
PassModel op_then_conv(const std::string& op, const I64s& pads, const std::string& conv = "Conv") {
  PassModel m("before");
  m.input("x", {2, 4, 6, 6});
  m.init_rand("k", {1, 4, 1, 1}, 0.5f, 2.f);
  m.init_rand("w", conv == "Conv" ? I64s{3, 4, 3, 3} : I64s{4, 3, 3, 3});
  m.node(op, "op1", {"x", "k"}, {"xk"});
  auto* c = m.node(conv, "conv1", {"xk", "w"}, {"y"});
  if (!pads.empty()) attr_ints(c, "pads", pads);
  m.output("y");
  return m;
}

TEST(FoldScaleShiftGuards, AddBeforePaddedConv) {
  expect_kept(op_then_conv("Add", {1, 1, 1, 1}));
  expect_kept(op_then_conv("Sub", {0, 0, 0, 1}));
  PassModel same = op_then_conv("Add", {});
  attr_string(same.g()->mutable_node(1), "auto_pad", "SAME_LOWER");
  expect_kept(same);
  // The control: without pads it folds.
  check_pass(op_then_conv("Add", {0, 0, 0, 0}), kPass, 1, {"y"}, 1e-4f);
}

TEST(FoldScaleShiftGuards, AddBeforeConvTranspose) { expect_kept(op_then_conv("Add", {}, "ConvTranspose")); }

TEST(FoldScaleShiftGuards, InputArithmeticReadTwice) {
  PassModel m = op_then_conv("Mul", {1, 1, 1, 1});
  m.node("Relu", "relu", {"xk"}, {"r"});
  m.output("r");
  expect_kept(m, {"y", "r"});
}

}  // namespace
}  // namespace kiln::passes
