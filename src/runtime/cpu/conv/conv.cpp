// Conv and ConvTranspose on the CPU, any number of spatial axes, and the ops built on them: FusedConv
// (Conv, then the epilogue of runtime/cpu/fused_epilogue.h) and its channels-last twin NhwcConv
// (runtime/cpu/channels_last.h).
//
// Conv: per (image, group, tile of output positions) the taps are gathered into a column matrix
// col[Cg * KS, tile] (im2col) and multiplied: Y_tile[Mg, tile] = W_g[Mg, Cg * KS] * col. A 1x1
// kernel with unit strides and no padding needs no gather: X itself is the column matrix.
// ConvTranspose: col[Mg * KS, tile] = W_g^T * X_g[Cg, tile], then each column entry is added to
// the output position it maps to (col2im). float32 uses sgemm, float64 a plain product, half
// types are widened to float32 and take the float32 path.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/infer/nn_geometry.h"
#include "core/layout.h"
#include "core/shape_infer.h"
#include "runtime/cpu/channels_last.h"
#include "runtime/cpu/fused_epilogue.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/onednn.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln::cpu::conv {

namespace {

using kiln::nn::WindowGeometry;

// Elements of a column tile; 1 MiB of floats keeps a tile and its GEMM panel cache-friendly.
constexpr int64_t kColBudget = int64_t{1} << 18;
constexpr int64_t kMinTile = 64;

int64_t ceil_div(int64_t a, int64_t b) {  // b > 0
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

// Moves data between an image [channels, img...] and the column matrix of grid positions
// [p0, p1): row (c * KS + tap), column (p - p0). Image position on axis i of grid position o and
// tap j: o * strides[i] - pads[i] + j * dilations[i]. kScatter = false gathers (positions outside
// the image read as 0); kScatter = true adds the columns into the image (outside ones dropped).
template <class T, bool kScatter>
void im_col(std::conditional_t<kScatter, T*, const T*> img, int64_t channels, const std::vector<int64_t>& img_dims,
            const std::vector<int64_t>& grid_dims, const WindowGeometry& g, int64_t p0, int64_t p1,
            std::conditional_t<kScatter, const T*, T*> col) {
  const size_t n = img_dims.size();
  const int64_t ks = WindowGeometry::product(g.kernel), img_size = WindowGeometry::product(img_dims);
  const int64_t width = p1 - p0, gl = grid_dims[n - 1], il = img_dims[n - 1], sl = g.strides[n - 1];
  std::vector<int64_t> img_stride(n, 1);
  for (size_t i = n - 1; i-- > 0;) img_stride[i] = img_stride[i + 1] * img_dims[i + 1];
  std::vector<int64_t> tap(n, 0);
  for (int64_t c = 0; c < channels; ++c) {
    std::fill(tap.begin(), tap.end(), 0);
    for (int64_t kk = 0; kk < ks; ++kk) {
      auto* row = col + (c * ks + kk) * width;
      auto* plane = img + c * img_size;
      // On the last axis the image index is o * sl + off; it is inside for o in [lo, hi).
      const int64_t off = tap[n - 1] * g.dilations[n - 1] - g.pads[n - 1];
      const int64_t lo = std::clamp<int64_t>(ceil_div(-off, sl), 0, gl);
      const int64_t hi = std::clamp<int64_t>(ceil_div(il - off, sl), lo, gl);
      for (int64_t p = p0; p < p1;) {
        const int64_t q = p / gl, l0 = p % gl, l1 = std::min(gl, l0 + (p1 - p));
        bool inside = true;
        int64_t base = 0;
        int64_t rem = q;
        for (size_t i = n - 1; i-- > 0;) {
          const int64_t o = rem % grid_dims[i];
          rem /= grid_dims[i];
          const int64_t ii = o * g.strides[i] - g.pads[i] + tap[i] * g.dilations[i];
          if (ii < 0 || ii >= img_dims[i]) inside = false;
          base += ii * img_stride[i];
        }
        // Column of last-axis grid index o is row[d0 + o]; image element of o is plane[s0 + o * sl].
        const int64_t d0 = (p - p0) - l0, s0 = base + off;
        if (!inside) {
          if constexpr (!kScatter) std::fill(row + d0 + l0, row + d0 + l1, T(0));
        } else {
          // The inside part [a, b) of this stretch [l0, l1), which may lie wholly before or after
          // the inside range [lo, hi): clamped to the stretch, never past its end.
          const int64_t a = std::clamp(lo, l0, l1), b = std::clamp(hi, a, l1);
          if constexpr (!kScatter) {
            std::fill(row + d0 + l0, row + d0 + a, T(0));
            if (sl == 1 && b > a) {
              std::memcpy(row + d0 + a, plane + s0 + a, static_cast<size_t>(b - a) * sizeof(T));
            } else {
              for (int64_t o = a; o < b; ++o) row[d0 + o] = plane[s0 + o * sl];
            }
            std::fill(row + d0 + b, row + d0 + l1, T(0));
          } else {
            for (int64_t o = a; o < b; ++o) plane[s0 + o * sl] += row[d0 + o];
          }
        }
        p += l1 - l0;
      }
      for (size_t i = n; i-- > 0;)  // next tap, row-major
        if (++tap[i] < g.kernel[i])
          break;
        else
          tap[i] = 0;
    }
  }
}

template <class T>
void conv_forward(const T* x, const T* w, const T* bias, T* y, int64_t batch, int64_t C, int64_t M, int64_t G,
                  const WindowGeometry& g, ThreadPool* pool) {
  const int64_t cg = C / G, mg = M / G, ks = WindowGeometry::product(g.kernel);
  const int64_t k = cg * ks, P = WindowGeometry::product(g.out), I = WindowGeometry::product(g.in);
  if (batch == 0 || M == 0 || P == 0) return;
  if (k == 0) {  // no input channels: the bias alone
    for (int64_t i = 0; i < batch * M; ++i) std::fill(y + i * P, y + (i + 1) * P, bias ? bias[i % M] : T(0));
    return;
  }
  bool pointwise = ks == 1;
  for (size_t i = 0; i < g.rank(); ++i) pointwise &= g.strides[i] == 1 && g.pads[i] == 0 && g.pads[g.rank() + i] == 0;
  const int threads = pool ? pool->team() : 1;
  int64_t tile = pointwise ? P : std::min(P, std::max(kMinTile, kColBudget / k));
  if (threads > 1 && batch * G < threads) {
    // Too few images and groups to keep every thread busy: split the output positions as well.
    const int64_t per_image = (threads + batch * G - 1) / (batch * G);
    tile = std::min(tile, std::max(kMinTile, (P + per_image - 1) / per_image));
  }
  const int64_t tiles = (P + tile - 1) / tile, tasks = batch * G * tiles;

  auto run = [&](int64_t t, std::vector<T>& col, ThreadPool* inner) {
    const int64_t img = t / (G * tiles), grp = (t / tiles) % G, p0 = (t % tiles) * tile;
    const int64_t p1 = std::min(P, p0 + tile), width = p1 - p0;
    const T* xg = x + (img * C + grp * cg) * I;
    const T* bm = xg + p0;
    int64_t ldb = P;
    if (!pointwise) {
      col.resize(static_cast<size_t>(k * tile));
      im_col<T, false>(xg, cg, g.in, g.out, g, p0, p1, col.data());
      bm = col.data();
      ldb = width;
    }
    T* yt = y + (img * M + grp * mg) * P + p0;
    gemm_t<T>(false, false, mg, width, k, w + grp * mg * k, k, bm, ldb, yt, P, inner);
    if (bias)
      for (int64_t m = 0; m < mg; ++m) {
        const T bv = bias[grp * mg + m];
        for (int64_t i = 0; i < width; ++i) yt[m * P + i] += bv;
      }
  };
  if (threads > 1 && tasks >= threads) {
    pool->parallel_for(tasks, [&](int64_t t0, int64_t t1) {
      std::vector<T> col;
      for (int64_t t = t0; t < t1; ++t) run(t, col, nullptr);
    });
  } else {
    std::vector<T> col;
    for (int64_t t = 0; t < tasks; ++t) run(t, col, pool);
  }
}

template <class T>
void conv_transpose(const T* x, const T* w, const T* bias, T* y, int64_t batch, int64_t C, int64_t M, int64_t G,
                    const WindowGeometry& g, ThreadPool* pool) {
  const int64_t cg = C / G, mg = M / G, ks = WindowGeometry::product(g.kernel), rows = mg * ks;
  const int64_t pin = WindowGeometry::product(g.in), pout = WindowGeometry::product(g.out);
  if (batch == 0 || M == 0 || pout == 0) return;
  for (int64_t i = 0; i < batch * M; ++i) std::fill(y + i * pout, y + (i + 1) * pout, bias ? bias[i % M] : T(0));
  if (cg == 0 || pin == 0) return;
  const int64_t tile = std::min(pin, std::max(kMinTile, kColBudget / std::max<int64_t>(rows, 1)));
  const int threads = pool ? pool->team() : 1;
  // One (image, group) pair: tiles run in order since different tiles add into the same outputs.
  auto run = [&](int64_t t, std::vector<T>& col, ThreadPool* inner) {
    const int64_t img = t / G, grp = t % G;
    const T* xg = x + (img * C + grp * cg) * pin;
    const T* wg = w + grp * cg * rows;
    T* yg = y + (img * M + grp * mg) * pout;
    col.resize(static_cast<size_t>(rows * tile));
    for (int64_t p0 = 0; p0 < pin; p0 += tile) {
      const int64_t p1 = std::min(pin, p0 + tile), width = p1 - p0;
      gemm_t<T>(true, false, rows, width, cg, wg, rows, xg + p0, pin, col.data(), width, inner);
      if (inner && inner->team() > 1 && mg > 1) {
        // Output channels are disjoint image planes: scatter them in parallel.
        inner->parallel_for(mg, [&](int64_t m0, int64_t m1) {
          im_col<T, true>(yg + m0 * pout, m1 - m0, g.out, g.in, g, p0, p1, col.data() + m0 * ks * width);
        });
      } else {
        im_col<T, true>(yg, mg, g.out, g.in, g, p0, p1, col.data());
      }
    }
  };
  const int64_t tasks = batch * G;
  if (threads > 1 && tasks >= threads) {
    pool->parallel_for(tasks, [&](int64_t t0, int64_t t1) {
      std::vector<T> col;
      for (int64_t t = t0; t < t1; ++t) run(t, col, nullptr);
    });
  } else {
    std::vector<T> col;
    for (int64_t t = 0; t < tasks; ++t) run(t, col, pool);
  }
}

template <class T>
void conv_typed(bool transpose, const T* x, const T* w, const T* b, T* y, int64_t batch, int64_t C, int64_t M,
                int64_t G, const WindowGeometry& g, ThreadPool* pool) {
  if (transpose)
    conv_transpose<T>(x, w, b, y, batch, C, M, G, g, pool);
  else
    conv_forward<T>(x, w, b, y, batch, C, M, G, g, pool);
}

template <class T>
std::vector<float> to_float(const TensorView& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(t.as<const T>()[i]);
  return v;
}

}  // namespace

void conv_compute(bool transpose, const ConvAttrs& a, std::span<const TensorView> in, std::span<const TensorView> out,
                  KernelEnv& env) {
  const TensorView &X = in[0], &W = in[1], &Y = out[0];
  const TensorView* B = in.size() > 2 && in[2].exists ? &in[2] : nullptr;
  const WindowGeometry g =
      transpose ? kiln::nn::conv_transpose_geometry(a, X.shape, W.shape) : kiln::nn::conv_geometry(a, X.shape, W.shape);
  const int64_t batch = X.shape[0], C = X.shape[1], M = Y.shape[1], G = a.group;
  dispatch_float(X.dtype, transpose ? "ConvTranspose" : "Conv", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      conv_typed<T>(transpose, X.as<const T>(), W.as<const T>(), B ? B->as<const T>() : nullptr, Y.as<T>(), batch, C, M,
                    G, g, env.pool);
    } else {
      std::vector<float> xf = to_float<T>(X), wf = to_float<T>(W), bf, yf(static_cast<size_t>(Y.numel()));
      if (B) bf = to_float<T>(*B);
      conv_typed<float>(transpose, xf.data(), wf.data(), B ? bf.data() : nullptr, yf.data(), batch, C, M, G, g,
                        env.pool);
      T* y = Y.as<T>();
      for (size_t i = 0; i < yf.size(); ++i) y[i] = T(yf[i]);
    }
  });
}

