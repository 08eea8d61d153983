// Integer and quantized convolutions on the GPU: ConvInteger, QLinearConv, and the conv group's
// table, which also lists QConv (qfused.cu) and NhwcQConv (conv/nhwc.cu). Bit-exact with the CPU
// kernels (runtime/cpu/quant/conv.cpp): products of zero-point-subtracted int8/uint8 values
// accumulate in uint32 (the exact int32 sum modulo 2^32, no signed overflow), and requantization
// forms the multiplier in float and rounds acc * multiplier + zero_point once per operation in
// double, half to even (quant_internal.cuh).
//
// Direct, one thread per output element looping over its group's channels and the kernel taps;
// taps in the padding contribute 0 (the padding holds the zero point). Up to 8 spatial axes. Not on
// the benchmark path: simple over fast.
#include "core/infer/nn_geometry.h"
#include "runtime/cuda/quant/quant_internal.cuh"

namespace kiln::gpu::quant {

namespace {

template <class Fn>
void dispatch_q8(DataType t, const char* op, Fn&& fn) {
  if (t == DataType::kUInt8)
    fn(Tag<uint8_t>{});
  else if (t == DataType::kInt8)
    fn(Tag<int8_t>{});
  else
    ew::throw_gpu_dtype(t, op);
}

// ---- convolutions ----------------------------------------------------------------------------

constexpr int kMaxSpatial = 8;

struct ConvGeo {
  int r = 0;
  int64_t in[kMaxSpatial] = {}, out[kMaxSpatial] = {}, k[kMaxSpatial] = {};
  int64_t stride[kMaxSpatial] = {}, dil[kMaxSpatial] = {}, pad[kMaxSpatial] = {};
  int64_t I = 1, O = 1, Ks = 1;  // products of in, out and k
  int64_t N = 0, C = 0, M = 0, Cg = 0, Mg = 0;
};

ConvGeo conv_geo(const ConvAttrs& attrs, const TensorView& X, const TensorView& W, const char* op) {
  const kiln::nn::WindowGeometry g = kiln::nn::conv_geometry(attrs, X.shape, W.shape);
  if (g.rank() > static_cast<size_t>(kMaxSpatial))
    throw Error(std::string(op) + ": " + std::to_string(g.rank()) +
                " spatial axes; the CUDA backend supports at most " + std::to_string(kMaxSpatial));
  ConvGeo c;
  c.r = static_cast<int>(g.rank());
  for (int i = 0; i < c.r; ++i) {
    c.in[i] = g.in[i];
    c.out[i] = g.out[i];
    c.k[i] = g.kernel[i];
    c.stride[i] = g.strides[i];
    c.dil[i] = g.dilations[i];
    c.pad[i] = g.pads[i];
    c.I *= g.in[i];
    c.O *= g.out[i];
    c.Ks *= g.kernel[i];
  }
  c.N = X.shape[0];
  c.C = X.shape[1];
  c.M = W.shape[0];
  c.Cg = c.C / attrs.group;
  c.Mg = c.M / attrs.group;
  return c;
}

// epi(out_index, m, acc) for every output element (n, m, o...).
template <class TX, class TW, class Epi>
__global__ void __launch_bounds__(ew::kThreads)
    qconv_kernel(const TX* x, const TW* w, ConvGeo g, QParam zx_p, QParam zw, Epi epi) {
  const int64_t total = g.N * g.M * g.O;
  const int32_t zx = load_zero_point(zx_p, 0);
  for (int64_t e = ew::global_thread(); e < total; e += ew::grid_threads()) {
    int64_t o = e % g.O;
    const int64_t nm = e / g.O, m = nm % g.M, n = nm / g.M, gi = m / g.Mg;
    int64_t base[kMaxSpatial];
    for (int d = g.r - 1; d >= 0; --d) {
      base[d] = (o % g.out[d]) * g.stride[d] - g.pad[d];
      o /= g.out[d];
    }
    const int32_t zwm = load_zero_point(zw, zw.at(0, m));
    uint32_t acc = 0;
    for (int64_t c = 0; c < g.Cg; ++c) {
      const TX* xc = x + (n * g.C + gi * g.Cg + c) * g.I;
      const TW* wc = w + (m * g.Cg + c) * g.Ks;
      int64_t tap[kMaxSpatial] = {};
      for (int64_t t = 0; t < g.Ks; ++t) {
        int64_t off = 0;
        bool inside = true;
        for (int d = 0; d < g.r; ++d) {
          const int64_t p = base[d] + tap[d] * g.dil[d];
          inside = inside && p >= 0 && p < g.in[d];
          off = off * g.in[d] + p;
        }
        if (inside)
          acc += static_cast<uint32_t>(static_cast<int32_t>(wc[t]) - zwm) *
                 static_cast<uint32_t>(static_cast<int32_t>(xc[off]) - zx);
        for (int d = g.r - 1; d >= 0; --d) {  // next tap, last axis fastest
          if (++tap[d] < g.k[d]) break;
          tap[d] = 0;
        }
      }
    }
    epi(e, m, acc);
  }
}

struct ConvIntOut {
  int32_t* y;
  __device__ void operator()(int64_t e, int64_t, uint32_t acc) const { y[e] = static_cast<int32_t>(acc); }
};

// y = requantize((acc + bias[m]) * (s_x * s_w[m] / s_y) + z_y); bias added modulo 2^32 as the CPU.
template <class TY>
struct QLinearConvOut {
  TY* y;
  const int32_t* bias;
  QParam sx, sw, sy, zy;
  double lo, hi;
  __device__ void operator()(int64_t e, int64_t m, uint32_t acc) const {
    const uint32_t b = bias ? static_cast<uint32_t>(bias[m]) : 0u;
    y[e] = static_cast<TY>(requantize_acc(static_cast<int32_t>(acc + b), load_scale(sx, 0), load_scale(sw, sw.at(0, m)),
                                          load_scale(sy, 0), load_zero_point(zy, 0), lo, hi));
  }
};

template <class Epi>
void launch_qconv(const TensorView& X, const TensorView& W, const ConvGeo& g, const QParam& zx, const QParam& zw,
                  const Epi& epi, GpuEnv& env, const char* op) {
  const int64_t total = g.N * g.M * g.O;
  if (total == 0) return;
  dispatch_q8(X.dtype, op, [&](auto tx) {
    dispatch_q8(W.dtype, op, [&](auto tw) {
      using TX = typename decltype(tx)::type;
      using TW = typename decltype(tw)::type;
      qconv_kernel<TX, TW, Epi><<<ew::blocks_for(total), ew::kThreads, 0, env.stream>>>(
          static_cast<const TX*>(X.data), static_cast<const TW*>(W.data), g, zx, zw, epi);
      check_launch(op);
    });
  });
}

// Per output channel: one value or [M] (mode 1).
QParam channel_param(std::span<const TensorView> in, size_t i, const char* op) {
  QParam q = make_qparam(in, i, 1, op);
  if (q.at.mode == 2) q.at.mode = 1;
  return q;
}

// A single value (index 0).
QParam scalar_param(std::span<const TensorView> in, size_t i, const char* op) {
  QParam q = make_qparam(in, i, 1, op);
  q.at.mode = 0;
  return q;
}

}  // namespace

void conv_integer_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                         GpuEnv& env) {
  const char* op = "ConvInteger";
  const ConvGeo g = conv_geo(std::get<ConvAttrs>(attrs), in[0], in[1], op);
  launch_qconv(in[0], in[1], g, scalar_param(in, 2, op), channel_param(in, 3, op),
               ConvIntOut{static_cast<int32_t*>(out[0].data)}, env, op);
}

