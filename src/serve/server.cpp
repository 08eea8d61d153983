#include "serve/server.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include <atomic>
#include <charconv>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "kserve_v2.grpc.pb.h"
#include "serve/shared_memory.h"

namespace kiln::serve {

using nlohmann::json;

namespace {

const std::vector<std::string> kExtensions = {"binary_tensor_data", "statistics", "model_configuration",
                                              "system_shared_memory"};

json dims_json(const std::vector<int64_t>& d) { return json(d); }

json duration_json(const Duration& d) { return {{"count", d.count}, {"ns", d.ns}}; }

std::vector<int64_t> metadata_shape(const Model& m, const ServedTensor& t) {
  std::vector<int64_t> s;
  if (m.signature().max_batch_size > 0) s.push_back(-1);
  s.insert(s.end(), t.dims.begin(), t.dims.end());
  return s;
}

json metadata_json(const Model& m) {
  json j;
  j["name"] = m.name();
  j["versions"] = {"1"};
  j["platform"] = "kiln";
  for (const char* side : {"inputs", "outputs"}) {
    json arr = json::array();
    for (const ServedTensor& t : side[0] == 'i' ? m.signature().inputs : m.signature().outputs)
      arr.push_back({{"name", t.name}, {"datatype", kserve_datatype(t.dtype)}, {"shape", metadata_shape(m, t)}});
    j[side] = std::move(arr);
  }
  return j;
}

std::string type_name(DataType t) { return "TYPE_" + std::string(kserve_datatype(t)); }

void fill_config(const Model& m, inference::ModelConfig& c) {
  const Signature& sig = m.signature();
  c.set_name(m.name());
  c.set_platform("kiln");
  c.set_backend("kiln");
  c.set_max_batch_size(static_cast<int32_t>(sig.max_batch_size));
  c.set_default_model_filename("model.kiln");
  auto dtype = [](DataType t) {
    inference::DataType v = inference::TYPE_INVALID;
    inference::DataType_Parse(type_name(t), &v);
    return v;
  };
  for (const ServedTensor& t : sig.inputs) {
    auto* in = c.add_input();
    in->set_name(t.name);
    in->set_data_type(dtype(t.dtype));
    for (int64_t d : t.dims) in->add_dims(d);
  }
  for (const ServedTensor& t : sig.outputs) {
    auto* out = c.add_output();
    out->set_name(t.name);
    out->set_data_type(dtype(t.dtype));
    for (int64_t d : t.dims) out->add_dims(d);
  }
  auto* g = c.add_instance_group();
  g->set_name(m.name());
  g->set_count(m.options().instances);
  if (m.engine().is_gpu()) {
    g->set_kind(inference::ModelInstanceGroup::KIND_GPU);
    for (int d : m.options().devices.empty() ? std::vector<int>{0} : m.options().devices) g->add_gpus(d);
  } else {
    g->set_kind(inference::ModelInstanceGroup::KIND_CPU);
  }
  if (sig.max_batch_size > 0) {
    auto* db = c.mutable_dynamic_batching();
    for (int64_t p : m.options().preferred_batch) db->add_preferred_batch_size(static_cast<int32_t>(p));
    db->set_max_queue_delay_microseconds(static_cast<uint64_t>(m.options().max_queue_delay_us));
    db->mutable_default_queue_policy()->set_max_queue_size(static_cast<uint32_t>(m.options().max_queue));
  }
}

json model_stats(const Model& m) {
  const ModelStats s = m.stats();
  json j;
  j["name"] = m.name();
  j["version"] = "1";
  j["last_inference"] = s.last_inference_ms;
  j["inference_count"] = s.inference_count;
  j["execution_count"] = s.execution_count;
  j["inference_stats"] = {{"success", duration_json(s.success)},
                          {"fail", duration_json(s.fail)},
                          {"queue", duration_json(s.queue)},
                          {"compute_input", duration_json(s.compute_input)},
                          {"compute_infer", duration_json(s.compute_infer)},
                          {"compute_output", duration_json(s.compute_output)},
                          {"cache_hit", duration_json({})},
                          {"cache_miss", duration_json({})}};
  json batches = json::array();
  for (const auto& [size, b] : s.batches)
    batches.push_back({{"batch_size", size},
                       {"compute_input", duration_json(b.compute_input)},
                       {"compute_infer", duration_json(b.compute_infer)},
                       {"compute_output", duration_json(b.compute_output)}});
  j["batch_stats"] = std::move(batches);
  j["memory_usage"] = json::array();
  return j;
}

void fill_duration(const Duration& d, inference::StatisticDuration* p) {
  p->set_count(d.count);
  p->set_ns(d.ns);
}

void fill_stats(const Model& m, inference::ModelStatistics* p) {
  const ModelStats s = m.stats();
  p->set_name(m.name());
  p->set_version("1");
  p->set_last_inference(s.last_inference_ms);
  p->set_inference_count(s.inference_count);
  p->set_execution_count(s.execution_count);
  auto* is = p->mutable_inference_stats();
  fill_duration(s.success, is->mutable_success());
  fill_duration(s.fail, is->mutable_fail());
  fill_duration(s.queue, is->mutable_queue());
  fill_duration(s.compute_input, is->mutable_compute_input());
  fill_duration(s.compute_infer, is->mutable_compute_infer());
  fill_duration(s.compute_output, is->mutable_compute_output());
  is->mutable_cache_hit();
  is->mutable_cache_miss();
  for (const auto& [size, b] : s.batches) {
    auto* bs = p->add_batch_stats();
    bs->set_batch_size(static_cast<uint64_t>(size));
    fill_duration(b.compute_input, bs->mutable_compute_input());
    fill_duration(b.compute_infer, bs->mutable_compute_infer());
    fill_duration(b.compute_output, bs->mutable_compute_output());
  }
}

grpc::Status grpc_status(const RequestError& e) {
  const grpc::StatusCode code = e.kind == RequestError::kBadRequest    ? grpc::StatusCode::INVALID_ARGUMENT
                                : e.kind == RequestError::kNotFound    ? grpc::StatusCode::NOT_FOUND
                                : e.kind == RequestError::kUnavailable ? grpc::StatusCode::UNAVAILABLE
                                                                       : grpc::StatusCode::INTERNAL;
  return grpc::Status(code, e.what());
}

}  // namespace

std::string model_config_json(const Model& m) {
  inference::ModelConfig c;
  fill_config(m, c);
  // Triton writes its configuration with numbers for 64-bit integers (protobuf's JSON writes
  // strings), and perf_analyzer reads it so: write it by hand from the message.
  json j;
  j["name"] = c.name();
  j["platform"] = c.platform();
  j["backend"] = c.backend();
  j["max_batch_size"] = c.max_batch_size();
  j["default_model_filename"] = c.default_model_filename();
  for (const char* side : {"input", "output"}) {
    json arr = json::array();
    const bool in = side[1] == 'n';
    const int n = in ? c.input_size() : c.output_size();
    for (int i = 0; i < n; ++i) {
      const std::string& name = in ? c.input(i).name() : c.output(i).name();
      const auto dt = in ? c.input(i).data_type() : c.output(i).data_type();
      const auto& dims = in ? c.input(i).dims() : c.output(i).dims();
      arr.push_back({{"name", name},
                     {"data_type", inference::DataType_Name(dt)},
                     {"dims", dims_json(std::vector<int64_t>(dims.begin(), dims.end()))}});
    }
    j[side] = std::move(arr);
  }
  json groups = json::array();
  for (const auto& g : c.instance_group())
    groups.push_back({{"name", g.name()},
                      {"kind", inference::ModelInstanceGroup::Kind_Name(g.kind())},
                      {"count", g.count()},
                      {"gpus", std::vector<int>(g.gpus().begin(), g.gpus().end())}});
  j["instance_group"] = std::move(groups);
  if (c.has_dynamic_batching()) {
    const auto& db = c.dynamic_batching();
    j["dynamic_batching"] = {
        {"preferred_batch_size", std::vector<int>(db.preferred_batch_size().begin(), db.preferred_batch_size().end())},
        {"max_queue_delay_microseconds", db.max_queue_delay_microseconds()},
        {"default_queue_policy", {{"max_queue_size", db.default_queue_policy().max_queue_size()}}}};
  }
  return j.dump();
}

std::string model_stats_json(const std::vector<const Model*>& models) {
  json arr = json::array();
  for (const Model* m : models) arr.push_back(model_stats(*m));
  return json{{"model_stats", std::move(arr)}}.dump();
}

std::string metrics_text(const std::vector<const Model*>& models) {
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  std::vector<std::pair<std::string, ModelStats>> all;
  for (const Model* m : models) all.emplace_back(m->name(), m->stats());
  auto each = [&](const char* name, const char* type, const char* help, auto value) {
    family(name, type, help);
    for (const auto& [model, s] : all)
      out += fmt::format("{}{{model=\"{}\",version=\"1\"}} {}\n", name, model, value(s));
  };
  each("kiln_inference_request_success", "counter", "Successful inference requests",
       [](const ModelStats& s) { return s.success.count; });
  family("kiln_inference_request_failure", "counter", "Failed inference requests, by reason");
  for (const auto& [model, s] : all)
    for (const char* reason : {"bad_request", "queue_full", "unavailable", "internal"}) {
      auto it = s.failures.find(reason);
      out += fmt::format("kiln_inference_request_failure{{model=\"{}\",version=\"1\",reason=\"{}\"}} {}\n", model,
                         reason, it == s.failures.end() ? 0 : it->second);
    }
  each("kiln_inference_count", "counter", "Inferences (batch rows) of successful requests",
       [](const ModelStats& s) { return s.inference_count; });
  each("kiln_inference_exec_count", "counter", "Engine runs (batches)",
       [](const ModelStats& s) { return s.execution_count; });
  each("kiln_inference_request_duration_us", "counter", "End-to-end time of successful requests in the server, us",
       [](const ModelStats& s) { return s.success.ns / 1000; });
  each("kiln_inference_queue_duration_us", "counter", "Time requests waited in the queue, us",
       [](const ModelStats& s) { return s.queue.ns / 1000; });
  each("kiln_inference_compute_input_duration_us", "counter", "Time merging inputs into batches, us",
       [](const ModelStats& s) { return s.compute_input.ns / 1000; });
  each("kiln_inference_compute_infer_duration_us", "counter", "Time running the engine, us",
       [](const ModelStats& s) { return s.compute_infer.ns / 1000; });
  each("kiln_inference_compute_output_duration_us", "counter", "Time splitting outputs into responses, us",
       [](const ModelStats& s) { return s.compute_output.ns / 1000; });
  family("kiln_batch_size", "histogram", "Rows per engine run");
  for (const auto& [model, s] : all) {
    uint64_t cumulative = 0, sum = 0;
    auto it = s.batches.begin();
    for (int64_t le : {1, 2, 4, 8, 16, 32, 64, 128, 256}) {
      for (; it != s.batches.end() && it->first <= le; ++it) {
        cumulative += it->second.executions;
        sum += it->second.executions * static_cast<uint64_t>(it->first);
      }
      out += fmt::format("kiln_batch_size_bucket{{model=\"{}\",version=\"1\",le=\"{}\"}} {}\n", model, le, cumulative);
    }
    for (; it != s.batches.end(); ++it) {
      cumulative += it->second.executions;
      sum += it->second.executions * static_cast<uint64_t>(it->first);
    }
    out += fmt::format("kiln_batch_size_bucket{{model=\"{}\",version=\"1\",le=\"+Inf\"}} {}\n", model, cumulative);
    out += fmt::format("kiln_batch_size_sum{{model=\"{}\",version=\"1\"}} {}\n", model, sum);
    out += fmt::format("kiln_batch_size_count{{model=\"{}\",version=\"1\"}} {}\n", model, cumulative);
  }
  return out;
}

struct Server::Impl final : public inference::GRPCInferenceService::Service {
  std::vector<std::unique_ptr<Model>> models;
  std::map<std::string, Model*> by_name;
  ServerOptions opt;
  std::atomic<bool> ready{false};
  httplib::Server http, metrics;
  std::thread http_thread, metrics_thread;
  std::unique_ptr<grpc::Server> grpc_server;
  SharedMemoryRegistry shm;

