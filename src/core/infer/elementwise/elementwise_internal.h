// The shape inference functions of the elementwise family's groups (unary.cpp, binary.cpp,
// misc.cpp), which registry.cpp lists, and the type-set checks they share (core/infer/dtype_sets.h).
#pragma once

#include <span>
#include <vector>

#include "core/infer/dtype_sets.h"
#include "core/shape_infer.h"

namespace kiln::elementwise_infer {

// unary.cpp (also Identity, of the misc group)
std::vector<OutputType> infer_unary(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t);

// binary.cpp
std::vector<OutputType> infer_arith(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_pow(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_prelu(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_compare(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_logic(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_variadic(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_where(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_bitshift(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t);

// misc.cpp
std::vector<OutputType> infer_dropout(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t n_out);
std::vector<OutputType> infer_clip(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_cast(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t);

}  // namespace kiln::elementwise_infer
