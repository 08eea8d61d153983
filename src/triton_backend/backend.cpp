// libtriton_kiln.so: Triton Inference Server's backend for Kiln engines.
//
//   <repository>/<model>/config.pbtxt        backend: "kiln"  (the rest may be auto-completed)
//   <repository>/<model>/<version>/model.kiln (or the config's default_model_filename)
//
// Model = one kiln::Engine, loaded once and shared by the model's instances. Instance = one
// kiln::Context (plus, for a GPU engine, a CUDA stream on the instance's device). Triton does the
// batching: max_batch_size comes from the engine's batch range (serve::signature), the requests of
// one execution are validated one by one (a bad one gets its own error response, the others run),
// concatenated along the batch axis, run as one batch and split back into one response each.
//
// Configuration parameters: `threads` (CPU engines: worker threads of each instance; 0, the
// default: all cores).
//
// Every entry point catches everything: kiln::Error and other exceptions become TRITONSERVER_Error
// returns and never cross the C boundary.
#include <kiln/engine.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "serve/signature.h"
#include "triton_backend/triton_api.h"

#if defined(KILN_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace {

using kiln::serve::ServedTensor;
using kiln::serve::Signature;
using nlohmann::json;

constexpr const char* kDefaultFilename = "model.kiln";

// ---------------------------------------------------------------------------------------------
// Errors and logging

// A failure with the Triton error code to report it with.
class BackendError : public std::runtime_error {
 public:
  BackendError(TRITONSERVER_Error_Code code, const std::string& msg) : std::runtime_error(msg), code_(code) {}
  TRITONSERVER_Error_Code code() const { return code_; }

 private:
  TRITONSERVER_Error_Code code_;
};

[[noreturn]] void fail(const std::string& msg, TRITONSERVER_Error_Code code = TRITONSERVER_ERROR_INVALID_ARG) {
  throw BackendError(code, msg);
}

// A Triton call's error as an exception (the error object is freed), with what was being done.
void check(TRITONSERVER_Error* err, const char* what) {
  if (!err) return;
  const TRITONSERVER_Error_Code code = TRITONSERVER_ErrorCode(err);
  std::string msg = std::string(what) + ": " + TRITONSERVER_ErrorMessage(err);
  TRITONSERVER_ErrorDelete(err);
  throw BackendError(code, msg);
}

void log(TRITONSERVER_LogLevel level, int line, const std::string& msg) {
  if (!TRITONSERVER_LogIsEnabled(level)) return;
  if (TRITONSERVER_Error* err = TRITONSERVER_LogMessage(level, __FILE__, line, msg.c_str()))
    TRITONSERVER_ErrorDelete(err);
}
#define KILN_LOG_INFO(msg) log(TRITONSERVER_LOG_INFO, __LINE__, (msg))
#define KILN_LOG_WARN(msg) log(TRITONSERVER_LOG_WARN, __LINE__, (msg))
#define KILN_LOG_ERROR(msg) log(TRITONSERVER_LOG_ERROR, __LINE__, (msg))

// Logs a Triton error that cannot be returned to anyone (and frees it).
void log_error(TRITONSERVER_Error* err, const char* what) {
  if (!err) return;
  KILN_LOG_ERROR(std::string("kiln backend: ") + what + ": " + TRITONSERVER_ErrorMessage(err));
  TRITONSERVER_ErrorDelete(err);
}

// Runs f and turns whatever it throws into a TRITONSERVER_Error (kiln::Error with `kiln_code`).
template <class F>
TRITONSERVER_Error* guarded(TRITONSERVER_Error_Code kiln_code, F&& f) noexcept {
  try {
    f();
    return nullptr;
  } catch (const BackendError& e) {
    return TRITONSERVER_ErrorNew(e.code(), e.what());
  } catch (const kiln::Error& e) {
    return TRITONSERVER_ErrorNew(kiln_code, e.what());
  } catch (const std::exception& e) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, e.what());
  } catch (...) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "kiln backend: unknown exception");
  }
}

#if defined(KILN_HAVE_CUDA)
void cuda_check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) fail(what + ": " + cudaGetErrorString(e), TRITONSERVER_ERROR_INTERNAL);
}
#endif

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

// ---------------------------------------------------------------------------------------------
// Data types: Kiln's, Triton's enum, the KServe names ("FP32") and the config's ("TYPE_FP32").

struct TypeName {
  TRITONSERVER_DataType triton;
  const char* kserve;
};
constexpr TypeName kTypes[] = {
    {TRITONSERVER_TYPE_BOOL, "BOOL"},     {TRITONSERVER_TYPE_UINT8, "UINT8"},   {TRITONSERVER_TYPE_UINT16, "UINT16"},
    {TRITONSERVER_TYPE_UINT32, "UINT32"}, {TRITONSERVER_TYPE_UINT64, "UINT64"}, {TRITONSERVER_TYPE_INT8, "INT8"},
    {TRITONSERVER_TYPE_INT16, "INT16"},   {TRITONSERVER_TYPE_INT32, "INT32"},   {TRITONSERVER_TYPE_INT64, "INT64"},
    {TRITONSERVER_TYPE_FP16, "FP16"},     {TRITONSERVER_TYPE_FP32, "FP32"},     {TRITONSERVER_TYPE_FP64, "FP64"},
    {TRITONSERVER_TYPE_BYTES, "BYTES"},   {TRITONSERVER_TYPE_BF16, "BF16"},
};

