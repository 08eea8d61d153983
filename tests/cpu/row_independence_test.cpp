// The builder's row analysis (build/row_independence.h): which graphs keep the rows of a ranged
// batch dimension apart, so that a range engine may pad a request to its bucket; each case after
// bind-inputs and infer-and-fold, as the builder runs it. Refusals must name the node.
#include "build/row_independence.h"

#include <gtest/gtest.h>

#include <functional>

#include "pass_test_util.h"

namespace kiln::test {
namespace {

// The model's graph with static shapes, and the analysis with input `x`'s axis `axis` ranged.
build::RowAxes analyse(const OnnxModel& m, int axis = 0, const std::string& x = "x") {
  graph::Graph g = m.import();
  build::BuildOptions o;
  passes::bind_inputs(g, o);
  passes::infer_and_fold(g, o);
  return build::row_axes(g, {{g.find(x), axis}});
}

int output_axis(const OnnxModel& m, const build::RowAxes& r, const std::string& name = "y") {
  graph::Graph g = m.import();
  for (const auto& [id, a] : r.outputs)
    if (g.value(id).name == name) return a;
  return -2;
}

// A classifier: Conv, BatchNorm, Relu, MaxPool, Flatten, Gemm, Softmax along the classes.
TEST(RowIndependence, ClassifierKeepsRowsApart) {
  PassModel m("classifier");
  m.input("x", {4, 3, 8, 8});
  m.init_rand("w", {8, 3, 3, 3});
  m.init_rand("scale", {8});
  m.init_rand("bias", {8});
  m.init_rand("mean", {8});
  m.init_rand("var", {8}, 0.5f, 1.5f);
  m.init_rand("fc", {10, 128});
  m.init_rand("fcb", {10});
  attr_ints(m.node("Conv", "conv", {"x", "w"}, {"c"}), "pads", {1, 1, 1, 1});
  m.node("BatchNormalization", "bn", {"c", "scale", "bias", "mean", "var"}, {"b"});
  m.node("Relu", "relu", {"b"}, {"r"});
  auto* pool = m.node("MaxPool", "pool", {"r"}, {"p"});
  attr_ints(pool, "kernel_shape", {2, 2});
  attr_ints(pool, "strides", {2, 2});
  m.node("Flatten", "flat", {"p"}, {"f"});
  attr_int(m.node("Gemm", "fc", {"f", "fc", "fcb"}, {"g"}), "transB", 1);
  m.node("Softmax", "softmax", {"g"}, {"y"});
  m.output("y");
  const build::RowAxes r = analyse(m);
  EXPECT_EQ(r.why_not, "");
  EXPECT_EQ(output_axis(m, r), 0);
}

// Rows moved by a Transpose and a Reshape that keeps them whole; a reduction and a Softmax along
// other axes.
TEST(RowIndependence, TransposeReshapeAndReductionsFollowTheRows) {
  PassModel m("moves");
  m.input("x", {4, 6, 5});
  m.init_i64("shape", {3}, {5, 2, -1});
  m.init_i64("axes", {1}, {2});
  attr_ints(m.node("Transpose", "t", {"x"}, {"t"}), "perm", {2, 0, 1});  // rows on axis 1: [5, 4, 6]
  m.node("Reshape", "r", {"t", "shape"}, {"r"});                         // [5, 2, 12]: rows merged
  m.output("r");
  const build::RowAxes merged = analyse(m);
  EXPECT_NE(merged.why_not.find("node 'r' (Reshape)"), std::string::npos) << merged.why_not;

  PassModel k("keeps");
  k.input("x", {4, 6, 5});
  k.init_i64("shape", {3}, {5, 4, -1});
  k.init_i64("axes", {1}, {2});
  attr_ints(k.node("Transpose", "t", {"x"}, {"t"}), "perm", {2, 0, 1});         // [5, 4, 6]
  k.node("Reshape", "r", {"t", "shape"}, {"r"});                                // [5, 4, 6]
  attr_int(k.node("ReduceMean", "mean", {"r", "axes"}, {"m"}), "keepdims", 0);  // [5, 4]
  attr_int(k.node("Softmax", "s", {"m"}, {"y"}), "axis", 0);
  k.output("y");
  const build::RowAxes r = analyse(k);
  EXPECT_EQ(r.why_not, "");
  EXPECT_EQ(output_axis(k, r), 1);
}

// Each of these mixes rows, and the refusal names its node.
TEST(RowIndependence, OpsAlongTheRowsAreRefused) {
  struct Case {
    std::string op, why;
    std::function<void(PassModel&)> add;
  };
  const std::vector<Case> cases = {
      {"ReduceSum", "reduces along the rows",  // exp(0) = 1 in the padded rows: the sum counts them
       [](PassModel& m) {
         m.init_i64("axes", {1}, {0});
         m.node("Exp", "e", {"x"}, {"e"});
         m.node("ReduceSum", "n", {"e", "axes"}, {"y"});
       }},
      {"Softmax", "works along the rows",
       [](PassModel& m) { attr_int(m.node("Softmax", "n", {"x"}, {"y"}), "axis", 0); }},
      {"Concat", "which has none",
       [](PassModel& m) {
         m.init_rand("c", {4, 6});
         attr_int(m.node("Concat", "n", {"x", "c"}, {"y"}), "axis", 1);
       }},
      {"Add", "differs from row to row",
       [](PassModel& m) {
         m.init_rand("c", {4, 6});  // a constant with one row per batch entry
         m.node("Add", "n", {"x", "c"}, {"y"});
       }},
      {"MatMul", "contracts along the rows",
       [](PassModel& m) {
         m.node("Exp", "e", {"x"}, {"e"});        // padded rows hold 1, not 0
         m.node("Transpose", "t", {"e"}, {"t"});  // [6, 4]: rows on axis 1, contracted below
         m.init_rand("w", {4, 3});
         m.node("MatMul", "n", {"t", "w"}, {"y"});
       }},
      {"ArgMax", "reduces along the rows",
       [](PassModel& m) { attr_int(m.node("ArgMax", "n", {"x"}, {"y"}), "axis", 0); }},
      {"CumSum", "no rule",
       [](PassModel& m) {
         m.init_i64("axis", {}, {1});
         m.node("CumSum", "n", {"x", "axis"}, {"y"});
       }},
  };
  for (const Case& c : cases) {
    PassModel m("refused");
    m.input("x", {4, 6});
    c.add(m);
    m.output("y");
    const build::RowAxes r = analyse(m);
    EXPECT_NE(r.why_not.find("node 'n'"), std::string::npos) << c.op << ": " << r.why_not;
    EXPECT_NE(r.why_not.find(c.why), std::string::npos) << c.op << ": " << r.why_not;
  }
}

// A constant whose rows are all equal (a bias repeated per row) does not vary from row to row.
TEST(RowIndependence, ConstantsWithEqualRowsAreFine) {
  PassModel m("bias");
  m.input("x", {4, 3});
  auto* t = m.g()->add_initializer();
  t->set_name("c");
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(4);
  t->add_dims(3);
  for (int r = 0; r < 4; ++r)
    for (float v : {0.5f, -1.f, 2.f}) t->add_float_data(v);
  m.node("Mul", "n", {"x", "c"}, {"y"});
  m.output("y");
  EXPECT_EQ(analyse(m).why_not, "");
}

// Zero padding adds nothing to a sum, nor to a product contracted along the rows.
TEST(RowIndependence, SumsOverZeroPaddingAreFine) {
  PassModel m("sums");
  m.input("x", {4, 6});
  m.init_i64("axes", {1}, {0});
  m.init_rand("w", {4, 3});
  m.node("ReduceSum", "s", {"x", "axes"}, {"y"});
  m.node("Transpose", "t", {"x"}, {"t"});
  m.node("MatMul", "mm", {"t", "w"}, {"z"});
  m.output("y");
  m.output("z");
  const build::RowAxes r = analyse(m);
  EXPECT_EQ(r.why_not, "");
  EXPECT_EQ(output_axis(m, r, "y"), -1);
  EXPECT_EQ(output_axis(m, r, "z"), -1);
}

// Self-attention over x[1, S, 8] with a padding mask [1, S] (1: a token, 0: padding) as Hugging
// Face writes it: (1 - mask) * -10000 added to the scores. Padding x and the mask with zeros
// leaves the real positions' outputs alone: the padded keys are masked, the padded queries sliced.
PassModel attention(float mask_scale) {
  PassModel m("attention");
  m.input("x", {1, 6, 8});
  m.input("mask", {1, 6}, onnx::TensorProto::INT64);
  for (const char* w : {"wq", "wk", "wv"}) m.init_rand(w, {8, 8});
  m.init_f("one", {}, {1.f});
  m.init_f("scale", {}, {mask_scale});
  m.init_i64("unsq", {1}, {1});
  m.node("MatMul", "q", {"x", "wq"}, {"q"});
  m.node("MatMul", "k", {"x", "wk"}, {"k"});
  m.node("MatMul", "v", {"x", "wv"}, {"v"});
  attr_ints(m.node("Transpose", "kt", {"k"}, {"kt"}), "perm", {0, 2, 1});
  m.node("MatMul", "scores", {"q", "kt"}, {"s"});  // [1, S, S]
  attr_int(m.node("Cast", "cast", {"mask"}, {"mf"}), "to", onnx::TensorProto::FLOAT);
  m.node("Sub", "inv", {"one", "mf"}, {"inv"});
  m.node("Mul", "neg", {"inv", "scale"}, {"add"});
  m.node("Unsqueeze", "u", {"add", "unsq"}, {"add3"});  // [1, 1, S]: the same for every query
  m.node("Add", "masked", {"s", "add3"}, {"sm"});
  attr_int(m.node("Softmax", "softmax", {"sm"}, {"p"}), "axis", -1);
  m.node("MatMul", "pv", {"p", "v"}, {"y"});
  m.output("y");
  return m;
}

build::RowAxes analyse_attention(const PassModel& m) {
  graph::Graph g = m.import();
  build::BuildOptions o;
  passes::bind_inputs(g, o);
  passes::infer_and_fold(g, o);
  return build::row_axes(g, {{g.find("x"), 1}, {g.find("mask"), 1}});
}

TEST(RowIndependence, MaskedAttentionKeepsPaddingOut) {
  const PassModel m = attention(-10000.f);
  const build::RowAxes r = analyse_attention(m);
  EXPECT_EQ(r.why_not, "");
  EXPECT_EQ(output_axis(m, r), 1);
  // A mask that adds +10000 to the padded keys does not hide them.
  const build::RowAxes bad = analyse_attention(attention(10000.f));
  EXPECT_NE(bad.why_not.find("node 'softmax' (Softmax): works along the rows, and their padding is not masked"),
            std::string::npos)
      << bad.why_not;
}

// Models over x[S, 4], S symbolic, analysed at S = 8 with the graph folded at S = 2 beside it.
PassModel over_s(const std::string& name) {
  PassModel m(name);
  auto* in = m.g()->add_input();
  in->set_name("x");
  auto* t = in->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  t->mutable_shape()->add_dim()->set_dim_param("S");
  t->mutable_shape()->add_dim()->set_dim_value(4);
  return m;
}

build::RowAxes analyse_range(const PassModel& m, int64_t hi = 8) {
  auto bound = [&](int64_t s) {
    graph::Graph g = m.import();
    build::BuildOptions o;
    o.input_shapes["x"] = {s, 4};
    passes::bind_inputs(g, o);
    passes::infer_and_fold(g, o);
    return g;
  };
  const graph::Graph big = bound(hi), small = bound(2);
  return build::row_axes(big, {{big.find("x"), 0}}, &small, 2);
}

// Where padding would change the valid rows in ways the per-node rules alone do not see.
TEST(RowIndependence, SizeDependentValuesAreRefused) {
  {  // a mean spelled as a sum divided by the size: the sum ignores zero rows, the size does not
    PassModel m = over_s("mean_by_size");
    m.init_i64("axes", {1}, {0});
    m.init_i64("zero", {}, {0});
    m.node("ReduceSum", "sum", {"x", "axes"}, {"s"});
    m.node("Shape", "shape", {"x"}, {"shape"});
    m.node("Gather", "len", {"shape", "zero"}, {"len"});
    attr_int(m.node("Cast", "cast", {"len"}, {"lenf"}), "to", onnx::TensorProto::FLOAT);
    m.node("Div", "div", {"s", "lenf"}, {"y"});
    m.output("y");
    const build::RowAxes r = analyse_range(m);
    EXPECT_NE(r.why_not.find("node 'div' (Div): constant 'lenf' depends on the size"), std::string::npos) << r.why_not;
  }
  {  // 1 / x is infinite in zero rows, and 0 * inf is NaN: no contraction may take it in
    PassModel m = over_s("reciprocal");
    m.node("Reciprocal", "rec", {"x"}, {"r"});
    m.node("Transpose", "t", {"x"}, {"t"});
    m.node("MatMul", "mm", {"t", "r"}, {"y"});  // [4, S] x [S, 4]: x's zero rows against r's infinite ones
    m.output("y");
    const build::RowAxes r = analyse_range(m);
    EXPECT_NE(r.why_not.find("node 'mm' (MatMul): contracts along the rows"), std::string::npos) << r.why_not;
  }
  {  // a Reshape to [4, S] is the identity when S is 4, and mixes rows at any other size
    PassModel m = over_s("coincidence");
    m.init_i64("zero", {}, {0});
    m.init_i64("ax0", {1}, {0});
    m.init_i64("four", {1}, {4});
    m.node("Shape", "shape", {"x"}, {"shape"});
    m.node("Gather", "len", {"shape", "zero"}, {"len"});
    m.node("Unsqueeze", "u", {"len", "ax0"}, {"len1"});
    attr_int(m.node("Concat", "target", {"four", "len1"}, {"target"}), "axis", 0);
    m.node("Reshape", "reshape", {"x", "target"}, {"y"});
    m.output("y");
    const build::RowAxes r = analyse_range(m, 4);
    EXPECT_NE(r.why_not.find("node 'reshape' (Reshape): output 'y' has 4 on axis 0 at the range's bottom"),
              std::string::npos)
        << r.why_not;
  }
}

// Token ids [batch, sequence] through an embedding Gather: the rows follow the ids.
TEST(RowIndependence, EmbeddingGatherFollowsTheIds) {
  PassModel m("embedding");
  m.input("x", {4, 7}, onnx::TensorProto::INT64);
  m.init_rand("table", {50, 16});
  m.node("Gather", "emb", {"table", "x"}, {"e"});  // [4, 7, 16]
  m.init_rand("w", {16, 8});
  m.node("MatMul", "proj", {"e", "w"}, {"y"});
  m.output("y");
  const build::RowAxes batch = analyse(m, 0);
  EXPECT_EQ(batch.why_not, "");
  EXPECT_EQ(output_axis(m, batch), 0);
  const build::RowAxes seq = analyse(m, 1);
  EXPECT_EQ(seq.why_not, "");
  EXPECT_EQ(output_axis(m, seq), 1);
}

}  // namespace
}  // namespace kiln::test
