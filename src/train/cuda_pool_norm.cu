// GPU training backend: 2-D pooling and batch normalization, as our own kernels.
//
// Pooling keeps the CPU backend's rules exactly: max pooling takes the first maximum of a window in
// row-major order, average pooling divides by the window's part inside the image. The forward pass
// runs one thread per output; the backward pass one thread per input element, gathering from the
// windows that cover it in row-major output order (the CPU's summation order), so it needs neither
// an index tensor nor atomics.
//
// Batch norm takes its per-channel sums in double (cuda_internal.cuh's channel_sums: one pass for
// sum and sum of squares, whose difference double holds without loss at these magnitudes), then
// normalizes elementwise. The sums sit in a small buffer [sums of q0 | sums of q1 | element count]
// so that a replica of a data-parallel group can all-reduce it between the two kernels: every
// replica then normalizes with the statistics of the whole batch, as one device would. The
// backward pass sums dy and dy * xhat the same way; its dgamma and dbeta are the replica's own
// sums (the optimizer all-reduces gradients), its dx uses the group's.
#include "train/cuda_internal.cuh"

namespace kiln::train {

using namespace cuda_detail;

namespace {

struct PoolDims {
  int64_t planes, h, w, oh, ow;
};

PoolDims pool_dims(const Tensor& x, const Tensor& y, const PoolGeometry& g, const char* op) {
  require(x.rank() == 4 && y.rank() == 4 && x.dim(0) == y.dim(0) && x.dim(1) == y.dim(1) && x.dtype() == y.dtype(), op,
          "expected x [N,C,H,W] and y [N,C,OH,OW] of one dtype");
  PoolDims d{x.dim(0) * x.dim(1), x.dim(2), x.dim(3), y.dim(2), y.dim(3)};
  require(d.oh == window_out(d.h, g.kernel[0], g.stride[0], g.pad[0], 1) &&
              d.ow == window_out(d.w, g.kernel[1], g.stride[1], g.pad[1], 1),
          op, "output size does not match the geometry");
  require(g.pad[0] < g.kernel[0] && g.pad[1] < g.kernel[1], op, "padding must be smaller than the window");
  return d;
}

// The window of output (oy, ox) clipped to the image: rows [y0, y1), columns [x0, x1).
struct Window {
  int64_t y0, y1, x0, x1;
};

__device__ __forceinline__ Window window(const PoolDims& d, const PoolGeometry& g, int64_t oy, int64_t ox) {
  const int64_t y0 = oy * g.stride[0] - g.pad[0], x0 = ox * g.stride[1] - g.pad[1];
  return {y0 < 0 ? 0 : y0, y0 + g.kernel[0] < d.h ? y0 + g.kernel[0] : d.h, x0 < 0 ? 0 : x0,
          x0 + g.kernel[1] < d.w ? x0 + g.kernel[1] : d.w};
}

// Index in the plane of the window's first maximum (row-major).
template <class T>
__device__ __forceinline__ int64_t argmax(const T* plane, const PoolDims& d, const Window& win) {
  int64_t best = win.y0 * d.w + win.x0;
  float bv = ld(plane, best);
  for (int64_t iy = win.y0; iy < win.y1; ++iy)
    for (int64_t ix = win.x0; ix < win.x1; ++ix) {
      const float v = ld(plane, iy * d.w + ix);
      if (v > bv) {
        bv = v;
        best = iy * d.w + ix;
      }
    }
  return best;
}

template <class T>
void pool_forward(const T* x, T* y, PoolDims d, PoolGeometry g, cudaStream_t s) {
  const bool max = g.kind == PoolKind::kMax;
  for_each(
      s, d.planes * d.oh * d.ow,
      [=] __device__(int64_t i) {
        const int64_t ox = i % d.ow, oy = i / d.ow % d.oh, pl = i / (d.ow * d.oh);
        const T* src = x + pl * d.h * d.w;
        const Window win = window(d, g, oy, ox);
        if (max) {
          st(y, i, ld(src, argmax(src, d, win)));
          return;
        }
        float sum = 0;
        for (int64_t iy = win.y0; iy < win.y1; ++iy)
          for (int64_t ix = win.x0; ix < win.x1; ++ix) sum += ld(src, iy * d.w + ix);
        st(y, i, sum / static_cast<float>((win.y1 - win.y0) * (win.x1 - win.x0)));
      },
      "pool2d_forward");
}

// First output index along one axis whose window covers input position `in`, and the last + 1.
__device__ __forceinline__ void covering(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t out,
                                         int64_t& lo, int64_t& hi) {
  const int64_t first = in + pad - kernel + 1;  // the window starting at o * stride - pad covers `in`
  lo = first <= 0 ? 0 : (first + stride - 1) / stride;
  const int64_t last = (in + pad) / stride;
  hi = last + 1 < out ? last + 1 : out;
}

template <class T>
void pool_backward(const T* x, const T* dy, T* dx, PoolDims d, PoolGeometry g, cudaStream_t s) {
  const bool max = g.kind == PoolKind::kMax;
  for_each(
      s, d.planes * d.h * d.w,
      [=] __device__(int64_t i) {
        const int64_t ix = i % d.w, iy = i / d.w % d.h, pl = i / (d.w * d.h);
        const T* src = x + pl * d.h * d.w;
        const T* grad = dy + pl * d.oh * d.ow;
        int64_t oy0, oy1, ox0, ox1;
        covering(iy, g.kernel[0], g.stride[0], g.pad[0], d.oh, oy0, oy1);
        covering(ix, g.kernel[1], g.stride[1], g.pad[1], d.ow, ox0, ox1);
        float acc = 0;
        for (int64_t oy = oy0; oy < oy1; ++oy)
          for (int64_t ox = ox0; ox < ox1; ++ox) {
            const Window win = window(d, g, oy, ox);
            const float gv = ld(grad, oy * d.ow + ox);
            if (!max)
              acc += gv / static_cast<float>((win.y1 - win.y0) * (win.x1 - win.x0));
            else if (argmax(src, d, win) == iy * d.w + ix)
              acc += gv;
          }
        st(dx, i, acc);
      },
      "pool2d_backward");
}

}  // namespace

void CudaBackend::pool2d_forward(const Tensor& x, const Tensor& y, const PoolGeometry& g) {
  const PoolDims d = pool_dims(x, y, g, "pool2d_forward");
  dispatch_act(x.dtype(), "pool2d_forward",
               [&](auto t) { pool_forward(x.data<decltype(t)>(), y.data<decltype(t)>(), d, g, stream()); });
}

void CudaBackend::pool2d_backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                                  const PoolGeometry& g) {
  const PoolDims d = pool_dims(x, y, g, "pool2d_backward");
  require_same(x, dx, "pool2d_backward");
  require_same(y, dy, "pool2d_backward");
  dispatch_act(x.dtype(), "pool2d_backward", [&](auto t) {
    using T = decltype(t);
    pool_backward(x.data<T>(), dy.data<T>(), dx.data<T>(), d, g, stream());
  });
}

