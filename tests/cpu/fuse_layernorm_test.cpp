// Tests for the fuse-layernorm pass: layer normalization spelled out in ReduceMean / Sub / Pow /
// Add / Sqrt / Div (/ Mul / Add) becomes one LayerNormalization, with numeric parity against the
// pass disabled; every guard leaves the ops in place.
#include <gtest/gtest.h>

#include "pass_test_util.h"

namespace kiln::passes {

using namespace kiln::build;  // build_engine, BuildOptions: the passes run inside a build
namespace {

using namespace kiln::test;
using Strings = std::vector<std::string>;

const char* kPass = "fuse-layernorm";

struct LnOptions {
  I64s x_shape{2, 5, 8};
  I64s axes{-1};
  I64s var_axes{};  // empty: the same as axes
  bool square_by_mul = false;
  float exponent = 2.f;
  float eps = 1e-5f;
  I64s gamma_shape{8};  // empty: no Mul
  I64s beta_shape{8};   // empty: no Add
  bool constants_first = false;
  int64_t keepdims = 1;
};

// x -> [the spelled-out layer normalization] -> y, opset 17 (ReduceMean axes as an attribute).
PassModel layernorm(const LnOptions& o) {
  PassModel m("ln", 13);
  m.input("x", o.x_shape);
  m.init_f("two", {}, {o.exponent});
  m.init_f("eps", {}, {o.eps});
  auto mean = [&](const std::string& name, const std::string& in, const std::string& out, const I64s& axes) {
    auto* n = m.node("ReduceMean", name, {in}, {out});
    attr_ints(n, "axes", axes);
    attr_int(n, "keepdims", o.keepdims);
  };
  mean("mean1", "x", "mu", o.axes);
  m.node("Sub", "sub1", {"x", "mu"}, {"d"});
  if (o.square_by_mul)
    m.node("Mul", "sq1", {"d", "d"}, {"d2"});
  else
    m.node("Pow", "pow1", {"d", "two"}, {"d2"});
  mean("mean2", "d2", "var", o.var_axes.empty() ? o.axes : o.var_axes);
  m.node("Add", "add_eps", o.constants_first ? Strings{"eps", "var"} : Strings{"var", "eps"}, {"ve"});
  m.node("Sqrt", "sqrt1", {"ve"}, {"sd"});
  std::string last = "n";
  m.node("Div", "div1", {"d", "sd"}, {last});
  if (!o.gamma_shape.empty()) {
    m.init_rand("gamma", o.gamma_shape, 0.5f, 2.f);
    m.node("Mul", "mul_gamma", o.constants_first ? Strings{"gamma", last} : Strings{last, "gamma"}, {"m"});
    last = "m";
  }
  if (!o.beta_shape.empty()) {
    m.init_rand("beta", o.beta_shape);
    m.node("Add", "add_beta", o.constants_first ? Strings{"beta", last} : Strings{last, "beta"}, {"b"});
    last = "b";
  }
  m.node("Identity", "out", {last}, {"y"});
  m.output("y");
  return m;
}

TEST(FuseLayerNorm, LastAxis) {
  Built on = check_pass(layernorm({}), kPass, 1, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"LayerNormalization"}));
  EXPECT_EQ(step_names(on.engine),
            (Strings{"mean1 + sub1 + pow1 + mean2 + add_eps + sqrt1 + div1 + mul_gamma + add_beta"}));
  EXPECT_EQ(on.detail, "LayerNormalization 1");
}

TEST(FuseLayerNorm, Variants) {
  LnOptions two_axes;  // normalized over the last two axes, gamma [5,8], beta [1,1,8]
  two_axes.axes = {1, 2};
  two_axes.var_axes = {-2, -1};
  two_axes.gamma_shape = {5, 8};
  two_axes.beta_shape = {1, 1, 8};
  LnOptions mul_square;  // d * d, operands swapped, no beta
  mul_square.square_by_mul = true;
  mul_square.constants_first = true;
  mul_square.beta_shape = {};
  LnOptions bare;  // no gamma, no beta
  bare.gamma_shape = {};
  bare.beta_shape = {};
  LnOptions only_beta;
  only_beta.gamma_shape = {};
  for (const LnOptions& o : {two_axes, mul_square, bare, only_beta}) {
    Built on = check_pass(layernorm(o), kPass, 1, {"y"});
    EXPECT_EQ(step_ops(on.engine), (Strings{"LayerNormalization"}));
  }
}

