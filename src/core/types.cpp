#include "kiln/types.h"

namespace kiln {

size_t dtype_size(DataType t) noexcept {
  switch (t) {
    case DataType::kFloat32: return 4;
    case DataType::kUInt8: return 1;
    case DataType::kInt8: return 1;
    case DataType::kUInt16: return 2;
    case DataType::kInt16: return 2;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
    case DataType::kBool: return 1;
    case DataType::kFloat16: return 2;
    case DataType::kFloat64: return 8;
    case DataType::kUInt32: return 4;
    case DataType::kUInt64: return 8;
    case DataType::kBFloat16: return 2;
  }
  return 0;
}

std::string_view dtype_name(DataType t) noexcept {
  switch (t) {
    case DataType::kFloat32: return "float32";
    case DataType::kUInt8: return "uint8";
    case DataType::kInt8: return "int8";
    case DataType::kUInt16: return "uint16";
    case DataType::kInt16: return "int16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kBool: return "bool";
    case DataType::kFloat16: return "float16";
    case DataType::kFloat64: return "float64";
    case DataType::kUInt32: return "uint32";
    case DataType::kUInt64: return "uint64";
    case DataType::kBFloat16: return "bfloat16";
  }
  return "invalid";
}

bool dtype_valid(uint32_t code) noexcept { return code <= 255 && dtype_size(static_cast<DataType>(code)) != 0; }

int64_t TensorInfo::numel() const noexcept {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace kiln
