// CPU backend: memory, elementwise ops, activations, dropout, the loss, metrics and optimizers
// (convolution and linear layers are in cpu_conv.cpp, pooling and batch norm in cpu_pool_norm.cpp).
// Sums that feed results (the loss) run sequentially in double, so they do not depend on threads.
#include "train/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "train/cpu_internal.h"
#include "train/gpu_backend.h"
#include "train/random.h"

namespace kiln::train {

using cpu_detail::dispatch;
using cpu_detail::require;
using cpu_detail::require_same;

namespace {

constexpr int64_t kGrain = 1 << 14;  // elements per task of an elementwise loop

}  // namespace

CpuBackend::CpuBackend(int threads) : pool_(threads) {}

std::string CpuBackend::name() const {
  return "cpu (" + std::to_string(pool_.size()) + (pool_.size() == 1 ? " thread)" : " threads)");
}

void CpuBackend::parallel(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t tasks = (n + grain - 1) / grain;
  if (tasks == 1) return fn(0, n);
  pool_.parallel_for(tasks, [&](int64_t b, int64_t e) { fn(b * grain, std::min(n, e * grain)); });
}

Tensor CpuBackend::alloc(DataType dtype, Shape shape) {
  for (int64_t d : shape) require(d >= 0, "alloc", "negative dimension in " + shape_string(shape));
  auto buf = std::make_shared<Buffer>();
  // 64-byte alignment suits every SIMD width of the GEMM; at least one byte so data() is never null.
  buf->bytes = std::max<size_t>(numel_of(shape) * dtype_size(dtype), 1);
  buf->data = ::operator new (buf->bytes, std::align_val_t{64});
  buf->release = [](void* p) { ::operator delete (p, std::align_val_t{64}); };
  return Tensor(dtype, std::move(shape), std::move(buf));
}

void CpuBackend::upload(const void* host, const Tensor& dst) { std::memcpy(dst.data<void>(), host, dst.bytes()); }

void CpuBackend::download(const Tensor& src, void* host) { std::memcpy(host, src.data<void>(), src.bytes()); }

void CpuBackend::fill(const Tensor& t, double value) {
  switch (t.dtype()) {
    case DataType::kFloat32: std::fill_n(t.data<float>(), t.numel(), static_cast<float>(value)); return;
    case DataType::kFloat64: std::fill_n(t.data<double>(), t.numel(), value); return;
    case DataType::kInt32: std::fill_n(t.data<int32_t>(), t.numel(), static_cast<int32_t>(value)); return;
    default: require(false, "fill", "unsupported dtype " + std::string(dtype_name(t.dtype())));
  }
}

void CpuBackend::copy(const Tensor& src, const Tensor& dst) {
  require_same(src, dst, "copy");
  if (!src.same_memory(dst)) std::memcpy(dst.data<void>(), src.data<void>(), src.bytes());
}

void CpuBackend::cast(const Tensor& src, const Tensor& dst) {
  require(src.numel() == dst.numel(), "cast", "element counts differ");
  dispatch(src, "cast", [&](auto s) {
    dispatch(dst, "cast", [&](auto d) {
      using S = decltype(s);
      using D = decltype(d);
      std::copy_n(src.data<S>(), src.numel(), dst.data<D>());
    });
  });
}

void CpuBackend::add(const Tensor& a, const Tensor& b, const Tensor& y) {
  require_same(a, b, "add");
  require_same(a, y, "add");
  dispatch(a, "add", [&](auto t) {
    using T = decltype(t);
    const T *pa = a.data<T>(), *pb = b.data<T>();
    T* py = y.data<T>();
    parallel(a.numel(), kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) py[i] = pa[i] + pb[i];
    });
  });
}

void CpuBackend::mul(const Tensor& a, const Tensor& b, const Tensor& y) {
  require_same(a, b, "mul");
  require_same(a, y, "mul");
  dispatch(a, "mul", [&](auto t) {
    using T = decltype(t);
    const T *pa = a.data<T>(), *pb = b.data<T>();
    T* py = y.data<T>();
    parallel(a.numel(), kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) py[i] = pa[i] * pb[i];
    });
  });
}

