// The quant family's registry: the entries of its groups quantize.cpp, conv.cpp and matmul.cpp.
#include "core/infer/quant/quant_internal.h"

namespace kiln {

namespace {

using namespace quant_infer;

constexpr InferEntry kEntries[] = {
    // quantize.cpp
    {OpKind::kQuantizeLinear, infer_quantize},
    {OpKind::kDequantizeLinear, infer_dequantize},
    {OpKind::kDynamicQuantizeLinear, infer_dynamic_quantize},
    // conv.cpp
    {OpKind::kConvInteger, infer_conv_integer},
    {OpKind::kQLinearConv, infer_qlinear_conv},
    {OpKind::kQConv, infer_qconv},
    {OpKind::kNhwcQConv, infer_nhwc_qconv},
    // matmul.cpp
    {OpKind::kMatMulInteger, infer_matmul_integer},
    {OpKind::kQLinearMatMul, infer_qlinear_matmul},
    {OpKind::kQMatMul, infer_qmatmul},
};

}  // namespace

std::span<const InferEntry> quant_infer_entries() { return kEntries; }

}  // namespace kiln
