// Tests for the view stages (build/view_plan.h): view-reshapes, eliminate-concat and
// eliminate-split fire where they should (steps gone, views in the engine, arena figures), do not
// fire where a guard says no (one test per guard), and every engine computes exactly the bytes the
// same engine computes with the stage switched off (a view moves no arithmetic).
#include <gtest/gtest.h>

#include "pass_test_util.h"
#include "build/view_plan.h"

namespace kiln::build {
namespace {

using namespace kiln::test;
using Strings = std::vector<std::string>;

const char* kReshapes = "view-reshapes";
const char* kConcat = "eliminate-concat";
const char* kSplit = "eliminate-split";

// Built with and without `stage`, outputs bitwise equal on random inputs.
Built check_stage(const PassModel& m, const char* stage, int changes, const Strings& outputs,
                  const Strings& also_off = {}) {
  return check_pass(m, stage, changes, outputs, 0.f, also_off);
}

std::vector<ViewInfo> views_of(const Built& b) { return Engine::from_bytes(b.engine)->summary().views; }

const ViewInfo* view_named(const std::vector<ViewInfo>& views, const std::string& name) {
  for (const ViewInfo& v : views)
    if (v.name == name) return &v;
  return nullptr;
}

// ---- view-reshapes ------------------------------------------------------------------------------

// x [1,3,4,4] -> Relu -> Reshape [3,16] -> Sigmoid -> Flatten(axis 0) [1,48] -> Unsqueeze [1,1,48]
// -> Squeeze [1,48] -> Neg -> y.
PassModel reshape_chain() {
  PassModel m("reshape_chain");
  m.input("x", {1, 3, 4, 4});
  m.init_i64("s", {2}, {3, 16});
  m.init_i64("axes", {1}, {0});
  m.node("Relu", "relu", {"x"}, {"r"});
  m.node("Reshape", "reshape", {"r", "s"}, {"a"});
  m.node("Sigmoid", "sigmoid", {"a"}, {"b"});
  attr_int(m.node("Flatten", "flatten", {"b"}, {"c"}), "axis", 0);
  m.node("Unsqueeze", "unsqueeze", {"c", "axes"}, {"d"});
  m.node("Squeeze", "squeeze", {"d", "axes"}, {"e"});
  m.node("Neg", "neg", {"e"}, {"y"});
  m.output("y");
  return m;
}

TEST(ViewReshapes, ChainBecomesViews) {
  PassModel m = reshape_chain();
  Built on = check_stage(m, kReshapes, 2, {"y"});  // merge-transpose-reshape made Flatten..Squeeze one node
  EXPECT_EQ(step_ops(on.engine), (Strings{"Relu", "Sigmoid", "Neg"}));
  const auto views = views_of(on);
  ASSERT_EQ(views.size(), 2u);
  EXPECT_EQ(views[0].name, "a");
  EXPECT_EQ(views[0].base, "r");
  EXPECT_EQ(views[0].offset, 0u);
  Built off = build_with(m, kReshapes, false);
  EXPECT_EQ(step_ops(off.engine).size(), 5u);
  EXPECT_LT(on.report.activation_bytes, off.report.activation_bytes);  // a chain: the same peak either way
  EXPECT_EQ(on.report.steps, 3u);
  // Without the chain merge every node of the chain is a view; the engine lists only those a step
  // reads (c and d are read by no step).
  Built all = check_pass(m, kReshapes, 4, {"y"}, 0.f, {"merge-transpose-reshape"});
  EXPECT_EQ(step_ops(all.engine), (Strings{"Relu", "Sigmoid", "Neg"}));
  ASSERT_EQ(views_of(all).size(), 2u);
  EXPECT_EQ(view_named(views_of(all), "e")->base, "b");
}

TEST(ViewReshapes, IdentityAndReshapeIntoAnEngineOutput) {
  // The producer writes the output's memory; the output keeps its name and binds as before.
  PassModel m("into_output");
  m.input("x", {2, 6});
  m.init_i64("s", {3}, {3, 2, 2});
  m.node("Relu", "relu", {"x"}, {"r"});
  m.node("Reshape", "reshape", {"r", "s"}, {"y"});
  m.output("y");
  Built on = check_stage(m, kReshapes, 1, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Relu"}));
  ASSERT_EQ(views_of(on).size(), 1u);
  EXPECT_EQ(views_of(on)[0].name, "r");
  EXPECT_EQ(views_of(on)[0].base, "y");
}

TEST(ViewReshapes, ViewOfAnEngineOutput) {
  // y is an engine output and read again through a Reshape: the Reshape's output lies in y.
  PassModel m("of_output");
  m.input("x", {2, 6});
  m.init_i64("s", {1}, {12});
  m.node("Relu", "relu", {"x"}, {"y"});
  m.node("Reshape", "reshape", {"y", "s"}, {"f"});
  m.node("Neg", "neg", {"f"}, {"z"});
  m.output("y");
  m.output("z");
  Built on = check_stage(m, kReshapes, 1, {"y", "z"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Relu", "Neg"}));
  ASSERT_NE(view_named(views_of(on), "f"), nullptr);
  EXPECT_EQ(view_named(views_of(on), "f")->base, "y");
}

// x [2,1,1,8] -> Relu -> Transpose (perm) -> Neg -> y.
PassModel transpose_between(const std::vector<int64_t>& shape, const std::vector<int64_t>& perm) {
  PassModel m("transpose");
  m.input("x", shape);
  m.node("Relu", "relu", {"x"}, {"r"});
  attr_ints(m.node("Transpose", "transpose", {"r"}, {"t"}), "perm", perm);
  m.node("Neg", "neg", {"t"}, {"y"});
  m.output("y");
  return m;
}

TEST(ViewReshapes, TransposeOfUnitAxesIsAView) {
  // Channels-last [N, 1, 1, C] back to [N, C, 1, 1] (after a global pool): the same bytes. The
  // merge pass is off so that the Transpose reaches the view stage as it is.
  Built on = check_stage(transpose_between({2, 1, 1, 8}, {0, 3, 1, 2}), kReshapes, 1, {"y"},
                         {"merge-transpose-reshape"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Relu", "Neg"}));
  ASSERT_NE(view_named(views_of(on), "t"), nullptr);
  EXPECT_EQ(view_named(views_of(on), "t")->base, "r");
}

TEST(ViewReshapesGuards, TransposeThatMovesDataStaysAStep) {
  // Axes 1 (3) and 3 (4) change order: the bytes move.
  Built on = check_stage(transpose_between({2, 3, 1, 4}, {0, 3, 1, 2}), kReshapes, 0, {"y"},
                         {"merge-transpose-reshape"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Relu", "Transpose", "Neg"}));
}

TEST(ViewReshapesGuards, EngineInputStaysAStep) {
  PassModel m("of_input");
  m.input("x", {2, 6});
  m.init_i64("s", {1}, {12});
  m.node("Reshape", "reshape", {"x", "s"}, {"f"});
  m.node("Neg", "neg", {"f"}, {"y"});
  m.output("y");
  Built on = check_stage(m, kReshapes, 0, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Reshape", "Neg"}));
  EXPECT_TRUE(views_of(on).empty());
}

TEST(ViewReshapesGuards, BetweenTwoEngineOutputs) {
  // Both sides are the caller's memory: the copy stays.
  PassModel m("outputs");
  m.input("x", {2, 6});
  m.init_i64("s", {1}, {12});
  m.node("Relu", "relu", {"x"}, {"y"});
  m.node("Reshape", "reshape", {"y", "s"}, {"z"});
  m.output("y");
  m.output("z");
  Built on = check_stage(m, kReshapes, 0, {"y", "z"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Relu", "Reshape"}));
}

TEST(ViewReshapesGuards, ConstantStaysAWeight) {
  // A constant output gets an Identity from materialize-outputs; it stays (a weight hosts no view,
  // an output does not move).
  PassModel m("constant");
  m.input("x", {2});
  m.init_f("c", {2}, {1.f, 2.f});
  m.node("Relu", "relu", {"x"}, {"y"});
  m.output("y");
  m.output("c");
  Built on = check_stage(m, kReshapes, 0, {"y", "c"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Relu", "Identity"}));
}

// ---- eliminate-concat -------------------------------------------------------------------------------

// x [n,2,5,5] -> Conv a (3 ch), Conv b (4 ch), Relu c (2 ch) -> Concat(axis) -> Conv (1x1) -> y.
PassModel concat_block(int64_t n, int64_t axis = 1) {
  PassModel m("concat_block");
  m.input("x", {n, 2, 5, 5});
  m.init_rand("wa", {3, 2, 3, 3});
  m.init_rand("wb", {4, 2, 1, 1});
  m.init_rand("wy", {9, 9, 1, 1});
  attr_ints(m.node("Conv", "conv_a", {"x", "wa"}, {"a"}), "pads", {1, 1, 1, 1});
  m.node("Conv", "conv_b", {"x", "wb"}, {"b"});
  m.node("Relu", "relu_c", {"x"}, {"c"});
  attr_int(m.node("Concat", "cat", {"a", "b", "c"}, {"cat"}), "axis", axis);
  m.node("Conv", "conv_y", {"cat", "wy"}, {"y"});
  m.output("y");
  return m;
}

TEST(EliminateConcat, ChannelConcatAtBatchOne) {
  PassModel m = concat_block(1);
  Built on = check_stage(m, kConcat, 1, {"y"});
  EXPECT_EQ(on.detail, "3 slice(s) written in place, 0 copied");
  EXPECT_EQ(count_of(step_ops(on.engine), "Concat"), 0);
  EXPECT_EQ(step_ops(on.engine).size(), 4u);
  const auto views = views_of(on);
  ASSERT_EQ(views.size(), 3u);
  const uint64_t plane = 5 * 5 * 4;
  EXPECT_EQ(view_named(views, "a")->base, "cat");
  EXPECT_EQ(view_named(views, "a")->offset, 0u);
  EXPECT_EQ(view_named(views, "b")->offset, 3 * plane);
  EXPECT_EQ(view_named(views, "c")->offset, 7 * plane);
  Built off = build_with(m, kConcat, false);
  EXPECT_LT(on.report.arena_bytes, off.report.arena_bytes);
}

TEST(EliminateConcat, AxisZeroAtBatchTwo) {
  // Concat on axis 0 of [2,...] tensors: the slices are contiguous.
  PassModel m("axis0");
  m.input("x", {2, 3});
  m.input("z", {4, 3});
  m.node("Relu", "relu", {"x"}, {"a"});
  m.node("Sigmoid", "sigmoid", {"z"}, {"b"});
  attr_int(m.node("Concat", "cat", {"a", "b"}, {"cat"}), "axis", 0);
  m.node("Neg", "neg", {"cat"}, {"y"});
  m.output("y");
  Built on = check_stage(m, kConcat, 1, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Relu", "Sigmoid", "Neg"}));
}

TEST(EliminateConcat, EngineOutputHostsItsInputs) {
  PassModel m("to_output");
  m.input("x", {1, 2, 3});
  m.node("Relu", "relu", {"x"}, {"a"});
  m.node("Neg", "neg", {"x"}, {"b"});
  attr_int(m.node("Concat", "cat", {"a", "b"}, {"y"}), "axis", 1);
  m.output("y");
  Built on = check_stage(m, kConcat, 1, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Relu", "Neg"}));
  EXPECT_EQ(view_named(views_of(on), "b")->base, "y");
}

TEST(EliminateConcat, OneInputThatCannotMoveIsCopied) {
  // x is an engine input: its slice is copied by an Identity step; Relu writes its slice in place.
  PassModel m("one_copy");
  m.input("x", {1, 2, 3});
  m.node("Relu", "relu", {"x"}, {"a"});
  attr_int(m.node("Concat", "cat", {"x", "a"}, {"cat"}), "axis", 1);
  m.node("Neg", "neg", {"cat"}, {"y"});
  m.output("y");
  Built on = check_stage(m, kConcat, 1, {"y"});
  EXPECT_EQ(on.detail, "1 slice(s) written in place, 1 copied");
  EXPECT_EQ(step_ops(on.engine), (Strings{"Relu", "Identity", "Neg"}));
  EXPECT_EQ(step_names(on.engine)[1], "cat");
}

TEST(EliminateConcat, InputReadTwiceIsCopiedOnce) {
  PassModel m("twice");
  m.input("x", {1, 2, 3});
  m.node("Relu", "relu", {"x"}, {"a"});
  attr_int(m.node("Concat", "cat", {"a", "a"}, {"cat"}), "axis", 1);
  m.node("Neg", "neg", {"cat"}, {"y"});
  m.output("y");
  Built on = check_stage(m, kConcat, 1, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Relu", "Identity", "Neg"}));
}

TEST(EliminateConcatGuards, BatchTwoChannelConcatStays) {
  Built on = check_stage(concat_block(2), kConcat, 0, {"y"});
  EXPECT_EQ(count_of(step_ops(on.engine), "Concat"), 1);
  EXPECT_TRUE(views_of(on).empty());
}

TEST(EliminateConcatGuards, TwoSlicesToCopyKeepTheConcat) {
  // An engine input and a constant: two copies would cost more launches than the one Concat.
  PassModel m("two_copies");
  m.input("x", {1, 2, 3});
  m.init_rand("k", {1, 1, 3});
  m.node("Relu", "relu", {"x"}, {"a"});
  attr_int(m.node("Concat", "cat", {"x", "a", "k"}, {"cat"}), "axis", 1);
  m.node("Neg", "neg", {"cat"}, {"y"});
  m.output("y");
  Built on = check_stage(m, kConcat, 0, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Relu", "Concat", "Neg"}));
}

TEST(EliminateConcatGuards, NothingCanMove) {
  PassModel m("inputs_only");
  m.input("x", {1, 2, 3});
  m.input("z", {1, 2, 3});
  attr_int(m.node("Concat", "cat", {"x", "z"}, {"cat"}), "axis", 1);
  m.node("Neg", "neg", {"cat"}, {"y"});
  m.output("y");
  Built on = check_stage(m, kConcat, 0, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Concat", "Neg"}));
}

TEST(EliminateConcatGuards, EngineOutputInputIsCopied) {
  // a is an engine output (the caller may bind it anywhere): copied into the concat.
  PassModel m("output_input");
  m.input("x", {1, 2, 3});
  m.node("Relu", "relu", {"x"}, {"a"});
  m.node("Neg", "neg", {"x"}, {"b"});
  attr_int(m.node("Concat", "cat", {"a", "b"}, {"cat"}), "axis", 1);
  m.node("Sigmoid", "sigmoid", {"cat"}, {"y"});
  m.output("a");
  m.output("y");
  Built on = check_stage(m, kConcat, 1, {"a", "y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Relu", "Neg", "Identity", "Sigmoid"}));
  EXPECT_EQ(view_named(views_of(on), "a"), nullptr);
}

TEST(EliminateConcatGuards, InputAlreadyPlacedElsewhere) {
  // a lies in cat1 (with b after it); cat2 wants a followed by c: cat1 cannot move in whole (b's
  // bytes would cover c's slice), so a is copied into cat2 and c written in place.
  PassModel m("placed");
  m.input("x", {1, 2, 3});
  m.node("Relu", "relu", {"x"}, {"a"});
  m.node("Neg", "neg", {"x"}, {"b"});
  m.node("Sigmoid", "sigmoid", {"x"}, {"c"});
  attr_int(m.node("Concat", "cat1", {"a", "b"}, {"cat1"}), "axis", 1);
  attr_int(m.node("Concat", "cat2", {"a", "c"}, {"cat2"}), "axis", 1);
  m.node("Abs", "abs1", {"cat1"}, {"y1"});
  m.node("Abs", "abs2", {"cat2"}, {"y2"});
  m.output("y1");
  m.output("y2");
  Built on = check_stage(m, kConcat, 2, {"y1", "y2"});
  EXPECT_EQ(on.detail, "3 slice(s) written in place, 1 copied");
  EXPECT_EQ(step_ops(on.engine), (Strings{"Relu", "Neg", "Sigmoid", "Identity", "Abs", "Abs"}));
  EXPECT_EQ(view_named(views_of(on), "a")->base, "cat1");
  EXPECT_EQ(view_named(views_of(on), "c")->base, "cat2");
}

// ---- DenseNet-like and Inception-like blocks --------------------------------------------------------

// A dense block at batch 1: each layer reads the concatenation of all earlier features.
PassModel dense_block(int layers) {
  PassModel m("dense_block");
  m.input("x", {1, 4, 6, 6});
  m.init_rand("w0", {4, 4, 1, 1});
  m.node("Conv", "stem", {"x", "w0"}, {"f0"});
  std::vector<std::string> features = {"f0"};
  for (int l = 1; l <= layers; ++l) {
    const std::string in = l == 1 ? "f0" : "cat" + std::to_string(l - 1), k = std::to_string(l);
    const int64_t cin = 4 * l;
    m.node("Relu", "relu" + k, {in}, {"r" + k});
    m.init_rand("w" + k, {4, cin, 3, 3});
    attr_ints(m.node("Conv", "conv" + k, {"r" + k, "w" + k}, {"f" + k}), "pads", {1, 1, 1, 1});
    features.push_back("f" + k);
    attr_int(m.node("Concat", "cat" + k, features, {"cat" + k}), "axis", 1);
  }
  m.node("Relu", "out", {"cat" + std::to_string(layers)}, {"y"});
  m.output("y");
  return m;
}

TEST(ViewBlocks, DenseBlockLivesInOneBuffer) {
  PassModel m = dense_block(3);
  Built on = check_stage(m, kConcat, 3, {"y"});
  EXPECT_EQ(on.detail, "9 slice(s) written in place, 0 copied");  // cat1 and cat2 move in whole
  EXPECT_EQ(count_of(step_ops(on.engine), "Concat"), 0);
  EXPECT_EQ(count_of(step_ops(on.engine), "Identity"), 0);
  for (const char* v : {"f0", "f1", "f2", "f3", "cat1", "cat2"}) {
    ASSERT_NE(view_named(views_of(on), v), nullptr) << v;
    EXPECT_EQ(view_named(views_of(on), v)->base, "cat3") << v;
  }
  Built off = build_with(m, kConcat, false);
  EXPECT_LT(on.report.arena_bytes, off.report.arena_bytes);
}

// Inception at batch 1: 1x1, 1x1 -> 3x3, 1x1 -> 5x5 and pool -> 1x1 branches, concatenated.
PassModel inception_block(int64_t n) {
  PassModel m("inception");
  m.input("x", {n, 8, 7, 7});
  m.init_rand("w1", {4, 8, 1, 1});
  m.init_rand("w2a", {3, 8, 1, 1});
  m.init_rand("w2b", {5, 3, 3, 3});
  m.init_rand("w3a", {2, 8, 1, 1});
  m.init_rand("w3b", {3, 2, 5, 5});
  m.init_rand("w4", {2, 8, 1, 1});
  m.node("Conv", "b1", {"x", "w1"}, {"o1"});
  m.node("Conv", "b2a", {"x", "w2a"}, {"t2"});
  attr_ints(m.node("Conv", "b2b", {"t2", "w2b"}, {"o2"}), "pads", {1, 1, 1, 1});
  m.node("Conv", "b3a", {"x", "w3a"}, {"t3"});
  attr_ints(m.node("Conv", "b3b", {"t3", "w3b"}, {"o3"}), "pads", {2, 2, 2, 2});
  auto* pool = m.node("MaxPool", "pool", {"x"}, {"p"});
  attr_ints(pool, "kernel_shape", {3, 3});
  attr_ints(pool, "pads", {1, 1, 1, 1});
  m.node("Conv", "b4", {"p", "w4"}, {"o4"});
  attr_int(m.node("Concat", "cat", {"o1", "o2", "o3", "o4"}, {"cat"}), "axis", 1);
  m.node("Relu", "relu", {"cat"}, {"y"});
  m.output("y");
  return m;
}

TEST(ViewBlocks, InceptionBranchesWriteTheirSlices) {
  // fuse-siblings off: it would join the three 1x1 Convs (fuse_siblings_test.cpp has that case).
  Built on = check_stage(inception_block(1), kConcat, 1, {"y"}, {"fuse-siblings"});
  EXPECT_EQ(on.detail, "4 slice(s) written in place, 0 copied");
  EXPECT_EQ(count_of(step_ops(on.engine), "Concat"), 0);
  Built two = check_stage(inception_block(2), kConcat, 0, {"y"}, {"fuse-siblings"});
  EXPECT_EQ(count_of(step_ops(two.engine), "Concat"), 1);
}

// ---- eliminate-split --------------------------------------------------------------------------------

// x [n,2,4,4] -> Conv (6 ch) -> Split [1,2,3] on channels -> Relu, Sigmoid, Neg -> y1, y2, y3.
PassModel split_block(int64_t n, bool output_is_split = false) {
  PassModel m("split_block");
  m.input("x", {n, 2, 4, 4});
  m.init_rand("w", {6, 2, 1, 1});
  m.init_i64("sizes", {3}, {1, 2, 3});
  m.node("Conv", "conv", {"x", "w"}, {"c"});
  attr_int(m.node("Split", "split", {"c", "sizes"}, {"s1", "s2", output_is_split ? "y3" : "s3"}), "axis", 1);
  m.node("Relu", "relu", {"s1"}, {"y1"});
  m.node("Sigmoid", "sigmoid", {"s2"}, {"y2"});
  if (!output_is_split) m.node("Neg", "neg", {"s3"}, {"y3"});
  m.output("y1");
  m.output("y2");
  m.output("y3");
  return m;
}

TEST(EliminateSplit, OutputsBecomeViewsOfTheInput) {
  Built on = check_stage(split_block(1), kSplit, 1, {"y1", "y2", "y3"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Conv", "Relu", "Sigmoid", "Neg"}));
  EXPECT_EQ(view_named(views_of(on), "s2")->base, "c");
  EXPECT_EQ(view_named(views_of(on), "s2")->offset, 16u * 4u);
  EXPECT_EQ(view_named(views_of(on), "s3")->offset, 3u * 16u * 4u);
}

TEST(EliminateSplit, EngineOutputIsCopied) {
  Built on = check_stage(split_block(1, true), kSplit, 1, {"y1", "y2", "y3"});
  EXPECT_EQ(on.detail, "2 slice(s) written in place, 1 copied");
  EXPECT_EQ(step_ops(on.engine), (Strings{"Conv", "Identity", "Relu", "Sigmoid"}));
}

TEST(EliminateSplitGuards, BatchTwoStays) {
  Built on = check_stage(split_block(2), kSplit, 0, {"y1", "y2", "y3"});
  EXPECT_EQ(count_of(step_ops(on.engine), "Split"), 1);
}

TEST(EliminateSplitGuards, SplitOfAnEngineInputStays) {
  PassModel m("split_input");
  m.input("x", {1, 6});
  attr_int(m.node("Split", "split", {"x"}, {"a", "b"}), "axis", 1);
  m.node("Relu", "relu", {"a"}, {"y1"});
  m.node("Neg", "neg", {"b"}, {"y2"});
  m.output("y1");
  m.output("y2");
  Built on = check_stage(m, kSplit, 0, {"y1", "y2"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Split", "Relu", "Neg"}));
}

// ---- contexts: views of an output bound to the caller's memory ----------------------------------------

TEST(Views, FollowAnOutputBoundToCallerMemory) {
  // y = Concat(relu, neg) is an engine output written in place; z reads y through a Flatten view.
  PassModel m("bound");
  m.input("x", {1, 2, 3});
  m.node("Relu", "relu", {"x"}, {"a"});
  m.node("Neg", "neg", {"x"}, {"b"});
  attr_int(m.node("Concat", "cat", {"a", "b"}, {"y"}), "axis", 1);
  m.node("Flatten", "flatten", {"y"}, {"f"});
  m.node("Sigmoid", "sigmoid", {"f"}, {"z"});
  m.output("y");
  m.output("z");
  Built on = build_with(m, kConcat, true);
  EXPECT_EQ(step_ops(on.engine), (Strings{"Relu", "Neg", "Sigmoid"}));
  EXPECT_EQ(view_named(views_of(on), "f")->base, "y");
  const std::vector<float> x = random_vec(6, 9);
  const auto want = run_engine(build_with(m, kConcat, false, {kReshapes}).engine, {{"x", x}}, {"y", "z"});
  auto e = Engine::from_bytes(on.engine);
  auto ctx = e->create_context(1);
  std::vector<float> y1(12, -7.f), y2(12, -7.f), z(12);
  ctx->set_input("x", x.data(), 24);
  ctx->set_output("y", y1.data(), 48);
  ctx->set_output("z", z.data(), 48);
  ctx->run();
  EXPECT_EQ(y1, want.at("y"));
  EXPECT_EQ(z, want.at("z"));
  std::fill(y1.begin(), y1.end(), -7.f);
  ctx->set_output("y", y2.data(), 48);  // the slices and the Flatten follow y to its new buffer
  ctx->run();
  EXPECT_EQ(y2, want.at("y"));
  EXPECT_EQ(z, want.at("z"));
  EXPECT_EQ(y1, std::vector<float>(12, -7.f));
}

// ---- alignment, fp16, determinism --------------------------------------------------------------------

TEST(Views, GpuTargetsNeedSixteenByteOffsets) {
  EXPECT_EQ(view_alignment("cpu", DataType::kFloat32), 4u);
  EXPECT_EQ(view_alignment("cpu", DataType::kFloat16), 2u);
  EXPECT_EQ(view_alignment("sm_90", DataType::kFloat32), 16u);
  EXPECT_EQ(view_alignment("sm_90", DataType::kFloat64), 16u);
  EXPECT_TRUE(contiguous_slices({1, 8, 2}, 1));
  EXPECT_TRUE(contiguous_slices({3, 8}, 0));
  EXPECT_FALSE(contiguous_slices({2, 8}, 1));
}

TEST(Views, Float16EnginesToo) {
  PassModel m = dense_block(2);
  graph::Graph g1 = m.import(), g2 = m.import();
  BuildOptions on, off;
  on.fp16 = off.fp16 = true;
  off.disabled_passes = {kReshapes, kConcat, kSplit};
  const std::vector<uint8_t> a = build_engine(g1, on), b = build_engine(g2, off);
  EXPECT_EQ(count_of(step_ops(a), "Concat"), 0);
  std::map<std::string, std::vector<float>> feed = {{"x", random_vec(4 * 36, 5)}};
  EXPECT_EQ(run_engine(a, feed, {"y"}), run_engine(b, feed, {"y"}));
}

TEST(Views, BuildingTwiceGivesIdenticalBytes) {
  graph::Graph g1 = inception_block(1).import(), g2 = inception_block(1).import();
  EXPECT_EQ(build_engine(g1, BuildOptions{}), build_engine(g2, BuildOptions{}));
}

}  // namespace
}  // namespace kiln::build
