// fuse-conv-pool: a channels-last INT8 convolution whose float32 output only a ReduceMean over its
// spatial axes reads (GlobalAveragePool after channels-last) becomes one NhwcQConv with pool_mean,
// whose output is the pooled [N, 1, 1, M]. Positive cases (a classifier's end through the INT8
// passes and channels-last; NhwcQConv graphs built here, with a residual z, 64 pixels, negative
// axes), the guards (another reader of the conv's output, a graph output, an int8 output, other
// axes, keepdims 0, more than 64 pixels), shape inference of pool_mean, and numeric parity on the
// CPU backend: the fused node computes the convolution's output and averages it with ReduceMean's
// kernel, as the pair did, so the engines' outputs are equal, not merely close.
#include <cstring>
#include <fstream>
#include <random>

#include "build/quantize_int8.h"
#include "int8_test_util.h"
#include "layout_build.h"
#include "op_test_util.h"

namespace kiln::passes {

using namespace kiln::build;  // build_engine, BuildOptions: the passes run inside a build
namespace {

using namespace kiln::test;
using graph::kNoValue;
using graph::ValueId;
using testing::PrintToString;

template <class T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// The graph the tests below build: x [n, h, w, 8] float32 -> QuantizeLinear -> NhwcQConv (k x k,
// pads k / 2, 8 -> 16 channels, Relu; z [n, h, w, 16] added where asked) -> y [n, h, w, 16] ->
// ReduceMean(axes, keepdims) -> "p", the graph's output.
struct Spec {
  int64_t n = 2, h = 6, w = 6, k = 3;
  std::vector<int64_t> axes{1, 2};  // empty: ReduceMean without axes (all of them)
  int64_t keepdims = 1;
  enum class Residual { kNone, kFloat, kInt8 } residual = Residual::kNone;  // z, a graph input "z"
  bool y_output = false;  // y is a graph output too
  bool y_relu = false;    // a Relu reads y too; its output "r" is a graph output
  bool y_int8 = false;    // the conv quantizes y (y_scale); a DequantizeLinear reads it for the ReduceMean
};

constexpr int64_t kC = 8, kM = 16;

ValueId add_value(graph::Graph& g, const std::string& name, DataType dt = DataType::kFloat32,
                  std::vector<int64_t> shape = {}) {
  graph::Value v;
  v.name = name;
  v.dtype = dt;
  v.has_shape = !shape.empty();
  v.shape = std::move(shape);
  return g.add_value(std::move(v));
}

void add_node(graph::Graph& g, const std::string& name, OpKind kind, Attrs attrs, std::vector<ValueId> ins,
              std::vector<ValueId> outs) {
  g.nodes.push_back(graph::Node{name, kind, std::move(attrs), std::move(ins), std::move(outs), name});
}

ValueId scalar(graph::Graph& g, const std::string& name, float v) {
  return g.add_constant(name, DataType::kFloat32, {}, bytes_of(std::vector<float>{v}));
}
ValueId scalar_i8(graph::Graph& g, const std::string& name, int8_t v) {
  return g.add_constant(name, DataType::kInt8, {}, bytes_of(std::vector<int8_t>{v}));
}

// The graph of `s`, inferred and verified.
graph::Graph conv_pool_graph(const Spec& s) {
  graph::Graph g;
  g.name = "conv_pool";
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> w8(-60, 60);
  std::uniform_real_distribution<float> u(-0.2f, 0.2f);
  const ValueId x = add_value(g, "x", DataType::kFloat32, {s.n, s.h, s.w, kC});
  g.inputs.push_back(x);
  const ValueId xs = scalar(g, "xs", 0.01f), xz = scalar_i8(g, "xz", 0);
  const ValueId xq = add_value(g, "xq");
  add_node(g, "quant", OpKind::kQuantizeLinear, QuantizeAttrs{}, {x, xs, xz}, {xq});
  std::vector<int8_t> wv(static_cast<size_t>(kM * s.k * s.k * kC));
  for (int8_t& v : wv) v = static_cast<int8_t>(w8(rng));
  std::vector<float> ws(kM), bias(kM);
  for (int64_t m = 0; m < kM; ++m) ws[static_cast<size_t>(m)] = 0.002f + 0.0005f * static_cast<float>(m % 5);
  for (float& b : bias) b = u(rng);
  std::vector<ValueId> ins{xq,
                           xs,
                           xz,
                           g.add_constant("w", DataType::kInt8, {kM, s.k, s.k, kC}, bytes_of(wv)),
                           g.add_constant("ws", DataType::kFloat32, {kM}, bytes_of(ws)),
                           kNoValue,
                           g.add_constant("bias", DataType::kFloat32, {kM}, bytes_of(bias)),
                           kNoValue,
                           kNoValue};
  if (s.y_int8) {
    ins[7] = scalar(g, "ys", 0.02f);
    ins[8] = scalar_i8(g, "yz", 0);
  }
  if (s.residual != Spec::Residual::kNone) {
    const ValueId z = add_value(g, "z", DataType::kFloat32, {s.n, s.h, s.w, kM});
    g.inputs.push_back(z);
    if (s.residual == Spec::Residual::kFloat) {
      ins.push_back(z);
    } else {
      const ValueId zs = scalar(g, "zs", 0.015f), zz = scalar_i8(g, "zz", 0), zq = add_value(g, "zq");
      add_node(g, "z.quant", OpKind::kQuantizeLinear, QuantizeAttrs{}, {z, zs, zz}, {zq});
      ins.insert(ins.end(), {zq, zs, zz});
    }
  }
  QConvAttrs a;
  a.kernel_shape = {s.k, s.k};
  a.pads = {s.k / 2, s.k / 2, s.k / 2, s.k / 2};
  a.strides = {1, 1};
  a.dilations = {1, 1};
  a.activation = QActivation::kRelu;
  const ValueId y = add_value(g, "y", s.y_int8 ? DataType::kInt8 : DataType::kFloat32);
  add_node(g, "conv", OpKind::kNhwcQConv, a, ins, {y});
  ValueId mean_in = y;
  if (s.y_int8) {
    mean_in = add_value(g, "yd");
    add_node(g, "dequant", OpKind::kDequantizeLinear, QuantizeAttrs{}, {y, ins[7], ins[8]}, {mean_in});
  }
  std::vector<ValueId> mean_ins{mean_in};
  if (!s.axes.empty())
    mean_ins.push_back(
        g.add_constant("axes", DataType::kInt64, {static_cast<int64_t>(s.axes.size())}, bytes_of(s.axes)));
  ReduceAttrs r;
  r.keepdims = s.keepdims;
  const ValueId p = add_value(g, "p");
  add_node(g, "gap", OpKind::kReduceMean, r, mean_ins, {p});
  g.outputs.push_back(p);
  if (s.y_output) g.outputs.push_back(y);
  if (s.y_relu) {
    const ValueId rv = add_value(g, "r");
    add_node(g, "relu", OpKind::kRelu, default_attrs(OpKind::kRelu), {y}, {rv});
    g.outputs.push_back(rv);
  }
  const BuildOptions o;
  bind_inputs(g, o);
  infer_and_fold(g, o);
  graph::verify(g, true);
  return g;
}

// g written as a CPU engine.
std::vector<uint8_t> cpu_engine(graph::Graph g) {
  const BuildOptions o;
  materialize_outputs(g, o);
  const EngineProgram program = plan_views(g, o);
  return write_engine(program, "cpu", choose_tactics(program.graph, o), nullptr);
}

std::vector<std::string> output_names(const graph::Graph& g) {
  std::vector<std::string> v;
  for (ValueId id : g.outputs) v.push_back(g.value(id).name);
  return v;
}

// Both graphs as CPU engines on the same random x (and z): every output equal.
void expect_same_outputs(const graph::Graph& a, const graph::Graph& b) {
  std::map<std::string, std::vector<float>> feed;
  uint32_t seed = 21;
  for (ValueId id : a.inputs) {
    const graph::Value& v = a.value(id);
    feed[v.name] = random_vec(static_cast<size_t>(v.view().numel()), seed++);
    for (float& f : feed[v.name]) f *= 1.5f;  // x's scale saturates part of the range
  }
  const std::vector<std::string> outputs = output_names(a);
  ASSERT_EQ(outputs, output_names(b));
  auto ya = run_engine(cpu_engine(a), feed, outputs), yb = run_engine(cpu_engine(b), feed, outputs);
  for (const std::string& y : outputs) {
    ASSERT_FALSE(ya[y].empty()) << y;
    EXPECT_EQ(ya[y], yb[y]) << y;
  }
}

struct Fused {
  graph::Graph before, after;
  PassResult result;
};

// The graph of `s` before and after the pass, which must leave a valid graph that computes what the
// one before did.
Fused run_pass(const Spec& s) {
  Fused f;
  f.before = conv_pool_graph(s);
  f.after = f.before;
  f.result = fuse_conv_pool(f.after, BuildOptions{});
  graph::verify(f.after, true);
  expect_same_outputs(f.after, f.before);
  return f;
}

int count(const graph::Graph& g, OpKind kind) {
  return static_cast<int>(
      std::count_if(g.nodes.begin(), g.nodes.end(), [&](const graph::Node& n) { return n.kind == kind; }));
}

const graph::Node* find_node(const graph::Graph& g, OpKind kind) {
  for (const graph::Node& n : g.nodes)
    if (n.kind == kind) return &n;
  return nullptr;
}

// Nothing fused: the graph keeps its nodes, the conv has no pool_mean.
void expect_unchanged(const Fused& f) {
  EXPECT_EQ(f.result.changes, 0) << f.result.detail;
  EXPECT_EQ(f.after.nodes.size(), f.before.nodes.size());
  EXPECT_EQ(count(f.after, OpKind::kReduceMean), 1);
  const graph::Node* conv = find_node(f.after, OpKind::kNhwcQConv);
  ASSERT_TRUE(conv);
  EXPECT_EQ(std::get<QConvAttrs>(conv->attrs).pool_mean, 0);
}

// One NhwcQConv with pool_mean writes "p" [n, 1, 1, 16] and no ReduceMean is left.
void expect_fused(const Fused& f, int64_t n) {
  EXPECT_EQ(f.result.changes, 1) << f.result.detail;
  EXPECT_EQ(f.result.detail, "1 global average pool into the convolution before it");
  EXPECT_EQ(count(f.after, OpKind::kReduceMean), 0);
  EXPECT_EQ(count(f.after, OpKind::kNhwcQConv), 1);
  EXPECT_EQ(f.after.nodes.size() + 1, f.before.nodes.size());
  const graph::Node* conv = find_node(f.after, OpKind::kNhwcQConv);
  ASSERT_TRUE(conv);
  EXPECT_EQ(std::get<QConvAttrs>(conv->attrs).pool_mean, 1);
  EXPECT_EQ(conv->origin, "conv + gap");
  ASSERT_EQ(conv->outputs.size(), 1u);
  const graph::Value& p = f.after.value(conv->outputs[0]);
  EXPECT_EQ(p.name, "p");
  EXPECT_EQ(p.dtype, DataType::kFloat32);
  EXPECT_EQ(p.shape, (std::vector<int64_t>{n, 1, 1, kM}));
  EXPECT_FALSE(f.after.is_graph_output(f.after.find("y")));
}

// ---- positive cases ------------------------------------------------------------------------------

TEST(FuseConvPool, ConvThenSpatialMean) {
  const Fused f = run_pass(Spec{});
  expect_fused(f, 2);
  // The engine says what the step does, and reads back what was written.
  const std::vector<StepInfo> steps = Engine::from_bytes(cpu_engine(f.after))->summary().steps;
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[1].op, "NhwcQConv");
  EXPECT_EQ(steps[1].name, "conv + gap");
  EXPECT_NE(steps[1].attrs.find("pool_mean=1"), std::string::npos) << steps[1].attrs;
}

TEST(FuseConvPool, BatchOne) { expect_fused(run_pass(Spec{.n = 1}), 1); }

// A residual z of the conv's full output shape, in float32 and in int8 (with z_scale).
TEST(FuseConvPool, WithResidual) {
  for (Spec::Residual r : {Spec::Residual::kFloat, Spec::Residual::kInt8}) {
    SCOPED_TRACE(r == Spec::Residual::kFloat ? "float32 z" : "int8 z");
    const Fused f = run_pass(Spec{.residual = r});
    expect_fused(f, 2);
    const graph::Node* conv = find_node(f.after, OpKind::kNhwcQConv);
    ASSERT_TRUE(conv && conv->inputs.size() > 9);
    EXPECT_EQ(f.after.value(conv->inputs[9]).shape, (std::vector<int64_t>{2, 6, 6, kM}));
  }
}

// 8 x 8 = 64 pixels per image, the most the pass takes; a 1x1 conv, and a 5x5 one.
TEST(FuseConvPool, SixtyFourPixels) {
  expect_fused(run_pass(Spec{.h = 8, .w = 8}), 2);
  expect_fused(run_pass(Spec{.h = 8, .w = 8, .k = 1}), 2);
  expect_fused(run_pass(Spec{.h = 4, .w = 16, .k = 5}), 2);
}

// Axes counted from the end ({-3, -2} of a rank-4 tensor are 1 and 2), or listed in another order.
TEST(FuseConvPool, NegativeAndUnorderedAxes) {
  expect_fused(run_pass(Spec{.axes = {-3, -2}}), 2);
  expect_fused(run_pass(Spec{.axes = {2, 1}}), 2);
  expect_fused(run_pass(Spec{.axes = {1, -2}}), 2);
}

// Engine file round trip: the pooled NhwcQConv written to a file, loaded and run, gives what the
// engine of the unfused graph gives.
TEST(FuseConvPool, EngineFileRoundTrip) {
  const Fused f = run_pass(Spec{.residual = Spec::Residual::kFloat});
  TempDir dir;
  const std::string path = dir / "pooled.kiln";
  {
    const std::vector<uint8_t> bytes = cpu_engine(f.after);
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                static_cast<std::streamsize>(bytes.size()));
  }
  auto e = Engine::load(path);
  ASSERT_EQ(e->outputs().size(), 1u);
  EXPECT_EQ(e->outputs()[0].shape, (std::vector<int64_t>{2, 1, 1, kM}));
  const std::vector<float> x = random_vec(2 * 6 * 6 * kC, 5), z = random_vec(2 * 6 * 6 * kM, 6);
  auto ctx = e->create_context(1);
  ctx->set_input("x", x.data(), x.size() * 4);
  ctx->set_input("z", z.data(), z.size() * 4);
  ctx->run();
  const auto bytes = ctx->output("p");
  std::vector<float> got(bytes.size() / 4);
  std::memcpy(got.data(), bytes.data(), bytes.size());
  const auto want = run_engine(cpu_engine(f.before), {{"x", x}, {"z", z}}, {"p"});
  EXPECT_EQ(got, want.at("p"));
}

