// The CPU training backend: every Backend op for float32 and float64 (the float64 form serves the
// gradient checks), in host memory. Work is split over a kiln::cpu::ThreadPool only where each
// output element is computed by one thread in a fixed order, so results are bit-identical for any
// thread count. Convolutions are im2row + GEMM (the runtime's SGEMM for float32) over chunks of
// samples, which bounds the scratch memory; the chunking depends on the shapes alone.
// Ops are split over three files: cpu_backend.cpp (memory, elementwise, loss, optimizers),
// cpu_conv.cpp (convolution, linear) and cpu_pool_norm.cpp (pooling, batch normalization).
#pragma once

#include <memory>
#include <vector>

#include "runtime/cpu/thread_pool.h"
#include "train/backend.h"

namespace kiln::train {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads);  // threads <= 0: all cores

  Device device() const override { return Device::kCpu; }
  std::string name() const override;

  Tensor alloc(DataType dtype, Shape shape) override;
  void upload(const void* host, const Tensor& dst) override;
  void download(const Tensor& src, void* host) override;
  void fill(const Tensor& t, double value) override;
  void copy(const Tensor& src, const Tensor& dst) override;
  void cast(const Tensor& src, const Tensor& dst) override;  // between float32 and float64

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

  cpu::ThreadPool& pool() { return pool_; }

 private:
  // Runs fn(begin, end) over [0, n) in chunks of about `grain` elements on the pool.
  void parallel(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  cpu::ThreadPool pool_;
  // Scratch for convolutions (im2row columns, transposed outputs), grown as needed and kept, so
  // that steady-state steps allocate nothing.
  std::vector<std::byte> col_, rows_;
};

}  // namespace kiln::train