std::string kserve_name(TRITONSERVER_DataType t) {
  for (const TypeName& n : kTypes)
    if (n.triton == t) return n.kserve;
  return "INVALID";
}

TRITONSERVER_DataType triton_type(kiln::DataType t) {
  const std::string_view name = kiln::serve::kserve_datatype(t);
  for (const TypeName& n : kTypes)
    if (name == n.kserve) return n.triton;
  return TRITONSERVER_TYPE_INVALID;
}

// The model configuration's data_type: "TYPE_FP32" (BYTES is TYPE_STRING there).
std::string config_type(kiln::DataType t) { return "TYPE_" + std::string(kiln::serve::kserve_datatype(t)); }

// ---------------------------------------------------------------------------------------------
// Shapes

std::string dims_str(const std::vector<int64_t>& d) { return kiln::shape_string(d); }

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// A config's dims: numbers, or int64 written as strings by protobuf's JSON.
std::vector<int64_t> json_dims(const json& j, const std::string& what) {
  std::vector<int64_t> dims;
  if (j.is_null()) return dims;
  if (!j.is_array()) fail(what + ": dims is not a list");
  for (const json& d : j) {
    if (d.is_number_integer())
      dims.push_back(d.get<int64_t>());
    else if (d.is_string())
      dims.push_back(std::stoll(d.get<std::string>()));
    else
      fail(what + ": dims holds " + d.dump());
  }
  return dims;
}

int64_t json_int(const json& j, const char* key, int64_t fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) return std::stoll(it->get<std::string>());
  return fallback;
}

