// Tests for the channels-last pass (GPU float16 engines): which ops become channels-last, where the
// Transposes remain (one into the channels-last region, one out of it: the ones that meet cancel),
// the guards (asymmetric pads, float32, CPU targets), and numeric parity: the pass is applied on the
// CPU backend, whose kernels accept the channels-last ops, and the engine computes what the
// channels-first float16 engine computes.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "layout_build.h"

namespace kiln::passes {

using namespace kiln::build;  // build_engine, BuildOptions: the passes run inside a build
namespace {

using namespace kiln::test;

struct Net : OnnxModel {
  using OnnxModel::OnnxModel;
  void conv(const std::string& name, const std::string& x, const std::string& y, int64_t c_in, int64_t c_out,
            int64_t k = 3, std::vector<int64_t> pads = {1, 1, 1, 1}, int64_t stride = 1) {
    init_rand(name + ".w", {c_out, c_in, k, k}, -0.4f, 0.4f);
    init_rand(name + ".b", {c_out}, -0.2f, 0.2f);
    auto* n = node("Conv", name, {x, name + ".w", name + ".b"}, {y});
    attr_ints(n, "pads", pads);
    if (stride != 1) attr_ints(n, "strides", {stride, stride});
  }
};

using Built = LayoutBuilt;

// The build pipeline's passes for a float16 engine, then the channels-last pass if asked.
Built build(const OnnxModel& m, bool channels_last) {
  BuildOptions o;
  o.fp16 = true;
  return build_layout(m, o, {bind_inputs, infer_and_fold, fold_batchnorm, remove_identity, fuse_epilogue,
                             remove_dead_nodes, to_fp16},
                      channels_last);
}

// Channels-last against channels-first, both float16 on the CPU: within 1e-2 of the largest output.
Built check_parity(const OnnxModel& m, const std::map<std::string, int64_t>& inputs,
                   const std::vector<std::string>& outputs) {
  Built last = build(m, true), first = build(m, false);
  std::map<std::string, std::vector<float>> feed;
  uint32_t seed = 3;
  for (const auto& [name, n] : inputs) feed[name] = random_vec(static_cast<size_t>(n), seed++);
  auto a = run_engine(last.engine, feed, outputs), b = run_engine(first.engine, feed, outputs);
  for (const std::string& o : outputs) {
    SCOPED_TRACE(o);
    EXPECT_EQ(a[o].size(), b[o].size());
    float scale = 1e-3f;
    for (float v : b[o]) scale = std::max(scale, std::fabs(v));
    int bad = 0;
    for (size_t i = 0; i < a[o].size() && i < b[o].size() && bad < 5; ++i)
      if (!(std::fabs(a[o][i] - b[o][i]) <= 1e-2f * scale)) {
        ++bad;
        ADD_FAILURE() << i << ": " << a[o][i] << " vs " << b[o][i];
      }
  }
  return last;
}

// ResNet's stem and a bottleneck with a downsample, then the head.
Net resnet_like() {
  Net m("resnet_like");
  m.input("x", {2, 3, 16, 16});
  m.conv("stem", "x", "s0", 3, 8, 7, {3, 3, 3, 3}, 2);
  m.node("Relu", "stem.relu", {"s0"}, {"s1"});
  auto* mp = m.node("MaxPool", "pool", {"s1"}, {"p"});
  attr_ints(mp, "kernel_shape", {3, 3});
  attr_ints(mp, "strides", {2, 2});
  attr_ints(mp, "pads", {1, 1, 1, 1});
  m.conv("b.conv1", "p", "c1", 8, 4, 1, {0, 0, 0, 0});
  m.node("Relu", "b.relu1", {"c1"}, {"r1"});
  m.conv("b.conv2", "r1", "c2", 4, 4);
  m.node("Relu", "b.relu2", {"c2"}, {"r2"});
  m.conv("b.conv3", "r2", "c3", 4, 16, 1, {0, 0, 0, 0});
  m.conv("b.down", "p", "d", 8, 16, 1, {0, 0, 0, 0});
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

TEST(ChannelsLast, ResNetRunsChannelsLastBetweenTwoTransposes) {
  Built b = check_parity(resnet_like(), {{"x", 2 * 3 * 16 * 16}}, {"y"});
  EXPECT_EQ(b.count("NhwcConv"), 5);
  EXPECT_EQ(b.count("FusedConv") + b.count("Conv"), 0);
  EXPECT_EQ(b.count("NhwcMaxPool"), 1);
  EXPECT_EQ(b.count("ReduceMean"), 1);
  // Two transposes: into the region after the input's Cast, out of it after the pool. The one out
  // ([2, 1, 1, C] to [2, C, 1, 1]) moves no bytes, so view-reshapes makes it a view: one step.
  EXPECT_EQ(b.count("Transpose"), 1);
  EXPECT_EQ(b.layout.changes, 7) << b.layout.detail;  // 5 convs, the MaxPool, the GlobalAveragePool
  EXPECT_NE(b.layout.detail.find("2 transposes"), std::string::npos) << b.layout.detail;
  bool named = false;
  for (const StepInfo& s : b.steps) named |= s.op == "NhwcConv" && s.name == "b.conv3 + b.add + b.relu3";
  EXPECT_TRUE(named);
}

TEST(ChannelsLast, LayoutAgnosticOpsFollow) {
  // Conv -> Concat(channels) with a second Conv -> Mul(per-channel constant) -> AveragePool ->
  // BatchNormalization (not after a conv: left as it is by fold-batchnorm) -> Sigmoid -> output.
  Net m("agnostic");
  m.input("x", {1, 4, 8, 8});
  m.conv("c1", "x", "a", 4, 6);
  m.conv("c2", "x", "b", 4, 2);
  attr_int(m.node("Concat", "cat", {"a", "b"}, {"c"}), "axis", 1);
  m.init_rand("k", {8, 1, 1}, 0.5f, 1.5f);
  m.node("Mul", "scale", {"c", "k"}, {"d"});
  auto* ap = m.node("AveragePool", "avg", {"d"}, {"e"});
  attr_ints(ap, "kernel_shape", {2, 2});
  attr_ints(ap, "strides", {2, 2});
  for (const char* p : {"bn.s", "bn.b", "bn.m"}) m.init_rand(p, {8});
  m.init_rand("bn.v", {8}, 0.5f, 2.f);
  m.node("BatchNormalization", "bn", {"e", "bn.s", "bn.b", "bn.m", "bn.v"}, {"f"});
  m.node("Sigmoid", "sig", {"f"}, {"y"});
  m.output("y");
  Built b = check_parity(m, {{"x", 256}}, {"y"});
  EXPECT_EQ(b.count("NhwcConv"), 2);
  EXPECT_EQ(b.count("NhwcAveragePool"), 1);
  EXPECT_EQ(b.count("BatchNormalization"), 0);
  EXPECT_EQ(b.count("Transpose"), 2);
}

TEST(ChannelsLast, OutputsReadInBothLayoutsKeepTheirTranspose) {
  // The conv's output is a graph output and the input of the next conv.
  Net m("two_readers");
  m.input("x", {1, 3, 6, 6});
  m.conv("c1", "x", "a", 3, 4);
  m.conv("c2", "a", "y", 4, 4);
  m.output("a");
  m.output("y");
  Built b = check_parity(m, {{"x", 108}}, {"a", "y"});
  EXPECT_EQ(b.count("NhwcConv"), 2);
  EXPECT_EQ(b.count("Transpose"), 3);
}

TEST(ChannelsLastGuard, AsymmetricPadsStayChannelsFirst) {
  Net m("asymmetric");
  m.input("x", {1, 3, 6, 6});
  m.conv("c1", "x", "a", 3, 4, 3, {0, 0, 1, 1});
  m.conv("c2", "a", "y", 4, 4);
  m.output("y");
  Built b = check_parity(m, {{"x", 108}}, {"y"});
  EXPECT_EQ(b.count("NhwcConv"), 1);
  EXPECT_EQ(b.count("Conv"), 1);
}

TEST(ChannelsLastGuard, OnlyForGpuFloat16Engines) {
  const Net m = resnet_like();
  for (const auto& [target, fp16] : std::vector<std::pair<std::string, bool>>{{"cpu", true}, {"sm_90", false}}) {
    graph::Graph g = m.import();
    BuildOptions o;
    o.fp16 = fp16;
    o.target = target;
    for (PassFn pass : {bind_inputs, infer_and_fold, fuse_epilogue, to_fp16}) pass(g, o);
    EXPECT_EQ(channels_last(g, o).changes, 0) << target;
  }
}

TEST(ChannelsLastGuard, Float32ConvsStayChannelsFirst) {
  Net m("float32");
  m.input("x", {1, 3, 6, 6});
  m.conv("c1", "x", "y", 3, 4);
  m.output("y");
  graph::Graph g = m.import();
  BuildOptions o;
  for (PassFn pass : {bind_inputs, infer_and_fold}) pass(g, o);
  EXPECT_EQ(to_channels_last(g).changes, 0);
}

}  // namespace
}  // namespace kiln::passes
