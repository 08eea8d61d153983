#include "serve/request.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/half.h"
#include "kserve_v2.pb.h"
#include "serve/shared_memory.h"
#include "serve/signature.h"

namespace kiln::serve {

using nlohmann::json;

namespace {

// Elements a request may carry in one tensor: far above any engine's input, far below overflow.
constexpr int64_t kMaxElements = int64_t{1} << 34;

[[noreturn]] void bad(const std::string& what) { throw RequestError(RequestError::kBadRequest, what); }

std::string tensor_what(const InferRequest& r, const std::string& name) {
  return r.describe() + ": input '" + name + "'";
}

int64_t checked_numel(const std::vector<int64_t>& shape, const std::string& what) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) bad(what + " has a negative dimension in shape " + shape_string(shape));
    if (d != 0 && n > kMaxElements / d) bad(what + " has too many elements: shape " + shape_string(shape));
    n *= d;
  }
  return n;
}

DataType parse_datatype(const std::string& name, const std::string& what) {
  if (name == "BYTES") bad(what + " is a BYTES tensor; Kiln's engines take numeric tensors only");
  const auto dt = from_kserve_datatype(name);
  if (!dt) bad(what + " has datatype '" + name + "', which is not a KServe v2 datatype (FP32, INT64, ...)");
  return *dt;
}

template <typename T>
void put(std::byte* dst, T v) {
  std::memcpy(dst, &v, sizeof v);
}

// Writes one JSON element of `dt` at dst; false if the element's JSON type does not fit the datatype.
bool put_json(const json& v, DataType dt, std::byte* dst) {
  auto integer = [&](int64_t lo, uint64_t hi, auto tag) -> bool {
    using T = decltype(tag);
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > hi) return false;
      put<T>(dst, static_cast<T>(u));
      return true;
    }
    if (v.is_number_integer()) {
      const int64_t s = v.get<int64_t>();
      if (s < lo || (s > 0 && static_cast<uint64_t>(s) > hi)) return false;
      put<T>(dst, static_cast<T>(s));
      return true;
    }
    return false;
  };
  switch (dt) {
    case DataType::kFloat32:
    case DataType::kFloat64:
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      if (!v.is_number()) return false;
      const double d = v.get<double>();
      if (dt == DataType::kFloat64)
        put<double>(dst, d);
      else if (dt == DataType::kFloat32)
        put<float>(dst, static_cast<float>(d));
      else if (dt == DataType::kFloat16)
        put<uint16_t>(dst, Half(static_cast<float>(d)).bits);
      else
        put<uint16_t>(dst, BFloat16(static_cast<float>(d)).bits);
      return true;
    }
    case DataType::kBool:
      if (!v.is_boolean()) return false;
      put<uint8_t>(dst, v.get<bool>() ? 1 : 0);
      return true;
    case DataType::kInt8: return integer(INT8_MIN, INT8_MAX, int8_t{});
    case DataType::kInt16: return integer(INT16_MIN, INT16_MAX, int16_t{});
    case DataType::kInt32: return integer(INT32_MIN, INT32_MAX, int32_t{});
    case DataType::kInt64: return integer(INT64_MIN, INT64_MAX, int64_t{});
    case DataType::kUInt8: return integer(0, UINT8_MAX, uint8_t{});
    case DataType::kUInt16: return integer(0, UINT16_MAX, uint16_t{});
    case DataType::kUInt32: return integer(0, UINT32_MAX, uint32_t{});
    case DataType::kUInt64: return integer(0, UINT64_MAX, uint64_t{});
  }
  return false;
}