std::string json_string(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// What Triton serves when the config's max_batch_size is 0 but the engine has a batch axis: no
// batching by Triton, every request carries the batch axis in its shape (any size up to the top).
Signature without_batching(const Signature& sig) {
  Signature u = sig;
  u.max_batch_size = 0;
  for (auto* list : {&u.inputs, &u.outputs})
    for (ServedTensor& t : *list) {
      t.dims.insert(t.dims.begin(), -1);
      t.max_dims.insert(t.max_dims.begin(), sig.max_batch_size);
      t.bounds.insert(t.bounds.begin(), {1, sig.max_batch_size});
    }
  return u;
}

// ---------------------------------------------------------------------------------------------
// The model configuration (JSON, config version 1)

json read_config(TRITONBACKEND_Model* model) {
  TRITONSERVER_Message* msg = nullptr;
  check(TRITONBACKEND_ModelConfig(model, 1, &msg), "reading the model configuration");
  const char* base = nullptr;
  size_t size = 0;
  TRITONSERVER_Error* err = TRITONSERVER_MessageSerializeToJson(msg, &base, &size);
  json config;
  if (!err) config = json::parse(std::string(base, size), nullptr, /*allow_exceptions=*/false);
  log_error(TRITONSERVER_MessageDelete(msg), "deleting a message");
  check(err, "serializing the model configuration");
  if (!config.is_object()) fail("the model configuration is not a JSON object", TRITONSERVER_ERROR_INTERNAL);
  return config;
}

void write_config(TRITONBACKEND_Model* model, const json& config) {
  const std::string text = config.dump();
  TRITONSERVER_Message* msg = nullptr;
  check(TRITONSERVER_MessageNewFromSerializedJson(&msg, text.data(), text.size()), "making the model configuration");
  TRITONSERVER_Error* err = TRITONBACKEND_ModelSetConfig(model, 1, msg);
  log_error(TRITONSERVER_MessageDelete(msg), "deleting a message");
  check(err, "setting the auto-completed model configuration");
}

json tensor_config(const ServedTensor& t) {
  return json{{"name", t.name}, {"data_type", config_type(t.dtype)}, {"dims", t.dims}};
}

bool has_entries(const json& config, const char* key) {
  auto it = config.find(key);
  return it != config.end() && it->is_array() && !it->empty();
}

// Fills what the config leaves out: max_batch_size (0 there and no input written with the batch
// axis: the engine's), and all inputs or all outputs when it lists none. True if it changed.
bool auto_complete(json& config, const Signature& sig, const std::string& model, std::string& note) {
  bool changed = false;
  const int64_t mbs = json_int(config, "max_batch_size", 0);
  if (mbs == 0 && sig.max_batch_size > 0) {
    // Inputs written with one more dimension than the engine's rows mean "no batching by Triton".
    bool written_with_batch = false;
    if (has_entries(config, "input"))
      for (const json& in : config["input"])
        for (const ServedTensor& t : sig.inputs)
          if (json_string(in, "name") == t.name &&
              json_dims(in.value("dims", json()), model).size() == t.dims.size() + 1)
            written_with_batch = true;
    if (!written_with_batch) {
      config["max_batch_size"] = sig.max_batch_size;
      note += " max_batch_size " + std::to_string(sig.max_batch_size) + ";";
      changed = true;
    }
  }
  const Signature served =
      json_int(config, "max_batch_size", 0) > 0 || sig.max_batch_size == 0 ? sig : without_batching(sig);
  if (!has_entries(config, "input")) {
    config["input"] = json::array();
    for (const ServedTensor& t : served.inputs) config["input"].push_back(tensor_config(t));
    note += " inputs;";
    changed = true;
  }
  if (!has_entries(config, "output")) {
    config["output"] = json::array();
    for (const ServedTensor& t : served.outputs) config["output"].push_back(tensor_config(t));
    note += " outputs;";
    changed = true;
  }
  return changed;
}

// Checks one config tensor against the engine's; "" or what is wrong.
std::string check_config_tensor(const json& entry, const ServedTensor& t, const char* kind, bool batched) {
  const std::string what = std::string(kind) + " '" + t.name + "'";
  const std::string type = json_string(entry, "data_type");
  if (type != config_type(t.dtype))
    return what + " has data_type " + (type.empty() ? "(none)" : type) + " in the config, the engine's is " +
           config_type(t.dtype);
  const std::vector<int64_t> dims = json_dims(entry.value("dims", json()), what);
  bool ok = dims.size() == t.dims.size();
  for (size_t a = 0; ok && a < dims.size(); ++a) {
    const auto [lo, hi] = t.bounds[a];
    if (t.dims[a] == -1)
      ok = dims[a] == -1 || (dims[a] >= lo && dims[a] <= hi);
    else
      ok = dims[a] == t.dims[a];
  }
  if (!ok)
    return what + " has dims " + dims_str(dims) + " in the config, the engine takes " + dims_str(t.dims) +
           (batched ? " (without the batch axis, max_batch_size > 0)" : " (max_batch_size 0: with every axis)");
  auto reshape = entry.find("reshape");
  if (reshape != entry.end() && reshape->is_object() && reshape->contains("shape"))
    return what + " has a reshape in the config: the kiln backend does not reshape (rebuild the engine instead)";
  return "";
}

// Validates the (completed) configuration against the engine; returns the signature Triton serves.
Signature validate_config(const json& config, const Signature& sig, const std::string& model) {
  const std::string prefix = "model '" + model + "': ";
  const int64_t mbs = json_int(config, "max_batch_size", 0);
  if (mbs < 0) fail(prefix + "max_batch_size " + std::to_string(mbs) + " is negative");
  if (mbs > 0 && sig.max_batch_size == 0)
    fail(prefix + "the config sets max_batch_size " + std::to_string(mbs) +
         " but the engine cannot batch requests: " + sig.why_not_batched + "; set max_batch_size: 0");
  if (mbs > sig.max_batch_size)
    fail(prefix + "the config sets max_batch_size " + std::to_string(mbs) + ", above the engine's batch range " +
         std::to_string(sig.min_batch) + ".." + std::to_string(sig.max_batch_size) +
         " (lower it, or rebuild the engine with --batch 1.." + std::to_string(mbs) + ")");
  const bool batched = mbs > 0;
  Signature served = batched || sig.max_batch_size == 0 ? sig : without_batching(sig);
  if (batched) served.max_batch_size = mbs;  // what a request may carry (the engine may take more)

  auto names = [](const std::vector<ServedTensor>& v) {
    std::string s;
    for (const ServedTensor& t : v) s += (s.empty() ? "'" : ", '") + t.name + "'";
    return s;
  };
  auto check_list = [&](const char* key, const char* kind, const std::vector<ServedTensor>& tensors, bool all) {
    std::map<std::string, int> seen;
    if (config.contains(key) && config[key].is_array())
      for (const json& entry : config[key]) {
        const std::string name = json_string(entry, "name");
        auto t = std::find_if(tensors.begin(), tensors.end(), [&](const ServedTensor& s) { return s.name == name; });
        if (t == tensors.end())
          fail(prefix + "the config lists " + kind + " '" + name + "', which the engine does not have (its " + kind +
               "s: " + names(tensors) + ")");
        if (seen[name]++) fail(prefix + "the config lists " + kind + " '" + name + "' twice");
        const std::string err = check_config_tensor(entry, *t, kind, batched);
        if (!err.empty()) fail(prefix + err);
      }
    if (all)
      for (const ServedTensor& t : tensors)
        if (!seen.count(t.name))
          fail(prefix + "the config lacks " + kind + " '" + t.name + "' of the engine (" + config_type(t.dtype) +
               " dims " + dims_str(t.dims) + ")");
  };
  check_list("input", "input", served.inputs, /*all=*/true);      // a request must be able to give them all
  check_list("output", "output", served.outputs, /*all=*/false);  // serving a subset is fine
  return served;
}

// ---------------------------------------------------------------------------------------------
// Model and instance state

struct ModelState {
  std::string name;
  uint64_t version = 0;
  std::filesystem::path path;
  std::shared_ptr<const kiln::Engine> engine;
  Signature engine_sig;  // the engine's own (max_batch_size: the top of its batch range, or 0)
  Signature served;      // what the config serves (max_batch_size 0 when Triton does not batch)
  int threads = 0;
};

struct InstanceState {
  TRITONBACKEND_ModelInstance* instance = nullptr;
  ModelState* model = nullptr;
  std::string name;
  bool gpu = false;
  int32_t device = 0;
  std::unique_ptr<kiln::Context> ctx;
#if defined(KILN_HAVE_CUDA)
  cudaStream_t stream = nullptr;
#endif
  std::vector<std::vector<std::byte>> staging;  // per engine input: the batch's rows, concatenated

  void execute(TRITONBACKEND_Request** requests, uint32_t count);
};

int parse_threads(const json& config, const std::string& model) {
  auto params = config.find("parameters");
  if (params == config.end() || !params->is_object() || !params->contains("threads")) return 0;
  const json& p = (*params)["threads"];
  const std::string text = p.is_object() ? json_string(p, "string_value") : p.is_string() ? p.get<std::string>() : "";
  try {
    size_t used = 0;
    const int n = std::stoi(text, &used);
    if (used == text.size() && n >= 0) return n;
  } catch (const std::exception&) {
  }
  fail("model '" + model + "': parameter threads is '" + text + "', expected a count of CPU threads (0: all cores)");
}

void model_initialize(TRITONBACKEND_Model* model) {
  auto state = std::make_unique<ModelState>();
  const char* cname = nullptr;
  check(TRITONBACKEND_ModelName(model, &cname), "reading the model's name");
  state->name = cname;
  check(TRITONBACKEND_ModelVersion(model, &state->version), "reading the model's version");
  TRITONBACKEND_ArtifactType artifact;
  const char* location = nullptr;
  check(TRITONBACKEND_ModelRepository(model, &artifact, &location), "reading the model's repository");
  const std::string prefix = "model '" + state->name + "': ";
  if (artifact != TRITONBACKEND_ARTIFACT_FILESYSTEM)
    fail(prefix + "the kiln backend reads models from a local repository only", TRITONSERVER_ERROR_UNSUPPORTED);

  json config = read_config(model);
  std::string filename = json_string(config, "default_model_filename");
  if (filename.empty()) filename = kDefaultFilename;
  state->path = std::filesystem::path(location) / std::to_string(state->version) / filename;
  if (!std::filesystem::exists(state->path))
    fail(prefix + "no engine file " + state->path.string() + " (build one with: kiln optimize MODEL.onnx -o " +
             state->path.string() + ")",
         TRITONSERVER_ERROR_NOT_FOUND);
  try {
    state->engine = kiln::Engine::load(state->path);
  } catch (const kiln::Error& e) {
    fail(prefix + e.what());
  }
  state->engine_sig = kiln::serve::signature(*state->engine);
  const Signature& sig = state->engine_sig;

  bool complete = false;
  check(TRITONBACKEND_ModelAutoCompleteConfig(model, &complete), "asking whether to auto-complete the configuration");
  if (complete) {
    std::string note;
    if (auto_complete(config, sig, state->name, note)) {
      write_config(model, config);
      config = read_config(model);  // Triton may have filled more
      KILN_LOG_INFO("kiln backend: model '" + state->name + "': auto-completed the configuration:" + note);
    }
  }
  state->served = validate_config(config, sig, state->name);
  state->threads = parse_threads(config, state->name);

  std::string desc = state->engine->is_gpu() ? "GPU engine (" + state->engine->summary().target + ")" : "CPU engine";
  if (sig.max_batch_size > 0)
    desc += ", batch " + std::to_string(sig.min_batch) + ".." + std::to_string(sig.max_batch_size);
  else
    desc += ", not batched: " + sig.why_not_batched;
  KILN_LOG_INFO("kiln backend: model '" + state->name + "' version " + std::to_string(state->version) + ": " +
                state->path.string() + ", " + desc + "; max_batch_size " +
                std::to_string(state->served.max_batch_size));
  check(TRITONBACKEND_ModelSetState(model, state.get()), "setting the model's state");
  state.release();
}

void instance_initialize(TRITONBACKEND_ModelInstance* instance) {
  TRITONBACKEND_Model* model = nullptr;
  check(TRITONBACKEND_ModelInstanceModel(instance, &model), "finding the instance's model");
  void* vstate = nullptr;
  check(TRITONBACKEND_ModelState(model, &vstate), "reading the model's state");
  auto state = std::make_unique<InstanceState>();
  state->instance = instance;
  state->model = static_cast<ModelState*>(vstate);
  const char* cname = nullptr;
  check(TRITONBACKEND_ModelInstanceName(instance, &cname), "reading the instance's name");
  state->name = cname;
  TRITONSERVER_InstanceGroupKind kind;
  check(TRITONBACKEND_ModelInstanceKind(instance, &kind), "reading the instance's kind");
  check(TRITONBACKEND_ModelInstanceDeviceId(instance, &state->device), "reading the instance's device");
  const ModelState& m = *state->model;
  const std::string prefix = "model '" + m.name + "', instance '" + state->name + "': ";
  state->gpu = m.engine->is_gpu();
  if (state->gpu) {
    if (kind != TRITONSERVER_INSTANCEGROUPKIND_GPU)
      fail(prefix + "the engine was built for a GPU (" + m.engine->summary().target +
           "): give the model an instance_group of kind KIND_GPU");
#if defined(KILN_HAVE_CUDA)
    cuda_check(cudaSetDevice(state->device), prefix + "cudaSetDevice(" + std::to_string(state->device) + ")");
    try {
      state->ctx = m.engine->create_context(kiln::ContextOptions{});
    } catch (const kiln::Error& e) {
      fail(prefix + "GPU " + std::to_string(state->device) + ": " + e.what(), TRITONSERVER_ERROR_UNAVAILABLE);
    }
    cuda_check(cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking), prefix + "creating a CUDA stream");
#else
    fail(prefix + "this kiln backend was built without CUDA and cannot run a GPU engine",
         TRITONSERVER_ERROR_UNSUPPORTED);
#endif
  } else {
    if (kind == TRITONSERVER_INSTANCEGROUPKIND_GPU)
      KILN_LOG_INFO("kiln backend: " + prefix + "a CPU engine: runs on the CPU although the instance is KIND_GPU");
    kiln::ContextOptions options;
    options.cpu_threads = m.threads;
    state->ctx = m.engine->create_context(options);
  }
  state->staging.resize(m.engine->inputs().size());
  KILN_LOG_INFO("kiln backend: " + prefix + (state->gpu ? "GPU " + std::to_string(state->device) : "CPU") +
                " context ready");
  check(TRITONBACKEND_ModelInstanceSetState(instance, state.get()), "setting the instance's state");
  state.release();
}

