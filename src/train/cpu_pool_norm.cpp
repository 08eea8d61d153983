// CPU backend: 2-D pooling and batch normalization. Pooling runs one (sample, channel) plane per
// task; batch norm one channel per task, with its sums taken sequentially in double, so results do
// not depend on the thread count.
#include <algorithm>
#include <cmath>

#include "train/cpu_backend.h"
#include "train/cpu_internal.h"

namespace kiln::train {

using cpu_detail::dispatch;
using cpu_detail::require;
using cpu_detail::require_same;
using cpu_detail::window_out;

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
  return d;
}

// The window of output (oy, ox), clipped to the image: rows [y0, y1), columns [x0, x1).
struct Window {
  int64_t y0, y1, x0, x1;
};

Window window(const PoolDims& d, const PoolGeometry& g, int64_t oy, int64_t ox) {
  int64_t y0 = oy * g.stride[0] - g.pad[0], x0 = ox * g.stride[1] - g.pad[1];
  return {std::max<int64_t>(y0, 0), std::min(y0 + g.kernel[0], d.h), std::max<int64_t>(x0, 0),
          std::min(x0 + g.kernel[1], d.w)};
}

// Index (in the plane) of the first maximum of a window.
template <class T>
int64_t argmax(const T* plane, const PoolDims& d, const Window& win) {
  int64_t best = win.y0 * d.w + win.x0;
  for (int64_t iy = win.y0; iy < win.y1; ++iy)
    for (int64_t ix = win.x0; ix < win.x1; ++ix)
      if (plane[iy * d.w + ix] > plane[best]) best = iy * d.w + ix;
  return best;
}

struct NormDims {
  int64_t n, c, spatial;
  int64_t count() const { return n * spatial; }
};

NormDims norm_dims(const Tensor& x, const Tensor& per_channel, const char* op) {
  require(x.rank() == 2 || x.rank() == 4, op, "expected x [N,C] or [N,C,H,W]");
  NormDims d{x.dim(0), x.dim(1), x.rank() == 4 ? x.dim(2) * x.dim(3) : 1};
  require(per_channel.numel() == d.c && per_channel.dtype() == x.dtype(), op,
          "per-channel tensors must be [C] of x's dtype");
  return d;
}

}  // namespace

void CpuBackend::pool2d_forward(const Tensor& x, const Tensor& y, const PoolGeometry& g) {
  const PoolDims d = pool_dims(x, y, g, "pool2d_forward");
  dispatch(x, "pool2d_forward", [&](auto t) {
    using T = decltype(t);
    pool_.parallel_for(d.planes, [&](int64_t lo, int64_t hi) {
      for (int64_t pl = lo; pl < hi; ++pl) {
        const T* src = x.data<T>() + pl * d.h * d.w;
        T* dst = y.data<T>() + pl * d.oh * d.ow;
        for (int64_t oy = 0; oy < d.oh; ++oy)
          for (int64_t ox = 0; ox < d.ow; ++ox) {
            Window win = window(d, g, oy, ox);
            if (g.kind == PoolKind::kMax) {
              dst[oy * d.ow + ox] = src[argmax(src, d, win)];
            } else {
              T sum = 0;
              for (int64_t iy = win.y0; iy < win.y1; ++iy)
                for (int64_t ix = win.x0; ix < win.x1; ++ix) sum += src[iy * d.w + ix];
              dst[oy * d.ow + ox] = sum / static_cast<T>((win.y1 - win.y0) * (win.x1 - win.x0));
            }
          }
      }
    });
  });
}

void CpuBackend::pool2d_backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                                 const PoolGeometry& g) {
  const PoolDims d = pool_dims(x, y, g, "pool2d_backward");
  require_same(x, dx, "pool2d_backward");
  require_same(y, dy, "pool2d_backward");
  dispatch(x, "pool2d_backward", [&](auto t) {
    using T = decltype(t);
    pool_.parallel_for(d.planes, [&](int64_t lo, int64_t hi) {
      for (int64_t pl = lo; pl < hi; ++pl) {
        const T* src = x.data<T>() + pl * d.h * d.w;
        const T* grad = dy.data<T>() + pl * d.oh * d.ow;
        T* dst = dx.data<T>() + pl * d.h * d.w;
        std::fill_n(dst, d.h * d.w, T(0));
        for (int64_t oy = 0; oy < d.oh; ++oy)
          for (int64_t ox = 0; ox < d.ow; ++ox) {
            Window win = window(d, g, oy, ox);
            T gv = grad[oy * d.ow + ox];
            if (g.kind == PoolKind::kMax) {
              dst[argmax(src, d, win)] += gv;
            } else {
              T share = gv / static_cast<T>((win.y1 - win.y0) * (win.x1 - win.x0));
              for (int64_t iy = win.y0; iy < win.y1; ++iy)
                for (int64_t ix = win.x0; ix < win.x1; ++ix) dst[iy * d.w + ix] += share;
            }
          }
      }
    });
  });
}

