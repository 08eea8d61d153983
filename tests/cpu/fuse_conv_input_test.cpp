// fuse-conv-input: a float16 NhwcConv whose input is the float32 image cast to float16 and moved
// channels-last reads the image itself (x_channels_first). Positive cases (a float16 stem, the
// INT8 stem with its quantized output), the guards (not a stem's shape, the transposed image read
// by two convolutions, the cast image read by another node: then only the Transpose folds, a
// float32 graph), and numeric parity on the CPU backend: the convolution casts
// the image as the Cast did, so the engines' outputs are equal, not merely close.
#include "core/shape_infer.h"
#include "int8_test_util.h"
#include "layout_build.h"

namespace kiln::passes {

using namespace kiln::build;  // build_engine, BuildOptions: the passes run inside a build
namespace {

using namespace kiln::test;

constexpr int64_t kC = 3, kH = 20, kW = 24;

// x [2, c, 20, 24] -> a k x k stem, stride `stride`, c -> 32 channels, Relu -> a 3x3 head -> "y".
OnnxModel stem(const std::string& name, int64_t k, int64_t c = kC, int64_t stride = 2) {
  OnnxModel m(name);
  m.input("x", {2, c, kH, kW});
  add_conv(m, "stem", "x", "s0", c, 32, k, k / 2, stride);
  m.node("Relu", "stem.relu", {"s0"}, {"s1"});
  add_conv(m, "head", "s1", "y", 32, 4, 3, 1, 1);
  m.output("y");
  return m;
}

const std::initializer_list<PassFn> kFp16Passes = {bind_inputs, infer_and_fold, fuse_epilogue, remove_dead_nodes,
                                                   to_fp16};

struct Built {
  LayoutBuilt on, off;
};

// The engines with and without the pass (after channels-last, then `more`), on one random input:
// outputs equal.
Built check_parity(const OnnxModel& m, const std::vector<std::string>& outputs = {"y"}, bool fp16 = true,
                   int64_t c = kC, std::initializer_list<PassFn> pipeline = kFp16Passes) {
  BuildOptions o;
  o.fp16 = fp16;
  Built b{build_layout(m, o, pipeline, true, {fuse_conv_input}), build_layout(m, o, pipeline, true)};
  std::map<std::string, std::vector<float>> feed{{"x", random_vec(static_cast<size_t>(2 * c * kH * kW), 11)}};
  for (float& v : feed["x"]) v *= 3.0f;
  auto a = run_engine(b.on.engine, feed, outputs), z = run_engine(b.off.engine, feed, outputs);
  for (const std::string& y : outputs) {
    EXPECT_EQ(a[y], z[y]) << y;
    EXPECT_FALSE(a[y].empty()) << y;
  }
  return b;
}

// Whether the NhwcConv step named like step_part reads a channels-first X (its attributes as
// `kiln inspect` shows them).
bool reads_channels_first(const LayoutBuilt& b, const std::string& step_part) {
  for (const StepInfo& s : b.steps)
    if (s.name.find(step_part) != std::string::npos && s.op == "NhwcConv")
      return s.attrs.find("x_channels_first=1") != std::string::npos;
  ADD_FAILURE() << "no NhwcConv step named like " << step_part;
  return false;
}

// A float16 stem: Cast and Transpose go, the stem reads the float32 image.
TEST(FuseConvInput, Float16Stem) {
  const Built b = check_parity(stem("fp16_stem", 7));
  EXPECT_EQ(b.on.after.changes, 1) << b.on.after.detail;
  EXPECT_EQ(b.on.count("Transpose"), b.off.count("Transpose") - 1);  // the head's output keeps its own
  EXPECT_EQ(b.on.count("Cast"), b.off.count("Cast") - 1);
  EXPECT_EQ(b.on.steps.size(), b.off.steps.size() - 2);
  EXPECT_TRUE(reads_channels_first(b.on, "stem"));
  EXPECT_FALSE(reads_channels_first(b.on, "head"));
}

// Guards: not a stem's shape (16 input channels; stride 1), where folding would only move the
// conversion into the step.
TEST(FuseConvInputGuard, NotAStem) {
  const Built wide = check_parity(stem("wide_input", 3, 16), {"y"}, true, 16);
  EXPECT_EQ(wide.on.after.changes, 0);
  EXPECT_EQ(wide.on.count("Transpose"), wide.off.count("Transpose"));
  const Built flat = check_parity(stem("stride_1", 3, kC, 1));
  EXPECT_EQ(flat.on.after.changes, 0);
}

// The INT8 stem: the Q after it moves in too (fuse-conv-quantize after this pass).
TEST(FuseConvInput, QuantizedStem) {
  OnnxModel m("quant_stem");
  m.input("x", {2, kC, kH, kW});
  add_conv(m, "stem", "x", "s0", kC, 32, 3, 1, 2);
  m.node("Relu", "stem.relu", {"s0"}, {"s1"});
  init_floats(m, "sq", {}, {0.011f});
  init_ints(m, "zq", {}, {-3}, onnx::TensorProto::INT8);
  m.node("QuantizeLinear", "quant", {"s1", "sq", "zq"}, {"q"});
  m.node("DequantizeLinear", "dequant", {"q", "sq", "zq"}, {"d"});
  add_conv(m, "head", "d", "y", 32, 4, 3, 1, 1);
  m.output("y");
  BuildOptions o;
  o.fp16 = true;
  const LayoutBuilt on = build_layout(m, o, kFp16Passes, true, {fuse_conv_input, fuse_conv_quantize});
  const LayoutBuilt off = build_layout(m, o, kFp16Passes, true, {fuse_conv_quantize});
  std::map<std::string, std::vector<float>> feed{{"x", random_vec(2 * kC * kH * kW, 5)}};
  for (float& v : feed["x"]) v *= 3.0f;
  EXPECT_EQ(run_engine(on.engine, feed, {"y"})["y"], run_engine(off.engine, feed, {"y"})["y"]);
  EXPECT_EQ(on.after.changes, 1) << on.after.detail;  // the quantize fusion still happens
  EXPECT_EQ(on.count("QuantizeLinear"), 0);
  EXPECT_EQ(on.count("Transpose"), off.count("Transpose") - 1);
  EXPECT_TRUE(reads_channels_first(on, "stem"));
}

// Guard: two convolutions read the transposed image: it stays, and so does the Cast.
TEST(FuseConvInputGuard, TransposedImageReadTwice) {
  OnnxModel m = stem("two_readers", 3);
  add_conv(m, "side", "x", "z", kC, 32, 3, 1, 2);
  m.output("z");
  const Built b = check_parity(m, {"y", "z"});
  EXPECT_EQ(b.on.after.changes, 0);
  EXPECT_EQ(b.on.count("Transpose"), b.off.count("Transpose"));
}

// Guard: another node reads the float16 image too (a Flatten, which stays channels-first): the
// Cast stays, the Transpose folds, and the stem reads the float16 image channels-first.
TEST(FuseConvInputGuard, CastImageReadTwice) {
  OnnxModel m = stem("cast_shared", 3);
  m.node("Flatten", "side.flatten", {"x"}, {"r"});
  m.output("r");
  const Built b = check_parity(m, {"y", "r"});
  EXPECT_EQ(b.on.after.changes, 1) << b.on.after.detail;
  EXPECT_EQ(b.on.count("Transpose"), b.off.count("Transpose") - 1);
  EXPECT_EQ(b.on.count("Cast"), b.off.count("Cast"));
  EXPECT_TRUE(reads_channels_first(b.on, "stem"));
}

// Guard: without --fp16 the convolutions stay channels-first: nothing to fold.
TEST(FuseConvInputGuard, Float32GraphUnchanged) {
  const Built b = check_parity(stem("float32", 7), {"y"}, false);
  EXPECT_EQ(b.on.after.changes, 0);
  EXPECT_EQ(b.on.steps.size(), b.off.steps.size());
}

// The attribute is NhwcConv's: FusedConv refuses it, and NhwcConv checks X's type.
TEST(FuseConvInputGuard, AttributeChecked) {
  FusedConvAttrs a;
  a.x_channels_first = 1;
  const std::vector<int64_t> xs{1, 3, 8, 8}, ws{4, 3, 3, 3};  // X [N, C, H, W]; W [M, kh, kw, C]
  const TensorView x{DataType::kFloat32, xs}, w{DataType::kFloat16, ws};
  const TensorView conv_in[2] = {x, w};
  EXPECT_THROW(infer_shapes(OpKind::kFusedConv, a, conv_in, 1), Error);
  const std::vector<OutputType> y = infer_shapes(OpKind::kNhwcConv, a, conv_in, 1);
  EXPECT_EQ(y[0].dtype, DataType::kFloat16);
  EXPECT_EQ(y[0].shape, (std::vector<int64_t>{1, 6, 6, 4}));
  const TensorView xi{DataType::kInt32, xs};
  const TensorView bad[2] = {xi, w};
  try {
    infer_shapes(OpKind::kNhwcConv, a, bad, 1);
    ADD_FAILURE() << "an int32 channels-first X was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("channels-first X must be float32 or W's type"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiln::passes
