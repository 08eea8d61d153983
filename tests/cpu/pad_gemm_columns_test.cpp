// Tests for the pad-gemm-columns pass (GPU targets; called directly here, since building for a
// GPU needs one): a MatMul or FusedMatMul with 1,027 weight columns gets them padded with zeros to
// 1,032 and a Slice back, and the padded graph, built for the CPU, computes what the original does;
// the guards (aligned or narrow weights, weights that are not constant, a residual, the CPU target)
// change nothing.
#include <gtest/gtest.h>

#include "pass_test_util.h"

namespace kiln::passes {

using namespace kiln::build;
namespace {

using namespace kiln::test;

constexpr int64_t kCols = 1027;

// x [2, 3, 16] -> MatMul(w [16, cols]) [-> Add(bias) -> Relu] -> y: an LM head.
PassModel head(int64_t cols, bool bias, bool constant_w = true) {
  PassModel m("head");
  m.input("x", {2, 3, 16});
  if (constant_w)
    m.init_rand("w", {16, cols});
  else
    m.input("w", {16, cols});
  m.node("MatMul", "head", {"x", "w"}, {bias ? "p" : "y"});
  if (bias) {
    m.init_rand("b", {cols});
    m.node("Add", "bias", {"p", "b"}, {"q"});
    m.node("Relu", "relu", {"q"}, {"y"});
  }
  m.output("y");
  return m;
}

BuildOptions gpu() {
  BuildOptions o;
  o.target = "sm_90";
  return o;
}

const graph::Node* find(const graph::Graph& g, OpKind k) {
  for (const graph::Node& n : g.nodes)
    if (n.kind == k) return &n;
  return nullptr;
}

TEST(PadGemmColumns, PadsTheWeightsAndSlicesTheOutput) {
  for (bool bias : {false, true}) {
    SCOPED_TRACE(bias ? "FusedMatMul with bias and Relu" : "MatMul");
    const PassModel m = head(kCols, bias);
    graph::Graph g = inferred(m);
    if (bias) fuse_epilogue(g, {});
    const PassResult r = pad_gemm_columns(g, gpu());
    EXPECT_EQ(r.changes, 1);
    graph::verify(g, true);
    const graph::Node* mm = find(g, bias ? OpKind::kFusedMatMul : OpKind::kMatMul);
    const graph::Node* slice = find(g, OpKind::kSlice);
    ASSERT_TRUE(mm && slice);
    EXPECT_EQ(g.value(mm->inputs[1]).shape, (std::vector<int64_t>{16, 1032}));
    EXPECT_EQ(g.value(mm->outputs[0]).shape, (std::vector<int64_t>{2, 3, 1032}));
    EXPECT_EQ(slice->inputs[0], mm->outputs[0]);
    EXPECT_EQ(g.value(slice->outputs[0]).name, "y");
    // Zeros in the added columns of the weights (and the bias).
    const std::vector<double> w = g.value(mm->inputs[1]).view().to_double();
    for (int64_t r = 0; r < 16; ++r)
      for (int64_t c = kCols; c < 1032; ++c) EXPECT_EQ(w[static_cast<size_t>(r * 1032 + c)], 0.0);
    if (bias) {
      const std::vector<double> b = g.value(mm->inputs[2]).view().to_double();
      ASSERT_EQ(b.size(), 1032u);
      for (int64_t c = kCols; c < 1032; ++c) EXPECT_EQ(b[static_cast<size_t>(c)], 0.0);
    }
    // Built for the CPU, the padded graph computes what the model does.
    BuildOptions cpu;
    const std::vector<uint8_t> padded = build_engine(g, cpu), plain = build_with(m, "pad-gemm-columns", true).engine;
    const std::map<std::string, std::vector<float>> feed{{"x", random_vec(2 * 3 * 16, 5)}};
    expect_close(run_engine(padded, feed, {"y"})["y"], run_engine(plain, feed, {"y"})["y"], 1e-6f);
  }
}

TEST(PadGemmColumnsGuards, NothingChanges) {
  auto changes = [](const PassModel& m, const BuildOptions& o) {
    graph::Graph g = inferred(m);
    return pad_gemm_columns(g, o).changes;
  };
  EXPECT_EQ(changes(head(1024, false), gpu()), 0);          // a multiple of 8 already
  EXPECT_EQ(changes(head(1023 - 512, false), gpu()), 0);    // narrow: the Slice would cost more
  EXPECT_EQ(changes(head(kCols, false, false), gpu()), 0);  // weights not constant
  EXPECT_EQ(changes(head(kCols, false), BuildOptions{}), 0);  // the CPU target
  // A residual Z (fuse-epilogue's Add of another tensor) would need padding as well.
  PassModel m("residual");
  m.input("x", {2, 3, 16});
  m.input("r", {2, 3, kCols});
  m.init_rand("w", {16, kCols});
  m.node("MatMul", "head", {"x", "w"}, {"p"});
  m.node("Add", "residual", {"p", "r"}, {"y"});
  m.output("y");
  graph::Graph g = inferred(m);
  fuse_epilogue(g, {});
  ASSERT_NE(find(g, OpKind::kFusedMatMul), nullptr);
  EXPECT_EQ(pad_gemm_columns(g, gpu()).changes, 0);
}

}  // namespace
}  // namespace kiln::passes
