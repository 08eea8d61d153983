// Shape and type inference for the elementwise family: unary math, broadcasting binary and
// variadic ops, comparisons, logic, Where, Clip, Cast/CastLike, Quantize/DequantizeLinear,
// Identity and Dropout. Type sets follow the ONNX schemas (opset 21) restricted to Kiln's dtypes.
#include <string>

#include "core/shape_infer.h"

namespace kiln {

namespace {

// ---- dtype sets as bit masks over the ONNX type codes (all < 32) ------------------------------
constexpr uint32_t bit(DataType t) { return 1u << static_cast<unsigned>(t); }
constexpr uint32_t kFloats =
    bit(DataType::kFloat32) | bit(DataType::kFloat64) | bit(DataType::kFloat16) | bit(DataType::kBFloat16);
constexpr uint32_t kSignedInts =
    bit(DataType::kInt8) | bit(DataType::kInt16) | bit(DataType::kInt32) | bit(DataType::kInt64);
constexpr uint32_t kUnsignedInts =
    bit(DataType::kUInt8) | bit(DataType::kUInt16) | bit(DataType::kUInt32) | bit(DataType::kUInt64);
constexpr uint32_t kNumeric = kFloats | kSignedInts | kUnsignedInts;
constexpr uint32_t kBool = bit(DataType::kBool);
constexpr uint32_t kAll = kNumeric | kBool;
constexpr uint32_t kQuantized =
    bit(DataType::kInt8) | bit(DataType::kUInt8) | bit(DataType::kInt16) | bit(DataType::kUInt16);

bool in_set(DataType t, uint32_t set) {
  const unsigned code = static_cast<unsigned>(t);
  return code < 32 && dtype_size(t) != 0 && (set >> code & 1u);
}

std::string set_names(uint32_t set) {
  std::string s;
  for (unsigned c = 0; c < 32; ++c) {
    if (!(set >> c & 1u)) continue;
    if (!s.empty()) s += ", ";
    s += dtype_name(static_cast<DataType>(c));
  }
  return s;
}

std::string input_name(OpKind kind, size_t i) { return std::string(op_name(kind)) + " input " + std::to_string(i); }

void check_dtype(OpKind kind, const TensorView& v, size_t i, uint32_t set) {
  if (!in_set(v.dtype, set))
    throw Error(input_name(kind, i) + " has element type " + std::string(dtype_name(v.dtype)) +
                ", expected one of: " + set_names(set));
}

void check_same_dtype(OpKind kind, std::span<const TensorView> in, size_t i, size_t j) {
  if (in[i].dtype != in[j].dtype)
    throw Error(std::string(op_name(kind)) + ": input " + std::to_string(i) + " is " +
                std::string(dtype_name(in[i].dtype)) + " but input " + std::to_string(j) + " is " +
                std::string(dtype_name(in[j].dtype)) + "; they must match");
}

std::vector<int64_t> shape_vec(const TensorView& v) { return {v.shape.begin(), v.shape.end()}; }

// Rejects negative dimensions up front (engine files are untrusted).
void check_shapes(OpKind kind, std::span<const TensorView> in) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i].exists) continue;
    for (int64_t d : in[i].shape)
      if (d < 0) throw Error(input_name(kind, i) + " has a negative dimension " + shape_string(shape_vec(in[i])));
  }
}

