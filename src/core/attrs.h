// Typed attributes of Kiln's ops. Each op kind has one attribute struct (several ops share one).
// Field names equal ONNX attribute names, so that one generic routine imports, exports, prints and
// serializes every struct through its kFields list. Inputs that later opsets turned from attributes
// into inputs (Reduce axes, Split sizes, Pad pads, Clip bounds, ...) are always inputs here: the ONNX
// importer rewrites older forms into the newest one.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <tuple>
#include <variant>
#include <vector>

#include "kiln/types.h"

namespace kiln {

template <class S, class T>
struct Field {
  const char* name;
  T S::*member;
};
template <class S, class T>
Field(const char*, T S::*) -> Field<S, T>;  // aggregate deduction needs it before clang 17

// Enums carry their ONNX spellings in kEnumNames<E>; the enumerator order matches the array.
template <class E>
inline constexpr std::array<std::string_view, 0> kEnumNames{};

enum class AutoPad : uint8_t { kNotSet, kSameUpper, kSameLower, kValid };
template <>
inline constexpr std::array<std::string_view, 4> kEnumNames<AutoPad>{"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"};
enum class DepthToSpaceMode : uint8_t { kDcr, kCrd };
template <>
inline constexpr std::array<std::string_view, 2> kEnumNames<DepthToSpaceMode>{"DCR", "CRD"};
enum class PadMode : uint8_t { kConstant, kReflect, kEdge, kWrap };
template <>
inline constexpr std::array<std::string_view, 4> kEnumNames<PadMode>{"constant", "reflect", "edge", "wrap"};
enum class ScatterReduction : uint8_t { kNone, kAdd, kMul, kMax, kMin };
template <>
inline constexpr std::array<std::string_view, 5> kEnumNames<ScatterReduction>{"none", "add", "mul", "max", "min"};
enum class ResizeMode : uint8_t { kNearest, kLinear, kCubic };
template <>
inline constexpr std::array<std::string_view, 3> kEnumNames<ResizeMode>{"nearest", "linear", "cubic"};
enum class CoordinateTransform : uint8_t {
  kHalfPixel,
  kHalfPixelSymmetric,
  kPytorchHalfPixel,
  kAlignCorners,
  kAsymmetric,
  kTfCropAndResize,
};
template <>
inline constexpr std::array<std::string_view, 6> kEnumNames<CoordinateTransform>{
    "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize"};
enum class NearestMode : uint8_t { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil };
template <>
inline constexpr std::array<std::string_view, 4> kEnumNames<NearestMode>{"round_prefer_floor", "round_prefer_ceil",
                                                                         "floor", "ceil"};
enum class AspectRatioPolicy : uint8_t { kStretch, kNotLarger, kNotSmaller };
template <>
inline constexpr std::array<std::string_view, 3> kEnumNames<AspectRatioPolicy>{"stretch", "not_larger", "not_smaller"};
enum class GeluApproximation : uint8_t { kNone, kTanh };
template <>
inline constexpr std::array<std::string_view, 2> kEnumNames<GeluApproximation>{"none", "tanh"};

// The activation of a fused epilogue (EpilogueAttrs). The names are those of the ONNX ops each
// replaces; SiLU is x * Sigmoid(x), GeluTanh is Gelu with approximate = "tanh".
enum class Activation : uint8_t {
  kNone,
  kRelu,
  kLeakyRelu,  // alpha
  kClip,       // alpha = min, beta = max (-inf / inf when the Clip had none)
  kSigmoid,
  kTanh,
  kSilu,
  kHardSigmoid,  // alpha, beta
  kHardSwish,
  kGelu,
  kGeluTanh,
};
template <>
inline constexpr std::array<std::string_view, 11> kEnumNames<Activation>{
    "none", "Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "SiLU", "HardSigmoid", "HardSwish", "Gelu", "GeluTanh"};

enum class LossReduction : uint8_t { kNone, kSum, kMean };
template <>
inline constexpr std::array<std::string_view, 3> kEnumNames<LossReduction>{"none", "sum", "mean"};
enum class BitShiftDirection : uint8_t { kLeft, kRight };
template <>
inline constexpr std::array<std::string_view, 2> kEnumNames<BitShiftDirection>{"LEFT", "RIGHT"};

// RNN, GRU and LSTM: the activation functions and the direction.
enum class RnnActivation : uint8_t {
  kRelu,
  kTanh,
  kSigmoid,
  kAffine,
  kLeakyRelu,
  kThresholdedRelu,
  kScaledTanh,
  kHardSigmoid,
  kElu,
  kSoftsign,
  kSoftplus,
};
template <>
inline constexpr std::array<std::string_view, 11> kEnumNames<RnnActivation>{
    "Relu",       "Tanh",        "Sigmoid", "Affine",   "LeakyRelu", "ThresholdedRelu",
    "ScaledTanh", "HardSigmoid", "Elu",     "Softsign", "Softplus"};
enum class RnnDirection : uint8_t { kForward, kReverse, kBidirectional };
template <>
inline constexpr std::array<std::string_view, 3> kEnumNames<RnnDirection>{"forward", "reverse", "bidirectional"};

template <class E>
concept AttrEnum = std::is_enum_v<E> &&(kEnumNames<E>.size() > 0);

// A single typed value (ConstantOfShape's `value`): dtype plus up to 8 bytes, little-endian.
struct Scalar {
  DataType dtype = DataType::kFloat32;
  std::array<uint8_t, 8> bytes{};
  bool operator==(const Scalar&) const = default;
};

struct NoAttrs {
  static constexpr auto kFields = std::tuple{};
};
struct AlphaAttrs {  // Elu, Celu, LeakyRelu, ThresholdedRelu; the importer sets the op's default
  float alpha = 1.0f;
  static constexpr auto kFields = std::tuple{Field{"alpha", &AlphaAttrs::alpha}};
};
struct SeluAttrs {
  float alpha = 1.67326319217681884765625f;
  float gamma = 1.05070102214813232421875f;
  static constexpr auto kFields = std::tuple{Field{"alpha", &SeluAttrs::alpha}, Field{"gamma", &SeluAttrs::gamma}};
};
struct HardSigmoidAttrs {
  float alpha = 0.2f;
  float beta = 0.5f;
  static constexpr auto kFields =
      std::tuple{Field{"alpha", &HardSigmoidAttrs::alpha}, Field{"beta", &HardSigmoidAttrs::beta}};
};
struct ShrinkAttrs {
  float bias = 0.0f;
  float lambd = 0.5f;
  static constexpr auto kFields = std::tuple{Field{"bias", &ShrinkAttrs::bias}, Field{"lambd", &ShrinkAttrs::lambd}};
};
struct GeluAttrs {
  GeluApproximation approximate = GeluApproximation::kNone;
  static constexpr auto kFields = std::tuple{Field{"approximate", &GeluAttrs::approximate}};
};
struct ModAttrs {
  int64_t fmod = 0;
  static constexpr auto kFields = std::tuple{Field{"fmod", &ModAttrs::fmod}};
};
struct IsInfAttrs {
  int64_t detect_negative = 1;
  int64_t detect_positive = 1;
  static constexpr auto kFields = std::tuple{Field{"detect_negative", &IsInfAttrs::detect_negative},
                                             Field{"detect_positive", &IsInfAttrs::detect_positive}};
};
struct CastAttrs {  // Cast (to) and CastLike (to is the second input's type, set at import)
  DataType to = DataType::kFloat32;
  int64_t saturate = 1;
  static constexpr auto kFields = std::tuple{Field{"to", &CastAttrs::to}, Field{"saturate", &CastAttrs::saturate}};
};
struct AxisAttrs {  // Concat, Flatten, Gather, GatherElements, Compress-like ops; default set per op
  int64_t axis = 0;
  static constexpr auto kFields = std::tuple{Field{"axis", &AxisAttrs::axis}};
};
// Softmax, LogSoftmax, Hardmax. Before opset 13 these flattened the input to 2-D at `axis`
// (coerce_2d = 1); from 13 on they work along one axis. Not an ONNX attribute.
struct SoftmaxAttrs {
  int64_t axis = -1;
  int64_t coerce_2d = 0;
  static constexpr auto kFields =
      std::tuple{Field{"axis", &SoftmaxAttrs::axis}, Field{"coerce_2d", &SoftmaxAttrs::coerce_2d}};
};
struct CumSumAttrs {
  int64_t exclusive = 0;
  int64_t reverse = 0;
  static constexpr auto kFields =
      std::tuple{Field{"exclusive", &CumSumAttrs::exclusive}, Field{"reverse", &CumSumAttrs::reverse}};
};
struct DepthToSpaceAttrs {  // DepthToSpace and SpaceToDepth (which ignores mode)
  int64_t blocksize = 1;
  DepthToSpaceMode mode = DepthToSpaceMode::kDcr;
  static constexpr auto kFields =
      std::tuple{Field{"blocksize", &DepthToSpaceAttrs::blocksize}, Field{"mode", &DepthToSpaceAttrs::mode}};
};
struct EinsumAttrs {
  std::string equation;
  static constexpr auto kFields = std::tuple{Field{"equation", &EinsumAttrs::equation}};
};
struct EyeLikeAttrs {  // dtype 0 in ONNX means "same as input": the importer resolves it
  DataType dtype = DataType::kFloat32;
  int64_t k = 0;
  static constexpr auto kFields = std::tuple{Field{"dtype", &EyeLikeAttrs::dtype}, Field{"k", &EyeLikeAttrs::k}};
};
struct ConstantOfShapeAttrs {
  Scalar value;  // float32 zero by default
  static constexpr auto kFields = std::tuple{Field{"value", &ConstantOfShapeAttrs::value}};
};
struct GatherNDAttrs {
  int64_t batch_dims = 0;
  static constexpr auto kFields = std::tuple{Field{"batch_dims", &GatherNDAttrs::batch_dims}};
};
struct ScatterAttrs {  // ScatterND (axis unused) and ScatterElements
  int64_t axis = 0;
  ScatterReduction reduction = ScatterReduction::kNone;
  static constexpr auto kFields =
      std::tuple{Field{"axis", &ScatterAttrs::axis}, Field{"reduction", &ScatterAttrs::reduction}};
};
struct GemmAttrs {
  float alpha = 1.0f;
  float beta = 1.0f;
  int64_t transA = 0;
  int64_t transB = 0;
  static constexpr auto kFields = std::tuple{Field{"alpha", &GemmAttrs::alpha}, Field{"beta", &GemmAttrs::beta},
                                             Field{"transA", &GemmAttrs::transA}, Field{"transB", &GemmAttrs::transB}};
};
// Conv and ConvTranspose. Empty vectors mean the ONNX default (all ones, zeros, or inferred).
struct ConvAttrs {
  AutoPad auto_pad = AutoPad::kNotSet;
  std::vector<int64_t> dilations;
  int64_t group = 1;
  std::vector<int64_t> kernel_shape;
  std::vector<int64_t> output_padding;  // ConvTranspose only
  std::vector<int64_t> output_shape;    // ConvTranspose only
  std::vector<int64_t> pads;            // [x1_begin, x2_begin, ..., x1_end, x2_end, ...]
  std::vector<int64_t> strides;
  static constexpr auto kFields = std::tuple{Field{"auto_pad", &ConvAttrs::auto_pad},
                                             Field{"dilations", &ConvAttrs::dilations},
                                             Field{"group", &ConvAttrs::group},
                                             Field{"kernel_shape", &ConvAttrs::kernel_shape},
                                             Field{"output_padding", &ConvAttrs::output_padding},
                                             Field{"output_shape", &ConvAttrs::output_shape},
                                             Field{"pads", &ConvAttrs::pads},
                                             Field{"strides", &ConvAttrs::strides}};
};
// AveragePool and MaxPool (and LpPool if added).
struct PoolAttrs {
  AutoPad auto_pad = AutoPad::kNotSet;
  int64_t ceil_mode = 0;
  int64_t count_include_pad = 0;  // AveragePool
  std::vector<int64_t> dilations;
  std::vector<int64_t> kernel_shape;
  std::vector<int64_t> pads;
  int64_t storage_order = 0;  // MaxPool's Indices output
  std::vector<int64_t> strides;
  static constexpr auto kFields = std::tuple{Field{"auto_pad", &PoolAttrs::auto_pad},
                                             Field{"ceil_mode", &PoolAttrs::ceil_mode},
                                             Field{"count_include_pad", &PoolAttrs::count_include_pad},
                                             Field{"dilations", &PoolAttrs::dilations},
                                             Field{"kernel_shape", &PoolAttrs::kernel_shape},
                                             Field{"pads", &PoolAttrs::pads},
                                             Field{"storage_order", &PoolAttrs::storage_order},
                                             Field{"strides", &PoolAttrs::strides}};
};
struct BatchNormAttrs {
  float epsilon = 1e-5f;
  float momentum = 0.9f;
  int64_t training_mode = 0;
  static constexpr auto kFields =
      std::tuple{Field{"epsilon", &BatchNormAttrs::epsilon}, Field{"momentum", &BatchNormAttrs::momentum},
                 Field{"training_mode", &BatchNormAttrs::training_mode}};
};
struct EpsilonAttrs {  // InstanceNormalization
  float epsilon = 1e-5f;
  static constexpr auto kFields = std::tuple{Field{"epsilon", &EpsilonAttrs::epsilon}};
};
struct LayerNormAttrs {
  int64_t axis = -1;
  float epsilon = 1e-5f;
  int64_t stash_type = 1;
  static constexpr auto kFields =
      std::tuple{Field{"axis", &LayerNormAttrs::axis}, Field{"epsilon", &LayerNormAttrs::epsilon},
                 Field{"stash_type", &LayerNormAttrs::stash_type}};
};
struct LrnAttrs {
  float alpha = 1e-4f;
  float beta = 0.75f;
  float bias = 1.0f;
  int64_t size = 1;
  static constexpr auto kFields = std::tuple{Field{"alpha", &LrnAttrs::alpha}, Field{"beta", &LrnAttrs::beta},
                                             Field{"bias", &LrnAttrs::bias}, Field{"size", &LrnAttrs::size}};
};
struct QuantizeAttrs {  // QuantizeLinear and DequantizeLinear
  int64_t axis = 1;
  int64_t block_size = 0;
  int64_t saturate = 1;
  static constexpr auto kFields =
      std::tuple{Field{"axis", &QuantizeAttrs::axis}, Field{"block_size", &QuantizeAttrs::block_size},
                 Field{"saturate", &QuantizeAttrs::saturate}};
};
struct PadAttrs {
  PadMode mode = PadMode::kConstant;
  static constexpr auto kFields = std::tuple{Field{"mode", &PadAttrs::mode}};
};
struct ReduceAttrs {  // Reduce*; axes is the optional second input
  int64_t keepdims = 1;
  int64_t noop_with_empty_axes = 0;
  static constexpr auto kFields = std::tuple{Field{"keepdims", &ReduceAttrs::keepdims},
                                             Field{"noop_with_empty_axes", &ReduceAttrs::noop_with_empty_axes}};
};
struct ArgReduceAttrs {  // ArgMax, ArgMin
  int64_t axis = 0;
  int64_t keepdims = 1;
  int64_t select_last_index = 0;
  static constexpr auto kFields =
      std::tuple{Field{"axis", &ArgReduceAttrs::axis}, Field{"keepdims", &ArgReduceAttrs::keepdims},
                 Field{"select_last_index", &ArgReduceAttrs::select_last_index}};
};
struct ReshapeAttrs {
  int64_t allowzero = 0;
  static constexpr auto kFields = std::tuple{Field{"allowzero", &ReshapeAttrs::allowzero}};
};
struct ResizeAttrs {  // Resize, and Upsample which the importer turns into Resize
  int64_t antialias = 0;
  std::vector<int64_t> axes;
  CoordinateTransform coordinate_transformation_mode = CoordinateTransform::kHalfPixel;
  float cubic_coeff_a = -0.75f;
  int64_t exclude_outside = 0;
  float extrapolation_value = 0.0f;
  AspectRatioPolicy keep_aspect_ratio_policy = AspectRatioPolicy::kStretch;
  ResizeMode mode = ResizeMode::kNearest;
  NearestMode nearest_mode = NearestMode::kRoundPreferFloor;
  static constexpr auto kFields =
      std::tuple{Field{"antialias", &ResizeAttrs::antialias},
                 Field{"axes", &ResizeAttrs::axes},
                 Field{"coordinate_transformation_mode", &ResizeAttrs::coordinate_transformation_mode},
                 Field{"cubic_coeff_a", &ResizeAttrs::cubic_coeff_a},
                 Field{"exclude_outside", &ResizeAttrs::exclude_outside},
                 Field{"extrapolation_value", &ResizeAttrs::extrapolation_value},
                 Field{"keep_aspect_ratio_policy", &ResizeAttrs::keep_aspect_ratio_policy},
                 Field{"mode", &ResizeAttrs::mode},
                 Field{"nearest_mode", &ResizeAttrs::nearest_mode}};
};
struct ShapeAttrs {  // Shape's slice of the dimensions; end is clamped, so INT64_MAX means "to the end"
  int64_t start = 0;
  int64_t end = INT64_MAX;
  static constexpr auto kFields = std::tuple{Field{"start", &ShapeAttrs::start}, Field{"end", &ShapeAttrs::end}};
};
struct SplitAttrs {  // sizes come from the optional `split` input; else num_outputs equal parts
  int64_t axis = 0;
  int64_t num_outputs = 0;
  static constexpr auto kFields =
      std::tuple{Field{"axis", &SplitAttrs::axis}, Field{"num_outputs", &SplitAttrs::num_outputs}};
};
struct TopKAttrs {
  int64_t axis = -1;
  int64_t largest = 1;
  int64_t sorted = 1;
  static constexpr auto kFields = std::tuple{Field{"axis", &TopKAttrs::axis}, Field{"largest", &TopKAttrs::largest},
                                             Field{"sorted", &TopKAttrs::sorted}};
};
struct TransposeAttrs {  // empty perm means reversed dimensions
  std::vector<int64_t> perm;
  static constexpr auto kFields = std::tuple{Field{"perm", &TransposeAttrs::perm}};
};
struct TriluAttrs {
  int64_t upper = 1;
  static constexpr auto kFields = std::tuple{Field{"upper", &TriluAttrs::upper}};
};
// Attention (ONNX opset 23): softmax(scale * Q Kt (softcap, + mask, causal)) V. scale NaN: absent,
// 1/sqrt(head size). The head counts matter only for 3-D inputs [batch, sequence, heads * size].
struct AttentionAttrs {
  int64_t is_causal = 0;
  int64_t kv_num_heads = 0;
  int64_t q_num_heads = 0;
  int64_t qk_matmul_output_mode = 0;
  float scale = std::numeric_limits<float>::quiet_NaN();
  float softcap = 0.0f;
  int64_t softmax_precision = 0;
  // Kiln's own, not ONNX's (fuse-attention and fuse-siblings make it; the importer refuses it): 1
  // where input 0 holds Q, K and V side by side along its last axis, [batch, len, (q_heads + 2
  // kv_heads) * head_size], the output of one projection GEMM; inputs 1 and 2 name it again.
  int64_t packed_qkv = 0;
  // Kiln's own too (fuse-attention's, for Swin's shifted windows at batches over 1): > 0 where the
  // 4-D mask's first axis is this long and repeats along the batch, which it divides (batch entry
  // b reads mask entry b % mask_period), instead of broadcasting.
  int64_t mask_period = 0;
  static constexpr auto kFields = std::tuple{Field{"is_causal", &AttentionAttrs::is_causal},
                                             Field{"kv_num_heads", &AttentionAttrs::kv_num_heads},
                                             Field{"q_num_heads", &AttentionAttrs::q_num_heads},
                                             Field{"qk_matmul_output_mode", &AttentionAttrs::qk_matmul_output_mode},
                                             Field{"scale", &AttentionAttrs::scale},
                                             Field{"softcap", &AttentionAttrs::softcap},
                                             Field{"softmax_precision", &AttentionAttrs::softmax_precision},
                                             Field{"packed_qkv", &AttentionAttrs::packed_qkv},
                                             Field{"mask_period", &AttentionAttrs::mask_period}};
};
struct NmsAttrs {  // NonMaxSuppression: 0: boxes are [y1, x1, y2, x2] corners; 1: [x_center, y_center, w, h]
  int64_t center_point_box = 0;
  static constexpr auto kFields = std::tuple{Field{"center_point_box", &NmsAttrs::center_point_box}};
};
struct OneHotAttrs {
  int64_t axis = -1;
  static constexpr auto kFields = std::tuple{Field{"axis", &OneHotAttrs::axis}};
};
// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss. ONNX's ignore_index has no default: an
// absent attribute is kNoIgnoreIndex (INT64_MIN, which no valid class index can equal).
inline constexpr int64_t kNoIgnoreIndex = INT64_MIN;
struct LossAttrs {
  int64_t ignore_index = kNoIgnoreIndex;
  LossReduction reduction = LossReduction::kMean;
  static constexpr auto kFields =
      std::tuple{Field{"ignore_index", &LossAttrs::ignore_index}, Field{"reduction", &LossAttrs::reduction}};
};
struct BitShiftAttrs {  // direction is required in ONNX
  BitShiftDirection direction = BitShiftDirection::kLeft;
  static constexpr auto kFields = std::tuple{Field{"direction", &BitShiftAttrs::direction}};
};

// RNN, GRU and LSTM. Empty activations mean the op's ONNX default (RNN: Tanh; GRU: Sigmoid, Tanh;
// LSTM: Sigmoid, Tanh, Tanh; per direction); otherwise one list entry per gate function and
// direction (forward's first). activation_alpha / activation_beta, when given, pair up with the
// activations in order; an activation without one uses its ONNX default. clip 0 means no clipping.
struct RnnAttrs {
  std::vector<float> activation_alpha;
  std::vector<float> activation_beta;
  std::vector<RnnActivation> activations;
  float clip = 0.0f;
  RnnDirection direction = RnnDirection::kForward;
  int64_t hidden_size = 0;
  int64_t input_forget = 0;         // LSTM
  int64_t layout = 0;               // 1: X, Y, initial/final states are batch-first
  int64_t linear_before_reset = 0;  // GRU
  static constexpr auto kFields = std::tuple{Field{"activation_alpha", &RnnAttrs::activation_alpha},
                                             Field{"activation_beta", &RnnAttrs::activation_beta},
                                             Field{"activations", &RnnAttrs::activations},
                                             Field{"clip", &RnnAttrs::clip},
                                             Field{"direction", &RnnAttrs::direction},
                                             Field{"hidden_size", &RnnAttrs::hidden_size},
                                             Field{"input_forget", &RnnAttrs::input_forget},
                                             Field{"layout", &RnnAttrs::layout},
                                             Field{"linear_before_reset", &RnnAttrs::linear_before_reset}};
};

// The epilogue that the internal fused ops (FusedConv, FusedGemm, FusedMatMul) apply to their
// product P, element by element, in float (double for float64) before the one store:
//   Y = activation2(activation(P + bias) + Z)
// bias: Conv's B, Gemm's beta * C, FusedMatMul's per-column bias; Z: the optional residual input,
// of Y's shape. Without Z, activation2 is kNone. Not ONNX attributes.
struct EpilogueAttrs {
  Activation activation = Activation::kNone;
  float activation_alpha = 0.0f;
  float activation_beta = 0.0f;
  Activation activation2 = Activation::kNone;
  float activation2_alpha = 0.0f;
  float activation2_beta = 0.0f;
  static constexpr auto kFields = std::tuple{Field{"activation", &EpilogueAttrs::activation},
                                             Field{"activation_alpha", &EpilogueAttrs::activation_alpha},
                                             Field{"activation_beta", &EpilogueAttrs::activation_beta},
                                             Field{"activation2", &EpilogueAttrs::activation2},
                                             Field{"activation2_alpha", &EpilogueAttrs::activation2_alpha},
                                             Field{"activation2_beta", &EpilogueAttrs::activation2_beta}};
};
struct FusedConvAttrs : ConvAttrs, EpilogueAttrs {
  // NhwcConv only (fuse-conv-input): 1 where X arrives channels-first ([N, C, spatial...]) in
  // float32 or W's type, and the convolution reads it as its channels-last view in W's type (the
  // Transpose and Cast it replaces). FusedConv refuses it.
  int64_t x_channels_first = 0;
  static constexpr auto kFields =
      std::tuple_cat(ConvAttrs::kFields, EpilogueAttrs::kFields,
                     std::tuple{Field{"x_channels_first", &FusedConvAttrs::x_channels_first}});
};
struct FusedGemmAttrs : GemmAttrs, EpilogueAttrs {
  static constexpr auto kFields = std::tuple_cat(GemmAttrs::kFields, EpilogueAttrs::kFields);
};

// kiln.QConv and kiln.QMatMul (internal INT8 ops made by the fuse-qdq pass): the activation the
// epilogue applies before requantizing. act_alpha / act_beta: Clip's min / max, LeakyRelu's alpha.
enum class QActivation : uint8_t { kNone, kRelu, kClip, kLeakyRelu };
template <>
inline constexpr std::array<std::string_view, 4> kEnumNames<QActivation>{"none", "relu", "clip", "leaky_relu"};
struct QMatMulAttrs {
  QActivation activation = QActivation::kNone;
  float act_alpha = 0.0f;
  float act_beta = 0.0f;
  static constexpr auto kFields =
      std::tuple{Field{"activation", &QMatMulAttrs::activation}, Field{"act_alpha", &QMatMulAttrs::act_alpha},
                 Field{"act_beta", &QMatMulAttrs::act_beta}};
};
// kiln.QConv: Conv's attributes and the epilogue's.
struct QConvAttrs {
  AutoPad auto_pad = AutoPad::kNotSet;
  std::vector<int64_t> dilations;
  int64_t group = 1;
  std::vector<int64_t> kernel_shape;
  std::vector<int64_t> pads;
  std::vector<int64_t> strides;
  QActivation activation = QActivation::kNone;
  float act_alpha = 0.0f;
  float act_beta = 0.0f;
  // NhwcQConv only (fuse-conv-pool): 1 averages y over its spatial axes, [N, H, W, M] -> [N, 1, 1, M]
  // (GlobalAveragePool folded into the convolution; y float32).
  int64_t pool_mean = 0;
  static constexpr auto kFields = std::tuple{Field{"auto_pad", &QConvAttrs::auto_pad},
                                             Field{"dilations", &QConvAttrs::dilations},
                                             Field{"group", &QConvAttrs::group},
                                             Field{"kernel_shape", &QConvAttrs::kernel_shape},
                                             Field{"pads", &QConvAttrs::pads},
                                             Field{"strides", &QConvAttrs::strides},
                                             Field{"activation", &QConvAttrs::activation},
                                             Field{"act_alpha", &QConvAttrs::act_alpha},
                                             Field{"act_beta", &QConvAttrs::act_beta},
                                             Field{"pool_mean", &QConvAttrs::pool_mean}};
  ConvAttrs conv() const {
    ConvAttrs c;
    c.auto_pad = auto_pad;
    c.dilations = dilations;
    c.group = group;
    c.kernel_shape = kernel_shape;
    c.pads = pads;
    c.strides = strides;
    return c;
  }
};

// The order of alternatives is part of the engine format (attrs are tagged by OpKind, not by index,
// but keep additions at the end anyway).
using Attrs = std::variant<NoAttrs, AlphaAttrs, SeluAttrs, HardSigmoidAttrs, ShrinkAttrs, GeluAttrs, ModAttrs,
                           IsInfAttrs, CastAttrs, AxisAttrs, SoftmaxAttrs, CumSumAttrs, DepthToSpaceAttrs, EinsumAttrs,
                           EyeLikeAttrs, ConstantOfShapeAttrs, GatherNDAttrs, ScatterAttrs, GemmAttrs, ConvAttrs,
                           PoolAttrs, BatchNormAttrs, EpsilonAttrs, LayerNormAttrs, LrnAttrs, QuantizeAttrs, PadAttrs,
                           ReduceAttrs, ArgReduceAttrs, ReshapeAttrs, ResizeAttrs, ShapeAttrs, SplitAttrs, TopKAttrs,
                           TransposeAttrs, TriluAttrs, OneHotAttrs, LossAttrs, BitShiftAttrs, RnnAttrs, EpilogueAttrs,
                           FusedConvAttrs, FusedGemmAttrs, QMatMulAttrs, QConvAttrs, NmsAttrs, AttentionAttrs>;

template <class T, class V>
struct VariantIndex;
template <class T, class... Ts>
struct VariantIndex<T, std::variant<Ts...>> {
  static constexpr size_t value = [] {
    constexpr bool match[] = {std::is_same_v<T, Ts>...};
    for (size_t i = 0; i < sizeof...(Ts); ++i)
      if (match[i]) return i;
    return sizeof...(Ts);
  }();
};
template <class T>
inline constexpr uint8_t kAttrsIndex = static_cast<uint8_t>(VariantIndex<T, Attrs>::value);

// Calls fn(name, member_reference) for every field of the attribute struct held by attrs.
template <class A, class Fn>
void for_each_field(A& attrs, Fn&& fn) {
  std::apply([&](auto... f) { (fn(f.name, attrs.*(f.member)), ...); }, std::remove_const_t<A>::kFields);
}

}  // namespace kiln
