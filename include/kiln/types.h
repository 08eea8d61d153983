// Kiln public types: data types, tensor descriptions and the error type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

// Element types. The numeric values are ONNX's TensorProto.DataType codes, so that files and
// messages agree with ONNX tooling.
enum class DataType : uint8_t {
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kBFloat16 = 16,
};

// Size of one element in bytes; 0 for a value that is not a DataType.
size_t dtype_size(DataType t) noexcept;
// Lower-case name as ONNX tools print it: "float32", "int64", ...; "invalid" for an unknown value.
std::string_view dtype_name(DataType t) noexcept;
// True if t is one of the enumerators above (used when reading untrusted files).
bool dtype_valid(uint32_t code) noexcept;

// Name, element type and fixed shape of an engine input or output.
struct TensorInfo {
  std::string name;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;

  int64_t numel() const noexcept;
  size_t bytes() const noexcept { return static_cast<size_t>(numel()) * dtype_size(dtype); }
};

// Every failure Kiln reports (bad files, wrong inputs, unsupported models) is a kiln::Error
// whose message names the file, node or tensor concerned and what to do about it.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "[1,3,224,224]"
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace kiln
