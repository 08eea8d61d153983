// Inference requests and responses of the KServe v2 protocol, decoded from and encoded to its two
// wire forms: REST (a JSON header, optionally followed by the tensors' raw bytes: the binary-data
// extension) and gRPC (inference.ModelInferRequest). Decoding checks everything the bytes say
// (JSON syntax, value types, element counts, binary sizes) and throws RequestError naming the
// request and the tensor; what the model accepts is checked later, against its signature.
#pragma once

#include <kiln/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace inference {
class ModelInferRequest;
class ModelInferResponse;
}  // namespace inference

namespace kiln::serve {

class SharedMemoryRegistry;
struct SharedMemoryRegion;

// A protocol-level failure: HTTP status and gRPC code follow from the kind.
class RequestError : public std::runtime_error {
 public:
  enum Kind { kBadRequest, kNotFound, kUnavailable, kInternal };
  RequestError(Kind kind, const std::string& what) : std::runtime_error(what), kind(kind) {}
  int http_status() const;
  Kind kind;
};

struct Tensor {
  std::string name;
  std::string datatype;  // the protocol's name: "FP32", ...
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  std::vector<std::byte> data;  // little-endian, row-major, owned; or, when `external`, not copied:
  bool external = false;
  std::span<const std::byte> view;  // bytes in the request's body or message, or in a shared memory region
  std::shared_ptr<const SharedMemoryRegion> region;  // that region, which stays mapped while this lives
  std::span<const std::byte> bytes() const { return external ? view : std::span<const std::byte>(data); }
  int64_t numel() const;
};

struct RequestedOutput {
  std::string name;
  bool binary = false;  // REST: return as raw bytes after the JSON header
  // Written into a shared memory region instead of the response (system shared memory extension).
  std::shared_ptr<const SharedMemoryRegion> region;
  std::string region_name;
  uint64_t offset = 0, byte_size = 0;
};

struct InferRequest {
  std::string model;
  std::string id;
  std::vector<Tensor> inputs;
  std::vector<RequestedOutput> outputs;  // empty: every output
  bool binary_outputs = false;           // REST: the request's binary_data_output parameter
  std::string describe() const;          // "request 'ID' to model 'M'" for messages
  InferRequest header() const { return {model, id, {}, outputs, binary_outputs}; }  // all but the inputs
};

// REST: `body` is the POST body; `header_length` the Inference-Header-Content-Length header when
// given (the JSON header's size; the rest is binary tensor data). Binary inputs are views into
// `body`, which must outlive the request.
// `shm` resolves shared memory regions named by inputs and outputs (null: none are accepted).
InferRequest decode_rest(std::string_view model, std::string_view body, std::optional<size_t> header_length,
                         const SharedMemoryRegistry* shm = nullptr);

struct RestResponse {
  std::string body;
  std::optional<size_t> header_length;  // set when binary data follows the JSON header
};
// Outputs requested into shared memory are written there (RequestError if the region is too small).
RestResponse encode_rest(const InferRequest& request, const std::vector<Tensor>& outputs);

// gRPC: tensors from raw_input_contents (in input order; views into `message`, which must outlive
// the request) or from the typed contents.
InferRequest decode_grpc(const inference::ModelInferRequest& message, const SharedMemoryRegistry* shm = nullptr);
void encode_grpc(const InferRequest& request, std::vector<Tensor>&& outputs, inference::ModelInferResponse& response);

}  // namespace kiln::serve