// ---- batch normalization

namespace {

struct NormDims {
  int64_t n, c, s;
  int64_t count() const { return n * s; }
  int64_t numel() const { return n * c * s; }
};

NormDims norm_dims(const Tensor& x, std::initializer_list<const Tensor*> per_channel, const char* op) {
  require(x.rank() == 2 || x.rank() == 4, op, "expected x [N,C] or [N,C,H,W]");
  NormDims d{x.dim(0), x.dim(1), x.rank() == 4 ? x.dim(2) * x.dim(3) : 1};
  for (const Tensor* t : per_channel) {
    require(t->numel() == d.c, op, "per-channel tensors must be [C]");
    require_f32(*t, op, "per-channel tensors");
  }
  dispatch_act(x.dtype(), op, [](auto) {});
  return d;
}

// The sums buffer: local [2C + 1] then, in a group, global [2C + 1] (else global is local).
struct NormSums {
  double* local;
  double* global;
};

NormSums norm_sums(CudaBackend& be, int64_t c) {
  const size_t k = static_cast<size_t>(2 * c + 1);
  auto* p = static_cast<double*>(be.scratch(CudaBackend::Slot::kSmall, 2 * k * sizeof(double)));
  return {p, be.grouped() ? p + k : p};
}

template <class T>
void norm_forward_sums(CudaBackend& be, const T* x, const NormDims& d, double* local) {
  const int64_t c = d.c, count = d.count();
  channel_sums<2>(
      be, channel_grid(d.n, d.c, d.s),
      [=] __device__(int64_t i, int64_t, double* v) {
        const double xv = ld(x, i);
        v[0] = xv;
        v[1] = xv * xv;
      },
      [=] __device__(int64_t ch, const double* s) {
        local[ch] = s[0];
        local[c + ch] = s[1];
        if (ch == 0) local[2 * c] = static_cast<double>(count);
      },
      "batchnorm_forward_train");
}

template <class T>
void norm_forward_apply(cudaStream_t s, const T* x, T* y, const float* gamma, const float* beta, float* rm, float* rv,
                        float* sm, float* sinv, const double* sums, NormDims d, double momentum, double eps) {
  const int64_t total = d.numel(), c = d.c, sp = d.s;
  for_each(
      s, total > c ? total : c,
      [=] __device__(int64_t i) {
        const double m = sums[2 * c];
        auto stats = [&](int64_t ch, double& mean, double& var) {
          mean = sums[ch] / m;
          var = sums[c + ch] / m - mean * mean;
          if (var < 0) var = 0;
        };
        double mean, var;
        if (i < total) {
          const int64_t ch = i / sp % c;
          stats(ch, mean, var);
          const double inv_std = 1.0 / sqrt(var + eps);
          const double scale = gamma[ch] * inv_std, shift = beta[ch] - mean * scale;
          st(y, i, static_cast<float>(ld(x, i) * scale + shift));
        }
        if (i < c) {
          stats(i, mean, var);
          sm[i] = static_cast<float>(mean);
          sinv[i] = static_cast<float>(1.0 / sqrt(var + eps));
          const double unbiased = var * m / (m - 1);
          rm[i] = static_cast<float>((1 - momentum) * rm[i] + momentum * mean);
          rv[i] = static_cast<float>((1 - momentum) * rv[i] + momentum * unbiased);
        }
      },
      "batchnorm_forward_train");
}

template <class T>
void norm_infer(cudaStream_t s, const T* x, T* y, const float* gamma, const float* beta, const float* rm,
                const float* rv, NormDims d, double eps) {
  const int64_t c = d.c, sp = d.s;
  for_each(
      s, d.numel(),
      [=] __device__(int64_t i) {
        const int64_t ch = i / sp % c;
        const double inv_std = 1.0 / sqrt(static_cast<double>(rv[ch]) + eps);
        const double scale = gamma[ch] * inv_std, shift = beta[ch] - rm[ch] * scale;
        st(y, i, static_cast<float>(ld(x, i) * scale + shift));
      },
      "batchnorm_forward_infer");
}

template <class T>
void norm_backward_sums(CudaBackend& be, const T* x, const T* dy, const float* sm, const float* sinv, const NormDims& d,
                        double* local) {
  const int64_t c = d.c, count = d.count();
  channel_sums<2>(
      be, channel_grid(d.n, d.c, d.s),
      [=] __device__(int64_t i, int64_t ch, double* v) {
        const double g = ld(dy, i);
        v[0] = g;
        v[1] = g * (ld(x, i) - static_cast<double>(sm[ch])) * sinv[ch];
      },
      [=] __device__(int64_t ch, const double* s) {
        local[ch] = s[0];
        local[c + ch] = s[1];
        if (ch == 0) local[2 * c] = static_cast<double>(count);
      },
      "batchnorm_backward");
}

template <class T>
void norm_backward_apply(cudaStream_t s, const T* x, const T* dy, T* dx, const float* gamma, const float* sm,
                         const float* sinv, float* dgamma, float* dbeta, NormSums sums, NormDims d) {
  const int64_t total = d.numel(), c = d.c, sp = d.s;
  const double* local = sums.local;
  const double* global = sums.global;
  for_each(
      s, total > c ? total : c,
      [=] __device__(int64_t i) {
        if (i < total) {
          const int64_t ch = i / sp % c;
          const double m = global[2 * c], mean = sm[ch], inv_std = sinv[ch];
          const double xhat = (ld(x, i) - mean) * inv_std;
          const double k = gamma[ch] * inv_std / m;
          st(dx, i, static_cast<float>(k * (m * ld(dy, i) - global[ch] - xhat * global[c + ch])));
        }
        if (i < c) {
          dgamma[i] = static_cast<float>(local[c + i]);
          dbeta[i] = static_cast<float>(local[i]);
        }
      },
      "batchnorm_backward");
}

}  // namespace

