// CPU kernels of Kiln's INT8 ops kiln.QConv and kiln.QMatMul (made by the fuse-qdq pass): integer
// products of int8/uint8 values with their zero points subtracted, accumulated exactly in 32 bits
// (uint32, so a sum past int32's range wraps as int32 accumulators do, without signed overflow),
// then the epilogue of runtime/qfused_math.h (scale, bias, residual, activation, requantization).
//
// Inputs: x, x_scale, [x_zero_point], w, w_scale, [w_zero_point], [bias], [y_scale], [y_zero_point],
// and for QConv [z], [z_scale], [z_zero_point]: a quantized residual of y's shape (fuse-qresidual).
// QConv: x [N, C, spatial...], w [M, C / group, kernel...]; im2col per image and group, then the
// integer GEMM (cpu/igemm.h) of the group's weights and the columns. QMatMul: x [..., rows, K]
// times w [N, K] transposed.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/infer/nn_geometry.h"
#include "runtime/cpu/igemm.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/qfused_math.h"

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

bool present(std::span<const TensorView> in, size_t i) { return i < in.size() && in[i].exists; }

// int8/uint8 values as int32; absent: {0}.
std::vector<int32_t> ints(std::span<const TensorView> in, size_t i) {
  if (!present(in, i)) return {0};
  const TensorView& t = in[i];
  std::vector<int32_t> v(static_cast<size_t>(t.numel()));
  for (size_t k = 0; k < v.size(); ++k)
    v[k] = t.dtype == DataType::kInt8 ? int32_t{t.as<const int8_t>()[k]} : int32_t{t.as<const uint8_t>()[k]};
  return v;
}

// What every output channel m needs: alpha = x_scale * w_scale[m], bias, w's zero point; and the
// residual z (null: none), read at y's element index.
struct Channels {
  std::vector<float> alpha, bias;
  std::vector<int32_t> w_zero;
  int32_t x_zero = 0;
  qfused::Epilogue epi;
  const TensorView* z = nullptr;

  float plus_residual(float real, int64_t i) const {
    if (z->dtype == DataType::kFloat32) return qfused::add_rn(real, z->as<const float>()[i]);
    return epi.plus_residual(real, z_at(i));
  }
  int32_t z_at(int64_t i) const {
    return z->dtype == DataType::kInt8 ? int32_t{z->as<const int8_t>()[i]} : int32_t{z->as<const uint8_t>()[i]};
  }
};

Channels channels(std::span<const TensorView> in, int64_t m, QActivation act, float act_alpha, float act_beta,
                  DataType out_type) {
  Channels c;
  const float sx = *in[1].as<const float>();
  const float* sw = in[4].as<const float>();
  const bool per_channel = in[4].numel() != 1;
  const std::vector<int32_t> zw = ints(in, 5);
  c.x_zero = ints(in, 2)[0];
  c.alpha.resize(static_cast<size_t>(m));
  c.bias.assign(static_cast<size_t>(m), 0.0f);
  c.w_zero.resize(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    c.alpha[i] = qfused::mul_rn(sx, sw[per_channel ? i : 0]);
    c.w_zero[i] = zw[zw.size() == 1 ? 0 : static_cast<size_t>(i)];
  }
  if (present(in, 6)) std::copy_n(in[6].as<const float>(), m, c.bias.begin());
  c.epi.act = static_cast<int>(act);
  c.epi.act_alpha = act_alpha;
  c.epi.act_beta = act_beta;
  c.epi.quantize = present(in, 7);
  if (c.epi.quantize) {
    c.epi.y_scale = *in[7].as<const float>();
    c.epi.y_zero = static_cast<float>(ints(in, 8)[0]);
    c.epi.qmin = out_type == DataType::kUInt8 ? 0.0f : -128.0f;
    c.epi.qmax = out_type == DataType::kUInt8 ? 255.0f : 127.0f;
  }
  if (present(in, 9)) {
    c.z = &in[9];
    if (in[9].dtype != DataType::kFloat32) {
      c.epi.z_scale = *in[10].as<const float>();
      c.epi.z_zero = ints(in, 11)[0];
    }
  }
  return c;
}

// Writes outputs y[0..count) at stride `step` from accumulators of channel m.
void store(const Channels& c, int64_t m, const uint32_t* acc, int64_t count, const TensorView& y, int64_t offset,
           int64_t step) {
  const float alpha = c.alpha[m], bias = c.bias[m];
  for (int64_t i = 0; i < count; ++i) {
    const int64_t at = offset + i * step;
    float real = qfused::Epilogue::real(acc[i], alpha, bias);
    if (c.z) real = c.plus_residual(real, at);
    const float v = c.epi.activate(real);
    if (!c.epi.quantize)
      y.as<float>()[at] = v;
    else if (y.dtype == DataType::kInt8)
      y.as<int8_t>()[at] = static_cast<int8_t>(c.epi.quantized(v));
    else
      y.as<uint8_t>()[at] = static_cast<uint8_t>(c.epi.quantized(v));
  }
}

