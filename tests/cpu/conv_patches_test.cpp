// Tests for the conv-patches pass: a Conv whose kernel tiles its input (a patch embedding) becomes
// a Transpose of the patches and a MatMul, with the Conv's readers as ViT and Swin write them folded
// in; the engines agree with the pass off; the guards (padding, overlapping or 1x1 kernels, sizes
// the kernel does not divide, weights that are not constant) leave the Conv.
#include <gtest/gtest.h>

#include "pass_test_util.h"

namespace kiln::passes {

using namespace kiln::build;
namespace {

using namespace kiln::test;

const char* kPass = "conv-patches";

struct PatchOptions {
  int64_t h = 8, w = 12, k = 4, stride = 4, pad = 0;
  bool bias = true;
  std::string reader = "vit";  // "vit": Reshape [n, CO, P] + Transpose(0 2 1); "swin": Transpose(0 2 3 1); "": none
  bool constant_w = true;
};

// x [2, 3, h, w] -> Conv(5 channels, k x k, stride) -> the reader -> y.
PassModel patch_embed(const PatchOptions& o) {
  PassModel m("patch_embed", 17);
  m.input("x", {2, 3, o.h, o.w});
  if (o.constant_w)
    m.init_rand("w", {5, 3, o.k, o.k});
  else
    m.input("w", {5, 3, o.k, o.k});
  std::vector<std::string> ins{"x", "w"};
  if (o.bias) {
    m.init_rand("b", {5});
    ins.push_back("b");
  }
  const std::string y = o.reader.empty() ? "y" : "c";
  onnx::NodeProto* conv = m.node("Conv", "patch", ins, {y});
  attr_ints(conv, "kernel_shape", {o.k, o.k});
  attr_ints(conv, "strides", {o.stride, o.stride});
  attr_ints(conv, "pads", {o.pad, o.pad, o.pad, o.pad});
  const int64_t oh = (o.h + 2 * o.pad - o.k) / o.stride + 1, ow = (o.w + 2 * o.pad - o.k) / o.stride + 1;
  if (o.reader == "vit") {
    m.init_i64("flat", {3}, {2, 5, oh * ow});
    m.node("Reshape", "flatten", {"c", "flat"}, {"cf"});
    attr_ints(m.node("Transpose", "tokens", {"cf"}, {"y"}), "perm", {0, 2, 1});
  } else if (o.reader == "swin") {
    attr_ints(m.node("Transpose", "nhwc", {"c"}, {"y"}), "perm", {0, 2, 3, 1});
  }
  m.output("y");
  return m;
}

TEST(ConvPatches, PatchEmbeddings) {
  for (const char* reader : {"vit", "swin", ""})
    for (bool bias : {true, false}) {
      SCOPED_TRACE(std::string(reader) + (bias ? " with bias" : ""));
      PatchOptions o;
      o.reader = reader;
      o.bias = bias;
      Built on = check_pass(patch_embed(o), kPass, 1, {"y"}, 1e-5f);
      const std::vector<std::string> ops = step_ops(on.engine);
      EXPECT_EQ(count_of(ops, "Conv"), 0);
      // The one copy of the patches, the product (with its bias); Swin's layout is a view of it,
      // the others' a Transpose back to channels-first.
      EXPECT_EQ(count_of(ops, "Transpose"), std::string(reader) == "" ? 2 : 1) << ::testing::PrintToString(ops);
      EXPECT_EQ(count_of(ops, "MatMul") + count_of(ops, "FusedMatMul"), 1);
    }
}

TEST(ConvPatches, RectangularImages) {
  PatchOptions o;
  o.h = 16, o.w = 8, o.k = o.stride = 8;
  check_pass(patch_embed(o), kPass, 1, {"y"}, 1e-5f);
}

void expect_kept(const PatchOptions& o) {
  Built on = check_pass(patch_embed(o), kPass, 0, {"y"}, 1e-5f);
  EXPECT_EQ(count_of(step_ops(on.engine), "Conv"), 1);
}

TEST(ConvPatchesGuards, OverlappingKernel) {
  PatchOptions o;
  o.stride = 2;
  expect_kept(o);
}

TEST(ConvPatchesGuards, Padding) {
  PatchOptions o;
  o.pad = 1;
  o.h = 6, o.w = 10;
  expect_kept(o);
}

TEST(ConvPatchesGuards, SizeNotAMultipleOfTheKernel) {
  PatchOptions o;
  o.h = 9;  // the Conv drops the last row
  o.reader = "";
  expect_kept(o);
}

TEST(ConvPatchesGuards, OnePixelKernel) {
  PatchOptions o;
  o.k = o.stride = 1;
  o.reader = "";
  expect_kept(o);
}

TEST(ConvPatchesGuards, WeightsNotConstant) {
  PatchOptions o;
  o.constant_w = false;
  o.reader = "";
  expect_kept(o);
}

}  // namespace
}  // namespace kiln::passes
