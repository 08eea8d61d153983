#include "serve/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#if defined(KILN_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

#include "serve/batching.h"
#include "serve/shared_memory.h"

namespace kiln::serve {

namespace {

using Clock = std::chrono::steady_clock;

uint64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

}  // namespace

struct Model::Pending {
  InferRequest request;
  int64_t rows = 0;  // batched models: the request's batch
  std::string key;   // batched models: the non-batch dims; only equal keys share a batch
  Clock::time_point queued;
  std::promise<std::vector<Tensor>> done;
};

struct Model::Instance {
  std::unique_ptr<Context> ctx;
  int device = -1;  // -1: CPU
  CUstream_st* stream = nullptr;
  // One per input, the merged batch: host memory (CPU engines), or pinned host memory copied to
  // the instance's own device memory on its stream (GPU engines: one copy from the requests to
  // pinned memory, none through the context's staging).
  std::vector<std::vector<std::byte>> staging;
  std::vector<std::byte*> pinned;
  std::vector<void*> device_input;
  std::vector<size_t> capacity;
  // GPU engines: one pinned buffer per output, the size at the top of every range, that the
  // outputs are copied into from the context's device memory (the context keeps no host staging:
  // its staging would zero a range's padding on the host at every change of batch size).
  std::vector<std::byte*> pinned_output;
  std::byte* input_buffer(size_t i, size_t bytes) {
    if (device_input.empty()) {
      staging[i].resize(bytes);
      return staging[i].data();
    }
    if (bytes > capacity[i]) throw Error("a batch larger than the engine's inputs");  // validated before
    return pinned[i];
  }
};

Model::Model(std::string name, std::shared_ptr<const Engine> engine, const BatcherOptions& options)
    : name_(std::move(name)), engine_(std::move(engine)), sig_(serve::signature(*engine_)), opt_(options) {
  if (opt_.instances < 1) throw Error("--instances must be at least 1");
  std::vector<int> devices{-1};
  if (engine_->is_gpu()) devices = opt_.devices.empty() ? std::vector<int>{0} : opt_.devices;
  const int cores = cpu_thread_budget();  // the process's CPU threads (default: the cores it may use)
  for (int device : devices)
    for (int i = 0; i < opt_.instances; ++i) {
      auto inst = std::make_unique<Instance>();
      inst->device = device;
      ContextOptions co;
      co.cpu_threads = opt_.cpu_threads > 0 ? opt_.cpu_threads : std::max(1, cores / opt_.instances);
      co.host_staging = device < 0;
#if defined(KILN_HAVE_CUDA)
      if (device >= 0) {
        if (cudaSetDevice(device) != cudaSuccess)
          throw Error(fmt::format("model '{}': CUDA device {} is not available", name_, device));
        cudaStream_t s = nullptr;
        if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
          throw Error(fmt::format("model '{}': cannot create a CUDA stream on device {}", name_, device));
        inst->stream = s;
      }
#endif
      inst->ctx = engine_->create_context(co);
      inst->staging.resize(engine_->inputs().size());
#if defined(KILN_HAVE_CUDA)
      if (device >= 0)
        for (const TensorInfo& t : engine_->inputs()) {  // shapes at the top of every range: the largest
          void *h = nullptr, *d = nullptr;
          if (cudaHostAlloc(&h, std::max<size_t>(t.bytes(), 1), cudaHostAllocDefault) != cudaSuccess ||
              cudaMalloc(&d, std::max<size_t>(t.bytes(), 1)) != cudaSuccess)
            throw Error(fmt::format("model '{}': cannot allocate {} bytes for input '{}' on device {}", name_,
                                    t.bytes(), t.name, device));
          inst->pinned.push_back(static_cast<std::byte*>(h));
          inst->device_input.push_back(d);
          inst->capacity.push_back(t.bytes());
        }
      if (device >= 0)
        for (const TensorInfo& t : engine_->outputs()) {
          void* h = nullptr;
          if (cudaHostAlloc(&h, std::max<size_t>(t.bytes(), 1), cudaHostAllocDefault) != cudaSuccess)
            throw Error(fmt::format("model '{}': cannot allocate {} bytes of pinned memory for output '{}'", name_,
                                    t.bytes(), t.name));
          inst->pinned_output.push_back(static_cast<std::byte*>(h));
        }
#endif
      instances_.push_back(std::move(inst));
    }
  for (auto& inst : instances_) threads_.emplace_back([this, i = inst.get()] { worker(*i); });
}

Model::~Model() {
  drain();
#if defined(KILN_HAVE_CUDA)
  for (auto& inst : instances_) {
    inst->ctx.reset();
    for (std::byte* p : inst->pinned) cudaFreeHost(p);
    for (std::byte* p : inst->pinned_output) cudaFreeHost(p);
    for (void* p : inst->device_input) cudaFree(p);
    if (inst->stream) cudaStreamDestroy(inst->stream);
  }
#endif
}

bool Model::ready() const {
  std::lock_guard lock(mu_);
  return !stopping_;
}

void Model::drain() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
}

