// Tests for src/graph/onnx_import: old opsets rewritten to the opset-21 form (attributes that became
// inputs turn into constant inputs), opset-dependent defaults, Constant nodes, external data, and the
// errors an unsupported or malformed model must produce.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "graph/onnx_import.h"
#include "onnx_model_util.h"

namespace kiln::graph {
namespace {

using namespace kiln::test;  // attr_* and import_model (onnx_model_util.h)

namespace fs = std::filesystem;

// ---- model building helpers ----------------------------------------------------------------------

// A dimension: a number, or a symbolic name.
struct Dim {
  int64_t value = -1;
  std::string param;
  Dim(int64_t v) : value(v) {}      // NOLINT: implicit on purpose
  Dim(const char* p) : param(p) {}  // NOLINT
};

onnx::ModelProto make_model(int64_t opset) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("kiln-test");
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  m.mutable_graph()->set_name("test");
  return m;
}

void set_type(onnx::ValueInfoProto* vi, int32_t elem, const std::vector<Dim>& dims) {
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  auto* shape = tt->mutable_shape();
  for (const Dim& d : dims) {
    auto* dim = shape->add_dim();
    if (d.param.empty())
      dim->set_dim_value(d.value);
    else
      dim->set_dim_param(d.param);
  }
}

void add_input(onnx::ModelProto& m, const std::string& name, const std::vector<Dim>& dims,
               int32_t elem = onnx::TensorProto::FLOAT) {
  auto* vi = m.mutable_graph()->add_input();
  vi->set_name(name);
  set_type(vi, elem, dims);
}

// A graph output typed as a tensor of unspecified element type and shape.
void add_output(onnx::ModelProto& m, const std::string& name) {
  auto* vi = m.mutable_graph()->add_output();
  vi->set_name(name);
  vi->mutable_type()->mutable_tensor_type();
}

onnx::NodeProto* add_node(onnx::ModelProto& m, const std::string& op, const std::vector<std::string>& ins,
                          const std::vector<std::string>& outs, const std::string& name = "") {
  auto* n = m.mutable_graph()->add_node();
  n->set_op_type(op);
  n->set_name(name.empty() ? op + "_node" : name);
  for (const auto& i : ins) n->add_input(i);
  for (const auto& o : outs) n->add_output(o);
  return n;
}

// m becomes a model at `opset` with input x (float32 of x_dims) and one node op(ins) -> outs, whose
// outputs are the graph's outputs. Returns the node, to add attributes to.
onnx::NodeProto* one_node(onnx::ModelProto& m, int64_t opset, const std::vector<Dim>& x_dims, const std::string& op,
                          const std::vector<std::string>& ins = {"x"}, const std::vector<std::string>& outs = {"y"},
                          const std::string& name = "") {
  m = make_model(opset);
  add_input(m, "x", x_dims);
  onnx::NodeProto* n = add_node(m, op, ins, outs, name);
  for (const auto& o : outs) add_output(m, o);
  return n;
}

void add_init_i64(onnx::ModelProto& m, const std::string& name, const std::vector<int64_t>& v) {
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(v.size()));
  for (int64_t x : v) t->add_int64_data(x);
}
void add_init_f32(onnx::ModelProto& m, const std::string& name, const std::vector<int64_t>& dims,
                  const std::vector<float>& v) {
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  for (float x : v) t->add_float_data(x);
}

std::vector<uint8_t> bytes_of(const onnx::ModelProto& m) {
  std::string s;
  EXPECT_TRUE(m.SerializeToString(&s));
  return {s.begin(), s.end()};
}

Graph import(const onnx::ModelProto& m) { return import_onnx_bytes(bytes_of(m), "test.onnx", ""); }

