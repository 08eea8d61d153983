// Tests for the fuse-siblings pass: sibling Conv, Gemm and MatMul nodes, and the FusedConv,
// FusedGemm and FusedMatMul nodes of fuse-epilogue, become one node and a Split that
// eliminate-split makes free, with numeric parity against the pass disabled; every guard (the
// Split would copy, different attributes or epilogues, a residual input, a graph output, a Concat
// that would copy a slice, non-constant weights, eliminate-split off, a slice misaligned for the
// GPU, channels-last ahead) keeps the siblings apart.
#include <gtest/gtest.h>

#include <functional>
#include <tuple>

#include "pass_test_util.h"

namespace kiln::passes {

using namespace kiln::build;  // build_engine, BuildOptions: the passes run inside a build
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
  EXPECT_EQ(on.detail, "Conv 3 into 1");
  EXPECT_EQ(step_ops(on.engine), (Strings{"Conv", "Relu", "Sigmoid", "Neg"}));  // the Split is free
  EXPECT_EQ(step_names(on.engine)[0], "conv_a & conv_b & conv_c");
  Built off = build_with(conv_siblings(1), kPass, false);
  EXPECT_EQ(step_ops(off.engine).size(), 6u);
}

TEST(FuseSiblings, InceptionBlockFusesItsReductions) {
  // Of the three 1x1 Convs on x, b1 writes straight into the Concat (eliminate-concat): it stays
  // apart, for in the fused output the Concat would have to copy it. b2a and b3a fuse.
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
  EXPECT_EQ(step_ops(on.engine), (Strings{"Conv", "Conv", "Conv", "Conv", "MaxPool", "Conv", "Relu"}));
  EXPECT_EQ(step_names(on.engine)[1], "b2a & b3a");
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
  EXPECT_EQ(on.detail, "Gemm 3 into 1");
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
  EXPECT_EQ(on.detail, "Conv 2 into 1");
  EXPECT_EQ(count_of(step_ops(on.engine), "Conv"), 2);
  // Gemm v with another alpha: q and k fuse.
  Built g = check_pass(gemm_siblings(1, 1, 2.f), kPass, 1, {"yq", "yk", "yv"});
  EXPECT_EQ(g.detail, "Gemm 2 into 1");
}

