// The channels-last ops' cases (tests/ops/op_case.h; NhwcConv of the conv family, NhwcMaxPool and
// NhwcAveragePool of the pool family), against kernels that run the channels-first ones on permuted
// copies on the CPU. NhwcConv: shapes for cuDNN with NHWC descriptors (its fused call where it can,
// the epilogue kernel along the channels otherwise), the 1x1 convolution as one GEMM, the direct
// kernel (misaligned pointers, 1-D, asymmetric pads), the small-channel stem kernels; with a
// quantized output (y_scale, y_zero_point), and reading a channels-first X (x_channels_first). The
// pools: vectorized along the channels or one element per thread, pads, strides, dilations,
// ceil_mode, 1 to 3 spatial axes; NhwcMaxPool on int8 and uint8 too (over their whole range, exact)
// and on NaN, infinities and signed zeros (the packed maxima).
#include <optional>

#include "ops/op_case.h"

namespace kiln::optest {
namespace {

struct NhwcCase {
  std::string name;
  OpKind kind;
  Attrs attrs;
  std::vector<DT> dtypes;
  std::function<Inputs(DT)> inputs;
  bool tactics = false;
  bool small_c_only = false;  // only the small-channel kernel's tactics run (300, and 301 on Hopper)
};

const std::vector<DT> kF = {DT::kFloat32, DT::kFloat16};

FusedConvAttrs nhwc_conv(Activation a1, Activation a2 = Activation::kNone, std::vector<int64_t> pads = {},
                         std::vector<int64_t> strides = {}, int64_t group = 1) {
  FusedConvAttrs a;
  a.pads = std::move(pads);
  a.strides = std::move(strides);
  a.group = group;
  a.activation = a1;
  a.activation2 = a2;
  return a;
}

// MobileNet's ReLU6 (Clip to [0, 6]).
FusedConvAttrs relu6_conv(std::vector<int64_t> pads, std::vector<int64_t> strides = {}, int64_t group = 1) {
  FusedConvAttrs a = nhwc_conv(Activation::kClip, Activation::kNone, std::move(pads), std::move(strides), group);
  a.activation_beta = 6.0f;
  return a;
}

// X [N, S..., C], W [M, k..., C/group], B [M] (or absent), Z [N, O..., M] (or none).
std::function<Inputs(DT)> conv_inputs(Shape x, Shape w, bool bias, std::optional<Shape> z) {
  return [=](DT dt) {
    Inputs in{rand_tensor(dt, x, -1, 1), rand_tensor(dt, w, -1, 1), bias ? rand_tensor(dt, {w[0]}, -1, 1) : absent()};
    if (z) in.push_back(rand_tensor(dt, *z, -1, 1));
    return in;
  };
}

PoolAttrs pool(std::vector<int64_t> kernel, std::vector<int64_t> strides = {}, std::vector<int64_t> pads = {},
               int64_t ceil_mode = 0, int64_t count_include_pad = 0, std::vector<int64_t> dilations = {}) {
  PoolAttrs a;
  a.kernel_shape = std::move(kernel);
  a.strides = std::move(strides);
  a.pads = std::move(pads);
  a.ceil_mode = ceil_mode;
  a.count_include_pad = count_include_pad;
  a.dilations = std::move(dilations);
  return a;
}

std::function<Inputs(DT)> pool_input(Shape x) {
  return [=](DT dt) { return Inputs{rand_tensor(dt, x, -1, 1)}; };
}

// conv_inputs plus a quantized output: y_scale (float32) and y_zero_point of type q (int8 or uint8).
std::function<Inputs(DT)> quant_conv_inputs(Shape x, Shape w, bool bias, std::optional<Shape> z, float scale, DT q,
                                            int zero) {
  return [=](DT dt) {
    Inputs in = conv_inputs(x, w, bias, z)(dt);
    if (!z) in.push_back(absent());
    in.push_back(make(DT::kFloat32, {}, {scale}));
    in.push_back(make(q, {}, {static_cast<double>(zero)}));
    return in;
  };
}

// NhwcConv reading a channels-first X (fuse-conv-input's x_channels_first).
FusedConvAttrs first(FusedConvAttrs a) {
  a.x_channels_first = 1;
  return a;
}

// X channels-first [N, C, S...] of type xt (float32 or the case's), W [M, k..., C/group] and B
// (or absent) of the case's type; with a quantized output, y_scale and an int8 y_zero_point.
std::function<Inputs(DT)> first_inputs(DT xt, Shape x, Shape w, bool bias, std::optional<float> scale = {}) {
  return [=](DT dt) {
    Inputs in{rand_tensor(xt, x, -1, 1), rand_tensor(dt, w, -1, 1), bias ? rand_tensor(dt, {w[0]}, -1, 1) : absent()};
    if (scale) {
      in.push_back(absent());
      in.push_back(make(DT::kFloat32, {}, {*scale}));
      in.push_back(make(DT::kInt8, {}, {-4}));
    }
    return in;
  };
}

// The 8-bit types over their whole range.
std::function<Inputs(DT)> int8_pool_input(Shape x) {
  return [=](DT dt) { return Inputs{dt == DT::kUInt8 ? rand_tensor(dt, x, 0, 255) : rand_tensor(dt, x, -128, 127)}; };
}

std::vector<NhwcCase> all_cases() {
  const OpKind C = OpKind::kNhwcConv, MP = OpKind::kNhwcMaxPool, AP = OpKind::kNhwcAveragePool;
  const Activation none = Activation::kNone, relu = Activation::kRelu, silu = Activation::kSilu;
  const std::vector<int64_t> p1{1, 1, 1, 1};
  const std::vector<DT> k8 = {DT::kInt8, DT::kUInt8};
  return {
      // ResNet: 3x3 (+ Relu, cuDNN's fused call), 3x3 + residual + Relu, 1x1 as a GEMM, strided 1x1.
      {"Conv3x3Relu", C, nhwc_conv(relu, none, p1), kF, conv_inputs({2, 10, 10, 16}, {16, 3, 3, 16}, true, {}), true},
      {"Conv3x3ResidualRelu", C, nhwc_conv(none, relu, p1), kF,
       conv_inputs({2, 10, 10, 16}, {16, 3, 3, 16}, true, Shape{2, 10, 10, 16}), true},
      {"Conv3x3Silu", C, nhwc_conv(silu, none, p1), kF, conv_inputs({2, 9, 9, 8}, {24, 3, 3, 8}, true, {})},
      {"Conv1x1ResidualRelu", C, nhwc_conv(none, relu), kF,
       conv_inputs({2, 7, 8, 32}, {64, 1, 1, 32}, true, Shape{2, 7, 8, 64}), true},
      {"Conv1x1ReluResidualRelu", C, nhwc_conv(relu, relu), kF,
       conv_inputs({2, 7, 8, 32}, {16, 1, 1, 32}, true, Shape{2, 7, 8, 16}), true},
      {"Conv1x1GeluTanhNoBias", C, nhwc_conv(Activation::kGeluTanh), kF,
       conv_inputs({3, 5, 5, 16}, {24, 1, 1, 16}, false, {}), true},
      {"Conv1x1Stride2", C, nhwc_conv(none, none, {}, {2, 2}), kF,
       conv_inputs({2, 8, 8, 16}, {32, 1, 1, 16}, true, Shape{2, 4, 4, 32}), true},
      // The stem: 7x7, stride 2, 3 input channels.
      {"Stem7x7Stride2Relu", C, nhwc_conv(relu, none, {3, 3, 3, 3}, {2, 2}), kF,
       conv_inputs({2, 16, 16, 3}, {8, 7, 7, 3}, true, {}), true},
      // Kiln's small-channel stem kernel (tactics 300 and 301, float16): ResNet's 7x7 with 64
      // channels, an odd number of output rows and a partial pixel tile, asymmetric pads,
      // MobileNet's 3x3 with 32, no bias and SiLU; infinities in the input (the kernel's dummy
      // slots must not read them into a NaN; cuDNN's algorithms differ from the CPU there, so only
      // Kiln's tactics are checked).
      {"SmallCStem7x7Relu", C, nhwc_conv(relu, none, {3, 3, 3, 3}, {2, 2}), kF,
       conv_inputs({2, 30, 32, 3}, {64, 7, 7, 3}, true, {}), true},
      {"SmallCStem7x7PartialTiles", C, nhwc_conv(none, none, {3, 3, 3, 3}, {2, 2}), kF,
       conv_inputs({3, 25, 40, 3}, {64, 7, 7, 3}, true, {}), true},
      {"SmallCStem7x7AsymmetricPads",
       C,
       nhwc_conv(relu, none, {2, 3, 4, 1}, {2, 2}),
       {DT::kFloat16},
       conv_inputs({1, 21, 48, 3}, {64, 7, 7, 3}, true, {}),
       true},
      {"SmallCStem3x3Relu6", C, relu6_conv({1, 1, 1, 1}, {2, 2}), kF,
       conv_inputs({2, 18, 16, 3}, {32, 3, 3, 3}, true, {}), true},
      {"SmallCStem3x3SiluNoBias", C, nhwc_conv(silu, none, {1, 1, 1, 1}, {2, 2}), kF,
       conv_inputs({2, 19, 24, 3}, {32, 3, 3, 3}, false, {}), true},
      // More work items (2 output rows of an image each) than resident CTAs: every CTA walks
      // several, through both staging buffers; the left pad of 5 reads staged element 0.
      {"SmallCStem7x7M32ManyItems",
       C,
       nhwc_conv(relu, none, {3, 5, 3, 1}, {2, 2}),
       {DT::kFloat16},
       conv_inputs({160, 16, 16, 3}, {32, 7, 7, 3}, true, {}),
       true},
      {"SmallCStem3x3M64ManyItems",
       C,
       nhwc_conv(none, none, {1, 1, 1, 1}, {2, 2}),
       {DT::kFloat16},
       conv_inputs({200, 16, 16, 3}, {64, 3, 3, 3}, true, {}),
       true},
      // The wgmma form's work items of 4 output rows (odd pixel tiles per row): many more than
      // resident CTAs; and of 2 rows in an image of 3, whose 6 tiles leave two warps of the
      // second round of four with no tile.
      {"SmallCStem7x7M64ManyItemsOf4Rows",
       C,
       nhwc_conv(relu, none, {3, 3, 3, 3}, {2, 2}),
       {DT::kFloat16},
       conv_inputs({800, 16, 16, 3}, {64, 7, 7, 3}, true, {}),
       true},
      {"SmallCStem7x7ShortImage",
       C,
       nhwc_conv(relu, none, {3, 3, 3, 3}, {2, 2}),
       {DT::kFloat16},
       conv_inputs({3, 6, 72, 3}, {64, 7, 7, 3}, true, {}),
       true},
      // A channels-first X (fuse-conv-input: the float32 image, or a float16 one): tactics 300
      // and 301 copy its rows as they are and convert them in shared memory (with many work
      // items, while the CTA computes the one before); every other tactic, and 300 and 301 on
      // misaligned pointers, converts X in the workspace first. Also with a quantized output,
      // and on 16 channels, where only the conversion applies.
      {"SmallCFirstStem7x7Relu",
       C,
       first(nhwc_conv(relu, none, {3, 3, 3, 3}, {2, 2})),
       {DT::kFloat16},
       first_inputs(DT::kFloat32, {2, 3, 30, 32}, {64, 7, 7, 3}, true),
       true},
      {"SmallCFirstStem3x3Relu6Float16",
       C,
       first(relu6_conv({1, 1, 1, 1}, {2, 2})),
       {DT::kFloat16},
       first_inputs(DT::kFloat16, {2, 3, 18, 16}, {32, 3, 3, 3}, true),
       true},
      {"SmallCFirstStem7x7M64ManyItems",
       C,
       first(nhwc_conv(relu, none, {3, 3, 3, 3}, {2, 2})),
       {DT::kFloat16},
       first_inputs(DT::kFloat32, {160, 3, 16, 24}, {64, 7, 7, 3}, true),
       true},
      {"SmallCQuantFirstStem7x7",
       C,
       first(nhwc_conv(relu, none, {3, 3, 3, 3}, {2, 2})),
       {DT::kFloat16},
       first_inputs(DT::kFloat32, {2, 3, 30, 32}, {64, 7, 7, 3}, true, 0.03f),
       true},
      {"FirstConv3x3Channels16",
       C,
       first(nhwc_conv(relu, none, p1)),
       {DT::kFloat16},
       first_inputs(DT::kFloat32, {2, 16, 10, 10}, {16, 3, 3, 16}, true),
       true},
      // Near misses, where tactic 300 must not be offered: an even left pad, a row over the
      // staging buffer's 48 KiB (which the wgmma form, 301, takes).
      {"NotSmallCEvenPad",
       C,
       nhwc_conv(relu, none, {2, 2, 2, 2}, {2, 2}),
       {DT::kFloat16},
       conv_inputs({1, 16, 16, 3}, {64, 7, 7, 3}, true, {}),
       true},
      {"NotSmallCWideRow",
       C,
       nhwc_conv(relu, none, {3, 3, 3, 3}, {2, 2}),
       {DT::kFloat16},
       conv_inputs({1, 9, 400, 3}, {64, 7, 7, 3}, true, {}),
       true},
      {"SmallCStem7x7Infinities",
       C,
       nhwc_conv(relu, none, {3, 3, 3, 3}, {2, 2}),
       {DT::kFloat16},
       [](DT dt) {
         HostTensor x = rand_tensor(dt, {1, 16, 40, 3}, -1, 1);
         for (int64_t i = 5; i < x.numel(); i += 97) set(x, i, std::numeric_limits<double>::infinity());
         return Inputs{std::move(x), rand_tensor(dt, {64, 7, 7, 3}, -1, 1), rand_tensor(dt, {64}, -1, 1)};
       },
       true,
       true},
      // Infinities into a quantized output with no activation: +inf and -inf saturate, and NaN
      // (+inf and -inf in one window) gives the zero point, which the clamp alone would not.
      {"SmallCInfinitiesQuantized",
       C,
       nhwc_conv(none, none, {3, 3, 3, 3}, {2, 2}),
       {DT::kFloat16},
       [](DT dt) {
         const double inf = std::numeric_limits<double>::infinity();
         HostTensor x = rand_tensor(dt, {1, 16, 40, 3}, -1, 1);
         for (int64_t i = 5, k = 0; i < x.numel(); i += 97, ++k) set(x, i, k % 2 ? -inf : inf);
         return Inputs{std::move(x), rand_tensor(dt, {64, 7, 7, 3}, -1, 1), rand_tensor(dt, {64}, -1, 1),
                       absent(),     make(DT::kFloat32, {}, {0.05}),        make(DT::kInt8, {}, {3})};
       },
       true,
       true},
      // A quantized output (fuse-conv-quantize: the stem's QuantizeLinear): tactic 300 quantizes in
      // its epilogue (int8 and uint8, ResNet's 7x7 and MobileNet's 3x3 with ReLU6, partial tiles,
      // scales that saturate part of the range); the other tactics, and tactic 300 on misaligned
      // pointers, quantize a float output staged in the workspace. A 3x3 on 16 channels with a
      // residual has no tactic 300: cuDNN, the GEMM and the direct kernel, then QuantizeLinear.
      {"SmallCQuantStem7x7Relu", C, nhwc_conv(relu, none, {3, 3, 3, 3}, {2, 2}), kF,
       quant_conv_inputs({2, 30, 32, 3}, {64, 7, 7, 3}, true, {}, 0.03f, DT::kInt8, -5), true},
      {"SmallCQuantStem7x7Uint8PartialTiles",
       C,
       nhwc_conv(none, none, {3, 3, 3, 3}, {2, 2}),
       {DT::kFloat16},
       quant_conv_inputs({3, 25, 40, 3}, {64, 7, 7, 3}, true, {}, 0.02f, DT::kUInt8, 100),
       true},
      {"SmallCQuantStem3x3Relu6",
       C,
       relu6_conv({1, 1, 1, 1}, {2, 2}),
       {DT::kFloat16},
       quant_conv_inputs({2, 18, 16, 3}, {32, 3, 3, 3}, true, {}, 6.0f / 127, DT::kInt8, 0),
       true},
      // The activation folded into the integer clamp with other zero points: Relu into uint8 with
      // zero point 100, ReLU6 into int8 with zero point 7.
      {"SmallCQuantStem3x3ReluUint8",
       C,
       nhwc_conv(relu, none, {1, 1, 1, 1}, {2, 2}),
       {DT::kFloat16},
       quant_conv_inputs({2, 18, 16, 3}, {32, 3, 3, 3}, true, {}, 0.02f, DT::kUInt8, 100),
       true},
      {"SmallCQuantStem3x3Relu6Zero7",
       C,
       relu6_conv({1, 1, 1, 1}, {2, 2}),
       {DT::kFloat16},
       quant_conv_inputs({2, 18, 16, 3}, {32, 3, 3, 3}, true, {}, 0.04f, DT::kInt8, 7),
       true},
      {"QuantConv3x3ResidualRelu", C, nhwc_conv(none, relu, p1), kF,
       quant_conv_inputs({2, 10, 10, 16}, {16, 3, 3, 16}, true, Shape{2, 10, 10, 16}, 0.05f, DT::kInt8, 3), true},
      // MobileNet: depthwise with ReLU6; odd channels (one element per thread in the epilogue).
      {"DepthwiseRelu6", C, relu6_conv({1, 1, 1, 1}, {}, 16), kF, conv_inputs({2, 9, 9, 16}, {16, 3, 3, 1}, true, {})},
      {"OddChannelsResidualSigmoid", C, nhwc_conv(relu, Activation::kSigmoid, p1), kF,
       conv_inputs({1, 6, 5, 5}, {7, 3, 3, 5}, true, Shape{1, 6, 5, 7})},
      // The direct kernel: asymmetric pads, 1-D.
      {"AsymmetricPadsRelu", C, nhwc_conv(relu, none, {0, 1, 1, 2}), kF,
       conv_inputs({1, 7, 6, 4}, {5, 3, 3, 4}, true, {})},
      {"Conv1DResidual", C, nhwc_conv(none, relu, {1, 1}), kF, conv_inputs({2, 9, 6}, {4, 3, 6}, true, Shape{2, 9, 4})},
      // Pools.
      {"MaxPool3x3Stride2", MP, pool({3, 3}, {2, 2}, {1, 1, 1, 1}), kF, pool_input({2, 9, 9, 16})},
      {"MaxPoolOddChannels", MP, pool({2, 2}), kF, pool_input({1, 5, 6, 3})},
      {"MaxPoolCeilDilated", MP, pool({3, 2}, {2, 2}, {0, 1, 1, 0}, 1, 0, {2, 1}), kF, pool_input({1, 8, 7, 8})},
      {"AveragePoolExcludePad", AP, pool({3, 3}, {2, 2}, {1, 1, 1, 1}), kF, pool_input({2, 7, 7, 8})},
      {"AveragePoolIncludePadCeil", AP, pool({3, 3}, {2, 2}, {1, 1, 1, 1}, 1, 1), kF, pool_input({1, 8, 8, 16})},
      {"AveragePool1D", AP, pool({3}, {1}, {1, 1}), kF, pool_input({2, 10, 8})},
      {"MaxPool3D", MP, pool({2, 2, 2}, {2, 2, 2}), kF, pool_input({1, 4, 4, 4, 8})},
      // The packed float16 maxima (16 channels: two vectors a pixel): NaN, infinities and signed
      // zeros in the windows; windows entirely in the padding; 1-D.
      {"MaxPoolSpecials", MP, pool({3, 3}, {2, 2}, p1), kF,
       [](DT dt) {
         return Inputs{special_tensor(dt, {2, 9, 9, 16}, -4, 4)};
       }},
      {"MaxPoolEmptyWindow", MP, pool({2, 1}, {1, 1}, {1, 0, 1, 0}, 0, 0, {3, 1}), kF, pool_input({1, 2, 3, 16})},
      {"MaxPool1D", MP, pool({3}, {2}, {1, 1}), kF, pool_input({2, 9, 16})},
      // INT8 engines: ResNet's MaxPool after the stem (16 channels a vector), channel counts that
      // are not a multiple of 16 (one element per thread), ceil_mode with dilations, and a window
      // entirely in the padding (the type's lowest value, as on the CPU). 3x3 windows on 16-byte
      // vectors take the unrolled kernel: dilations, unequal strides and pads too.
      {"MaxPool8Bit3x3Stride2", MP, pool({3, 3}, {2, 2}, p1), k8, int8_pool_input({2, 9, 9, 32})},
      {"MaxPool8BitChannels12", MP, pool({3, 3}, {2, 2}, p1), k8, int8_pool_input({2, 7, 8, 12})},
      {"MaxPool8BitCeilDilated", MP, pool({3, 2}, {2, 2}, {0, 1, 1, 0}, 1, 0, {2, 1}), k8,
       int8_pool_input({1, 8, 7, 20})},
      {"MaxPool8Bit3x3DilatedStride1", MP, pool({3, 3}, {1, 2}, {2, 1, 2, 1}, 0, 0, {2, 1}), k8,
       int8_pool_input({2, 7, 9, 32})},
      {"MaxPool3x3UnevenPads", MP, pool({3, 3}, {2, 2}, {0, 1, 2, 0}), kF, pool_input({2, 9, 8, 16})},
      {"MaxPool8BitEmptyWindow", MP, pool({2, 1}, {1, 1}, {1, 0, 1, 0}, 0, 0, {3, 1}), k8,
       int8_pool_input({1, 2, 3, 16})},
      // The unrolled 3x3 kernel on windows entirely outside the image: rows -1, 2 and 5 of a
      // 2-row image (dilation 3), so every output is the empty window's value.
      {"MaxPool3x3EmptyWindows", MP, pool({3, 3}, {1, 2}, {1, 1, 4, 1}, 0, 0, {3, 1}), kF, pool_input({2, 2, 9, 16})},
      {"MaxPool8Bit3x3EmptyWindows", MP, pool({3, 3}, {1, 2}, {1, 1, 4, 1}, 0, 0, {3, 1}), k8,
       int8_pool_input({2, 2, 9, 32})},
      // ResNet's MaxPool after the stem at batch 1, 2 and 4: the unrolled kernel on 4-, 8- and
      // 16-byte vectors (on a GPU of 132 SMs; the narrower ones where the wider would not fill it).
      {"MaxPool8BitStemBatch1", MP, pool({3, 3}, {2, 2}, p1), k8, int8_pool_input({1, 112, 112, 64})},
      {"MaxPool8BitStemBatch2", MP, pool({3, 3}, {2, 2}, p1), k8, int8_pool_input({2, 112, 112, 64})},
      {"MaxPool8BitStemBatch4", MP, pool({3, 3}, {2, 2}, p1), k8, int8_pool_input({4, 112, 112, 64})},
      {"MaxPoolFloat16StemBatch1", MP, pool({3, 3}, {2, 2}, p1), {DT::kFloat16}, pool_input({1, 112, 112, 64})},
      {"MaxPoolFloat16StemBatch2", MP, pool({3, 3}, {2, 2}, p1), {DT::kFloat16}, pool_input({2, 112, 112, 64})},
  };
}

// Products per output of a convolution, and the bound of one product's size; pools: none.
ToleranceFn nhwc_tolerance(OpKind kind, const Inputs& in) {
  double terms = 1, scale = 1;
  if (kind == OpKind::kNhwcConv) {
    for (size_t i = 1; i < in[1].shape.size(); ++i) terms *= static_cast<double>(in[1].shape[i]);
    scale = max_abs(in[0]) * max_abs(in[1]);
  }
  return [kind, terms, scale](const HostTensor& want) {
    // A quantized output: one step where the float outputs (their order of additions differs
    // between backends) round to either side of a half; the exact test is NhwcGpuQuant in
    // tests/gpu/nhwc_gpu_test.cpp. Pools: the order of additions; a max is exact.
    if (kind == OpKind::kNhwcConv && !is_float(want.dtype)) return Tolerance{0, 1};
    return kind == OpKind::kNhwcConv ? epilogue_tolerance(want, terms, scale)
                                     : tolerance_for(want.dtype, Accuracy::kArith);
  };
}

}  // namespace

std::vector<OpCase> nhwc_cases() {
  std::vector<OpCase> out;
  for (const NhwcCase& c : all_cases()) {
    // Small-channel-only cases run the small-channel kernel (tactic 300); tests/gpu/nhwc_gpu_test.cpp
    // runs its other tactics (301 on Hopper).
    OpCase o = one_run_case(
        "Nhwc" + c.name, c.kind, c.attrs, c.dtypes, c.inputs,
        [kind = c.kind](const Inputs& in) { return nhwc_tolerance(kind, in); }, c.tactics && !c.small_c_only);
    o.tactic = c.small_c_only ? 300 : -1;
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace kiln::optest
