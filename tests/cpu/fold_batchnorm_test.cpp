// Tests for the fold-batchnorm pass: Conv / ConvTranspose / Gemm followed by an inference
// BatchNormalization fold into one node (node counts, origin, numeric parity with the pass
// disabled), and every guard leaves the BN in place.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>

#include "graph/onnx_import.h"
#include "kiln/engine.h"
#include "onnx_model_util.h"
#include "build/build.h"
#include "passes/pass.h"

namespace kiln::passes {

using namespace kiln::build;  // build_engine, BuildOptions: the passes run inside a build
namespace {

using namespace kiln::test;  // attr_* and import_model (onnx_model_util.h)

using graph::Graph;

struct Model : OnnxModel {
  using OnnxModel::OnnxModel;
  // BN parameters bn.scale, bn.b, bn.mean, bn.var (var > 0) for c channels, and the node.
  onnx::NodeProto* batchnorm(const std::string& name, const std::string& x, const std::string& y, int64_t c,
                             bool make_params = true) {
    if (make_params) {
      init_rand(name + ".scale", {c}, 0.5f, 2.f);
      init_rand(name + ".b", {c});
      init_rand(name + ".mean", {c});
      init_rand(name + ".var", {c}, 0.1f, 3.f);
    }
    auto* n = node("BatchNormalization", name, {x, name + ".scale", name + ".b", name + ".mean", name + ".var"}, {y});
    auto* a = n->add_attribute();
    a->set_name("epsilon");
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(1e-3f);
    return n;
  }
};

struct Built {
  std::vector<uint8_t> engine;
  BuildReport report;
  int folds = -1;  // changes reported by fold-batchnorm, -1 when it did not run
};

Built build(const Model& m, bool fold) {
  Graph g = m.import();
  BuildOptions o;
  o.disabled_passes = {"fuse-epilogue"};  // the node counts below are fold-batchnorm's alone
  if (!fold) o.disabled_passes.push_back("fold-batchnorm");
  Built b;
  b.engine = build_engine(g, o, &b.report);
  for (const PassReport& p : b.report.passes)
    if (p.name == "fold-batchnorm") b.folds = p.changes;
  return b;
}

std::vector<std::string> step_ops(const std::vector<uint8_t>& engine) {
  std::vector<std::string> ops;
  for (const StepInfo& s : Engine::from_bytes(engine)->summary().steps) ops.push_back(s.op);
  return ops;
}
std::vector<std::string> step_names(const std::vector<uint8_t>& engine) {
  std::vector<std::string> names;
  for (const StepInfo& s : Engine::from_bytes(engine)->summary().steps) names.push_back(s.name);
  return names;
}
int count(const std::vector<std::string>& v, const std::string& s) {
  return static_cast<int>(std::count(v.begin(), v.end(), s));
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  float scale = 0.f;
  for (float x : b) scale = std::max(scale, std::fabs(x));
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_LE(std::fabs(a[i] - b[i]), 1e-5f * std::max(std::fabs(b[i]), scale)) << i << ": " << a[i] << " vs " << b[i];
}

// Builds with and without the pass; expects `expected_folds` BNs gone and equal outputs.
void check_fold(const Model& m, const std::map<std::string, I64s>& inputs, const std::vector<std::string>& outputs,
                int expected_folds) {
  Built on = build(m, true), off = build(m, false);
  EXPECT_EQ(on.folds, expected_folds);
  EXPECT_EQ(off.folds, -1);
  EXPECT_EQ(on.report.nodes_out + static_cast<size_t>(expected_folds), off.report.nodes_out);
  auto ops_on = step_ops(on.engine), ops_off = step_ops(off.engine);
  EXPECT_EQ(count(ops_on, "BatchNormalization"), count(ops_off, "BatchNormalization") - expected_folds);
  std::map<std::string, std::vector<float>> feed;
  uint32_t seed = 7;
  for (const auto& [name, dims] : inputs) {
    size_t n = 1;
    for (int64_t d : dims) n *= static_cast<size_t>(d);
    feed[name] = random_vec(n, seed++);
  }
  auto y_on = run_engine(on.engine, feed, outputs), y_off = run_engine(off.engine, feed, outputs);
  for (const std::string& o : outputs) {
    SCOPED_TRACE(o);
    expect_close(y_on[o], y_off[o]);
  }
}

// ---- positive cases --------------------------------------------------------------------------------

Model conv_bn(bool bias, int64_t group = 1, int64_t c_in = 3, int64_t c_out = 4) {
  Model m("conv_bn");
  m.input("x", {2, c_in, 7, 7});
  m.init_rand("w", {c_out, c_in / group, 3, 3});
  std::vector<std::string> ins{"x", "w"};
  if (bias) {
    m.init_rand("b", {c_out});
    ins.push_back("b");
  }
  auto* c = m.node("Conv", "conv1", ins, {"c"});
  attr_ints(c, "pads", {1, 1, 1, 1});
  if (group != 1) attr_int(c, "group", group);
  m.batchnorm("bn1", "c", "y", c_out);
  m.output("y");
  return m;
}

TEST(FoldBatchNorm, Conv2dWithoutBias) {
  Model m = conv_bn(false);
  check_fold(m, {{"x", {2, 3, 7, 7}}}, {"y"}, 1);
  Built on = build(m, true);
  EXPECT_EQ(on.report.nodes_in, 2u);
  EXPECT_EQ(on.report.nodes_out, 1u);
  EXPECT_EQ(step_ops(on.engine), (std::vector<std::string>{"Conv"}));
  EXPECT_EQ(step_names(on.engine), (std::vector<std::string>{"conv1 + bn1"}));
  auto e = Engine::from_bytes(on.engine);
  EXPECT_EQ(e->outputs()[0].name, "y");
}

TEST(FoldBatchNorm, Conv2dWithBias) { check_fold(conv_bn(true), {{"x", {2, 3, 7, 7}}}, {"y"}, 1); }

TEST(FoldBatchNorm, GroupedConv) { check_fold(conv_bn(true, 2, 4, 6), {{"x", {2, 4, 7, 7}}}, {"y"}, 1); }

TEST(FoldBatchNorm, DepthwiseConv) { check_fold(conv_bn(false, 4, 4, 4), {{"x", {2, 4, 7, 7}}}, {"y"}, 1); }

TEST(FoldBatchNorm, Conv1dAndConv3d) {
  {
    Model m("conv1d");
    m.input("x", {2, 3, 9});
    m.init_rand("w", {5, 3, 3});
    m.init_rand("b", {5});
    m.node("Conv", "conv1", {"x", "w", "b"}, {"c"});
    m.batchnorm("bn1", "c", "y", 5);
    m.output("y");
    check_fold(m, {{"x", {2, 3, 9}}}, {"y"}, 1);
  }
  {
    Model m("conv3d");
    m.input("x", {1, 2, 4, 4, 4});
    m.init_rand("w", {3, 2, 2, 2, 2});
    m.node("Conv", "conv1", {"x", "w"}, {"c"});
    m.batchnorm("bn1", "c", "y", 3);
    m.output("y");
    check_fold(m, {{"x", {1, 2, 4, 4, 4}}}, {"y"}, 1);
  }
}

TEST(FoldBatchNorm, ConvTransposeWithGroups) {
  // C_in 4, group 2, W [4, 3, 3, 3]: C_out = 6.
  for (bool bias : {false, true}) {
    SCOPED_TRACE(bias);
    Model m("convt_bn");
    m.input("x", {2, 4, 5, 5});
    m.init_rand("w", {4, 3, 3, 3});
    std::vector<std::string> ins{"x", "w"};
    if (bias) {
      m.init_rand("b", {6});
      ins.push_back("b");
    }
    auto* c = m.node("ConvTranspose", "deconv1", ins, {"c"});
    attr_int(c, "group", 2);
    attr_ints(c, "strides", {2, 2});
    m.batchnorm("bn1", "c", "y", 6);
    m.output("y");
    check_fold(m, {{"x", {2, 4, 5, 5}}}, {"y"}, 1);
  }
}

// c_shape {-1}: no C input.
Model gemm_bn(int64_t trans_b, const I64s& c_shape, float alpha, float beta) {
  // A [3, 5], N = 4.
  Model m("gemm_bn");
  m.input("a", {3, 5});
  m.init_rand("w", trans_b ? I64s{4, 5} : I64s{5, 4});
  std::vector<std::string> ins{"a", "w"};
  bool has_c = !(c_shape.size() == 1 && c_shape[0] == -1);
  if (has_c) {
    m.init_rand("c0", c_shape);
    ins.push_back("c0");
  }
  auto* g = m.node("Gemm", "fc1", ins, {"c"});
  attr_int(g, "transB", trans_b);
  attr_float(g, "alpha", alpha);
  attr_float(g, "beta", beta);
  m.batchnorm("bn1", "c", "y", 4);
  m.output("y");
  return m;
}

TEST(FoldBatchNorm, GemmTransB0) {
  check_fold(gemm_bn(0, {4}, 0.5f, 2.f), {{"a", {3, 5}}}, {"y"}, 1);
  check_fold(gemm_bn(0, {-1}, 1.5f, 1.f), {{"a", {3, 5}}}, {"y"}, 1);  // no C
  check_fold(gemm_bn(0, {3, 1}, 1.f, 0.5f), {{"a", {3, 5}}}, {"y"}, 1);
}

TEST(FoldBatchNorm, GemmTransB1) {
  check_fold(gemm_bn(1, {4}, 2.f, 0.25f), {{"a", {3, 5}}}, {"y"}, 1);
  check_fold(gemm_bn(1, {3, 4}, 0.75f, 1.f), {{"a", {3, 5}}}, {"y"}, 1);
  check_fold(gemm_bn(1, {}, 1.f, 3.f), {{"a", {3, 5}}}, {"y"}, 1);  // scalar C
}

TEST(FoldBatchNorm, SharedWeightGetsANewConstant) {
  // conv1 and conv2 share w; only conv1 is followed by a BN. conv2 must still see the original w.
  Model m("shared");
  m.input("x", {1, 3, 6, 6});
  m.init_rand("w", {4, 3, 3, 3});
  m.node("Conv", "conv1", {"x", "w"}, {"c1"});
  m.batchnorm("bn1", "c1", "y1", 4);
  m.node("Conv", "conv2", {"x", "w"}, {"y2"});
  m.output("y1");
  m.output("y2");
  check_fold(m, {{"x", {1, 3, 6, 6}}}, {"y1", "y2"}, 1);

  Graph g = m.import();
  BuildOptions o;
  bind_inputs(g, o);
  infer_and_fold(g, o);
  std::vector<uint8_t> w_before = *g.value(g.find("w")).data;
  EXPECT_EQ(fold_batchnorm(g, o).changes, 1);
  EXPECT_EQ(*g.value(g.find("w")).data, w_before);
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_NE(g.nodes[0].inputs[1], g.find("w"));
  EXPECT_EQ(g.nodes[1].inputs[1], g.find("w"));
  EXPECT_EQ(g.nodes[0].origin, "conv1 + bn1");
  EXPECT_NO_THROW(graph::verify(g, true));
}

TEST(FoldBatchNorm, MatMul2dBecomesGemm) {
  // A 2-D MatMul's channel (its last axis) is the BN's axis 1; the BN's shift needs Gemm's bias.
  Model m("matmul_bn");
  m.input("a", {3, 5});
  m.init_rand("w", {5, 4});
  m.node("MatMul", "mm1", {"a", "w"}, {"c"});
  m.batchnorm("bn1", "c", "y", 4);
  m.output("y");
  check_fold(m, {{"a", {3, 5}}}, {"y"}, 1);
  EXPECT_EQ(step_ops(build(m, true).engine), (std::vector<std::string>{"Gemm"}));
  EXPECT_EQ(step_names(build(m, true).engine), (std::vector<std::string>{"mm1 + bn1"}));
}

TEST(FoldBatchNorm, ChainOfConvBnRelu) {
  Model m("chain");
  m.input("x", {1, 3, 8, 8});
  m.init_rand("w1", {4, 3, 3, 3});
  m.init_rand("w2", {4, 4, 1, 1});
  m.node("Conv", "conv1", {"x", "w1"}, {"c1"});
  m.batchnorm("bn1", "c1", "b1", 4);
  m.node("Relu", "relu1", {"b1"}, {"r1"});
  m.node("Conv", "conv2", {"r1", "w2"}, {"c2"});
  m.batchnorm("bn2", "c2", "y", 4);
  m.output("y");
  check_fold(m, {{"x", {1, 3, 8, 8}}}, {"y"}, 2);
}

// ---- guards: the BN stays ------------------------------------------------------------------------

void expect_no_fold(const Model& m) {
  Built on = build(m, true);
  EXPECT_EQ(on.folds, 0);
  EXPECT_EQ(count(step_ops(on.engine), "BatchNormalization"), 1);
}

TEST(FoldBatchNormGuards, ConvOutputHasOtherConsumers) {
  Model m = conv_bn(true);
  m.node("Relu", "relu", {"c"}, {"r"});
  m.output("r");
  expect_no_fold(m);
  check_fold(m, {{"x", {2, 3, 7, 7}}}, {"y", "r"}, 0);
}

TEST(FoldBatchNormGuards, ConvOutputIsAGraphOutput) {
  Model m = conv_bn(true);
  m.output("c");
  expect_no_fold(m);
  check_fold(m, {{"x", {2, 3, 7, 7}}}, {"y", "c"}, 0);
}

TEST(FoldBatchNormGuards, MatMulChannelIsNotTheBnAxis) {
  // [2,3,5] x [5,3]: the MatMul's channel is axis 2, the BN normalizes axis 1.
  Model m("matmul3d_bn");
  m.input("a", {2, 3, 5});
  m.init_rand("w", {5, 3});
  m.node("MatMul", "mm1", {"a", "w"}, {"c"});
  m.batchnorm("bn1", "c", "y", 3);
  m.output("y");
  expect_no_fold(m);
  check_fold(m, {{"a", {2, 3, 5}}}, {"y"}, 0);
}

TEST(FoldBatchNormGuards, WeightNotConstant) {
  Model m("w_input");
  m.input("x", {2, 3, 7, 7});
  m.input("w", {4, 3, 3, 3});
  m.node("Conv", "conv1", {"x", "w"}, {"c"});
  m.batchnorm("bn1", "c", "y", 4);
  m.output("y");
  expect_no_fold(m);
}

TEST(FoldBatchNormGuards, BiasNotConstant) {
  Model m("b_input");
  m.input("x", {2, 3, 7, 7});
  m.input("b", {4});
  m.init_rand("w", {4, 3, 3, 3});
  m.node("Conv", "conv1", {"x", "w", "b"}, {"c"});
  m.batchnorm("bn1", "c", "y", 4);
  m.output("y");
  expect_no_fold(m);
}

TEST(FoldBatchNormGuards, BnParameterNotConstant) {
  for (const char* param : {"scale", "b", "mean", "var"}) {
    SCOPED_TRACE(param);
    Model m("bn_input");
    m.input("x", {2, 3, 7, 7});
    m.init_rand("w", {4, 3, 3, 3});
    m.node("Conv", "conv1", {"x", "w"}, {"c"});
    for (const char* p : {"scale", "b", "mean", "var"}) {
      std::string name = std::string("bn1.") + p;
      if (std::string(p) == param)
        m.input(name, {4});
      else
        m.init_rand(name, {4}, 0.5f, 1.5f);
    }
    m.batchnorm("bn1", "c", "y", 4, false);
    m.output("y");
    expect_no_fold(m);
  }
}

// Pass-level guards on an inferred graph (dtype, training mode).
Graph inferred(const Model& m) {
  Graph g = m.import();
  BuildOptions o;
  bind_inputs(g, o);
  infer_and_fold(g, o);
  return g;
}

size_t bn_count(const Graph& g) {
  size_t n = 0;
  for (const graph::Node& node : g.nodes) n += node.kind == OpKind::kBatchNormalization;
  return n;
}

TEST(FoldBatchNormGuards, DtypeNotFloat) {
  Graph g = inferred(conv_bn(true));
  // The conv's output (and weights) as a non-float type: left alone.
  g.value(g.find("c")).dtype = DataType::kInt32;
  EXPECT_EQ(fold_batchnorm(g, BuildOptions{}).changes, 0);
  EXPECT_EQ(bn_count(g), 1u);

  Graph g2 = inferred(conv_bn(true));
  g2.value(g2.find("c")).dtype = DataType::kBFloat16;
  EXPECT_EQ(fold_batchnorm(g2, BuildOptions{}).changes, 0);
  EXPECT_EQ(bn_count(g2), 1u);

  Graph g3 = inferred(conv_bn(true));  // the control: untouched, it folds
  EXPECT_EQ(fold_batchnorm(g3, BuildOptions{}).changes, 1);
  EXPECT_EQ(bn_count(g3), 0u);
}

TEST(FoldBatchNormGuards, TrainingMode) {
  Graph g = inferred(conv_bn(true));
  for (graph::Node& n : g.nodes)
    if (n.kind == OpKind::kBatchNormalization) std::get<BatchNormAttrs>(n.attrs).training_mode = 1;
  EXPECT_EQ(fold_batchnorm(g, BuildOptions{}).changes, 0);
  EXPECT_EQ(bn_count(g), 1u);

  // Running mean / var outputs requested: training as well.
  Graph g2 = inferred(conv_bn(true));
  for (graph::Node& n : g2.nodes)
    if (n.kind == OpKind::kBatchNormalization) {
      graph::Value v;
      v.name = "running_mean";
      v.dtype = DataType::kFloat32;
      v.shape = {4};
      v.has_shape = true;
      n.outputs.push_back(g2.add_value(v));
    }
  EXPECT_EQ(fold_batchnorm(g2, BuildOptions{}).changes, 0);
  EXPECT_EQ(bn_count(g2), 1u);
}

}  // namespace
}  // namespace kiln::passes