// The end of a classifier through the INT8 passes and channels-last, as a GPU build makes it: the
// last block's convolution (its residual Add and Relu fused in by fuse-qresidual) and the
// GlobalAveragePool (a ReduceMean after channels-last) become one step; the engine with the pass
// computes what the one without it does.
TEST(FuseConvPool, ClassifierEndAfterChannelsLast) {
  OnnxModel m("classifier_end");
  m.input("x", {2, 8, 8, 8});
  add_conv(m, "conv1", "x", "c1", 8, 16, 3, 1, 1);
  m.node("Relu", "relu1", {"c1"}, {"r1"});
  add_conv(m, "conv2", "r1", "c2", 16, 16, 3, 1, 1);
  m.node("Add", "add", {"c2", "r1"}, {"a"});
  m.node("Relu", "relu2", {"a"}, {"r2"});
  m.node("GlobalAveragePool", "gap", {"r2"}, {"g"});
  attr_int(m.node("Flatten", "flatten", {"g"}, {"f"}), "axis", 1);
  m.init_rand("fc.w", {5, 16});
  m.init_rand("fc.b", {5});
  attr_int(m.node("Gemm", "fc", {"f", "fc.w", "fc.b"}, {"y"}), "transB", 1);
  m.output("y");
  TempDir dir;
  write_batches(dir.path() / "calib", 2, {2, 8, 8, 8}, -1.f, 1.f);
  BuildOptions o;
  o.int8 = true;
  o.calib.data = dir / "calib";
  const std::initializer_list<PassFn> passes = {bind_inputs,    infer_and_fold, fold_batchnorm,   remove_identity,
                                                quantize_int8,  fuse_qdq,       fuse_qresidual,   fuse_epilogue,
                                                remove_dead_nodes};
  const LayoutBuilt on = build_layout(m, o, passes, true, {fuse_conv_pool});
  const LayoutBuilt off = build_layout(m, o, passes, true);
  EXPECT_EQ(on.after.changes, 1) << on.after.detail;
  EXPECT_EQ(off.count("ReduceMean"), 1);
  EXPECT_EQ(on.count("ReduceMean"), 0);
  EXPECT_EQ(on.count("NhwcQConv"), off.count("NhwcQConv"));
  bool pooled = false;
  for (const StepInfo& s : on.steps)
    if (s.op == "NhwcQConv" && s.attrs.find("pool_mean=1") != std::string::npos) {
      pooled = true;
      EXPECT_NE(s.name.find("conv2"), std::string::npos) << s.name;
      EXPECT_NE(s.name.find("gap"), std::string::npos) << s.name;
      EXPECT_TRUE(s.inputs.size() > 9 && !s.inputs[9].empty()) << "no residual z: " << PrintToString(s.inputs);
    }
  EXPECT_TRUE(pooled);
  const std::map<std::string, std::vector<float>> feed{{"x", random_vec(2 * 8 * 8 * 8, 9)}};
  EXPECT_EQ(run_engine(on.engine, feed, {"y"}).at("y"), run_engine(off.engine, feed, {"y"}).at("y"));
}

