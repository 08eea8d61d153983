// Sequences known at import (src/graph/onnx_sequences.cpp): lowered to tensor ops, checked by
// running the engine against values computed here; and the messages for what depends on the data.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

#include "graph/onnx_import.h"
#include "kiln/engine.h"
#include "kiln/types.h"
#include "onnx_model_util.h"
#include "build/build.h"

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

TEST(ImportSequences, SequenceOutputsAndInputsAreRefusedByName) {
  OnnxModel out("seq_out");
  out.input("x", {2});
  out.node("SequenceConstruct", "make", {"x", "x"}, {"s"});
  out.output("s");
  std::string e = import_error(out);
  EXPECT_NE(e.find("graph output 's' is a sequence"), std::string::npos) << e;

  OnnxModel in("seq_in");
  auto* vi = in.g()->add_input();
  vi->set_name("s");
  vi->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::FLOAT);
  init_i64(in, "zero", {0});
  in.node("SequenceAt", "at", {"s", "zero"}, {"y"});
  in.output("y");
  e = import_error(in);
  EXPECT_NE(e.find("input 's' is not a tensor"), std::string::npos) << e;
  EXPECT_EQ(e.find("SequenceAt"), std::string::npos) << e;  // one message: the input's
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
