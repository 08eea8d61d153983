// Element-type sets as bit masks over the ONNX type codes, and the input checks built on them,
// shared by the shape inference of the elementwise family (core/infer/elementwise/) and of
// QuantizeLinear / DequantizeLinear (core/infer/quant/quantize.cpp). Type sets follow the ONNX
// schemas (opset 21) restricted to Kiln's dtypes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/op_kind.h"
#include "core/tensor.h"

namespace kiln::dtype_sets {

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

inline bool in_set(DataType t, uint32_t set) {
  const unsigned code = static_cast<unsigned>(t);
  return code < 32 && dtype_size(t) != 0 && (set >> code & 1u);
}

inline std::string set_names(uint32_t set) {
  std::string s;
  for (unsigned c = 0; c < 32; ++c) {
    if (!(set >> c & 1u)) continue;
    if (!s.empty()) s += ", ";
    s += dtype_name(static_cast<DataType>(c));
  }
  return s;
}

inline std::string input_name(OpKind kind, size_t i) {
  return std::string(op_name(kind)) + " input " + std::to_string(i);
}

inline void check_dtype(OpKind kind, const TensorView& v, size_t i, uint32_t set) {
  if (!in_set(v.dtype, set))
    throw Error(input_name(kind, i) + " has element type " + std::string(dtype_name(v.dtype)) +
                ", expected one of: " + set_names(set));
}

inline void check_same_dtype(OpKind kind, std::span<const TensorView> in, size_t i, size_t j) {
  if (in[i].dtype != in[j].dtype)
    throw Error(std::string(op_name(kind)) + ": input " + std::to_string(i) + " is " +
                std::string(dtype_name(in[i].dtype)) + " but input " + std::to_string(j) + " is " +
                std::string(dtype_name(in[j].dtype)) + "; they must match");
}

inline std::vector<int64_t> shape_vec(const TensorView& v) { return {v.shape.begin(), v.shape.end()}; }

// Rejects negative dimensions up front (engine files are untrusted).
inline void check_shapes(OpKind kind, std::span<const TensorView> in) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i].exists) continue;
    for (int64_t d : in[i].shape)
      if (d < 0) throw Error(input_name(kind, i) + " has a negative dimension " + shape_string(shape_vec(in[i])));
  }
}

}  // namespace kiln::dtype_sets