// The pass is in the pipeline, after fuse-conv-quantize; on a CPU target (no channels-last) it
// finds nothing.
TEST(FuseConvPool, InThePipeline) {
  OnnxModel m("cpu_pipeline");
  m.input("x", {1, 8, 6, 6});
  add_conv(m, "conv", "x", "c", 8, 16, 3, 1, 1);
  m.node("GlobalAveragePool", "gap", {"c"}, {"y"});
  m.output("y");
  graph::Graph g = m.import();
  BuildReport r;
  build_engine(g, BuildOptions{}, &r);
  std::vector<std::string> names;
  for (const PassReport& p : r.passes) names.push_back(p.name);
  auto at = [&](const std::string& name) { return std::find(names.begin(), names.end(), name) - names.begin(); };
  ASSERT_LT(at("fuse-conv-pool"), static_cast<std::ptrdiff_t>(names.size()));
  EXPECT_EQ(at("fuse-conv-pool"), at("fuse-conv-quantize") + 1);
  EXPECT_EQ(r.passes[static_cast<size_t>(at("fuse-conv-pool"))].changes, 0);
}

// ---- guards --------------------------------------------------------------------------------------

TEST(FuseConvPoolGuard, ConvOutputHasAnotherReader) { expect_unchanged(run_pass(Spec{.y_relu = true})); }