namespace {

// Copies between y [N, sum of C_i, ...] and the parts xs [N, C_i, ...] along axis 1.
template <class T>
void concat_copy(std::span<const Tensor> xs, const Tensor& y, bool to_y) {
  int64_t n = y.dim(0);
  int64_t row = y.numel() / std::max<int64_t>(n, 1);  // elements of one sample in y
  int64_t offset = 0;
  for (const Tensor& x : xs) {
    int64_t part = x.numel() / std::max<int64_t>(n, 1);
    require(x.dim(0) == n && x.dtype() == y.dtype(), "concat", "parts differ from the output in batch or dtype");
    for (int64_t i = 0; i < n; ++i) {
      T* yp = y.data<T>() + i * row + offset;
      T* xp = x.data<T>() + i * part;
      if (to_y)
        std::memcpy(yp, xp, part * sizeof(T));
      else
        std::memcpy(xp, yp, part * sizeof(T));
    }
    offset += part;
  }
  require(offset == row, "concat", "the parts' sizes do not add up to the output's");
}

}  // namespace

void CpuBackend::concat(std::span<const Tensor> xs, const Tensor& y) {
  dispatch(y, "concat", [&](auto t) { concat_copy<decltype(t)>(xs, y, true); });
}

void CpuBackend::split(const Tensor& y, std::span<const Tensor> xs) {
  dispatch(y, "split", [&](auto t) { concat_copy<decltype(t)>(xs, y, false); });
}

namespace {

// y = f(x) elementwise for one activation; the switch over kinds sits outside the loops.
template <class T, class Fn>
void map1(CpuBackend& be, const Tensor& x, const Tensor& y, Fn fn) {
  const T* px = x.data<T>();
  T* py = y.data<T>();
  be.pool().parallel_for((x.numel() + kGrain - 1) / kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo * kGrain, end = std::min(hi * kGrain, x.numel()); i < end; ++i) py[i] = fn(px[i]);
  });
}

// dx = g(x, y, dy) elementwise.
template <class T, class Fn>
void map3(CpuBackend& be, const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx, Fn fn) {
  const T *px = x.data<T>(), *py = y.data<T>(), *pdy = dy.data<T>();
  T* pdx = dx.data<T>();
  be.pool().parallel_for((x.numel() + kGrain - 1) / kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo * kGrain, end = std::min(hi * kGrain, x.numel()); i < end; ++i)
      pdx[i] = fn(px[i], py[i], pdy[i]);
  });
}

}  // namespace

void CpuBackend::activation_forward(Activation a, float alpha, const Tensor& x, const Tensor& y) {
  require_same(x, y, "activation_forward");
  dispatch(x, "activation_forward", [&](auto t) {
    using T = decltype(t);
    const T al = static_cast<T>(alpha);
    switch (a) {
      case Activation::kRelu: return map1<T>(*this, x, y, [](T v) { return v > 0 ? v : T(0); });
      case Activation::kLeakyRelu: return map1<T>(*this, x, y, [al](T v) { return v > 0 ? v : al * v; });
      case Activation::kSigmoid: return map1<T>(*this, x, y, [](T v) { return T(1) / (T(1) + std::exp(-v)); });
      case Activation::kTanh: return map1<T>(*this, x, y, [](T v) { return std::tanh(v); });
      case Activation::kGelu:
        return map1<T>(*this, x, y, [](T v) { return T(0.5) * v * (T(1) + std::erf(v * T(M_SQRT1_2))); });
    }
  });
}

