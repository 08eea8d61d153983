// CPU backend: convolution and linear layers as GEMMs. A convolution lays a chunk of samples out
// as rows (im2row: one row per output pixel, one column per (channel, ky, kx) tap), so that
//   forward:         Yrow[P, O]        = Col[P, CKK] * W^T          (per group: column blocks)
//   backward data:   dCol[P, CKK]      = dYrow[P, O] * W, then scattered back onto dx
//   backward filter: dW[O, CKK]       += dYrow^T * Col               (chunks accumulate in order)
// with P = samples in the chunk x output pixels. Chunks hold at most kChunkBytes of columns; their
// size depends only on the shapes, which keeps the filter gradient's summation order fixed.
// float32 GEMMs use the runtime's SGEMM (bit-identical for any thread count); float64 ones, used
// only by gradient checks, a plain loop threaded over rows of C.
#include <algorithm>
#include <cstring>

#include "runtime/cpu/gemm.h"
#include "train/cpu_backend.h"
#include "train/cpu_internal.h"

namespace kiln::train {

using cpu_detail::dispatch;
using cpu_detail::require;
using cpu_detail::window_out;

namespace {

constexpr size_t kChunkBytes = size_t{32} << 20;

// C[m x n] = op(A) op(B) + beta C, row-major with leading dimensions (beta is 0 or 1).
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
          float beta, float* c, int64_t ldc, cpu::ThreadPool& pool) {
  cpu::sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc, &pool);
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb,
          double beta, double* c, int64_t ldc, cpu::ThreadPool& pool) {
  pool.parallel_for(m, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      double* ci = c + i * ldc;
      for (int64_t j = 0; j < n; ++j) ci[j] = beta == 0 ? 0.0 : ci[j];
      for (int64_t p = 0; p < k; ++p) {
        double av = ta ? a[p * lda + i] : a[i * lda + p];
        if (tb)
          for (int64_t j = 0; j < n; ++j) ci[j] += av * b[j * ldb + p];
        else
          for (int64_t j = 0; j < n; ++j) ci[j] += av * b[p * ldb + j];
      }
    }
  });
}

struct ConvDims {
  int64_t n, c, h, w, o, kh, kw, oh, ow, groups;
  int64_t taps() const { return c * kh * kw; }  // columns of im2row
  int64_t pixels() const { return oh * ow; }
  int64_t cg() const { return c / groups; }
  int64_t og() const { return o / groups; }
};

ConvDims conv_dims(const Tensor& x, const Tensor& w, const Tensor& y, const ConvGeometry& g, const char* op) {
  require(x.rank() == 4 && w.rank() == 4 && y.rank() == 4, op, "expected 4-D x, w and y");
  ConvDims d{x.dim(0), x.dim(1), x.dim(2), x.dim(3), w.dim(0), w.dim(2), w.dim(3), y.dim(2), y.dim(3), g.groups};
  require(d.groups >= 1 && d.c % d.groups == 0 && d.o % d.groups == 0 && w.dim(1) == d.c / d.groups, op,
          "channels do not divide into groups");
  require(y.dim(0) == d.n && y.dim(1) == d.o, op, "output batch or channels differ from input and filter");
  require(d.oh == window_out(d.h, d.kh, g.stride[0], g.pad[0], g.dilation[0]) &&
              d.ow == window_out(d.w, d.kw, g.stride[1], g.pad[1], g.dilation[1]),
          op, "output size does not match the geometry");
  require(x.dtype() == w.dtype() && x.dtype() == y.dtype(), op, "x, w and y differ in dtype");
  return d;
}

int64_t chunk_samples(const ConvDims& d, size_t elem) {
  size_t per_sample = static_cast<size_t>(d.pixels() * std::max(d.taps(), d.o)) * elem;
  return std::clamp<int64_t>(static_cast<int64_t>(kChunkBytes / std::max<size_t>(per_sample, 1)), 1, d.n);
}