TEST(FuseSiblingsGuards, GraphOutputStaysOut) {
  PassModel m = conv_siblings(1);
  m.output("a");  // conv_a's output is an engine output: it would be copied out of the fused output
  Built on = check_pass(m, kPass, 1, {"y1", "y2", "y3", "a"});
  EXPECT_EQ(on.detail, "Conv 2 into 1");
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

// ---- fused siblings (fuse-epilogue on) --------------------------------------------------------------

// pass_test_util's build_with switches fuse-epilogue off; these builds keep it, so that the siblings
// reach fuse-siblings as FusedConv / FusedGemm / FusedMatMul.
Built build_fused(const PassModel& m, bool siblings, bool fp16 = false) {
  graph::Graph g = m.import();
  BuildOptions o;
  o.fp16 = fp16;
  if (!siblings) o.disabled_passes = {kPass};
  Built b;
  b.engine = build_engine(g, o, &b.report);
  for (const PassReport& p : b.report.passes)
    if (p.name == kPass) {
      b.changes = p.changes;
      b.detail = p.detail;
    }
  return b;
}

// check_pass with fuse-epilogue on: `changes` groups joined, and the engine computes what the one
// built without fuse-siblings computes on random inputs.
Built check_fused(const PassModel& m, int changes, const Strings& outputs, bool fp16 = false) {
  Built on = build_fused(m, true, fp16), off = build_fused(m, false, fp16);
  EXPECT_EQ(on.changes, changes) << on.detail;
  std::map<std::string, std::vector<float>> feed;
  uint32_t seed = 21;
  for (const auto& in : m.m.graph().input()) {
    size_t n = 1;
    for (const auto& d : in.type().tensor_type().shape().dim()) n *= static_cast<size_t>(d.dim_value());
    feed[in.name()] = random_vec(n, seed++);
  }
  auto y_on = run_engine(on.engine, feed, outputs), y_off = run_engine(off.engine, feed, outputs);
  for (const std::string& o : outputs) {
    SCOPED_TRACE(o);
    expect_close(y_on[o], y_off[o], fp16 ? 1e-2f : 1e-5f);
  }
  return on;
}

// x [batch,8,8,8] -> 1x1 Convs a (4 channels, bias), b (3), c (2, bias), each followed by its
// activation (none: the Conv stays a Conv) and a Neg that stays out of the epilogue.
struct Branches {
  int64_t batch = 1;
  std::string act = "Relu", act_c = "Relu";
  float alpha = 0.1f, alpha_c = 0.1f;  // LeakyRelu's
  I64s kernel_c = {1, 1};
  std::function<void(onnx::NodeProto*)> conv_c;  // changes conv c's attributes
};

PassModel fused_convs(const Branches& br = {}) {
  PassModel m("fused_convs");
  m.input("x", {br.batch, 8, 8, 8});
  m.init_rand("wa", {4, 8, 1, 1});
  m.init_rand("ba", {4});
  m.init_rand("wb", {3, 8, 1, 1});
  m.init_rand("wc", {2, 8, br.kernel_c[0], br.kernel_c[1]});
  m.init_rand("bc", {2});
  const std::vector<std::vector<std::string>> ins = {{"x", "wa", "ba"}, {"x", "wb"}, {"x", "wc", "bc"}};
  for (size_t i = 0; i < 3; ++i) {
    const std::string k(1, static_cast<char>('a' + i));
    onnx::NodeProto* conv = m.node("Conv", "conv_" + k, ins[i], {k});
    if (i == 2 && br.conv_c) br.conv_c(conv);
    const std::string& act = i == 2 ? br.act_c : br.act;
    std::string y = k;
    if (!act.empty()) {
      y = "r" + k;
      onnx::NodeProto* n = m.node(act, "act_" + k, {k}, {y});
      if (act == "LeakyRelu") attr_float(n, "alpha", i == 2 ? br.alpha_c : br.alpha);
    }
    m.node("Neg", "neg_" + k, {y}, {"y" + k});
    m.output("y" + k);
  }
  return m;
}

const Strings kConvOuts = {"ya", "yb", "yc"};

TEST(FuseSiblingsFused, ConvsWithOneActivationJoin) {
  Built on = check_fused(fused_convs(), 1, kConvOuts);
  EXPECT_EQ(on.detail, "FusedConv+Relu 3 into 1");
  EXPECT_EQ(step_ops(on.engine), (Strings{"FusedConv", "Neg", "Neg", "Neg"}));  // the Split is free
  EXPECT_EQ(step_names(on.engine)[0], "conv_a + act_a & conv_b + act_b & conv_c + act_c");
  EXPECT_EQ(step_ops(build_fused(fused_convs(), false).engine).size(), 6u);
  Branches leaky;
  leaky.act = leaky.act_c = "LeakyRelu";
  EXPECT_EQ(check_fused(fused_convs(leaky), 1, kConvOuts).detail, "FusedConv+LeakyRelu 3 into 1");
}

TEST(FuseSiblingsFused, Float16) {
  Built on = check_fused(fused_convs(), 1, kConvOuts, true);
  EXPECT_EQ(count_of(step_ops(on.engine), "FusedConv"), 1);
}

// x [1,16] -> Gemm q, k, v (transB 1 unless said, bias) -> Relu -> Neg.
PassModel fused_gemms(int64_t trans_b_v = 1, float alpha_v = 1.f) {
  PassModel m("fused_gemms");
  m.input("x", {1, 16});
  m.init_rand("wq", {8, 16});
  m.init_rand("bq", {8});
  m.init_rand("wk", {8, 16});
  m.init_rand("bk", {1, 8});
  m.init_rand("wv", trans_b_v ? I64s{4, 16} : I64s{16, 4});
  m.init_rand("bv", {4});
  for (const char* k : {"q", "k", "v"}) {
    const std::string s(k);
    onnx::NodeProto* n = m.node("Gemm", s, {"x", "w" + s, "b" + s}, {s + "_out"});
    attr_int(n, "transB", s == "v" ? trans_b_v : 1);
    if (s == "v") attr_float(n, "alpha", alpha_v);
    m.node("Relu", "relu_" + s, {s + "_out"}, {"r" + s});
    m.node("Neg", "neg_" + s, {"r" + s}, {"y" + s});
    m.output("y" + s);
  }
  return m;
}

const Strings kGemmOuts = {"yq", "yk", "yv"};

TEST(FuseSiblingsFused, GemmQkv) {
  Built on = check_fused(fused_gemms(), 1, kGemmOuts);
  EXPECT_EQ(on.detail, "FusedGemm+Relu 3 into 1");
  EXPECT_EQ(step_ops(on.engine), (Strings{"FusedGemm", "Neg", "Neg", "Neg"}));
}

TEST(FuseSiblingsFused, MatMulsWithBias) {
  // x [1,1,16] -> MatMul + bias Add: q and k then Relu (FusedMatMul+Relu), v none (FusedMatMul
  // with its bias only: another epilogue, so it stays apart).
  PassModel m("fused_matmuls");
  m.input("x", {1, 1, 16});
  for (const char* k : {"q", "k", "v"}) {
    const std::string s(k);
    const int64_t n = s == "k" ? 4 : 8;
    m.init_rand("w" + s, {16, n});
    m.init_rand("b" + s, {n});
    m.node("MatMul", "mm_" + s, {"x", "w" + s}, {s + "_mm"});
    m.node("Add", "add_" + s, {s + "_mm", "b" + s}, {s + "_add"});
    std::string y = s + "_add";
    if (s != "v") {
      m.node("Relu", "relu_" + s, {y}, {s + "_relu"});
      y = s + "_relu";
    }
    m.node("Neg", "neg_" + s, {y}, {"y" + s});
    m.output("y" + s);
  }
  Built on = check_fused(m, 1, kGemmOuts);
  EXPECT_EQ(on.detail, "FusedMatMul+Relu 2 into 1");
  EXPECT_EQ(count_of(step_ops(on.engine), "FusedMatMul"), 2);
}

// x [1,8,8,8] -> a 1x1 Conv + Relu per branch and a Sigmoid; y = Concat of `order` ("a", "b" or
// "s" for the Sigmoid) -> Neg.
PassModel concat_branches(const Strings& order) {
  PassModel m("concat_branches");
  m.input("x", {1, 8, 8, 8});
  m.init_rand("wa", {4, 8, 1, 1});
  m.init_rand("wb", {2, 8, 1, 1});
  m.node("Sigmoid", "sigmoid", {"x"}, {"s"});
  for (const char* k : {"a", "b"}) {
    const std::string s(k);
    m.node("Conv", "conv_" + s, {"x", "w" + s}, {"c" + s});
    m.node("Relu", "relu_" + s, {"c" + s}, {s});
  }
  attr_int(m.node("Concat", "cat", order, {"cat"}), "axis", 1);
  m.node("Neg", "neg", {"cat"}, {"y"});
  m.output("y");
  return m;
}

TEST(FuseSiblingsFused, ConsecutiveConcatInputsJoinInPlace) {
  // The fused output lies in the Concat's output in turn: no step copies anything.
  Built on = check_fused(concat_branches({"a", "b", "s"}), 1, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Sigmoid", "FusedConv", "Neg"}));
  // In the Concat's order, not the nodes': b's weights come first.
  Built swapped = check_fused(concat_branches({"s", "b", "a"}), 1, {"y"});
  EXPECT_EQ(step_ops(swapped.engine), (Strings{"Sigmoid", "FusedConv", "Neg"}));
  EXPECT_EQ(step_names(swapped.engine)[1], "conv_b + relu_b & conv_a + relu_a");
}

TEST(FuseSiblingsFused, InceptionStepsDrop) {
  // torchvision's GoogLeNet block (each Conv + ReLU): b2a and b3a join, b1 keeps writing into the
  // Concat; every Concat slice is still written in place.
  PassModel m("inception_relu");
  m.input("x", {1, 8, 7, 7});
  const std::vector<std::tuple<const char*, const char*, I64s, int64_t>> convs = {
      {"b1", "x", {4, 8, 1, 1}, 0},  {"b2a", "x", {3, 8, 1, 1}, 0},     {"b2b", "r_b2a", {5, 3, 3, 3}, 1},
      {"b3a", "x", {2, 8, 1, 1}, 0}, {"b3b", "r_b3a", {3, 2, 5, 5}, 2}, {"b4", "p", {2, 8, 1, 1}, 0}};
  auto* pool = m.node("MaxPool", "pool", {"x"}, {"p"});
  attr_ints(pool, "kernel_shape", {3, 3});
  attr_ints(pool, "pads", {1, 1, 1, 1});
  for (const auto& [name, in, w, pad] : convs) {
    const std::string s(name);
    m.init_rand("w_" + s, w);
    m.init_rand("bias_" + s, {w[0]});
    attr_ints(m.node("Conv", s, {in, "w_" + s, "bias_" + s}, {"c_" + s}), "pads", {pad, pad, pad, pad});
    m.node("Relu", "relu_" + s, {"c_" + s}, {"r_" + s});
  }
  attr_int(m.node("Concat", "cat", {"r_b1", "r_b2b", "r_b3b", "r_b4"}, {"cat"}), "axis", 1);
  m.node("Neg", "neg", {"cat"}, {"y"});
  m.output("y");
  Built on = check_fused(m, 1, {"y"}), off = build_fused(m, false);
  EXPECT_EQ(on.detail, "FusedConv+Relu 2 into 1");
  EXPECT_EQ(step_ops(off.engine).size(), 8u);  // 6 FusedConv, MaxPool, Neg: the Concat is free
  EXPECT_EQ(step_ops(on.engine).size(), 7u);
  EXPECT_EQ(count_of(step_ops(on.engine), "Identity"), 0);
  EXPECT_EQ(count_of(step_names(on.engine), "b2a + relu_b2a & b3a + relu_b3a"), 1);
}

// ---- guards on fused siblings ----------------------------------------------------------------------

TEST(FuseSiblingsFusedGuards, DifferentEpiloguesStayApart) {
  Branches sigmoid_c, leaky_alpha, plain_c;
  sigmoid_c.act_c = "Sigmoid";
  leaky_alpha.act = leaky_alpha.act_c = "LeakyRelu";
  leaky_alpha.alpha_c = 0.2f;
  plain_c.act_c = "";  // conv c stays a Conv
  for (const Branches* br : {&sigmoid_c, &leaky_alpha, &plain_c}) {
    Built on = check_fused(fused_convs(*br), 1, kConvOuts);
    EXPECT_EQ(on.detail, br->act == "Relu" ? "FusedConv+Relu 2 into 1" : "FusedConv+LeakyRelu 2 into 1");
    EXPECT_EQ(count_of(step_ops(on.engine), "FusedConv") + count_of(step_ops(on.engine), "Conv"), 2);
  }
}

TEST(FuseSiblingsFusedGuards, ResidualInputStaysAlone) {
  // a and b add a residual (FusedConv with Z), c does not: nobody joins.
  PassModel m("residual");
  m.input("x", {1, 8, 8, 8});
  m.input("za", {1, 4, 8, 8});
  m.input("zb", {1, 4, 8, 8});
  for (const char* k : {"a", "b", "c"}) {
    const std::string s(k);
    m.init_rand("w" + s, {4, 8, 1, 1});
    m.node("Conv", "conv_" + s, {"x", "w" + s}, {"c" + s});
    m.node("Relu", "relu_" + s, {"c" + s}, {"r" + s});
    std::string y = "r" + s;
    if (s != "c") {
      m.node("Add", "add_" + s, {y, "z" + s}, {"s" + s});
      y = "s" + s;
    }
    m.node("Neg", "neg_" + s, {y}, {"y" + s});
    m.output("y" + s);
  }
  Built on = check_fused(m, 0, kConvOuts);
  EXPECT_EQ(count_of(step_ops(on.engine), "FusedConv"), 3);
}

TEST(FuseSiblingsFusedGuards, DifferentAttributesStayApart) {
  // Each case changes conv c only: a and b still join.
  std::vector<Branches> cases(5);
  cases[0].conv_c = [](onnx::NodeProto* n) { attr_ints(n, "strides", {2, 2}); };
  cases[1].conv_c = [](onnx::NodeProto* n) { attr_ints(n, "pads", {1, 1, 1, 1}); };
  cases[2].kernel_c = {3, 3};
  cases[2].conv_c = [](onnx::NodeProto* n) { attr_ints(n, "pads", {1, 1, 1, 1}); };
  cases[3].kernel_c = {3, 3};
  cases[3].conv_c = [](onnx::NodeProto* n) {
    attr_ints(n, "dilations", {2, 2});
    attr_ints(n, "pads", {2, 2, 2, 2});
  };
  cases[4].batch = 2;  // not an attribute: at batch 2 no Split is free, nobody joins
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    Built on = check_fused(fused_convs(cases[i]), i < 4 ? 1 : 0, kConvOuts);
    EXPECT_EQ(count_of(step_ops(on.engine), "FusedConv"), i < 4 ? 2 : 3);
  }
  // Gemm: transB or alpha differs for v.
  EXPECT_EQ(check_fused(fused_gemms(0), 1, kGemmOuts).detail, "FusedGemm+Relu 2 into 1");
  EXPECT_EQ(check_fused(fused_gemms(1, 2.f), 1, kGemmOuts).detail, "FusedGemm+Relu 2 into 1");
}

TEST(FuseSiblingsFusedGuards, GroupedConvsStayApart) {
  Branches grouped;
  grouped.conv_c = [](onnx::NodeProto* n) { attr_int(n, "group", 2); };
  PassModel m = fused_convs(grouped);
  // conv c's weights for group 2: [2, 4, 1, 1].
  for (auto& t : *m.g()->mutable_initializer())
    if (t.name() == "wc") {
      t.set_dims(1, 4);
      t.mutable_float_data()->Truncate(8);
    }
  EXPECT_EQ(check_fused(m, 1, kConvOuts).detail, "FusedConv+Relu 2 into 1");
}

TEST(FuseSiblingsFusedGuards, GraphOutputStaysOut) {
  PassModel m = fused_convs();
  m.output("ra");  // conv a's FusedConv writes an engine output
  Built on = check_fused(m, 1, {"ya", "yb", "yc", "ra"});
  EXPECT_EQ(on.detail, "FusedConv+Relu 2 into 1");
}

TEST(FuseSiblingsFusedGuards, ConcatInputsOutOfOrderStayApart) {
  // a and b lie apart in the Concat: fused, one of them would have to be copied into it.
  Built on = check_fused(concat_branches({"a", "s", "b"}), 0, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"Sigmoid", "FusedConv", "FusedConv", "Neg"}));
}