// ---- unary ---------------------------------------------------------------------------------
struct UnaryTypes {
  OpKind kind;
  uint32_t in;
};
constexpr UnaryTypes kUnaryTypes[] = {
    {OpKind::kAbs, kNumeric},
    {OpKind::kAcos, kFloats},
    {OpKind::kAcosh, kFloats},
    {OpKind::kAsin, kFloats},
    {OpKind::kAsinh, kFloats},
    {OpKind::kAtan, kFloats},
    {OpKind::kAtanh, kFloats},
    {OpKind::kCeil, kFloats},
    {OpKind::kCelu, kFloats},
    {OpKind::kCos, kFloats},
    {OpKind::kCosh, kFloats},
    {OpKind::kElu, kFloats},
    {OpKind::kErf, kNumeric},
    {OpKind::kExp, kFloats},
    {OpKind::kFloor, kFloats},
    {OpKind::kGelu, kFloats},
    {OpKind::kHardSigmoid, kFloats},
    {OpKind::kHardSwish, kFloats},
    {OpKind::kIdentity, kAll},
    {OpKind::kIsInf, kFloats},
    {OpKind::kIsNaN, kFloats},
    {OpKind::kLeakyRelu, kFloats},
    {OpKind::kLog, kFloats},
    {OpKind::kMish, kFloats},
    {OpKind::kNeg, kFloats | kSignedInts},
    {OpKind::kNot, kBool},
    {OpKind::kReciprocal, kFloats},
    {OpKind::kRelu, kFloats | kSignedInts},
    {OpKind::kRound, kFloats},
    {OpKind::kSelu, kFloats},
    {OpKind::kShrink, kNumeric},
    {OpKind::kSigmoid, kFloats},
    {OpKind::kSign, kNumeric},
    {OpKind::kSin, kFloats},
    {OpKind::kSinh, kFloats},
    {OpKind::kSoftplus, kFloats},
    {OpKind::kSoftsign, kFloats},
    {OpKind::kSqrt, kFloats},
    {OpKind::kTan, kFloats},
    {OpKind::kTanh, kFloats},
    {OpKind::kThresholdedRelu, kFloats},
};

uint32_t unary_types(OpKind kind) {
  for (const UnaryTypes& u : kUnaryTypes)
    if (u.kind == kind) return u.in;
  throw Error(std::string(op_name(kind)) + ": internal: no unary type set");
}

std::vector<OutputType> infer_unary(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  check_shapes(kind, in);
  check_dtype(kind, in[0], 0, unary_types(kind));
  if (kind == OpKind::kCelu && attrs_as<AlphaAttrs>(attrs).alpha == 0.0f)
    throw Error("Celu: alpha must not be 0 (it divides the input)");
  if (kind == OpKind::kGelu) {
    const auto a = attrs_as<GeluAttrs>(attrs).approximate;
    if (a != GeluApproximation::kNone && a != GeluApproximation::kTanh)
      throw Error("Gelu: approximate must be 'none' or 'tanh'");
  }
  const bool to_bool = kind == OpKind::kIsInf || kind == OpKind::kIsNaN;
  return {OutputType{to_bool ? DataType::kBool : in[0].dtype, shape_vec(in[0])}};
}

std::vector<OutputType> infer_dropout(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t n_out) {
  check_shapes(kind, in);
  check_dtype(kind, in[0], 0, kFloats);
  if (in.size() > 1 && in[1].exists) {
    check_dtype(kind, in[1], 1, kFloats);
    if (in[1].numel() != 1 || in[1].rank() > 1) throw Error("Dropout: ratio (input 1) must be a scalar");
  }
  if (in.size() > 2 && in[2].exists) {
    check_dtype(kind, in[2], 2, kBool);
    if (in[2].numel() != 1 || in[2].rank() > 1) throw Error("Dropout: training_mode (input 2) must be a scalar");
    // Training mode with ratio 0 drops nothing: the identity (PyTorch 1.13 exports Swin-T so).
    // Any other ratio draws a random mask, which an inference engine does not do.
    const bool training = in[2].data && *static_cast<const uint8_t*>(in[2].data) != 0;
    const bool ratio_known = in.size() > 1 && in[1].exists && in[1].data;
    const double ratio = ratio_known ? in[1].to_double()[0] : 0.5;
    if (training && (!ratio_known || ratio != 0.0))
      throw Error(
          "Dropout: training-mode Dropout with a ratio other than 0 draws a random mask, which an inference "
          "engine does not do (training_mode is true" +
          std::string(ratio_known ? ", ratio " + std::to_string(ratio) : ", ratio 0.5 or unknown") +
          "); export the model in eval mode");
  }
  std::vector<OutputType> out{OutputType{in[0].dtype, shape_vec(in[0])}};
  if (n_out > 1) out.push_back(OutputType{DataType::kBool, shape_vec(in[0])});
  return out;
}