void Model::validate(const InferRequest& r, int64_t& rows, std::string& key) const {
  const std::string what = r.describe();
  auto bad = [](const std::string& m) { throw RequestError(RequestError::kBadRequest, m); };
  const bool batched = sig_.max_batch_size > 0;
  rows = -1;
  for (const ServedTensor& t : sig_.inputs) {
    auto it = std::find_if(r.inputs.begin(), r.inputs.end(), [&](const Tensor& x) { return x.name == t.name; });
    if (it == r.inputs.end()) bad(fmt::format("{}: input '{}' is missing", what, t.name));
    const std::string err = check_tensor(sig_, t, it->datatype, it->shape);
    if (!err.empty()) bad(what + ": " + err);
    if (batched) {
      if (rows >= 0 && it->shape[0] != rows)
        bad(fmt::format("{}: input '{}' has a batch of {}, other inputs {}", what, t.name, it->shape[0], rows));
      rows = it->shape[0];
      for (size_t a = 1; a < it->shape.size(); ++a) key += std::to_string(it->shape[a]) + ",";
      key += ";";
    }
  }
  const std::string range_err = check_ranges(*engine_, [&](const std::string& name) -> const std::vector<int64_t>* {
    for (const Tensor& x : r.inputs)
      if (x.name == name) return &x.shape;
    return nullptr;
  });
  if (!range_err.empty()) bad(what + ": " + range_err);
  for (const Tensor& x : r.inputs)
    if (std::none_of(sig_.inputs.begin(), sig_.inputs.end(), [&](const ServedTensor& t) { return t.name == x.name; }))
      bad(fmt::format("{}: the model has no input '{}'", what, x.name));
  for (const RequestedOutput& o : r.outputs)
    if (std::none_of(sig_.outputs.begin(), sig_.outputs.end(), [&](const ServedTensor& t) { return t.name == o.name; }))
      bad(fmt::format("{}: the model has no output '{}'", what, o.name));
}

void Model::count_failure(const RequestError& e) {
  std::lock_guard lock(stats_mu_);
  stats_.fail.add(0);
  const char* reason = e.kind == RequestError::kBadRequest    ? "bad_request"
                       : e.kind == RequestError::kUnavailable ? "unavailable"
                                                              : "internal";
  ++stats_.failures[reason];
}

std::vector<Tensor> Model::infer(InferRequest&& request) {
  auto p = std::make_unique<Pending>();
  try {
    validate(request, p->rows, p->key);
  } catch (const RequestError& e) {
    count_failure(e);
    throw;
  }
  p->request = std::move(request);
  p->queued = Clock::now();
  std::future<std::vector<Tensor>> result = p->done.get_future();
  {
    std::lock_guard lock(mu_);
    if (stopping_) {
      RequestError e(RequestError::kUnavailable, fmt::format("model '{}' is shutting down", name_));
      count_failure(e);
      throw e;
    }
    if (queue_.size() >= opt_.max_queue) {
      RequestError e(RequestError::kUnavailable,
                     fmt::format("{}: the queue of model '{}' is full ({} requests); retry later, or start the server "
                                 "with a larger --max-queue or more --instances",
                                 p->request.describe(), name_, queue_.size()));
      std::lock_guard slock(stats_mu_);
      stats_.fail.add(0);
      ++stats_.failures["queue_full"];
      throw e;
    }
    queue_.push_back(std::move(p));
  }
  cv_.notify_one();
  return result.get();
}

