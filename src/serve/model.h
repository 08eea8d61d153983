// A served model: one engine, its signature, a queue of requests, and a dynamic batcher that runs
// merged batches on N contexts (per GPU) sharing the engine's weights. Statistics for the
// protocol's statistics extension and for Prometheus.
#pragma once

#include <kiln/engine.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "serve/request.h"
#include "serve/signature.h"

namespace kiln::serve {

struct BatcherOptions {
  int instances = 1;                     // contexts per device (CPU engines: in all)
  std::vector<int> devices;              // GPU engines: CUDA device ids (empty: device 0)
  int cpu_threads = 0;                   // CPU engines: threads per context (0: the cores divided among the instances)
  int64_t max_queue_delay_us = 0;        // how long the oldest request may wait for a batch to fill
  std::vector<int64_t> preferred_batch;  // a batch of one of these sizes runs at once
  size_t max_queue = 1024;               // queued requests; more get 503 / UNAVAILABLE
};

struct Duration {
  uint64_t count = 0, ns = 0;
  void add(uint64_t n) { ++count, ns += n; }
};

struct BatchStats {
  uint64_t executions = 0;
  Duration compute_input, compute_infer, compute_output;
};

struct ModelStats {
  uint64_t inference_count = 0;  // rows of successful requests (a batch of 4 in one request counts 4)
  uint64_t execution_count = 0;  // engine runs
  uint64_t last_inference_ms = 0;
  Duration success, fail, queue, compute_input, compute_infer, compute_output;
  std::map<int64_t, BatchStats> batches;     // by batch size
  std::map<std::string, uint64_t> failures;  // by reason: "bad_request", "queue_full", "unavailable", "internal"
};

class Model {
 public:
  Model(std::string name, std::shared_ptr<const Engine> engine, const BatcherOptions& options);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const std::string& name() const { return name_; }
  const Signature& signature() const { return sig_; }
  const Engine& engine() const { return *engine_; }
  const BatcherOptions& options() const { return opt_; }
  int contexts() const { return static_cast<int>(instances_.size()); }

  // Checks the request against the model, queues it, and returns its outputs (the requested ones,
  // in the engine's order) once its batch ran. Throws RequestError: kBadRequest for a request the
  // model cannot take (it never reaches the queue), kUnavailable for a full queue or a draining
  // model, kInternal when the run failed.
  std::vector<Tensor> infer(InferRequest&& request);
  // Counts a request that failed before reaching the model (a body that did not decode).
  void count_failure(const RequestError& e);

  ModelStats stats() const;
  bool ready() const;
  // Stops taking requests, runs every queued one, and joins the instances.
  void drain();

 private:
  struct Pending;
  struct Instance;
  void validate(const InferRequest& r, int64_t& rows, std::string& key) const;
  void worker(Instance& inst);
  std::vector<std::unique_ptr<Pending>> next_batch(std::unique_lock<std::mutex>& lock);
  void execute(Instance& inst, std::vector<std::unique_ptr<Pending>>& batch);
  void run_context(Instance& inst);

  std::string name_;
  std::shared_ptr<const Engine> engine_;
  Signature sig_;
  BatcherOptions opt_;
  std::vector<std::unique_ptr<Instance>> instances_;
  std::vector<std::thread> threads_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Pending>> queue_;
  bool stopping_ = false;

  mutable std::mutex stats_mu_;
  ModelStats stats_;
};

}  // namespace kiln::serve
