// Integer and quantized matrix products and convolutions on the GPU: MatMulInteger, QLinearMatMul,
// ConvInteger, QLinearConv. Bit-exact with the CPU kernels (runtime/cpu/ops/extra_quant.cpp):
// products of zero-point-subtracted int8/uint8 values accumulate in uint32 (the exact int32 sum
// modulo 2^32, no signed overflow), and requantization forms the multiplier in float and rounds
// acc * multiplier + zero_point once per operation in double, half to even (extra_internal.cuh).
//
// Matrix products: 16 x 16 output tiles per block of 256 threads, K in steps of 16 through shared
// memory (int32 values with the zero points already subtracted). Batch axes broadcast numpy-style:
// the output batch index is decoded on the device into A's and B's batch indices (up to 8 batch
// axes). Quantization parameters (scalar, per row of A / column of B, or per batch and row) are
// read from device memory by the kernels.
// Convolutions: direct, one thread per output element looping over its group's channels and the
// kernel taps; taps in the padding contribute 0 (the padding holds the zero point). Up to 8
// spatial axes. Not on the benchmark path: simple over fast.
#include "core/infer/nn_geometry.h"
#include "runtime/cuda/extra_internal.cuh"

namespace kiln::gpu::extra {

namespace {

constexpr int kTile = 16;
constexpr int kMaxBatchDims = 8;

// ---- matrix products -------------------------------------------------------------------------

// Output batch b -> (A's batch, B's batch): b's digits in `shape`, dotted with each one's strides.
struct BatchMap {
  int rank = 0;
  int64_t shape[kMaxBatchDims] = {};
  int64_t sa[kMaxBatchDims] = {};
  int64_t sb[kMaxBatchDims] = {};
  __device__ void decode(int64_t b, int64_t& ia, int64_t& ib) const {
    ia = 0;
    ib = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t idx = b % shape[d];
      b /= shape[d];
      ia += idx * sa[d];
      ib += idx * sb[d];
    }
  }
};

struct MatmulDims {
  int64_t M = 1, K = 1, N = 1, batches = 1;
  BatchMap map;
};

MatmulDims matmul_dims(const TensorView& A, const TensorView& B, const char* op) {
  MatmulDims d;
  d.K = A.shape[A.rank() - 1];
  d.M = A.rank() >= 2 ? A.shape[A.rank() - 2] : 1;
  d.N = B.rank() >= 2 ? B.shape[B.rank() - 1] : 1;
  std::span<const int64_t> ab = A.rank() > 2 ? A.shape.first(A.rank() - 2) : std::span<const int64_t>();
  std::span<const int64_t> bb = B.rank() > 2 ? B.shape.first(B.rank() - 2) : std::span<const int64_t>();
  const std::vector<int64_t> ob = broadcast_shapes(ab, bb);
  if (ob.size() > static_cast<size_t>(kMaxBatchDims))
    throw Error(std::string(op) + ": " + std::to_string(ob.size()) + " batch axes; the CUDA backend supports at most " +
                std::to_string(kMaxBatchDims));
  auto strides = [&](std::span<const int64_t> s, int64_t* st) {
    int64_t acc = 1;
    for (size_t i = s.size(); i-- > 0;) {
      st[ob.size() - s.size() + i] = s[i] == 1 ? 0 : acc;
      acc *= s[i];
    }
  };
  d.map.rank = static_cast<int>(ob.size());
  for (size_t i = 0; i < ob.size(); ++i) {
    d.map.shape[i] = ob[i];
    d.batches *= ob[i];
  }
  strides(ab, d.map.sa);
  strides(bb, d.map.sb);
  return d;
}

// epi(out_index, a_batch, b_batch, i, j, acc) for every output of every batch.
template <class TA, class TB, class Epi>
__global__ void __launch_bounds__(kTile* kTile)
    qmatmul_kernel(const TA* a, const TB* b, int64_t M, int64_t K, int64_t N, int64_t batches, BatchMap map, QParam za,
                   QParam zb, Epi epi) {
  __shared__ int32_t as[kTile][kTile + 1], bs[kTile][kTile + 1];
  const int tx = static_cast<int>(threadIdx.x) % kTile, ty = static_cast<int>(threadIdx.x) / kTile;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kTile + tx;
  // Loop bounds depend on the block only, so every thread reaches every barrier.
  for (int64_t batch = blockIdx.z; batch < batches; batch += gridDim.z) {
    int64_t ia, ib;
    map.decode(batch, ia, ib);
    const TA* am = a + ia * M * K;
    const TB* bm = b + ib * K * N;
    const int32_t zb_j = j < N ? load_zero_point(zb, zb.at(ib, j)) : 0;
    for (int64_t i0 = static_cast<int64_t>(blockIdx.y) * kTile; i0 < M; i0 += static_cast<int64_t>(gridDim.y) * kTile) {
      const int64_t i = i0 + ty;  // this thread's output row, and the A row it loads
      const int32_t za_i = i < M ? load_zero_point(za, za.at(ia, i)) : 0;
      uint32_t acc = 0;
      for (int64_t k0 = 0; k0 < K; k0 += kTile) {
        as[ty][tx] = i < M && k0 + tx < K ? static_cast<int32_t>(am[i * K + k0 + tx]) - za_i : 0;
        bs[ty][tx] = k0 + ty < K && j < N ? static_cast<int32_t>(bm[(k0 + ty) * N + j]) - zb_j : 0;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kTile; ++kk) acc += static_cast<uint32_t>(as[ty][kk]) * static_cast<uint32_t>(bs[kk][tx]);
        __syncthreads();
      }
      if (i < M && j < N) epi((batch * M + i) * N + j, ia, ib, i, j, acc);
    }
  }
}

