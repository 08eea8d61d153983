// Tests for the fuse-siblings pass: sibling Conv, Gemm and MatMul nodes become one node and a Split
// that eliminate-split makes free, with numeric parity against the pass disabled; every guard
// (the Split would copy, different attributes, a graph output, eliminate-split off, a slice
// misaligned for the GPU) keeps the siblings apart.
#include <gtest/gtest.h>

#include "pass_test_util.h"

namespace kiln::passes {
namespace {

using namespace kiln::test;
using Strings = std::vector<std::string>;

const char* kPass = "fuse-siblings";

// x [n,8,5,5] -> three 1x1 Convs (4 channels with bias, 3 without, 2 with) -> Relu, Sigmoid, Neg.
PassModel conv_siblings(int64_t n, const I64s& strides_c = {}) {
  PassModel m("conv_siblings");
  m.input("x", {n, 8, 5, 5});
  m.init_rand("wa", {4, 8, 1, 1});
  m.init_rand("ba", {4});
  m.init_rand("wb", {3, 8, 1, 1});
  m.init_rand("wc", {2, 8, 1, 1});
  m.init_rand("bc", {2});
  m.node("Conv", "conv_a", {"x", "wa", "ba"}, {"a"});
  m.node("Conv", "conv_b", {"x", "wb"}, {"b"});
  auto* c = m.node("Conv", "conv_c", {"x", "wc", "bc"}, {"c"});
  if (!strides_c.empty()) attr_ints(c, "strides", strides_c);
  m.node("Relu", "relu", {"a"}, {"y1"});
  m.node("Sigmoid", "sigmoid", {"b"}, {"y2"});
  m.node("Neg", "neg", {"c"}, {"y3"});
  m.output("y1");
  m.output("y2");
  m.output("y3");
  return m;
}

TEST(FuseSiblings, ConvsAtBatchOne) {
  Built on = check_pass(conv_siblings(1), kPass, 1, {"y1", "y2", "y3"});
  EXPECT_EQ(on.detail, "Conv x3 1");
  EXPECT_EQ(step_ops(on.engine), (Strings{"Conv", "Relu", "Sigmoid", "Neg"}));  // the Split is free
  EXPECT_EQ(step_names(on.engine)[0], "conv_a & conv_b & conv_c");
  Built off = build_with(conv_siblings(1), kPass, false);
  EXPECT_EQ(step_ops(off.engine).size(), 6u);
}

TEST(FuseSiblings, InceptionBlockFusesItsOneByOnes) {
  // The three 1x1 Convs on x fuse; their first output goes straight into the Concat, which then
  // copies that one slice (it lies in the fused output, not where the Concat wants it).
  PassModel m("inception");
  m.input("x", {1, 8, 7, 7});
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
  Built on = check_pass(m, kPass, 1, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Conv", "Conv", "Conv", "MaxPool", "Conv", "Identity", "Relu"}));
  EXPECT_EQ(step_names(on.engine)[0], "b1 & b2a & b3a");
  Built off = build_with(m, kPass, false);
  EXPECT_EQ(step_ops(off.engine).size(), 8u);
}

// x [1,16] (or [m,16]) -> Gemm q, k, v -> Relu, Sigmoid, Neg.
PassModel gemm_siblings(int64_t rows, int64_t trans_b, float alpha_v = 1.f) {
  PassModel m("qkv");
  m.input("x", {rows, 16});
  const I64s wq = trans_b ? I64s{8, 16} : I64s{16, 8}, wk = trans_b ? I64s{8, 16} : I64s{16, 8},
             wv = trans_b ? I64s{4, 16} : I64s{16, 4};
  m.init_rand("wq", wq);
  m.init_rand("bq", {8});
  m.init_rand("wk", wk);
  m.init_rand("bk", {1, 8});
  m.init_rand("wv", wv);
  m.init_rand("bv", {1});
  const std::vector<std::pair<const char*, std::vector<std::string>>> nodes = {
      {"q", {"x", "wq", "bq"}}, {"k", {"x", "wk", "bk"}}, {"v", {"x", "wv", "bv"}}};
  for (const auto& [name, ins] : nodes) {
    auto* n = m.node("Gemm", name, ins, {std::string(name) + "_out"});
    attr_int(n, "transB", trans_b);
    attr_float(n, "beta", 0.5f);
    if (std::string(name) == "v") attr_float(n, "alpha", alpha_v);
  }
  m.node("Relu", "relu", {"q_out"}, {"yq"});
  m.node("Sigmoid", "sigmoid", {"k_out"}, {"yk"});
  m.node("Neg", "neg", {"v_out"}, {"yv"});
  m.output("yq");
  m.output("yk");
  m.output("yv");
  return m;
}

TEST(FuseSiblings, GemmQkvWithTransposedWeights) {
  Built on = check_pass(gemm_siblings(1, 1), kPass, 1, {"yq", "yk", "yv"});
  EXPECT_EQ(on.detail, "Gemm x3 1");
  EXPECT_EQ(step_ops(on.engine), (Strings{"Gemm", "Relu", "Sigmoid", "Neg"}));
}

TEST(FuseSiblings, GemmQkvRowsInterleave) {
  // transB 0: B is [K, N]; the joined B interleaves the members' rows.
  Built on = check_pass(gemm_siblings(1, 0), kPass, 1, {"yq", "yk", "yv"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Gemm", "Relu", "Sigmoid", "Neg"}));
}

TEST(FuseSiblings, MatMulAtOneToken) {
  PassModel m("matmul");
  m.input("x", {1, 1, 16});
  m.init_rand("w1", {16, 8});
  m.init_rand("w2", {16, 4});
  m.node("MatMul", "mm1", {"x", "w1"}, {"a"});
  m.node("MatMul", "mm2", {"x", "w2"}, {"b"});
  m.node("Relu", "relu", {"a"}, {"y1"});
  m.node("Neg", "neg", {"b"}, {"y2"});
  m.output("y1");
  m.output("y2");
  Built on = check_pass(m, kPass, 1, {"y1", "y2"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"MatMul", "Relu", "Neg"}));
  // Three tokens: the slices are strided, the Split would copy: nothing fuses.
  PassModel m3 = m;
  m3.g()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(1)->set_dim_value(3);
  Built three = check_pass(m3, kPass, 0, {"y1", "y2"});
  EXPECT_EQ(count_of(step_ops(three.engine), "MatMul"), 2);
}

TEST(FuseSiblings, Float16) {
  // Built with and without the pass, both --fp16: one Conv against three, same outputs within
  // float16 rounding.
  PassModel m = conv_siblings(1);
  graph::Graph g1 = m.import(), g2 = m.import();
  BuildOptions a, b;
  a.fp16 = b.fp16 = true;
  a.disabled_passes = {"fuse-epilogue"};  // the siblings' activations would make them FusedConvs
  b.disabled_passes = {kPass, "fuse-epilogue"};
  const std::vector<uint8_t> on = build_engine(g1, a), off = build_engine(g2, b);
  EXPECT_EQ(count_of(step_ops(on), "Conv"), 1);
  EXPECT_EQ(count_of(step_ops(off), "Conv"), 3);
  std::map<std::string, std::vector<float>> feed = {{"x", random_vec(8 * 25, 3)}};
  auto ya = run_engine(on, feed, {"y1", "y2", "y3"}), yb = run_engine(off, feed, {"y1", "y2", "y3"});
  for (const char* o : {"y1", "y2", "y3"}) expect_close(ya[o], yb[o], 1e-2f);
}

// ---- guards ----------------------------------------------------------------------------------------

TEST(FuseSiblingsGuards, BatchTwoWouldCopy) {
  Built on = check_pass(conv_siblings(2), kPass, 0, {"y1", "y2", "y3"});
  EXPECT_EQ(count_of(step_ops(on.engine), "Conv"), 3);
  Built rows = check_pass(gemm_siblings(2, 1), kPass, 0, {"yq", "yk", "yv"});
  EXPECT_EQ(count_of(step_ops(rows.engine), "Gemm"), 3);
}

TEST(FuseSiblingsGuards, DifferentAttributesMakeDifferentGroups) {
  // conv_c strided: a and b still fuse, c stays alone.
  Built on = check_pass(conv_siblings(1, {2, 2}), kPass, 1, {"y1", "y2", "y3"});
  EXPECT_EQ(on.detail, "Conv x2 1");
  EXPECT_EQ(count_of(step_ops(on.engine), "Conv"), 2);
  // Gemm v with another alpha: q and k fuse.
  Built g = check_pass(gemm_siblings(1, 1, 2.f), kPass, 1, {"yq", "yk", "yv"});
  EXPECT_EQ(g.detail, "Gemm x2 1");
}

TEST(FuseSiblingsGuards, GraphOutputStaysOut) {
  PassModel m = conv_siblings(1);
  m.output("a");  // conv_a's output is an engine output: it would be copied out of the fused output
  Built on = check_pass(m, kPass, 1, {"y1", "y2", "y3", "a"});
  EXPECT_EQ(on.detail, "Conv x2 1");
  EXPECT_EQ(count_of(step_ops(on.engine), "Conv"), 2);
}

TEST(FuseSiblingsGuards, GroupedConvAndNonConstantWeights) {
  PassModel m("grouped");
  m.input("x", {1, 4, 5, 5});
  m.input("wx", {2, 4, 1, 1});
  m.init_rand("w1", {2, 2, 1, 1});
  m.init_rand("w2", {2, 2, 1, 1});
  attr_int(m.node("Conv", "g1", {"x", "w1"}, {"a"}), "group", 2);
  attr_int(m.node("Conv", "g2", {"x", "w2"}, {"b"}), "group", 2);
  m.node("Conv", "free1", {"x", "wx"}, {"c"});
  m.node("Conv", "free2", {"x", "wx"}, {"d"});
  for (const char* v : {"a", "b", "c", "d"}) m.output(v);
  Built on = check_pass(m, kPass, 0, {"a", "b", "c", "d"});
  EXPECT_EQ(count_of(step_ops(on.engine), "Conv"), 4);
}

TEST(FuseSiblingsGuards, OffWithEliminateSplit) {
  Built on = build_with(conv_siblings(1), kPass, true, {"eliminate-split"});
  EXPECT_EQ(on.changes, 0);
  EXPECT_EQ(count_of(step_ops(on.engine), "Conv"), 3);
}

TEST(FuseSiblingsGuards, SliceMisalignedForTheGpu) {
  // One output channel of a 1x1 image is 4 bytes: fine on the CPU, below the 16 bytes a GPU view
  // needs, so for a GPU target the Split would copy and nothing fuses. (The pass is called directly:
  // building for a GPU needs one.)
  PassModel m("tiny");
  m.input("x", {1, 4, 1, 1});
  m.init_rand("w1", {1, 4, 1, 1});
  m.init_rand("w2", {4, 4, 1, 1});
  m.node("Conv", "c1", {"x", "w1"}, {"a"});
  m.node("Conv", "c2", {"x", "w2"}, {"b"});
  m.node("Relu", "r1", {"a"}, {"y1"});
  m.node("Relu", "r2", {"b"}, {"y2"});
  m.output("y1");
  m.output("y2");
  for (const char* target : {"cpu", "sm_90"}) {
    graph::Graph g = inferred(m);
    BuildOptions o;
    o.target = target;
    EXPECT_EQ(fuse_siblings(g, o).changes, std::string(target) == "cpu" ? 1 : 0) << target;
    graph::verify(g, true);
  }
}

}  // namespace
}  // namespace kiln::passes
