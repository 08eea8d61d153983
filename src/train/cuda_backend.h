// The GPU training backend: every Backend op on one CUDA device, enqueued on a private stream with
// no host synchronization except download() (and the first call of each convolution shape, which
// times cuDNN's algorithms). Built only with KILN_CUDA; make_gpu_backend (gpu_backend.h) creates it.
//
// Where the ops come from:
// - convolution: cuDNN, with the fastest *deterministic* algorithm that cudnnFind* measures for each
//   shape (once, then cached); float32 runs with CUDNN_FMA_MATH (no TF32) and without Winograd;
// - linear layers: cuBLASLt (the runtime's GemmPlan; CUBLAS_COMPUTE_32F, never TF32), bias fused
//   into the forward product in float32;
// - everything else is our own kernels (cuda_*.cu): pooling (the interface's tie rule, first
//   maximum in row-major order, which cuDNN does not promise), batch norm (sums in double over fixed
//   chunks, so that replicas can all-reduce them), activations, dropout (random.h's counter-based
//   draws, the CPU's masks), softmax cross-entropy, device metrics and one multi-tensor optimizer
//   launch for all parameters.
// Reductions never use floating-point atomics: partial sums over fixed chunks are added in chunk
// order by the block that finishes last, so the same inputs give the same bits on the same device.
//
// Element types: activations and their gradients (x, y, dx, dy, masks, logits) are float32, or
// float16 in a mixed-precision network (compute_dtype() with fp16); parameters, their gradients,
// batch-norm tensors, probabilities and the loss are float32; metrics float64. A convolution or
// linear layer with float16 x and float32 w casts w to half for the product, and its weight
// gradient back to float32 (what PyTorch's autocast does). In fp16 mode the backend also owns a
// dynamic loss scale on the device: softmax_cross_entropy_backward multiplies by it, and the
// optimizer step checks every gradient, skips the step and halves the scale on Inf/NaN, and
// doubles it after kGrowthInterval clean steps.
//
// Memory comes from a per-backend CUDA memory pool (cudaMallocFromPoolAsync on the stream, never
// given back to the driver), so freeing and reallocating never synchronizes; uploads go through a
// ring of pinned staging buffers, so upload() returns without waiting for the device.
//
// A backend is driven from threads whose current CUDA device is its device (the constructor sets it
// for the calling thread); DataParallelBackend (data_parallel.h) runs one per GPU, each on its own
// thread, joined into a replica group with join_group().
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <array>
#include <map>
#include <memory>
#include <vector>

#include "train/backend.h"
#include "train/nccl_api.h"

namespace kiln::gpu {
class GemmPlan;
struct GemmDesc;
}  // namespace kiln::gpu

namespace kiln::train {

namespace cuda_detail {
struct DeviceState;
struct ConvPlan;
struct ParamTable;
}  // namespace cuda_detail

// The dynamic loss scale of mixed precision, as it sits in device memory.
struct LossScale {
  float scale = 65536.0f;
  int32_t overflow = 0;     // set by this step's gradient check, cleared by the update
  int32_t clean_steps = 0;  // steps since the last overflow or growth
  int32_t skipped = 0;      // steps skipped for overflow so far
};

class CudaBackend final : public Backend {
 public:
  static constexpr int32_t kGrowthInterval = 2000;  // clean steps before the loss scale doubles

  // Runs on CUDA device `device`, which becomes the calling thread's current device. fp16: a
  // mixed-precision backend (compute_dtype() is float16, with a dynamic loss scale).
  CudaBackend(int device, bool fp16);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override { return Device::kGpu; }
  std::string name() const override;
  DataType compute_dtype() const override { return fp16_ ? DataType::kFloat16 : DataType::kFloat32; }

  Tensor alloc(DataType dtype, Shape shape) override;
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

  // ---- data parallel
  // Makes this backend replica `group.rank`: from now on batch-norm sums, the loss, the metrics and
  // (before each optimizer step) the parameters' gradients are all-reduced over the group, on the
  // stream, so that every replica computes what one device would for the whole batch. The
  // communicator stays owned by the caller.
  void join_group(const ReplicaGroup& group);
  int device_index() const { return device_; }
  // The loss scale (fp16 mode) as it is on the device; waits for the device.
  LossScale loss_scale();

  // ---- for the backend's own .cu files
  enum class Slot { kWorkspace, kPartials, kWeight16, kGrad16, kSmall, kCount };
  cudaStream_t stream() const;
  cudnnHandle_t cudnn() const { return cudnn_; }
  // Device scratch of at least `bytes` for one op at a time, kept and grown as needed (growing is
  // stream-ordered, so it never synchronizes).
  void* scratch(Slot slot, size_t bytes);
  // Raw device memory from the backend's pool, stream-ordered.
  void* device_alloc(size_t bytes, const std::string& what);
  void device_free(void* p);
  // At least n zeroed counters for last-block reductions (cuda_internal.cuh); each kernel that uses
  // them leaves them zero.
  unsigned* counters(int64_t n);
  // Copies host memory to device memory through the pinned staging ring; returns at once.
  void stage(const void* host, void* device, size_t bytes);
  // Sums `count` elements over the replica group into recv (recv may be send); nothing without one.
  bool grouped() const { return group_.size > 1; }
  void all_reduce(const void* send, void* recv, size_t count, ncclDataType_t type);
  // w as an element type `dtype` pointer: w itself, or a cast copy in `slot`.
  const void* weights_as(const Tensor& w, DataType dtype, Slot slot);
  gpu::GemmPlan& gemm_plan(const gpu::GemmDesc& d);
  LossScale* loss_scale_device() const { return loss_scale_; }  // null unless fp16
  double* loss_stats() const { return loss_stats_; }            // [loss sum, count] of the last forward

 private:
  void release();  // the destructor's work, also after a failed constructor
  cuda_detail::ConvPlan& conv_plan(const Tensor& x, const Tensor& w, const Tensor& y, const ConvGeometry& g,
                                   const char* op);
  // The algorithm cache's key (algorithm_cache.h) of one direction of a convolution.
  std::string conv_key(const char* direction, const Tensor& x, const Tensor& w, const Tensor& y,
                       const ConvGeometry& g) const;
  const cuda_detail::ParamTable& param_table(std::span<const ParamSlot> params, bool adam);

  struct Staging {
    void* host = nullptr;
    size_t capacity = 0;
    cudaEvent_t done = nullptr;
    bool pending = false;
  };
  struct Scratch {
    void* data = nullptr;
    size_t bytes = 0;
  };

  int device_ = 0;
  bool fp16_ = false;
  std::string gpu_name_;  // the device's name, e.g. "NVIDIA H200"
  std::shared_ptr<cuda_detail::DeviceState> state_;  // stream and memory pool; tensors keep it alive
  cudnnHandle_t cudnn_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  std::vector<Staging> staging_;
  size_t next_staging_ = 0;
  std::array<Scratch, static_cast<size_t>(Slot::kCount)> scratch_{};
  unsigned* counters_ = nullptr;
  int64_t num_counters_ = 0;
  LossScale* loss_scale_ = nullptr;
  double* loss_stats_ = nullptr;
  ReplicaGroup group_;
  std::map<std::vector<int64_t>, std::unique_ptr<cuda_detail::ConvPlan>> conv_plans_;
  std::map<std::vector<int64_t>, std::unique_ptr<gpu::GemmPlan>> gemm_plans_;
  std::vector<std::unique_ptr<cuda_detail::ParamTable>> param_tables_;
};

}  // namespace kiln::train