TEST(FuseConvPoolGuard, ConvOutputIsGraphOutput) { expect_unchanged(run_pass(Spec{.y_output = true})); }

// A quantized output (y_scale): the mean would be taken after its rounding. Through the
// DequantizeLinear a valid graph has; and the dtype check itself, on a ReduceMean reading the int8
// tensor (no graph Kiln runs, so only the pass sees it).
TEST(FuseConvPoolGuard, Int8Output) {
  expect_unchanged(run_pass(Spec{.y_int8 = true}));
  graph::Graph g = conv_pool_graph(Spec{.y_int8 = true});
  const ValueId y = g.find("y");
  auto dq = std::find_if(g.nodes.begin(), g.nodes.end(), [](const graph::Node& n) { return n.name == "dequant"; });
  ASSERT_NE(dq, g.nodes.end());
  g.nodes.erase(dq);
  for (graph::Node& n : g.nodes)
    if (n.kind == OpKind::kReduceMean) n.inputs[0] = y;
  ASSERT_EQ(g.value(y).dtype, DataType::kInt8);
  EXPECT_EQ(fuse_conv_pool(g, BuildOptions{}).changes, 0);
  EXPECT_EQ(count(g, OpKind::kReduceMean), 1);
}

TEST(FuseConvPoolGuard, NotExactlyTheSpatialAxes) {
  for (const std::vector<int64_t>& axes : {std::vector<int64_t>{1}, {2}, {1, 2, 3}, {-1}, {0, 1, 2}}) {
    SCOPED_TRACE(PrintToString(axes));
    expect_unchanged(run_pass(Spec{.axes = axes}));
  }
  SCOPED_TRACE("no axes input (every axis)");
  expect_unchanged(run_pass(Spec{.axes = {}}));
}