void conv_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                 KernelEnv& env) {
  conv_compute(kind == OpKind::kConvTranspose, std::get<ConvAttrs>(attrs), in, out, env);
}

// ---- FusedConv ---------------------------------------------------------------------------------

void fused_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                  KernelEnv& env) {
  const std::span<const TensorView> product_in = in.first(std::min<size_t>(in.size(), 3));
  const TensorView* z = fused::optional_input(in, 3);
  switch (kind) {
    case OpKind::kFusedConv: {
      const auto& a = std::get<FusedConvAttrs>(attrs);
      conv_compute(false, a, product_in, out, env);
      return fused::apply_epilogue(a, out[0], nullptr, z, env);
    }
    default: throw Error(std::string(op_name(kind)) + " is not a fused op");
  }
}

// ---- NhwcConv ----------------------------------------------------------------------------------
// float32 in oneDNN where Kiln has it (runtime/cpu/onednn.h: what CPU engines' channels-last
// convolutions run; a quantized output is quantized after, from a float32 buffer). Otherwise
// FusedConv on channels-last data: X (unless x_channels_first, when it
// is only cast to W's type), W and Z permuted to channels-first, the output permuted back. With
// y_scale it quantizes FusedConv's output.

void nhwc_conv_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                      KernelEnv& env) {
  if (in.size() > 4 && in[4].exists) {
    // A quantized output (fuse-conv-quantize): the float32 output in oneDNN into a buffer this
    // thread keeps, then QuantizeLinear's kernel on it.
    thread_local std::vector<float> buffer;
    const TensorView& y = out[0];
    if (buffer.size() < static_cast<size_t>(y.numel())) buffer.resize(static_cast<size_t>(y.numel()));
    const TensorView fv{DataType::kFloat32, y.shape, buffer.data(), true};
    if (onednn::nhwc_conv(std::get<FusedConvAttrs>(attrs), in.first(4), fv, env)) {
      const TensorView q_in[3] = {fv, in[4], in.size() > 5 ? in[5] : TensorView{DataType::kUInt8, {}, nullptr, false}};
      cpu_kernel(OpKind::kQuantizeLinear)(OpKind::kQuantizeLinear, QuantizeAttrs{}, std::span<const TensorView>(q_in),
                                          out.first(1), env);
      return;
    }
  } else if (onednn::nhwc_conv(std::get<FusedConvAttrs>(attrs), in, out[0], env)) {
    return;
  }
  using channels_last::Owned;
  Owned cast_x;  // X cast to W's type, when it is channels-first already
  std::vector<TensorView> ins(in.begin(), in.end());
  Attrs conv_attrs = attrs;
  auto& a = std::get<FusedConvAttrs>(conv_attrs);
  const bool x_first = a.x_channels_first != 0;
  a.x_channels_first = 0;
  if (x_first && in[0].dtype != in[1].dtype) {
    cast_x = Owned{{in[0].shape.begin(), in[0].shape.end()},
                   std::vector<uint8_t>(static_cast<size_t>(in[0].numel()) * dtype_size(in[1].dtype))};
    const TensorView xv = cast_x.view(in[1].dtype);
    CastAttrs cast;
    cast.to = in[1].dtype;
    cpu_kernel(OpKind::kCast)(OpKind::kCast, cast, std::span<const TensorView>(&in[0], 1), {&xv, 1}, env);
    ins[0] = xv;
  }
  channels_last::run_channels_first(
      kind, ins, out[0],
      [&](std::span<const TensorView> first, const TensorView& y) {
        if (first.size() > 4 && first[4].exists) {
          // A quantized output: FusedConv's output in X's type, then QuantizeLinear.
          Owned f{{y.shape.begin(), y.shape.end()},
                  std::vector<uint8_t>(static_cast<size_t>(y.numel()) * dtype_size(first[0].dtype))};
          const TensorView fv = f.view(first[0].dtype);
          fused_kernel(OpKind::kFusedConv, conv_attrs, first.first(4), {&fv, 1}, env);
          const TensorView q_in[3] = {fv, first[4], first[5]};
          cpu_kernel(OpKind::kQuantizeLinear)(OpKind::kQuantizeLinear, QuantizeAttrs{},
                                              std::span<const TensorView>(q_in), {&y, 1}, env);
        } else {
          fused_kernel(OpKind::kFusedConv, conv_attrs, first, {&y, 1}, env);
        }
      },
      x_first);
}

namespace {

constexpr KernelEntry kEntries[] = {
    {OpKind::kConv, conv_kernel},
    {OpKind::kConvTranspose, conv_kernel},
    {OpKind::kFusedConv, fused_kernel},
    {OpKind::kNhwcConv, nhwc_conv_kernel},
};

}  // namespace

}  // namespace kiln::cpu::conv

namespace kiln::cpu {

std::span<const KernelEntry> conv_kernels() { return conv::kEntries; }

}  // namespace kiln::cpu
