// Fuzzes the decoding of KServe v2 inference requests, the bytes a server takes from anyone: the
// REST body (JSON, optionally followed by binary tensor data) and the gRPC ModelInferRequest.
// First byte: 0-127 REST without Inference-Header-Content-Length, 128-191 REST with one (the next
// two bytes), 192-255 gRPC. Decoding may throw RequestError; anything else (a crash, a sanitizer
// report, another exception) is a finding. A decoded request is encoded back as a response.
#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "kserve_v2.pb.h"
#include "serve/request.h"
#include "serve/shared_memory.h"

// protobuf logs every string field that is not UTF-8: thousands of lines a second here.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int, const std::string&) {});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const uint8_t mode = data[0];
  const std::string_view rest(reinterpret_cast<const char*>(data) + 3, size - 3);
  static const kiln::serve::SharedMemoryRegistry shm;  // empty: every region named is unknown
  inference::ModelInferRequest m;  // outlives the request: its raw inputs are views into it, as in the server
  try {
    kiln::serve::InferRequest r;
    if (mode < 192) {
      std::optional<size_t> header_length;
      if (mode >= 128) header_length = static_cast<size_t>(data[1]) | static_cast<size_t>(data[2]) << 8;
      r = kiln::serve::decode_rest("m", rest, header_length, &shm);
    } else {
      if (!m.ParseFromArray(rest.data(), static_cast<int>(rest.size()))) return 0;
      r = kiln::serve::decode_grpc(m, &shm);
    }
    // Every decoded input must hold exactly the bytes its shape and datatype say.
    for (const auto& t : r.inputs)
      if (t.bytes().size() != static_cast<size_t>(t.numel()) * kiln::dtype_size(t.dtype)) __builtin_trap();
    std::vector<kiln::serve::Tensor> outputs;
    for (const auto& t : r.inputs) {
      kiln::serve::Tensor o;
      o.name = t.name;
      o.datatype = t.datatype;
      o.dtype = t.dtype;
      o.shape = t.shape;
      o.data.assign(t.bytes().begin(), t.bytes().end());
      outputs.push_back(std::move(o));
    }
    kiln::serve::encode_rest(r.header(), outputs);
    inference::ModelInferResponse resp;
    kiln::serve::encode_grpc(r.header(), std::move(outputs), resp);
  } catch (const kiln::serve::RequestError&) {
  }
  return 0;
}
