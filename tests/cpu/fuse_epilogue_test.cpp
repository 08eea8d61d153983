// Tests for the fuse-epilogue pass: Conv / Gemm / MatMul with their bias Adds, activations (each
// form the matcher knows) and residual Adds become one fused step named after every node it
// replaces; one negative case per guard leaves the graph alone; and every engine computes what the
// engine built with the pass disabled computes (CPU backend, float32 and float16).
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>

#include "graph/onnx_export.h"
#include "onnx_model_util.h"
#include "build/build.h"

namespace kiln::passes {

using namespace kiln::build;  // build_engine, BuildOptions: the passes run inside a build
namespace {

using namespace kiln::test;

struct Net : OnnxModel {
  using OnnxModel::OnnxModel;
  // Conv with a 3x3 kernel (pads 1) from c_in to c_out channels, with a bias B when asked.
  void conv(const std::string& name, const std::string& x, const std::string& y, int64_t c_in, int64_t c_out,
            bool bias = true) {
    init_rand(name + ".w", {c_out, c_in, 3, 3}, -0.5f, 0.5f);
    std::vector<std::string> ins{x, name + ".w"};
    if (bias) {
      init_rand(name + ".b", {c_out});
      ins.push_back(name + ".b");
    }
    attr_ints(node("Conv", name, ins, {y}), "pads", {1, 1, 1, 1});
  }
  void batchnorm(const std::string& name, const std::string& x, const std::string& y, int64_t c) {
    init_rand(name + ".scale", {c}, 0.5f, 2.f);
    init_rand(name + ".b", {c});
    init_rand(name + ".mean", {c});
    init_rand(name + ".var", {c}, 0.1f, 3.f);
    node("BatchNormalization", name, {x, name + ".scale", name + ".b", name + ".mean", name + ".var"}, {y});
  }
  void scalar(const std::string& name, float v) {
    auto* t = g()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_float_data(v);
  }
};

struct Built {
  std::vector<uint8_t> engine;
  std::vector<StepInfo> steps;
  int changes = -1;  // -1: the pass did not run
  std::string detail;
};

Built build(const OnnxModel& m, bool fuse, bool fp16 = false) {
  graph::Graph g = m.import();
  BuildOptions o;
  o.fp16 = fp16;
  if (!fuse) o.disabled_passes = {"fuse-epilogue"};
  BuildReport r;
  Built b;
  b.engine = build_engine(g, o, &r);
  for (const PassReport& p : r.passes)
    if (p.name == "fuse-epilogue") b.changes = p.changes, b.detail = p.detail;
  b.steps = Engine::from_bytes(b.engine)->summary().steps;
  return b;
}

int count_op(const Built& b, const std::string& op) {
  return static_cast<int>(std::count_if(b.steps.begin(), b.steps.end(), [&](const StepInfo& s) { return s.op == op; }));
}

// Builds with and without the pass and compares the outputs on random inputs: within 1e-5 of the
// output's largest magnitude in float32, 1e-2 in float16 (where the fused op rounds once instead
// of after every op).
Built check_parity(const OnnxModel& m, const std::map<std::string, int64_t>& inputs,
                   const std::vector<std::string>& outputs, bool fp16 = false) {
  Built on = build(m, true, fp16), off = build(m, false, fp16);
  std::map<std::string, std::vector<float>> feed;
  uint32_t seed = 11;
  for (const auto& [name, n] : inputs) feed[name] = random_vec(static_cast<size_t>(n), seed++);
  auto y_on = run_engine(on.engine, feed, outputs), y_off = run_engine(off.engine, feed, outputs);
  for (const std::string& o : outputs) {
    SCOPED_TRACE(o);
    const std::vector<float>&a = y_on[o], &b = y_off[o];
    EXPECT_EQ(a.size(), b.size());
    float scale = 1e-6f;
    for (float v : b) scale = std::max(scale, std::fabs(v));
    int bad = 0;
    for (size_t i = 0; i < a.size() && i < b.size() && bad < 5; ++i) {
      const bool ok = std::fabs(a[i] - b[i]) <= (fp16 ? 1e-2f : 1e-5f) * scale;
      EXPECT_TRUE(ok) << i << ": " << a[i] << " vs " << b[i];
      bad += !ok;
    }
  }
  return on;
}

// ---- positive cases ----------------------------------------------------------------------------------

TEST(FuseEpilogue, ConvBatchNormReluIsOneLayerNamedAfterAllThree) {
  Net m("conv_bn_relu");
  m.input("x", {2, 3, 8, 8});
  m.conv("conv1", "x", "c", 3, 4, false);
  m.batchnorm("bn1", "c", "n", 4);
  m.node("Relu", "relu1", {"n"}, {"y"});
  m.output("y");
  Built b = check_parity(m, {{"x", 2 * 3 * 8 * 8}}, {"y"});
  ASSERT_EQ(b.steps.size(), 1u);
  EXPECT_EQ(b.steps[0].op, "FusedConv");
  EXPECT_EQ(b.steps[0].name, "conv1 + bn1 + relu1");
  EXPECT_NE(b.steps[0].attrs.find("activation=Relu"), std::string::npos) << b.steps[0].attrs;
  EXPECT_EQ(b.changes, 1);
  EXPECT_EQ(b.detail, "Conv+Relu x1");
}

TEST(FuseEpilogue, BiasAddsFoldIntoTheConvItself) {
  Net m("conv_bias");
  m.input("x", {1, 3, 6, 6});
  m.conv("conv", "x", "c", 3, 4, false);
  m.init_rand("k1", {4, 1, 1});
  m.init_rand("k2", {1, 4, 1, 1});
  m.scalar("k3", 0.25f);
  m.node("Add", "add1", {"c", "k1"}, {"d"});
  m.node("Add", "add2", {"k2", "d"}, {"e"});
  m.node("Add", "add3", {"e", "k3"}, {"y"});
  m.output("y");
  Built b = check_parity(m, {{"x", 108}}, {"y"});
  ASSERT_EQ(b.steps.size(), 1u);
  EXPECT_EQ(b.steps[0].op, "Conv");
  EXPECT_EQ(b.steps[0].name, "conv + add1 + add2 + add3");
  // fold-scale-shift, earlier in the pipeline, takes the constant Adds into the Conv's bias first.
  EXPECT_EQ(b.detail, "");
}

// One activation form after a Conv: how it is written in ONNX, and what the epilogue calls it.
struct Form {
  std::string name;
  std::string activation;  // as `kiln inspect` prints it
  int64_t opset;
  std::function<void(Net&, const std::string& x, const std::string& y)> write;
};

std::vector<Form> forms() {
  auto op = [](const std::string& type) {
    return [type](Net& m, const std::string& x, const std::string& y) { m.node(type, "act", {x}, {y}); };
  };
  return {
      {"Relu", "Relu", 17, op("Relu")},
      {"LeakyRelu", "LeakyRelu", 17,
       [](Net& m, const std::string& x, const std::string& y) {
         attr_float(m.node("LeakyRelu", "act", {x}, {y}), "alpha", 0.2f);
       }},
      {"ReLU6 as Clip(0, 6)", "Clip", 17,
       [](Net& m, const std::string& x, const std::string& y) {
         m.scalar("lo", 0.f);
         m.scalar("hi", 0.3f);  // a bound the values cross
         m.node("Clip", "act", {x, "lo", "hi"}, {y});
       }},
      {"Clip with a max only", "Clip", 17,
       [](Net& m, const std::string& x, const std::string& y) {
         m.scalar("hi", 0.1f);
         m.node("Clip", "act", {x, "", "hi"}, {y});
       }},
      {"Sigmoid", "Sigmoid", 17, op("Sigmoid")},
      {"Tanh", "Tanh", 17, op("Tanh")},
      {"HardSigmoid", "HardSigmoid", 17,
       [](Net& m, const std::string& x, const std::string& y) {
         auto* n = m.node("HardSigmoid", "act", {x}, {y});
         attr_float(n, "alpha", 0.3f);
         attr_float(n, "beta", 0.4f);
       }},
      {"HardSwish", "HardSwish", 17, op("HardSwish")},
      {"Gelu", "Gelu", 20, op("Gelu")},
      {"Gelu tanh", "GeluTanh", 20,
       [](Net& m, const std::string& x, const std::string& y) {
         attr_string(m.node("Gelu", "act", {x}, {y}), "approximate", "tanh");
       }},
      {"SiLU x * Sigmoid(x)", "SiLU", 17,
       [](Net& m, const std::string& x, const std::string& y) {
         m.node("Sigmoid", "sig", {x}, {"s"});
         m.node("Mul", "mul", {x, "s"}, {y});
       }},
      {"SiLU Sigmoid(x) * x", "SiLU", 17,
       [](Net& m, const std::string& x, const std::string& y) {
         m.node("Sigmoid", "sig", {x}, {"s"});
         m.node("Mul", "mul", {"s", x}, {y});
       }},
      {"HardSwish as x * HardSigmoid(x)", "HardSwish", 13,
       [](Net& m, const std::string& x, const std::string& y) {
         auto* n = m.node("HardSigmoid", "hsig", {x}, {"s"});
         attr_float(n, "alpha", 1.0f / 6.0f);
         attr_float(n, "beta", 0.5f);
         m.node("Mul", "mul", {x, "s"}, {y});
       }},
      {"GELU erf, PyTorch's export", "Gelu", 17,  // ((x * (erf(x / sqrt2) + 1)) * 0.5
       [](Net& m, const std::string& x, const std::string& y) {
         m.scalar("sqrt2", 1.4142135381698608f);
         m.scalar("one", 1.f);
         m.scalar("half", 0.5f);
         m.node("Div", "div", {x, "sqrt2"}, {"u"});
         m.node("Erf", "erf", {"u"}, {"e"});
         m.node("Add", "add", {"e", "one"}, {"t"});
         m.node("Mul", "mul1", {x, "t"}, {"p"});
         m.node("Mul", "mul2", {"p", "half"}, {y});
       }},
      {"GELU erf, x * 0.5 first and a product for the division", "Gelu", 17,
       [](Net& m, const std::string& x, const std::string& y) {
         m.scalar("rsqrt2", 0.70710678f);
         m.scalar("one", 1.f);
         m.scalar("half", 0.5f);
         m.node("Mul", "mul0", {"half", x}, {"h"});
         m.node("Mul", "scale", {x, "rsqrt2"}, {"u"});
         m.node("Erf", "erf", {"u"}, {"e"});
         m.node("Add", "add", {"one", "e"}, {"t"});
         m.node("Mul", "mul1", {"h", "t"}, {y});
       }},
      {"GELU tanh with Pow", "GeluTanh", 17,
       [](Net& m, const std::string& x, const std::string& y) {
         m.scalar("three", 3.f);
         m.scalar("c", 0.044715f);
         m.scalar("k", 0.7978845608f);
         m.scalar("one", 1.f);
         m.scalar("half", 0.5f);
         m.node("Pow", "pow", {x, "three"}, {"x3"});
         m.node("Mul", "mulc", {"c", "x3"}, {"cx3"});
         m.node("Add", "inner", {x, "cx3"}, {"i"});
         m.node("Mul", "mulk", {"i", "k"}, {"s"});
         m.node("Tanh", "tanh", {"s"}, {"th"});
         m.node("Add", "add", {"th", "one"}, {"t"});
         m.node("Mul", "mulh", {x, "half"}, {"h"});
         m.node("Mul", "mul", {"h", "t"}, {y});
       }},
      {"GELU tanh with x * x * x", "GeluTanh", 17,
       [](Net& m, const std::string& x, const std::string& y) {
         m.scalar("c", 0.044715f);
         m.scalar("k", 0.7978845608f);
         m.scalar("one", 1.f);
         m.scalar("half", 0.5f);
         m.node("Mul", "sq", {x, x}, {"x2"});
         m.node("Mul", "cube", {"x2", x}, {"x3"});
         m.node("Mul", "mulc", {"x3", "c"}, {"cx3"});
         m.node("Add", "inner", {"cx3", x}, {"i"});
         m.node("Mul", "mulk", {"k", "i"}, {"s"});
         m.node("Tanh", "tanh", {"s"}, {"th"});
         m.node("Add", "add", {"one", "th"}, {"t"});
         m.node("Mul", "mul", {x, "t"}, {"p"});
         m.node("Mul", "mulh", {"p", "half"}, {y});
       }},
  };
}

TEST(FuseEpilogue, EveryActivationForm) {
  for (const Form& f : forms()) {
    SCOPED_TRACE(f.name);
    Net m("act", f.opset);
    m.input("x", {1, 3, 6, 6});
    m.conv("conv", "x", "conv_out", 3, 4);
    f.write(m, "conv_out", "y");
    m.output("y");
    Built b = check_parity(m, {{"x", 108}}, {"y"});
    ASSERT_EQ(b.steps.size(), 1u) << b.detail;
    EXPECT_EQ(b.steps[0].op, "FusedConv");
    EXPECT_NE(b.steps[0].attrs.find("activation=" + f.activation), std::string::npos) << b.steps[0].attrs;
  }
}

// ResNet's blocks: conv-bn-relu, conv-bn + identity -> relu, and the bottleneck with a downsample.
Net resnet_blocks() {
  Net m("resnet_blocks");
  m.input("x", {2, 8, 6, 6});
  m.conv("b1.conv1", "x", "a1", 8, 8, false);
  m.batchnorm("b1.bn1", "a1", "a2", 8);
  m.node("Relu", "b1.relu1", {"a2"}, {"a3"});
  m.conv("b1.conv2", "a3", "a4", 8, 8, false);
  m.batchnorm("b1.bn2", "a4", "a5", 8);
  m.node("Add", "b1.add", {"a5", "x"}, {"a6"});
  m.node("Relu", "b1.relu2", {"a6"}, {"b"});
  m.conv("b2.conv1", "b", "c1", 8, 6, false);
  m.batchnorm("b2.bn1", "c1", "c2", 6);
  m.node("Relu", "b2.relu1", {"c2"}, {"c3"});
  m.conv("b2.conv2", "c3", "c4", 6, 12, false);
  m.batchnorm("b2.bn2", "c4", "c5", 12);
  m.conv("b2.down", "b", "d1", 8, 12, false);
  m.batchnorm("b2.down_bn", "d1", "d2", 12);
  m.node("Add", "b2.add", {"c5", "d2"}, {"c6"});
  m.node("Relu", "b2.relu2", {"c6"}, {"y"});
  m.output("y");
  return m;
}

TEST(FuseEpilogue, ResNetBlocksFuseEveryAddAndRelu) {
  for (bool fp16 : {false, true}) {
    SCOPED_TRACE(fp16 ? "float16" : "float32");
    Built b = check_parity(resnet_blocks(), {{"x", 2 * 8 * 36}}, {"y"}, fp16);
    EXPECT_EQ(count_op(b, "FusedConv"), 4);
    EXPECT_EQ(count_op(b, "Conv"), 1);  // the downsample: its output is the other block's residual
    EXPECT_EQ(count_op(b, "Add"), 0);
    EXPECT_EQ(count_op(b, "Relu"), 0);
    EXPECT_EQ(b.changes, 4);
    EXPECT_EQ(b.detail, "Conv+Relu x2, Conv+residual+Relu x2");
    bool named = false;
    for (const StepInfo& s : b.steps) named |= s.name == "b1.conv2 + b1.bn2 + b1.add + b1.relu2";
    EXPECT_TRUE(named);
  }
}

TEST(FuseEpilogue, ActivationThenResidualThenActivation) {
  Net m("two_activations");
  m.input("x", {1, 4, 5, 5});
  m.input("z", {1, 4, 5, 5});
  m.conv("conv", "x", "c", 4, 4);
  m.node("Relu", "relu", {"c"}, {"r"});
  m.node("Add", "add", {"z", "r"}, {"s"});
  m.node("Sigmoid", "sig", {"s"}, {"y"});
  m.output("y");
  Built b = check_parity(m, {{"x", 100}, {"z", 100}}, {"y"});
  ASSERT_EQ(b.steps.size(), 1u);
  EXPECT_NE(b.steps[0].attrs.find("activation=Relu"), std::string::npos) << b.steps[0].attrs;
  EXPECT_NE(b.steps[0].attrs.find("activation2=Sigmoid"), std::string::npos) << b.steps[0].attrs;
  EXPECT_EQ(b.steps[0].inputs.size(), 4u);
}

TEST(FuseEpilogue, Gemm) {
  {  // Gemm with C and transB -> Relu
    Net m("gemm_relu");
    m.input("a", {3, 5});
    m.init_rand("w", {4, 5});
    m.init_rand("c", {4});
    attr_int(m.node("Gemm", "fc", {"a", "w", "c"}, {"g"}), "transB", 1);
    m.node("Relu", "relu", {"g"}, {"y"});
    m.output("y");
    Built b = check_parity(m, {{"a", 15}}, {"y"});
    ASSERT_EQ(b.steps.size(), 1u);
    EXPECT_EQ(b.steps[0].op, "FusedGemm");
  }
  {  // bias Adds fold into C (beta 0.5, a per-row C), then a residual and Tanh
    Net m("gemm_bias_residual");
    m.input("a", {3, 5});
    m.input("z", {3, 4});
    m.init_rand("w", {5, 4});
    m.init_rand("c", {3, 1});
    m.init_rand("k", {1, 4});
    auto* g = m.node("Gemm", "fc", {"a", "w", "c"}, {"g"});
    attr_float(g, "beta", 0.5f);
    attr_float(g, "alpha", 2.0f);
    m.node("Add", "bias", {"g", "k"}, {"h"});
    m.node("Add", "res", {"h", "z"}, {"s"});
    m.node("Tanh", "tanh", {"s"}, {"y"});
    m.output("y");
    Built b = check_parity(m, {{"a", 15}, {"z", 12}}, {"y"});
    ASSERT_EQ(b.steps.size(), 1u);
    EXPECT_EQ(b.steps[0].op, "FusedGemm");
    EXPECT_EQ(b.detail, "Gemm+residual+Tanh x1");  // fold-scale-shift took the bias Add into C
  }
  {  // only a bias: the Gemm stays a Gemm
    Net m("gemm_bias");
    m.input("a", {3, 5});
    m.init_rand("w", {5, 4});
    m.init_rand("k", {4});
    m.node("Gemm", "fc", {"a", "w"}, {"g"});
    m.node("Add", "bias", {"k", "g"}, {"y"});
    m.output("y");
    Built b = check_parity(m, {{"a", 15}}, {"y"});
    ASSERT_EQ(b.steps.size(), 1u);
    EXPECT_EQ(b.steps[0].op, "Gemm");
  }
}

TEST(FuseEpilogue, MatMulWithBiasGeluAndResidual) {
  Net m("matmul");
  m.input("x", {2, 3, 8});
  m.input("z", {2, 3, 6});
  m.init_rand("w", {8, 6});
  m.init_rand("b", {6});
  m.node("MatMul", "fc1", {"x", "w"}, {"mm_out"});
  m.node("Add", "fc1.bias", {"mm_out", "b"}, {"mm_biased"});
  Form gelu = forms()[13];  // the GELU erf export
  ASSERT_EQ(gelu.activation, "Gelu");
  gelu.write(m, "mm_biased", "mm_gelu");
  m.node("Add", "res", {"mm_gelu", "z"}, {"y"});
  m.output("y");
  Built b = check_parity(m, {{"x", 48}, {"z", 36}}, {"y"});
  ASSERT_EQ(b.steps.size(), 1u);
  EXPECT_EQ(b.steps[0].op, "FusedMatMul");
  EXPECT_EQ(b.detail, "MatMul+bias+Gelu+residual x1");
  // An internal op has no ONNX form: exporting an optimized graph says so.
  graph::Graph g = m.import();
  build_engine(g, BuildOptions{});
  try {
    graph::export_onnx_bytes(g);
    ADD_FAILURE() << "exported an internal op";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("internal op"), std::string::npos) << e.what();
  }
}

TEST(FuseEpilogue, FusedOpTypesDoNotImportFromOnnx) {
  Net m("fused_in_onnx");
  m.input("x", {1, 3, 4, 4});
  m.init_rand("w", {2, 3, 1, 1});
  m.node("FusedConv", "f", {"x", "w"}, {"y"});
  m.output("y");
  try {
    m.import();
    ADD_FAILURE() << "imported FusedConv";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("FusedConv"), std::string::npos) << e.what();
  }
}

