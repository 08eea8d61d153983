// The channels-last pass on INT8 engines (GPU targets): kiln.QConv that cuDNN's INT8 kernels take
// becomes NhwcQConv (an input whose channels are not a multiple of 4, such as an RGB stem's, padded
// with zeros), int8 MaxPool becomes NhwcMaxPool, per-tensor Q/DQ follow the layout, and the guards
// keep the others channels-first (output channels not a multiple of 4, asymmetric pads, a non-zero
// zero point). Numeric parity on the CPU backend, whose channels-last kernels are the channels-first
// ones on permuted tensors: the channels-last INT8 engine computes what the channels-first one does,
// exactly where only integer sums and the same epilogue are involved (the zero channels add 0), and
// up to the order of float sums elsewhere (GlobalAveragePool as a ReduceMean). Depthwise QConvs
// (MobileNetV2's) become NhwcQConv with W [C, kh, kw, 1]; grouped ones (1 < group < C) and depthwise
// ones whose C is not a multiple of 4 stay channels-first. quantize-int8's rule for GPU targets is
// tested here too, since it is what feeds this pass.
#include <cmath>

#include "build/quantize_int8.h"
#include "int8_test_util.h"
#include "layout_build.h"

namespace kiln::passes {

using namespace kiln::build;  // build_engine, BuildOptions: the passes run inside a build
namespace {

using namespace kiln::test;

void conv(OnnxModel& m, const std::string& name, const std::string& x, const std::string& y, int64_t c_in,
          int64_t c_out, int64_t k, std::vector<int64_t> pads, int64_t stride = 1) {
  m.init_rand(name + ".w", {c_out, c_in, k, k}, -0.4f, 0.4f);
  m.init_rand(name + ".b", {c_out}, -0.2f, 0.2f);
  auto* n = m.node("Conv", name, {x, name + ".w", name + ".b"}, {y});
  attr_ints(n, "pads", pads);
  if (stride != 1) attr_ints(n, "strides", {stride, stride});
}

// A c-channel convolution of `group` groups (c: depthwise) with bias, W [c, c / group, k, k].
void grouped_conv(OnnxModel& m, const std::string& name, const std::string& x, const std::string& y, int64_t c,
                  int64_t group, int64_t k, std::vector<int64_t> pads, int64_t stride = 1, int64_t dilation = 1) {
  m.init_rand(name + ".w", {c, c / group, k, k}, -0.4f, 0.4f);
  m.init_rand(name + ".b", {c}, -0.2f, 0.2f);
  auto* n = m.node("Conv", name, {x, name + ".w", name + ".b"}, {y});
  attr_ints(n, "pads", pads);
  attr_int(n, "group", group);
  if (stride != 1) attr_ints(n, "strides", {stride, stride});
  if (dilation != 1) attr_ints(n, "dilations", {dilation, dilation});
}

// MobileNetV2's ReLU6.
void relu6(OnnxModel& m, const std::string& name, const std::string& x, const std::string& y) {
  const auto& inits = m.g()->initializer();
  if (std::none_of(inits.begin(), inits.end(), [](const auto& t) { return t.name() == "six"; })) {
    init_floats(m, "zero", {}, {0.f});
    init_floats(m, "six", {}, {6.f});
  }
  m.node("Clip", name, {x, "zero", "six"}, {y});
}

void max_pool(OnnxModel& m, const std::string& x, const std::string& y) {
  auto* n = m.node("MaxPool", "pool", {x}, {y});
  attr_ints(n, "kernel_shape", {3, 3});
  attr_ints(n, "strides", {2, 2});
  attr_ints(n, "pads", {1, 1, 1, 1});
}

// A 3-channel stem with ResNet's MaxPool, then a bottleneck with a downsample, global pooling and
// a classifier.
OnnxModel resnet_like(std::vector<int64_t> conv2_pads = {1, 1, 1, 1}) {
  OnnxModel m("resnet_like_int8");
  m.input("x", {2, 3, 16, 16});
  conv(m, "stem", "x", "s0", 3, 8, 3, {1, 1, 1, 1}, 2);
  m.node("Relu", "stem.relu", {"s0"}, {"s1"});
  max_pool(m, "s1", "p");
  conv(m, "b.conv1", "p", "c1", 8, 4, 1, {0, 0, 0, 0});
  m.node("Relu", "b.relu1", {"c1"}, {"r1"});
  conv(m, "b.conv2", "r1", "c2", 4, 4, 3, conv2_pads);
  m.node("Relu", "b.relu2", {"c2"}, {"r2"});
  conv(m, "b.conv3", "r2", "c3", 4, 16, 1, {0, 0, 0, 0});
  conv(m, "b.down", "p", "d", 8, 16, 1, {0, 0, 0, 0});
  m.node("Add", "b.add", {"c3", "d"}, {"a"});
  m.node("Relu", "b.relu3", {"a"}, {"r3"});
  m.node("GlobalAveragePool", "gap", {"r3"}, {"g"});
  attr_int(m.node("Flatten", "flatten", {"g"}, {"f"}), "axis", 1);
  m.init_rand("fc.w", {5, 16});
  m.init_rand("fc.b", {5});
  attr_int(m.node("Gemm", "fc", {"f", "fc.w", "fc.b"}, {"y"}), "transB", 1);
  m.output("y");
  return m;
}

// ResNet's stem on `c` input channels (7x7, stride 2, `m_out` outputs), Relu, MaxPool, then a 3x3
// convolution whose float output is the graph's.
OnnxModel stem_model(int64_t c, int64_t m_out = 8) {
  OnnxModel m("stem_int8");
  m.input("x", {2, c, 16, 16});
  conv(m, "stem", "x", "s0", c, m_out, 7, {3, 3, 3, 3}, 2);
  m.node("Relu", "stem.relu", {"s0"}, {"s1"});
  max_pool(m, "s1", "p");
  conv(m, "conv", "p", "y", m_out, 8, 3, {1, 1, 1, 1});
  m.output("y");
  return m;
}

// MobileNetV2's inverted residual on 8 channels: a 1x1 expansion to 16, ReLU6, a k x k depthwise
// convolution (stride, dilation), ReLU6, a 1x1 projection to 8, plus the input where the shapes
// allow; then a 3x3 depthwise convolution on 8 channels whose float output is the graph's.
OnnxModel mobilenet_block(int64_t stride, int64_t dilation = 1, int64_t k = 3) {
  OnnxModel m("mobilenet_block");
  m.input("x", {2, 8, 16, 16});
  conv(m, "expand", "x", "e", 8, 16, 1, {0, 0, 0, 0});
  relu6(m, "expand.relu6", "e", "er");
  const int64_t pad = (k - 1) / 2 * dilation;
  grouped_conv(m, "dw", "er", "d", 16, 16, k, {pad, pad, pad, pad}, stride, dilation);
  relu6(m, "dw.relu6", "d", "dr");
  conv(m, "project", "dr", "p", 16, 8, 1, {0, 0, 0, 0});
  std::string out = "p";
  if (stride == 1) {
    m.node("Add", "add", {"x", "p"}, {"a"});
    out = "a";
  }
  grouped_conv(m, "dw2", out, "y", 8, 8, 3, {1, 1, 1, 1});
  m.output("y");
  return m;
}

using Result = LayoutBuilt;

const std::initializer_list<PassFn> kInt8Passes = {bind_inputs,   infer_and_fold, fold_batchnorm, remove_identity,
                                                   quantize_int8, fuse_qdq,       fuse_epilogue,  remove_dead_nodes};

BuildOptions int8_options(const TempDir& dir) {
  BuildOptions o;
  o.int8 = true;
  o.calib.data = dir / "calib";
  return o;
}

// The channels-last engine against the channels-first one on one random input: every output equal
// if `exact`, else within float rounding.
Result check_parity(const OnnxModel& m, std::vector<int64_t> x_shape = {2, 3, 16, 16}, bool exact = false,
                    const std::vector<std::string>& outputs = {"y"}) {
  TempDir dir;
  write_batches(dir.path() / "calib", 2, x_shape, -1.f, 1.f);
  const BuildOptions o = int8_options(dir);
  Result last = build_layout(m, o, kInt8Passes, true), first = build_layout(m, o, kInt8Passes, false);
  int64_t n = 1;
  for (int64_t d : x_shape) n *= d;
  std::map<std::string, std::vector<float>> feed{{"x", random_vec(static_cast<size_t>(n), 5)}};
  auto a = run_engine(last.engine, feed, outputs), b = run_engine(first.engine, feed, outputs);
  for (const std::string& y : outputs) {
    if (exact) {
      EXPECT_EQ(a[y], b[y]) << y;
    } else {
      EXPECT_LE(rel_error(a[y], b[y]), 1e-5) << y;
    }
  }
  return last;
}

TEST(ChannelsLastInt8, QConvsBecomeNhwcQConv) {
  const Result r = check_parity(resnet_like());
  // The stem (its 3 channels padded to 4), b.conv1, b.conv2, b.conv3 and b.down.
  EXPECT_EQ(r.count("NhwcQConv"), 5) << r.layout.detail;
  EXPECT_EQ(r.count("kiln.QConv"), 0);
  EXPECT_EQ(r.count("Pad"), 1);
  EXPECT_EQ(r.count("NhwcMaxPool"), 1);
  EXPECT_EQ(r.count("MaxPool"), 0);
  EXPECT_GE(r.count("QuantizeLinear"), 1);
  EXPECT_GT(r.layout.changes, 5) << r.layout.detail;
}

// The stem on 3 and on 1 input channels: padded to 4, its int8 MaxPool channels-last, exactly the
// channels-first engine's numbers.
TEST(ChannelsLastInt8, StemChannelsPaddedToFour) {
  for (int64_t c : {3, 2}) {
    SCOPED_TRACE("channels " + std::to_string(c));
    const Result r = check_parity(stem_model(c), {2, c, 16, 16}, true);
    EXPECT_EQ(r.count("NhwcQConv"), 2) << r.layout.detail;
    EXPECT_EQ(r.count("kiln.QConv"), 0);
    EXPECT_EQ(r.count("Pad"), 1);
    EXPECT_EQ(r.count("NhwcMaxPool"), 1);
    EXPECT_EQ(r.count("MaxPool"), 0);
  }
}

// A stem of one input channel (LeNet-5's) stays float on CPU targets (quantize_int8's rule: the
// integer dot products sum 4 channels, so its INT8 kernel would do 4 times the work); the layer
// after it is INT8, and nothing is padded.
TEST(ChannelsLastInt8, OneChannelStemStaysFloatOnTheCpu) {
  const Result r = check_parity(stem_model(1), {2, 1, 16, 16}, true);
  EXPECT_EQ(r.count("NhwcQConv"), 1) << r.layout.detail;
  EXPECT_EQ(r.count("kiln.QConv"), 0);
  EXPECT_EQ(r.count("Pad"), 0);
  EXPECT_NE(r.layout.detail.find("1 nodes channels-last"), std::string::npos) << r.layout.detail;
}

// What the pass writes for the stem: x transposed and padded to [N, H, W, 4] by a constant-mode Pad
// of the channel axis only, and W permuted to [M, kh, kw, 4] with zeros in the added channel.
TEST(ChannelsLastInt8, StemPadAndWeights) {
  TempDir dir;
  write_batches(dir.path() / "calib", 2, {2, 3, 16, 16}, -1.f, 1.f);
  const BuildOptions o = int8_options(dir);
  graph::Graph g = stem_model(3).import();
  for (PassFn pass : kInt8Passes) pass(g, o);
  graph::Graph before = g;
  to_channels_last(g);
  graph::verify(g, true);
  const graph::Node* stem = nullptr;
  const graph::Node* qstem = nullptr;
  for (const graph::Node& n : g.nodes)
    if (n.kind == OpKind::kNhwcQConv && g.value(n.inputs[3]).shape[3] == 4) stem = &n;
  for (const graph::Node& n : before.nodes)
    if (n.kind == OpKind::kQConv && before.value(n.inputs[3]).shape[1] == 3) qstem = &n;
  ASSERT_TRUE(stem && qstem);
  EXPECT_EQ(g.value(stem->inputs[0]).shape, (std::vector<int64_t>{2, 16, 16, 4}));
  EXPECT_EQ(g.value(stem->inputs[0]).dtype, DataType::kInt8);
  const graph::Node* pad = nullptr;
  for (const graph::Node& n : g.nodes)
    if (n.outputs[0] == stem->inputs[0]) pad = &n;
  ASSERT_TRUE(pad && pad->kind == OpKind::kPad);
  EXPECT_EQ(std::get<PadAttrs>(pad->attrs).mode, PadMode::kConstant);
  EXPECT_EQ(pad->inputs.size(), 2u);  // no pad value: zeros
  EXPECT_EQ(g.value(pad->inputs[1]).view().to_double(), (std::vector<double>{0, 0, 0, 0, 0, 0, 0, 1}));
  // W [8, 7, 7, 4]: (m, i, j, c) holds the channels-first (m, c, i, j), and 0 at c = 3.
  const graph::Value& w = g.value(stem->inputs[3]);
  const std::vector<double> wl = w.view().to_double(), wf = before.value(qstem->inputs[3]).view().to_double();
  ASSERT_EQ(w.shape, (std::vector<int64_t>{8, 7, 7, 4}));
  for (int64_t m = 0; m < 8; ++m)
    for (int64_t i = 0; i < 7; ++i)
      for (int64_t j = 0; j < 7; ++j)
        for (int64_t c = 0; c < 4; ++c)
          EXPECT_EQ(wl[static_cast<size_t>(((m * 7 + i) * 7 + j) * 4 + c)],
                    c < 3 ? wf[static_cast<size_t>(((m * 3 + c) * 7 + i) * 7 + j)] : 0.0);
}

// Two convolutions reading one 3-channel input share one Pad.
TEST(ChannelsLastInt8, SharedInputPaddedOnce) {
  OnnxModel m("shared_stem");
  m.input("x", {2, 3, 16, 16});
  conv(m, "a", "x", "y", 3, 8, 3, {1, 1, 1, 1});
  conv(m, "b", "x", "z", 3, 4, 1, {0, 0, 0, 0});
  m.output("y");
  m.output("z");
  const Result r = check_parity(m, {2, 3, 16, 16}, true, {"y", "z"});
  EXPECT_EQ(r.count("NhwcQConv"), 2) << r.layout.detail;
  EXPECT_EQ(r.count("Pad"), 1);
}

// A stem with 6 outputs stays kiln.QConv (cuDNN's int8 output vector is 4 channels), and so does
// the MaxPool after it, whose input has no channels-last twin; the next convolution reads 6 channels,
// padded to 8.
TEST(ChannelsLastInt8Guard, OutputChannelsNotMultipleOfFourStayChannelsFirst) {
  const Result r = check_parity(stem_model(3, 6), {2, 3, 16, 16}, true);
  EXPECT_EQ(r.count("kiln.QConv"), 1) << r.layout.detail;
  EXPECT_EQ(r.count("NhwcQConv"), 1);
  EXPECT_EQ(r.count("MaxPool"), 1);
  EXPECT_EQ(r.count("NhwcMaxPool"), 0);
  EXPECT_EQ(r.count("Pad"), 1);
}

TEST(ChannelsLastInt8Guard, AsymmetricPadsStayChannelsFirst) {
  const Result r = check_parity(resnet_like({2, 0, 0, 2}));
  EXPECT_EQ(r.count("NhwcQConv"), 4) << r.layout.detail;
  EXPECT_EQ(r.count("kiln.QConv"), 1);
}

TEST(ChannelsLastInt8Guard, OnlyForGpuTargets) {
  for (bool mobilenet : {false, true}) {
    const std::vector<int64_t> x_shape{2, mobilenet ? 8 : 3, 16, 16};
    TempDir dir;
    write_batches(dir.path() / "calib", 2, x_shape, -1.f, 1.f);
    graph::Graph g = (mobilenet ? mobilenet_block(1) : resnet_like()).import();
    const BuildOptions o = int8_options(dir);
    for (PassFn pass : {bind_inputs, infer_and_fold, fold_batchnorm, quantize_int8, fuse_qdq}) pass(g, o);
    EXPECT_EQ(channels_last(g, o).changes, 0);
  }
}

// On GPU targets quantize-int8 quantizes the convolutions NhwcQConv runs without padding (one
// group with channels multiples of 4, or depthwise with C a multiple of 4), and leaves the 3-channel
// stem, a depthwise convolution with asymmetric pads (channels-last takes symmetric ones only), a
// grouped convolution (1 < group < C), one with 6 outputs and a depthwise one on those 6
// channels in float, and the classifier Gemm (no fast INT8 GEMM); on the CPU all are quantized.
// The channels-last pass then takes every QConv left, the depthwise one included. (GPU targets
// calibrate on the GPU, so the GPU build here takes its ranges from the cache the CPU build wrote:
// one cache serves both.)
TEST(ChannelsLastInt8, GpuTargetsQuantizeWhatNhwcQConvRuns) {
  OnnxModel m("gpu_rule");
  m.input("x", {2, 3, 16, 16});
  conv(m, "stem", "x", "s0", 3, 8, 3, {1, 1, 1, 1}, 2);
  m.node("Relu", "stem.relu", {"s0"}, {"s1"});
  grouped_conv(m, "dw", "s1", "d", 8, 8, 3, {1, 1, 1, 1});
  m.node("Relu", "dw.relu", {"d"}, {"r"});
  grouped_conv(m, "dw_asym", "r", "da", 8, 8, 3, {0, 0, 1, 1}, 2);  // TF-style SAME at stride 2
  m.node("Relu", "dw_asym.relu", {"da"}, {"ra"});
  grouped_conv(m, "grouped", "ra", "gr", 8, 2, 3, {1, 1, 1, 1});
  m.node("Relu", "grouped.relu", {"gr"}, {"grr"});
  conv(m, "mid", "grr", "c", 8, 8, 3, {1, 1, 1, 1});
  m.node("Relu", "mid.relu", {"c"}, {"cr"});
  conv(m, "head", "cr", "h", 8, 6, 1, {0, 0, 0, 0});
  m.node("Relu", "head.relu", {"h"}, {"hr"});
  grouped_conv(m, "dw6", "hr", "d6", 6, 6, 3, {1, 1, 1, 1});
  m.node("GlobalAveragePool", "gap", {"d6"}, {"g"});
  attr_int(m.node("Flatten", "flatten", {"g"}, {"f"}), "axis", 1);
  m.init_rand("fc.w", {5, 6});
  attr_int(m.node("Gemm", "fc", {"f", "fc.w"}, {"y"}), "transB", 1);
  m.output("y");
  TempDir dir;
  write_batches(dir.path() / "calib", 2, {2, 3, 16, 16}, -1.f, 1.f);
  auto count = [](const graph::Graph& g, OpKind kind) {
    return std::count_if(g.nodes.begin(), g.nodes.end(), [&](const graph::Node& n) { return n.kind == kind; });
  };
  BuildOptions o = int8_options(dir);
  o.calib.cache = dir / "cache.json";
  graph::Graph cpu = m.import();
  for (PassFn pass : {bind_inputs, infer_and_fold, quantize_int8, fuse_qdq}) pass(cpu, o);
  EXPECT_EQ(count(cpu, OpKind::kQConv), 7);
  EXPECT_EQ(count(cpu, OpKind::kConv), 0);
  EXPECT_EQ(count(cpu, OpKind::kQMatMul), 1);
  graph::Graph gpu = m.import();
  o.target = "sm_90";
  o.calib.data.clear();
  for (PassFn pass : {bind_inputs, infer_and_fold, quantize_int8, fuse_qdq}) pass(gpu, o);
  EXPECT_EQ(count(gpu, OpKind::kQConv), 2);
  EXPECT_EQ(count(gpu, OpKind::kConv), 5);
  EXPECT_EQ(count(gpu, OpKind::kQMatMul), 0);  // no fast INT8 GEMM on the GPU: the classifier stays float
  EXPECT_EQ(count(gpu, OpKind::kGemm), 1);
  std::vector<std::string> quantized;
  for (const graph::Node& n : gpu.nodes)
    if (n.kind == OpKind::kQConv) quantized.push_back(n.name);
  EXPECT_EQ(quantized, (std::vector<std::string>{"dw", "mid"}));
  to_channels_last(gpu);
  graph::verify(gpu, true);
  EXPECT_EQ(count(gpu, OpKind::kQConv), 0);
  EXPECT_EQ(count(gpu, OpKind::kNhwcQConv), 2);
}

// MobileNetV2's blocks: the depthwise QConvs become NhwcQConv too (3x3 and 5x5, strides 1 and 2,
// dilation 2), and the channels-last engine computes exactly what the channels-first one does.
TEST(ChannelsLastInt8, DepthwiseQConvsBecomeNhwcQConv) {
  struct Case {
    int64_t stride, dilation, k;
  };
  for (const Case& c : {Case{1, 1, 3}, Case{2, 1, 3}, Case{1, 2, 3}, Case{2, 1, 5}}) {
    SCOPED_TRACE("stride " + std::to_string(c.stride) + " dilation " + std::to_string(c.dilation) + " k " +
                 std::to_string(c.k));
    const Result r = check_parity(mobilenet_block(c.stride, c.dilation, c.k), {2, 8, 16, 16}, true);
    EXPECT_EQ(r.count("NhwcQConv"), 4) << r.layout.detail;
    EXPECT_EQ(r.count("kiln.QConv"), 0);
    EXPECT_EQ(r.count("Pad"), 0);
  }
}

// What the pass writes for a depthwise QConv: the group kept, x's twin unpadded, and W permuted to
// [C, kh, kw, 1] ((m, i, j, 0) holds the channels-first (m, 0, i, j)), not padded to 4 channels.
TEST(ChannelsLastInt8, DepthwiseWeights) {
  TempDir dir;
  write_batches(dir.path() / "calib", 2, {2, 8, 16, 16}, -1.f, 1.f);
  const BuildOptions o = int8_options(dir);
  graph::Graph g = mobilenet_block(2).import();
  for (PassFn pass : kInt8Passes) pass(g, o);
  const graph::Graph before = g;
  to_channels_last(g);
  graph::verify(g, true);
  auto find = [](const graph::Graph& in, OpKind kind) -> const graph::Node* {  // the 16-channel depthwise one
    for (const graph::Node& n : in.nodes)
      if (n.kind == kind && std::get<QConvAttrs>(n.attrs).group == 16) return &n;
    return nullptr;
  };
  const graph::Node* dw = find(g, OpKind::kNhwcQConv);
  const graph::Node* qdw = find(before, OpKind::kQConv);
  ASSERT_TRUE(dw && qdw);
  EXPECT_EQ(g.value(dw->inputs[0]).shape, (std::vector<int64_t>{2, 16, 16, 16}));
  EXPECT_EQ(g.value(dw->outputs[0]).shape, (std::vector<int64_t>{2, 8, 8, 16}));
  const graph::Value& w = g.value(dw->inputs[3]);
  ASSERT_EQ(w.shape, (std::vector<int64_t>{16, 3, 3, 1}));
  EXPECT_EQ(w.dtype, DataType::kInt8);
  EXPECT_EQ(w.view().to_double(), before.value(qdw->inputs[3]).view().to_double());  // the same bytes
}

// A grouped convolution with 1 < group < C stays kiln.QConv (NhwcQConv runs one group or C).
TEST(ChannelsLastInt8Guard, GroupedQConvStaysChannelsFirst) {
  OnnxModel m("grouped");
  m.input("x", {2, 8, 16, 16});
  grouped_conv(m, "grouped", "x", "g", 8, 2, 3, {1, 1, 1, 1});
  m.node("Relu", "relu", {"g"}, {"r"});
  conv(m, "conv", "r", "y", 8, 8, 1, {0, 0, 0, 0});
  m.output("y");
  const Result r = check_parity(m, {2, 8, 16, 16}, true);
  EXPECT_EQ(r.count("kiln.QConv"), 1) << r.layout.detail;
  EXPECT_EQ(r.count("NhwcQConv"), 1);
}

// A depthwise convolution on 6 channels stays kiln.QConv (the depthwise kernel's channels go in
// fours; it is not padded); the next convolution reads its 6 channels padded to 8.
TEST(ChannelsLastInt8Guard, DepthwiseChannelsNotMultipleOfFourStayChannelsFirst) {
  OnnxModel m("dw6");
  m.input("x", {2, 6, 16, 16});
  grouped_conv(m, "dw", "x", "d", 6, 6, 3, {1, 1, 1, 1});
  m.node("Relu", "relu", {"d"}, {"r"});
  conv(m, "conv", "r", "y", 6, 8, 1, {0, 0, 0, 0});
  m.output("y");
  const Result r = check_parity(m, {2, 6, 16, 16}, true);
  EXPECT_EQ(r.count("kiln.QConv"), 1) << r.layout.detail;
  EXPECT_EQ(r.count("NhwcQConv"), 1);
  EXPECT_EQ(r.count("Pad"), 1);
}

// A QConv whose input has a non-zero zero point (an asymmetric uint8 model from another quantizer,
// here an int8 one with zero point 3) stays channels-first: cuDNN's INT8 convolution has none.
TEST(ChannelsLastInt8Guard, NonZeroZeroPointStaysChannelsFirst) {
  OnnxModel m("qdq_zero_point");
  m.input("x", {1, 8, 6, 6});
  init_floats(m, "xs", {}, {0.05f});
  init_ints(m, "xz", {}, {3}, onnx::TensorProto::INT8);
  std::vector<int32_t> wv(8 * 8);
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = static_cast<int32_t>(i % 7) - 3;
  init_ints(m, "w", {8, 8, 1, 1}, wv, onnx::TensorProto::INT8);
  init_floats(m, "ws", {}, {0.02f});
  m.node("QuantizeLinear", "q", {"x", "xs", "xz"}, {"xq"});
  m.node("DequantizeLinear", "dq", {"xq", "xs", "xz"}, {"xd"});
  m.node("DequantizeLinear", "wdq", {"w", "ws"}, {"wd"});
  m.node("Conv", "conv", {"xd", "wd"}, {"y"});
  m.output("y");
  graph::Graph g = m.import();
  BuildOptions o;
  for (PassFn pass : {bind_inputs, infer_and_fold, fuse_qdq}) pass(g, o);
  int qconvs = 0;
  for (const graph::Node& n : g.nodes) qconvs += n.kind == OpKind::kQConv;
  ASSERT_EQ(qconvs, 1);
  const PassResult r = to_channels_last(g);
  EXPECT_EQ(r.changes, 0) << r.detail;
}

}  // namespace
}  // namespace kiln::passes
