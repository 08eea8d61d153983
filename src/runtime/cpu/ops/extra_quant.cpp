// Integer and quantized kernels of the extra family: MatMulInteger, QLinearMatMul, ConvInteger,
// QLinearConv and DynamicQuantizeLinear.
//
// The products run on int32 values with the zero points subtracted ((a - a_zp) and (b - b_zp) lie
// in [-255, 255]) and accumulate in uint32: unsigned arithmetic wraps, so the result is the exact
// int32 sum modulo 2^32, what ONNX Runtime's int32 accumulators give, without signed overflow.
// Requantization (QLinear*) follows the ONNX reference: multiplier = x_scale * w_scale / y_scale in
// float32, y = saturate(round_half_even(acc * multiplier + y_zero_point)), the product in double.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/infer/nn_geometry.h"
#include "core/shape_infer.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln::cpu::extra {

namespace {

template <class Fn>
void parallel(KernelEnv& env, int64_t n, int64_t work_per_item, Fn&& fn) {
  if (n <= 0) return;
  if (!env.pool || env.pool->size() <= 1 || n < 2 || n * work_per_item < (1 << 15))
    fn(int64_t{0}, n);
  else
    env.pool->parallel_for(n, fn);
}

// Values of a zero-point tensor (int8/uint8) as int32; absent means 0.
std::vector<int32_t> zero_points(std::span<const TensorView> in, size_t i) {
  if (i >= in.size() || !in[i].exists) return {0};
  const TensorView& t = in[i];
  std::vector<int32_t> v(static_cast<size_t>(t.numel()));
  if (t.dtype == DataType::kInt8)
    for (size_t k = 0; k < v.size(); ++k) v[k] = t.as<const int8_t>()[k];
  else
    for (size_t k = 0; k < v.size(); ++k) v[k] = t.as<const uint8_t>()[k];
  return v;
}

std::vector<float> scales(const TensorView& t) {
  std::vector<double> d = t.to_double();
  return {d.begin(), d.end()};
}

// round_half_even(v) saturated to [lo, hi]; NaN goes to lo. Clamping first keeps the conversion
// in range (a float->int cast of an out-of-range value is undefined).
inline int32_t requantize(double v, double lo, double hi) {
  if (!(v >= lo)) v = lo;
  if (v > hi) v = hi;
  return static_cast<int32_t>(std::nearbyint(v));
}

template <class T>
void store_q(void* out, int64_t i, int32_t v) {
  static_cast<T*>(out)[i] = static_cast<T>(v);
}

// ---- batched integer matrix product ----------------------------------------------------------

// A per-row (of A) or per-column (of B) parameter: one value, one per row shared by all batches,
// or one per (batch, row). index = mode 0: 0; mode 1: i; mode 2: batch * rows + i.
struct RowParam {
  int mode = 0;
  int64_t rows = 1;
  int64_t index(int64_t batch, int64_t i) const { return mode == 0 ? 0 : mode == 1 ? i : batch * rows + i; }
};
RowParam row_param(int64_t numel, int64_t rank, int64_t rows) {
  if (numel == 1) return {0, rows};
  return {rank == 1 ? 1 : 2, rows};
}
RowParam row_param(std::span<const TensorView> in, size_t i, int64_t rows) {
  if (i >= in.size() || !in[i].exists) return {0, rows};
  return row_param(in[i].numel(), static_cast<int64_t>(in[i].rank()), rows);
}

struct MatmulDims {
  int64_t M = 1, K = 1, N = 1, batches = 1;
  std::vector<int64_t> a_batch, b_batch;  // per output batch: the batch index of A and of B
};

MatmulDims matmul_dims(const TensorView& A, const TensorView& B) {
  MatmulDims d;
  d.K = A.shape[A.rank() - 1];
  d.M = A.rank() >= 2 ? A.shape[A.rank() - 2] : 1;
  d.N = B.rank() >= 2 ? B.shape[B.rank() - 1] : 1;
  std::span<const int64_t> ab = A.rank() > 2 ? A.shape.first(A.rank() - 2) : std::span<const int64_t>();
  std::span<const int64_t> bb = B.rank() > 2 ? B.shape.first(B.rank() - 2) : std::span<const int64_t>();
  const std::vector<int64_t> ob = broadcast_shapes(ab, bb);
  for (int64_t x : ob) d.batches *= x;
  d.a_batch.assign(static_cast<size_t>(d.batches), 0);
  d.b_batch.assign(static_cast<size_t>(d.batches), 0);
  // Walk the output batch index; each operand's stride is 0 along its broadcast axes.
  auto strides = [&](std::span<const int64_t> s) {
    std::vector<int64_t> st(ob.size(), 0);
    int64_t acc = 1;
    for (size_t i = s.size(); i-- > 0;) {
      st[ob.size() - s.size() + i] = s[i] == 1 ? 0 : acc;
      acc *= s[i];
    }
    return st;
  };
  const std::vector<int64_t> sa = strides(ab), sb = strides(bb);
  for (int64_t b = 0; b < d.batches; ++b) {
    int64_t rem = b, ia = 0, ib = 0;
    for (size_t i = ob.size(); i-- > 0;) {
      const int64_t idx = rem % ob[i];
      rem /= ob[i];
      ia += idx * sa[i];
      ib += idx * sb[i];
    }
    d.a_batch[b] = ia;
    d.b_batch[b] = ib;
  }
  return d;
}

// For every output row (batch, i): acc[j] = sum_p (a[i,p] - a_zp) * (b[p,j] - b_zp), then
// emit(batch, a_batch, i, acc) writes the N outputs of the row at out offset (batch * M + i) * N.
template <class TA, class TB, class Emit>
void qmatmul(const TensorView& A, const TensorView& B, const std::vector<int32_t>& zpa, RowParam pa,
             const std::vector<int32_t>& zpb, RowParam pb, KernelEnv& env, const MatmulDims& d, Emit&& emit) {
  const int64_t M = d.M, K = d.K, N = d.N;
  const TA* a = A.as<const TA>();
  const TB* b = B.as<const TB>();
  // B with its zero points subtracted, once for all rows: values in [-255, 255].
  const int64_t b_batches = K * N > 0 ? B.numel() / (K * N) : 0;
  std::vector<int16_t> bq(static_cast<size_t>(B.numel()));
  for (int64_t bb = 0; bb < b_batches; ++bb)
    for (int64_t p = 0; p < K; ++p)
      for (int64_t j = 0; j < N; ++j) {
        const int64_t idx = (bb * K + p) * N + j;
        bq[idx] = static_cast<int16_t>(static_cast<int32_t>(b[idx]) - zpb[pb.index(bb, j)]);
      }
  parallel(env, d.batches * M, std::max<int64_t>(K * N, 1), [&](int64_t r0, int64_t r1) {
    std::vector<uint32_t> acc(static_cast<size_t>(N));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t batch = r / M, i = r % M, ab = d.a_batch[batch];
      const TA* ar = a + (ab * M + i) * K;
      const int16_t* bm = bq.data() + d.b_batch[batch] * K * N;
      const int32_t za = zpa[pa.index(ab, i)];
      std::fill(acc.begin(), acc.end(), 0u);
      for (int64_t p = 0; p < K; ++p) {
        const uint32_t av = static_cast<uint32_t>(static_cast<int32_t>(ar[p]) - za);
        if (av == 0) continue;
        const int16_t* br = bm + p * N;
        for (int64_t j = 0; j < N; ++j) acc[j] += av * static_cast<uint32_t>(static_cast<int32_t>(br[j]));
      }
      emit(batch, ab, i, acc.data());
    }
  });
}