struct IntOut {
  int32_t* y;
  __device__ void operator()(int64_t o, int64_t, int64_t, int64_t, int64_t, uint32_t acc) const {
    y[o] = static_cast<int32_t>(acc);
  }
};

// y = requantize(acc * (s_a * s_b / s_y) + z_y); y's parameters are scalar or per output row.
template <class TY>
struct QLinearMatmulOut {
  TY* y;
  QParam sa, sb, sy, zy;
  double lo, hi;
  __device__ void operator()(int64_t o, int64_t ia, int64_t ib, int64_t i, int64_t j, uint32_t acc) const {
    const float s_a = load_scale(sa, sa.at(ia, i)), s_b = load_scale(sb, sb.at(ib, j)),
                s_y = load_scale(sy, sy.at(0, i));
    y[o] = static_cast<TY>(
        requantize_acc(static_cast<int32_t>(acc), s_a, s_b, s_y, load_zero_point(zy, zy.at(0, i)), lo, hi));
  }
};

template <class Fn>
void dispatch_q8(DataType t, const char* op, Fn&& fn) {
  if (t == DataType::kUInt8)
    fn(Tag<uint8_t>{});
  else if (t == DataType::kInt8)
    fn(Tag<int8_t>{});
  else
    ew::throw_gpu_dtype(t, op);
}

// Dispatches A's and B's types and launches with epi.
template <class Epi>
void launch_qmatmul(const TensorView& A, const TensorView& B, const MatmulDims& d, const QParam& za, const QParam& zb,
                    const Epi& epi, GpuEnv& env, const char* op) {
  if (d.M == 0 || d.N == 0 || d.batches == 0) return;
  const dim3 grid(static_cast<unsigned>((d.N + kTile - 1) / kTile),
                  static_cast<unsigned>(std::min<int64_t>((d.M + kTile - 1) / kTile, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(d.batches, 65535)));
  if ((d.N + kTile - 1) / kTile > 0x7fffffff) throw Error(std::string(op) + ": N is too large for the CUDA backend");
  dispatch_q8(A.dtype, op, [&](auto ta) {
    dispatch_q8(B.dtype, op, [&](auto tb) {
      using TA = typename decltype(ta)::type;
      using TB = typename decltype(tb)::type;
      qmatmul_kernel<TA, TB, Epi><<<grid, kTile * kTile, 0, env.stream>>>(
          static_cast<const TA*>(A.data), static_cast<const TB*>(B.data), d.M, d.K, d.N, d.batches, d.map, za, zb, epi);
      check_launch(op);
    });
  });
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

void matmul_integer_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                           GpuEnv& env) {
  const char* op = "MatMulInteger";
  const MatmulDims d = matmul_dims(in[0], in[1], op);
  launch_qmatmul(in[0], in[1], d, make_qparam(in, 2, d.M, op), make_qparam(in, 3, d.N, op),
                 IntOut{static_cast<int32_t*>(out[0].data)}, env, op);
}

void qlinear_matmul_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                           GpuEnv& env) {
  const char* op = "QLinearMatMul";
  const MatmulDims d = matmul_dims(in[0], in[3], op);
  // y's scale and zero point: one value, or one per output row (mode 1 whenever not a single value).
  QParam sy = make_qparam(in, 6, d.M, op), zy = make_qparam(in, 7, d.M, op);
  sy.at.mode = sy.at.mode ? 1 : 0;
  zy.at.mode = zy.at.mode ? 1 : 0;
  const QParam sa = make_qparam(in, 1, d.M, op), sb = make_qparam(in, 4, d.N, op);
  const QParam za = make_qparam(in, 2, d.M, op), zb = make_qparam(in, 5, d.N, op);
  if (out[0].dtype == DataType::kInt8)
    launch_qmatmul(in[0], in[3], d, za, zb,
                   QLinearMatmulOut<int8_t>{static_cast<int8_t*>(out[0].data), sa, sb, sy, zy, -128, 127}, env, op);
  else if (out[0].dtype == DataType::kUInt8)
    launch_qmatmul(in[0], in[3], d, za, zb,
                   QLinearMatmulOut<uint8_t>{static_cast<uint8_t*>(out[0].data), sa, sb, sy, zy, 0, 255}, env, op);
  else
    ew::throw_gpu_dtype(out[0].dtype, op);
}

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

}  // namespace kiln::gpu::extra
