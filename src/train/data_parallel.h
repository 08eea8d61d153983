// Data-parallel training over several GPUs of one machine (`--gpus N`), as one Backend: the
// trainer, network and solver run unchanged and see a single device.
//
// Each GPU has its own CudaBackend and its own worker thread, which is the only thread that calls
// it. An op is handed to every worker's queue and returns at once; the workers enqueue it on their
// GPUs. Only alloc(), upload() and download() wait for the workers (alloc and upload because the
// caller's shapes and host memory are needed, download because it waits for the device anyway).
//
// What each replica holds: tensors from alloc() are replicated (parameters, their gradients, solver
// state, batch-norm statistics, the loss, metrics); tensors from alloc_batch() are split by rows:
// of a batch of n, replica r holds rows [first(n, r), first(n, r) + rows(n, r)), n / N each with
// the first n % N replicas taking one more. Uploads and downloads of batch tensors scatter and gather
// those rows. The replicas are joined into one NCCL group (CudaBackend::join_group), so batch norm
// normalizes with the whole batch's statistics, the loss and metrics are the whole batch's, and the
// gradients are summed before every optimizer step: N GPUs compute what one GPU would for the whole
// batch, up to rounding, and every replica applies the same update to the same weights. `--batch`
// is the whole batch. Dropout draws each replica's rows of the one-device mask.
//
// If an op fails on one replica, the group's communicators are aborted (so the other replicas'
// collectives return instead of waiting forever), the backend refuses further work, and the first
// error is thrown by the next call that waits.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "train/cuda_backend.h"

namespace kiln::train {

class DataParallelBackend final : public Backend {
 public:
  // Replicas on GPUs 0 .. gpus - 1 (gpus >= 2); loads NCCL (nccl_api.h).
  DataParallelBackend(int gpus, bool fp16);
  ~DataParallelBackend() override;
  DataParallelBackend(const DataParallelBackend&) = delete;
  DataParallelBackend& operator=(const DataParallelBackend&) = delete;

  Device device() const override { return Device::kGpu; }
  std::string name() const override { return name_; }
  DataType compute_dtype() const override { return fp16_ ? DataType::kFloat16 : DataType::kFloat32; }

  Tensor alloc(DataType dtype, Shape shape) override;
  Tensor alloc_batch(DataType dtype, Shape shape) override;
  void upload(const void* host, const Tensor& dst) override;
  void download(const Tensor& src, void* host) override;
  void fill(const Tensor& t, double value) override;
  void copy(const Tensor& src, const Tensor& dst) override;
  void cast(const Tensor& src, const Tensor& dst) override;

  void add(const Tensor& a, const Tensor& b, const Tensor& y) override;
  void mul(const Tensor& a, const Tensor& b, const Tensor& y) override;
  void concat(std::span<const Tensor> xs, const Tensor& y) override;
  void split(const Tensor& y, std::span<const Tensor> xs) override;

  void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                      const ConvGeometry& g) override;
  void conv2d_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx, const ConvGeometry& g) override;
  void conv2d_backward_filter(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& db,
                              const ConvGeometry& g) override;

  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) override;
  void linear_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx) override;
  void linear_backward_weights(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& db) override;

  void pool2d_forward(const Tensor& x, const Tensor& y, const PoolGeometry& g) override;
  void pool2d_backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                       const PoolGeometry& g) override;

  void batchnorm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                               const Tensor& running_mean, const Tensor& running_var, const Tensor& saved_mean,
                               const Tensor& saved_inv_std, double momentum, double eps) override;
  void batchnorm_forward_infer(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                               const Tensor& running_var, const Tensor& y, double eps) override;
  void batchnorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& saved_mean,
                          const Tensor& saved_inv_std, const Tensor& dx, const Tensor& dgamma,
                          const Tensor& dbeta) override;

  void activation_forward(Activation a, float alpha, const Tensor& x, const Tensor& y) override;
  void activation_backward(Activation a, float alpha, const Tensor& x, const Tensor& y, const Tensor& dy,
                           const Tensor& dx) override;
  void dropout_forward(const Tensor& x, const Tensor& mask, const Tensor& y, float p, uint64_t key,
                       uint64_t first) override;

  void softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels, const Tensor& probs,
                                     const Tensor& loss) override;
  void softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, float scale,
                                      const Tensor& dlogits) override;
  void accumulate_metrics(const Tensor& loss, const Tensor& probs, const Tensor& labels, int64_t step,
                          const Tensor& metrics) override;

  void sgd_step(std::span<const ParamSlot> params, const SgdStep& s) override;
  void adam_step(std::span<const ParamSlot> params, const AdamStep& s) override;

  int replicas() const { return static_cast<int>(workers_.size()); }
  // Replica r's part of t: its rows of a batch tensor, its copy of a replicated one.
  Tensor local(const Tensor& t, int r) const;
  // Runs fn on replica r's worker thread and waits for it (tests read a replica's state this way).
  void run_on(int r, const std::function<void(CudaBackend&)>& fn);

 private:
  struct Worker {
    std::thread thread;
    std::mutex mu;
    std::condition_variable work, idle;
    std::deque<std::function<void()>> queue;
    size_t posted = 0, done = 0;
    std::unique_ptr<CudaBackend> be;
  };

  void shutdown();  // the destructor's work, also after a failed constructor
  void work(Worker& w);
  void post(int r, std::function<void()> fn);
  // fn(replica backend, r) on every worker, after what was posted before; returns at once.
  void each(const std::function<void(CudaBackend&, int)>& fn);
  // Waits until every worker has run everything posted; throws the first error of any.
  void wait();
  void fail(std::exception_ptr e);
  Tensor make(DataType dtype, Shape shape, bool batched);
  int64_t rows(int64_t n, int r) const;
  int64_t first_row(int64_t n, int r) const;

  bool fp16_;
  std::string name_;
  const NcclApi* api_ = nullptr;
  std::vector<ncclComm_t> comms_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::mutex error_mu_;
  std::exception_ptr error_;  // the first failure; the backend is unusable after it
};

}  // namespace kiln::train