// The message of the kiln::Error that importing m throws ("" if it imports).
std::string import_error(const onnx::ModelProto& m, const fs::path& base_dir = "") {
  try {
    import_onnx_bytes(bytes_of(m), base_dir.empty() ? "test.onnx" : "mem.onnx", base_dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const Node& only_node(const Graph& g, OpKind kind) {
  const Node* found = nullptr;
  for (const Node& n : g.nodes)
    if (n.kind == kind) {
      EXPECT_EQ(found, nullptr) << "more than one " << op_name(kind);
      found = &n;
    }
  if (!found) throw std::runtime_error("no node of kind " + std::string(op_name(kind)));
  return *found;
}

// The data of a constant value of element type T (dtype dt).
template <class T>
std::vector<T> const_data(const Graph& g, ValueId id, DataType dt) {
  const Value& v = g.value(id);
  EXPECT_TRUE(v.is_constant()) << v.name;
  EXPECT_EQ(v.dtype, dt) << v.name;
  if (!v.is_constant()) return {};
  std::vector<T> out(v.data->size() / sizeof(T));
  std::memcpy(out.data(), v.data->data(), out.size() * sizeof(T));
  return out;
}
std::vector<int64_t> const_i64(const Graph& g, ValueId id) { return const_data<int64_t>(g, id, DataType::kInt64); }
std::vector<float> const_f32(const Graph& g, ValueId id) { return const_data<float>(g, id, DataType::kFloat32); }

using I64s = std::vector<int64_t>;
using F32s = std::vector<float>;

// ---- reductions ------------------------------------------------------------------------------------

TEST(ImportOpset, ReduceSumAxesAttributeAtOpset11BecomesConstantInput) {
  onnx::ModelProto m;
  auto* n = one_node(m, 11, {2, 3, 4}, "ReduceSum");
  attr_ints(n, "axes", {1, -1});
  attr_int(n, "keepdims", 0);
  Graph g = import(m);
  const Node& r = only_node(g, OpKind::kReduceSum);
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_EQ(r.inputs[0], g.find("x"));
  EXPECT_EQ(const_i64(g, r.inputs[1]), (I64s{1, -1}));
  EXPECT_EQ(g.value(r.inputs[1]).shape, (I64s{2}));
  EXPECT_EQ(std::get<ReduceAttrs>(r.attrs).keepdims, 0);
}

TEST(ImportOpset, ReduceSumAtOpset13TakesTheAxesInput) {
  onnx::ModelProto m;
  one_node(m, 13, {2, 3}, "ReduceSum", {"x", "axes"});
  add_init_i64(m, "axes", {0});
  Graph g = import(m);
  const Node& r = only_node(g, OpKind::kReduceSum);
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_EQ(r.inputs[1], g.find("axes"));
  EXPECT_EQ(const_i64(g, r.inputs[1]), (I64s{0}));
  // At 13 the attribute no longer exists.
  attr_ints(one_node(m, 13, {2, 3}, "ReduceSum", {"x"}, {"y"}, "rs"), "axes", {0});
  std::string e = import_error(m);
  EXPECT_NE(e.find("node 'rs' (ReduceSum): has attribute 'axes'"), std::string::npos) << e;
  EXPECT_NE(e.find("for ReduceSum at opset 13"), std::string::npos) << e;
}

TEST(ImportOpset, ReduceMeanAxesAttributeAtOpset17InputAt18) {
  onnx::ModelProto m;
  attr_ints(one_node(m, 17, {2, 3}, "ReduceMean"), "axes", {1});
  Graph g = import(m);
  ASSERT_EQ(only_node(g, OpKind::kReduceMean).inputs.size(), 2u);
  EXPECT_EQ(const_i64(g, only_node(g, OpKind::kReduceMean).inputs[1]), (I64s{1}));

  one_node(m, 18, {2, 3}, "ReduceMean", {"x", "ax"});
  add_init_i64(m, "ax", {1});
  g = import(m);
  ASSERT_EQ(only_node(g, OpKind::kReduceMean).inputs.size(), 2u);
  EXPECT_EQ(only_node(g, OpKind::kReduceMean).inputs[1], g.find("ax"));

  attr_ints(one_node(m, 18, {2, 3}, "ReduceMean"), "axes", {1});  // gone at 18
  EXPECT_NE(import_error(m).find("attribute 'axes'"), std::string::npos);

  one_node(m, 17, {2, 3}, "ReduceMean");  // no axes at all: no second input is invented
  EXPECT_EQ(only_node(import(m), OpKind::kReduceMean).inputs.size(), 1u);
}

// ---- shape ops -------------------------------------------------------------------------------------

TEST(ImportOpset, SqueezeAndUnsqueezeAxesAttributeAtOpset11) {
  onnx::ModelProto m;
  attr_ints(one_node(m, 11, {1, 3, 1}, "Squeeze", {"x"}, {"s"}), "axes", {0, 2});
  attr_ints(add_node(m, "Unsqueeze", {"s"}, {"u"}), "axes", {1});
  add_output(m, "u");
  Graph g = import(m);
  const Node& sq = only_node(g, OpKind::kSqueeze);
  ASSERT_EQ(sq.inputs.size(), 2u);
  EXPECT_EQ(const_i64(g, sq.inputs[1]), (I64s{0, 2}));
  const Node& usq = only_node(g, OpKind::kUnsqueeze);
  ASSERT_EQ(usq.inputs.size(), 2u);
  EXPECT_EQ(usq.inputs[0], g.find("s"));
  EXPECT_EQ(const_i64(g, usq.inputs[1]), (I64s{1}));
}

TEST(ImportOpset, SplitAttributeAtOpset11BecomesInput) {
  onnx::ModelProto m;
  auto* n = one_node(m, 11, {6, 2}, "Split", {"x"}, {"a", "b"});
  attr_ints(n, "split", {2, 4});
  attr_int(n, "axis", 0);
  Graph g = import(m);
  const Node& s = only_node(g, OpKind::kSplit);
  ASSERT_EQ(s.inputs.size(), 2u);
  EXPECT_EQ(const_i64(g, s.inputs[1]), (I64s{2, 4}));
  EXPECT_EQ(std::get<SplitAttrs>(s.attrs).num_outputs, 0);  // sizes come from the input
  EXPECT_EQ(s.outputs.size(), 2u);
}

TEST(ImportOpset, SplitWithoutSizesTakesNumOutputsFromOutputCount) {
  onnx::ModelProto m;
  one_node(m, 11, {6, 2}, "Split", {"x"}, {"a", "b", "c"});
  Graph g = import(m);
  const Node& s = only_node(g, OpKind::kSplit);
  EXPECT_EQ(s.inputs.size(), 1u);
  EXPECT_EQ(std::get<SplitAttrs>(s.attrs).num_outputs, 3);
}

TEST(ImportOpset, PadOpset2PadsAndValueBecomeInputs) {
  onnx::ModelProto m;
  auto* n = one_node(m, 2, {2, 2}, "Pad");
  attr_ints(n, "pads", {0, 1, 0, 2});
  attr_float(n, "value", 1.5f);
  attr_string(n, "mode", "constant");
  Graph g = import(m);
  const Node& p = only_node(g, OpKind::kPad);
  ASSERT_EQ(p.inputs.size(), 3u);
  EXPECT_EQ(const_i64(g, p.inputs[1]), (I64s{0, 1, 0, 2}));
  EXPECT_EQ(const_f32(g, p.inputs[2]), (F32s{1.5f}));
  EXPECT_TRUE(g.value(p.inputs[2]).shape.empty());  // a scalar, as Pad-11 wants
  EXPECT_EQ(std::get<PadAttrs>(p.attrs).mode, PadMode::kConstant);
}

TEST(ImportOpset, PadOpset1PaddingsAndEdgeMode) {
  onnx::ModelProto m;
  auto* n = one_node(m, 1, {2, 2}, "Pad");
  attr_ints(n, "paddings", {1, 0, 1, 0});
  attr_string(n, "mode", "edge");
  Graph g = import(m);
  const Node& p = only_node(g, OpKind::kPad);
  ASSERT_EQ(p.inputs.size(), 2u);  // no value attribute: no constant_value input
  EXPECT_EQ(const_i64(g, p.inputs[1]), (I64s{1, 0, 1, 0}));
  EXPECT_EQ(std::get<PadAttrs>(p.attrs).mode, PadMode::kEdge);
}

TEST(ImportOpset, ClipOpset6MinMaxBecomeInputs) {
  onnx::ModelProto m;
  auto* n = one_node(m, 6, {4}, "Clip");
  attr_float(n, "min", -0.5f);
  attr_float(n, "max", 2.0f);
  Graph g = import(m);
  const Node& c = only_node(g, OpKind::kClip);
  ASSERT_EQ(c.inputs.size(), 3u);
  EXPECT_EQ(const_f32(g, c.inputs[1]), (F32s{-0.5f}));
  EXPECT_EQ(const_f32(g, c.inputs[2]), (F32s{2.0f}));
  EXPECT_TRUE(g.value(c.inputs[1]).shape.empty());
  // Only max: min stays omitted.
  attr_float(one_node(m, 6, {4}, "Clip"), "max", 6.0f);
  g = import(m);
  const Node& c2 = only_node(g, OpKind::kClip);
  ASSERT_EQ(c2.inputs.size(), 3u);
  EXPECT_EQ(c2.inputs[1], kNoValue);
  EXPECT_EQ(const_f32(g, c2.inputs[2]), (F32s{6.0f}));
}

TEST(ImportOpset, SliceOpset9AttributesBecomeInputs) {
  onnx::ModelProto m;
  auto* n = one_node(m, 9, {4, 5}, "Slice");
  attr_ints(n, "starts", {1, 0});
  attr_ints(n, "ends", {3, -1});
  attr_ints(n, "axes", {0, 1});
  Graph g = import(m);
  const Node& s = only_node(g, OpKind::kSlice);
  ASSERT_EQ(s.inputs.size(), 4u);
  EXPECT_EQ(const_i64(g, s.inputs[1]), (I64s{1, 0}));
  EXPECT_EQ(const_i64(g, s.inputs[2]), (I64s{3, -1}));
  EXPECT_EQ(const_i64(g, s.inputs[3]), (I64s{0, 1}));
}

TEST(ImportOpset, TopKOpset9KAttributeBecomesInput) {
  onnx::ModelProto m;
  auto* n = one_node(m, 9, {2, 5}, "TopK", {"x"}, {"v", "i"});
  attr_int(n, "k", 3);
  attr_int(n, "axis", 1);
  Graph g = import(m);
  const Node& t = only_node(g, OpKind::kTopK);
  ASSERT_EQ(t.inputs.size(), 2u);
  EXPECT_EQ(const_i64(g, t.inputs[1]), (I64s{3}));
  EXPECT_EQ(g.value(t.inputs[1]).shape, (I64s{1}));
  EXPECT_EQ(std::get<TopKAttrs>(t.attrs).axis, 1);
  EXPECT_EQ(t.outputs.size(), 2u);
}

TEST(ImportOpset, UpsampleOpset7ScalesAttributeBecomesResize) {
  onnx::ModelProto m;
  auto* n = one_node(m, 7, {1, 1, 2, 2}, "Upsample");
  attr_floats(n, "scales", {1.f, 1.f, 2.f, 3.f});
  attr_string(n, "mode", "nearest");
  Graph g = import(m);
  const Node& r = only_node(g, OpKind::kResize);
  ASSERT_EQ(r.inputs.size(), 3u);
  EXPECT_EQ(r.inputs[0], g.find("x"));
  EXPECT_EQ(r.inputs[1], kNoValue);  // roi
  EXPECT_EQ(const_f32(g, r.inputs[2]), (F32s{1.f, 1.f, 2.f, 3.f}));
  const auto& a = std::get<ResizeAttrs>(r.attrs);
  EXPECT_EQ(a.coordinate_transformation_mode, CoordinateTransform::kAsymmetric);
  EXPECT_EQ(a.nearest_mode, NearestMode::kFloor);
  EXPECT_EQ(a.mode, ResizeMode::kNearest);
}

TEST(ImportOpset, UpsampleOpset9ScalesInputBecomesResize) {
  onnx::ModelProto m;
  attr_string(one_node(m, 9, {1, 1, 2, 2}, "Upsample", {"x", "sc"}), "mode", "linear");
  add_init_f32(m, "sc", {4}, {1.f, 1.f, 2.f, 2.f});
  Graph g = import(m);
  const Node& r = only_node(g, OpKind::kResize);
  ASSERT_EQ(r.inputs.size(), 3u);
  EXPECT_EQ(r.inputs[1], kNoValue);
  EXPECT_EQ(r.inputs[2], g.find("sc"));
  const auto& a = std::get<ResizeAttrs>(r.attrs);
  EXPECT_EQ(a.coordinate_transformation_mode, CoordinateTransform::kAsymmetric);
  EXPECT_EQ(a.nearest_mode, NearestMode::kFloor);
  EXPECT_EQ(a.mode, ResizeMode::kLinear);
}

// ---- opset-dependent defaults -------------------------------------------------------------------

TEST(ImportOpset, SoftmaxOpset11Coerces2dWithAxis1Default) {
  onnx::ModelProto m;
  one_node(m, 11, {2, 3, 4}, "Softmax");
  SoftmaxAttrs a = std::get<SoftmaxAttrs>(only_node(import(m), OpKind::kSoftmax).attrs);
  EXPECT_EQ(a.axis, 1);
  EXPECT_EQ(a.coerce_2d, 1);
  attr_int(one_node(m, 11, {2, 3, 4}, "LogSoftmax"), "axis", 2);
  SoftmaxAttrs b = std::get<SoftmaxAttrs>(only_node(import(m), OpKind::kLogSoftmax).attrs);
  EXPECT_EQ(b.axis, 2);
  EXPECT_EQ(b.coerce_2d, 1);
  one_node(m, 13, {2, 3, 4}, "Softmax");  // from 13: one axis, default -1
  SoftmaxAttrs c = std::get<SoftmaxAttrs>(only_node(import(m), OpKind::kSoftmax).attrs);
  EXPECT_EQ(c.axis, -1);
  EXPECT_EQ(c.coerce_2d, 0);
}

// Attention (opset 23) imports with Q, K, V and a mask; the key-value cache, the extra outputs and
// Kiln's own packed_qkv attribute (fuse-attention's) are refused by name.
TEST(ImportOpset, AttentionRefusesTheCacheAndKilnsOwnAttribute) {
  onnx::ModelProto m;
  one_node(m, 23, {1, 2, 4, 8}, "Attention", {"x", "x", "x"});
  EXPECT_EQ(std::get<AttentionAttrs>(only_node(import(m), OpKind::kAttention).attrs).packed_qkv, 0);
  attr_int(one_node(m, 23, {1, 2, 4, 8}, "Attention", {"x", "x", "x"}), "packed_qkv", 1);
  std::string e = import_error(m);
  EXPECT_NE(e.find("packed_qkv"), std::string::npos) << e;
  one_node(m, 23, {1, 2, 4, 8}, "Attention", {"x", "x", "x", "", "x", "x"});
  e = import_error(m);
  EXPECT_NE(e.find("key-value cache"), std::string::npos) << e;
  one_node(m, 23, {1, 2, 4, 8}, "Attention", {"x", "x", "x"}, {"y", "present_key"});
  e = import_error(m);
  EXPECT_NE(e.find("present_key"), std::string::npos) << e;
}

TEST(ImportOpset, LeakyReluDefaultAlpha) {
  onnx::ModelProto m;
  one_node(m, 16, {3}, "LeakyRelu", {"x"}, {"y"});
  attr_float(add_node(m, "LeakyRelu", {"y"}, {"z"}, "second"), "alpha", 0.25f);
  Graph g = import(m);
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_FLOAT_EQ(std::get<AlphaAttrs>(g.nodes[0].attrs).alpha, 0.01f);
  EXPECT_FLOAT_EQ(std::get<AlphaAttrs>(g.nodes[1].attrs).alpha, 0.25f);
  one_node(m, 16, {3}, "Elu");  // Elu shares the struct but keeps its own default of 1
  EXPECT_FLOAT_EQ(std::get<AlphaAttrs>(import(m).nodes[0].attrs).alpha, 1.0f);
}

// ---- Constant nodes ---------------------------------------------------------------------------------

TEST(ImportConstant, EveryValueForm) {
  auto m = make_model(13);
  auto* t = new_attr(add_node(m, "Constant", {}, {"c_tensor"}), "value", onnx::AttributeProto::TENSOR)->mutable_t();
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : {2, 1}) t->add_dims(d);
  for (float v : {3.5f, -1.0f}) t->add_float_data(v);
  attr_float(add_node(m, "Constant", {}, {"c_float"}, "cf"), "value_float", 0.75f);
  attr_floats(add_node(m, "Constant", {}, {"c_floats"}, "cfs"), "value_floats", {1.f, 2.f, 3.f});
  attr_int(add_node(m, "Constant", {}, {"c_int"}, "ci"), "value_int", -7);
  attr_ints(add_node(m, "Constant", {}, {"c_ints"}, "cis"), "value_ints", {4, 5});
  for (const char* o : {"c_tensor", "c_float", "c_floats", "c_int", "c_ints"}) add_output(m, o);
  Graph g = import(m);
  EXPECT_TRUE(g.nodes.empty());  // constants are values, not nodes
  ASSERT_EQ(g.outputs.size(), 5u);
  EXPECT_EQ(const_f32(g, g.find("c_tensor")), (F32s{3.5f, -1.0f}));
  EXPECT_EQ(g.value(g.find("c_tensor")).shape, (I64s{2, 1}));
  EXPECT_EQ(const_f32(g, g.find("c_float")), (F32s{0.75f}));
  EXPECT_TRUE(g.value(g.find("c_float")).shape.empty());
  EXPECT_EQ(const_f32(g, g.find("c_floats")), (F32s{1.f, 2.f, 3.f}));
  EXPECT_EQ(g.value(g.find("c_floats")).shape, (I64s{3}));
  EXPECT_EQ(const_i64(g, g.find("c_int")), (I64s{-7}));
  EXPECT_TRUE(g.value(g.find("c_int")).shape.empty());
  EXPECT_EQ(const_i64(g, g.find("c_ints")), (I64s{4, 5}));
  EXPECT_EQ(g.value(g.find("c_ints")).shape, (I64s{2}));
}

TEST(ImportConstant, SparseValueIsRejectedNamingTheNode) {
  auto m = make_model(13);
  new_attr(add_node(m, "Constant", {}, {"c"}, "sparse_c"), "sparse_value", onnx::AttributeProto::SPARSE_TENSOR);
  add_output(m, "c");
  std::string e = import_error(m);
  EXPECT_NE(e.find("Constant node 'sparse_c' uses attribute 'sparse_value', which Kiln does not support"),
            std::string::npos)
      << e;
}

// ---- external data -------------------------------------------------------------------------------

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("kiln_import_test_" + std::to_string(getpid()) + "_" + std::to_string(reinterpret_cast<uintptr_t>(this)));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

onnx::ModelProto external_data_model(const std::string& location, int64_t offset) {
  auto m = make_model(13);
  add_input(m, "x", {3});
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name("w");
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(3);
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  for (auto [key, value] : {std::pair<std::string, std::string>{"location", location},
                            {"offset", std::to_string(offset)},
                            {"length", "12"}}) {
    auto* kv = t->add_external_data();
    kv->set_key(key);
    kv->set_value(value);
  }
  add_node(m, "Add", {"x", "w"}, {"y"});
  add_output(m, "y");
  return m;
}

std::string float_bytes(const std::vector<float>& v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

TEST(ImportExternalData, InitializerReadFromDataFileNextToModel) {
  TempDir dir;
  write_file(dir.path / "weights.bin", "PAD!" + float_bytes({0.5f, -2.f, 8.f}));
  auto m = external_data_model("weights.bin", 4);
  std::vector<uint8_t> model = bytes_of(m);
  write_file(dir.path / "model.onnx", std::string(model.begin(), model.end()));
  Graph g = import_onnx(dir.path / "model.onnx");
  EXPECT_EQ(const_f32(g, g.find("w")), (F32s{0.5f, -2.f, 8.f}));
  EXPECT_EQ(g.value(g.find("w")).shape, (I64s{3}));
  // Same bytes in memory, resolved against an explicit base directory.
  Graph g2 = import_onnx_bytes(bytes_of(m), "mem", dir.path);
  EXPECT_EQ(const_f32(g2, g2.find("w")), (F32s{0.5f, -2.f, 8.f}));
}

TEST(ImportExternalData, TruncatedDataFileNamesTheInitializer) {
  TempDir dir;
  write_file(dir.path / "weights.bin", float_bytes({0.5f, -2.f}));  // 8 bytes, 12 needed
  auto m = external_data_model("weights.bin", 0);
  std::string e = import_error(m, dir.path);
  EXPECT_NE(e.find("initializer 'w' in mem.onnx: external data file"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

// onnx_import.h: "external data is resolved against base_dir (empty: external data is refused)".
TEST(ImportExternalData, EmptyBaseDirRefusesExternalData) {
  TempDir dir;
  write_file(dir.path / "weights.bin", float_bytes({1.f, 2.f, 3.f}));
  auto m = external_data_model("weights.bin", 0);
  fs::path old = fs::current_path();
  fs::current_path(dir.path);  // the data file would be found relative to the working directory
  bool threw = false;
  try {
    import_onnx_bytes(bytes_of(m), "mem.onnx", "");
  } catch (const Error& err) {
    threw = true;
    EXPECT_NE(std::string(err.what()).find("'w'"), std::string::npos) << err.what();
  }
  fs::current_path(old);
  EXPECT_TRUE(threw) << "external data was read although no base directory was given";
}

// ---- errors --------------------------------------------------------------------------------------

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(ImportErrors, UnsupportedOpsAllNamedInOneMessage) {
  onnx::ModelProto m;
  one_node(m, 13, {2}, "FancyOp", {"x"}, {"a"}, "fancy1");
  add_node(m, "Relu", {"a"}, {"b"}, "relu");
  add_node(m, "FancyOp", {"b"}, {"c"}, "fancy2");
  add_node(m, "OtherOp", {"c"}, {"d"}, "other1");
  add_node(m, "Inverse", {"d"}, {"e"}, "ms1")->set_domain("com.microsoft");
  std::string e = import_error(m);
  EXPECT_TRUE(has(e, "test.onnx: cannot import the model")) << e;
  EXPECT_TRUE(has(e, "unsupported op types (3)")) << e;
  EXPECT_TRUE(has(e, "FancyOp: 2 nodes (fancy1, fancy2)")) << e;
  EXPECT_TRUE(has(e, "OtherOp: 1 node (other1)")) << e;
  EXPECT_TRUE(has(e, "com.microsoft::Inverse: 1 node (ms1)")) << e;
  EXPECT_FALSE(has(e, "Relu:")) << e;
}

// Nodes downstream of an unsupported one (an SSDlite export: NonZero, then dozens of nodes reading
// its output) are not reported one by one: one message names the unsupported op types and their
// nodes (those downstream included), and nothing about the values they would have made.
TEST(ImportErrors, NothingAboutNodesDownstreamOfAnUnsupportedOne) {
  onnx::ModelProto m;
  one_node(m, 13, {2}, "FancyOp", {"x"}, {"a"}, "fancy1");
  add_node(m, "Relu", {"a"}, {"b"}, "relu");
  add_node(m, "Add", {"b", "x"}, {"c"}, "add");
  add_node(m, "OtherOp", {"c"}, {"d"}, "other1");
  add_node(m, "Relu", {"d"}, {"y"}, "relu2");
  add_node(m, "Relu", {"x"}, {"z"}, "independent");
  add_node(m, "Add", {"z", "ghost"}, {"w"}, "reads_ghost");
  const std::string e = import_error(m);
  EXPECT_TRUE(has(e, "unsupported op types (2)")) << e;
  EXPECT_TRUE(has(e, "FancyOp: 1 node (fancy1)")) << e;
  EXPECT_TRUE(has(e, "OtherOp: 1 node (other1)")) << e;
  EXPECT_FALSE(has(e, "'relu'")) << e;
  EXPECT_FALSE(has(e, "'add'")) << e;
  EXPECT_FALSE(has(e, "never computed")) << e;
  // A problem of its own, away from the unsupported nodes, is still reported.
  EXPECT_TRUE(has(e, "node 'reads_ghost' (Add): reads 'ghost'")) << e;
  size_t lines = 0;
  for (char ch : e) lines += ch == '\n';
  EXPECT_LE(lines, 5u) << e;
}

// Found by onnx_import_fuzz: an empty op type was taken for a supported one and its op kind read
// from an empty optional.
TEST(ImportErrors, NodeWithoutOpType) {
  onnx::ModelProto m;
  one_node(m, 13, {2}, "", {"x"}, {"a"}, "nameless");
  add_node(m, "Relu", {"a"}, {"y"}, "relu");
  const std::string e = import_error(m);
  EXPECT_TRUE(has(e, "node 'nameless' (): has no op_type")) << e;
  EXPECT_FALSE(has(e, "'relu'")) << e;
  EXPECT_FALSE(has(e, "unsupported op types")) << e;
}

TEST(ImportErrors, NodeReadingUndefinedValue) {
  onnx::ModelProto m;
  one_node(m, 13, {2}, "Add", {"x", "ghost"}, {"y"}, "adder");
  std::string e = import_error(m);
  EXPECT_TRUE(has(e, "node 'adder' (Add): reads 'ghost', which no earlier node, input or initializer defines")) << e;
}

TEST(ImportErrors, UnknownAttribute) {
  onnx::ModelProto m;
  attr_int(one_node(m, 13, {2}, "Relu", {"x"}, {"y"}, "r1"), "frobnicate", 1);
  std::string e = import_error(m);
  EXPECT_TRUE(has(e, "node 'r1' (Relu): has attribute 'frobnicate', which Kiln does not support for Relu at opset 13"))
      << e;
}

TEST(ImportErrors, BadEnumStringListsAllowedValues) {
  onnx::ModelProto m;
  attr_string(one_node(m, 13, {1, 1, 4, 4}, "Conv", {"x", "w"}, {"y"}, "conv"), "auto_pad", "FOO");
  add_init_f32(m, "w", {1, 1, 1, 1}, {1.f});
  std::string e = import_error(m);
  EXPECT_TRUE(has(e, "node 'conv' (Conv): attribute 'auto_pad' = \"FOO\" is not supported")) << e;
  EXPECT_TRUE(has(e, "(expected one of: NOTSET, SAME_UPPER, SAME_LOWER, VALID)")) << e;
}

TEST(ImportErrors, AttributeOfWrongType) {
  onnx::ModelProto m;
  attr_string(one_node(m, 13, {2, 3}, "Flatten", {"x"}, {"y"}, "fl"), "axis", "one");
  std::string e = import_error(m);
  EXPECT_TRUE(has(e, "node 'fl' (Flatten): attribute 'axis' should be an int")) << e;
}

TEST(ImportErrors, Opset24RejectedWithSupportedRange) {
  onnx::ModelProto m;
  one_node(m, 24, {2}, "Relu");
  std::string e = import_error(m);
  EXPECT_TRUE(has(e, "opset 24 of the default ONNX domain is not supported")) << e;
  EXPECT_TRUE(has(e, "(Kiln reads " + std::to_string(kMinOpset) + " to 23)")) << e;
  EXPECT_TRUE(has(e, "version_converter")) << e;
  one_node(m, 23, {2}, "Relu");
  EXPECT_NO_THROW(import(m));
}

template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ImportErrors, NotProtobuf) {
  const std::string text = "not an onnx model, just some text\n";
  std::vector<uint8_t> b(text.begin(), text.end());
  std::string e = error_of([&] { import_onnx_bytes(b, "notes.txt", ""); });
  EXPECT_TRUE(has(e, "notes.txt: not a valid ONNX model")) << e;
  TempDir dir;
  write_file(dir.path / "bad.onnx", text);
  e = error_of([&] { import_onnx(dir.path / "bad.onnx"); });
  EXPECT_TRUE(has(e, (dir.path / "bad.onnx").string() + ": not a valid ONNX model")) << e;
  e = error_of([&] { import_onnx(dir.path / "missing.onnx"); });
  EXPECT_TRUE(has(e, "missing.onnx: cannot open the file")) << e;
  e = error_of([&] { import_onnx(dir.path); });
  EXPECT_TRUE(has(e, dir.path.string() + ": not a regular file")) << e;
  write_file(dir.path / "empty.onnx", "");
  e = error_of([&] { import_onnx(dir.path / "empty.onnx"); });
  EXPECT_TRUE(has(e, "empty.onnx: the file is empty")) << e;
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  m.mutable_graph()->set_name("nothing");
  e = import_error(m);
  EXPECT_TRUE(has(e, "the graph has no outputs")) << e;
}

TEST(ImportErrors, SeveralProblemsReportedTogether) {
  onnx::ModelProto m;
  attr_int(one_node(m, 13, {2}, "Relu", {"x"}, {"a"}, "bad_attr"), "nope", 1);
  add_node(m, "Add", {"x", "ghost"}, {"b"}, "bad_input");
  std::string e = import_error(m);
  EXPECT_TRUE(has(e, "node 'bad_attr' (Relu): has attribute 'nope'")) << e;
  EXPECT_TRUE(has(e, "node 'bad_input' (Add): reads 'ghost'")) << e;
}

// ---- shapes ------------------------------------------------------------------------------------

TEST(ImportShapes, SymbolicDimsKeptAsDimParams) {
  onnx::ModelProto m;
  one_node(m, 13, {"batch", 3, "seq"}, "Relu");
  Graph g = import(m);
  const Value& x = g.value(g.find("x"));
  EXPECT_TRUE(x.has_shape);
  EXPECT_EQ(x.shape, (I64s{-1, 3, -1}));
  EXPECT_EQ(x.dim_params, (std::vector<std::string>{"batch", "", "seq"}));
  EXPECT_FALSE(x.shape_static());
}

TEST(ImportShapes, StaticShapeHasNoDimParamsAndUnnamedDimIsQuestionMark) {
  onnx::ModelProto m;
  one_node(m, 13, {2, 3}, "Relu");
  auto* vi = m.mutable_graph()->add_input();
  vi->set_name("z");
  set_type(vi, onnx::TensorProto::INT64, {4});
  vi->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim();  // neither value nor param
  Graph g = import(m);
  const Value& x = g.value(g.find("x"));
  EXPECT_EQ(x.shape, (I64s{2, 3}));
  EXPECT_TRUE(x.dim_params.empty());
  EXPECT_TRUE(x.shape_static());
  const Value& z = g.value(g.find("z"));
  EXPECT_EQ(z.dtype, DataType::kInt64);
  EXPECT_EQ(z.shape, (I64s{4, -1}));
  EXPECT_EQ(z.dim_params, (std::vector<std::string>{"", "?"}));
  ASSERT_EQ(g.inputs.size(), 2u);
}

// Found by onnx_import_fuzz (under ASan): aligning a non-constant slope read its name after adding
// values had moved it.
TEST(ImportOpset, PReluBeforeOpset7AlignsAnInputSlopeOnChannels) {
  onnx::ModelProto m;
  one_node(m, 6, {3, 5, 5}, "PRelu", {"x", "slope"}, {"y"}, "prelu");
  add_input(m, "slope", {5});
  Graph g = import(m);
  const Node& u = only_node(g, OpKind::kUnsqueeze);
  EXPECT_EQ(u.inputs[0], g.find("slope"));
  EXPECT_EQ(const_i64(g, u.inputs[1]), (I64s{1}));
  EXPECT_TRUE(g.value(u.outputs[0]).name.starts_with("slope_aligned")) << g.value(u.outputs[0]).name;
  EXPECT_EQ(only_node(g, OpKind::kPRelu).inputs[1], u.outputs[0]);
}

// ---- ONNX functions: op types defined by a body of other ops ---------------------------------------

std::vector<OpKind> kinds(const Graph& g) {
  std::vector<OpKind> k;
  for (const Node& n : g.nodes) k.push_back(n.kind);
  return k;
}

// A model function custom.ScaledRelu(X) = Relu(X * alpha), alpha an attribute of the call.
onnx::FunctionProto* add_scaled_relu(onnx::ModelProto& m, const std::string& body_op = "Relu") {
  auto* dom = m.add_opset_import();
  dom->set_domain("custom");
  dom->set_version(1);
  onnx::FunctionProto* f = m.add_functions();
  f->set_name("ScaledRelu");
  f->set_domain("custom");
  f->add_input("X");
  f->add_output("Y");
  f->add_attribute("alpha");
  auto* o = f->add_opset_import();
  o->set_domain("");
  o->set_version(13);
  auto* c = f->add_node();
  c->set_op_type("Constant");
  c->add_output("a");
  auto* ref = c->add_attribute();
  ref->set_name("value_float");
  ref->set_type(onnx::AttributeProto::FLOAT);
  ref->set_ref_attr_name("alpha");
  auto* mul = f->add_node();
  mul->set_op_type("Mul");
  mul->add_input("X");
  mul->add_input("a");
  mul->add_output("t");
  auto* r = f->add_node();
  r->set_op_type(body_op);
  r->add_input("t");
  r->add_output("Y");
  return f;
}

onnx::NodeProto* call(onnx::ModelProto& m, const std::string& fn, const std::string& in, const std::string& out,
                      const std::string& name) {
  onnx::NodeProto* n = add_node(m, fn, {in}, {out}, name);
  n->set_domain("custom");
  return n;
}

TEST(ImportFunctions, SchemaFunctionExpandsAtItsOwnOpsetWithTheSchemaDefaults) {
  // MeanVarianceNormalization's body (opset 13) gives ReduceMean an axes attribute, which opset 18
  // made an input: the body is read at its own opset, not the model's. No axes: the schema's
  // default, [0, 2, 3].
  onnx::ModelProto m;
  one_node(m, 18, {2, 3, 4, 5}, "MeanVarianceNormalization", {"x"}, {"y"}, "mvn");
  Graph g = import(m);
  const std::vector<OpKind> body = {OpKind::kReduceMean, OpKind::kPow, OpKind::kPow, OpKind::kReduceMean,
                                    OpKind::kSub,        OpKind::kSqrt, OpKind::kSub, OpKind::kAdd,
                                    OpKind::kDiv};
  EXPECT_EQ(kinds(g), body);
  EXPECT_EQ(const_i64(g, g.nodes[0].inputs[1]), (I64s{0, 2, 3}));
  EXPECT_EQ(g.nodes[0].name, "mvn/ReduceMean_2");
  EXPECT_EQ(g.nodes.back().outputs[0], g.find("y"));
  ASSERT_EQ(g.outputs.size(), 1u);

  attr_ints(one_node(m, 13, {2, 3, 4}, "MeanVarianceNormalization", {"x"}, {"y"}, "mvn"), "axes", {1});
  g = import(m);
  EXPECT_EQ(kinds(g), body);
  EXPECT_EQ(const_i64(g, g.nodes[0].inputs[1]), (I64s{1}));
}

TEST(ImportFunctions, OpsKilnRunsNativelyAreNotExpanded) {
  onnx::ModelProto m;
  one_node(m, 14, {4}, "HardSwish");  // ONNX defines it by a function body as well
  EXPECT_EQ(kinds(import(m)), (std::vector<OpKind>{OpKind::kHardSwish}));
}

TEST(ImportFunctions, ModelFunctionsTakeTheCallsAttributesAndGetFreshNames) {
  onnx::ModelProto m;
  one_node(m, 17, {4}, "Relu", {"x"}, {"x1"}, "first");
  add_scaled_relu(m);
  attr_float(call(m, "ScaledRelu", "x1", "h", "c1"), "alpha", 2.0f);
  attr_float(call(m, "ScaledRelu", "h", "y", "c2"), "alpha", 3.0f);
  add_node(m, "Identity", {"x1"}, {"c2/t"}, "taken");  // the name the second call's temporary would get
  add_output(m, "y");
  add_output(m, "c2/t");
  Graph g = import(m);
  EXPECT_EQ(kinds(g), (std::vector<OpKind>{OpKind::kRelu, OpKind::kMul, OpKind::kRelu, OpKind::kMul, OpKind::kRelu,
                                           OpKind::kIdentity}));
  EXPECT_EQ(const_f32(g, g.nodes[1].inputs[1]), (F32s{2.0f}));
  EXPECT_EQ(const_f32(g, g.nodes[3].inputs[1]), (F32s{3.0f}));
  EXPECT_EQ(g.value(g.nodes[1].outputs[0]).name, "c1/t");
  EXPECT_EQ(g.value(g.nodes[3].outputs[0]).name, "c2/t_1");
  EXPECT_EQ(g.nodes[2].outputs[0], g.find("h"));
  EXPECT_EQ(g.nodes[4].outputs[0], g.find("y"));
  EXPECT_EQ(g.nodes[3].name, "c2/Mul_1");
}

TEST(ImportFunctions, AnUnsupportedOpInABodyIsNamedWithItsCall) {
  onnx::ModelProto m;
  one_node(m, 17, {4}, "Relu", {"x"}, {"x1"});
  add_scaled_relu(m, "FancyOp");
  attr_float(call(m, "ScaledRelu", "x1", "y", "c1"), "alpha", 2.0f);
  const std::string e = import_error(m);
  EXPECT_TRUE(has(e, "unsupported op types (1)")) << e;
  EXPECT_TRUE(has(e, "FancyOp: 1 node (c1/FancyOp_2)")) << e;
}

TEST(ImportFunctions, AProblemInABodyNamesTheCall) {
  onnx::ModelProto m;
  one_node(m, 17, {4}, "Relu", {"x"}, {"x1"});
  add_scaled_relu(m);
  call(m, "ScaledRelu", "x1", "y", "c1");  // no alpha: the body's Constant gets no value
  const std::string e = import_error(m);
  EXPECT_TRUE(has(e, "in the function body of ScaledRelu 'c1'")) << e;
}

TEST(ImportFunctions, AFunctionThatCallsItselfIsAnError) {
  onnx::ModelProto m;
  one_node(m, 17, {4}, "Relu", {"x"}, {"x1"});
  onnx::FunctionProto* f = add_scaled_relu(m, "ScaledRelu");
  f->mutable_node(2)->set_domain("custom");
  attr_float(call(m, "ScaledRelu", "x1", "y", "c1"), "alpha", 2.0f);
  const std::string e = import_error(m);
  EXPECT_TRUE(has(e, "functions nest more than 8 deep")) << e;
}

// Found in review: the node cap counted only the nodes expansion produced, so functions calling
// functions that produce nothing could make 150^8 calls.
TEST(ImportFunctions, ExpansionStopsAtAMillionNodesVisited) {
  onnx::ModelProto m;
  one_node(m, 17, {4}, "Relu", {"x"}, {"y"});
  for (int level = 1; level <= 8; ++level) {
    onnx::FunctionProto* f = m.add_functions();
    f->set_name("F" + std::to_string(level));
    f->set_domain("custom");
    if (level == 8) continue;  // the innermost does nothing
    for (int k = 0; k < 8; ++k) {  // 8^7 calls of F8
      auto* c = f->add_node();
      c->set_op_type("F" + std::to_string(level + 1));
      c->set_domain("custom");
    }
  }
  call(m, "F1", "x", "", "top")->clear_input();
  m.mutable_graph()->mutable_node(1)->clear_output();
  const std::string e = import_error(m);
  EXPECT_TRUE(has(e, "expands to more than 1048576 nodes")) << e;
}

TEST(ImportFunctions, DefaultDomainNodesNeedTheDefaultOpset) {
  onnx::ModelProto m;
  one_node(m, 17, {4}, "Relu", {"x"}, {"y"}, "relu");
  m.mutable_opset_import(0)->set_domain("custom");
  const std::string e = import_error(m);
  EXPECT_TRUE(has(e, "node 'relu' is a Relu of the default ONNX domain, but the model imports no opset")) << e;
}

TEST(ImportFunctions, ACallWithMoreInputsThanItsFunctionIsAnError) {
  onnx::ModelProto m;
  one_node(m, 17, {4}, "Relu", {"x"}, {"x1"});
  add_scaled_relu(m);
  call(m, "ScaledRelu", "x1", "y", "c1")->add_input("x");
  const std::string e = import_error(m);
  EXPECT_TRUE(has(e, "node 'c1' (ScaledRelu) has 2 inputs and 1 outputs; its function takes 1 and gives 1")) << e;
}

TEST(ImportFunctions, KilnBodiesCheckTheirAttributes) {
  onnx::ModelProto m;
  auto* n = one_node(m, 17, {2, 8, 1}, "DFT", {"x"}, {"y"}, "spectrum");
  attr_int(n, "inverse", 1);
  attr_int(n, "onesided", 1);
  std::string e = import_error(m);
  EXPECT_TRUE(has(e, "node 'spectrum' (DFT): DFT: inverse and onesided cannot both be set")) << e;

  n = one_node(m, 10, {4, 4}, "ReverseSequence", {"x", "lens"}, {"y"}, "rev");
  add_input(m, "lens", {4}, onnx::TensorProto::INT64);
  attr_int(n, "time_axis", 1);
  attr_int(n, "batch_axis", 1);
  e = import_error(m);
  EXPECT_TRUE(has(e, "node 'rev' (ReverseSequence): ReverseSequence: time_axis 1 and batch_axis 1 should be")) << e;

  n = one_node(m, 11, {1, 1, 2, 2}, "MaxUnpool", {"x", "i"}, {"y"}, "unpool");
  e = import_error(m);
  EXPECT_TRUE(has(e, "node 'unpool' (MaxUnpool): MaxUnpool: attribute 'kernel_shape' is required")) << e;

  one_node(m, 16, {1, 3, 8, 8}, "RoiAlign", {"x", "rois", "batch"}, {"y"}, "roi");  // sampling_ratio 0
  e = import_error(m);
  EXPECT_TRUE(has(e, "node 'roi' (RoiAlign): RoiAlign: sampling_ratio 0 is not supported")) << e;

  n = one_node(m, 17, {4}, "TfIdfVectorizer", {"x"}, {"y"}, "tfidf");
  attr_string(n, "mode", "TF");
  auto* strings = new_attr(n, "pool_strings", onnx::AttributeProto::STRINGS);
  strings->add_strings("a");
  e = import_error(m);
  EXPECT_TRUE(has(e, "node 'tfidf' (TfIdfVectorizer): TfIdfVectorizer: string n-grams (pool_strings) are not")) << e;
}

}  // namespace
}  // namespace kiln::graph
