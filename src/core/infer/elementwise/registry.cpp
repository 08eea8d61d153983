// The elementwise family's registry: the entries of its groups unary.cpp, binary.cpp and misc.cpp.
#include "core/infer/elementwise/elementwise_internal.h"

namespace kiln {

namespace {

using namespace elementwise_infer;

constexpr InferEntry kEntries[] = {
    // unary.cpp
    {OpKind::kAbs, infer_unary},
    {OpKind::kAcos, infer_unary},
    {OpKind::kAcosh, infer_unary},
    {OpKind::kAsin, infer_unary},
    {OpKind::kAsinh, infer_unary},
    {OpKind::kAtan, infer_unary},
    {OpKind::kAtanh, infer_unary},
    {OpKind::kCeil, infer_unary},
    {OpKind::kCelu, infer_unary},
    {OpKind::kCos, infer_unary},
    {OpKind::kCosh, infer_unary},
    {OpKind::kElu, infer_unary},
    {OpKind::kErf, infer_unary},
    {OpKind::kExp, infer_unary},
    {OpKind::kFloor, infer_unary},
    {OpKind::kGelu, infer_unary},
    {OpKind::kHardSigmoid, infer_unary},
    {OpKind::kHardSwish, infer_unary},
    {OpKind::kIsInf, infer_unary},
    {OpKind::kIsNaN, infer_unary},
    {OpKind::kLeakyRelu, infer_unary},
    {OpKind::kLog, infer_unary},
    {OpKind::kMish, infer_unary},
    {OpKind::kNeg, infer_unary},
    {OpKind::kNot, infer_unary},
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
    {OpKind::kTan, infer_unary},
    {OpKind::kTanh, infer_unary},
    {OpKind::kThresholdedRelu, infer_unary},
    // binary.cpp
    {OpKind::kAdd, infer_arith},
    {OpKind::kAnd, infer_logic},
    {OpKind::kBitShift, infer_bitshift},
    {OpKind::kDiv, infer_arith},
    {OpKind::kEqual, infer_compare},
    {OpKind::kGreater, infer_compare},
    {OpKind::kGreaterOrEqual, infer_compare},
    {OpKind::kLess, infer_compare},
    {OpKind::kLessOrEqual, infer_compare},
    {OpKind::kMax, infer_variadic},
    {OpKind::kMean, infer_variadic},
    {OpKind::kMin, infer_variadic},
    {OpKind::kMod, infer_arith},
    {OpKind::kMul, infer_arith},
    {OpKind::kOr, infer_logic},
    {OpKind::kPRelu, infer_prelu},
    {OpKind::kPow, infer_pow},
    {OpKind::kSub, infer_arith},
    {OpKind::kSum, infer_variadic},
    {OpKind::kWhere, infer_where},
    {OpKind::kXor, infer_logic},
    // misc.cpp; Identity is inferred as a unary op, by its row in unary.cpp's kUnaryTypes
    {OpKind::kCast, infer_cast},
    {OpKind::kCastLike, infer_cast},
    {OpKind::kClip, infer_clip},
    {OpKind::kDropout, infer_dropout},
    {OpKind::kIdentity, infer_unary},
};

}  // namespace

std::span<const InferEntry> elementwise_infer_entries() { return kEntries; }

}  // namespace kiln