void instance_finalize(InstanceState* state) {
#if defined(KILN_HAVE_CUDA)
  if (state->gpu) {
    cudaSetDevice(state->device);
    if (state->stream) cudaStreamSynchronize(state->stream);
    state->ctx.reset();
    if (state->stream) cudaStreamDestroy(state->stream);
  }
#endif
  delete state;
}

// ---------------------------------------------------------------------------------------------
// Execution

// One request that passed validation.
struct Pending {
  size_t index = 0;                          // in the execution's requests
  int64_t rows = 1;                          // along the engine's batch axis (1 when the engine has none)
  std::vector<TRITONBACKEND_Input*> inputs;  // per engine input
  std::vector<std::vector<int64_t>> shapes;  // per engine input, as the request gives it
  std::vector<size_t> outputs;               // requested engine outputs (indices)
};

// Per request: its response until sent, and the figures for its statistics.
struct Slot {
  TRITONBACKEND_Request* request = nullptr;
  TRITONBACKEND_Response* response = nullptr;
  std::string label;  // "request 'ID'" or "request" (no id)
  bool success = false;
  uint64_t compute_start = 0, compute_end = 0, exec_end = 0;
};

void send(Slot& s, const std::string& error, TRITONSERVER_Error_Code code = TRITONSERVER_ERROR_INVALID_ARG) {
  if (!s.response) return;
  TRITONSERVER_Error* err = error.empty() ? nullptr : TRITONSERVER_ErrorNew(code, error.c_str());
  log_error(TRITONBACKEND_ResponseSend(s.response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, err), "sending a response");
  if (err) TRITONSERVER_ErrorDelete(err);
  s.response = nullptr;
  s.success = error.empty();
  s.exec_end = now_ns();
}

