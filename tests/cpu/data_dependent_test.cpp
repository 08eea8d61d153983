// Data-dependent shapes (decision 56) on the CPU: tests/cpu/data_dependent_cases.h's runs of one
// context, and what the builder must refuse, naming the node.
#include <gtest/gtest.h>

#include "data_dependent_cases.h"

namespace kiln {
namespace {

using namespace kiln::test;

TEST(DataDependent, NonZeroShapesFollowEachRunOnOneContext) { check_nonzero_runs(*build_for(nonzero_model(), "cpu")); }

TEST(DataDependent, NonMaxSuppressionKeepsMoreAfterFewerAndNone) { check_nms_runs(*build_for(nms_model(), "cpu")); }

void expect_build_error(const OnnxModel& m, const std::string& needle) {
  try {
    graph::Graph g = m.import();
    (void)build::build_engine(g, build::BuildOptions{});
    ADD_FAILURE() << "built, expected an error containing: " << needle;
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find(needle), std::string::npos) << err.what();
  }
}

TEST(DataDependent, ShapesTakenAsValuesFollowEachRun) {
  check_shape_value_runs(*build_for(shape_value_model(), "cpu"));
}

TEST(DataDependent, IfOnTheDataTakesEachBranchOnOneContext) {
  check_if_on_data_runs(*build_for(if_on_data_model(), "cpu"));
}

TEST(DataDependent, SqueezeWithoutAxesIsRefused) {
  OnnxModel squeeze("squeeze_nonzero");
  squeeze.input("x", {1, 4});
  squeeze.node("NonZero", "nz", {"x"}, {"idx"});
  squeeze.node("Squeeze", "sq", {"idx"}, {"y"});
  squeeze.output("y");
  expect_build_error(squeeze, "node 'sq' (Squeeze): squeezes 'idx' without axes");
}

TEST(DataDependent, IfBranchesOfDifferentRanksOnTheDataAreRefused) {
  OnnxModel m = if_on_data_model();
  // The else branch gives [1, 2] instead of [2]: no one bound holds both.
  onnx::GraphProto* b = m.g()->mutable_node(2)->mutable_attribute(1)->mutable_g();
  onnx::NodeProto* u = b->add_node();
  u->set_op_type("Unsqueeze");
  u->add_input("head");
  u->add_input("start");
  u->add_output("head_row");
  b->mutable_output(0)->set_name("head_row");
  expect_build_error(m, "has rank 1 in the then branch and 2 in the else branch");
}

TEST(DataDependent, IfOnTheDataWithSameShapedBranchesBecomesAWhere) {
  OnnxModel m = if_on_data_model();
  // The else branch gives x + 1: the same shape as the then branch's, so Where picks on the
  // device and nothing after it depends on the condition's value.
  onnx::NodeProto* e = m.g()->mutable_node(2)->mutable_attribute(1)->mutable_g()->mutable_node(0);
  e->set_op_type("Add");
  e->clear_input();
  e->add_input("x");
  e->add_input("one_f");
  graph::Graph g = m.import();
  const auto engine = Engine::from_bytes(build::build_engine(g, build::BuildOptions{}), "if_where");
  bool where = false;
  for (const graph::Node& n : g.nodes) {
    EXPECT_NE(n.kind, OpKind::kSelectBranch) << n.name;
    where |= n.kind == OpKind::kWhere;
  }
  EXPECT_TRUE(where);
  auto ctx = engine->create_context(1);
  for (float peak : {3.f, 0.5f}) {
    const std::vector<float> x = {0.25f, peak, -0.5f, 0.75f, 0.f, 1.f};
    ctx->set_input("x", x.data(), x.size() * 4);
    ctx->run();
    std::vector<float> y(6);
    ASSERT_EQ(ctx->output_shape("y"), (std::vector<int64_t>{6}));
    std::memcpy(y.data(), ctx->output("y").data(), y.size() * 4);
    for (size_t i = 0; i < 6; ++i)
      EXPECT_EQ(y[i], peak > 1.f ? 2 * x[i] : x[i] + 1.f) << "peak " << peak << " at " << i;
  }
}

}  // namespace
}  // namespace kiln