TEST(FuseLayerNorm, GammaOfOnesRemovedFirst) {
  // remove-noop takes out Mul by ones; the LayerNormalization gets ones back.
  PassModel m = layernorm({});
  for (auto& t : *m.g()->mutable_initializer())
    if (t.name() == "gamma")
      for (int i = 0; i < t.float_data_size(); ++i) t.set_float_data(i, 1.f);
  Built on = check_pass(m, kPass, 1, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"LayerNormalization"}));
}

// ---- guards: nothing fuses -------------------------------------------------------------------

void expect_kept(const PassModel& m, const Strings& outputs = {"y"}) {
  Built on = check_pass(m, kPass, 0, outputs);
  EXPECT_EQ(count_of(step_ops(on.engine), "LayerNormalization"), 0);
  EXPECT_EQ(count_of(step_ops(on.engine), "ReduceMean"), 2);
}

TEST(FuseLayerNormGuards, AxesNotTrailingOrDifferent) {
  LnOptions middle;
  middle.axes = {1};
  middle.gamma_shape = {};
  middle.beta_shape = {};
  expect_kept(layernorm(middle));
  LnOptions gap;
  gap.axes = {0, 2};
  gap.gamma_shape = {};
  gap.beta_shape = {};
  expect_kept(layernorm(gap));
  LnOptions differ;
  differ.axes = {-1};
  differ.var_axes = {1, 2};
  expect_kept(layernorm(differ));
}

TEST(FuseLayerNormGuards, KeepdimsZero) {
  // x [8,8]: the row means [8] broadcast along the last axis, so x[i][j] - mean[j]: not a layer
  // normalization, though every shape fits.
  LnOptions o;
  o.x_shape = {8, 8};
  o.keepdims = 0;
  expect_kept(layernorm(o));
}

TEST(FuseLayerNormGuards, ExponentNotTwo) {
  LnOptions o;
  o.exponent = 3.f;
  expect_kept(layernorm(o));
}

TEST(FuseLayerNormGuards, EpsNotAConstantScalar) {
  PassModel m = layernorm({});
  for (auto& n : *m.g()->mutable_node())
    if (n.name() == "add_eps") n.set_input(1, "eps_in");
  m.input("eps_in", {1});
  expect_kept(m);
}

TEST(FuseLayerNormGuards, IntermediateReadElsewhere) {
  for (const char* v : {"mu", "d", "var", "sd"}) {
    SCOPED_TRACE(v);
    PassModel m = layernorm({});
    m.node("Neg", "other", {v}, {"z"});
    m.output("z");
    expect_kept(m, {"y", "z"});
  }
  PassModel out = layernorm({});
  out.output("d2");
  expect_kept(out, {"y", "d2"});
}

TEST(FuseLayerNormGuards, GammaNotPerNormalizedAxis) {
  // gamma [5,1] varies along axis 1, which is not normalized: the Mul and Add stay outside.
  LnOptions o;
  o.gamma_shape = {5, 1};
  Built on = check_pass(layernorm(o), kPass, 1, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"LayerNormalization", "Mul", "Add"}));
  // gamma not constant: the same.
  PassModel m = layernorm({});
  for (auto& n : *m.g()->mutable_node())
    if (n.name() == "mul_gamma") n.set_input(1, "gamma_in");
  m.input("gamma_in", {8});
  Built on2 = check_pass(m, kPass, 1, {"y"});
  EXPECT_EQ(step_ops(on2.engine), (Strings{"LayerNormalization", "Mul", "Add"}));
}

TEST(FuseLayerNormGuards, NotFloat32) {
  PassModel m = layernorm({});
  graph::Graph g = inferred(m);
  for (graph::Value& v : g.values)
    if (v.dtype == DataType::kFloat32) v.dtype = DataType::kFloat64;
  EXPECT_EQ(fuse_layernorm(g, BuildOptions{}).changes, 0);
  graph::Graph control = inferred(m);
  EXPECT_EQ(fuse_layernorm(control, BuildOptions{}).changes, 1);
}

}  // namespace
}  // namespace kiln::passes
