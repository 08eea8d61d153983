// Reading and writing single tensors: ONNX TensorProto (in models and .pb test data) and numpy
// .npy files. All input is treated as untrusted: every malformed file becomes a kiln::Error that
// names the file, what is wrong and what to do, and nothing is allocated before its size has been
// checked against the bytes actually present.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kiln/types.h"

namespace kiln {

// A tensor held in host memory, as read from or written to a file.
struct HostTensor {
  std::string name;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // numel * dtype_size bytes, little-endian, row-major

  // View over data; valid while this HostTensor (its shape and data) is unchanged.
  TensorView view();
  int64_t numel() const;
};

// ONNX TensorProto -> HostTensor. Handles raw_data, every typed field (float_data, int32_data,
// which also carries int8/uint8/int16/uint16/bool/float16/bfloat16 values, int64_data,
// double_data, uint64_data) and external data (data_location EXTERNAL, with location/offset/length
// relative to base_dir; absolute paths and paths escaping base_dir are rejected).
// `what` names the tensor's origin for messages (e.g. "initializer 'conv1.weight' in model.onnx").
HostTensor tensor_from_proto(const onnx::TensorProto& proto, const std::filesystem::path& base_dir,
                             const std::string& what);

// HostTensor -> TensorProto in raw_data form (other data fields are cleared).
void tensor_to_proto(const HostTensor& t, onnx::TensorProto* proto);

// Reads a .npy file (format 1.0/2.0/3.0, little-endian numeric or bool dtypes, C order) or a .pb
// file holding one ONNX TensorProto, chosen by extension. For .npy the name is the file's stem.
HostTensor read_tensor_file(const std::filesystem::path& path);

// Reads a .pb file holding one ONNX SequenceProto of tensors (ONNX's test data for sequence
// inputs and outputs), its elements in order.
std::vector<HostTensor> read_sequence_file(const std::filesystem::path& path);

// Reads a .pb file holding one ONNX OptionalProto of a tensor or a sequence of tensors: whether it
// holds a value, whether that is a sequence, and its tensors (one for a tensor).
struct OptionalValue {
  bool present = false, sequence = false;
  std::vector<HostTensor> values;
};
OptionalValue read_optional_file(const std::filesystem::path& path);

// Writes t as .npy or .pb, chosen by extension. bfloat16 has no numpy code and goes to .pb only.
void write_tensor_file(const std::filesystem::path& path, const HostTensor& t);

}  // namespace kiln