// ---- guards: each leaves the chain unfused ----------------------------------------------------------

// x -> Conv -> ... built by `rest`; expects no fusion, the ops listed, and equal outputs.
void expect_unfused(Net& m, const std::vector<std::string>& outputs, const std::map<std::string, int64_t>& inputs) {
  for (const std::string& o : outputs) m.output(o);
  Built b = check_parity(m, inputs, outputs);
  EXPECT_EQ(b.changes, 0) << b.detail;
  EXPECT_EQ(count_op(b, "FusedConv"), 0);
}

TEST(FuseEpilogueGuard, ConvOutputWithSeveralReaders) {
  Net m("two_readers");
  m.input("x", {1, 3, 6, 6});
  m.conv("conv", "x", "c", 3, 4);
  m.node("Relu", "relu", {"c"}, {"y1"});
  m.node("Sigmoid", "sig", {"c"}, {"y2"});
  expect_unfused(m, {"y1", "y2"}, {{"x", 108}});
}

TEST(FuseEpilogueGuard, ConvOutputIsAGraphOutput) {
  Net m("conv_is_output");
  m.input("x", {1, 3, 6, 6});
  m.conv("conv", "x", "c", 3, 4);
  m.node("Relu", "relu", {"c"}, {"y"});
  expect_unfused(m, {"c", "y"}, {{"x", 108}});
}