TEST(FuseConvPoolGuard, KeepdimsZero) { expect_unchanged(run_pass(Spec{.keepdims = 0})); }

// 9 x 9 = 81 pixels per image, and 65 (5 x 13): more than the tensor-core kernel pools in a tile.
TEST(FuseConvPoolGuard, MoreThanSixtyFourPixels) {
  expect_unchanged(run_pass(Spec{.h = 9, .w = 9}));
  expect_unchanged(run_pass(Spec{.h = 5, .w = 13}));
}

// ---- shape inference -----------------------------------------------------------------------------

// x [2, 6, 6, 8] int8 and w [16, 3, 3, 8] int8 (channels-last), or their channels-first forms.
std::vector<Tensor> qconv_inputs(bool channels_last, bool quantized) {
  const Shape x_shape = channels_last ? Shape{2, 6, 6, kC} : Shape{2, kC, 6, 6};
  const Shape w_shape = channels_last ? Shape{kM, 3, 3, kC} : Shape{kM, kC, 3, 3};
  std::vector<Tensor> t;
  t.push_back(make(DataType::kInt8, x_shape, std::vector<double>(static_cast<size_t>(numel(x_shape)), 1)));
  t.push_back(make(DataType::kFloat32, {}, {0.01}));
  t.push_back(make(DataType::kInt8, {}, {0}));
  t.push_back(make(DataType::kInt8, w_shape, std::vector<double>(static_cast<size_t>(numel(w_shape)), 1)));
  t.push_back(make(DataType::kFloat32, {}, {0.01}));
  t.push_back(Tensor{DataType::kInt8, {}, {}, false});
  t.push_back(Tensor{DataType::kFloat32, {}, {}, false});
  if (quantized) {
    t.push_back(make(DataType::kFloat32, {}, {0.02}));
    t.push_back(make(DataType::kInt8, {}, {0}));
  }
  return t;
}

