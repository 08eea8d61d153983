// fuse-conv-quantize: a float16 NhwcConv whose output a per-tensor QuantizeLinear reads (directly,
// or, on GPU targets, through ResNet's MaxPool) writes the quantized tensor itself. Positive cases
// (ResNet's and MobileNetV2's stems, a Q without zero point: uint8), the guards (another reader of
// the conv's or the pool's output, a per-channel Q, a float32 graph), and numeric parity on the CPU
// backend: the fused node computes the float16 output and quantizes it as the pair did, so the
// engines' outputs are equal, not merely close.
#include "int8_test_util.h"
#include "layout_build.h"

namespace kiln::passes {

using namespace kiln::build;  // build_engine, BuildOptions: the passes run inside a build
namespace {

using namespace kiln::test;

// x [2, 3, 20, 20] and a stem of `k` x `k`, stride 2, 3 -> 8 channels, with a Relu.
OnnxModel stem(const std::string& name, int64_t k) {
  OnnxModel m(name);
  m.input("x", {2, 3, 20, 20});
  add_conv(m, "stem", "x", "s0", 3, 8, k, k / 2, 2);
  m.node("Relu", "stem.relu", {"s0"}, {"s1"});
  return m;
}

void max_pool(OnnxModel& m, const std::string& x, const std::string& y) {
  auto* n = m.node("MaxPool", "pool", {x}, {y});
  attr_ints(n, "kernel_shape", {3, 3});
  attr_ints(n, "strides", {2, 2});
  attr_ints(n, "pads", {1, 1, 1, 1});
}

// v -> Q -> DQ -> "d" with a scale that saturates part of the stem's range; int8 with zero point -3,
// or without a zero point (uint8).
void quantize(OnnxModel& m, const std::string& v, bool zero_point = true) {
  init_floats(m, "sq", {}, {0.011f});
  if (zero_point) init_ints(m, "zq", {}, {-3}, onnx::TensorProto::INT8);
  const std::vector<std::string> params = zero_point ? std::vector<std::string>{"sq", "zq"} : std::vector<std::string>{"sq"};
  std::vector<std::string> q_in{v}, dq_in{"q"};
  q_in.insert(q_in.end(), params.begin(), params.end());
  dq_in.insert(dq_in.end(), params.begin(), params.end());
  m.node("QuantizeLinear", "quant", q_in, {"q"});
  m.node("DequantizeLinear", "dequant", dq_in, {"d"});
}

// "d" -> a 3x3 convolution -> the graph's output "y".
void head(OnnxModel& m) {
  add_conv(m, "head", "d", "y", 8, 4, 3, 1, 1);
  m.output("y");
}

const std::initializer_list<PassFn> kFp16Passes = {bind_inputs, infer_and_fold, fuse_epilogue, remove_dead_nodes,
                                                   to_fp16};

// The pass as a GPU build runs it: these are the GPU's float16 graphs (the engines run on the CPU
// backend all the same). CPU builds do not fuse through a MaxPool.
PassResult fuse_for_gpu(graph::Graph& g, const BuildOptions& o) {
  BuildOptions gpu = o;
  gpu.target = "gpu";
  return fuse_conv_quantize(g, gpu);
}

// The engine with the pass against the one without, on one random input: outputs equal. Returns
// the engine with the pass.
LayoutBuilt check_parity(const OnnxModel& m, const std::vector<std::string>& outputs = {"y"}, bool fp16 = true,
                         PassFn fuse = fuse_for_gpu) {
  BuildOptions o;
  o.fp16 = fp16;
  LayoutBuilt on = build_layout(m, o, kFp16Passes, true, {fuse});
  LayoutBuilt off = build_layout(m, o, kFp16Passes, true);
  std::map<std::string, std::vector<float>> feed{{"x", random_vec(2 * 3 * 20 * 20, 7)}};
  for (float& v : feed["x"]) v *= 3.0f;
  auto a = run_engine(on.engine, feed, outputs), b = run_engine(off.engine, feed, outputs);
  for (const std::string& y : outputs) EXPECT_EQ(a[y], b[y]) << y;
  return on;
}

std::vector<std::string> names(const LayoutBuilt& b) {
  std::vector<std::string> v;
  for (const StepInfo& s : b.steps) v.push_back(s.name);
  return v;
}

// What the pass did: one fusion and no QuantizeLinear step left, or nothing and the one Q kept.
void expect_fused(const LayoutBuilt& r, bool fused) {
  EXPECT_EQ(r.after.changes, fused ? 1 : 0) << r.after.detail;
  EXPECT_EQ(r.count("QuantizeLinear"), fused ? 0 : 1);
}

bool has_name(const LayoutBuilt& b, const std::string& part) {
  const std::vector<std::string> v = names(b);
  return std::any_of(v.begin(), v.end(), [&](const std::string& n) { return n.find(part) != std::string::npos; });
}

// ResNet's stem: Conv 7x7 -> Relu -> MaxPool -> Q. The Q moves into the conv; the pool reads int8.
TEST(FuseConvQuantize, ResNetStemThroughMaxPool) {
  OnnxModel m = stem("resnet_stem", 7);
  max_pool(m, "s1", "p");
  quantize(m, "p");
  head(m);
  const LayoutBuilt r = check_parity(m);
  expect_fused(r, true);
  EXPECT_EQ(r.count("NhwcMaxPool"), 1);
  EXPECT_TRUE(has_name(r, "stem + stem.relu + quant")) << testing::PrintToString(names(r));
}

// On CPU targets the Q stays after the MaxPool: the CPU's fused convolution quantizes its float
// output after computing it, 4 times the values the pool's output has. A Q right after the
// convolution still fuses.
TEST(FuseConvQuantize, CpuTargetsQuantizeAfterTheMaxPool) {
  OnnxModel m = stem("resnet_stem_cpu", 7);
  max_pool(m, "s1", "p");
  quantize(m, "p");
  head(m);
  expect_fused(check_parity(m, {"y"}, true, fuse_conv_quantize), false);
  OnnxModel direct = stem("direct_cpu", 3);
  quantize(direct, "s1");
  head(direct);
  expect_fused(check_parity(direct, {"y"}, true, fuse_conv_quantize), true);
}

// MobileNetV2's stem: Conv 3x3 -> ReLU6 -> Q.
TEST(FuseConvQuantize, MobileNetStem) {
  OnnxModel m("mobilenet_stem");
  m.input("x", {2, 3, 20, 20});
  add_conv(m, "stem", "x", "s0", 3, 8, 3, 1, 2);
  init_floats(m, "zero", {}, {0.f});
  init_floats(m, "six", {}, {6.f});
  m.node("Clip", "stem.relu6", {"s0", "zero", "six"}, {"s1"});
  quantize(m, "s1");
  head(m);
  const LayoutBuilt r = check_parity(m);
  expect_fused(r, true);
  EXPECT_EQ(r.count("NhwcConv"), 2);
}

// A Q without a zero point quantizes to uint8: the fused node gets a uint8 zero of 0.
TEST(FuseConvQuantize, NoZeroPointIsUint8) {
  OnnxModel m = stem("uint8_stem", 3);
  quantize(m, "s1", false);
  head(m);
  const LayoutBuilt r = check_parity(m);
  expect_fused(r, true);
}

// Guard: the conv's output is also a graph output.
TEST(FuseConvQuantizeGuard, ConvOutputHasAnotherReader) {
  OnnxModel m = stem("shared_output", 3);
  m.output("s1");
  quantize(m, "s1");
  head(m);
  const LayoutBuilt r = check_parity(m, {"y", "s1"});
  expect_fused(r, false);
}

// Guard: the pool's output has another reader besides the Q.
TEST(FuseConvQuantizeGuard, PoolOutputHasAnotherReader) {
  OnnxModel m = stem("shared_pool", 7);
  max_pool(m, "s1", "p");
  quantize(m, "p");
  m.output("p");
  head(m);
  const LayoutBuilt r = check_parity(m, {"y", "p"});
  expect_fused(r, false);
}

// Guard: a per-channel Q (one scale per channel) is not fused.
TEST(FuseConvQuantizeGuard, PerChannelQuantize) {
  OnnxModel m = stem("per_channel", 3);
  init_floats(m, "sc", {8}, {0.01f, 0.02f, 0.01f, 0.03f, 0.01f, 0.02f, 0.01f, 0.02f});
  init_ints(m, "zc", {8}, {0, 0, 0, 0, 0, 0, 0, 0}, onnx::TensorProto::INT8);
  m.node("QuantizeLinear", "quant", {"s1", "sc", "zc"}, {"q"});
  m.node("DequantizeLinear", "dequant", {"q", "sc", "zc"}, {"d"});
  head(m);
  const LayoutBuilt r = check_parity(m);
  expect_fused(r, false);
}

// Guard: without --fp16 the convolutions stay channels-first; nothing is fused.
TEST(FuseConvQuantizeGuard, Float32GraphUnchanged) {
  OnnxModel m = stem("float32", 7);
  max_pool(m, "s1", "p");
  quantize(m, "p");
  head(m);
  const LayoutBuilt r = check_parity(m, {"y"}, false);
  expect_fused(r, false);
}

}  // namespace
}  // namespace kiln::passes