TEST(FuseEpilogueGuard, ActivationOutputThatIsAGraphOutputEndsTheChain) {
  Net m("relu_is_output");
  m.input("x", {1, 3, 6, 6});
  m.input("z", {1, 4, 6, 6});
  m.conv("conv", "x", "c", 3, 4);
  m.node("Relu", "relu", {"c"}, {"r"});
  m.node("Add", "add", {"r", "z"}, {"y"});
  m.output("r");
  m.output("y");
  Built b = check_parity(m, {{"x", 108}, {"z", 144}}, {"r", "y"});
  EXPECT_EQ(b.detail, "Conv+Relu x1");
  EXPECT_EQ(count_op(b, "Add"), 1);
}

TEST(FuseEpilogueGuard, IntegerMatMulStaysUnfused) {
  Net m("int_matmul");
  m.input("a", {2, 3}, onnx::TensorProto::INT32);
  auto* w = m.g()->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::INT32);
  w->add_dims(3);
  w->add_dims(2);
  for (int i = 0; i < 6; ++i) w->add_int32_data(i - 2);
  m.node("MatMul", "mm", {"a", "w"}, {"p"});
  m.node("Relu", "relu", {"p"}, {"y"});
  m.output("y");
  Built b = build(m, true);
  EXPECT_EQ(b.changes, 0);
  EXPECT_EQ(count_op(b, "MatMul"), 1);
  EXPECT_EQ(count_op(b, "Relu"), 1);
}

