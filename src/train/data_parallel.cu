// DataParallelBackend (see data_parallel.h): worker threads, replicated and row-split tensors, and
// the ops, each handed to every replica with its part of the tensors.
#include <cstdlib>
#include <cstring>
#include <string>

#include "train/cuda_internal.cuh"
#include "train/data_parallel.h"

namespace kiln::train {

using cuda_detail::require;

namespace {

// What a data-parallel tensor's buffer points to: one tensor per replica.
struct Shards {
  bool batched = false;
  std::vector<Tensor> local;
};

const Shards& shards(const Tensor& t) { return *t.data<Shards>(); }

}  // namespace

DataParallelBackend::DataParallelBackend(int gpus, bool fp16) : fp16_(fp16) {
  require(gpus >= 2, "data parallel", "needs two or more GPUs");
  // The all-reduces here are small (gradients, batch-norm sums): NVLink multicast (NVLS) buys
  // nothing for them, and a failure in it can take shared GPUs down; off unless the user says.
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  api_ = &nccl_api();
  comms_.assign(static_cast<size_t>(gpus), nullptr);
  std::vector<int> devices(static_cast<size_t>(gpus));
  for (int r = 0; r < gpus; ++r) devices[static_cast<size_t>(r)] = r;
  int current = 0;  // NCCL's initialization may leave another device current on this thread
  cuda_detail::check_cuda(cudaGetDevice(&current), "cudaGetDevice");
  const ncclResult_t init = api_->comm_init_all(comms_.data(), gpus, devices.data());
  cudaSetDevice(current);
  api_->check(init, "ncclCommInitAll over " + std::to_string(gpus) + " GPUs");
  for (int r = 0; r < gpus; ++r) {
    workers_.push_back(std::make_unique<Worker>());
    Worker& w = *workers_.back();
    w.thread = std::thread([this, &w] { work(w); });
  }
  try {
    for (int r = 0; r < gpus; ++r) {
      Worker* w = workers_[static_cast<size_t>(r)].get();
      const ReplicaGroup group{api_, comms_[static_cast<size_t>(r)], r, gpus};
      post(r, [w, r, fp16, group] {
        w->be = std::make_unique<CudaBackend>(r, fp16);
        w->be->join_group(group);
      });
    }
    wait();
    std::string gpu;
    run_on(0, [&](CudaBackend& be) { gpu = be.name(); });
    name_ = std::to_string(gpus) + " x " + gpu + ", data parallel (NCCL " + std::to_string(api_->version / 10000) +
            "." + std::to_string(api_->version / 100 % 100) + ")";
  } catch (...) {
    shutdown();
    throw;
  }
}

DataParallelBackend::~DataParallelBackend() { shutdown(); }

void DataParallelBackend::shutdown() {
  for (size_t r = 0; r < workers_.size(); ++r) {
    Worker* w = workers_[r].get();
    post(static_cast<int>(r), [w] { w->be.reset(); });
  }
  for (auto& w : workers_) {
    {
      std::lock_guard<std::mutex> l(w->mu);
      w->queue.push_back(nullptr);  // stop
      ++w->posted;
    }
    w->work.notify_all();
    if (w->thread.joinable()) w->thread.join();
  }
  workers_.clear();
  for (ncclComm_t c : comms_)  // fail() aborted and cleared them after an error
    if (c) api_->comm_destroy(c);
  comms_.clear();
}

// ---- workers

void DataParallelBackend::work(Worker& w) {
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock<std::mutex> l(w.mu);
      w.work.wait(l, [&] { return !w.queue.empty(); });
      fn = std::move(w.queue.front());
      w.queue.pop_front();
    }
    if (!fn) return;
    bool failed;
    {
      std::lock_guard<std::mutex> l(error_mu_);
      failed = error_ != nullptr;
    }
    if (!failed) {
      try {
        fn();
      } catch (...) {
        fail(std::current_exception());
      }
    }
    fn = nullptr;  // tensors the op held are released on this thread, its GPU current
    {
      std::lock_guard<std::mutex> l(w.mu);
      ++w.done;
    }
    w.idle.notify_all();
  }
}

void DataParallelBackend::fail(std::exception_ptr e) {
  std::lock_guard<std::mutex> l(error_mu_);
  if (error_) return;
  error_ = e;
  // The other replicas may be waiting in a collective this one will never join.
  for (ncclComm_t c : comms_)
    if (c) api_->comm_abort(c);
  comms_.assign(comms_.size(), nullptr);
}

