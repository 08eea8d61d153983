// `kiln serve`: the KServe v2 inference protocol over REST (cpp-httplib) and gRPC, Triton's
// model-configuration and statistics extensions, and Prometheus metrics, in front of one dynamic
// batcher per model (serve/model.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "serve/model.h"

namespace kiln::serve {

struct ServerOptions {
  std::string host = "0.0.0.0";
  int http_port = 8000;     // 0: no REST endpoint
  int grpc_port = 8001;     // 0: no gRPC endpoint
  int metrics_port = 8002;  // 0: no metrics endpoint
  int http_threads = 256;   // REST connections served at once (each waits on its batch)
  size_t max_body_bytes = size_t{1} << 30;
};

class Server {
 public:
  Server(std::vector<std::unique_ptr<Model>> models, const ServerOptions& options);
  ~Server();
  // Binds the ports and starts serving; throws kiln::Error naming a port it cannot bind.
  void start();
  // Readiness goes false, new requests get 503, queued and running ones finish; then the
  // endpoints close.
  void shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The model-configuration and statistics documents as JSON text (REST), shared with the tests.
std::string model_config_json(const Model& m);
std::string model_stats_json(const std::vector<const Model*>& models);
std::string metrics_text(const std::vector<const Model*>& models);

}  // namespace kiln::serve