void qlinear_conv_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                         GpuEnv& env) {
  const char* op = "QLinearConv";
  const ConvGeo g = conv_geo(std::get<ConvAttrs>(attrs), in[0], in[3], op);
  const int32_t* bias = in.size() > 8 && in[8].exists ? static_cast<const int32_t*>(in[8].data) : nullptr;
  const QParam sx = scalar_param(in, 1, op), sw = channel_param(in, 4, op), sy = scalar_param(in, 6, op);
  const QParam zy = scalar_param(in, 7, op);
  if (out[0].dtype == DataType::kInt8)
    launch_qconv(in[0], in[3], g, scalar_param(in, 2, op), channel_param(in, 5, op),
                 QLinearConvOut<int8_t>{static_cast<int8_t*>(out[0].data), bias, sx, sw, sy, zy, -128, 127}, env, op);
  else if (out[0].dtype == DataType::kUInt8)
    launch_qconv(in[0], in[3], g, scalar_param(in, 2, op), channel_param(in, 5, op),
                 QLinearConvOut<uint8_t>{static_cast<uint8_t*>(out[0].data), bias, sx, sw, sy, zy, 0, 255}, env, op);
  else
    ew::throw_gpu_dtype(out[0].dtype, op);
}

namespace {

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kConvInteger, conv_integer_kernel},
    {OpKind::kQLinearConv, qlinear_conv_kernel},
    {OpKind::kQConv, quant::qconv_kernel},  // qfused.cu (not the kernel template above)
    {OpKind::kNhwcQConv, qconv_nhwc_kernel, qconv_nhwc_workspace, qconv_nhwc_tactics},
};

}  // namespace

std::span<const GpuKernelEntry> conv_entries() { return kEntries; }

}  // namespace kiln::gpu::quant