void DataParallelBackend::post(int r, std::function<void()> fn) {
  Worker& w = *workers_[static_cast<size_t>(r)];
  {
    std::lock_guard<std::mutex> l(w.mu);
    w.queue.push_back(std::move(fn));
    ++w.posted;
  }
  w.work.notify_one();
}

void DataParallelBackend::each(const std::function<void(CudaBackend&, int)>& fn) {
  {
    std::lock_guard<std::mutex> l(error_mu_);
    if (error_) std::rethrow_exception(error_);
  }
  for (int r = 0; r < replicas(); ++r) {
    Worker* w = workers_[static_cast<size_t>(r)].get();
    post(r, [w, r, fn] { fn(*w->be, r); });
  }
}

void DataParallelBackend::wait() {
  for (auto& w : workers_) {
    std::unique_lock<std::mutex> l(w->mu);
    w->idle.wait(l, [&] { return w->done == w->posted; });
  }
  std::lock_guard<std::mutex> l(error_mu_);
  if (error_) std::rethrow_exception(error_);
}

void DataParallelBackend::run_on(int r, const std::function<void(CudaBackend&)>& fn) {
  Worker* w = workers_.at(static_cast<size_t>(r)).get();
  post(r, [w, &fn] { fn(*w->be); });
  wait();
}

// ---- tensors

int64_t DataParallelBackend::rows(int64_t n, int r) const {
  const int64_t k = replicas();
  return n / k + (r < n % k ? 1 : 0);
}

int64_t DataParallelBackend::first_row(int64_t n, int r) const {
  const int64_t k = replicas();
  return r * (n / k) + std::min<int64_t>(r, n % k);
}

Tensor DataParallelBackend::local(const Tensor& t, int r) const {
  if (!t.defined()) return Tensor();
  const Shards& s = shards(t);
  Shape shape = t.shape();
  if (s.batched) shape.at(0) = rows(shape.at(0), r);
  return s.local[static_cast<size_t>(r)].view(std::move(shape));
}

Tensor DataParallelBackend::make(DataType dtype, Shape shape, bool batched) {
  for (int64_t d : shape) require(d >= 0, "alloc", "negative dimension in " + shape_string(shape));
  require(!batched || !shape.empty(), "alloc_batch", "a batch tensor needs a leading batch dimension");
  auto s = std::make_unique<Shards>();
  s->batched = batched;
  s->local.resize(workers_.size());
  Shape part = shape;
  if (batched) part[0] = rows(shape[0], 0);  // replica 0 has the most rows
  Shards* raw = s.get();
  each([raw, dtype, part](CudaBackend& be, int r) { raw->local[static_cast<size_t>(r)] = be.alloc(dtype, part); });
  wait();
  auto buf = std::make_shared<Buffer>();
  buf->bytes = static_cast<size_t>(numel_of(shape)) * dtype_size(dtype);
  buf->device = Device::kGpu;
  buf->data = s.release();
  buf->release = [](void* p) { delete static_cast<Shards*>(p); };
  return Tensor(dtype, std::move(shape), std::move(buf));
}

Tensor DataParallelBackend::alloc(DataType dtype, Shape shape) { return make(dtype, std::move(shape), false); }

Tensor DataParallelBackend::alloc_batch(DataType dtype, Shape shape) { return make(dtype, std::move(shape), true); }

void DataParallelBackend::upload(const void* host, const Tensor& dst) {
  const bool batched = shards(dst).batched;
  const int64_t n = batched ? dst.dim(0) : 0;
  const size_t row = batched && n > 0 ? dst.bytes() / static_cast<size_t>(n) : 0;
  const auto* bytes = static_cast<const uint8_t*>(host);
  // Waits: the caller may reuse `host` as soon as this returns.
  each([this, dst, bytes, batched, n, row](CudaBackend& be, int r) {
    be.upload(batched ? bytes + static_cast<size_t>(first_row(n, r)) * row : bytes, local(dst, r));
  });
  wait();
}

void DataParallelBackend::download(const Tensor& src, void* host) {
  const bool batched = shards(src).batched;
  const int64_t n = batched ? src.dim(0) : 0;
  const size_t row = batched && n > 0 ? src.bytes() / static_cast<size_t>(n) : 0;
  auto* bytes = static_cast<uint8_t*>(host);
  each([this, src, bytes, batched, n, row](CudaBackend& be, int r) {
    if (batched)
      be.download(local(src, r), bytes + static_cast<size_t>(first_row(n, r)) * row);
    else if (r == 0)
      be.download(local(src, 0), bytes);
  });
  wait();
}