TEST(FuseEpilogueGuard, ResidualThatBroadcasts) {
  Net m("residual_broadcast");
  m.input("x", {1, 3, 6, 6});
  m.input("z", {1, 4, 1, 6});
  m.conv("conv", "x", "c", 3, 4);
  m.node("Add", "add", {"c", "z"}, {"s"});
  m.node("Relu", "relu", {"s"}, {"y"});
  expect_unfused(m, {"y"}, {{"x", 108}, {"z", 24}});
}

TEST(FuseEpilogueGuard, ConstantThatVariesAlongSpaceIsNoBias) {
  Net m("spatial_constant");
  m.input("x", {1, 3, 6, 6});
  m.conv("conv", "x", "c", 3, 4);
  m.init_rand("k", {1, 1, 6, 6});
  m.node("Add", "add", {"c", "k"}, {"s"});
  m.node("Relu", "relu", {"s"}, {"y"});
  expect_unfused(m, {"y"}, {{"x", 108}});
}

TEST(FuseEpilogueGuard, BiasThatGrowsTheOutput) {
  Net m("growing_bias");
  m.input("x", {1, 3, 6, 6});
  m.conv("conv", "x", "c", 3, 4);
  m.init_rand("k", {2, 4, 1, 1});
  m.node("Add", "add", {"c", "k"}, {"s"});
  m.node("Relu", "relu", {"s"}, {"y"});
  expect_unfused(m, {"y"}, {{"x", 108}});
}