  std::vector<const Model*> all() const {
    std::vector<const Model*> v;
    for (const auto& m : models) v.push_back(m.get());
    return v;
  }

  Model& find(const std::string& name, const std::string& version) const {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      std::string names;
      for (const auto& [n, m] : by_name) names += (names.empty() ? "" : ", ") + n;
      throw RequestError(RequestError::kNotFound,
                         fmt::format("unknown model '{}'; this server serves: {}", name, names));
    }
    if (!version.empty() && version != "1")
      throw RequestError(RequestError::kNotFound,
                         fmt::format("model '{}' has no version '{}' (it has version 1)", name, version));
    return *it->second;
  }

  json repository_index() const {
    json arr = json::array();
    for (const auto& m : models)
      arr.push_back({{"name", m->name()}, {"version", "1"}, {"state", m->ready() ? "READY" : "UNAVAILABLE"}});
    return arr;
  }

  // ---- REST
  static void reply_json(httplib::Response& res, int status, const std::string& body) {
    res.status = status;
    res.set_content(body, "application/json");
  }
  static void reply_error(httplib::Response& res, const RequestError& e) {
    // A message may quote the request's bytes, which need not be UTF-8.
    reply_json(res, e.http_status(), json{{"error", e.what()}}.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  // Runs f, turning RequestError into the protocol's error response.
  template <typename F>
  static httplib::Server::Handler guarded(F f) {
    return [f](const httplib::Request& req, httplib::Response& res) {
      try {
        f(req, res);
      } catch (const RequestError& e) {
        reply_error(res, e);
      } catch (const std::exception& e) {
        reply_error(res, RequestError(RequestError::kInternal, e.what()));
      }
    };
  }
  static std::string version_of(const httplib::Request& req) {
    return req.matches.size() > 2 ? std::string(req.matches[2]) : std::string();
  }

  void routes() {
    const std::string model = R"(/v2/models/([^/]+)(?:/versions/([^/]+))?)";
    http.Get("/v2/health/live", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
    http.Get("/v2/health/ready",
             [this](const httplib::Request&, httplib::Response& res) { res.status = ready ? 200 : 400; });
    http.Get("/v2", [](const httplib::Request&, httplib::Response& res) {
      reply_json(res, 200,
                 json{{"name", "kiln"}, {"version", std::string(kiln_version())}, {"extensions", kExtensions}}.dump());
    });
    http.Get("/v2/models/stats", guarded([this](const httplib::Request&, httplib::Response& res) {
               reply_json(res, 200, model_stats_json(all()));
             }));
    http.Get(model + "/ready", guarded([this](const httplib::Request& req, httplib::Response& res) {
               res.status = find(req.matches[1], version_of(req)).ready() && ready ? 200 : 400;
             }));
    http.Get(model + "/config", guarded([this](const httplib::Request& req, httplib::Response& res) {
               reply_json(res, 200, model_config_json(find(req.matches[1], version_of(req))));
             }));
    http.Get(model + "/stats", guarded([this](const httplib::Request& req, httplib::Response& res) {
               reply_json(res, 200, model_stats_json({&find(req.matches[1], version_of(req))}));
             }));
    http.Get(model, guarded([this](const httplib::Request& req, httplib::Response& res) {
               reply_json(res, 200, metadata_json(find(req.matches[1], version_of(req))).dump());
             }));
    http.Post("/v2/repository/index", guarded([this](const httplib::Request&, httplib::Response& res) {
                reply_json(res, 200, repository_index().dump());
              }));
    http.Post(model + "/infer", guarded([this](const httplib::Request& req, httplib::Response& res) {
                Model& m = find(req.matches[1], version_of(req));
                std::optional<size_t> header_length;
                if (req.has_header("Inference-Header-Content-Length")) {
                  const std::string v = req.get_header_value("Inference-Header-Content-Length");
                  size_t n = 0;
                  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
                  if (ec != std::errc() || p != v.data() + v.size()) {
                    RequestError e(RequestError::kBadRequest,
                                   fmt::format("request to model '{}': Inference-Header-Content-Length '{}' is not "
                                               "a byte count",
                                               m.name(), v));
                    m.count_failure(e);
                    throw e;
                  }
                  header_length = n;
                }
                if (!ready) throw RequestError(RequestError::kUnavailable, "the server is shutting down");
                InferRequest r;
                try {
                  r = decode_rest(m.name(), req.body, header_length, &shm);
                } catch (const RequestError& e) {
                  m.count_failure(e);
                  throw;
                }
                const InferRequest header = r.header();
                const std::vector<Tensor> outputs = m.infer(std::move(r));
                RestResponse out = encode_rest(header, outputs);
                res.status = 200;
                if (out.header_length) {
                  res.set_header("Inference-Header-Content-Length", std::to_string(*out.header_length));
                  res.set_content(std::move(out.body), "application/octet-stream");
                } else {
                  res.set_content(std::move(out.body), "application/json");
                }
              }));
    // System shared memory extension.
    http.Get(
        R"(/v2/systemsharedmemory(?:/region/([^/]+))?/status)",
        guarded([this](const httplib::Request& req, httplib::Response& res) {
          json arr = json::array();
          for (const auto& r : shm.status(req.matches[1]))
            arr.push_back({{"name", r->name}, {"key", r->key}, {"offset", r->offset}, {"byte_size", r->byte_size}});
          reply_json(res, 200, arr.dump());
        }));
    http.Post(
        R"(/v2/systemsharedmemory/region/([^/]+)/register)",
        guarded([this](const httplib::Request& req, httplib::Response& res) {
          const std::string what = fmt::format("registering shared memory region '{}'", std::string(req.matches[1]));
          json j;
          try {
            j = json::parse(req.body);
          } catch (const json::exception& e) {
            throw RequestError(RequestError::kBadRequest, what + ": malformed JSON: " + e.what());
          }
          auto get_u64 = [&](const char* key) -> uint64_t {
            if (!j.is_object() || !j.contains(key)) return 0;
            if (!j[key].is_number_unsigned())
              throw RequestError(RequestError::kBadRequest, what + ": '" + key + "' must be a non-negative integer");
            return j[key].get<uint64_t>();
          };
          if (!j.is_object() || !j.contains("key") || !j["key"].is_string())
            throw RequestError(RequestError::kBadRequest, what + ": the body needs a string 'key'");
          shm.add(req.matches[1], j["key"].get<std::string>(), get_u64("offset"), get_u64("byte_size"));
          reply_json(res, 200, "{}");
        }));
    http.Post(R"(/v2/systemsharedmemory(?:/region/([^/]+))?/unregister)",
              guarded([this](const httplib::Request& req, httplib::Response& res) {
                shm.remove(req.matches[1]);
                reply_json(res, 200, "{}");
              }));
    // cpp-httplib 0.11 refuses a POST without Content-Length before routing it; tritonclient sends
    // the bodiless POSTs (unregister, repository index) so. Answer them here, before the body is read.
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.method != "POST" || req.has_header("Content-Length") || req.has_header("Transfer-Encoding"))
        return httplib::Server::HandlerResponse::Unhandled;
      static const std::regex unregister(R"(/v2/systemsharedmemory(?:/region/([^/]+))?/unregister)");
      std::smatch m;
      if (std::regex_match(req.path, m, unregister)) {
        shm.remove(m[1]);
        reply_json(res, 200, "{}");
        return httplib::Server::HandlerResponse::Handled;
      }
      if (req.path == "/v2/repository/index") {
        reply_json(res, 200, repository_index().dump());
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      const std::string what = res.status == 404   ? "no such endpoint of the KServe v2 protocol"
                               : res.status == 413 ? "the body is larger than the server takes"
                                                   : "the request could not be read";
      reply_json(res, res.status,
                 json{{"error", fmt::format("{} {}: {} (HTTP {})", req.method, req.path, what, res.status)}}.dump(
                     -1, ' ', false, json::error_handler_t::replace));
    });
    metrics.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_text(all()), "text/plain; version=0.0.4");
    });
  }

  // ---- gRPC
  template <typename F>
  grpc::Status guard(F f) {
    try {
      f();
      return grpc::Status::OK;
    } catch (const RequestError& e) {
      return grpc_status(e);
    } catch (const std::exception& e) {
      return grpc::Status(grpc::StatusCode::INTERNAL, e.what());
    }
  }
  grpc::Status ServerLive(grpc::ServerContext*, const inference::ServerLiveRequest*,
                          inference::ServerLiveResponse* r) override {
    r->set_live(true);
    return grpc::Status::OK;
  }
  grpc::Status ServerReady(grpc::ServerContext*, const inference::ServerReadyRequest*,
                           inference::ServerReadyResponse* r) override {
    r->set_ready(ready);
    return grpc::Status::OK;
  }
  grpc::Status ModelReady(grpc::ServerContext*, const inference::ModelReadyRequest* q,
                          inference::ModelReadyResponse* r) override {
    return guard([&] { r->set_ready(find(q->name(), q->version()).ready() && ready); });
  }
  grpc::Status ServerMetadata(grpc::ServerContext*, const inference::ServerMetadataRequest*,
                              inference::ServerMetadataResponse* r) override {
    r->set_name("kiln");
    r->set_version(std::string(kiln_version()));
    for (const std::string& e : kExtensions) r->add_extensions(e);
    return grpc::Status::OK;
  }
  grpc::Status ModelMetadata(grpc::ServerContext*, const inference::ModelMetadataRequest* q,
                             inference::ModelMetadataResponse* r) override {
    return guard([&] {
      const Model& m = find(q->name(), q->version());
      r->set_name(m.name());
      r->add_versions("1");
      r->set_platform("kiln");
      for (const ServedTensor& t : m.signature().inputs) {
        auto* x = r->add_inputs();
        x->set_name(t.name);
        x->set_datatype(std::string(kserve_datatype(t.dtype)));
        for (int64_t d : metadata_shape(m, t)) x->add_shape(d);
      }
      for (const ServedTensor& t : m.signature().outputs) {
        auto* x = r->add_outputs();
        x->set_name(t.name);
        x->set_datatype(std::string(kserve_datatype(t.dtype)));
        for (int64_t d : metadata_shape(m, t)) x->add_shape(d);
      }
    });
  }
  grpc::Status ModelConfig(grpc::ServerContext*, const inference::ModelConfigRequest* q,
                           inference::ModelConfigResponse* r) override {
    return guard([&] { fill_config(find(q->name(), q->version()), *r->mutable_config()); });
  }
  grpc::Status ModelStatistics(grpc::ServerContext*, const inference::ModelStatisticsRequest* q,
                               inference::ModelStatisticsResponse* r) override {
    return guard([&] {
      if (q->name().empty())
        for (const auto& m : models) fill_stats(*m, r->add_model_stats());
      else
        fill_stats(find(q->name(), q->version()), r->add_model_stats());
    });
  }
  grpc::Status RepositoryIndex(grpc::ServerContext*, const inference::RepositoryIndexRequest*,
                               inference::RepositoryIndexResponse* r) override {
    for (const auto& m : models) {
      auto* x = r->add_models();
      x->set_name(m->name());
      x->set_version("1");
      x->set_state(m->ready() ? "READY" : "UNAVAILABLE");
    }
    return grpc::Status::OK;
  }
  grpc::Status SystemSharedMemoryStatus(grpc::ServerContext*, const inference::SystemSharedMemoryStatusRequest* q,
                                        inference::SystemSharedMemoryStatusResponse* r) override {
    return guard([&] {
      for (const auto& region : shm.status(q->name())) {
        auto& x = (*r->mutable_regions())[region->name];
        x.set_name(region->name);
        x.set_key(region->key);
        x.set_offset(region->offset);
        x.set_byte_size(region->byte_size);
      }
    });
  }
  grpc::Status SystemSharedMemoryRegister(grpc::ServerContext*, const inference::SystemSharedMemoryRegisterRequest* q,
                                          inference::SystemSharedMemoryRegisterResponse*) override {
    return guard([&] { shm.add(q->name(), q->key(), q->offset(), q->byte_size()); });
  }
  grpc::Status SystemSharedMemoryUnregister(grpc::ServerContext*,
                                            const inference::SystemSharedMemoryUnregisterRequest* q,
                                            inference::SystemSharedMemoryUnregisterResponse*) override {
    return guard([&] { shm.remove(q->name()); });
  }
  grpc::Status ModelInfer(grpc::ServerContext*, const inference::ModelInferRequest* q,
                          inference::ModelInferResponse* r) override {
    return guard([&] {
      Model& m = find(q->model_name(), q->model_version());
      if (!ready) throw RequestError(RequestError::kUnavailable, "the server is shutting down");
      InferRequest req;
      try {
        req = decode_grpc(*q, &shm);
      } catch (const RequestError& e) {
        m.count_failure(e);
        throw;
      }
      const InferRequest header = req.header();
      encode_grpc(header, m.infer(std::move(req)), *r);
    });
  }
};

