#include "core/tensor.h"

#include <string>

namespace kiln {

std::vector<int64_t> TensorView::to_int64() const {
  if (numel() == 0) return {};
  if (!data) throw Error("internal: to_int64 on a tensor without data");
  std::vector<int64_t> out(static_cast<size_t>(numel()));
  if (dtype == DataType::kInt64) {
    const auto* p = as<const int64_t>();
    out.assign(p, p + out.size());
  } else if (dtype == DataType::kInt32) {
    const auto* p = as<const int32_t>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];
  } else {
    throw Error("expected an int32 or int64 tensor, got " + std::string(dtype_name(dtype)));
  }
  return out;
}

std::vector<double> TensorView::to_double() const {
  if (numel() == 0) return {};
  if (!data) throw Error("internal: to_double on a tensor without data");
  std::vector<double> out(static_cast<size_t>(numel()));
  if (dtype == DataType::kBool) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = as<const bool>()[i] ? 1.0 : 0.0;
    return out;
  }
  dispatch_numeric(dtype, "to_double", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = as<const T>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(static_cast<ComputeType<T>>(p[i]));
  });
  return out;
}

std::vector<int64_t> strides_of(std::span<const int64_t> shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

int64_t normalize_axis(int64_t axis, int64_t rank, const char* what) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    throw Error(std::string(what) + " " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return a;
}

void throw_unsupported_dtype(DataType t, const char* op) {
  throw Error(std::string(op) + " does not support element type " + std::string(dtype_name(t)));
}

template <>
DataType dtype_of<float>() {
  return DataType::kFloat32;
}
template <>
DataType dtype_of<double>() {
  return DataType::kFloat64;
}
template <>
DataType dtype_of<Half>() {
  return DataType::kFloat16;
}
template <>
DataType dtype_of<BFloat16>() {
  return DataType::kBFloat16;
}
template <>
DataType dtype_of<int8_t>() {
  return DataType::kInt8;
}
template <>
DataType dtype_of<uint8_t>() {
  return DataType::kUInt8;
}
template <>
DataType dtype_of<int16_t>() {
  return DataType::kInt16;
}
template <>
DataType dtype_of<uint16_t>() {
  return DataType::kUInt16;
}
template <>
DataType dtype_of<int32_t>() {
  return DataType::kInt32;
}
template <>
DataType dtype_of<uint32_t>() {
  return DataType::kUInt32;
}
template <>
DataType dtype_of<int64_t>() {
  return DataType::kInt64;
}
template <>
DataType dtype_of<uint64_t>() {
  return DataType::kUInt64;
}
template <>
DataType dtype_of<bool>() {
  return DataType::kBool;
}

}  // namespace kiln