// ---- broadcasting binary and variadic --------------------------------------------------------
std::vector<int64_t> broadcast_all(std::span<const TensorView> in) {
  std::vector<int64_t> s = shape_vec(in[0]);
  for (size_t i = 1; i < in.size(); ++i) s = broadcast_shapes(s, in[i].shape);
  return s;
}

std::vector<OutputType> infer_arith(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  check_shapes(kind, in);
  check_dtype(kind, in[0], 0, kNumeric);
  check_same_dtype(kind, in, 0, 1);
  if (kind == OpKind::kMod) {
    const int64_t fmod = attrs_as<ModAttrs>(attrs).fmod;
    if (fmod != 0 && fmod != 1) throw Error("Mod: fmod must be 0 or 1, got " + std::to_string(fmod));
    if (fmod == 0 && in_set(in[0].dtype, kFloats)) throw Error("Mod: floating-point inputs require fmod=1 (ONNX)");
  }
  return {OutputType{in[0].dtype, broadcast_all(in)}};
}

std::vector<OutputType> infer_pow(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t) {
  check_shapes(kind, in);
  check_dtype(kind, in[0], 0, kNumeric);
  check_dtype(kind, in[1], 1, kNumeric);
  return {OutputType{in[0].dtype, broadcast_all(in)}};
}

std::vector<OutputType> infer_prelu(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t) {
  check_shapes(kind, in);
  check_dtype(kind, in[0], 0, kNumeric);
  check_same_dtype(kind, in, 0, 1);
  std::vector<int64_t> s = broadcast_all(in);
  if (s != shape_vec(in[0]))
    throw Error("PRelu: slope shape " + shape_string(shape_vec(in[1])) + " must broadcast to X's shape " +
                shape_string(shape_vec(in[0])));
  return {OutputType{in[0].dtype, std::move(s)}};
}

std::vector<OutputType> infer_compare(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t) {
  check_shapes(kind, in);
  check_dtype(kind, in[0], 0, kind == OpKind::kEqual ? kAll : kNumeric);
  check_same_dtype(kind, in, 0, 1);
  return {OutputType{DataType::kBool, broadcast_all(in)}};
}

std::vector<OutputType> infer_logic(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t) {
  check_shapes(kind, in);
  check_dtype(kind, in[0], 0, kBool);
  check_dtype(kind, in[1], 1, kBool);
  return {OutputType{DataType::kBool, broadcast_all(in)}};
}

std::vector<OutputType> infer_variadic(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t) {
  check_shapes(kind, in);
  const uint32_t set = (kind == OpKind::kMax || kind == OpKind::kMin) ? kNumeric : kFloats;
  check_dtype(kind, in[0], 0, set);
  for (size_t i = 1; i < in.size(); ++i) {
    if (!in[i].exists) throw Error(input_name(kind, i) + " is missing");
    check_same_dtype(kind, in, 0, i);
  }
  return {OutputType{in[0].dtype, broadcast_all(in)}};
}

std::vector<OutputType> infer_where(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t) {
  check_shapes(kind, in);
  check_dtype(kind, in[0], 0, kBool);
  check_dtype(kind, in[1], 1, kAll);
  check_same_dtype(kind, in, 1, 2);
  return {OutputType{in[1].dtype, broadcast_all(in)}};
}

// ---- Clip, Cast, CastLike ------------------------------------------------------------------
std::vector<OutputType> infer_clip(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t) {
  check_shapes(kind, in);
  check_dtype(kind, in[0], 0, kNumeric);
  for (size_t i = 1; i < in.size(); ++i) {
    if (!in[i].exists) continue;
    check_same_dtype(kind, in, 0, i);
    if (in[i].numel() != 1 || in[i].rank() > 1)
      throw Error("Clip: " + std::string(i == 1 ? "min" : "max") + " (input " + std::to_string(i) +
                  ") must be a scalar, got shape " + shape_string(shape_vec(in[i])));
  }
  return {OutputType{in[0].dtype, shape_vec(in[0])}};
}

