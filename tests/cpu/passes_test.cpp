// Tests for the build pipeline (src/passes): folding of shape computations, identity and dead-node
// removal, pass selection, and how inputs are bound (symbolic dims, frozen inputs).
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <string>

#include "build/build.h"
#include "graph/onnx_import.h"
#include "kiln/engine.h"
#include "onnx_model_util.h"
#include "passes/pass.h"

namespace kiln::passes {

using namespace kiln::build;  // build_engine, BuildOptions: the passes run inside a build
namespace {

using namespace kiln::test;  // attr_* and import_model (onnx_model_util.h)

using graph::Graph;
using I64s = std::vector<int64_t>;

// ---- model helpers --------------------------------------------------------------------------------

struct Dim {
  int64_t value = -1;
  std::string param;
  Dim(int64_t v) : value(v) {}      // NOLINT
  Dim(const char* p) : param(p) {}  // NOLINT
};

// OnnxModel, whose inputs' dimensions may be symbolic (dim_param).
struct Model : OnnxModel {
  using OnnxModel::OnnxModel;
  void input(const std::string& name, const std::vector<Dim>& dims, int32_t elem = onnx::TensorProto::FLOAT) {
    auto* vi = g()->add_input();
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    for (const Dim& d : dims) {
      auto* dim = tt->mutable_shape()->add_dim();
      if (d.param.empty())
        dim->set_dim_value(d.value);
      else
        dim->set_dim_param(d.param);
    }
  }
};

std::string build_error(Graph& g, const BuildOptions& o) {
  try {
    build_engine(g, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::vector<float> iota_f(size_t n, float start = 0.f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

std::vector<float> run_one(const std::vector<uint8_t>& engine, const std::string& in, const std::vector<float>& x,
                           const std::string& out) {
  auto e = Engine::from_bytes(engine);
  auto ctx = e->create_context(1);
  ctx->set_input(in, x.data(), x.size() * 4);
  ctx->run();
  auto bytes = ctx->output(out);
  std::vector<float> y(bytes.size() / 4);
  std::memcpy(y.data(), bytes.data(), bytes.size());
  return y;
}

std::vector<std::string> step_ops(const std::vector<uint8_t>& engine) {
  std::vector<std::string> ops;
  for (const StepInfo& s : Engine::from_bytes(engine)->summary().steps) ops.push_back(s.op);
  return ops;
}

// ---- infer-and-fold -------------------------------------------------------------------------------

// x[2,3,4] -> Shape -> Gather(0) -> Unsqueeze -> Concat([-1]) -> Reshape(x, .) -> y[2,12], then Relu.
Model shape_chain_model() {
  Model m("chain", 13);
  m.input("x", {2, 3, 4});
  m.init_i64("zero", {}, {0});
  m.init_i64("axes0", {1}, {0});
  m.init_i64("minus1", {1}, {-1});
  m.node("Shape", "shape", {"x"}, {"s"});
  m.node("Gather", "gather", {"s", "zero"}, {"d0"});
  m.node("Unsqueeze", "unsqueeze", {"d0", "axes0"}, {"d0u"});
  auto* c = m.node("Concat", "concat", {"d0u", "minus1"}, {"target"});
  auto* a = c->add_attribute();
  a->set_name("axis");
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(0);
  m.node("Reshape", "reshape", {"x", "target"}, {"r"});
  m.node("Neg", "neg", {"r"}, {"y"});
  m.output("y");
  return m;
}

TEST(PassesFold, ShapeChainFoldsIntoAConstant) {
  Graph g = shape_chain_model().import();
  ASSERT_EQ(g.nodes.size(), 6u);
  BuildOptions o;
  PassResult bound = bind_inputs(g, o);
  EXPECT_EQ(bound.changes, 0);
  PassResult folded = infer_and_fold(g, o);
  EXPECT_EQ(folded.changes, 4);  // Shape, Gather, Unsqueeze, Concat
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[0].kind, OpKind::kReshape);
  EXPECT_EQ(g.nodes[1].kind, OpKind::kNeg);
  const graph::Value& target = g.value(g.find("target"));
  ASSERT_TRUE(target.is_constant());
  EXPECT_EQ(target.dtype, DataType::kInt64);
  EXPECT_EQ(target.shape, (I64s{2}));
  I64s t(2);
  std::memcpy(t.data(), target.data->data(), 16);
  EXPECT_EQ(t, (I64s{2, -1}));
  EXPECT_EQ(g.value(g.find("r")).shape, (I64s{2, 12}));
  EXPECT_EQ(g.value(g.find("y")).shape, (I64s{2, 12}));
  EXPECT_NO_THROW(graph::verify(g, true));
}

TEST(PassesFold, FoldedEngineStillComputesTheRightValues) {
  Graph g = shape_chain_model().import();
  BuildReport report;
  std::vector<uint8_t> engine = build_engine(g, BuildOptions{}, &report);
  EXPECT_EQ(report.nodes_in, 6u);
  EXPECT_EQ(report.nodes_out, 2u);
  ASSERT_FALSE(report.passes.empty());
  bool saw_fold = false;
  for (const PassReport& p : report.passes)
    if (p.name == "infer-and-fold") {
      saw_fold = true;
      EXPECT_EQ(p.changes, 4);
    }
  EXPECT_TRUE(saw_fold);
  EXPECT_EQ(step_ops(engine), (std::vector<std::string>{"Reshape", "Neg"}));
  auto e = Engine::from_bytes(engine);
  EXPECT_EQ(e->outputs()[0].shape, (I64s{2, 12}));
  std::vector<float> x = iota_f(24, -5.f);
  std::vector<float> y = run_one(engine, "x", x, "y");
  ASSERT_EQ(y.size(), 24u);
  for (size_t i = 0; i < 24; ++i) EXPECT_EQ(y[i], -x[i]) << i;
}

TEST(PassesFold, FullyConstantModelBecomesACopy) {
  Model m("consts", 13);
  m.input("x", {2});
  m.init_i64("a", {2}, {3, 4});
  m.init_i64("b", {2}, {10, 20});
  m.node("Add", "add", {"a", "b"}, {"sum"});
  m.node("Mul", "mul", {"sum", "a"}, {"prod"});
  m.node("Relu", "relu", {"x"}, {"y"});
  m.output("prod");
  m.output("y");
  Graph g = m.import();
  std::vector<uint8_t> engine = build_engine(g, BuildOptions{});
  auto e = Engine::from_bytes(engine);
  auto ctx = e->create_context(1);
  std::vector<float> x = {-1.f, 2.f};
  ctx->set_input("x", x.data(), 8);
  ctx->run();
  I64s prod(2);
  ASSERT_EQ(ctx->output("prod").size(), 16u);
  std::memcpy(prod.data(), ctx->output("prod").data(), 16);
  EXPECT_EQ(prod, (I64s{39, 96}));
  EXPECT_EQ(step_ops(engine), (std::vector<std::string>{"Relu", "Identity"}));
}

// ---- remove-identity / remove-dead-nodes -------------------------------------------------------------

TEST(PassesIdentity, RemovedButGraphOutputNamesKept) {
  Model m("ids", 13);
  m.input("x", {4});
  m.node("Identity", "id_in", {"x"}, {"x1"});
  m.node("Relu", "relu", {"x1"}, {"r"});
  m.node("Identity", "id_out", {"r"}, {"result"});
  m.output("result");
  Graph g = m.import();
  std::vector<uint8_t> engine = build_engine(g, BuildOptions{});
  EXPECT_EQ(step_ops(engine), (std::vector<std::string>{"Relu"}));
  auto e = Engine::from_bytes(engine);
  ASSERT_EQ(e->outputs().size(), 1u);
  EXPECT_EQ(e->outputs()[0].name, "result");
  EXPECT_EQ(e->summary().steps[0].outputs, (std::vector<std::string>{"result"}));
  EXPECT_EQ(run_one(engine, "x", {-2.f, -0.f, 1.f, 3.f}, "result"), (std::vector<float>{0.f, 0.f, 1.f, 3.f}));

  Graph g2 = m.import();
  BuildOptions keep;
  keep.disabled_passes = {"remove-identity", "view-reshapes"};
  EXPECT_EQ(step_ops(build_engine(g2, keep)), (std::vector<std::string>{"Identity", "Relu", "Identity"}));
  // Without remove-identity, view-reshapes still drops the copy into the output (Relu writes the
  // output's memory); the copy of the engine input stays (an input hosts no views).
  Graph g3 = m.import();
  keep.disabled_passes = {"remove-identity"};
  std::vector<uint8_t> engine3 = build_engine(g3, keep);
  EXPECT_EQ(step_ops(engine3), (std::vector<std::string>{"Identity", "Relu"}));
  EXPECT_EQ(run_one(engine3, "x", {-2.f, -0.f, 1.f, 3.f}, "result"), (std::vector<float>{0.f, 0.f, 1.f, 3.f}));
}

TEST(PassesIdentity, IdentityOfAnInputToAnOutputStays) {
  Model m("passthrough", 13);
  m.input("x", {3});
  m.node("Identity", "copy", {"x"}, {"y"});
  m.output("y");
  Graph g = m.import();
  std::vector<uint8_t> engine = build_engine(g, BuildOptions{});
  EXPECT_EQ(step_ops(engine), (std::vector<std::string>{"Identity"}));
  EXPECT_EQ(run_one(engine, "x", {1.f, 2.f, 3.f}, "y"), (std::vector<float>{1.f, 2.f, 3.f}));
}

TEST(PassesIdentity, OutputFedBothDirectlyAndThroughIdentity) {
  // r is a graph output and also copied to a second output: both names must survive.
  Model m("two_outputs", 13);
  m.input("x", {2});
  m.node("Relu", "relu", {"x"}, {"r"});
  m.node("Identity", "copy", {"r"}, {"r_copy"});
  m.output("r");
  m.output("r_copy");
  Graph g = m.import();
  std::vector<uint8_t> engine = build_engine(g, BuildOptions{});
  auto e = Engine::from_bytes(engine);
  ASSERT_EQ(e->outputs().size(), 2u);
  EXPECT_EQ(e->outputs()[0].name, "r");
  EXPECT_EQ(e->outputs()[1].name, "r_copy");
  auto ctx = e->create_context(1);
  std::vector<float> x = {-1.f, 5.f};
  ctx->set_input("x", x.data(), 8);
  ctx->run();
  for (const char* name : {"r", "r_copy"}) {
    std::vector<float> y(2);
    std::memcpy(y.data(), ctx->output(name).data(), 8);
    EXPECT_EQ(y, (std::vector<float>{0.f, 5.f})) << name;
  }
}

TEST(PassesDeadNodes, UnusedBranchRemoved) {
  Model m("dead", 13);
  m.input("x", {3});
  m.node("Relu", "relu", {"x"}, {"y"});
  m.node("Sigmoid", "unused1", {"x"}, {"s"});
  m.node("Exp", "unused2", {"s"}, {"t"});
  m.output("y");
  Graph g = m.import();
  BuildReport report;
  std::vector<uint8_t> engine = build_engine(g, BuildOptions{}, &report);
  EXPECT_EQ(report.nodes_in, 3u);
  EXPECT_EQ(report.nodes_out, 1u);
  EXPECT_EQ(step_ops(engine), (std::vector<std::string>{"Relu"}));
  for (const PassReport& p : report.passes)
    if (p.name == "remove-dead-nodes") EXPECT_EQ(p.changes, 2);

  Graph g2 = m.import();
  BuildOptions keep;
  keep.disabled_passes = {"remove-dead-nodes"};
  EXPECT_EQ(step_ops(build_engine(g2, keep)), (std::vector<std::string>{"Relu", "Sigmoid", "Exp"}));
}

// Found by onnx_import_fuzz: a node whose outputs are all "" (GRU's are all optional) has none,
// and infer-and-fold read outputs[0] of every node before looking at its kind.
TEST(PassesDeadNodes, NodesWithoutOutputsAreDropped) {
  Model m("no_outputs", 17);
  m.input("x", {1, 3, 2});
  m.input("w", {1, 15, 2});
  m.input("r", {1, 15, 5});
  auto* gru = m.node("GRU", "gru", {"x", "w", "r"}, {""});
  auto* a = gru->add_attribute();
  a->set_name("hidden_size");
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(5);
  m.node("Relu", "relu", {"x"}, {"y"});
  m.output("y");
  Graph g = m.import();
  EXPECT_EQ(step_ops(build_engine(g, BuildOptions{})), (std::vector<std::string>{"Relu"}));
}

// ---- pass selection --------------------------------------------------------------------------------

TEST(PassesSelection, DisablingARequiredPassIsAnError) {
  for (const char* required : {"bind-inputs", "infer-and-fold", "materialize-outputs"}) {
    Graph g = shape_chain_model().import();
    BuildOptions o;
    o.disabled_passes = {required};
    std::string e = build_error(g, o);
    EXPECT_TRUE(has(e, std::string("pass ") + required + " is required and cannot be disabled")) << e;
  }
}

TEST(PassesSelection, UnknownPassNameListsThePasses) {
  Graph g = shape_chain_model().import();
  BuildOptions o;
  o.disabled_passes = {"remove-identity", "constant-folding"};
  std::string e = build_error(g, o);
  EXPECT_TRUE(has(e, "--disable-pass constant-folding: no such pass")) << e;
  EXPECT_TRUE(has(e,
                  "bind-inputs, infer-and-fold, remove-noop, merge-transpose-reshape, fuse-layernorm, fuse-gelu,"
                  " fuse-attention, fold-pad, fold-batchnorm, fold-scale-shift, remove-identity, conv-patches, "
                  "quantize-int8, fuse-qdq,"
                  " fuse-qresidual, fuse-epilogue, fuse-siblings, pad-gemm-columns, remove-dead-nodes, to-fp16,"
                  " channels-last,"
                  " fuse-conv-input, fuse-conv-quantize, fuse-conv-pool,"
                  " materialize-outputs, view-reshapes, eliminate-concat, eliminate-split"))
      << e;
}

// ---- input binding ---------------------------------------------------------------------------------

TEST(PassesBind, SymbolicBatchDimTakesBatchOption) {
  Model m("batched", 13);
  m.input("x", {"N", 3});
  m.node("Relu", "relu", {"x"}, {"y"});
  m.output("y");
  Graph g = m.import();
  BuildOptions o;
  o.batch = 4;
  std::vector<uint8_t> engine = build_engine(g, o);
  auto e = Engine::from_bytes(engine);
  EXPECT_EQ(e->inputs()[0].shape, (I64s{4, 3}));
  EXPECT_EQ(e->outputs()[0].shape, (I64s{4, 3}));
  std::vector<float> x = iota_f(12, -6.f);
  std::vector<float> y = run_one(engine, "x", x, "y");
  ASSERT_EQ(y.size(), 12u);
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(y[i], std::max(x[i], 0.f));
  Graph g1 = m.import();
  EXPECT_EQ(Engine::from_bytes(build_engine(g1, BuildOptions{}))->inputs()[0].shape, (I64s{1, 3}));
}

TEST(PassesBind, SymbolicNonBatchDimNeedsInputShapes) {
  Model m("seq", 13);
  m.input("tokens", {1, "seq_len"});
  m.node("Relu", "relu", {"tokens"}, {"y"});
  m.output("y");
  Graph g = m.import();
  std::string e = build_error(g, BuildOptions{});
  EXPECT_TRUE(has(e, "input 'tokens' has shape 1xseq_len: dimension 1 is symbolic")) << e;
  EXPECT_TRUE(has(e, "--shape tokens=")) << e;

  Graph g2 = m.import();
  BuildOptions o;
  o.input_shapes["tokens"] = {1, 7};
  auto eng = Engine::from_bytes(build_engine(g2, o));
  EXPECT_EQ(eng->inputs()[0].shape, (I64s{1, 7}));

  Graph g3 = m.import();
  o.input_shapes["tokens"] = {2, 7};  // contradicts the fixed dim 0
  e = build_error(g3, o);
  EXPECT_TRUE(has(e, "input 'tokens' has shape 1xseq_len in the model, but [2,7] was given")) << e;

  Graph g4 = m.import();
  BuildOptions wrong;
  wrong.input_shapes["nope"] = {1};
  e = build_error(g4, wrong);
  EXPECT_TRUE(has(e, "--shape nope: the model has no input of that name")) << e;
}

Model reshape_by_input_model() {
  Model m("dyn_reshape", 13);
  m.input("x", {2, 6});
  m.input("shape", {2}, onnx::TensorProto::INT64);
  m.node("Reshape", "reshape", {"x", "shape"}, {"y"});
  m.output("y");
  return m;
}

HostTensor i64_tensor(const I64s& v) {
  HostTensor t;
  t.dtype = DataType::kInt64;
  t.shape = {static_cast<int64_t>(v.size())};
  t.data.resize(v.size() * 8);
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

TEST(PassesBind, InputThatDeterminesAShapeMustBeFrozen) {
  Graph g = reshape_by_input_model().import();
  EXPECT_EQ(shape_determining_inputs(g), (std::vector<std::string>{"shape"}));
  std::string e = build_error(g, BuildOptions{});
  EXPECT_TRUE(has(e, "node 'reshape' (Reshape)")) << e;
  EXPECT_TRUE(has(e, "must be a constant")) << e;
  EXPECT_TRUE(has(e, "It depends on the model input(s): shape;")) << e;
  EXPECT_TRUE(has(e, "--const NAME=FILE")) << e;
}

TEST(PassesBind, InputFrozenWithConstantInputs) {
  Graph g = reshape_by_input_model().import();
  BuildOptions o;
  o.constant_inputs["shape"] = i64_tensor({3, -1});
  std::vector<uint8_t> engine = build_engine(g, o);
  auto e = Engine::from_bytes(engine);
  ASSERT_EQ(e->inputs().size(), 1u);  // the frozen input is gone
  EXPECT_EQ(e->inputs()[0].name, "x");
  EXPECT_EQ(e->outputs()[0].shape, (I64s{3, 4}));
  std::vector<float> x = iota_f(12);
  EXPECT_EQ(run_one(engine, "x", x, "y"), x);
}

TEST(PassesBind, FrozenInputErrors) {
  {
    Graph g = reshape_by_input_model().import();
    BuildOptions o;
    o.constant_inputs["missing"] = i64_tensor({3, 4});
    EXPECT_TRUE(has(build_error(g, o), "--const missing: the model has no input of that name"));
  }
  {
    Graph g = reshape_by_input_model().import();
    BuildOptions o;
    HostTensor t = i64_tensor({3, 4});
    t.dtype = DataType::kInt32;
    t.data.resize(8);
    o.constant_inputs["shape"] = t;
    std::string e = build_error(g, o);
    EXPECT_TRUE(has(e, "input 'shape' is int64 in the model, but the value given is int32")) << e;
  }
  {
    Graph g = reshape_by_input_model().import();
    BuildOptions o;
    o.constant_inputs["shape"] = i64_tensor({3, 4, 1});
    std::string e = build_error(g, o);
    EXPECT_TRUE(has(e, "input 'shape' has shape 2 in the model, but [3] was given")) << e;
  }
}

}  // namespace
}  // namespace kiln::passes