// Checks a request against the served signature; the request's inputs and wanted outputs, or what
// is wrong (naming the tensor).
std::optional<Pending> validate(TRITONBACKEND_Request* request, const ModelState& m, std::string& error) {
  const Signature& sig = m.served;
  const bool row_axis = m.engine_sig.max_batch_size > 0;
  Pending p;
  uint32_t count = 0;
  check(TRITONBACKEND_RequestInputCount(request, &count), "counting the request's inputs");
  for (uint32_t i = 0; i < count; ++i) {
    const char* name = nullptr;
    check(TRITONBACKEND_RequestInputName(request, i, &name), "reading an input's name");
    if (std::none_of(sig.inputs.begin(), sig.inputs.end(), [&](const ServedTensor& t) { return t.name == name; })) {
      error = "input '" + std::string(name) + "' is not an input of the model";
      return std::nullopt;
    }
  }
  for (const ServedTensor& t : sig.inputs) {
    TRITONBACKEND_Input* input = nullptr;
    TRITONSERVER_Error* err = TRITONBACKEND_RequestInput(request, t.name.c_str(), &input);
    if (err || !input) {
      if (err) TRITONSERVER_ErrorDelete(err);
      error = "input '" + t.name + "' is missing (the model takes " +
              std::string(kiln::serve::kserve_datatype(t.dtype)) + " " + dims_str(t.dims) + ")";
      return std::nullopt;
    }
    TRITONSERVER_DataType dtype;
    const int64_t* shape = nullptr;
    uint32_t rank = 0;
    uint64_t bytes = 0;
    check(TRITONBACKEND_InputProperties(input, nullptr, &dtype, &shape, &rank, &bytes, nullptr),
          "reading an input's properties");
    std::vector<int64_t> dims(shape, shape + rank);
    error = kiln::serve::check_tensor(sig, t, kserve_name(dtype), dims);
    if (!error.empty()) return std::nullopt;
    const uint64_t want = static_cast<uint64_t>(numel(dims)) * kiln::dtype_size(t.dtype);
    if (bytes != want) {
      error = "input '" + t.name + "' has " + std::to_string(bytes) + " bytes of data, its shape " + dims_str(dims) +
              " of " + std::string(kiln::serve::kserve_datatype(t.dtype)) + " takes " + std::to_string(want);
      return std::nullopt;
    }
    if (row_axis) {
      if (p.inputs.empty()) {
        p.rows = dims[0];
      } else if (dims[0] != p.rows) {
        error = "input '" + t.name + "' has " + std::to_string(dims[0]) + " rows, input '" + sig.inputs[0].name +
                "' has " + std::to_string(p.rows) + ": every input of a request takes the same batch size";
        return std::nullopt;
      }
    }
    p.inputs.push_back(input);
    p.shapes.push_back(std::move(dims));
  }
  error = kiln::serve::check_ranges(*m.engine, [&](const std::string& name) -> const std::vector<int64_t>* {
    for (size_t i = 0; i < sig.inputs.size(); ++i)
      if (sig.inputs[i].name == name) return &p.shapes[i];
    return nullptr;
  });
  if (!error.empty()) return std::nullopt;
  uint32_t outputs = 0;
  check(TRITONBACKEND_RequestOutputCount(request, &outputs), "counting the requested outputs");
  const auto& engine_outputs = m.engine->outputs();
  for (uint32_t i = 0; i < outputs; ++i) {
    const char* name = nullptr;
    check(TRITONBACKEND_RequestOutputName(request, i, &name), "reading a requested output's name");
    auto it = std::find_if(engine_outputs.begin(), engine_outputs.end(),
                           [&](const kiln::TensorInfo& t) { return t.name == name; });
    if (it == engine_outputs.end()) {
      error = "output '" + std::string(name) + "' is not an output of the model";
      return std::nullopt;
    }
    p.outputs.push_back(static_cast<size_t>(it - engine_outputs.begin()));
  }
  return p;
}

