// The device abstraction of the training library: memory and every operation a training step
// needs, as one interface with a CPU implementation (cpu_backend.h) and a GPU one (cuda_backend.h). Layers,
// the network and the solvers only call these methods, so a new device only adds a Backend.
//
// Contracts shared by all ops:
// - Layout is NCHW (images) or [N, F] (features), row-major, contiguous.
// - Inputs are the parameters named x, w, dy, ...; outputs are the non-const Tensor& parameters, and
//   are overwritten (never accumulated into), unless an op says otherwise. An output may not alias an
//   input unless the op says so.
// - An optional tensor (a bias) is passed as an undefined Tensor() when absent.
// - Ops may run asynchronously (a GPU stream); only download() waits for the device.
// - Results must be deterministic: the same inputs give the same bits on the same device, whatever
//   the thread count (no atomics-ordered float sums; a GPU backend picks deterministic algorithms).
// - A backend is used by one thread at a time (it keeps scratch memory between calls); data-parallel
//   training gives each device its own.
// - Element types: float32 always; the CPU backend also takes float64 (gradient checks), the GPU
//   backend float16 activations (mixed precision, compute_dtype()). A backend that lacks a type
//   throws kiln::Error naming the op.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "train/tensor.h"

namespace kiln::train {

enum class Activation { kRelu, kLeakyRelu, kSigmoid, kTanh, kGelu };  // GELU is the exact (erf) form
enum class PoolKind { kMax, kAverage };  // average pooling divides by the window's part inside the image

struct ConvGeometry {  // symmetric padding, as cuDNN takes it; [0] is the height, [1] the width
  int64_t kernel[2] = {1, 1};
  int64_t stride[2] = {1, 1};
  int64_t pad[2] = {0, 0};
  int64_t dilation[2] = {1, 1};
  int64_t groups = 1;
};

struct PoolGeometry {
  PoolKind kind = PoolKind::kMax;
  int64_t kernel[2] = {2, 2};
  int64_t stride[2] = {2, 2};
  int64_t pad[2] = {0, 0};
};

// One learned tensor and its solver state, for the optimizer ops. `m` is SGD's velocity or Adam's
// first moment, `v` Adam's second moment (undefined for SGD). All have the value's shape.
struct ParamSlot {
  Tensor value, grad, m, v;
  bool decay = true;  // weight decay applies (weights of conv and linear layers, not biases or BN)
};

// SGD with momentum (PyTorch's form): m = momentum * m + (grad + weight_decay * value);
// value -= lr * m.
struct SgdStep {
  float lr = 0.01f;
  float momentum = 0.9f;
  float weight_decay = 0;
};

// Adam: g = grad (+ weight_decay * value unless decoupled); m = b1 m + (1 - b1) g;
// v = b2 v + (1 - b2) g^2; value -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps), and with
// `decoupled` (AdamW) first value -= lr * weight_decay * value. t counts from 1.
struct AdamStep {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0;
  bool decoupled = false;
  int64_t t = 1;
};

// Running metrics on the device, a float64 tensor of kMetricsSize: the trainer reads it only when
// it logs, so a GPU step needs no host synchronization.
inline constexpr int64_t kMetricsSize = 4;
enum MetricsIndex { kLossSum = 0, kCorrect = 1, kCount = 2, kFirstBadStep = 3 };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;  // "cpu (2 threads)", "NVIDIA H200", ...
  // The element type of the activations of a network trained here: float16 for a mixed-precision
  // GPU backend, whose parameters stay float32 (master_dtype), float32 otherwise.
  virtual DataType compute_dtype() const { return DataType::kFloat32; }

  // ---- memory
  virtual Tensor alloc(DataType dtype, Shape shape) = 0;  // contents undefined
  // A tensor whose leading dimension is the batch (activations, their gradients, labels, masks):
  // a data-parallel backend gives each replica its rows of it, where alloc() replicates.
  virtual Tensor alloc_batch(DataType dtype, Shape shape) { return alloc(dtype, std::move(shape)); }
  // Copies dst.bytes() bytes from host memory. The host memory may be reused as soon as it returns.
  virtual void upload(const void* host, const Tensor& dst) = 0;
  // Waits for pending work, then copies src.bytes() bytes to host memory.
  virtual void download(const Tensor& src, void* host) = 0;
  virtual void fill(const Tensor& t, double value) = 0;
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;  // same dtype and element count
  // dst = src converted to dst's element type (same element count), rounding to nearest.
  virtual void cast(const Tensor& src, const Tensor& dst) = 0;

  // ---- elementwise and plumbing
  virtual void add(const Tensor& a, const Tensor& b, const Tensor& y) = 0;  // y may alias a or b
  virtual void mul(const Tensor& a, const Tensor& b, const Tensor& y) = 0;  // y may alias a or b
  // Concatenates along axis 1 (channels or features); split is its inverse (the backward of concat).
  virtual void concat(std::span<const Tensor> xs, const Tensor& y) = 0;
  virtual void split(const Tensor& y, std::span<const Tensor> xs) = 0;