std::string infer_error(OpKind kind, const QConvAttrs& a, const std::vector<Tensor>& t) {
  std::vector<TensorView> v;
  for (const Tensor& x : t) v.push_back(x.view());
  try {
    infer_shapes(kind, a, v, 1);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

QConvAttrs conv3x3(int64_t pool_mean) {
  QConvAttrs a;
  a.kernel_shape = {3, 3};
  a.pads = {1, 1, 1, 1};
  a.pool_mean = pool_mean;
  return a;
}

TEST(FuseConvPoolInfer, PooledShape) {
  const std::vector<Tensor> t = qconv_inputs(true, false);
  std::vector<TensorView> v;
  for (const Tensor& x : t) v.push_back(x.view());
  const std::vector<OutputType> out = infer_shapes(OpKind::kNhwcQConv, conv3x3(1), v, 1);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].dtype, DataType::kFloat32);
  EXPECT_EQ(out[0].shape, (std::vector<int64_t>{2, 1, 1, kM}));
  EXPECT_EQ(infer_shapes(OpKind::kNhwcQConv, conv3x3(0), v, 1)[0].shape, (std::vector<int64_t>{2, 6, 6, kM}));
}

TEST(FuseConvPoolInfer, ChannelsFirstQConvRefused) {
  EXPECT_EQ(infer_error(OpKind::kQConv, conv3x3(0), qconv_inputs(false, false)), "");
  const std::string e = infer_error(OpKind::kQConv, conv3x3(1), qconv_inputs(false, false));
  EXPECT_TRUE(has(e, "kiln.QConv: pool_mean is for NhwcQConv only")) << e;
}

TEST(FuseConvPoolInfer, PoolMeanTwoRefused) {
  const std::string e = infer_error(OpKind::kNhwcQConv, conv3x3(2), qconv_inputs(true, false));
  EXPECT_TRUE(has(e, "NhwcQConv: pool_mean must be 0 or 1")) << e;
}

TEST(FuseConvPoolInfer, Int8OutputRefused) {
  EXPECT_EQ(infer_error(OpKind::kNhwcQConv, conv3x3(0), qconv_inputs(true, true)), "");
  const std::string e = infer_error(OpKind::kNhwcQConv, conv3x3(1), qconv_inputs(true, true));
  EXPECT_TRUE(has(e, "NhwcQConv: pool_mean needs a float32 output (no y_scale), got int8")) << e;
}

}  // namespace
}  // namespace kiln::passes
