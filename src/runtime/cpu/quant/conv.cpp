// Integer and quantized convolutions of the quant family: ConvInteger, QLinearConv, Kiln's
// kiln.QConv and its channels-last twin NhwcQConv.
//
// ConvInteger and QLinearConv: products of int32 values with the zero points subtracted, accumulated
// in uint32 (the exact int32 sum modulo 2^32, as matmul.cpp's), requantized (QLinearConv) as the
// ONNX reference does: multiplier = x_scale * w_scale / y_scale in float32,
// y = saturate(round_half_even(acc * multiplier + y_zero_point)), the product in double.
//
// kiln.QConv and kiln.QMatMul (made by the fuse-qdq pass; QMatMul is in matmul.cpp): integer
// products of int8/uint8 values with their zero points subtracted, accumulated exactly in 32 bits
// (uint32, so a sum past int32's range wraps as int32 accumulators do, without signed overflow),
// then the epilogue of runtime/qfused_math.h (scale, bias, residual, activation, requantization).
//
// Inputs: x, x_scale, [x_zero_point], w, w_scale, [w_zero_point], [bias], [y_scale], [y_zero_point],
// and for QConv [z], [z_scale], [z_zero_point]: a quantized residual of y's shape (fuse-qresidual).
// QConv: x [N, C, spatial...], w [M, C / group, kernel...]; im2col per image and group, then the
// integer GEMM (cpu/igemm.h) of the group's weights and the columns: int16 values with the zero
// points subtracted, or int8 values and dot products (quant_internal.h: the int8 route). QMatMul: x [..., rows, K]
// times w [N, K] transposed.
//
// NhwcQConv: kiln.QConv on channels-last x, y and z. Where oneDNN runs it (runtime/cpu/onednn.h:
// a CPU with VNNI, weights' zero points 0) the library runs the whole convolution, its epilogue as
// output scales and post-ops (one step off Kiln's rounding at rare half-step ties), or, with
// KILN_CPU_INT8_EPILOGUE=kiln or where the library cannot fuse it, computes the int32 sums and this
// file's epilogue the outputs, the same bits as QConv's; otherwise the inputs are permuted to
// channels-first (runtime/cpu/channels_last.h), QConv runs, its output is permuted back. With
// pool_mean the output is then averaged over the spatial axes with ReduceMean's kernel.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/infer/nn_geometry.h"
#include "core/shape_infer.h"
#include "runtime/cpu/channels_last.h"
#include "runtime/cpu/igemm.h"
#include "runtime/cpu/onednn.h"
#include "runtime/cpu/quant/quant_internal.h"

namespace kiln::cpu::quant {

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
  std::vector<uint32_t> acc(static_cast<size_t>(Mg * O));
  // For every image and group: its values (`prepare`), im2col (`column(row, x's channel, taps)`
  // writes row c * Ks + tap of the columns), the sums (`multiply`), the epilogue.
  auto each_group = [&](auto&& prepare, auto&& column, auto&& multiply) {
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t gi = 0; gi < G; ++gi) {
        prepare((n * C + gi * Cg) * I);
        // Threads take whole quads of rows: the int8 columns interleave 4 rows' bytes.
        parallel(env, (rows + 3) / 4, 4 * O, [&](int64_t q0, int64_t q1) {
          for (int64_t row = 4 * q0; row < std::min(rows, 4 * q1); ++row)
            column(row, (row / Ks) * I, tap.data() + (row % Ks) * O);
        });
        multiply(gi);
        parallel(env, Mg, O, [&](int64_t m0, int64_t m1) {
          for (int64_t mi = m0; mi < m1; ++mi)
            store(ch, gi * Mg + mi, acc.data() + mi * O, O, Y, (n * M + gi * Mg + mi) * O, 1);
        });
      }
    }
  };
  if (int8_route(W, ch)) {  // int8 values and dot products; the zero point's term from the weights' sums
    const int8_t* w = W.as<const int8_t>();
    const std::vector<int32_t> wsum = row_sums(w, M, rows);
    const auto zs = static_cast<int8_t>(shifted_zero(X.dtype, ch.x_zero));
    std::vector<int8_t> xs(static_cast<size_t>(Cg * I));
    Igemm8B col;
    col.resize(rows, O);
    each_group([&](int64_t first) { shifted(X, first, Cg * I, xs.data()); },
               [&](int64_t row, int64_t x0, const int64_t* t) {
                 const int8_t* xc = xs.data() + x0;
                 for (int64_t o = 0; o < O; ++o) col.set(row, o, pointwise ? xc[o] : t[o] < 0 ? zs : xc[t[o]]);
               },
               [&](int64_t gi) {
                 igemm8(Igemm8Kernel::kAuto, Mg, w + gi * Mg * rows, rows, col, acc.data(), O, env.pool);
                 subtract_zero_terms(acc.data(), Mg * O, zs, wsum.data() + gi * Mg, O, true);
               });
    return;
  }
  const std::vector<int16_t> w = centered_weights(W, ch, M, rows);
  std::vector<int16_t> xs(static_cast<size_t>(Cg * I));
  IgemmB col;  // im2col, written straight into the GEMM's packed layout
  col.resize(rows, O);
  each_group([&](int64_t first) { centered(X, first, Cg * I, ch.x_zero, xs.data()); },  // zero point subtracted
             [&](int64_t row, int64_t x0, const int64_t* t) {
               const int16_t* xc = xs.data() + x0;
               int16_t* cr = col.row(row);
               if (pointwise)
                 std::copy_n(xc, O, cr);
               else
                 for (int64_t o = 0; o < O; ++o) cr[o] = t[o] < 0 ? int16_t{0} : xc[t[o]];
             },
             [&](int64_t gi) {
               igemm16(IgemmKernel::kAuto, Mg, w.data() + gi * Mg * rows, rows, col, acc.data(), O, env.pool);
             });
}

