// Tests for the fuse-gelu pass: GELU spelled out with Erf or Tanh becomes one Gelu node (each way
// exporters associate the products), with numeric parity against the pass disabled; every guard
// leaves the ops in place.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "pass_test_util.h"

namespace kiln::passes {

using namespace kiln::build;  // build_engine, BuildOptions: the passes run inside a build
namespace {

using namespace kiln::test;
using Strings = std::vector<std::string>;

const char* kPass = "fuse-gelu";

enum class Tail { kXaHalf, kXTimesAHalf, kHalfXTimesA };

struct GeluOptions {
  bool tanh = false;
  bool erf_by_mul = false;  // x * (1/sqrt 2) instead of x / sqrt 2
  float root = static_cast<float>(std::numbers::sqrt2);
  float half = 0.5f;
  Tail tail = Tail::kXaHalf;
  I64s one_shape{};  // the shape of the constant 1
};

// x [3,16] -> MatMul(w) -> h -> [spelled-out GELU of h] -> y.
PassModel gelu(const GeluOptions& o) {
  PassModel m("gelu");
  m.input("x", {3, 16});
  m.init_rand("w", {16, 16});
  size_t ones = 1;
  for (int64_t d : o.one_shape) ones *= static_cast<size_t>(d);
  m.init_f("one", o.one_shape, std::vector<float>(ones, 1.f));
  m.init_f("half", {}, {o.half});
  m.node("MatMul", "fc", {"x", "w"}, {"h"});
  if (!o.tanh) {
    if (o.erf_by_mul) {
      m.init_f("inv_root", {}, {1.f / o.root});
      m.node("Mul", "scale", {"inv_root", "h"}, {"hs"});
    } else {
      m.init_f("root", {}, {o.root});
      m.node("Div", "scale", {"h", "root"}, {"hs"});
    }
    m.node("Erf", "erf", {"hs"}, {"e"});
  } else {
    m.init_f("three", {}, {3.f});
    m.init_f("k", {}, {0.044715f});
    m.init_f("c", {}, {static_cast<float>(std::sqrt(2.0 / std::numbers::pi))});
    m.node("Pow", "cube", {"h", "three"}, {"h3"});
    m.node("Mul", "k_mul", {"k", "h3"}, {"kh3"});
    m.node("Add", "inner", {"h", "kh3"}, {"in"});
    m.node("Mul", "c_mul", {"in", "c"}, {"hs"});
    m.node("Tanh", "tanh", {"hs"}, {"e"});
  }
  m.node("Add", "plus_one", {"one", "e"}, {"a"});
  switch (o.tail) {
    case Tail::kXaHalf:
      m.node("Mul", "xa", {"h", "a"}, {"xa"});
      m.node("Mul", "halve", {"xa", "half"}, {"y"});
      break;
    case Tail::kXTimesAHalf:
      m.node("Mul", "ahalf", {"half", "a"}, {"ah"});
      m.node("Mul", "times_x", {"ah", "h"}, {"y"});
      break;
    case Tail::kHalfXTimesA:
      m.node("Mul", "xhalf", {"h", "half"}, {"xh"});
      m.node("Mul", "times_a", {"a", "xh"}, {"y"});
      break;
  }
  m.output("y");
  return m;
}

TEST(FuseGelu, ErfForm) {
  Built on = check_pass(gelu({}), kPass, 1, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"MatMul", "Gelu"}));
  EXPECT_EQ(step_names(on.engine)[1], "scale + erf + plus_one + xa + halve");
  EXPECT_EQ(on.detail, "Gelu 1");
}

TEST(FuseGelu, TanhForm) {
  GeluOptions o;
  o.tanh = true;
  Built on = check_pass(gelu(o), kPass, 1, {"y"});
  EXPECT_EQ(step_ops(on.engine), (Strings{"MatMul", "Gelu"}));
  EXPECT_EQ(on.detail, "Gelu tanh 1");
  EXPECT_NE(Engine::from_bytes(on.engine)->summary().steps[1].attrs.find("tanh"), std::string::npos);
}

TEST(FuseGelu, EveryAssociationAndScaleForm) {
  for (Tail t : {Tail::kXaHalf, Tail::kXTimesAHalf, Tail::kHalfXTimesA})
    for (bool by_mul : {false, true})
      for (bool tanh : {false, true}) {
        SCOPED_TRACE(std::to_string(static_cast<int>(t)) + " " + std::to_string(by_mul) + " " + std::to_string(tanh));
        GeluOptions o;
        o.tail = t;
        o.erf_by_mul = by_mul;
        o.tanh = tanh;
        Built on = check_pass(gelu(o), kPass, 1, {"y"});
        EXPECT_EQ(step_ops(on.engine), (Strings{"MatMul", "Gelu"}));
      }
}

// ---- guards: nothing fuses -------------------------------------------------------------------

void expect_kept(const PassModel& m, const Strings& outputs = {"y"}) {
  Built on = check_pass(m, kPass, 0, outputs);
  EXPECT_EQ(count_of(step_ops(on.engine), "Gelu"), 0);
}

TEST(FuseGeluGuards, WrongConstants) {
  GeluOptions root;
  root.root = 1.5f;
  expect_kept(gelu(root));
  GeluOptions half;
  half.half = 0.25f;
  for (Tail t : {Tail::kXaHalf, Tail::kXTimesAHalf, Tail::kHalfXTimesA}) {
    half.tail = t;
    expect_kept(gelu(half));
  }
  PassModel k = gelu({.tanh = true});
  for (auto& t : *k.g()->mutable_initializer())
    if (t.name() == "k") t.set_float_data(0, 0.05f);
  expect_kept(k);
}

TEST(FuseGeluGuards, ConstantThatBroadcasts) {
  GeluOptions o;
  o.one_shape = {1, 1, 1};  // one element, but (e + 1) is [1,3,16]
  expect_kept(gelu(o));
}

TEST(FuseGeluGuards, IntermediateReadElsewhere) {
  for (const char* v : {"hs", "e", "a", "xa"}) {
    SCOPED_TRACE(v);
    PassModel m = gelu({});
    m.node("Neg", "other", {v}, {"z"});
    m.output("z");
    expect_kept(m, {"y", "z"});
  }
  PassModel out = gelu({});
  out.output("e");
  expect_kept(out, {"y", "e"});
}

TEST(FuseGeluGuards, TailOnAnotherValue) {
  // (e + 1) * 0.5 multiplied by something other than the Erf's input.
  GeluOptions o;
  o.tail = Tail::kXTimesAHalf;
  PassModel m = gelu(o);
  m.input("other", {3, 16});
  for (auto& n : *m.g()->mutable_node())
    if (n.name() == "times_x") n.set_input(1, "other");
  expect_kept(m);
}

TEST(FuseGeluGuards, NotFloat) {
  PassModel m = gelu({});
  graph::Graph g = inferred(m);
  for (graph::Value& v : g.values)
    if (v.dtype == DataType::kFloat32) v.dtype = DataType::kFloat16;
  EXPECT_EQ(fuse_gelu(g, BuildOptions{}).changes, 0);
  graph::Graph control = inferred(m);
  EXPECT_EQ(fuse_gelu(control, BuildOptions{}).changes, 1);
}

}  // namespace
}  // namespace kiln::passes