template <class T>
T* scratch(std::vector<std::byte>& buf, int64_t elems) {
  size_t bytes = static_cast<size_t>(elems) * sizeof(T);
  if (buf.size() < bytes) buf.resize(bytes);
  return reinterpret_cast<T*>(buf.data());
}

// Col[(s * P + pixel), tap] for samples [n0, n0 + ns) of x.
template <class T>
void im2row(const T* x, const ConvDims& d, const ConvGeometry& g, int64_t n0, int64_t ns, T* col,
            cpu::ThreadPool& pool) {
  const int64_t taps = d.taps();
  pool.parallel_for(ns * d.oh, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      int64_t s = r / d.oh, oy = r % d.oh;
      const T* xs = x + (n0 + s) * d.c * d.h * d.w;
      for (int64_t ox = 0; ox < d.ow; ++ox) {
        T* row = col + ((s * d.oh + oy) * d.ow + ox) * taps;
        const int64_t x0 = ox * g.stride[1] - g.pad[1];
        // Interior windows of undilated rows copy kw contiguous pixels; the rest check each tap.
        const bool contiguous = g.dilation[1] == 1 && x0 >= 0 && x0 + d.kw <= d.w;
        for (int64_t ci = 0; ci < d.c; ++ci)
          for (int64_t ky = 0; ky < d.kh; ++ky, row += d.kw) {
            const int64_t iy = oy * g.stride[0] - g.pad[0] + ky * g.dilation[0];
            if (iy < 0 || iy >= d.h) {
              std::fill_n(row, d.kw, T(0));
              continue;
            }
            const T* src = xs + (ci * d.h + iy) * d.w;
            if (contiguous) {
              std::copy_n(src + x0, d.kw, row);
              continue;
            }
            for (int64_t kx = 0; kx < d.kw; ++kx) {
              const int64_t ix = x0 + kx * g.dilation[1];
              row[kx] = ix >= 0 && ix < d.w ? src[ix] : T(0);
            }
          }
      }
    }
  });
}

// dx (samples [n0, n0 + ns)) = the sum of dCol's taps at the pixels they read. Each sample's plane
// is written by one task, in a fixed order.
template <class T>
void row2im(const T* dcol, const ConvDims& d, const ConvGeometry& g, int64_t n0, int64_t ns, T* dx,
            cpu::ThreadPool& pool) {
  const int64_t taps = d.taps();
  pool.parallel_for(ns * d.c, [&](int64_t lo, int64_t hi) {
    for (int64_t sc = lo; sc < hi; ++sc) {
      int64_t s = sc / d.c, ci = sc % d.c;
      T* plane = dx + ((n0 + s) * d.c + ci) * d.h * d.w;
      std::fill_n(plane, d.h * d.w, T(0));
      for (int64_t oy = 0; oy < d.oh; ++oy)
        for (int64_t ox = 0; ox < d.ow; ++ox) {
          const T* row = dcol + ((s * d.oh + oy) * d.ow + ox) * taps + ci * d.kh * d.kw;
          for (int64_t ky = 0; ky < d.kh; ++ky) {
            int64_t iy = oy * g.stride[0] - g.pad[0] + ky * g.dilation[0];
            if (iy < 0 || iy >= d.h) continue;
            for (int64_t kx = 0; kx < d.kw; ++kx) {
              int64_t ix = ox * g.stride[1] - g.pad[1] + kx * g.dilation[1];
              if (ix >= 0 && ix < d.w) plane[iy * d.w + ix] += row[ky * d.kw + kx];
            }
          }
        }
    }
  });
}