// ---- NhwcQConv -----------------------------------------------------------------------------------

namespace {

// The integer sums in oneDNN (runtime/cpu/onednn.h: CPUs with VNNI; weights' zero points 0), then
// this file's epilogue on them: the same bits as qconv_kernel. False where the library does not run.
bool onednn_sums(const QConvAttrs& a, std::span<const TensorView> in, const TensorView& y, KernelEnv& env) {
  if (!onednn::int8_sums_available() || in.size() < 5 || y.rank() != 4) return false;
  const int64_t M = in[3].shape.empty() ? 0 : in[3].shape[0];
  const Channels ch = channels(in, M, a.activation, a.act_alpha, a.act_beta, y.dtype);
  if (std::any_of(ch.w_zero.begin(), ch.w_zero.end(), [](int32_t z) { return z != 0; })) return false;
  std::shared_ptr<void> hold;  // the sums' owner where the step has no state slot
  const int32_t* sums = onednn::nhwc_qconv_sums(a.conv(), in[0], ch.x_zero, in[3], y.shape, env, hold);
  if (!sums) return false;
  const int64_t rows = M ? y.numel() / M : 0;
  parallel(env, rows, M, [&](int64_t r0, int64_t r1) { store_rows(ch, sums, r0, r1, M, y); });
  return true;
}

// The whole convolution in oneDNN, its epilogue as the library's scales and post-ops (one pass
// over y; onednn.h: may differ from Kiln's rounding by one step). False where it does not run.
bool onednn_fused(const QConvAttrs& a, std::span<const TensorView> in, const TensorView& y, KernelEnv& env) {
  if (!onednn::int8_epilogue_in_library() || in.size() < 5 || y.rank() != 4) return false;
  const int64_t M = in[3].shape.empty() ? 0 : in[3].shape[0];
  const Channels ch = channels(in, M, a.activation, a.act_alpha, a.act_beta, y.dtype);
  if (std::any_of(ch.w_zero.begin(), ch.w_zero.end(), [](int32_t z) { return z != 0; })) return false;
  onednn::QEpilogue e;
  e.alpha = ch.alpha;
  e.bias = ch.bias;
  e.x_zero = ch.x_zero;
  e.act = ch.epi.act;
  e.act_alpha = ch.epi.act_alpha;
  e.act_beta = ch.epi.act_beta;
  e.quantize = ch.epi.quantize;
  e.y_scale = ch.epi.y_scale;
  e.y_zero = static_cast<int32_t>(ch.epi.y_zero);
  e.z = ch.z;
  e.z_scale = ch.epi.z_scale;
  e.z_zero = ch.epi.z_zero;
  return onednn::nhwc_qconv_fused(a.conv(), in[0], in[3], e, y, env);
}

}  // namespace

void nhwc_qconv_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                       KernelEnv& env) {
  using channels_last::Owned;
  if (std::get<QConvAttrs>(attrs).pool_mean) {
    // The pair fuse-conv-pool joined: the convolution's float32 output, then ReduceMean over its
    // spatial axes (the CPU's own, so the results are those of the pair).
    Attrs plain = attrs;
    std::get<QConvAttrs>(plain).pool_mean = 0;
    Owned full;
    full.shape = infer_shapes(OpKind::kNhwcQConv, plain, in, 1)[0].shape;
    full.bytes.resize(static_cast<size_t>(full.view(DataType::kFloat32).bytes()));
    const TensorView fv = full.view(DataType::kFloat32);
    nhwc_qconv_kernel(kind, plain, in, {&fv, 1}, env);
    std::vector<int64_t> axes;
    for (int64_t a = 1; a + 1 < static_cast<int64_t>(full.shape.size()); ++a) axes.push_back(a);
    const int64_t n_axes = static_cast<int64_t>(axes.size());
    const TensorView mean_in[2] = {fv, TensorView{DataType::kInt64, {&n_axes, 1}, axes.data(), true}};
    return cpu_kernel(OpKind::kReduceMean)(OpKind::kReduceMean, ReduceAttrs{}, std::span<const TensorView>(mean_in),
                                           out, env);
  }
  if (onednn_fused(std::get<QConvAttrs>(attrs), in, out[0], env) ||
      onednn_sums(std::get<QConvAttrs>(attrs), in, out[0], env))
    return;
  channels_last::run_channels_first(kind, in, out[0], [&](std::span<const TensorView> ins, const TensorView& y) {
    qconv_kernel(OpKind::kQConv, attrs, ins, {&y, 1}, env);
  });
}

namespace {

constexpr KernelEntry kEntries[] = {
    {OpKind::kConvInteger, conv_integer_kernel},
    {OpKind::kQLinearConv, qlinear_conv_kernel},
    {OpKind::kQConv, qconv_kernel},
    {OpKind::kNhwcQConv, nhwc_qconv_kernel},
};

}  // namespace

std::span<const KernelEntry> conv_kernel_entries() { return kEntries; }

}  // namespace kiln::cpu::quant