template <class Fn>
void dispatch_q8(DataType t, const char* op, Fn&& fn) {
  if (t == DataType::kUInt8)
    fn(Tag<uint8_t>{});
  else if (t == DataType::kInt8)
    fn(Tag<int8_t>{});
  else
    throw_unsupported_dtype(t, op);
}

}  // namespace

void matmul_integer_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                           KernelEnv& env) {
  const TensorView &A = in[0], &B = in[1];
  const MatmulDims d = matmul_dims(A, B);
  const std::vector<int32_t> zpa = zero_points(in, 2), zpb = zero_points(in, 3);
  const RowParam pa = row_param(in, 2, d.M), pb = row_param(in, 3, d.N);
  int32_t* y = out[0].as<int32_t>();
  dispatch_q8(A.dtype, "MatMulInteger", [&](auto ta) {
    dispatch_q8(B.dtype, "MatMulInteger", [&](auto tb) {
      qmatmul<typename decltype(ta)::type, typename decltype(tb)::type>(
          A, B, zpa, pa, zpb, pb, env, d, [&](int64_t batch, int64_t, int64_t i, const uint32_t* acc) {
            int32_t* yr = y + (batch * d.M + i) * d.N;
            for (int64_t j = 0; j < d.N; ++j) yr[j] = static_cast<int32_t>(acc[j]);
          });
    });
  });
}