void CpuBackend::activation_backward(Activation a, float alpha, const Tensor& x, const Tensor& y, const Tensor& dy,
                                     const Tensor& dx) {
  require_same(x, dy, "activation_backward");
  require_same(x, dx, "activation_backward");
  dispatch(x, "activation_backward", [&](auto t) {
    using T = decltype(t);
    const T al = static_cast<T>(alpha);
    // 1 / sqrt(2 pi), the Gaussian density's constant in GELU's derivative.
    const T inv_sqrt_2pi = static_cast<T>(0.3989422804014327);
    switch (a) {
      case Activation::kRelu: return map3<T>(*this, x, y, dy, dx, [](T v, T, T g) { return v > 0 ? g : T(0); });
      case Activation::kLeakyRelu:
        return map3<T>(*this, x, y, dy, dx, [al](T v, T, T g) { return v > 0 ? g : al * g; });
      case Activation::kSigmoid:
        return map3<T>(*this, x, y, dy, dx, [](T, T out, T g) { return g * out * (T(1) - out); });
      case Activation::kTanh: return map3<T>(*this, x, y, dy, dx, [](T, T out, T g) { return g * (T(1) - out * out); });
      case Activation::kGelu:
        return map3<T>(*this, x, y, dy, dx, [inv_sqrt_2pi](T v, T, T g) {
          T cdf = T(0.5) * (T(1) + std::erf(v * T(M_SQRT1_2)));
          return g * (cdf + v * inv_sqrt_2pi * std::exp(T(-0.5) * v * v));
        });
    }
  });
}

void CpuBackend::dropout_forward(const Tensor& x, const Tensor& mask, const Tensor& y, float p, uint64_t key,
                                 uint64_t first) {
  require_same(x, mask, "dropout_forward");
  require_same(x, y, "dropout_forward");
  require(p >= 0 && p < 1, "dropout_forward", "p must be in [0, 1)");
  dispatch(x, "dropout_forward", [&](auto t) {
    using T = decltype(t);
    const T* px = x.data<T>();
    T *pm = mask.data<T>(), *py = y.data<T>();
    const T keep = static_cast<T>(1.0 / (1.0 - p));
    parallel(x.numel(), kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        pm[i] = dropout_uniform(key, first + static_cast<uint64_t>(i)) < p ? T(0) : keep;
        py[i] = px[i] * pm[i];
      }
    });
  });
}

void CpuBackend::softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels, const Tensor& probs,
                                               const Tensor& loss) {
  require(logits.rank() == 2 && labels.dtype() == DataType::kInt32 && labels.numel() == logits.dim(0),
          "softmax_cross_entropy_forward", "expected logits [N,C] and int32 labels [N]");
  require_same(logits, probs, "softmax_cross_entropy_forward");
  const int64_t n = logits.dim(0), c = logits.dim(1);
  const int32_t* lab = labels.data<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    require(lab[i] >= 0 && lab[i] < c, "softmax_cross_entropy_forward",
            "label " + std::to_string(lab[i]) + " is outside [0, " + std::to_string(c) + ")");
  dispatch(logits, "softmax_cross_entropy_forward", [&](auto t) {
    using T = decltype(t);
    std::vector<double> row_loss(n);
    parallel(n, 64, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const T* z = logits.data<T>() + i * c;
        T* pr = probs.data<T>() + i * c;
        T mx = *std::max_element(z, z + c);
        double sum = 0;
        for (int64_t j = 0; j < c; ++j) sum += std::exp(static_cast<double>(z[j] - mx));
        for (int64_t j = 0; j < c; ++j) pr[j] = static_cast<T>(std::exp(static_cast<double>(z[j] - mx)) / sum);
        row_loss[i] = std::log(sum) + static_cast<double>(mx) - static_cast<double>(z[lab[i]]);
      }
    });
    double total = 0;
    for (double l : row_loss) total += l;
    loss.data<T>()[0] = static_cast<T>(total / static_cast<double>(std::max<int64_t>(n, 1)));
  });
}

void CpuBackend::softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, float scale,
                                                const Tensor& dlogits) {
  require_same(probs, dlogits, "softmax_cross_entropy_backward");
  const int64_t n = probs.dim(0), c = probs.dim(1);
  const int32_t* lab = labels.data<int32_t>();
  dispatch(probs, "softmax_cross_entropy_backward", [&](auto t) {
    using T = decltype(t);
    const T f = static_cast<T>(scale) / static_cast<T>(n);
    parallel(n, 64, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const T* pr = probs.data<T>() + i * c;
        T* d = dlogits.data<T>() + i * c;
        for (int64_t j = 0; j < c; ++j) d[j] = f * (pr[j] - (j == lab[i] ? T(1) : T(0)));
      }
    });
  });
}

