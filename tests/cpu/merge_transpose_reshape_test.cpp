// Tests for the merge-transpose-reshape pass: Transpose pairs compose (or cancel), chains of
// Reshape / Flatten / Squeeze / Unsqueeze become one Reshape (or none), with numeric parity against
// the pass disabled; an intermediate value with another reader or that is a graph output keeps
// both nodes.
#include <gtest/gtest.h>

#include "pass_test_util.h"

namespace kiln::passes {
namespace {

using namespace kiln::test;
using Strings = std::vector<std::string>;

const char* kPass = "merge-transpose-reshape";

// x [2,3,4,5] -> Relu -> Transpose(p1) -> Transpose(p2) -> Neg -> y.
PassModel transposes(const I64s& p1, const I64s& p2) {
  PassModel m("transposes");
  m.input("x", {2, 3, 4, 5});
  m.node("Relu", "relu", {"x"}, {"r"});
  attr_ints(m.node("Transpose", "t1", {"r"}, {"a"}), "perm", p1);
  attr_ints(m.node("Transpose", "t2", {"a"}, {"b"}), "perm", p2);
  m.node("Neg", "neg", {"b"}, {"y"});
  m.output("y");
  return m;
}

TEST(MergeTransposeReshape, TransposesCompose) {
  PassModel m = transposes({1, 0, 2, 3}, {0, 2, 3, 1});
  Built on = check_pass(m, kPass, 1, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Relu", "Transpose", "Neg"}));
  EXPECT_EQ(step_names(on.engine)[1], "t1 + t2");
  EXPECT_EQ(on.detail, "Transpose 1");
  // One Transpose with perm p1[p2[k]] = {1, 2, 3, 0}: r [2,3,4,5] -> [3,4,5,2].
  EXPECT_EQ(Engine::from_bytes(on.engine)->outputs()[0].shape, (I64s{3, 4, 5, 2}));
}

TEST(MergeTransposeReshape, TransposesCancel) {
  // NCHW -> NHWC -> NCHW.
  Built on = check_pass(transposes({0, 2, 3, 1}, {0, 3, 1, 2}), kPass, 1, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Relu", "Neg"}));
  EXPECT_EQ(on.detail, "Transpose cancelled 1");
}

TEST(MergeTransposeReshape, DefaultPermAndLongerChain) {
  PassModel m("chain");
  m.input("x", {2, 3, 4});
  m.node("Relu", "relu", {"x"}, {"r"});
  m.node("Transpose", "t1", {"r"}, {"a"});  // reversed: [4,3,2]
  attr_ints(m.node("Transpose", "t2", {"a"}, {"b"}), "perm", {1, 0, 2});
  attr_ints(m.node("Transpose", "t3", {"b"}, {"c"}), "perm", {0, 2, 1});
  m.node("Neg", "neg", {"c"}, {"y"});
  m.output("y");
  Built on = check_pass(m, kPass, 2, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Relu", "Transpose", "Neg"}));
  EXPECT_EQ(step_names(on.engine)[1], "t1 + t2 + t3");
}

TEST(MergeTransposeReshape, ReshapeChainBecomesOneReshape) {
  PassModel m("reshapes");
  m.input("x", {2, 3, 4});
  m.init_i64("s1", {2}, {6, 4});
  m.init_i64("axes0", {1}, {0});
  m.node("Relu", "relu", {"x"}, {"r"});
  m.node("Reshape", "r1", {"r", "s1"}, {"a"});                // [6,4]
  m.node("Unsqueeze", "u", {"a", "axes0"}, {"b"});            // [1,6,4]
  attr_int(m.node("Flatten", "f", {"b"}, {"c"}), "axis", 2);  // [6,4]
  m.node("Unsqueeze", "u2", {"c", "axes0"}, {"d"});           // [1,6,4]
  m.node("Squeeze", "sq", {"d", "axes0"}, {"e"});             // [6,4]
  m.init_i64("s2", {3}, {3, 2, 4});
  m.node("Reshape", "r2", {"e", "s2"}, {"f2"});  // [3,2,4]
  m.node("Neg", "neg", {"f2"}, {"y"});
  m.output("y");
  // view-reshapes off: the merged Reshape stays a step, so that its name shows what it merged.
  Built on = check_pass(m, kPass, 5, {"y"}, 1e-5f, {"view-reshapes"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Relu", "Reshape", "Neg"}));
  EXPECT_EQ(step_names(on.engine)[1], "r1 + u + f + u2 + sq + r2");
  EXPECT_EQ(Engine::from_bytes(on.engine)->outputs()[0].shape, (I64s{3, 2, 4}));
}

TEST(MergeTransposeReshape, ReshapesCancelIntoAGraphOutput) {
  // The merged pair restores r's shape: Relu writes y itself.
  PassModel m("cancel");
  m.input("x", {2, 3, 4});
  m.init_i64("flat", {1}, {-1});
  m.init_i64("back", {3}, {2, 3, 4});
  m.node("Relu", "relu", {"x"}, {"r"});
  m.node("Reshape", "r1", {"r", "flat"}, {"a"});
  m.node("Reshape", "r2", {"a", "back"}, {"y"});
  m.output("y");
  Built on = check_pass(m, kPass, 1, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Relu"}));
  EXPECT_EQ(Engine::from_bytes(on.engine)->summary().steps[0].outputs, (Strings{"y"}));
}

TEST(MergeTransposeReshape, ZeroSizedTargetKeepsItsZero) {
  // A 0 in a Reshape target copies the input's dim unless allowzero: the merged target must say 0.
  PassModel m("empty");
  m.input("x", {2, 0, 3});
  m.init_i64("s1", {2}, {0, 6});
  m.init_i64("s2", {3}, {3, 0, 2});
  m.node("Relu", "relu", {"x"}, {"r"});
  auto* r1 = m.node("Reshape", "r1", {"r", "s1"}, {"a"});
  attr_int(r1, "allowzero", 1);
  auto* r2 = m.node("Reshape", "r2", {"a", "s2"}, {"b"});
  attr_int(r2, "allowzero", 1);
  m.node("Neg", "neg", {"b"}, {"y"});
  m.output("y");
  Built on = build_with(m, kPass, true);
  EXPECT_EQ(on.changes, 1);
  EXPECT_EQ(Engine::from_bytes(on.engine)->outputs()[0].shape, (I64s{3, 0, 2}));
}

// ---- guards: both nodes stay -------------------------------------------------------------------

TEST(MergeTransposeReshapeGuards, IntermediateHasAnotherReader) {
  PassModel m = transposes({1, 0, 2, 3}, {1, 0, 2, 3});
  m.node("Sigmoid", "other", {"a"}, {"z"});
  m.output("z");
  Built on = check_pass(m, kPass, 0, {"y", "z"});
  EXPECT_EQ(count_of(step_ops(on.engine), "Transpose"), 2);
}

TEST(MergeTransposeReshapeGuards, IntermediateIsAGraphOutput) {
  PassModel m = transposes({1, 0, 2, 3}, {1, 0, 2, 3});
  m.output("a");
  Built on = check_pass(m, kPass, 0, {"y", "a"});
  EXPECT_EQ(count_of(step_ops(on.engine), "Transpose"), 2);

  PassModel r("reshape_out");
  r.input("x", {2, 3, 4});
  r.init_i64("s1", {2}, {6, 4});
  r.init_i64("s2", {2}, {4, 6});
  r.node("Relu", "relu", {"x"}, {"x1"});
  r.node("Reshape", "r1", {"x1", "s1"}, {"a"});
  r.node("Reshape", "r2", {"a", "s2"}, {"y"});
  r.output("a");
  r.output("y");
  Built ron = check_pass(r, kPass, 0, {"a", "y"}, 1e-5f, {"view-reshapes"});
  EXPECT_EQ(count_of(step_ops(ron.engine), "Reshape"), 2);
}

TEST(MergeTransposeReshapeGuards, CancelledPairBetweenGraphInputAndOutput) {
  // x -> T -> T -> y cancels, but an engine output must be written by a step: one copy stays.
  PassModel m("in_out");
  m.input("x", {2, 3});
  m.node("Transpose", "t1", {"x"}, {"a"});
  m.node("Transpose", "t2", {"a"}, {"y"});
  m.output("y");
  Built on = check_pass(m, kPass, 1, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Transpose"}));
}

}  // namespace
}  // namespace kiln::passes