std::vector<OutputType> infer_cast(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  check_shapes(kind, in);
  check_dtype(kind, in[0], 0, kAll);
  const DataType to = attrs_as<CastAttrs>(attrs).to;
  if (!in_set(to, kAll))
    throw Error(std::string(op_name(kind)) + ": unsupported target type " + std::string(dtype_name(to)) + " (code " +
                std::to_string(static_cast<unsigned>(to)) + ")");
  if (kind == OpKind::kCastLike && in[1].dtype != to)
    throw Error("CastLike: attribute 'to' (" + std::string(dtype_name(to)) + ") differs from input 1's type " +
                std::string(dtype_name(in[1].dtype)));
  return {OutputType{to, shape_vec(in[0])}};
}

// ---- QuantizeLinear / DequantizeLinear -------------------------------------------------------
// The scale (and zero point) layout: one value for the whole tensor (rank 0, or one element),
// per-axis (1-D, length x.shape[axis]), or blocked (same rank as x; ceil(x.shape[axis]/block_size)
// along axis, x's dims elsewhere).
void check_quant_params(OpKind kind, const QuantizeAttrs& a, const TensorView& x, const TensorView& scale) {
  if (a.block_size < 0) throw Error(std::string(op_name(kind)) + ": block_size must be >= 0");
  const bool per_tensor = scale.rank() == 0 || (scale.numel() == 1 && (scale.rank() == 1 || a.block_size > 0));
  if (per_tensor) return;
  const std::string name(op_name(kind));
  const int64_t axis = normalize_axis(a.axis, static_cast<int64_t>(x.rank()), (name + ": axis").c_str());
  if (a.block_size == 0) {
    if (scale.rank() != 1 || scale.shape[0] != x.shape[axis])
      throw Error(name + ": per-axis scale must be 1-D of length " + std::to_string(x.shape[axis]) + " (input dim " +
                  std::to_string(axis) + "), got shape " + shape_string(shape_vec(scale)));
    return;
  }
  if (scale.rank() != x.rank())
    throw Error(name + ": blocked scale must have x's rank " + std::to_string(x.rank()) + ", got shape " +
                shape_string(shape_vec(scale)));
  for (size_t d = 0; d < x.rank(); ++d) {
    const int64_t want = static_cast<int64_t>(d) == axis ? (x.shape[d] + a.block_size - 1) / a.block_size : x.shape[d];
    if (scale.shape[d] != want)
      throw Error(name + ": blocked scale shape " + shape_string(shape_vec(scale)) + " does not match x shape " +
                  shape_string(shape_vec(x)) + " with block_size " + std::to_string(a.block_size) + " on axis " +
                  std::to_string(axis));
  }
}

// The zero point has the scale's shape; a single value may be [] against [1] (onnxruntime's
// quantizer writes that; onnxruntime runs it).
void check_zero_point(OpKind kind, std::span<const TensorView> in) {
  if (in.size() < 3 || !in[2].exists) return;
  const bool single = in[1].numel() == 1 && in[2].numel() == 1 && in[1].rank() <= 1 && in[2].rank() <= 1;
  if (!single && shape_vec(in[2]) != shape_vec(in[1]))
    throw Error(std::string(op_name(kind)) + ": zero point shape " + shape_string(shape_vec(in[2])) +
                " differs from scale shape " + shape_string(shape_vec(in[1])));
}

std::vector<OutputType> infer_quantize(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  check_shapes(kind, in);
  const uint32_t xs = kFloats & ~bit(DataType::kFloat64);
  check_dtype(kind, in[0], 0, xs | bit(DataType::kInt32));
  check_dtype(kind, in[1], 1, xs | bit(DataType::kInt32));
  check_quant_params(kind, attrs_as<QuantizeAttrs>(attrs), in[0], in[1]);
  DataType out = DataType::kUInt8;
  if (in.size() > 2 && in[2].exists) {
    check_dtype(kind, in[2], 2, kQuantized);
    check_zero_point(kind, in);
    out = in[2].dtype;
  }
  return {OutputType{out, shape_vec(in[0])}};
}

