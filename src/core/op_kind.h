// The closed set of op kinds Kiln knows, and one table of facts about each. Strings (ONNX op
// types) exist only at the import/export boundary; everything inside switches on OpKind.
// Adding an op: append it here (keep alphabetical order; the static_assert below checks that table
// and enum agree), then add its shape inference, CPU kernel and, if needed, import special case.
// Kiln's internal ops (formed by passes, e.g. FusedConv) follow the ONNX ones: ONNX defines no such
// op types, so they are never imported or exported, and adding them leaves the ONNX ops' codes as
// they were.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/attrs.h"

namespace kiln {

enum class OpKind : uint16_t {
  kAbs,
  kAcos,
  kAcosh,
  kAdd,
  kAnd,
  kArgMax,
  kArgMin,
  kAsin,
  kAsinh,
  kAtan,
  kAtanh,
  kAveragePool,
  kBatchNormalization,
  kBitShift,
  kCast,
  kCastLike,
  kCeil,
  kCelu,
  kClip,
  kConcat,
  kConstantOfShape,
  kConv,
  kConvInteger,
  kConvTranspose,
  kCos,
  kCosh,
  kCumSum,
  kDepthToSpace,
  kDequantizeLinear,
  kDiv,
  kDropout,
  kDynamicQuantizeLinear,
  kEinsum,
  kElu,
  kEqual,
  kErf,
  kExp,
  kExpand,
  kEyeLike,
  kFlatten,
  kFloor,
  kGRU,
  kGather,
  kGatherElements,
  kGatherND,
  kGelu,
  kGemm,
  kGlobalAveragePool,
  kGlobalMaxPool,
  kGreater,
  kGreaterOrEqual,
  kHardSigmoid,
  kHardSwish,
  kHardmax,
  kIdentity,
  kInstanceNormalization,
  kIsInf,
  kIsNaN,
  kLRN,
  kLSTM,
  kLayerNormalization,
  kLeakyRelu,
  kLess,
  kLessOrEqual,
  kLog,
  kLogSoftmax,
  kMatMul,
  kMatMulInteger,
  kMax,
  kMaxPool,
  kMean,
  kMin,
  kMish,
  kMod,
  kMul,
  kNeg,
  kNegativeLogLikelihoodLoss,
  kNot,
  kOneHot,
  kOr,
  kPRelu,
  kPad,
  kPow,
  kQLinearConv,
  kQLinearMatMul,
  kQuantizeLinear,
  kRNN,
  kRange,
  kReciprocal,
  kReduceL1,
  kReduceL2,
  kReduceLogSum,
  kReduceLogSumExp,
  kReduceMax,
  kReduceMean,
  kReduceMin,
  kReduceProd,
  kReduceSum,
  kReduceSumSquare,
  kRelu,
  kReshape,
  kResize,
  kRound,
  kScatterElements,
  kScatterND,
  kSelu,
  kShape,
  kShrink,
  kSigmoid,
  kSign,
  kSin,
  kSinh,
  kSize,
  kSlice,
  kSoftmax,
  kSoftmaxCrossEntropyLoss,
  kSoftplus,
  kSoftsign,
  kSpaceToDepth,
  kSplit,
  kSqrt,
  kSqueeze,
  kSub,
  kSum,
  kTan,
  kTanh,
  kThresholdedRelu,
  kTile,
  kTopK,
  kTranspose,
  kTrilu,
  kUnsqueeze,
  kWhere,
  kXor,
  // Internal ops, made by passes and never imported (see docs/decisions.md, "Vertical fusion"
  // and "INT8"). They stay at the end, so adding one leaves the ONNX ops' engine codes unchanged.
  kFusedConv,
  kFusedGemm,
  kFusedMatMul,
  kQConv,
  kQMatMul,
  kNhwcAveragePool,
  kNhwcConv,
  kNhwcMaxPool,
  kNhwcQConv,
};
inline constexpr OpKind kFirstInternalOp = OpKind::kFusedConv;

// What passes ask of an op instead of keeping lists of their own (OpInfo::traits, a bit set).
enum OpTrait : uint32_t {
  // The output is the first input's data, in the same order, with another shape (a Cast or a
  // quantization commutes with it; the runtime makes it a view).
  kReshapeLike = 1u << 0,
};

struct OpInfo {
  OpKind kind;
  std::string_view name;  // ONNX op type (internal ops: Kiln's own name)
  uint8_t attrs_index;    // which Attrs alternative the op's attributes use
  int8_t min_inputs;
  int8_t max_inputs;  // -1: variadic
  int8_t min_outputs;
  int8_t max_outputs;     // -1: variadic
  uint32_t const_inputs;  // bit i set: input i determines the output shape, so it must be known
                          // (an initializer or folded constant) when the engine is built
  uint32_t traits = 0;    // OpTrait bits
};

inline constexpr OpInfo kOpTable[] = {
    {OpKind::kAbs, "Abs", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kAcos, "Acos", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kAcosh, "Acosh", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kAdd, "Add", kAttrsIndex<NoAttrs>, 2, 2, 1, 1, 0x0},
    {OpKind::kAnd, "And", kAttrsIndex<NoAttrs>, 2, 2, 1, 1, 0x0},
    {OpKind::kArgMax, "ArgMax", kAttrsIndex<ArgReduceAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kArgMin, "ArgMin", kAttrsIndex<ArgReduceAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kAsin, "Asin", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kAsinh, "Asinh", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kAtan, "Atan", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kAtanh, "Atanh", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kAveragePool, "AveragePool", kAttrsIndex<PoolAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kBatchNormalization, "BatchNormalization", kAttrsIndex<BatchNormAttrs>, 5, 5, 1, 3,
     0x0},  // 3 outputs only in training mode, which inference rejects
    {OpKind::kBitShift, "BitShift", kAttrsIndex<BitShiftAttrs>, 2, 2, 1, 1, 0x0},
    {OpKind::kCast, "Cast", kAttrsIndex<CastAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kCastLike, "CastLike", kAttrsIndex<CastAttrs>, 2, 2, 1, 1, 0x0},
    {OpKind::kCeil, "Ceil", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kCelu, "Celu", kAttrsIndex<AlphaAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kClip, "Clip", kAttrsIndex<NoAttrs>, 1, 3, 1, 1, 0x0},
    {OpKind::kConcat, "Concat", kAttrsIndex<AxisAttrs>, 1, -1, 1, 1, 0x0},
    {OpKind::kConstantOfShape, "ConstantOfShape", kAttrsIndex<ConstantOfShapeAttrs>, 1, 1, 1, 1, 0x1},
    {OpKind::kConv, "Conv", kAttrsIndex<ConvAttrs>, 2, 3, 1, 1, 0x0},
    {OpKind::kConvInteger, "ConvInteger", kAttrsIndex<ConvAttrs>, 2, 4, 1, 1, 0x0},
    {OpKind::kConvTranspose, "ConvTranspose", kAttrsIndex<ConvAttrs>, 2, 3, 1, 1, 0x0},
    {OpKind::kCos, "Cos", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kCosh, "Cosh", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kCumSum, "CumSum", kAttrsIndex<CumSumAttrs>, 2, 2, 1, 1, 0x2},
    {OpKind::kDepthToSpace, "DepthToSpace", kAttrsIndex<DepthToSpaceAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kDequantizeLinear, "DequantizeLinear", kAttrsIndex<QuantizeAttrs>, 2, 3, 1, 1, 0x0},
    {OpKind::kDiv, "Div", kAttrsIndex<NoAttrs>, 2, 2, 1, 1, 0x0},
    {OpKind::kDropout, "Dropout", kAttrsIndex<NoAttrs>, 1, 3, 1, 2, 0x0},  // inference only: identity, mask all true
    {OpKind::kDynamicQuantizeLinear, "DynamicQuantizeLinear", kAttrsIndex<NoAttrs>, 1, 1, 3, 3, 0x0},
    {OpKind::kEinsum, "Einsum", kAttrsIndex<EinsumAttrs>, 1, -1, 1, 1, 0x0},
    {OpKind::kElu, "Elu", kAttrsIndex<AlphaAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kEqual, "Equal", kAttrsIndex<NoAttrs>, 2, 2, 1, 1, 0x0},
    {OpKind::kErf, "Erf", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kExp, "Exp", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kExpand, "Expand", kAttrsIndex<NoAttrs>, 2, 2, 1, 1, 0x2},
    {OpKind::kEyeLike, "EyeLike", kAttrsIndex<EyeLikeAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kFlatten, "Flatten", kAttrsIndex<AxisAttrs>, 1, 1, 1, 1, 0x0, kReshapeLike},
    {OpKind::kFloor, "Floor", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kGRU, "GRU", kAttrsIndex<RnnAttrs>, 3, 6, 0, 2, 0x0},
    {OpKind::kGather, "Gather", kAttrsIndex<AxisAttrs>, 2, 2, 1, 1, 0x0},
    {OpKind::kGatherElements, "GatherElements", kAttrsIndex<AxisAttrs>, 2, 2, 1, 1, 0x0},
    {OpKind::kGatherND, "GatherND", kAttrsIndex<GatherNDAttrs>, 2, 2, 1, 1, 0x0},
    {OpKind::kGelu, "Gelu", kAttrsIndex<GeluAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kGemm, "Gemm", kAttrsIndex<GemmAttrs>, 2, 3, 1, 1, 0x0},
    {OpKind::kGlobalAveragePool, "GlobalAveragePool", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kGlobalMaxPool, "GlobalMaxPool", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kGreater, "Greater", kAttrsIndex<NoAttrs>, 2, 2, 1, 1, 0x0},
    {OpKind::kGreaterOrEqual, "GreaterOrEqual", kAttrsIndex<NoAttrs>, 2, 2, 1, 1, 0x0},
    {OpKind::kHardSigmoid, "HardSigmoid", kAttrsIndex<HardSigmoidAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kHardSwish, "HardSwish", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kHardmax, "Hardmax", kAttrsIndex<SoftmaxAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kIdentity, "Identity", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kInstanceNormalization, "InstanceNormalization", kAttrsIndex<EpsilonAttrs>, 3, 3, 1, 1, 0x0},
    {OpKind::kIsInf, "IsInf", kAttrsIndex<IsInfAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kIsNaN, "IsNaN", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kLRN, "LRN", kAttrsIndex<LrnAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kLSTM, "LSTM", kAttrsIndex<RnnAttrs>, 3, 8, 0, 3, 0x0},
    {OpKind::kLayerNormalization, "LayerNormalization", kAttrsIndex<LayerNormAttrs>, 2, 3, 1, 3, 0x0},
    {OpKind::kLeakyRelu, "LeakyRelu", kAttrsIndex<AlphaAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kLess, "Less", kAttrsIndex<NoAttrs>, 2, 2, 1, 1, 0x0},
    {OpKind::kLessOrEqual, "LessOrEqual", kAttrsIndex<NoAttrs>, 2, 2, 1, 1, 0x0},
    {OpKind::kLog, "Log", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kLogSoftmax, "LogSoftmax", kAttrsIndex<SoftmaxAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kMatMul, "MatMul", kAttrsIndex<NoAttrs>, 2, 2, 1, 1, 0x0},
    {OpKind::kMatMulInteger, "MatMulInteger", kAttrsIndex<NoAttrs>, 2, 4, 1, 1, 0x0},
    {OpKind::kMax, "Max", kAttrsIndex<NoAttrs>, 1, -1, 1, 1, 0x0},
    {OpKind::kMaxPool, "MaxPool", kAttrsIndex<PoolAttrs>, 1, 1, 1, 2, 0x0},
    {OpKind::kMean, "Mean", kAttrsIndex<NoAttrs>, 1, -1, 1, 1, 0x0},
    {OpKind::kMin, "Min", kAttrsIndex<NoAttrs>, 1, -1, 1, 1, 0x0},
    {OpKind::kMish, "Mish", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kMod, "Mod", kAttrsIndex<ModAttrs>, 2, 2, 1, 1, 0x0},
    {OpKind::kMul, "Mul", kAttrsIndex<NoAttrs>, 2, 2, 1, 1, 0x0},
    {OpKind::kNeg, "Neg", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kNegativeLogLikelihoodLoss, "NegativeLogLikelihoodLoss", kAttrsIndex<LossAttrs>, 2, 3, 1, 1, 0x0},
    {OpKind::kNot, "Not", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kOneHot, "OneHot", kAttrsIndex<OneHotAttrs>, 3, 3, 1, 1, 0x2},
    {OpKind::kOr, "Or", kAttrsIndex<NoAttrs>, 2, 2, 1, 1, 0x0},
    {OpKind::kPRelu, "PRelu", kAttrsIndex<NoAttrs>, 2, 2, 1, 1, 0x0},
    {OpKind::kPad, "Pad", kAttrsIndex<PadAttrs>, 2, 4, 1, 1, 0xa},
    {OpKind::kPow, "Pow", kAttrsIndex<NoAttrs>, 2, 2, 1, 1, 0x0},
    {OpKind::kQLinearConv, "QLinearConv", kAttrsIndex<ConvAttrs>, 8, 9, 1, 1, 0x0},
    {OpKind::kQLinearMatMul, "QLinearMatMul", kAttrsIndex<NoAttrs>, 8, 8, 1, 1, 0x0},
    {OpKind::kQuantizeLinear, "QuantizeLinear", kAttrsIndex<QuantizeAttrs>, 2, 3, 1, 1, 0x0},
    {OpKind::kRNN, "RNN", kAttrsIndex<RnnAttrs>, 3, 6, 0, 2, 0x0},
    {OpKind::kRange, "Range", kAttrsIndex<NoAttrs>, 3, 3, 1, 1, 0x7},
    {OpKind::kReciprocal, "Reciprocal", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kReduceL1, "ReduceL1", kAttrsIndex<ReduceAttrs>, 1, 2, 1, 1, 0x2},
    {OpKind::kReduceL2, "ReduceL2", kAttrsIndex<ReduceAttrs>, 1, 2, 1, 1, 0x2},
    {OpKind::kReduceLogSum, "ReduceLogSum", kAttrsIndex<ReduceAttrs>, 1, 2, 1, 1, 0x2},
    {OpKind::kReduceLogSumExp, "ReduceLogSumExp", kAttrsIndex<ReduceAttrs>, 1, 2, 1, 1, 0x2},
    {OpKind::kReduceMax, "ReduceMax", kAttrsIndex<ReduceAttrs>, 1, 2, 1, 1, 0x2},
    {OpKind::kReduceMean, "ReduceMean", kAttrsIndex<ReduceAttrs>, 1, 2, 1, 1, 0x2},
    {OpKind::kReduceMin, "ReduceMin", kAttrsIndex<ReduceAttrs>, 1, 2, 1, 1, 0x2},
    {OpKind::kReduceProd, "ReduceProd", kAttrsIndex<ReduceAttrs>, 1, 2, 1, 1, 0x2},
    {OpKind::kReduceSum, "ReduceSum", kAttrsIndex<ReduceAttrs>, 1, 2, 1, 1, 0x2},
    {OpKind::kReduceSumSquare, "ReduceSumSquare", kAttrsIndex<ReduceAttrs>, 1, 2, 1, 1, 0x2},
    {OpKind::kRelu, "Relu", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kReshape, "Reshape", kAttrsIndex<ReshapeAttrs>, 2, 2, 1, 1, 0x2, kReshapeLike},
    {OpKind::kResize, "Resize", kAttrsIndex<ResizeAttrs>, 1, 4, 1, 1, 0xe},
    {OpKind::kRound, "Round", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kScatterElements, "ScatterElements", kAttrsIndex<ScatterAttrs>, 3, 3, 1, 1, 0x0},
    {OpKind::kScatterND, "ScatterND", kAttrsIndex<ScatterAttrs>, 3, 3, 1, 1, 0x0},
    {OpKind::kSelu, "Selu", kAttrsIndex<SeluAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kShape, "Shape", kAttrsIndex<ShapeAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kShrink, "Shrink", kAttrsIndex<ShrinkAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kSigmoid, "Sigmoid", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kSign, "Sign", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kSin, "Sin", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kSinh, "Sinh", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kSize, "Size", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kSlice, "Slice", kAttrsIndex<NoAttrs>, 3, 5, 1, 1, 0x1e},
    {OpKind::kSoftmax, "Softmax", kAttrsIndex<SoftmaxAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kSoftmaxCrossEntropyLoss, "SoftmaxCrossEntropyLoss", kAttrsIndex<LossAttrs>, 2, 3, 1, 2, 0x0},
    {OpKind::kSoftplus, "Softplus", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kSoftsign, "Softsign", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kSpaceToDepth, "SpaceToDepth", kAttrsIndex<DepthToSpaceAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kSplit, "Split", kAttrsIndex<SplitAttrs>, 1, 2, 1, -1, 0x2},
    {OpKind::kSqrt, "Sqrt", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kSqueeze, "Squeeze", kAttrsIndex<NoAttrs>, 1, 2, 1, 1, 0x2, kReshapeLike},
    {OpKind::kSub, "Sub", kAttrsIndex<NoAttrs>, 2, 2, 1, 1, 0x0},
    {OpKind::kSum, "Sum", kAttrsIndex<NoAttrs>, 1, -1, 1, 1, 0x0},
    {OpKind::kTan, "Tan", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kTanh, "Tanh", kAttrsIndex<NoAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kThresholdedRelu, "ThresholdedRelu", kAttrsIndex<AlphaAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kTile, "Tile", kAttrsIndex<NoAttrs>, 2, 2, 1, 1, 0x2},
    {OpKind::kTopK, "TopK", kAttrsIndex<TopKAttrs>, 2, 2, 2, 2, 0x2},
    {OpKind::kTranspose, "Transpose", kAttrsIndex<TransposeAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kTrilu, "Trilu", kAttrsIndex<TriluAttrs>, 1, 2, 1, 1, 0x2},
    {OpKind::kUnsqueeze, "Unsqueeze", kAttrsIndex<NoAttrs>, 2, 2, 1, 1, 0x2, kReshapeLike},
    {OpKind::kWhere, "Where", kAttrsIndex<NoAttrs>, 3, 3, 1, 1, 0x0},
    {OpKind::kXor, "Xor", kAttrsIndex<NoAttrs>, 2, 2, 1, 1, 0x0},
    // Inputs: X, W, optional B, optional Z (the residual). See FusedConvAttrs.
    {OpKind::kFusedConv, "FusedConv", kAttrsIndex<FusedConvAttrs>, 2, 4, 1, 1, 0x0},
    // Inputs: A, B, optional C, optional Z.
    {OpKind::kFusedGemm, "FusedGemm", kAttrsIndex<FusedGemmAttrs>, 2, 4, 1, 1, 0x0},
    // Inputs: A, B, optional bias (one value per column of the product), optional Z.
    {OpKind::kFusedMatMul, "FusedMatMul", kAttrsIndex<EpilogueAttrs>, 2, 4, 1, 1, 0x0},
    // INT8 convolution / matrix product with a fused epilogue (fuse-qdq, cpu/ops/extra_qfused.cpp):
    // x, x_scale, [x_zero_point], w, w_scale, [w_zero_point], [bias], [y_scale], [y_zero_point],
    // [z], [z_scale], [z_zero_point]: z, a residual shaped as y (int8/uint8 with its scale and zero
    // point, or float32 alone), is added before the activation (fuse-qresidual; qfused_math.h).
    // The quantization parameters and the bias are marked constant (they always are: the pass makes
    // them) so that GPU kernels read them on the host to choose their path.
    // x_zero_point (input 2) is optional, so the table requires only x and x_scale; inference
    // checks w and w_scale.
    {OpKind::kQConv, "kiln.QConv", kAttrsIndex<QConvAttrs>, 2, 12, 1, 1, 0xdf6},
    {OpKind::kQMatMul, "kiln.QMatMul", kAttrsIndex<QMatMulAttrs>, 2, 9, 1, 1, 0x1f6},
    // Channels-last twins of AveragePool, FusedConv and MaxPool: data [N, spatial..., C], NhwcConv's
    // W [M, k..., C/group] (the channels-last pass makes them for GPU float16 engines). NhwcConv:
    // X, W, [B], [Z], [y_scale], [y_zero_point]; with y_scale (fuse-conv-quantize) Y is the
    // per-tensor QuantizeLinear of FusedConv's output, int8 or uint8 as y_zero_point (of the output
    // in X's type; the GPU's stem kernel quantizes the float value before that rounding).
    {OpKind::kNhwcAveragePool, "NhwcAveragePool", kAttrsIndex<PoolAttrs>, 1, 1, 1, 1, 0x0},
    {OpKind::kNhwcConv, "NhwcConv", kAttrsIndex<FusedConvAttrs>, 2, 6, 1, 1, 0x30},
    {OpKind::kNhwcMaxPool, "NhwcMaxPool", kAttrsIndex<PoolAttrs>, 1, 1, 1, 1, 0x0},
    // Channels-last kiln.QConv: x, y and the residual z [N, spatial..., C], w [M, k..., C/group].
    {OpKind::kNhwcQConv, "NhwcQConv", kAttrsIndex<QConvAttrs>, 2, 12, 1, 1, 0xdf6},
};

inline constexpr size_t kOpCount = std::size(kOpTable);

constexpr bool op_table_in_order() {
  for (size_t i = 0; i < kOpCount; ++i)
    if (static_cast<size_t>(kOpTable[i].kind) != i) return false;
  return true;
}
static_assert(op_table_in_order(), "kOpTable rows must follow the OpKind enum order");
static_assert(static_cast<size_t>(OpKind::kNhwcQConv) + 1 == kOpCount, "every OpKind needs a kOpTable row");
// The ONNX ops, [0, kOnnxOpCount), are the ones import and export know.
inline constexpr size_t kOnnxOpCount = static_cast<size_t>(kFirstInternalOp);

inline const OpInfo& op_info(OpKind k) { return kOpTable[static_cast<size_t>(k)]; }
inline bool has_trait(OpKind k, OpTrait t) { return (op_info(k).traits & t) != 0; }
inline std::string_view op_name(OpKind k) { return op_info(k).name; }
inline constexpr bool is_internal_op(OpKind k) { return static_cast<size_t>(k) >= kOnnxOpCount; }
// The ONNX op type's kind; never an internal op.
std::optional<OpKind> op_kind_from_name(std::string_view onnx_op_type);

// A default-constructed Attrs holding the alternative that `kind` uses.
Attrs default_attrs(OpKind kind);

}  // namespace kiln