void CudaBackend::batchnorm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                                          const Tensor& running_mean, const Tensor& running_var,
                                          const Tensor& saved_mean, const Tensor& saved_inv_std, double momentum,
                                          double eps) {
  const char* op = "batchnorm_forward_train";
  const NormDims d = norm_dims(x, {&gamma, &beta, &running_mean, &running_var, &saved_mean, &saved_inv_std}, op);
  require_same(x, y, op);
  // A replica may hold few rows; the group's count is what must exceed one.
  require(grouped() || d.count() > 1, op, "batch statistics need more than one value per channel");
  const NormSums sums = norm_sums(*this, d.c);
  dispatch_act(x.dtype(), op, [&](auto t) {
    using T = decltype(t);
    norm_forward_sums(*this, x.data<T>(), d, sums.local);
    all_reduce(sums.local, sums.global, static_cast<size_t>(2 * d.c + 1), ncclDouble);
    norm_forward_apply(stream(), x.data<T>(), y.data<T>(), gamma.data<float>(), beta.data<float>(),
                       running_mean.data<float>(), running_var.data<float>(), saved_mean.data<float>(),
                       saved_inv_std.data<float>(), sums.global, d, momentum, eps);
  });
}

void CudaBackend::batchnorm_forward_infer(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                          const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                                          double eps) {
  const char* op = "batchnorm_forward_infer";
  const NormDims d = norm_dims(x, {&gamma, &beta, &running_mean, &running_var}, op);
  require_same(x, y, op);
  dispatch_act(x.dtype(), op, [&](auto t) {
    using T = decltype(t);
    norm_infer(stream(), x.data<T>(), y.data<T>(), gamma.data<float>(), beta.data<float>(), running_mean.data<float>(),
               running_var.data<float>(), d, eps);
  });
}

void CudaBackend::batchnorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& saved_mean,
                                     const Tensor& saved_inv_std, const Tensor& dx, const Tensor& dgamma,
                                     const Tensor& dbeta) {
  const char* op = "batchnorm_backward";
  const NormDims d = norm_dims(x, {&gamma, &saved_mean, &saved_inv_std, &dgamma, &dbeta}, op);
  require_same(x, dy, op);
  require_same(x, dx, op);
  const NormSums sums = norm_sums(*this, d.c);
  dispatch_act(x.dtype(), op, [&](auto t) {
    using T = decltype(t);
    norm_backward_sums(*this, x.data<T>(), dy.data<T>(), saved_mean.data<float>(), saved_inv_std.data<float>(), d,
                       sums.local);
    all_reduce(sums.local, sums.global, static_cast<size_t>(2 * d.c + 1), ncclDouble);
    norm_backward_apply(stream(), x.data<T>(), dy.data<T>(), dx.data<T>(), gamma.data<float>(),
                        saved_mean.data<float>(), saved_inv_std.data<float>(), dgamma.data<float>(),
                        dbeta.data<float>(), sums, d);
  });
}

}  // namespace kiln::train