// Copies an input's data (all its buffers) to host memory at dst, `bytes` in all.
void gather(TRITONBACKEND_Input* input, const std::string& name, std::byte* dst, uint64_t bytes) {
  uint32_t buffers = 0;
  check(TRITONBACKEND_InputProperties(input, nullptr, nullptr, nullptr, nullptr, nullptr, &buffers),
        "reading an input's properties");
  uint64_t at = 0;
  for (uint32_t b = 0; b < buffers; ++b) {
    const void* src = nullptr;
    uint64_t size = 0;
    TRITONSERVER_MemoryType type = TRITONSERVER_MEMORY_CPU;
    int64_t type_id = 0;
    check(TRITONBACKEND_InputBuffer(input, b, &src, &size, &type, &type_id), "reading an input buffer");
    if (at + size > bytes) fail("input '" + name + "' has more data than its shape takes");
    if (size == 0) continue;
    if (type == TRITONSERVER_MEMORY_GPU) {
#if defined(KILN_HAVE_CUDA)
      cuda_check(cudaMemcpy(dst + at, src, size, cudaMemcpyDeviceToHost), "copying input '" + name + "' from the GPU");
#else
      fail("input '" + name + "' is in GPU memory, which this kiln backend (built without CUDA) cannot read",
           TRITONSERVER_ERROR_UNSUPPORTED);
#endif
    } else {
      std::memcpy(dst + at, src, size);
    }
    at += size;
  }
  if (at != bytes) fail("input '" + name + "' has less data than its shape takes");
}

// The input's data in place when it is one buffer in host memory, else nullptr.
const void* single_host_buffer(TRITONBACKEND_Input* input, uint64_t bytes) {
  uint32_t buffers = 0;
  check(TRITONBACKEND_InputProperties(input, nullptr, nullptr, nullptr, nullptr, nullptr, &buffers),
        "reading an input's properties");
  if (buffers != 1) return nullptr;
  const void* src = nullptr;
  uint64_t size = 0;
  TRITONSERVER_MemoryType type = TRITONSERVER_MEMORY_CPU;
  int64_t type_id = 0;
  check(TRITONBACKEND_InputBuffer(input, 0, &src, &size, &type, &type_id), "reading an input buffer");
  return type != TRITONSERVER_MEMORY_GPU && size == bytes ? src : nullptr;
}

// Writes one output of a response.
void write_output(TRITONBACKEND_Response* response, const kiln::TensorInfo& info, const std::vector<int64_t>& shape,
                  const std::byte* data, size_t bytes) {
  TRITONBACKEND_Output* output = nullptr;
  check(TRITONBACKEND_ResponseOutput(response, &output, info.name.c_str(), triton_type(info.dtype), shape.data(),
                                     static_cast<uint32_t>(shape.size())),
        ("making output '" + info.name + "'").c_str());
  if (bytes == 0) return;
  void* dst = nullptr;
  TRITONSERVER_MemoryType type = TRITONSERVER_MEMORY_CPU;
  int64_t type_id = 0;
  check(TRITONBACKEND_OutputBuffer(output, &dst, bytes, &type, &type_id),
        ("allocating output '" + info.name + "'").c_str());
  if (type == TRITONSERVER_MEMORY_GPU) {
#if defined(KILN_HAVE_CUDA)
    cuda_check(cudaMemcpy(dst, data, bytes, cudaMemcpyHostToDevice), "copying output '" + info.name + "' to the GPU");
#else
    fail("Triton gave output '" + info.name + "' GPU memory, which this kiln backend (built without CUDA) cannot write",
         TRITONSERVER_ERROR_UNSUPPORTED);
#endif
  } else {
    std::memcpy(dst, data, bytes);
  }
}

