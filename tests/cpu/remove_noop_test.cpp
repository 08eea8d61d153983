// Tests for the remove-noop pass: every kind of no-op it knows disappears (step counts, numeric
// parity with the pass disabled), graph outputs keep their names, and nodes that look like no-ops
// but move or change data stay.
#include <gtest/gtest.h>

#include <limits>

#include "pass_test_util.h"

namespace kiln::passes {
namespace {

using namespace kiln::test;
using Strings = std::vector<std::string>;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

TEST(RemoveNoop, EveryKindRemoved) {
  PassModel m("noops");
  m.input("x", {2, 3, 4});
  m.init_i64("s234", {3}, {2, 3, 4});
  m.init_i64("zero", {1}, {0});
  m.init_i64("max", {1}, {kMax});
  m.init_i64("one", {1}, {1});
  m.init_i64("pads0", {6}, {0, 0, 0, 0, 0, 0});
  m.init_i64("s34", {2}, {3, 4});
  m.init_i64("no_axes", {0}, {});
  m.init_i64("reps", {3}, {1, 1, 1});
  m.init_f("ones", {1}, {1.f});
  m.init_f("zeros34", {3, 4}, std::vector<float>(12, 0.f));
  m.init_f("zero_f", {}, {0.f});
  m.init_f("one_f", {}, {1.f});
  m.init_f("like", {1}, {0.f});
  m.node("Relu", "relu", {"x"}, {"r0"});
  m.node("Reshape", "reshape", {"r0", "s234"}, {"r1"});
  attr_ints(m.node("Transpose", "transpose", {"r1"}, {"r2"}), "perm", {0, 1, 2});
  attr_int(m.node("Cast", "cast", {"r2"}, {"r3"}), "to", onnx::TensorProto::FLOAT);
  m.node("Slice", "slice", {"r3", "zero", "max", "one"}, {"r4"});
  m.node("Pad", "pad", {"r4", "pads0"}, {"r5"});
  m.node("Expand", "expand", {"r5", "s34"}, {"r6"});
  attr_int(m.node("Concat", "concat", {"r6"}, {"r7"}), "axis", 0);
  m.node("Squeeze", "squeeze", {"r7"}, {"r8"});
  m.node("Unsqueeze", "unsqueeze", {"r8", "no_axes"}, {"r9"});
  m.node("Tile", "tile", {"r9", "reps"}, {"r10"});
  m.node("Split", "split", {"r10"}, {"r11"});
  m.node("Mul", "mul", {"r11", "ones"}, {"r12"});
  m.node("Add", "add", {"r12", "zeros34"}, {"r13"});
  m.node("Sub", "sub", {"r13", "zero_f"}, {"r14"});
  m.node("Div", "div", {"r14", "one_f"}, {"r15"});
  m.node("Mul", "mul_first", {"ones", "r15"}, {"r16"});
  m.node("CastLike", "cast_like", {"r16", "like"}, {"r17"});
  m.node("Neg", "neg", {"r17"}, {"y"});
  m.output("y");
  Built on = check_pass(m, "remove-noop", 17, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Relu", "Neg"}));
  EXPECT_NE(on.detail.find("Mul 2"), std::string::npos) << on.detail;
  EXPECT_NE(on.detail.find("Reshape 1"), std::string::npos) << on.detail;
}

TEST(RemoveNoop, TransposeOfUnitAxesOnly) {
  // [1,3,1,4] with the two unit axes swapped: the same elements in the same order.
  PassModel m("unit_axes");
  m.input("x", {1, 3, 1, 4});
  m.node("Relu", "relu", {"x"}, {"r"});
  attr_ints(m.node("Transpose", "t", {"r"}, {"t"}), "perm", {2, 1, 0, 3});
  m.node("Neg", "neg", {"t"}, {"y"});
  m.output("y");
  Built on = check_pass(m, "remove-noop", 1, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Relu", "Neg"}));
}

TEST(RemoveNoop, GraphOutputKeepsItsName) {
  PassModel m("out_name");
  m.input("x", {2, 3});
  m.init_i64("s", {2}, {2, 3});
  m.node("Relu", "relu", {"x"}, {"r"});
  m.node("Reshape", "reshape", {"r", "s"}, {"y"});
  m.output("y");
  Built on = check_pass(m, "remove-noop", 1, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Relu"}));
  auto e = Engine::from_bytes(on.engine);
  EXPECT_EQ(e->outputs()[0].name, "y");
  EXPECT_EQ(e->summary().steps[0].outputs, (Strings{"y"}));
}

// ---- guards: the node stays -----------------------------------------------------------------------

TEST(RemoveNoopGuards, GraphInputToGraphOutput) {
  PassModel m("in_to_out");
  m.input("x", {2, 3});
  m.init_i64("s", {2}, {2, 3});
  m.node("Reshape", "reshape", {"x", "s"}, {"y"});
  m.output("y");
  Built on = check_pass(m, "remove-noop", 0, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Reshape"}));
}

TEST(RemoveNoopGuards, SameShapeTransposeMovesData) {
  PassModel m("square");
  m.input("x", {3, 3});
  m.node("Relu", "relu", {"x"}, {"r"});
  attr_ints(m.node("Transpose", "t", {"r"}, {"t"}), "perm", {1, 0});
  m.node("Neg", "neg", {"t"}, {"y"});
  m.output("y");
  Built on = check_pass(m, "remove-noop", 0, {"y"});
  EXPECT_EQ(count_of(step_ops(on.engine), "Transpose"), 1);
}

TEST(RemoveNoopGuards, SameShapeSliceReverses) {
  PassModel m("reverse");
  m.input("x", {2, 4});
  m.init_i64("start", {1}, {-1});
  m.init_i64("end", {1}, {kMin});
  m.init_i64("axis", {1}, {1});
  m.init_i64("step", {1}, {-1});
  m.node("Relu", "relu", {"x"}, {"r"});
  m.node("Slice", "slice", {"r", "start", "end", "axis", "step"}, {"s"});
  m.node("Neg", "neg", {"s"}, {"y"});
  m.output("y");
  Built on = check_pass(m, "remove-noop", 0, {"y"});
  EXPECT_EQ(count_of(step_ops(on.engine), "Slice"), 1);
}

TEST(RemoveNoopGuards, SameShapePadShifts) {
  // One column in front, one cropped at the end: the shape stays, the data moves.
  PassModel m("shift");
  m.input("x", {2, 4});
  m.init_i64("pads", {4}, {0, 1, 0, -1});
  m.node("Relu", "relu", {"x"}, {"r"});
  m.node("Pad", "pad", {"r", "pads"}, {"p"});
  m.node("Neg", "neg", {"p"}, {"y"});
  m.output("y");
  Built on = check_pass(m, "remove-noop", 0, {"y"});
  EXPECT_EQ(count_of(step_ops(on.engine), "Pad"), 1);
}

TEST(RemoveNoopGuards, CastToAnotherType) {
  PassModel m("casts");
  m.input("x", {5});
  m.node("Relu", "relu", {"x"}, {"r"});
  attr_int(m.node("Cast", "to_half", {"r"}, {"h"}), "to", onnx::TensorProto::FLOAT16);
  attr_int(m.node("Cast", "to_float", {"h"}, {"y"}), "to", onnx::TensorProto::FLOAT);
  m.output("y");
  Built on = check_pass(m, "remove-noop", 0, {"y"});
  EXPECT_EQ(count_of(step_ops(on.engine), "Cast"), 2);
}

TEST(RemoveNoopGuards, ArithmeticThatChangesValuesOrShape) {
  PassModel m("arith");
  m.input("x", {2, 3});
  m.init_f("half", {}, {0.5f});
  m.init_f("zero", {}, {0.f});
  m.init_f("one", {}, {1.f});
  m.init_f("almost_ones", {3}, {1.f, 1.f, 2.f});
  m.init_f("ones_223", {2, 2, 3}, std::vector<float>(12, 1.f));
  m.node("Relu", "relu", {"x"}, {"r"});
  m.node("Add", "add_half", {"r", "half"}, {"y1"});
  m.node("Sub", "zero_minus", {"zero", "r"}, {"y2"});  // -r
  m.node("Div", "one_over", {"one", "r"}, {"y3"});     // 1 / r
  m.node("Mul", "not_all_ones", {"r", "almost_ones"}, {"y4"});
  m.node("Mul", "broadcasting", {"r", "ones_223"}, {"y5"});  // [2,2,3]
  for (const char* y : {"y1", "y2", "y3", "y4", "y5"}) m.output(y);
  Built on = check_pass(m, "remove-noop", 0, {"y1", "y2", "y4", "y5"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Relu", "Add", "Sub", "Div", "Mul", "Mul"}));
}

}  // namespace
}  // namespace kiln::passes