  // ---- convolution. x [N,C,H,W], w [O,C/groups,KH,KW], b [O] or undefined, y [N,O,OH,OW].
  virtual void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                              const ConvGeometry& g) = 0;
  virtual void conv2d_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx, const ConvGeometry& g) = 0;
  // dw = gradient of the filter; db (if defined) = dy summed over N, OH, OW.
  virtual void conv2d_backward_filter(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& db,
                                      const ConvGeometry& g) = 0;

  // ---- linear. x [N,K], w [M,K], b [M] or undefined, y [N,M]: y = x w^T + b.
  virtual void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) = 0;
  virtual void linear_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx) = 0;  // dx = dy w
  // dw = dy^T x; db (if defined) = dy summed over N.
  virtual void linear_backward_weights(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& db) = 0;

  // ---- pooling. x [N,C,H,W], y [N,C,OH,OW]. Max pooling sends the gradient to the first maximum
  // of each window (in row-major order).
  virtual void pool2d_forward(const Tensor& x, const Tensor& y, const PoolGeometry& g) = 0;
  virtual void pool2d_backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                               const PoolGeometry& g) = 0;

  // ---- batch normalization per channel (axis 1) over the batch and spatial axes; x [N,C] or
  // [N,C,H,W], the other tensors [C].
  // Training: normalizes with the batch statistics, saves mean and 1/sqrt(var + eps) for the
  // backward pass, and updates running = (1 - momentum) * running + momentum * batch (the running
  // variance takes the unbiased batch variance), as PyTorch does.
  virtual void batchnorm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                                       const Tensor& running_mean, const Tensor& running_var, const Tensor& saved_mean,
                                       const Tensor& saved_inv_std, double momentum, double eps) = 0;
  virtual void batchnorm_forward_infer(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                       const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                                       double eps) = 0;
  virtual void batchnorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& saved_mean,
                                  const Tensor& saved_inv_std, const Tensor& dx, const Tensor& dgamma,
                                  const Tensor& dbeta) = 0;

  // ---- activations; alpha is LeakyReLU's negative slope. backward reads x or y as each needs.
  virtual void activation_forward(Activation a, float alpha, const Tensor& x, const Tensor& y) = 0;
  virtual void activation_backward(Activation a, float alpha, const Tensor& x, const Tensor& y, const Tensor& dy,
                                   const Tensor& dx) = 0;

  // ---- dropout: mask[i] = 0 if dropout_uniform(key, first + i) < p else 1 / (1 - p); y = x * mask.
  // The mask is a pure function of (key, first + i) (train/random.h), so every backend draws the
  // same one, and a data-parallel replica whose batch starts at global element `first` draws its
  // part of the single-device mask. The backward pass is mul(dy, mask, dx).
  virtual void dropout_forward(const Tensor& x, const Tensor& mask, const Tensor& y, float p, uint64_t key,
                               uint64_t first) = 0;

  // ---- loss. logits [N,C], labels int32 [N] in [0, C), probs [N,C], loss [1]:
  // loss = mean over the batch of -log softmax(logits)[label].
  virtual void softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels, const Tensor& probs,
                                             const Tensor& loss) = 0;
  // dlogits = scale * (probs - onehot(labels)) / N.
  virtual void softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, float scale,
                                              const Tensor& dlogits) = 0;
  // metrics (float64 [kMetricsSize], accumulated into): loss sum += loss * N, correct += argmax
  // hits (the first maximum wins), count += N, and first bad step = step if the loss is NaN or Inf
  // and no bad step was recorded (the slot holds -1 after fill).
  virtual void accumulate_metrics(const Tensor& loss, const Tensor& probs, const Tensor& labels, int64_t step,
                                  const Tensor& metrics) = 0;

  // ---- optimizers, over all parameters at once (a GPU may update them all in one launch).
  virtual void sgd_step(std::span<const ParamSlot> params, const SgdStep& s) = 0;
  virtual void adam_step(std::span<const ParamSlot> params, const AdamStep& s) = 0;
};

// The element type of parameters, their gradients and solver state, batch-norm statistics,
// probabilities and the loss in a network computing in `compute`: float16 networks keep them in
// float32 (master weights, mixed precision); other networks in their own type.
inline DataType master_dtype(DataType compute) { return compute == DataType::kFloat16 ? DataType::kFloat32 : compute; }

struct BackendOptions {
  std::string device = "cpu";  // cpu or gpu
  int threads = 0;             // CPU threads, 0: all cores
  bool fp16 = false;           // FP16 compute with FP32 master weights (GPU)
  int gpus = 1;                // data-parallel GPUs; the batch is split over them
  std::string timing_cache;    // GPU: file of cuDNN algorithm choices (algorithm_cache.h); empty: none
};

// The backend for `options`; throws kiln::Error for a device or mode this build cannot run.
std::unique_ptr<Backend> make_backend(const BackendOptions& options);

}  // namespace kiln::train