void CpuBackend::accumulate_metrics(const Tensor& loss, const Tensor& probs, const Tensor& labels, int64_t step,
                                    const Tensor& metrics) {
  require(metrics.dtype() == DataType::kFloat64 && metrics.numel() == kMetricsSize, "accumulate_metrics",
          "metrics must be float64 [4]");
  const int64_t n = probs.dim(0), c = probs.dim(1);
  const int32_t* lab = labels.data<int32_t>();
  double* m = metrics.data<double>();
  dispatch(probs, "accumulate_metrics", [&](auto t) {
    using T = decltype(t);
    double l = static_cast<double>(loss.data<T>()[0]);
    int64_t correct = 0;
    for (int64_t i = 0; i < n; ++i) {
      const T* pr = probs.data<T>() + i * c;
      correct += std::max_element(pr, pr + c) - pr == lab[i];
    }
    m[kLossSum] += l * static_cast<double>(n);
    m[kCorrect] += static_cast<double>(correct);
    m[kCount] += static_cast<double>(n);
    if (!std::isfinite(l) && m[kFirstBadStep] < 0) m[kFirstBadStep] = static_cast<double>(step);
  });
}

void CpuBackend::sgd_step(std::span<const ParamSlot> params, const SgdStep& s) {
  for (const ParamSlot& p : params) {
    require_same(p.value, p.grad, "sgd_step");
    require_same(p.value, p.m, "sgd_step");
    dispatch(p.value, "sgd_step", [&](auto t) {
      using T = decltype(t);
      T *w = p.value.data<T>(), *g = p.grad.data<T>(), *m = p.m.data<T>();
      const T lr = s.lr, mom = s.momentum, wd = p.decay ? s.weight_decay : 0.0f;
      parallel(p.value.numel(), kGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          m[i] = mom * m[i] + (g[i] + wd * w[i]);
          w[i] -= lr * m[i];
        }
      });
    });
  }
}

void CpuBackend::adam_step(std::span<const ParamSlot> params, const AdamStep& s) {
  require(s.t >= 1, "adam_step", "the step count t starts at 1");
  // Bias corrections in double: beta^t underflows gracefully and is computed once per step.
  const double c1 = 1.0 - std::pow(static_cast<double>(s.beta1), static_cast<double>(s.t));
  const double c2 = 1.0 - std::pow(static_cast<double>(s.beta2), static_cast<double>(s.t));
  for (const ParamSlot& p : params) {
    require_same(p.value, p.grad, "adam_step");
    require_same(p.value, p.m, "adam_step");
    require_same(p.value, p.v, "adam_step");
    dispatch(p.value, "adam_step", [&](auto t) {
      using T = decltype(t);
      T *w = p.value.data<T>(), *g = p.grad.data<T>(), *m = p.m.data<T>(), *v = p.v.data<T>();
      const T lr = s.lr, b1 = s.beta1, b2 = s.beta2, eps = s.eps, wd = p.decay ? s.weight_decay : 0.0f;
      const T step = static_cast<T>(s.lr / c1), root_c2 = static_cast<T>(std::sqrt(c2));
      parallel(p.value.numel(), kGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          T gi = g[i];
          if (s.decoupled)
            w[i] -= lr * wd * w[i];
          else
            gi += wd * w[i];
          m[i] = b1 * m[i] + (T(1) - b1) * gi;
          v[i] = b2 * v[i] + (T(1) - b2) * gi * gi;
          w[i] -= step * m[i] / (std::sqrt(v[i]) / root_c2 + eps);
        }
      });
    });
  }
}

std::unique_ptr<Backend> make_backend(const BackendOptions& options) {
  // GPU options never fall back to the CPU: they need --device gpu, which says what it lacks.
  if (options.device == "gpu") return make_gpu_backend(options);
  if (options.device != "cpu") throw Error("--device " + options.device + ": expected cpu or gpu");
  if (options.fp16) throw Error("--fp16: mixed-precision training runs on the GPU; add --device gpu");
  if (options.gpus != 1)
    throw Error("--gpus " + std::to_string(options.gpus) + ": data-parallel training runs on GPUs; add --device gpu");
  return std::make_unique<CpuBackend>(options.threads);
}

}  // namespace kiln::train