// Flattens "data" (flat, or nested like the shape) into t.data.
void json_data(const json& data, Tensor& t, const std::string& what) {
  const size_t esize = dtype_size(t.dtype);
  const int64_t n = t.numel();
  // Grown with the elements sent, not sized from the shape: a few bytes of shape may claim 2^34
  // elements, which would be allocated (and zeroed) before the count is found wrong.
  t.data.clear();
  int64_t i = 0;
  auto walk = [&](auto&& self, const json& v, int depth) -> void {
    if (depth > 64) bad(what + ": 'data' is nested too deeply");
    if (v.is_array()) {
      for (const json& e : v) self(self, e, depth + 1);
      return;
    }
    if (i >= n)
      bad(what + ": 'data' has more than the " + std::to_string(n) + " elements of shape " + shape_string(t.shape));
    t.data.resize(static_cast<size_t>(i + 1) * esize);
    if (!put_json(v, t.dtype, t.data.data() + static_cast<size_t>(i) * esize))
      bad(what + ": element " + std::to_string(i) + " of 'data' (" +
          v.dump(-1, ' ', false, json::error_handler_t::replace) + ") is not a " + t.datatype + " value");
    ++i;
  };
  if (!data.is_array()) bad(what + ": 'data' must be an array");
  walk(walk, data, 0);
  if (i != n)
    bad(what + ": 'data' has " + std::to_string(i) + " elements, shape " + shape_string(t.shape) + " needs " +
        std::to_string(n));
}

json element_json(const std::byte* p, DataType dt) {
  auto get = [&](auto tag) {
    decltype(tag) v;
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (dt) {
    case DataType::kFloat32: return get(float{});
    case DataType::kFloat64: return get(double{});
    case DataType::kFloat16: return static_cast<float>(Half::to_float(get(uint16_t{})));
    case DataType::kBFloat16: {
      BFloat16 b;
      b.bits = get(uint16_t{});
      return static_cast<float>(b);
    }
    case DataType::kBool: return get(uint8_t{}) != 0;
    case DataType::kInt8: return get(int8_t{});
    case DataType::kInt16: return get(int16_t{});
    case DataType::kInt32: return get(int32_t{});
    case DataType::kInt64: return get(int64_t{});
    case DataType::kUInt8: return get(uint8_t{});
    case DataType::kUInt16: return get(uint16_t{});
    case DataType::kUInt32: return get(uint32_t{});
    case DataType::kUInt64: return get(uint64_t{});
  }
  return nullptr;
}

// A parameter as a bool (KServe allows bool, and tritonclient sends bools).
bool bool_param(const json& params, const char* key) {
  if (!params.is_object() || !params.contains(key)) return false;
  const json& v = params[key];
  if (v.is_boolean()) return v.get<bool>();
  bad(std::string("parameter '") + key + "' must be true or false");
}

std::vector<int64_t> json_shape(const json& j, const std::string& what) {
  if (!j.is_array()) bad(what + ": 'shape' must be an array of integers");
  std::vector<int64_t> shape;
  for (const json& d : j) {
    if (!d.is_number_integer())
      bad(what + ": 'shape' must be an array of integers, got " +
          j.dump(-1, ' ', false, json::error_handler_t::replace));
    shape.push_back(d.get<int64_t>());
  }
  if (shape.size() > 16) bad(what + ": 'shape' has more than 16 dimensions");
  return shape;
}

const json& field(const json& obj, const char* key, const std::string& what) {
  if (!obj.contains(key)) bad(what + " has no '" + key + "'");
  return obj[key];
}

// Where a tensor lives in shared memory: a region name, an offset and a byte size, from the
// parameters of an input or output (REST JSON or gRPC InferParameter, read by `get`).
struct ShmRef {
  std::string region;
  uint64_t offset = 0;
  std::optional<uint64_t> byte_size;
};

std::optional<ShmRef> shm_ref_json(const json& params, const std::string& what) {
  if (!params.is_object() || !params.contains("shared_memory_region")) return std::nullopt;
  ShmRef r;
  if (!params["shared_memory_region"].is_string()) bad(what + ": 'shared_memory_region' must be a string");
  r.region = params["shared_memory_region"].get<std::string>();
  for (const char* key : {"shared_memory_offset", "shared_memory_byte_size"}) {
    if (!params.contains(key)) continue;
    const json& v = params[key];
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      bad(what + ": '" + key + "' must be a non-negative integer");
    if (std::string_view(key) == "shared_memory_offset")
      r.offset = v.get<uint64_t>();
    else
      r.byte_size = v.get<uint64_t>();
  }
  return r;
}

// A non-negative integer parameter, sent as int64 (tritonclient) or uint64 (newer clients).
uint64_t grpc_size_param(const inference::InferParameter& p, const std::string& what, const char* key) {
  if (p.parameter_choice_case() == inference::InferParameter::kUint64Param) return p.uint64_param();
  if (p.parameter_choice_case() != inference::InferParameter::kInt64Param || p.int64_param() < 0)
    bad(what + ": '" + key + "' must be a non-negative integer");
  return static_cast<uint64_t>(p.int64_param());
}

template <typename Params>
std::optional<ShmRef> shm_ref_grpc(const Params& params, const std::string& what) {
  auto it = params.find("shared_memory_region");
  if (it == params.end()) return std::nullopt;
  ShmRef r;
  r.region = it->second.string_param();
  if (auto o = params.find("shared_memory_offset"); o != params.end())
    r.offset = grpc_size_param(o->second, what, "shared_memory_offset");
  if (auto b = params.find("shared_memory_byte_size"); b != params.end())
    r.byte_size = grpc_size_param(b->second, what, "shared_memory_byte_size");
  return r;
}

// Points an input at its bytes in shared memory.
void shm_input(const ShmRef& ref, Tensor& t, size_t bytes, const SharedMemoryRegistry* shm, const std::string& what) {
  if (!shm) bad(what + ": shared memory is not available on this endpoint");
  if (ref.byte_size && *ref.byte_size != bytes)
    bad(what + ": 'shared_memory_byte_size' is " + std::to_string(*ref.byte_size) + " bytes, shape " +
        shape_string(t.shape) + " of " + t.datatype + " is " + std::to_string(bytes));
  t.view = shm->slice(ref.region, ref.offset, bytes, what, t.region);
  t.external = true;
}

void shm_output(const ShmRef& ref, RequestedOutput& o, const SharedMemoryRegistry* shm, const std::string& what) {
  if (!shm) bad(what + ": shared memory is not available on this endpoint");
  if (!ref.byte_size) bad(what + ": an output in shared memory needs 'shared_memory_byte_size'");
  shm->slice(ref.region, ref.offset, *ref.byte_size, what, o.region);
  o.region_name = ref.region;
  o.offset = ref.offset;
  o.byte_size = *ref.byte_size;
}

// Writes an output requested into shared memory; false if it goes into the response.
bool write_shared(const RequestedOutput* ro, const Tensor& t, const std::string& what) {
  if (!ro || !ro->region) return false;
  if (t.data.size() > ro->byte_size)
    bad(what + ": output '" + t.name + "' has " + std::to_string(t.data.size()) + " bytes, shared memory region '" +
        ro->region_name + "' gives it " + std::to_string(ro->byte_size));
  if (!t.data.empty()) std::memcpy(ro->region->data() + ro->offset, t.data.data(), t.data.size());
  return true;
}

const RequestedOutput* requested(const InferRequest& r, const std::string& name) {
  for (const RequestedOutput& o : r.outputs)
    if (o.name == name) return &o;
  return nullptr;
}

}  // namespace