void DataParallelBackend::fill(const Tensor& t, double value) {
  each([this, t, value](CudaBackend& be, int r) { be.fill(local(t, r), value); });
}

void DataParallelBackend::copy(const Tensor& src, const Tensor& dst) {
  require(shards(src).batched == shards(dst).batched, "copy", "between a batch tensor and a replicated one");
  each([this, src, dst](CudaBackend& be, int r) { be.copy(local(src, r), local(dst, r)); });
}

void DataParallelBackend::cast(const Tensor& src, const Tensor& dst) {
  require(shards(src).batched == shards(dst).batched, "cast", "between a batch tensor and a replicated one");
  each([this, src, dst](CudaBackend& be, int r) { be.cast(local(src, r), local(dst, r)); });
}

// ---- ops: every replica runs the op on its part

void DataParallelBackend::add(const Tensor& a, const Tensor& b, const Tensor& y) {
  each([this, a, b, y](CudaBackend& be, int r) { be.add(local(a, r), local(b, r), local(y, r)); });
}

void DataParallelBackend::mul(const Tensor& a, const Tensor& b, const Tensor& y) {
  each([this, a, b, y](CudaBackend& be, int r) { be.mul(local(a, r), local(b, r), local(y, r)); });
}

void DataParallelBackend::concat(std::span<const Tensor> xs, const Tensor& y) {
  each([this, parts = std::vector<Tensor>(xs.begin(), xs.end()), y](CudaBackend& be, int r) {
    std::vector<Tensor> lx;
    for (const Tensor& x : parts) lx.push_back(local(x, r));
    be.concat(lx, local(y, r));
  });
}

void DataParallelBackend::split(const Tensor& y, std::span<const Tensor> xs) {
  each([this, parts = std::vector<Tensor>(xs.begin(), xs.end()), y](CudaBackend& be, int r) {
    std::vector<Tensor> lx;
    for (const Tensor& x : parts) lx.push_back(local(x, r));
    be.split(local(y, r), lx);
  });
}

void DataParallelBackend::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                                         const ConvGeometry& g) {
  each([this, x, w, b, y, g](CudaBackend& be, int r) {
    be.conv2d_forward(local(x, r), local(w, r), local(b, r), local(y, r), g);
  });
}

void DataParallelBackend::conv2d_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx,
                                               const ConvGeometry& g) {
  each([this, dy, w, dx, g](CudaBackend& be, int r) {
    be.conv2d_backward_data(local(dy, r), local(w, r), local(dx, r), g);
  });
}

void DataParallelBackend::conv2d_backward_filter(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& db,
                                                 const ConvGeometry& g) {
  each([this, x, dy, dw, db, g](CudaBackend& be, int r) {
    be.conv2d_backward_filter(local(x, r), local(dy, r), local(dw, r), local(db, r), g);
  });
}

void DataParallelBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  each([this, x, w, b, y](CudaBackend& be, int r) {
    be.linear_forward(local(x, r), local(w, r), local(b, r), local(y, r));
  });
}

void DataParallelBackend::linear_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx) {
  each([this, dy, w, dx](CudaBackend& be, int r) { be.linear_backward_data(local(dy, r), local(w, r), local(dx, r)); });
}

void DataParallelBackend::linear_backward_weights(const Tensor& x, const Tensor& dy, const Tensor& dw,
                                                  const Tensor& db) {
  each([this, x, dy, dw, db](CudaBackend& be, int r) {
    be.linear_backward_weights(local(x, r), local(dy, r), local(dw, r), local(db, r));
  });
}

void DataParallelBackend::pool2d_forward(const Tensor& x, const Tensor& y, const PoolGeometry& g) {
  each([this, x, y, g](CudaBackend& be, int r) { be.pool2d_forward(local(x, r), local(y, r), g); });
}

void DataParallelBackend::pool2d_backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                                          const PoolGeometry& g) {
  each([this, x, y, dy, dx, g](CudaBackend& be, int r) {
    be.pool2d_backward(local(x, r), local(y, r), local(dy, r), local(dx, r), g);
  });
}