// Under `lock`: the requests of the next batch, taken off the queue; empty when stopping with an
// empty queue. Waits for the queue delay while a batch could still grow.
std::vector<std::unique_ptr<Model::Pending>> Model::next_batch(std::unique_lock<std::mutex>& lock) {
  const bool batched = sig_.max_batch_size > 0;
  const int64_t max_rows = batched ? sig_.max_batch_size : 1;
  int64_t target = max_rows;
  for (int64_t p : opt_.preferred_batch)
    if (p <= max_rows) target = p;  // ascending: the largest that fits
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return {};
    std::vector<size_t> picked;
    int64_t rows = 0;
    if (!batched) {
      picked.push_back(0);
    } else {
      // Without preferred sizes, batches of the engine's bucket sizes (batching.h).
      std::vector<QueuedRequest> queued;
      queued.reserve(queue_.size());
      for (const auto& p : queue_) queued.push_back({p->rows, p->key});
      const std::vector<int64_t> none;
      picked = pick_batch(queued, max_rows, opt_.preferred_batch.empty() ? sig_.buckets : none);
      for (size_t i : picked) rows += queue_[i]->rows;
    }
    const bool preferred =
        std::find(opt_.preferred_batch.begin(), opt_.preferred_batch.end(), rows) != opt_.preferred_batch.end();
    const auto deadline = queue_.front()->queued + std::chrono::microseconds(opt_.max_queue_delay_us);
    if (!batched || rows >= target || preferred || stopping_ || Clock::now() >= deadline) {
      std::vector<std::unique_ptr<Pending>> batch;
      for (size_t i : picked) batch.push_back(std::move(queue_[i]));
      for (size_t k = picked.size(); k-- > 0;) queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(picked[k]));
      return batch;
    }
    cv_.wait_until(lock, deadline);
  }
}

void Model::worker(Instance& inst) {
#if defined(KILN_HAVE_CUDA)
  if (inst.device >= 0) cudaSetDevice(inst.device);
#endif
  while (true) {
    std::vector<std::unique_ptr<Pending>> batch;
    {
      std::unique_lock lock(mu_);
      batch = next_batch(lock);
    }
    if (batch.empty()) return;
    // Another instance may take what this one left behind.
    cv_.notify_one();
    execute(inst, batch);
  }
}

void Model::run_context(Instance& inst) {
  if (inst.device < 0) {
    inst.ctx->run();
    return;
  }
#if defined(KILN_HAVE_CUDA)
  inst.ctx->enqueue(inst.stream);
  const cudaError_t err = cudaStreamSynchronize(inst.stream);
  if (err != cudaSuccess) throw Error(fmt::format("model '{}': the GPU failed: {}", name_, cudaGetErrorString(err)));
  inst.ctx->check();
#endif
}

