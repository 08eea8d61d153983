// Checks shared by the shape inference of the internal fused ops: FusedConv (conv/conv.cpp), and
// FusedGemm and FusedMatMul (gemm/gemm.cpp); core/attrs.h has their epilogue. The product is
// inferred by its own op's entry (Conv, Gemm, MatMul) on the leading inputs; then the fused inputs
// are checked: FusedMatMul's bias has one value per column of the product, and the residual Z has
// exactly the output's type and shape (no broadcast: the kernels read it element for element).
#pragma once

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "core/shape_infer.h"

namespace kiln::fused {

inline std::string shp(std::span<const int64_t> s) { return shape_string({s.begin(), s.end()}); }

inline void check_epilogue(OpKind kind, const EpilogueAttrs& e, bool has_z) {
  if (e.activation2 != Activation::kNone && !has_z)
    throw Error(std::string(op_name(kind)) + ": activation2 follows the residual add and needs the input Z");
}

inline void check_residual(OpKind kind, std::span<const TensorView> in, const OutputType& y) {
  if (in.size() < 4 || !in[3].exists) return;
  const TensorView& z = in[3];
  if (z.dtype != y.dtype || !std::equal(z.shape.begin(), z.shape.end(), y.shape.begin(), y.shape.end()))
    throw Error(std::string(op_name(kind)) + ": the residual Z " + std::string(dtype_name(z.dtype)) + shp(z.shape) +
                " must have the output's type and shape " + std::string(dtype_name(y.dtype)) + shp(y.shape));
}

inline bool has_z(std::span<const TensorView> in) { return in.size() > 3 && in[3].exists; }

// The first min(n, in.size()) inputs.
inline std::span<const TensorView> leading(std::span<const TensorView> in, size_t n) {
  return in.first(std::min(n, in.size()));
}

// What every fused op checks once its product is inferred: a float output, and the residual.
inline void check_output(OpKind kind, std::span<const TensorView> in, const std::vector<OutputType>& out) {
  const DataType t = out[0].dtype;
  if (t != DataType::kFloat32 && t != DataType::kFloat64 && t != DataType::kFloat16 && t != DataType::kBFloat16)
    throw Error(std::string(op_name(kind)) + " takes float types only, got " + std::string(dtype_name(t)));
  check_residual(kind, in, out[0]);
}

}  // namespace kiln::fused
