// The channels-last pass on INT8 engines (GPU targets): kiln.QConv that cuDNN's INT8 kernels take
// becomes NhwcQConv, per-tensor Q/DQ follow the layout, and the guards keep the others channels-first
// (3 input channels, asymmetric pads, a non-zero zero point). Numeric parity on the CPU backend, whose
// NhwcQConv kernel is kiln.QConv on permuted tensors: the channels-last INT8 engine computes what the
// channels-first one does (float sums in another order only).
#include <cmath>

#include "int8_test_util.h"
#include "layout_build.h"

namespace kiln::passes {
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

// A 3-channel stem, then a bottleneck with a downsample, global pooling and a classifier.
OnnxModel resnet_like(std::vector<int64_t> conv2_pads = {1, 1, 1, 1}) {
  OnnxModel m("resnet_like_int8");
  m.input("x", {2, 3, 16, 16});
  conv(m, "stem", "x", "s0", 3, 8, 3, {1, 1, 1, 1}, 2);
  m.node("Relu", "stem.relu", {"s0"}, {"p"});
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

using Result = LayoutBuilt;

// The INT8 pipeline's passes up to the layout, then the channels-last pass if asked.
Result build_int8(const OnnxModel& m, const TempDir& dir, bool channels_last) {
  BuildOptions o;
  o.int8 = true;
  o.calib.data = dir / "calib";
  return build_layout(m, o, {bind_inputs, infer_and_fold, fold_batchnorm, remove_identity, quantize_int8, fuse_qdq,
                             fuse_epilogue, remove_dead_nodes},
                      channels_last);
}

Result check_parity(const OnnxModel& m) {
  TempDir dir;
  write_batches(dir.path() / "calib", 2, {2, 3, 16, 16}, -1.f, 1.f);
  Result last = build_int8(m, dir, true), first = build_int8(m, dir, false);
  std::map<std::string, std::vector<float>> feed{{"x", random_vec(2 * 3 * 16 * 16, 5)}};
  auto a = run_engine(last.engine, feed, {"y"}), b = run_engine(first.engine, feed, {"y"});
  EXPECT_LE(rel_error(a["y"], b["y"]), 1e-5);
  return last;
}

TEST(ChannelsLastInt8, QConvsBecomeNhwcQConv) {
  const Result r = check_parity(resnet_like());
  // b.conv1, b.conv2, b.conv3 and b.down; the stem reads 3 channels (cuDNN's int8 vector is 4).
  EXPECT_EQ(r.count("NhwcQConv"), 4) << r.layout.detail;
  EXPECT_EQ(r.count("kiln.QConv"), 1);
  EXPECT_GE(r.count("QuantizeLinear"), 1);
  EXPECT_GT(r.layout.changes, 4) << r.layout.detail;
}

TEST(ChannelsLastInt8Guard, AsymmetricPadsStayChannelsFirst) {
  const Result r = check_parity(resnet_like({2, 0, 0, 2}));
  EXPECT_EQ(r.count("NhwcQConv"), 3) << r.layout.detail;
  EXPECT_EQ(r.count("kiln.QConv"), 2);
}

TEST(ChannelsLastInt8Guard, OnlyForGpuTargets) {
  TempDir dir;
  write_batches(dir.path() / "calib", 2, {2, 3, 16, 16}, -1.f, 1.f);
  graph::Graph g = resnet_like().import();
  BuildOptions o;
  o.int8 = true;
  o.calib.data = dir / "calib";
  for (PassFn pass : {bind_inputs, infer_and_fold, fold_batchnorm, quantize_int8, fuse_qdq}) pass(g, o);
  EXPECT_EQ(channels_last(g, o).changes, 0);
}

// On GPU targets quantize-int8 leaves the 3-channel stem in float (cuDNN's INT8 convolutions read
// channels in fours) and quantizes the rest. (GPU targets calibrate on the GPU, so the GPU build here
// takes its ranges from the cache a CPU build wrote.)
TEST(ChannelsLastInt8, GpuTargetsLeaveTheRgbStemInFloat) {
  TempDir dir;
  write_batches(dir.path() / "calib", 2, {2, 3, 16, 16}, -1.f, 1.f);
  auto count = [](const graph::Graph& g, OpKind kind) {
    return std::count_if(g.nodes.begin(), g.nodes.end(), [&](const graph::Node& n) { return n.kind == kind; });
  };
  BuildOptions o;
  o.int8 = true;
  o.calib.data = dir / "calib";
  o.calib.cache = dir / "cache.json";
  graph::Graph cpu = resnet_like().import();
  for (PassFn pass : {bind_inputs, infer_and_fold, fold_batchnorm, quantize_int8, fuse_qdq}) pass(cpu, o);
  EXPECT_EQ(count(cpu, OpKind::kQConv), 5);
  graph::Graph gpu = resnet_like().import();
  o.target = "sm_90";
  for (PassFn pass : {bind_inputs, infer_and_fold, fold_batchnorm, quantize_int8, fuse_qdq}) pass(gpu, o);
  EXPECT_EQ(count(gpu, OpKind::kQConv), 4);
  EXPECT_EQ(count(gpu, OpKind::kConv), 1);
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