void qlinear_matmul_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                           KernelEnv& env) {
  const TensorView &A = in[0], &B = in[3];
  const MatmulDims d = matmul_dims(A, B);
  const std::vector<int32_t> zpa = zero_points(in, 2), zpb = zero_points(in, 5), zpy = zero_points(in, 7);
  const std::vector<float> sa = scales(in[1]), sb = scales(in[4]), sy = scales(in[6]);
  const RowParam pa = row_param(in, 2, d.M), pb = row_param(in, 5, d.N);
  const RowParam psa = row_param(in, 1, d.M), psb = row_param(in, 4, d.N);
  const bool y_per_row = in[6].numel() != 1, zy_per_row = in[7].numel() != 1;
  const bool y_signed = out[0].dtype == DataType::kInt8;
  const double lo = y_signed ? -128 : 0, hi = y_signed ? 127 : 255;
  void* y = out[0].data;
  dispatch_q8(A.dtype, "QLinearMatMul", [&](auto ta) {
    dispatch_q8(B.dtype, "QLinearMatMul", [&](auto tb) {
      qmatmul<typename decltype(ta)::type, typename decltype(tb)::type>(
          A, B, zpa, pa, zpb, pb, env, d, [&](int64_t batch, int64_t ab, int64_t i, const uint32_t* acc) {
            const int64_t o = (batch * d.M + i) * d.N;
            const float s_a = sa[psa.index(ab, i)], s_y = sy[y_per_row ? i : 0];
            const double zy = zpy[zy_per_row ? i : 0];
            for (int64_t j = 0; j < d.N; ++j) {
              // b's parameters are per column of the (broadcast) B matrix of this batch.
              const float mult = s_a * sb[psb.index(d.b_batch[batch], j)] / s_y;
              const int32_t v = requantize(static_cast<int32_t>(acc[j]) * static_cast<double>(mult) + zy, lo, hi);
              if (y_signed)
                store_q<int8_t>(y, o + j, v);
              else
                store_q<uint8_t>(y, o + j, v);
            }
          });
    });
  });
}

// ---- integer convolution ---------------------------------------------------------------------