void DataParallelBackend::batchnorm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                                  const Tensor& y, const Tensor& running_mean,
                                                  const Tensor& running_var, const Tensor& saved_mean,
                                                  const Tensor& saved_inv_std, double momentum, double eps) {
  each([=, this](CudaBackend& be, int r) {
    be.batchnorm_forward_train(local(x, r), local(gamma, r), local(beta, r), local(y, r), local(running_mean, r),
                               local(running_var, r), local(saved_mean, r), local(saved_inv_std, r), momentum, eps);
  });
}

void DataParallelBackend::batchnorm_forward_infer(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                                  const Tensor& running_mean, const Tensor& running_var,
                                                  const Tensor& y, double eps) {
  each([=, this](CudaBackend& be, int r) {
    be.batchnorm_forward_infer(local(x, r), local(gamma, r), local(beta, r), local(running_mean, r),
                               local(running_var, r), local(y, r), eps);
  });
}

void DataParallelBackend::batchnorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                                             const Tensor& saved_mean, const Tensor& saved_inv_std, const Tensor& dx,
                                             const Tensor& dgamma, const Tensor& dbeta) {
  each([=, this](CudaBackend& be, int r) {
    be.batchnorm_backward(local(x, r), local(dy, r), local(gamma, r), local(saved_mean, r), local(saved_inv_std, r),
                          local(dx, r), local(dgamma, r), local(dbeta, r));
  });
}

void DataParallelBackend::activation_forward(Activation a, float alpha, const Tensor& x, const Tensor& y) {
  each([=, this](CudaBackend& be, int r) { be.activation_forward(a, alpha, local(x, r), local(y, r)); });
}

void DataParallelBackend::activation_backward(Activation a, float alpha, const Tensor& x, const Tensor& y,
                                              const Tensor& dy, const Tensor& dx) {
  each([=, this](CudaBackend& be, int r) {
    be.activation_backward(a, alpha, local(x, r), local(y, r), local(dy, r), local(dx, r));
  });
}

void DataParallelBackend::dropout_forward(const Tensor& x, const Tensor& mask, const Tensor& y, float p, uint64_t key,
                                          uint64_t first) {
  require(shards(x).batched, "dropout_forward", "x must be a batch tensor");
  const int64_t n = x.dim(0), per_row = n > 0 ? x.numel() / n : 0;
  // Replica r draws elements first + (its first row) * per_row on: its rows of the one-device mask.
  each([=, this](CudaBackend& be, int r) {
    be.dropout_forward(local(x, r), local(mask, r), local(y, r), p, key,
                       first + static_cast<uint64_t>(first_row(n, r) * per_row));
  });
}

void DataParallelBackend::softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels, const Tensor& probs,
                                                        const Tensor& loss) {
  each([=, this](CudaBackend& be, int r) {
    be.softmax_cross_entropy_forward(local(logits, r), local(labels, r), local(probs, r), local(loss, r));
  });
}

void DataParallelBackend::softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, float scale,
                                                         const Tensor& dlogits) {
  each([=, this](CudaBackend& be, int r) {
    be.softmax_cross_entropy_backward(local(probs, r), local(labels, r), scale, local(dlogits, r));
  });
}

void DataParallelBackend::accumulate_metrics(const Tensor& loss, const Tensor& probs, const Tensor& labels,
                                             int64_t step, const Tensor& metrics) {
  each([=, this](CudaBackend& be, int r) {
    be.accumulate_metrics(local(loss, r), local(probs, r), local(labels, r), step, local(metrics, r));
  });
}

namespace {

std::vector<ParamSlot> local_slots(const DataParallelBackend& dp, const std::vector<ParamSlot>& params, int r) {
  std::vector<ParamSlot> out;
  out.reserve(params.size());
  for (const ParamSlot& p : params)
    out.push_back({dp.local(p.value, r), dp.local(p.grad, r), dp.local(p.m, r), dp.local(p.v, r), p.decay});
  return out;
}

}  // namespace

void DataParallelBackend::sgd_step(std::span<const ParamSlot> params, const SgdStep& s) {
  each([this, slots = std::vector<ParamSlot>(params.begin(), params.end()), s](CudaBackend& be, int r) {
    be.sgd_step(local_slots(*this, slots, r), s);
  });
}

void DataParallelBackend::adam_step(std::span<const ParamSlot> params, const AdamStep& s) {
  each([this, slots = std::vector<ParamSlot>(params.begin(), params.end()), s](CudaBackend& be, int r) {
    be.adam_step(local_slots(*this, slots, r), s);
  });
}

}  // namespace kiln::train
