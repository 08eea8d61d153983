// Shape inference of the channels-last ops (NhwcConv, NhwcQConv, NhwcMaxPool, NhwcAveragePool;
// internal, made by the channels-last pass) by their channels-first twins, shared by the families
// that own them: conv/conv.cpp (NhwcConv), quant/conv.cpp (NhwcQConv) and pool/nhwc.cpp (the pools).
#pragma once

#include <span>
#include <vector>

#include "core/shape_infer.h"

namespace kiln {

// Infers `twin` with `twin_attrs` on `views` (a copy of `in` the caller may have adjusted) whose
// inputs nhwc_permuted_inputs(kind) names are permuted channels-first (X left as it is when
// x_first: NhwcConv's channels-first X), and permutes the outputs back to channels-last.
std::vector<OutputType> infer_channels_last(OpKind kind, OpKind twin, const Attrs& twin_attrs,
                                            std::span<const TensorView> in, std::vector<TensorView> views, bool x_first,
                                            size_t n);

}  // namespace kiln