int RequestError::http_status() const {
  switch (kind) {
    case kBadRequest: return 400;
    case kNotFound: return 404;
    case kUnavailable: return 503;
    case kInternal: return 500;
  }
  return 500;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string InferRequest::describe() const {
  return (id.empty() ? std::string("request") : "request '" + id + "'") + " to model '" + model + "'";
}

InferRequest decode_rest(std::string_view model, std::string_view body, std::optional<size_t> header_length,
                         const SharedMemoryRegistry* shm) {
  InferRequest r;
  r.model = std::string(model);
  const std::string what = r.describe();
  if (header_length && *header_length > body.size())
    bad(what + ": Inference-Header-Content-Length is " + std::to_string(*header_length) + " but the body has " +
        std::to_string(body.size()) + " bytes");
  const std::string_view header = header_length ? body.substr(0, *header_length) : body;
  std::string_view binary = header_length ? body.substr(*header_length) : std::string_view{};
  json j;
  try {
    j = json::parse(header);
  } catch (const json::exception& e) {  // syntax, a number out of range, bad UTF-8
    bad(what + ": malformed JSON: " + e.what());
  }
  if (!j.is_object()) bad(what + ": the body must be a JSON object");
  if (j.contains("id")) {
    if (!j["id"].is_string()) bad(what + ": 'id' must be a string");
    r.id = j["id"].get<std::string>();
  }
  const std::string rwhat = r.describe();
  if (j.contains("parameters")) {
    const json& p = j["parameters"];
    if (!p.is_object()) bad(rwhat + ": 'parameters' must be an object");
    r.binary_outputs = bool_param(p, "binary_data_output");
  }
  const json& inputs = field(j, "inputs", rwhat);
  if (!inputs.is_array() || inputs.empty()) bad(rwhat + ": 'inputs' must be a non-empty array");
  for (const json& in : inputs) {
    if (!in.is_object()) bad(rwhat + ": each of 'inputs' must be an object");
    const json& name = field(in, "name", rwhat + ": an input");
    if (!name.is_string()) bad(rwhat + ": an input's 'name' must be a string");
    Tensor t;
    t.name = name.get<std::string>();
    const std::string twhat = tensor_what(r, t.name);
    const json& dt = field(in, "datatype", twhat);
    if (!dt.is_string()) bad(twhat + ": 'datatype' must be a string");
    t.datatype = dt.get<std::string>();
    t.dtype = parse_datatype(t.datatype, twhat);
    t.shape = json_shape(field(in, "shape", twhat), twhat);
    const int64_t n = checked_numel(t.shape, twhat);
    const size_t bytes = static_cast<size_t>(n) * dtype_size(t.dtype);
    std::optional<uint64_t> binary_size;
    std::optional<ShmRef> shared;
    if (in.contains("parameters")) {
      const json& p = in["parameters"];
      if (!p.is_object()) bad(twhat + ": 'parameters' must be an object");
      if (p.contains("binary_data_size")) {
        if (!p["binary_data_size"].is_number_unsigned() && !p["binary_data_size"].is_number_integer())
          bad(twhat + ": 'binary_data_size' must be a non-negative integer");
        const int64_t s = p["binary_data_size"].get<int64_t>();
        if (s < 0) bad(twhat + ": 'binary_data_size' must be a non-negative integer");
        binary_size = static_cast<uint64_t>(s);
      }
      shared = shm_ref_json(p, twhat);
    }
    if (shared) {
      if (binary_size || in.contains("data")) bad(twhat + " has data as well as a shared memory region");
      shm_input(*shared, t, bytes, shm, twhat);
    } else if (binary_size) {
      if (in.contains("data")) bad(twhat + " has both 'data' and 'binary_data_size'");
      if (*binary_size != bytes)
        bad(twhat + ": 'binary_data_size' is " + std::to_string(*binary_size) + " bytes, shape " +
            shape_string(t.shape) + " of " + t.datatype + " is " + std::to_string(bytes));
      if (binary.size() < bytes)
        bad(twhat + ": the binary data has " + std::to_string(binary.size()) + " bytes left, the input needs " +
            std::to_string(bytes) + (header_length ? "" : " (no Inference-Header-Content-Length header was sent)"));
      t.view = std::as_bytes(std::span<const char>(binary.data(), bytes));
      t.external = true;
      binary.remove_prefix(bytes);
    } else {
      json_data(field(in, "data", twhat), t, twhat);
    }
    for (const Tensor& o : r.inputs)
      if (o.name == t.name) bad(twhat + " is given twice");
    r.inputs.push_back(std::move(t));
  }
  if (!binary.empty())
    bad(rwhat + ": " + std::to_string(binary.size()) +
        " bytes of binary data are not claimed by any input's "
        "'binary_data_size'");
  if (j.contains("outputs")) {
    const json& outs = j["outputs"];
    if (!outs.is_array()) bad(rwhat + ": 'outputs' must be an array");
    for (const json& o : outs) {
      if (!o.is_object() || !o.contains("name") || !o["name"].is_string())
        bad(rwhat + ": each of 'outputs' must be an object with a string 'name'");
      RequestedOutput ro;
      ro.name = o["name"].get<std::string>();
      ro.binary = r.binary_outputs;
      if (o.contains("parameters")) {
        const json& p = o["parameters"];
        if (!p.is_object()) bad(rwhat + ": output '" + ro.name + "': 'parameters' must be an object");
        if (p.contains("binary_data")) ro.binary = bool_param(p, "binary_data");
        if (p.contains("classification") && !(p["classification"].is_number_integer() && p["classification"] == 0))
          bad(rwhat + ": output '" + ro.name + "': the classification extension is not supported");
        if (auto ref = shm_ref_json(p, rwhat + ": output '" + ro.name + "'"))
          shm_output(*ref, ro, shm, rwhat + ": output '" + ro.name + "'");
      }
      r.outputs.push_back(std::move(ro));
    }
  }
  return r;
}

RestResponse encode_rest(const InferRequest& request, const std::vector<Tensor>& outputs) {
  json j;
  j["model_name"] = request.model;
  j["model_version"] = "1";
  if (!request.id.empty()) j["id"] = request.id;
  json outs = json::array();
  std::string binary;
  bool any_binary = false;
  for (const Tensor& t : outputs) {
    const RequestedOutput* ro = requested(request, t.name);
    const bool as_binary = ro ? ro->binary : request.binary_outputs;
    json o;
    o["name"] = t.name;
    o["datatype"] = t.datatype;
    o["shape"] = t.shape;
    if (write_shared(ro, t, request.describe())) {
      // No data and no parameters, as Triton answers: clients read any "parameters" of an output as
      // its binary_data_size.
    } else if (as_binary) {
      any_binary = true;
      o["parameters"]["binary_data_size"] = t.data.size();
      binary.append(reinterpret_cast<const char*>(t.data.data()), t.data.size());
    } else {
      json data = json::array();
      const size_t esize = dtype_size(t.dtype);
      for (size_t i = 0; i + esize <= t.data.size(); i += esize)
        data.push_back(element_json(t.data.data() + i, t.dtype));
      o["data"] = std::move(data);
    }
    outs.push_back(std::move(o));
  }
  j["outputs"] = std::move(outs);
  RestResponse r;
  r.body = j.dump();
  if (any_binary) {
    r.header_length = r.body.size();
    r.body += binary;
  }
  return r;
}

namespace {

template <typename Field>
void typed_contents(const Field& values, Tensor& t, const std::string& what, const char* field_name) {
  const int64_t n = t.numel();
  if (static_cast<int64_t>(values.size()) != n)
    bad(what + ": contents." + field_name + " has " + std::to_string(values.size()) + " values, shape " +
        shape_string(t.shape) + " needs " + std::to_string(n));
  const size_t esize = dtype_size(t.dtype);
  t.data.resize(static_cast<size_t>(n) * esize);
  for (int64_t i = 0; i < n; ++i) {
    json v = values[static_cast<int>(i)];
    if (!put_json(v, t.dtype, t.data.data() + static_cast<size_t>(i) * esize))
      bad(what + ": value " + std::to_string(i) + " of contents." + field_name + " is out of range for " + t.datatype);
  }
}

}  // namespace

InferRequest decode_grpc(const inference::ModelInferRequest& m, const SharedMemoryRegistry* shm) {
  InferRequest r;
  r.model = m.model_name();
  r.id = m.id();
  const std::string rwhat = r.describe();
  if (m.inputs_size() == 0) bad(rwhat + " has no inputs");
  // Raw contents go with the inputs not in shared memory, in order.
  const bool raw = m.raw_input_contents_size() > 0;
  int raw_inputs = 0;
  for (const auto& in : m.inputs()) raw_inputs += in.parameters().count("shared_memory_region") ? 0 : 1;
  if (raw && m.raw_input_contents_size() != raw_inputs)
    bad(rwhat + " has " + std::to_string(m.raw_input_contents_size()) + " raw_input_contents for " +
        std::to_string(raw_inputs) + " inputs");
  int raw_index = 0;
  for (int i = 0; i < m.inputs_size(); ++i) {
    const auto& in = m.inputs(i);
    Tensor t;
    t.name = in.name();
    const std::string twhat = tensor_what(r, t.name);
    t.datatype = in.datatype();
    t.dtype = parse_datatype(t.datatype, twhat);
    if (in.shape_size() > 16) bad(twhat + ": the shape has more than 16 dimensions");
    t.shape.assign(in.shape().begin(), in.shape().end());
    const int64_t n = checked_numel(t.shape, twhat);
    const size_t bytes = static_cast<size_t>(n) * dtype_size(t.dtype);
    if (auto ref = shm_ref_grpc(in.parameters(), twhat)) {
      shm_input(*ref, t, bytes, shm, twhat);
    } else if (raw) {
      const std::string& b = m.raw_input_contents(raw_index++);
      if (b.size() != bytes)
        bad(twhat + ": raw_input_contents has " + std::to_string(b.size()) + " bytes, shape " + shape_string(t.shape) +
            " of " + t.datatype + " is " + std::to_string(bytes));
      t.view = std::as_bytes(std::span<const char>(b.data(), bytes));
      t.external = true;
    } else {
      const auto& c = in.contents();
      switch (t.dtype) {
        case DataType::kBool: typed_contents(c.bool_contents(), t, twhat, "bool_contents"); break;
        case DataType::kInt8:
        case DataType::kInt16:
        case DataType::kInt32: typed_contents(c.int_contents(), t, twhat, "int_contents"); break;
        case DataType::kInt64: typed_contents(c.int64_contents(), t, twhat, "int64_contents"); break;
        case DataType::kUInt8:
        case DataType::kUInt16:
        case DataType::kUInt32: typed_contents(c.uint_contents(), t, twhat, "uint_contents"); break;
        case DataType::kUInt64: typed_contents(c.uint64_contents(), t, twhat, "uint64_contents"); break;
        case DataType::kFloat32: typed_contents(c.fp32_contents(), t, twhat, "fp32_contents"); break;
        case DataType::kFloat64: typed_contents(c.fp64_contents(), t, twhat, "fp64_contents"); break;
        case DataType::kFloat16:
        case DataType::kBFloat16: bad(twhat + ": " + t.datatype + " data must be sent in raw_input_contents");
      }
    }
    for (const Tensor& o : r.inputs)
      if (o.name == t.name) bad(twhat + " is given twice");
    r.inputs.push_back(std::move(t));
  }
  for (const auto& o : m.outputs()) {
    if (o.parameters().count("classification") && o.parameters().at("classification").int64_param() != 0)
      bad(rwhat + ": output '" + o.name() + "': the classification extension is not supported");
    RequestedOutput ro;
    ro.name = o.name();
    ro.binary = true;
    if (auto ref = shm_ref_grpc(o.parameters(), rwhat + ": output '" + o.name() + "'"))
      shm_output(*ref, ro, shm, rwhat + ": output '" + o.name() + "'");
    r.outputs.push_back(std::move(ro));
  }
  return r;
}

void encode_grpc(const InferRequest& request, std::vector<Tensor>&& outputs, inference::ModelInferResponse& response) {
  response.set_model_name(request.model);
  response.set_model_version("1");
  response.set_id(request.id);
  for (Tensor& t : outputs) {
    auto* o = response.add_outputs();
    o->set_name(t.name);
    o->set_datatype(t.datatype);
    for (int64_t d : t.shape) o->add_shape(d);
    const RequestedOutput* ro = requested(request, t.name);
    // An output in shared memory keeps its (empty) place in raw_output_contents, which clients index
    // like outputs.
    if (write_shared(ro, t, request.describe())) {
      (*o->mutable_parameters())["shared_memory_region"].set_string_param(ro->region_name);
      (*o->mutable_parameters())["shared_memory_byte_size"].set_int64_param(static_cast<int64_t>(t.data.size()));
      response.add_raw_output_contents();
      continue;
    }
    response.add_raw_output_contents()->assign(reinterpret_cast<const char*>(t.data.data()), t.data.size());
  }
}

}  // namespace kiln::serve