void InstanceState::execute(TRITONBACKEND_Request** requests, uint32_t count) {
  const uint64_t exec_start = now_ns();
  const ModelState& m = *model;
  const auto& engine_inputs = m.engine->inputs();
  const auto& engine_outputs = m.engine->outputs();
  const bool row_axis = m.engine_sig.max_batch_size > 0;  // the engine's inputs have a leading batch axis
  const bool merge = m.served.max_batch_size > 0;         // Triton batches: merge the requests' rows
  std::vector<Slot> slots(count);
  struct Batch {
    std::vector<size_t> members;  // indices in pending
    uint64_t compute_start = 0, compute_end = 0, end = 0;
    int64_t rows = 0;
    bool ran = false;
  };
  std::vector<Pending> pending;
  std::vector<Batch> batches;
  std::string fatal;  // an unexpected failure: every request not answered yet gets it
  for (uint32_t i = 0; i < count; ++i) slots[i].request = requests[i];  // each released at the end, whatever happens

  try {
    // 1. One response per request; validate each.
    for (uint32_t i = 0; i < count; ++i) {
      Slot& s = slots[i];
      const char* id = nullptr;
      if (TRITONSERVER_Error* err = TRITONBACKEND_RequestId(s.request, &id)) TRITONSERVER_ErrorDelete(err);
      s.label = id && *id ? "request '" + std::string(id) + "'" : std::string("request");
      if (TRITONSERVER_Error* err = TRITONBACKEND_ResponseNew(&s.response, s.request)) {
        log_error(err, "creating a response");
        s.response = nullptr;
        continue;
      }
      std::string error;
      std::optional<Pending> p;
      try {
        p = validate(s.request, m, error);
      } catch (const std::exception& e) {
        error = e.what();
      }
      if (!p) {
        send(s, "model '" + m.name + "', " + s.label + ": " + error);
        s.compute_start = s.compute_end = s.exec_end;
        continue;
      }
      p->index = i;
      pending.push_back(std::move(*p));
    }

    // 2. Batches: requests whose inputs agree on every dimension but the batch axis, up to the
    // engine's top; each request alone when Triton does not batch.
    for (size_t k = 0; k < pending.size(); ++k) {
      const Pending& p = pending[k];
      Batch* into = nullptr;
      if (merge)
        for (Batch& b : batches) {
          const Pending& first = pending[b.members.front()];
          bool same = b.rows + p.rows <= m.engine_sig.max_batch_size;
          for (size_t i = 0; same && i < p.shapes.size(); ++i)
            same = std::equal(p.shapes[i].begin() + 1, p.shapes[i].end(), first.shapes[i].begin() + 1,
                              first.shapes[i].end());
          if (same) into = &b;
        }
      if (!into) into = &batches.emplace_back();
      into->members.push_back(k);
      into->rows += p.rows;
    }

    if (TRITONSERVER_LogIsEnabled(TRITONSERVER_LOG_VERBOSE)) {
      std::string rows;
      for (const Batch& b : batches) rows += (rows.empty() ? "" : ", ") + std::to_string(b.rows);
      log(TRITONSERVER_LOG_VERBOSE, __LINE__,
          "kiln backend: model '" + m.name + "', instance '" + name + "': " + std::to_string(count) + " requests (" +
              std::to_string(pending.size()) + " valid), " + std::to_string(batches.size()) + " runs of rows " +
              (rows.empty() ? "-" : rows));
    }

    // 3. Run each batch and answer its requests.
    for (Batch& b : batches) {
      const Pending& first = pending[b.members.front()];
      const int64_t padded = row_axis ? std::max(b.rows, m.engine_sig.min_batch) : 1;
      std::string run_error;
      try {
#if defined(KILN_HAVE_CUDA)
        if (gpu) cuda_check(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
#endif
        for (size_t i = 0; i < engine_inputs.size(); ++i) {
          std::vector<int64_t> shape = first.shapes[i];
          if (row_axis) shape[0] = padded;
          if (ctx->input_shape(engine_inputs[i].name) != shape) ctx->set_input_shape(engine_inputs[i].name, shape);
          const size_t row_bytes =
              static_cast<size_t>(numel(shape) / (row_axis ? padded : 1)) * kiln::dtype_size(engine_inputs[i].dtype);
          const size_t bytes = row_bytes * static_cast<size_t>(row_axis ? padded : 1);
          const void* direct = nullptr;
          if (b.members.size() == 1 && (!row_axis || padded == b.rows))
            direct = single_host_buffer(first.inputs[i], bytes);
          if (!direct) {
            std::vector<std::byte>& buf = staging[i];
            buf.resize(bytes);
            size_t at = 0;
            for (size_t k : b.members) {
              const Pending& p = pending[k];
              const size_t n = row_bytes * static_cast<size_t>(p.rows);
              gather(p.inputs[i], engine_inputs[i].name, buf.data() + at, n);
              at += n;
            }
            std::memset(buf.data() + at, 0, bytes - at);  // padding rows up to the engine's lowest batch
            direct = buf.data();
          }
          ctx->set_input(engine_inputs[i].name, direct, bytes);
        }
        b.compute_start = now_ns();
#if defined(KILN_HAVE_CUDA)
        if (gpu) {
          ctx->enqueue(stream);
          cuda_check(cudaStreamSynchronize(stream), "running the engine");
          ctx->check();
        } else {
          ctx->run();
        }
#else
        ctx->run();
#endif
        b.compute_end = now_ns();
        b.ran = true;
      } catch (const std::exception& e) {
        run_error = e.what();
        b.compute_end = now_ns();
        if (!b.compute_start) b.compute_start = b.compute_end;
      }

      int64_t row = 0;
      for (size_t k : b.members) {
        const Pending& p = pending[k];
        Slot& s = slots[p.index];
        s.compute_start = b.compute_start;
        s.compute_end = b.compute_end;
        if (!run_error.empty()) {
          send(s, "model '" + m.name + "', " + s.label + ": the engine failed: " + run_error,
               TRITONSERVER_ERROR_INTERNAL);
          continue;
        }
        try {
          for (size_t o : p.outputs) {
            const kiln::TensorInfo& info = engine_outputs[o];
            std::vector<int64_t> shape = ctx->output_shape(info.name);
            std::span<const std::byte> data = ctx->output(info.name);
            if (row_axis) {
              const size_t row_bytes = shape[0] > 0 ? data.size() / static_cast<size_t>(shape[0]) : 0;
              shape[0] = p.rows;
              write_output(s.response, info, shape, data.data() + row_bytes * static_cast<size_t>(row),
                           row_bytes * static_cast<size_t>(p.rows));
            } else {
              write_output(s.response, info, shape, data.data(), data.size());
            }
          }
          send(s, "");
        } catch (const std::exception& e) {
          send(s, "model '" + m.name + "', " + s.label + ": " + e.what(), TRITONSERVER_ERROR_INTERNAL);
        }
        row += p.rows;
      }
      b.end = now_ns();
    }
  } catch (const std::exception& e) {
    fatal = e.what();
  } catch (...) {
    fatal = "unknown exception";
  }

  // 4. Whatever happened: answer every request, report statistics, release the requests.
  for (Slot& s : slots) {
    if (!s.request) continue;
    if (s.response)
      send(s, "model '" + m.name + "', " + s.label + ": " + (fatal.empty() ? "not run" : fatal),
           TRITONSERVER_ERROR_INTERNAL);
    if (!s.exec_end) s.exec_end = now_ns();
    if (!s.compute_start) s.compute_start = s.compute_end = s.exec_end;
    log_error(TRITONBACKEND_ModelInstanceReportStatistics(instance, s.request, s.success, exec_start, s.compute_start,
                                                          s.compute_end, s.exec_end),
              "reporting a request's statistics");
  }
  for (const Batch& b : batches)
    if (b.ran)
      log_error(TRITONBACKEND_ModelInstanceReportBatchStatistics(instance, static_cast<uint64_t>(b.rows), exec_start,
                                                                 b.compute_start, b.compute_end, b.end),
                "reporting a batch's statistics");
  for (Slot& s : slots)
    if (s.request)
      log_error(TRITONBACKEND_RequestRelease(s.request, TRITONSERVER_REQUEST_RELEASE_ALL), "releasing a request");
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Entry points

extern "C" {

KILN_TRITON_EXPORT TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  return guarded(TRITONSERVER_ERROR_INTERNAL, [&] {
    uint32_t major = 0, minor = 0;
    check(TRITONBACKEND_ApiVersion(&major, &minor), "reading Triton's backend API version");
    if (major != KILN_TRITONBACKEND_API_MAJOR || minor < KILN_TRITONBACKEND_API_MINOR)
      fail("the kiln backend needs Triton's backend API " + std::to_string(KILN_TRITONBACKEND_API_MAJOR) + "." +
               std::to_string(KILN_TRITONBACKEND_API_MINOR) + " or a later " +
               std::to_string(KILN_TRITONBACKEND_API_MAJOR) + ".x; this Triton has " + std::to_string(major) + "." +
               std::to_string(minor),
           TRITONSERVER_ERROR_UNSUPPORTED);
    const char* name = nullptr;
    check(TRITONBACKEND_BackendName(backend, &name), "reading the backend's name");
    KILN_LOG_INFO("kiln backend '" + std::string(name) + "': Kiln " + std::string(kiln::kiln_version()) +
                  ", engine format " + std::to_string(kiln::engine_format_version()) + ", Triton backend API " +
                  std::to_string(major) + "." + std::to_string(minor));
  });
}

KILN_TRITON_EXPORT TRITONSERVER_Error* TRITONBACKEND_Finalize(TRITONBACKEND_Backend* backend) { return nullptr; }

KILN_TRITON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  return guarded(TRITONSERVER_ERROR_INVALID_ARG, [&] { model_initialize(model); });
}

KILN_TRITON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  return guarded(TRITONSERVER_ERROR_INTERNAL, [&] {
    void* state = nullptr;
    check(TRITONBACKEND_ModelState(model, &state), "reading the model's state");
    delete static_cast<ModelState*>(state);
  });
}

KILN_TRITON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* instance) {
  return guarded(TRITONSERVER_ERROR_INVALID_ARG, [&] { instance_initialize(instance); });
}

KILN_TRITON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* instance) {
  return guarded(TRITONSERVER_ERROR_INTERNAL, [&] {
    void* state = nullptr;
    check(TRITONBACKEND_ModelInstanceState(instance, &state), "reading the instance's state");
    if (state) instance_finalize(static_cast<InstanceState*>(state));
  });
}

KILN_TRITON_EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance,
                                                                          TRITONBACKEND_Request** requests,
                                                                          const uint32_t request_count) {
  // An error return leaves the requests to Triton: only before anything was done with them.
  void* state = nullptr;
  if (TRITONSERVER_Error* err = TRITONBACKEND_ModelInstanceState(instance, &state)) return err;
  if (!state) return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "kiln backend: the instance has no state");
  // execute() answers and releases every request whatever happens; nothing escapes it.
  try {
    static_cast<InstanceState*>(state)->execute(requests, request_count);
  } catch (...) {
    KILN_LOG_ERROR("kiln backend: an exception escaped the execution of a batch");
  }
  return nullptr;
}

}  // extern "C"