namespace {

// For every (n, output channel m): acc[o] = sum over (c, tap) of (w - w_zp[m]) * (x - x_zp), with
// taps in the padding contributing 0 (padding holds the zero point); emit(n, m, acc) stores row o.
template <class TX, class TW, class Emit>
void qconv(const ConvAttrs& attrs, const TensorView& X, const TensorView& W, int32_t zx, const std::vector<int32_t>& zw,
           KernelEnv& env, Emit&& emit) {
  const kiln::nn::WindowGeometry g = kiln::nn::conv_geometry(attrs, X.shape, W.shape);
  const size_t r = g.rank();
  const int64_t N = X.shape[0], C = X.shape[1], M = W.shape[0], G = attrs.group;
  const int64_t Cg = C / G, Mg = M / G;
  const int64_t Ks = kiln::nn::WindowGeometry::product(g.kernel), O = kiln::nn::WindowGeometry::product(g.out);
  const int64_t I = kiln::nn::WindowGeometry::product(g.in);
  if (N == 0 || M == 0) return;
  // Input offset of every (tap, output position), -1 where the tap falls in the padding.
  std::vector<int64_t> tap(static_cast<size_t>(Ks * O));
  {
    // One index vector: kernel tap multi-index in [0, r), output position in [r, 2r).
    std::vector<int64_t> idx(2 * r, 0);
    for (int64_t kk = 0; kk < Ks; ++kk) {
      for (int64_t oo = 0; oo < O; ++oo) {
        int64_t off = 0;
        for (size_t i = 0; i < r && off >= 0; ++i) {
          const int64_t p = idx[r + i] * g.strides[i] - g.pads[i] + idx[i] * g.dilations[i];
          off = (p < 0 || p >= g.in[i]) ? -1 : off * g.in[i] + p;
        }
        tap[kk * O + oo] = off;
        for (size_t i = r; i-- > 0;) {
          if (++idx[r + i] < g.out[i]) break;
          idx[r + i] = 0;
        }
      }
      for (size_t i = r; i-- > 0;) {
        if (++idx[i] < g.kernel[i]) break;
        idx[i] = 0;
      }
    }
  }
  const TX* x = X.as<const TX>();
  const TW* w = W.as<const TW>();
  const int64_t rows = Cg * Ks;
  std::vector<int16_t> col(static_cast<size_t>(rows * O));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t gi = 0; gi < G; ++gi) {
      // im2col of this image and group, zero point subtracted: col[c * Ks + tap][o].
      parallel(env, rows, O, [&](int64_t r0, int64_t r1) {
        for (int64_t row = r0; row < r1; ++row) {
          const int64_t c = row / Ks, kk = row % Ks;
          const TX* xc = x + ((n * C) + gi * Cg + c) * I;
          const int64_t* t = tap.data() + kk * O;
          int16_t* cr = col.data() + row * O;
          for (int64_t o = 0; o < O; ++o)
            cr[o] = t[o] < 0 ? int16_t(0) : static_cast<int16_t>(static_cast<int32_t>(xc[t[o]]) - zx);
        }
      });
      parallel(env, Mg, rows * O, [&](int64_t m0, int64_t m1) {
        std::vector<uint32_t> acc(static_cast<size_t>(O));
        for (int64_t mi = m0; mi < m1; ++mi) {
          const int64_t m = gi * Mg + mi;
          const TW* wm = w + m * rows;
          const int32_t z = zw[zw.size() == 1 ? 0 : m];
          std::fill(acc.begin(), acc.end(), 0u);
          for (int64_t row = 0; row < rows; ++row) {
            const uint32_t wv = static_cast<uint32_t>(static_cast<int32_t>(wm[row]) - z);
            if (wv == 0) continue;
            const int16_t* cr = col.data() + row * O;
            for (int64_t o = 0; o < O; ++o) acc[o] += wv * static_cast<uint32_t>(static_cast<int32_t>(cr[o]));
          }
          emit(n, m, acc.data(), O);
        }
      });
    }
  }
}

}  // namespace

void conv_integer_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                         KernelEnv& env) {
  const TensorView &X = in[0], &W = in[1];
  const int32_t zx = zero_points(in, 2)[0];
  const std::vector<int32_t> zw = zero_points(in, 3);
  int32_t* y = out[0].as<int32_t>();
  const int64_t M = W.shape[0];
  dispatch_q8(X.dtype, "ConvInteger", [&](auto tx) {
    dispatch_q8(W.dtype, "ConvInteger", [&](auto tw) {
      qconv<typename decltype(tx)::type, typename decltype(tw)::type>(
          std::get<ConvAttrs>(attrs), X, W, zx, zw, env, [&](int64_t n, int64_t m, const uint32_t* acc, int64_t O) {
            int32_t* yr = y + (n * M + m) * O;
            for (int64_t o = 0; o < O; ++o) yr[o] = static_cast<int32_t>(acc[o]);
          });
    });
  });
}

