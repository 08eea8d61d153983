// Sequences known at import (src/graph/onnx_sequences.cpp): lowered to tensor ops, checked by
// running the engine against values computed here; and the messages for what depends on the data.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

#include "build/build.h"
#include "graph/onnx_import.h"
#include "kiln/engine.h"
#include "kiln/types.h"
#include "onnx_model_util.h"

namespace kiln {
namespace {

using namespace kiln::test;

std::string import_error(const OnnxModel& om) {
  const onnx::ModelProto& m = om.m;
  try {
    import_model(m);
  } catch (const Error& e) {
    return e.what();
  }
  return "(imported)";
}

std::vector<float> run(const OnnxModel& m, const std::map<std::string, std::vector<float>>& inputs,
                       const std::string& output) {
  graph::Graph g = m.import();
  const std::vector<uint8_t> engine = build::build_engine(g, build::BuildOptions{}, nullptr);
  return run_engine(engine, inputs, {output}).at(output);
}

void init_i64(OnnxModel& m, const std::string& name, const I64s& v, bool scalar = true) {
  auto* t = m.g()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  if (!scalar) t->add_dims(static_cast<int64_t>(v.size()));
  for (int64_t x : v) t->add_int64_data(x);
}

std::vector<float> iota(size_t n, float from) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = from + static_cast<float>(i);
  return v;
}

// Construct [a, b, c], erase at -3 (a), insert a at the end ([b, c, a]) and at 1 ([b, a, c, a]),
// take position -2: c.
TEST(ImportSequences, InsertEraseAndAtFollowConstantPositions) {
  OnnxModel m("seq");
  for (const char* n : {"a", "b", "c"}) m.input(n, {2, 3});
  init_i64(m, "minus3", {-3});
  init_i64(m, "one", {1});
  init_i64(m, "minus2", {-2});
  m.node("SequenceConstruct", "make", {"a", "b", "c"}, {"s0"});
  m.node("SequenceErase", "erase", {"s0", "minus3"}, {"s1"});
  m.node("SequenceInsert", "append", {"s1", "a"}, {"s2"});
  m.node("SequenceInsert", "insert", {"s2", "a", "one"}, {"s3"});
  m.node("SequenceAt", "at", {"s3", "minus2"}, {"y"});
  m.output("y");
  const std::vector<float> a = iota(6, 0), b = iota(6, 10), c = iota(6, 20);
  EXPECT_EQ(run(m, {{"a", a}, {"b", b}, {"c", c}}, "y"), c);
}

// SplitToSequence of a [2, 3] tensor along axis 1 without keepdims, then ConcatFromSequence with
// new_axis at 0: the transpose; its length is 3.
TEST(ImportSequences, SplitThenConcatWithNewAxisTransposes) {
  for (int64_t opset : {11, 17}) {
    OnnxModel m("split", opset);
    m.input("x", {2, 3});
    auto* s = m.node("SplitToSequence", "split", {"x"}, {"s"});
    attr_int(s, "axis", 1);
    attr_int(s, "keepdims", 0);
    auto* c = m.node("ConcatFromSequence", "concat", {"s"}, {"y"});
    attr_int(c, "axis", 0);
    attr_int(c, "new_axis", 1);
    m.output("y");
    EXPECT_EQ(run(m, {{"x", iota(6, 0)}}, "y"), (std::vector<float>{0, 3, 1, 4, 2, 5})) << "opset " << opset;
  }
}

// Chunks of 2 along axis 0 of a [5] tensor: [0, 1], [2, 3], [4]; the last is element -1, and
// SequenceLength counts 3 (checked through a Cast to float).
TEST(ImportSequences, SplitInChunksAndLength) {
  OnnxModel m("chunks");
  m.input("x", {5});
  init_i64(m, "two", {2});
  init_i64(m, "last", {-1});
  m.node("SplitToSequence", "split", {"x", "two"}, {"s"});
  m.node("SequenceAt", "at", {"s", "last"}, {"y"});
  m.node("SequenceLength", "len", {"s"}, {"n"});
  attr_int(m.node("Cast", "cast", {"n"}, {"nf"}), "to", onnx::TensorProto::FLOAT);
  m.output("y");
  m.output("nf");
  EXPECT_EQ(run(m, {{"x", iota(5, 0)}}, "y"), (std::vector<float>{4}));
  EXPECT_EQ(run(m, {{"x", iota(5, 0)}}, "nf"), (std::vector<float>{3}));
}

TEST(ImportSequences, PositionComputedAtRunTimeIsNamed) {
  OnnxModel m("runtime_pos");
  m.input("x", {2});
  m.input("pos", {}, onnx::TensorProto::INT64);
  m.node("SequenceConstruct", "make", {"x", "x"}, {"s"});
  m.node("SequenceAt", "at", {"s", "pos"}, {"y"});
  m.node("Relu", "after", {"y"}, {"z"});
  m.output("z");
  const std::string e = import_error(m);
  EXPECT_NE(e.find("node 'at' (SequenceAt): its position 'pos' is computed at run time"), std::string::npos) << e;
  EXPECT_EQ(e.find("'after'"), std::string::npos) << e;  // nothing about the nodes downstream
}

TEST(ImportSequences, OutOfRangePositionIsNamed) {
  OnnxModel m("range");
  m.input("x", {2});
  init_i64(m, "five", {5});
  m.node("SequenceConstruct", "make", {"x", "x"}, {"s"});
  m.node("SequenceAt", "at", {"s", "five"}, {"y"});
  m.output("y");
  const std::string e = import_error(m);
  EXPECT_NE(e.find("position 5 is outside the sequence of 2 element(s)"), std::string::npos) << e;
}

TEST(ImportSequences, SymbolicSplitAxisNeedsItsSize) {
  OnnxModel m("symbolic");
  auto* vi = m.g()->add_input();
  vi->set_name("x");
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_param("n");
  m.node("SplitToSequence", "split", {"x"}, {"s"});
  auto* c = m.node("ConcatFromSequence", "concat", {"s"}, {"y"});
  attr_int(c, "axis", 0);
  m.output("y");
  const std::string e = import_error(m);
  EXPECT_NE(e.find("node 'split' (SplitToSequence): splits 'x' into one element per index, which needs its size "
                   "along axis 0 known at import"),
            std::string::npos)
      << e;
}

// A sequence output becomes one graph output per element, NAME[i].
TEST(ImportSequences, SequenceOutputIsOneOutputPerElement) {
  OnnxModel m("seq_out");
  m.input("x", {3});
  m.node("Relu", "relu", {"x"}, {"r"});
  m.node("SequenceConstruct", "make", {"x", "r"}, {"s"});
  m.output("s");
  const std::vector<float> x = {-1.f, 2.f, -3.f};
  graph::Graph g = m.import();
  const std::vector<uint8_t> engine = build::build_engine(g, build::BuildOptions{}, nullptr);
  auto out = run_engine(engine, {{"x", x}}, {"s[0]", "s[1]"});
  EXPECT_EQ(out.at("s[0]"), x);
  EXPECT_EQ(out.at("s[1]"), (std::vector<float>{0.f, 2.f, 0.f}));
}

graph::Graph import_with(const OnnxModel& m, const graph::ImportOptions& options) {
  std::string bytes;
  m.m.SerializeToString(&bytes);
  return graph::import_onnx_bytes(std::vector<uint8_t>(bytes.begin(), bytes.end()), m.m.graph().name() + ".onnx", "",
                                  options);
}

OnnxModel sequence_input_model() {
  OnnxModel m("seq_in");
  auto* vi = m.g()->add_input();
  vi->set_name("s");
  auto* tt = vi->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_param("N");  // the elements' own sizes
  m.input("bias", {1});
  onnx::NodeProto* map = m.node("SequenceMap", "map", {"s", "bias"}, {"t"});
  onnx::GraphProto* body = new_attr(map, "body", onnx::AttributeProto::GRAPH)->mutable_g();
  body->set_name("body");
  for (const char* name : {"e", "b"}) body->add_input()->set_name(name);
  onnx::NodeProto* add = body->add_node();
  add->set_op_type("Add");
  add->add_input("e");
  add->add_input("b");
  add->add_output("sum");
  body->add_output()->set_name("sum");
  m.output("t");
  return m;
}

TEST(ImportSequences, SequenceInputPassedThroughIsItsElements) {
  OnnxModel m = sequence_input_model();
  m.output("s");  // the input itself, beside SequenceMap's result
  graph::ImportOptions options;
  options.sequence_lengths["s"] = 2;
  graph::Graph g = import_with(m, options);
  std::vector<std::string> outs;
  for (graph::ValueId o : g.outputs) outs.push_back(g.value(o).name);
  EXPECT_EQ(outs, (std::vector<std::string>{"t[0]", "t[1]", "s[0]", "s[1]"}));
}

TEST(ImportSequences, SequenceInputNeedsItsLength) {
  const std::string e = import_error(sequence_input_model());
  EXPECT_NE(e.find("input 's' is a sequence, whose length Kiln needs when it builds"), std::string::npos) << e;
  EXPECT_EQ(e.find("SequenceMap"), std::string::npos) << e;  // one message: the input's
}

// Given its length (kiln run takes it from the data), a sequence input is one input per element,
// each with its own shape; SequenceMap runs its body once per element.
TEST(ImportSequences, SequenceInputOfGivenLengthThroughSequenceMap) {
  const OnnxModel m = sequence_input_model();
  std::string bytes;
  m.m.SerializeToString(&bytes);
  graph::ImportOptions options;
  options.sequence_lengths["s"] = 2;
  graph::Graph g =
      graph::import_onnx_bytes(std::vector<uint8_t>(bytes.begin(), bytes.end()), "seq_in.onnx", "", options);
  ASSERT_EQ(g.inputs.size(), 3u);
  EXPECT_EQ(g.value(g.inputs[0]).name, "s[0]");
  EXPECT_EQ(g.value(g.inputs[1]).name, "s[1]");
  build::BuildOptions o;
  o.input_shapes["s[0]"] = {3};
  o.input_shapes["s[1]"] = {1};
  const std::vector<uint8_t> engine = build::build_engine(g, o, nullptr);
  auto out = run_engine(engine, {{"s[0]", {1.f, 2.f, 3.f}}, {"s[1]", {4.f}}, {"bias", {0.5f}}}, {"t[0]", "t[1]"});
  EXPECT_EQ(out.at("t[0]"), (std::vector<float>{1.5f, 2.5f, 3.5f}));
  EXPECT_EQ(out.at("t[1]"), (std::vector<float>{4.5f}));
}

// An optional input: the tensor it holds, or nothing; OptionalHasElement a constant,
// OptionalGetElement the tensor.
OnnxModel optional_model() {
  OnnxModel m("optional");
  auto* vi = m.g()->add_input();
  vi->set_name("o");
  auto* tt = vi->mutable_type()->mutable_optional_type()->mutable_elem_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_value(2);
  m.node("OptionalHasElement", "has", {"o"}, {"h"});
  m.output("h");
  return m;
}

TEST(ImportOptionals, InputPresentOrAbsentIsKnownAtImport) {
  for (bool present : {true, false}) {
    graph::ImportOptions options;
    options.optional_present["o"] = present;
    graph::Graph g = import_with(optional_model(), options);
    EXPECT_EQ(g.inputs.size(), present ? 1u : 0u);
    ASSERT_EQ(g.outputs.size(), 1u);
    const graph::Value& h = g.value(g.outputs[0]);
    ASSERT_TRUE(h.is_constant());
    EXPECT_EQ((*h.data)[0] != 0, present);
  }
  const std::string e = import_error(optional_model());
  EXPECT_NE(e.find("input 'o' is optional; whether it holds a value Kiln needs"), std::string::npos) << e;
}

TEST(ImportOptionals, GetElementOfAnEmptyOptionalIsNamed) {
  OnnxModel m = optional_model();
  m.node("OptionalGetElement", "get", {"o"}, {"x"});
  m.output("x");
  graph::ImportOptions options;
  options.optional_present["o"] = true;
  graph::Graph g = import_with(m, options);
  EXPECT_EQ(g.outputs.size(), 2u);
  options.optional_present["o"] = false;
  try {
    (void)import_with(m, options);
    ADD_FAILURE() << "imported";
  } catch (const Error& err) {
    EXPECT_NE(
        std::string(err.what()).find("node 'get' (OptionalGetElement): reads 'o', an optional that holds no value"),
        std::string::npos)
        << err.what();
  }
}

TEST(ImportSequences, TensorOpReadingASequenceIsNamed) {
  OnnxModel m("misuse");
  m.input("x", {2});
  m.node("SequenceConstruct", "make", {"x", "x"}, {"s"});
  m.node("Relu", "relu", {"s"}, {"y"});
  m.output("y");
  const std::string e = import_error(m);
  EXPECT_NE(e.find("node 'relu' (Relu): reads the sequence 's'"), std::string::npos) << e;
}

// Scan unrolls where its length is known at import; a symbolic scan axis is named.
TEST(ImportScan, SymbolicScanAxisIsNamed) {
  OnnxModel m("scan");
  m.input("s0", {2});
  auto* vi = m.g()->add_input();
  vi->set_name("x");
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_param("steps");
  tt->mutable_shape()->add_dim()->set_dim_value(2);
  auto* scan = m.node("Scan", "scan", {"s0", "x"}, {"s", "y"});
  attr_int(scan, "num_scan_inputs", 1);
  auto* body = new_attr(scan, "body", onnx::AttributeProto::GRAPH)->mutable_g();
  body->set_name("body");
  for (const char* n : {"si", "xi"}) body->add_input()->set_name(n);
  for (const char* n : {"so", "yo"}) body->add_output()->set_name(n);
  auto* add = body->add_node();
  add->set_op_type("Add");
  add->add_input("si");
  add->add_input("xi");
  add->add_output("so");
  auto* id = body->add_node();
  id->set_op_type("Identity");
  id->add_input("so");
  id->add_output("yo");
  m.output("s");
  m.output("y");
  const std::string e = import_error(m);
  EXPECT_NE(e.find("node 'scan' (Scan): unrolls over the scan axis of 'x', whose size is not known at import"),
            std::string::npos)
      << e;
  // With the length known, the same model unrolls: the running sum of x's rows.
  tt->mutable_shape()->mutable_dim(0)->set_dim_value(3);
  EXPECT_EQ(run(m, {{"s0", {1, 2}}, {"x", iota(6, 0)}}, "y"), (std::vector<float>{1, 3, 3, 6, 7, 11}));
}

}  // namespace
}  // namespace kiln