// Between NCHW y (samples [n0, n0 + ns)) and Yrow[(s * P + pixel), o].
template <class T>
void nchw_to_rows(const T* y, const ConvDims& d, int64_t n0, int64_t ns, T* rows, cpu::ThreadPool& pool) {
  const int64_t p = d.pixels();
  pool.parallel_for(ns, [&](int64_t lo, int64_t hi) {
    for (int64_t s = lo; s < hi; ++s)
      for (int64_t oc = 0; oc < d.o; ++oc) {
        const T* src = y + ((n0 + s) * d.o + oc) * p;
        for (int64_t i = 0; i < p; ++i) rows[(s * p + i) * d.o + oc] = src[i];
      }
  });
}

}  // namespace

void CpuBackend::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                                const ConvGeometry& g) {
  const ConvDims d = conv_dims(x, w, y, g, "conv2d_forward");
  require(!b.defined() || (b.numel() == d.o && b.dtype() == x.dtype()), "conv2d_forward", "bias must be [O]");
  dispatch(x, "conv2d_forward", [&](auto t) {
    using T = decltype(t);
    const int64_t cs = chunk_samples(d, sizeof(T)), p = d.pixels(), taps = d.taps();
    T* col = scratch<T>(col_, cs * p * taps);
    T* rows = scratch<T>(rows_, cs * p * d.o);
    for (int64_t n0 = 0; n0 < d.n; n0 += cs) {
      const int64_t ns = std::min(cs, d.n - n0);
      im2row(x.data<T>(), d, g, n0, ns, col, pool_);
      for (int64_t gi = 0; gi < d.groups; ++gi)
        gemm(false, true, ns * p, d.og(), d.cg() * d.kh * d.kw, col + gi * d.cg() * d.kh * d.kw, taps,
             w.data<T>() + gi * d.og() * d.cg() * d.kh * d.kw, d.cg() * d.kh * d.kw, T(0), rows + gi * d.og(), d.o,
             pool_);
      const T* bias = b.defined() ? b.data<T>() : nullptr;
      pool_.parallel_for(ns * d.o, [&](int64_t lo, int64_t hi) {
        for (int64_t so = lo; so < hi; ++so) {
          int64_t s = so / d.o, oc = so % d.o;
          T* dst = y.data<T>() + ((n0 + s) * d.o + oc) * p;
          const T* src = rows + s * p * d.o + oc;
          T bv = bias ? bias[oc] : T(0);
          for (int64_t i = 0; i < p; ++i) dst[i] = src[i * d.o] + bv;
        }
      });
    }
  });
}

void CpuBackend::conv2d_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx, const ConvGeometry& g) {
  const ConvDims d = conv_dims(dx, w, dy, g, "conv2d_backward_data");
  dispatch(dy, "conv2d_backward_data", [&](auto t) {
    using T = decltype(t);
    const int64_t cs = chunk_samples(d, sizeof(T)), p = d.pixels(), taps = d.taps(), gk = d.cg() * d.kh * d.kw;
    T* dcol = scratch<T>(col_, cs * p * taps);
    T* rows = scratch<T>(rows_, cs * p * d.o);
    for (int64_t n0 = 0; n0 < d.n; n0 += cs) {
      const int64_t ns = std::min(cs, d.n - n0);
      nchw_to_rows(dy.data<T>(), d, n0, ns, rows, pool_);
      for (int64_t gi = 0; gi < d.groups; ++gi)
        gemm(false, false, ns * p, gk, d.og(), rows + gi * d.og(), d.o, w.data<T>() + gi * d.og() * gk, gk, T(0),
             dcol + gi * gk, taps, pool_);
      row2im(dcol, d, g, n0, ns, dx.data<T>(), pool_);
    }
  });
}