TEST(FuseSiblingsFusedGuards, NonConstantWeightsStayApart) {
  PassModel m("free_weights");
  m.input("x", {1, 8, 8, 8});
  m.input("w", {4, 8, 1, 1});
  for (const char* k : {"a", "b"}) {
    const std::string s(k);
    m.node("Conv", "conv_" + s, {"x", "w"}, {"c" + s});
    m.node("Relu", "relu_" + s, {"c" + s}, {"r" + s});
    m.node("Neg", "neg_" + s, {"r" + s}, {"y" + s});
    m.output("y" + s);
  }
  Built on = check_fused(m, 0, {"ya", "yb"});
  EXPECT_EQ(count_of(step_ops(on.engine), "FusedConv"), 2);
}

TEST(FuseSiblingsFusedGuards, ChannelsLastAhead) {
  // GPU --fp16: channels-last makes the 4-D convolutions NhwcConv, whose channel slices are strided.
  // (The pass is called directly: building for a GPU needs one.)
  graph::Graph g = inferred(fused_convs());
  fuse_epilogue(g, {});
  BuildOptions o;
  o.target = "sm_90";
  o.fp16 = true;
  graph::Graph g2 = g;
  EXPECT_EQ(fuse_siblings(g, o).changes, 0);
  o.disabled_passes = {"channels-last"};
  EXPECT_EQ(fuse_siblings(g2, o).changes, 1);  // 64 channel elements: 128-byte slices, aligned
  graph::verify(g2, true);
}

}  // namespace
}  // namespace kiln::passes