void CpuBackend::batchnorm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                                         const Tensor& running_mean, const Tensor& running_var,
                                         const Tensor& saved_mean, const Tensor& saved_inv_std, double momentum,
                                         double eps) {
  const NormDims d = norm_dims(x, gamma, "batchnorm_forward_train");
  require_same(x, y, "batchnorm_forward_train");
  require(d.count() > 1, "batchnorm_forward_train", "batch statistics need more than one value per channel");
  dispatch(x, "batchnorm_forward_train", [&](auto t) {
    using T = decltype(t);
    pool_.parallel_for(d.c, [&](int64_t lo, int64_t hi) {
      for (int64_t ch = lo; ch < hi; ++ch) {
        double sum = 0;
        for (int64_t i = 0; i < d.n; ++i) {
          const T* src = x.data<T>() + (i * d.c + ch) * d.spatial;
          for (int64_t s = 0; s < d.spatial; ++s) sum += src[s];
        }
        const double mean = sum / static_cast<double>(d.count());
        double sq = 0;
        for (int64_t i = 0; i < d.n; ++i) {
          const T* src = x.data<T>() + (i * d.c + ch) * d.spatial;
          for (int64_t s = 0; s < d.spatial; ++s) sq += (src[s] - mean) * (src[s] - mean);
        }
        const double var = sq / static_cast<double>(d.count());
        const double inv_std = 1.0 / std::sqrt(var + eps);
        const double scale = gamma.data<T>()[ch] * inv_std, shift = beta.data<T>()[ch] - mean * scale;
        for (int64_t i = 0; i < d.n; ++i) {
          const T* src = x.data<T>() + (i * d.c + ch) * d.spatial;
          T* dst = y.data<T>() + (i * d.c + ch) * d.spatial;
          for (int64_t s = 0; s < d.spatial; ++s) dst[s] = static_cast<T>(src[s] * scale + shift);
        }
        saved_mean.data<T>()[ch] = static_cast<T>(mean);
        saved_inv_std.data<T>()[ch] = static_cast<T>(inv_std);
        const double unbiased = sq / static_cast<double>(d.count() - 1);
        T& rm = running_mean.data<T>()[ch];
        T& rv = running_var.data<T>()[ch];
        rm = static_cast<T>((1 - momentum) * rm + momentum * mean);
        rv = static_cast<T>((1 - momentum) * rv + momentum * unbiased);
      }
    });
  });
}

void CpuBackend::batchnorm_forward_infer(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                         const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                                         double eps) {
  const NormDims d = norm_dims(x, gamma, "batchnorm_forward_infer");
  require_same(x, y, "batchnorm_forward_infer");
  dispatch(x, "batchnorm_forward_infer", [&](auto t) {
    using T = decltype(t);
    pool_.parallel_for(d.c, [&](int64_t lo, int64_t hi) {
      for (int64_t ch = lo; ch < hi; ++ch) {
        const double inv_std = 1.0 / std::sqrt(static_cast<double>(running_var.data<T>()[ch]) + eps);
        const double scale = gamma.data<T>()[ch] * inv_std;
        const double shift = beta.data<T>()[ch] - running_mean.data<T>()[ch] * scale;
        for (int64_t i = 0; i < d.n; ++i) {
          const T* src = x.data<T>() + (i * d.c + ch) * d.spatial;
          T* dst = y.data<T>() + (i * d.c + ch) * d.spatial;
          for (int64_t s = 0; s < d.spatial; ++s) dst[s] = static_cast<T>(src[s] * scale + shift);
        }
      }
    });
  });
}

void CpuBackend::batchnorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& saved_mean,
                                    const Tensor& saved_inv_std, const Tensor& dx, const Tensor& dgamma,
                                    const Tensor& dbeta) {
  const NormDims d = norm_dims(x, gamma, "batchnorm_backward");
  require_same(x, dy, "batchnorm_backward");
  require_same(x, dx, "batchnorm_backward");
  dispatch(x, "batchnorm_backward", [&](auto t) {
    using T = decltype(t);
    pool_.parallel_for(d.c, [&](int64_t lo, int64_t hi) {
      for (int64_t ch = lo; ch < hi; ++ch) {
        const double mean = saved_mean.data<T>()[ch], inv_std = saved_inv_std.data<T>()[ch];
        // dbeta = sum dy, dgamma = sum dy * xhat; dx = gamma inv_std / M (M dy - dbeta - xhat dgamma).
        double sum_dy = 0, sum_dy_xhat = 0;
        for (int64_t i = 0; i < d.n; ++i) {
          const T* src = x.data<T>() + (i * d.c + ch) * d.spatial;
          const T* g = dy.data<T>() + (i * d.c + ch) * d.spatial;
          for (int64_t s = 0; s < d.spatial; ++s) {
            sum_dy += g[s];
            sum_dy_xhat += g[s] * (src[s] - mean) * inv_std;
          }
        }
        const double m = static_cast<double>(d.count());
        const double k = gamma.data<T>()[ch] * inv_std / m;
        for (int64_t i = 0; i < d.n; ++i) {
          const T* src = x.data<T>() + (i * d.c + ch) * d.spatial;
          const T* g = dy.data<T>() + (i * d.c + ch) * d.spatial;
          T* dst = dx.data<T>() + (i * d.c + ch) * d.spatial;
          for (int64_t s = 0; s < d.spatial; ++s) {
            double xhat = (src[s] - mean) * inv_std;
            dst[s] = static_cast<T>(k * (m * g[s] - sum_dy - xhat * sum_dy_xhat));
          }
        }
        dgamma.data<T>()[ch] = static_cast<T>(sum_dy_xhat);
        dbeta.data<T>()[ch] = static_cast<T>(sum_dy);
      }
    });
  });
}

}  // namespace kiln::train