void CpuBackend::conv2d_backward_filter(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& db,
                                        const ConvGeometry& g) {
  const ConvDims d = conv_dims(x, dw, dy, g, "conv2d_backward_filter");
  require(!db.defined() || (db.numel() == d.o && db.dtype() == x.dtype()), "conv2d_backward_filter",
          "bias gradient must be [O]");
  dispatch(x, "conv2d_backward_filter", [&](auto t) {
    using T = decltype(t);
    const int64_t cs = chunk_samples(d, sizeof(T)), p = d.pixels(), taps = d.taps(), gk = d.cg() * d.kh * d.kw;
    T* col = scratch<T>(col_, cs * p * taps);
    T* rows = scratch<T>(rows_, cs * p * d.o);
    for (int64_t n0 = 0; n0 < d.n; n0 += cs) {
      const int64_t ns = std::min(cs, d.n - n0);
      im2row(x.data<T>(), d, g, n0, ns, col, pool_);
      nchw_to_rows(dy.data<T>(), d, n0, ns, rows, pool_);
      for (int64_t gi = 0; gi < d.groups; ++gi)
        gemm(true, false, d.og(), gk, ns * p, rows + gi * d.og(), d.o, col + gi * gk, taps, n0 == 0 ? T(0) : T(1),
             dw.data<T>() + gi * d.og() * gk, gk, pool_);
    }
    if (db.defined())
      pool_.parallel_for(d.o, [&](int64_t lo, int64_t hi) {
        for (int64_t oc = lo; oc < hi; ++oc) {
          double sum = 0;
          for (int64_t s = 0; s < d.n; ++s) {
            const T* src = dy.data<T>() + (s * d.o + oc) * p;
            for (int64_t i = 0; i < p; ++i) sum += src[i];
          }
          db.data<T>()[oc] = static_cast<T>(sum);
        }
      });
  });
}

void CpuBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  require(x.rank() == 2 && w.rank() == 2 && y.rank() == 2 && x.dim(1) == w.dim(1) && y.dim(0) == x.dim(0) &&
              y.dim(1) == w.dim(0),
          "linear_forward", "expected x [N,K], w [M,K], y [N,M]");
  const int64_t n = x.dim(0), k = x.dim(1), m = w.dim(0);
  dispatch(x, "linear_forward", [&](auto t) {
    using T = decltype(t);
    gemm(false, true, n, m, k, x.data<T>(), k, w.data<T>(), k, T(0), y.data<T>(), m, pool_);
    if (!b.defined()) return;
    const T* bias = b.data<T>();
    pool_.parallel_for(n, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        for (int64_t j = 0; j < m; ++j) y.data<T>()[i * m + j] += bias[j];
    });
  });
}

void CpuBackend::linear_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx) {
  require(dy.rank() == 2 && dx.rank() == 2 && dy.dim(1) == w.dim(0) && dx.dim(1) == w.dim(1) && dx.dim(0) == dy.dim(0),
          "linear_backward_data", "expected dy [N,M], w [M,K], dx [N,K]");
  const int64_t n = dy.dim(0), m = w.dim(0), k = w.dim(1);
  dispatch(dy, "linear_backward_data", [&](auto t) {
    using T = decltype(t);
    gemm(false, false, n, k, m, dy.data<T>(), m, w.data<T>(), k, T(0), dx.data<T>(), k, pool_);
  });
}

void CpuBackend::linear_backward_weights(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& db) {
  require(x.rank() == 2 && dy.rank() == 2 && dw.rank() == 2 && dw.dim(0) == dy.dim(1) && dw.dim(1) == x.dim(1),
          "linear_backward_weights", "expected x [N,K], dy [N,M], dw [M,K]");
  const int64_t n = x.dim(0), k = x.dim(1), m = dy.dim(1);
  dispatch(x, "linear_backward_weights", [&](auto t) {
    using T = decltype(t);
    gemm(true, false, m, k, n, dy.data<T>(), m, x.data<T>(), k, T(0), dw.data<T>(), k, pool_);
    if (!db.defined()) return;
    pool_.parallel_for(m, [&](int64_t lo, int64_t hi) {
      for (int64_t j = lo; j < hi; ++j) {
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) sum += dy.data<T>()[i * m + j];
        db.data<T>()[j] = static_cast<T>(sum);
      }
    });
  });
}

}  // namespace kiln::train