std::vector<OutputType> infer_dequantize(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  check_shapes(kind, in);
  check_dtype(kind, in[0], 0, kQuantized | bit(DataType::kInt32));
  check_dtype(kind, in[1], 1, kFloats & ~bit(DataType::kFloat64));
  check_quant_params(kind, attrs_as<QuantizeAttrs>(attrs), in[0], in[1]);
  if (in.size() > 2 && in[2].exists) {
    check_same_dtype(kind, in, 0, 2);
    check_zero_point(kind, in);
  }
  return {OutputType{in[1].dtype, shape_vec(in[0])}};
}

constexpr InferEntry kEntries[] = {
    {OpKind::kAbs, infer_unary},
    {OpKind::kAcos, infer_unary},
    {OpKind::kAcosh, infer_unary},
    {OpKind::kAdd, infer_arith},
    {OpKind::kAnd, infer_logic},
    {OpKind::kAsin, infer_unary},
    {OpKind::kAsinh, infer_unary},
    {OpKind::kAtan, infer_unary},
    {OpKind::kAtanh, infer_unary},
    {OpKind::kCast, infer_cast},
    {OpKind::kCastLike, infer_cast},
    {OpKind::kCeil, infer_unary},
    {OpKind::kCelu, infer_unary},
    {OpKind::kClip, infer_clip},
    {OpKind::kCos, infer_unary},
    {OpKind::kCosh, infer_unary},
    {OpKind::kDequantizeLinear, infer_dequantize},
    {OpKind::kDiv, infer_arith},
    {OpKind::kDropout, infer_dropout},
    {OpKind::kElu, infer_unary},
    {OpKind::kEqual, infer_compare},
    {OpKind::kErf, infer_unary},
    {OpKind::kExp, infer_unary},
    {OpKind::kFloor, infer_unary},
    {OpKind::kGelu, infer_unary},
    {OpKind::kGreater, infer_compare},
    {OpKind::kGreaterOrEqual, infer_compare},
    {OpKind::kHardSigmoid, infer_unary},
    {OpKind::kHardSwish, infer_unary},
    {OpKind::kIdentity, infer_unary},
    {OpKind::kIsInf, infer_unary},
    {OpKind::kIsNaN, infer_unary},
    {OpKind::kLeakyRelu, infer_unary},
    {OpKind::kLess, infer_compare},
    {OpKind::kLessOrEqual, infer_compare},
    {OpKind::kLog, infer_unary},
    {OpKind::kMax, infer_variadic},
    {OpKind::kMean, infer_variadic},
    {OpKind::kMin, infer_variadic},
    {OpKind::kMish, infer_unary},
    {OpKind::kMod, infer_arith},
    {OpKind::kMul, infer_arith},
    {OpKind::kNeg, infer_unary},
    {OpKind::kNot, infer_unary},
    {OpKind::kOr, infer_logic},
    {OpKind::kPRelu, infer_prelu},
    {OpKind::kPow, infer_pow},
    {OpKind::kQuantizeLinear, infer_quantize},
    {OpKind::kReciprocal, infer_unary},
    {OpKind::kRelu, infer_unary},
    {OpKind::kRound, infer_unary},
    {OpKind::kSelu, infer_unary},
    {OpKind::kShrink, infer_unary},
    {OpKind::kSigmoid, infer_unary},
    {OpKind::kSign, infer_unary},
    {OpKind::kSin, infer_unary},
    {OpKind::kSinh, infer_unary},
    {OpKind::kSoftplus, infer_unary},
    {OpKind::kSoftsign, infer_unary},
    {OpKind::kSqrt, infer_unary},
    {OpKind::kSub, infer_arith},
    {OpKind::kSum, infer_variadic},
    {OpKind::kTan, infer_unary},
    {OpKind::kTanh, infer_unary},
    {OpKind::kThresholdedRelu, infer_unary},
    {OpKind::kWhere, infer_where},
    {OpKind::kXor, infer_logic},
};

}  // namespace

std::span<const InferEntry> elementwise_infer_entries() { return kEntries; }

}  // namespace kiln