// The elements of a q8 tensor minus `zero`, as int16 (values in [-255, 255]).
template <class T>
void centered(const T* p, int64_t n, int32_t zero, int16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int16_t>(static_cast<int32_t>(p[i]) - zero);
}
void centered(const TensorView& t, int64_t offset, int64_t n, int32_t zero, int16_t* out) {
  if (t.dtype == DataType::kInt8)
    centered(t.as<const int8_t>() + offset, n, zero, out);
  else
    centered(t.as<const uint8_t>() + offset, n, zero, out);
}

// w with each output channel's zero point subtracted: [m][k] as int16.
std::vector<int16_t> centered_weights(const TensorView& w, const Channels& c, int64_t m, int64_t k) {
  std::vector<int16_t> out(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i) centered(w, i * k, k, c.w_zero[i], out.data() + i * k);
  return out;
}

}  // namespace

void qconv_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                  KernelEnv& env) {
  const auto& a = std::get<QConvAttrs>(attrs);
  const TensorView &X = in[0], &W = in[3], &Y = out[0];
  const kiln::nn::WindowGeometry g = kiln::nn::conv_geometry(a.conv(), X.shape, W.shape);
  const size_t r = g.rank();
  const int64_t N = X.shape[0], C = X.shape[1], M = W.shape[0], G = a.group;
  const int64_t Cg = C / G, Mg = M / G;
  const int64_t Ks = kiln::nn::WindowGeometry::product(g.kernel), O = kiln::nn::WindowGeometry::product(g.out);
  const int64_t I = kiln::nn::WindowGeometry::product(g.in), rows = Cg * Ks;
  if (N == 0 || M == 0 || O == 0) return;
  const Channels ch = channels(in, M, a.activation, a.act_alpha, a.act_beta, Y.dtype);
  const std::vector<int16_t> w = centered_weights(W, ch, M, rows);

  // Input offset of every (tap, output position), -1 where the tap falls in the padding.
  std::vector<int64_t> tap(static_cast<size_t>(Ks * O));
  std::vector<int64_t> idx(2 * r, 0);  // kernel tap multi-index in [0, r), output position in [r, 2r)
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

  // A 1x1 kernel with unit strides and no padding reads x as it is: im2col is a copy.
  bool pointwise = Ks == 1;
  for (size_t i = 0; i < r; ++i) pointwise = pointwise && g.strides[i] == 1 && g.pads[i] == 0 && g.pads[r + i] == 0;
  std::vector<int16_t> xs(static_cast<size_t>(Cg * I));
  IgemmB col;  // im2col, written straight into the GEMM's packed layout
  col.resize(rows, O);
  std::vector<uint32_t> acc(static_cast<size_t>(Mg * O));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t gi = 0; gi < G; ++gi) {
      // This image's group with the zero point subtracted, then im2col: col[c * Ks + tap][o].
      centered(X, (n * C + gi * Cg) * I, Cg * I, ch.x_zero, xs.data());
      parallel(env, rows, O, [&](int64_t r0, int64_t r1) {
        for (int64_t row = r0; row < r1; ++row) {
          const int16_t* xc = xs.data() + (row / Ks) * I;
          const int64_t* t = tap.data() + (row % Ks) * O;
          int16_t* cr = col.row(row);
          if (pointwise)
            std::copy_n(xc, O, cr);
          else
            for (int64_t o = 0; o < O; ++o) cr[o] = t[o] < 0 ? int16_t{0} : xc[t[o]];
        }
      });
      igemm16(IgemmKernel::kAuto, Mg, w.data() + gi * Mg * rows, rows, col, acc.data(), O, env.pool);
      parallel(env, Mg, O, [&](int64_t m0, int64_t m1) {
        for (int64_t mi = m0; mi < m1; ++mi)
          store(ch, gi * Mg + mi, acc.data() + mi * O, O, Y, (n * M + gi * Mg + mi) * O, 1);
      });
    }
  }
}

void qmatmul_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                    KernelEnv& env) {
  const auto& a = std::get<QMatMulAttrs>(attrs);
  const TensorView &X = in[0], &W = in[3], &Y = out[0];
  const int64_t K = W.shape[1], Nc = W.shape[0];
  const int64_t R = K > 0 ? X.numel() / K : Y.numel() / std::max<int64_t>(Nc, 1);
  if (R == 0 || Nc == 0) return;
  const Channels ch = channels(in, Nc, a.activation, a.act_alpha, a.act_beta, Y.dtype);
  const std::vector<int16_t> w = centered_weights(W, ch, Nc, K);
  IgemmB wt;  // w transposed to [K, N]
  wt.resize(K, Nc);
  for (int64_t j = 0; j < Nc; ++j)
    for (int64_t k = 0; k < K; ++k) wt.row(k)[j] = w[static_cast<size_t>(j * K + k)];
  std::vector<int16_t> xs(static_cast<size_t>(R * K));
  centered(X, 0, R * K, ch.x_zero, xs.data());
  std::vector<uint32_t> acc(static_cast<size_t>(R * Nc));
  igemm16(IgemmKernel::kAuto, R, xs.data(), K, wt, acc.data(), Nc, env.pool);
  parallel(env, R, Nc, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row)
      for (int64_t j = 0; j < Nc; ++j) store(ch, j, acc.data() + row * Nc + j, 1, Y, row * Nc + j, 1);
  });
}

}  // namespace kiln::cpu::extra