void Model::execute(Instance& inst, std::vector<std::unique_ptr<Pending>>& batch) {
  const auto start = Clock::now();
  const bool batched = sig_.max_batch_size > 0;
  const Engine& e = *engine_;
  Context& ctx = *inst.ctx;
  int64_t rows = 0;
  for (auto& p : batch) rows += p->rows;
  const int64_t run_rows = batched ? std::max(rows, sig_.min_batch) : 0;
  std::vector<std::vector<Tensor>> results(batch.size());
  std::vector<int64_t> first_row(batch.size(), 0);  // each request's rows in the batch start here
  for (size_t b = 1; b < batch.size(); ++b) first_row[b] = first_row[b - 1] + batch[b - 1]->rows;
  Clock::time_point t_input, t_infer, t_end;
  try {
    // Inputs: one request, or a batch merged along axis 0 (zero rows up to the range's low end).
    for (size_t i = 0; i < e.inputs().size(); ++i) {
      const std::string& name = e.inputs()[i].name;
      auto find = [&](const InferRequest& r) -> const Tensor& {
        return *std::find_if(r.inputs.begin(), r.inputs.end(), [&](const Tensor& t) { return t.name == name; });
      };
      const Tensor& first = find(batch[0]->request);
      std::vector<int64_t> shape = first.shape;
      if (batched) shape[0] = run_rows;
      if (!e.ranges().empty()) ctx.set_input_shape(name, shape);
      const size_t row_bytes = batched ? first.bytes().size() / static_cast<size_t>(first.shape[0]) : 0;
      const size_t bytes = batched ? row_bytes * static_cast<size_t>(run_rows) : first.bytes().size();
#if defined(KILN_HAVE_CUDA)
      if (!inst.device_input.empty()) {
        // Each request's rows go to the device on their own: by DMA from a page-locked shared memory
        // region, else through the instance's pinned buffer, the copy of one request overlapping the
        // transfer of the one before.
        std::byte* dev = static_cast<std::byte*>(inst.device_input[i]);
        std::byte* pinned = inst.input_buffer(i, bytes);
        size_t off = 0;
        for (auto& p : batch) {
          const Tensor& t = find(p->request);
          const std::span<const std::byte> src = t.bytes();
          const std::byte* from = src.data();
          if (!(t.region && t.region->pinned)) {
            std::memcpy(pinned + off, src.data(), src.size());
            from = pinned + off;
          }
          if (!src.empty() &&
              cudaMemcpyAsync(dev + off, from, src.size(), cudaMemcpyHostToDevice, inst.stream) != cudaSuccess)
            throw Error(fmt::format("model '{}': copying input '{}' to the GPU failed", name_, name));
          off += src.size();
        }
        if (off < bytes && cudaMemsetAsync(dev + off, 0, bytes - off, inst.stream) != cudaSuccess)
          throw Error(fmt::format("model '{}': padding input '{}' on the GPU failed", name_, name));
        ctx.set_input_device(name, dev, bytes);
        continue;
      }
#endif
      const std::byte* data = first.bytes().data();
      // CPU engines read an input in place: one request's own bytes when they are aligned, else the
      // batch merged in the instance's buffer (zero rows up to the range's low end).
      if (batched || reinterpret_cast<uintptr_t>(data) % 16 != 0) {
        std::byte* buf = inst.input_buffer(i, bytes);
        size_t off = 0;
        for (auto& p : batch) {
          const std::span<const std::byte> src = find(p->request).bytes();
          std::memcpy(buf + off, src.data(), src.size());
          off += src.size();
        }
        std::memset(buf + off, 0, bytes - off);
        data = buf;
      }
      ctx.set_input(name, data, bytes);
    }
    t_input = Clock::now();
    run_context(inst);
    t_infer = Clock::now();
    // Outputs: on a GPU, every wanted one copied to the instance's pinned memory at once; then
    // split by each request's rows.
    std::vector<std::span<const std::byte>> out_bytes(e.outputs().size());
    std::vector<std::vector<int64_t>> out_shapes(e.outputs().size());
    for (size_t o = 0; o < e.outputs().size(); ++o) {
      const TensorInfo& info = e.outputs()[o];
      out_shapes[o] = ctx.output_shape(info.name);
      if (inst.device < 0) {
        out_bytes[o] = ctx.output(info.name);
        continue;
      }
#if defined(KILN_HAVE_CUDA)
      int64_t n = 1;
      for (int64_t d : out_shapes[o]) n *= d;
      const size_t bytes = static_cast<size_t>(n) * dtype_size(info.dtype);
      if (bytes && cudaMemcpyAsync(inst.pinned_output[o], ctx.output_device(info.name), bytes, cudaMemcpyDeviceToHost,
                                   inst.stream) != cudaSuccess)
        throw Error(fmt::format("model '{}': copying output '{}' from the GPU failed", name_, info.name));
      out_bytes[o] = {inst.pinned_output[o], bytes};
#endif
    }
#if defined(KILN_HAVE_CUDA)
    if (inst.device >= 0 && cudaStreamSynchronize(inst.stream) != cudaSuccess)
      throw Error(fmt::format("model '{}': copying the outputs from the GPU failed", name_));
#endif
    for (size_t o = 0; o < e.outputs().size(); ++o) {
      const TensorInfo& info = e.outputs()[o];
      bool wanted = false;
      for (auto& p : batch)
        wanted = wanted || p->request.outputs.empty() ||
                 std::any_of(p->request.outputs.begin(), p->request.outputs.end(),
                             [&](const RequestedOutput& r) { return r.name == info.name; });
      if (!wanted) continue;
      const std::vector<int64_t>& shape = out_shapes[o];
      const std::span<const std::byte> bytes = out_bytes[o];
      for (size_t b = 0; b < batch.size(); ++b) {
        const InferRequest& r = batch[b]->request;
        if (!r.outputs.empty() && std::none_of(r.outputs.begin(), r.outputs.end(),
                                               [&](const RequestedOutput& x) { return x.name == info.name; }))
          continue;
        Tensor t;
        t.name = info.name;
        t.dtype = info.dtype;
        t.datatype = std::string(kserve_datatype(info.dtype));
        t.shape = shape;
        size_t begin = 0, size = bytes.size();
        if (batched) {
          const size_t row_bytes = shape[0] > 0 ? bytes.size() / static_cast<size_t>(shape[0]) : 0;
          t.shape[0] = batch[b]->rows;
          begin = row_bytes * static_cast<size_t>(first_row[b]);
          size = row_bytes * static_cast<size_t>(batch[b]->rows);
        }
        t.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(begin),
                      bytes.begin() + static_cast<std::ptrdiff_t>(begin + size));
        results[b].push_back(std::move(t));
      }
    }
    t_end = Clock::now();
  } catch (const std::exception& ex) {
#if defined(KILN_HAVE_CUDA)
    // Copies from the requests' memory (a page-locked shared memory region) may still be queued:
    // finish them before the requests, and the regions they keep mapped, go.
    if (inst.device >= 0) cudaStreamSynchronize(inst.stream);
#endif
    // A shape the inputs do not agree on is the request's fault; anything else is the server's.
    const bool request_fault = !batched && dynamic_cast<const Error*>(&ex) && t_input == Clock::time_point{};
    const RequestError::Kind kind = request_fault ? RequestError::kBadRequest : RequestError::kInternal;
    {
      std::lock_guard lock(stats_mu_);
      for (size_t b = 0; b < batch.size(); ++b) {
        stats_.fail.add(ns_between(batch[b]->queued, Clock::now()));
        ++stats_.failures[request_fault ? "bad_request" : "internal"];
      }
    }
    for (auto& p : batch)  // each named by its own request, not the batch's first
      p->done.set_exception(
          std::make_exception_ptr(RequestError(kind, fmt::format("{}: {}", p->request.describe(), ex.what()))));
    return;
  }
  {
    std::lock_guard lock(stats_mu_);
    const int64_t size = batched ? rows : 1;
    BatchStats& bs = stats_.batches[size];
    ++bs.executions;
    bs.compute_input.add(ns_between(start, t_input));
    bs.compute_infer.add(ns_between(t_input, t_infer));
    bs.compute_output.add(ns_between(t_infer, t_end));
    ++stats_.execution_count;
    stats_.last_inference_ms = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());
    for (auto& p : batch) {
      stats_.inference_count += batched ? static_cast<uint64_t>(p->rows) : 1;
      stats_.queue.add(ns_between(p->queued, start));
      stats_.compute_input.add(ns_between(start, t_input));
      stats_.compute_infer.add(ns_between(t_input, t_infer));
      stats_.compute_output.add(ns_between(t_infer, t_end));
      stats_.success.add(ns_between(p->queued, t_end));
    }
  }
  for (size_t b = 0; b < batch.size(); ++b) batch[b]->done.set_value(std::move(results[b]));
}

ModelStats Model::stats() const {
  std::lock_guard lock(stats_mu_);
  return stats_;
}

}  // namespace kiln::serve
