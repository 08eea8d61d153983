// Shape and type inference of the elementwise family's unary ops: one-input math and activations
// (Abs .. ThresholdedRelu, IsInf, IsNaN, Not, Gelu, ...). Each op's input type set is a row of
// kUnaryTypes; the op's registry entry (elementwise/registry.cpp) points at infer_unary, which looks
// the row up, so an op inferred by infer_unary needs both. Identity, of the misc group, is inferred
// so too (its row: every type).
#include <string>

#include "core/infer/elementwise/elementwise_internal.h"

namespace kiln::elementwise_infer {

using namespace dtype_sets;

namespace {

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

}  // namespace

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

}  // namespace kiln::elementwise_infer
