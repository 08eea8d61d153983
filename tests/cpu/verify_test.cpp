// Tests for graph::verify: every IR invariant it promises to check, and that one message lists every
// problem found.
#include <gtest/gtest.h>

#include <string>

#include "graph/graph.h"

namespace kiln::graph {
namespace {

ValueId add_activation(Graph& g, const std::string& name, std::vector<int64_t> shape = {2, 3}) {
  Value v;
  v.name = name;
  v.shape = std::move(shape);
  v.has_shape = true;
  return g.add_value(std::move(v));
}

ValueId add_input(Graph& g, const std::string& name) {
  ValueId id = add_activation(g, name);
  g.inputs.push_back(id);
  return id;
}

void add_node(Graph& g, const std::string& name, OpKind kind, std::vector<ValueId> ins, std::vector<ValueId> outs) {
  g.nodes.push_back(Node{name, kind, default_attrs(kind), std::move(ins), std::move(outs), name});
}

std::vector<uint8_t> f32_bytes(size_t n) { return std::vector<uint8_t>(n * 4, 0); }

// x -> Relu -> a -> Add(a, c) -> y
Graph valid_graph() {
  Graph g;
  g.name = "g";
  ValueId x = add_input(g, "x");
  ValueId c = g.add_constant("c", DataType::kFloat32, {2, 3}, f32_bytes(6));
  ValueId a = add_activation(g, "a");
  ValueId y = add_activation(g, "y");
  add_node(g, "relu", OpKind::kRelu, {x}, {a});
  add_node(g, "add", OpKind::kAdd, {a, c}, {y});
  g.outputs.push_back(y);
  return g;
}

std::string verify_error(const Graph& g, bool require_shapes = false) {
  try {
    verify(g, require_shapes);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& msg, const std::string& part) { return msg.find(part) != std::string::npos; }

TEST(Verify, ValidGraphPasses) {
  Graph g = valid_graph();
  EXPECT_NO_THROW(verify(g, true));
  EXPECT_NO_THROW(verify(g, false));
}

TEST(Verify, OutOfOrderNodes) {
  Graph g = valid_graph();
  std::swap(g.nodes[0], g.nodes[1]);  // add reads 'a' before relu writes it
  std::string e = verify_error(g);
  EXPECT_TRUE(has(e, "graph 'g' is not well formed (1 problem)")) << e;
  EXPECT_TRUE(has(e, "node 'add' (Add) reads 'a' before it is computed")) << e;
}

TEST(Verify, ValueNeverProducedIsReadBeforeComputed) {
  Graph g = valid_graph();
  ValueId ghost = add_activation(g, "ghost");
  g.nodes[1].inputs[1] = ghost;
  std::string e = verify_error(g);
  EXPECT_TRUE(has(e, "node 'add' (Add) reads 'ghost' before it is computed")) << e;
}

TEST(Verify, ValueDefinedTwice) {
  Graph g = valid_graph();
  add_node(g, "relu2", OpKind::kRelu, {g.find("x")}, {g.find("a")});
  std::string e = verify_error(g);
  EXPECT_TRUE(has(e, "node 'relu2' (Relu) writes 'a', defined already")) << e;
}

TEST(Verify, NodeWritingAGraphInputOrConstant) {
  Graph g = valid_graph();
  add_node(g, "over_in", OpKind::kRelu, {g.find("a")}, {g.find("x")});
  add_node(g, "over_c", OpKind::kRelu, {g.find("a")}, {g.find("c")});
  std::string e = verify_error(g);
  EXPECT_TRUE(has(e, "node 'over_in' (Relu) writes 'x', defined already")) << e;
  EXPECT_TRUE(has(e, "node 'over_c' (Relu) writes 'c', defined already")) << e;
}

TEST(Verify, WrongArity) {
  Graph g = valid_graph();
  g.nodes[0].inputs.push_back(g.find("c"));  // Relu takes exactly one input
  g.nodes[1].inputs.pop_back();              // Add takes exactly two
  std::string e = verify_error(g);
  EXPECT_TRUE(has(e, "node 'relu' (Relu) has 2 inputs")) << e;
  EXPECT_TRUE(has(e, "node 'add' (Add) has 1 inputs")) << e;
  EXPECT_TRUE(has(e, "(2 problems)")) << e;
}

TEST(Verify, WrongOutputCount) {
  Graph g = valid_graph();
  ValueId extra = add_activation(g, "extra");
  g.nodes[0].outputs.push_back(extra);
  std::string e = verify_error(g);
  EXPECT_TRUE(has(e, "node 'relu' (Relu) has 2 outputs")) << e;
}

TEST(Verify, MissingRequiredInput) {
  Graph g = valid_graph();
  g.nodes[1].inputs[0] = kNoValue;
  std::string e = verify_error(g);
  EXPECT_TRUE(has(e, "node 'add' (Add) lacks required input 0")) << e;
}

TEST(Verify, InputIdThatDoesNotExist) {
  Graph g = valid_graph();
  g.nodes[1].inputs[1] = 999;
  std::string e = verify_error(g);
  EXPECT_TRUE(has(e, "node 'add' (Add) input 1 does not exist")) << e;
}

TEST(Verify, WrongAttrsAlternative) {
  Graph g = valid_graph();
  g.nodes[0].attrs = AlphaAttrs{};  // Relu has NoAttrs
  g.nodes[1].attrs = GemmAttrs{};
  std::string e = verify_error(g);
  EXPECT_TRUE(has(e, "node 'relu' (Relu) carries attributes of another op kind")) << e;
  EXPECT_TRUE(has(e, "node 'add' (Add) carries attributes of another op kind")) << e;
}

TEST(Verify, ConstantBytesDoNotMatchShape) {
  Graph g = valid_graph();
  g.add_constant("short", DataType::kFloat32, {2, 2}, f32_bytes(3));
  g.add_constant("long64", DataType::kInt64, {3}, std::vector<uint8_t>(25, 0));
  std::string e = verify_error(g);
  EXPECT_TRUE(has(e, "constant 'short' holds 12 bytes, its shape [2,2] of float32 needs 16")) << e;
  EXPECT_TRUE(has(e, "constant 'long64' holds 25 bytes, its shape [3] of int64 needs 24")) << e;
}

TEST(Verify, ConstantWithoutStaticShape) {
  Graph g = valid_graph();
  ValueId c = g.add_constant("sym", DataType::kFloat32, {-1, 2}, f32_bytes(2));
  (void)c;
  std::string e = verify_error(g);
  EXPECT_TRUE(has(e, "constant 'sym' has no static shape")) << e;
}

TEST(Verify, GraphOutputNeverComputed) {
  Graph g = valid_graph();
  ValueId z = add_activation(g, "z");
  g.outputs.push_back(z);
  std::string e = verify_error(g);
  EXPECT_TRUE(has(e, "graph output 'z' is never computed")) << e;
  g.outputs.back() = 1234;
  e = verify_error(g);
  EXPECT_TRUE(has(e, "graph output id 1234 does not exist")) << e;
}

TEST(Verify, RequireShapesFlagsOutputsWithoutStaticShape) {
  Graph g = valid_graph();
  g.value(g.find("a")).shape = {-1, 3};
  EXPECT_NO_THROW(verify(g, false));
  std::string e = verify_error(g, true);
  EXPECT_TRUE(has(e, "node 'relu' (Relu) output 'a' has no static shape")) << e;
  g.value(g.find("a")).shape = {2, 3};
  g.value(g.find("y")).has_shape = false;
  e = verify_error(g, true);
  EXPECT_TRUE(has(e, "node 'add' (Add) output 'y' has no static shape")) << e;
}

TEST(Verify, SeveralProblemsInOneMessage) {
  Graph g = valid_graph();
  g.name = "broken";
  std::swap(g.nodes[0], g.nodes[1]);                                      // 1: out of order
  g.nodes[1].attrs = AlphaAttrs{};                                        // 2: relu's attrs
  add_node(g, "dup", OpKind::kSigmoid, {g.find("x")}, {g.find("y")});     // 3: y written twice
  g.add_constant("bad", DataType::kInt64, {2}, std::vector<uint8_t>(8));  // 4: 8 bytes, 16 needed
  g.outputs.push_back(add_activation(g, "lost"));                         // 5: never computed
  std::string e = verify_error(g);
  EXPECT_TRUE(has(e, "graph 'broken' is not well formed (5 problems):")) << e;
  EXPECT_TRUE(has(e, "\n  - node 'add' (Add) reads 'a' before it is computed")) << e;
  EXPECT_TRUE(has(e, "\n  - node 'relu' (Relu) carries attributes of another op kind")) << e;
  EXPECT_TRUE(has(e, "\n  - node 'dup' (Sigmoid) writes 'y', defined already")) << e;
  EXPECT_TRUE(has(e, "\n  - constant 'bad' holds 8 bytes, its shape [2] of int64 needs 16")) << e;
  EXPECT_TRUE(has(e, "\n  - graph output 'lost' is never computed")) << e;
}

TEST(Verify, OmittedOptionalInputAndOutputAreFine) {
  Graph g;
  g.name = "opt";
  ValueId x = add_input(g, "x");
  ValueId y = add_activation(g, "y");
  // Clip(x, <none>, <none>) and Dropout with no mask output.
  add_node(g, "clip", OpKind::kClip, {x, kNoValue, kNoValue}, {y});
  ValueId z = add_activation(g, "z");
  add_node(g, "drop", OpKind::kDropout, {y}, {z, kNoValue});
  g.outputs.push_back(z);
  EXPECT_NO_THROW(verify(g, true));
}

}  // namespace
}  // namespace kiln::graph