Server::Server(std::vector<std::unique_ptr<Model>> models, const ServerOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->opt = options;
  for (auto& m : models) {
    if (impl_->by_name.count(m->name()))
      throw Error(fmt::format("two engines are named '{}': a model's name is its file's stem; rename one", m->name()));
    impl_->by_name[m->name()] = m.get();
    impl_->models.push_back(std::move(m));
  }
}

Server::~Server() { shutdown(); }

void Server::start() {
  Impl& s = *impl_;
  s.routes();
  const int threads = s.opt.http_threads;
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  s.http.set_payload_max_length(s.opt.max_body_bytes);
  s.http.set_keep_alive_max_count(1000000);
  // An idle keep-alive connection holds a thread until this passes, and shutdown waits for it.
  s.http.set_keep_alive_timeout(2);
  s.http.set_tcp_nodelay(true);  // responses go out at once, not after the client's delayed ACK
  // httplib's stop() does nothing until the listening loop runs: wait for it, or a SIGTERM that came
  // while the engines loaded (sigwait returns at once) would leave shutdown() joining it forever.
  auto wait_running = [](const httplib::Server& srv) {
    for (int i = 0; i < 5000 && !srv.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  if (s.opt.http_port > 0) {
    if (!s.http.bind_to_port(s.opt.host, s.opt.http_port))
      throw Error(fmt::format("cannot listen on {}:{} (--http-port): the port is in use or not allowed", s.opt.host,
                              s.opt.http_port));
    s.http_thread = std::thread([&s] { s.http.listen_after_bind(); });
    wait_running(s.http);
  }
  if (s.opt.metrics_port > 0) {
    if (!s.metrics.bind_to_port(s.opt.host, s.opt.metrics_port))
      throw Error(fmt::format("cannot listen on {}:{} (--metrics-port): the port is in use or not allowed", s.opt.host,
                              s.opt.metrics_port));
    s.metrics_thread = std::thread([&s] { s.metrics.listen_after_bind(); });
    wait_running(s.metrics);
  }
  if (s.opt.grpc_port > 0) {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort(fmt::format("{}:{}", s.opt.host, s.opt.grpc_port), grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&s);
    // Each call holds its thread until its batch ran: keep up to http_threads of them polling instead
    // of gRPC's default two, above which a finished call's thread exits and the next call makes one.
    b.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::NUM_CQS,
                          static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    b.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 4);
    b.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, s.opt.http_threads);
    b.SetMaxReceiveMessageSize(static_cast<int>(std::min<size_t>(s.opt.max_body_bytes, INT32_MAX)));
    b.SetMaxSendMessageSize(static_cast<int>(std::min<size_t>(s.opt.max_body_bytes, INT32_MAX)));
    s.grpc_server = b.BuildAndStart();
    if (!s.grpc_server || port == 0)
      throw Error(fmt::format("cannot listen on {}:{} (--grpc-port): the port is in use or not allowed", s.opt.host,
                              s.opt.grpc_port));
  }
  s.ready = true;
}

void Server::shutdown() {
  Impl& s = *impl_;
  s.ready = false;
  for (auto& m : s.models) m->drain();
  if (s.grpc_server) {
    s.grpc_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    s.grpc_server.reset();
  }
  s.http.stop();
  s.metrics.stop();
  if (s.http_thread.joinable()) s.http_thread.join();
  if (s.metrics_thread.joinable()) s.metrics_thread.join();
}

}  // namespace kiln::serve