void qlinear_conv_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                         KernelEnv& env) {
  const TensorView &X = in[0], &W = in[3];
  const int32_t zx = zero_points(in, 2)[0];
  const std::vector<int32_t> zw = zero_points(in, 5);
  const double zy = zero_points(in, 7)[0];
  const float sx = scales(in[1])[0], sy = scales(in[6])[0];
  const std::vector<float> sw = scales(in[4]);
  const int32_t* bias = in.size() > 8 && in[8].exists ? in[8].as<const int32_t>() : nullptr;
  const int64_t M = W.shape[0];
  const bool y_signed = out[0].dtype == DataType::kInt8;
  const double lo = y_signed ? -128 : 0, hi = y_signed ? 127 : 255;
  void* y = out[0].data;
  dispatch_q8(X.dtype, "QLinearConv", [&](auto tx) {
    dispatch_q8(W.dtype, "QLinearConv", [&](auto tw) {
      qconv<typename decltype(tx)::type, typename decltype(tw)::type>(
          std::get<ConvAttrs>(attrs), X, W, zx, zw, env, [&](int64_t n, int64_t m, const uint32_t* acc, int64_t O) {
            const double mult = static_cast<double>(sx * sw[sw.size() == 1 ? 0 : m] / sy);
            const uint32_t b = bias ? static_cast<uint32_t>(bias[m]) : 0u;
            const int64_t base = (n * M + m) * O;
            for (int64_t o = 0; o < O; ++o) {
              const int32_t v = requantize(static_cast<int32_t>(acc[o] + b) * mult + zy, lo, hi);
              if (y_signed)
                store_q<int8_t>(y, base + o, v);
              else
                store_q<uint8_t>(y, base + o, v);
            }
          });
    });
  });
}

// ---- DynamicQuantizeLinear -------------------------------------------------------------------
// uint8, per the ONNX reference, in float32:
//   max' = max(0, max(x)), min' = min(0, min(x)), scale = (max' == min' ? 1 : max' - min') / 255
//   zp = round_half_even(clamp(0 - min' / scale, 0, 255)), y = clamp(round(x / scale) + zp, 0, 255)
// NaN elements are skipped by the range scan and quantize to 0.

void dynamic_quantize_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                             KernelEnv& env) {
  const float* x = in[0].as<const float>();
  const int64_t n = in[0].numel();
  constexpr int64_t kBlock = 16384;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<float> bmin(static_cast<size_t>(blocks), 0.0f), bmax(static_cast<size_t>(blocks), 0.0f);
  parallel(env, blocks, kBlock, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      float lo = 0.0f, hi = 0.0f;
      for (int64_t i = b * kBlock, e = std::min(n, i + kBlock); i < e; ++i) {
        lo = x[i] < lo ? x[i] : lo;  // NaN compares false: skipped
        hi = x[i] > hi ? x[i] : hi;
      }
      bmin[b] = lo;
      bmax[b] = hi;
    }
  });
  float mn = 0.0f, mx = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) {
    mn = std::min(mn, bmin[b]);
    mx = std::max(mx, bmax[b]);
  }
  const float scale = (mx == mn ? 1.0f : mx - mn) / 255.0f;
  float zpf = 0.0f - mn / scale;
  if (!(zpf >= 0.0f)) zpf = 0.0f;
  if (zpf > 255.0f) zpf = 255.0f;
  const float zp = std::nearbyint(zpf);
  uint8_t* y = out[0].as<uint8_t>();
  parallel(env, blocks, kBlock, [&](int64_t b0, int64_t b1) {
    for (int64_t i = b0 * kBlock, e = std::min(n, b1 * kBlock); i < e; ++i) {
      float v = std::nearbyint(x[i] / scale) + zp;
      if (!(v >= 0.0f)) v = 0.0f;
      if (v > 255.0f) v = 255.0f;
      y[i] = static_cast<uint8_t>(v);
    }
  });
  *out[1].as<float>() = scale;
  *out[2].as<uint8_t>() = static_cast<uint8_t>(zp);
}

}  // namespace kiln::cpu::extra