TEST(FuseEpilogueGuard, BiasAddAfterANonConstantConvBias) {
  Net m("input_bias");
  m.input("x", {1, 3, 6, 6});
  m.input("b", {4});
  m.init_rand("w", {4, 3, 3, 3});
  m.init_rand("k", {4, 1, 1});
  m.node("Conv", "conv", {"x", "w", "b"}, {"c"});
  m.node("Add", "add", {"c", "k"}, {"s"});
  m.node("Relu", "relu", {"s"}, {"y"});
  expect_unfused(m, {"y"}, {{"x", 108}, {"b", 4}});
}

TEST(FuseEpilogueGuard, GeluWithAWrongConstant) {
  Net m("not_gelu");
  m.input("x", {1, 3, 6, 6});
  m.conv("conv", "x", "c", 3, 4);
  m.scalar("sqrt2", 1.4142135f);
  m.scalar("one", 1.f);
  m.scalar("almost_half", 0.49f);
  m.node("Div", "div", {"c", "sqrt2"}, {"u"});
  m.node("Erf", "erf", {"u"}, {"e"});
  m.node("Add", "add", {"e", "one"}, {"t"});
  m.node("Mul", "mul1", {"c", "t"}, {"p"});
  m.node("Mul", "mul2", {"p", "almost_half"}, {"y"});
  expect_unfused(m, {"y"}, {{"x", 108}});
}

TEST(FuseEpilogueGuard, SigmoidOfSiluReadElsewhere) {
  Net m("silu_shared");
  m.input("x", {1, 3, 6, 6});
  m.conv("conv", "x", "c", 3, 4);
  m.node("Sigmoid", "sig", {"c"}, {"s"});
  m.node("Mul", "mul", {"c", "s"}, {"y"});
  expect_unfused(m, {"y", "s"}, {{"x", 108}});
}

TEST(FuseEpilogueGuard, DisabledByName) {
  Built b = build(resnet_blocks(), false);
  EXPECT_EQ(b.changes, -1);
  EXPECT_EQ(count_op(b, "FusedConv"), 0);
  EXPECT_EQ(count_op(b, "Relu"), 4);
}

}  // namespace
}  // namespace kiln::passes
