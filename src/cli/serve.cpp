// kiln serve: engines behind the KServe v2 protocol (serve/server.h), until SIGTERM or SIGINT,
// which drain the queues and exit 0.
#include <fmt/format.h>
#include <pthread.h>

#include <csignal>
#include <filesystem>

#include "cli/commands.h"
#include "cli/common.h"
#include "serve/server.h"

namespace kiln::cli {

namespace {

std::vector<int64_t> int_list(const std::string& s, const char* option) {
  std::vector<int64_t> v;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t end = std::min(s.find(',', pos), s.size());
    const std::string item = s.substr(pos, end - pos);
    try {
      size_t used = 0;
      const long long x = std::stoll(item, &used);
      if (used != item.size() || x < 0) throw std::invalid_argument(item);
      v.push_back(x);
    } catch (const std::exception&) {
      throw Error(fmt::format("{} takes a comma-separated list of non-negative integers, got '{}'", option, s));
    }
    pos = end + 1;
  }
  return v;
}

}  // namespace

int run_serve(const ServeOptions& o) {
  // Every thread started from here on inherits the blocked signals; this one waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  serve::BatcherOptions bo;
  bo.instances = o.instances;
  bo.cpu_threads = o.threads;
  bo.max_queue_delay_us = o.max_queue_delay_us;
  if (o.max_queue < 1) throw Error("--max-queue must be at least 1");
  bo.max_queue = static_cast<size_t>(o.max_queue);
  bo.preferred_batch = int_list(o.preferred_batch, "--preferred-batch");
  std::sort(bo.preferred_batch.begin(), bo.preferred_batch.end());
  if (!bo.preferred_batch.empty() && bo.preferred_batch.front() < 1)
    throw Error(fmt::format("--preferred-batch takes batch sizes of at least 1, got '{}'", o.preferred_batch));
  for (int64_t d : int_list(o.devices, "--device")) bo.devices.push_back(static_cast<int>(d));
  if (o.max_queue_delay_us < 0 || o.max_queue_delay_us > 60'000'000)
    throw Error("--max-queue-delay-us takes 0 to 60000000 (a minute)");

  std::vector<std::unique_ptr<serve::Model>> models;
  for (const std::string& path : o.models) {
    const std::string name = std::filesystem::path(path).stem().string();
    auto engine = Engine::load(path);
    auto m = std::make_unique<serve::Model>(name, engine, bo);
    const serve::Signature& sig = m->signature();
    const std::string batching = sig.max_batch_size > 0 ? fmt::format("dynamic batching up to {}", sig.max_batch_size)
                                                        : fmt::format("no batching: {}", sig.why_not_batched);
    fmt::print(stderr, "kiln serve: model '{}' from {} ({}, {} context{}; {})\n", name, path, engine->summary().target,
               m->contexts(), m->contexts() == 1 ? "" : "s", batching);
    models.push_back(std::move(m));
  }
  serve::ServerOptions so;
  so.host = o.host;
  so.http_port = o.http_port;
  so.grpc_port = o.grpc_port;
  so.metrics_port = o.metrics_port;
  serve::Server server(std::move(models), so);
  server.start();
  if (o.http_port) fmt::print(stderr, "kiln serve: REST (KServe v2) on http://{}:{}/v2\n", o.host, o.http_port);
  if (o.grpc_port) fmt::print(stderr, "kiln serve: gRPC (KServe v2) on {}:{}\n", o.host, o.grpc_port);
  if (o.metrics_port) fmt::print(stderr, "kiln serve: metrics on http://{}:{}/metrics\n", o.host, o.metrics_port);
  fmt::print(stderr, "kiln serve: ready\n");

  int sig = 0;
  sigwait(&signals, &sig);
  fmt::print(stderr, "kiln serve: {}: draining the queues\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  server.shutdown();
  fmt::print(stderr, "kiln serve: stopped\n");
  return kExitOk;
}

}  // namespace kiln::cli
