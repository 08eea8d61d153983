// Kiln's depthwise INT8 convolution over channels-last tensors (NhwcQConv with group = C = M):
//   y[n, oh, ow, c] = epilogue(sum over (kh, kw) of x[n, oh * sh - ph + kh * dh, ow * sw - pw + kw * dw, c]
//                                                  * w[c, kh, kw])
// A direct kernel: each thread computes V = 4 consecutive channels of one output pixel (one 4-byte
// load of x per tap, one 4-byte store of an int8 y), then moves on by a grid-wide stride of pixels,
// keeping its channels' weights in registers (3x3 and 5x5; other sizes read them per tap, from L1).
// The grid is one wave (as many blocks as fit on the GPU at once), so each thread loads its weights
// once and the blocks sweep the pixels together, the rows the taps share still in L2.
// There is no reuse across channels to tile for: each input byte meets 9 weights of its own
// channel, so the kernel is a stream over x and y, with the taps' overlap served by L1/L2.
// 3x3 kernels with a vertical stride of 1 or 2 and no vertical dilation (MobileNetV2's) run by
// strips instead (strip_kernel): a thread computes 8 (stride 1) or 4 (stride 2) output rows of one
// column, loading the rows they share once and all of them before its first multiply-add, which
// keeps enough bytes in flight to stream at the memory's rate.
//
// The arithmetic per channel and tap is one __dp4a of x's 4-channel word with a weight word that
// holds the channel's weight in its byte and 0 elsewhere: exact int32 sums. A float32 y gets the
// CPU's epilogue (qfused::Epilogue: every step a separately rounded float32 operation), bit for bit.
// An int8 y gets the epilogue of Kiln's tensor-core kernel and cuDNN's: in units of y's step, one
// fused multiply-add per term, so it may differ from the CPU's by one step at rounding ties (the
// CPU's sequence, an IEEE division per value, kept this kernel compute-bound at 10% of the memory
// bandwidth on MobileNetV2's stride-1 layers). Two steps avoid the conversion unit, which runs at
// 1/8 of the float rate: float(acc) for |acc| < 2^22 (3x3 and 5x5 kernels: |acc| <= 25 * 128 * 128)
// and the rounding to an integer, both through the float addition of 1.5 * 2^23 (exact for those
// magnitudes, rounding to nearest even as rintf does).
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "kiln/types.h"
#include "runtime/cuda/gpu_kernels.h"
#include "runtime/cuda/quant/conv/depthwise/depthwise.cuh"

namespace kiln::gpu::quant::depthwise {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxChannelThreads = 128;  // threads along the channels per block row

// The sizes in 32 bits (run() checks they fit).
struct Dims {
  int H, W, C, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw;
  int P;  // output pixels, N * OH * OW
  int N;
};

// 1.5 * 2^23: for |v| < 2^22, v + kMagic lies in [2^23, 2^24), where floats are the integers, so the
// addition rounds v to an integer (to nearest, ties to even: kMagic is even) held in the low bits.
constexpr float kMagic = 12582912.0f;
constexpr int32_t kMagicBits = 0x4B400000;

// float(v) for |v| < 2^22, exact (as __int2float_rn).
__device__ __forceinline__ float small_to_float(int32_t v) { return __fsub_rn(__int_as_float(kMagicBits + v), kMagic); }

// V int8 values at p (4-byte aligned for V = 4) as one word, value j in byte j.
template <int V>
__device__ __forceinline__ int32_t load_bytes(const int8_t* p) {
  if constexpr (V == 4)
    return __ldg(reinterpret_cast<const int32_t*>(p));
  else
    return __ldg(p);
}

// The weights of a thread's V channels in registers (fixed kernel sizes, V = 4). Channel j's
// multiply-add is a __dp4a of x's word (channels c .. c + 3) with a word that holds channel j's
// weight in byte j and 0 in the others. Up to 9 taps, those words are kept (4 registers a tap: 36
// for 3x3, one instruction a multiply-add); beyond, one word a tap with the 4 channels' weights,
// and x's word is masked to byte j instead (25 registers for 5x5, where 100 would leave one block
// an SM; the mask of x cannot be hoisted out of the pixel loop as one of the weights would be).
template <int kTaps, int V>
struct Weights {
  static constexpr bool kMasked = kTaps <= 9;
  uint32_t w[kTaps][kMasked ? V : 1];
  // wc: the weights of channel c, [V][kTaps].
  __device__ __forceinline__ void load(const int8_t* wc) {
#pragma unroll
    for (int t = 0; t < kTaps; ++t) {
      if constexpr (!kMasked) w[t][0] = 0;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const uint32_t b = static_cast<uint32_t>(static_cast<uint8_t>(wc[j * kTaps + t])) << (8 * j);
        if constexpr (kMasked)
          w[t][j] = b;
        else
          w[t][0] |= b;
      }
    }
  }
  // acc + x[j] * w[t][j], x the word of V channels.
  __device__ __forceinline__ int32_t mac(int t, int j, int32_t x, int32_t acc) const {
    if constexpr (kMasked)
      return __dp4a(x, static_cast<int32_t>(w[t][j]), acc);
    else
      return __dp4a(static_cast<int32_t>(static_cast<uint32_t>(x) & (0xFFu << (8 * j))), static_cast<int32_t>(w[t][0]),
                    acc);
  }
};
template <int V>
struct Weights<0, V> {};

// V float32 values at p (16-byte aligned for V = 4): a float32 residual's.
template <int V>
__device__ __forceinline__ void load_floats(const float* p, float (&v)[V]) {
  if constexpr (V == 4) {
    const float4 f = __ldg(reinterpret_cast<const float4*>(p));
    v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
  } else {
    v[0] = __ldg(p);
  }
}

// acc -> int8 y for V consecutive channels at element e of y (and z), in units of y's step: alpha
// and bias already divided by y_scale (the kernel's setup), one fused multiply-add per term, as
// Kiln's tensor-core kernel and cuDNN's do. NaN (from a NaN bias or residual) gives 0, y's zero point
// (NhwcQConv's zero points are 0), as the CPU's rule does.
template <int V, bool kSmallSums>
__device__ __forceinline__ void finish_int8(const QConvNhwcArgs& a, float out_scale, int64_t e, const int32_t (&acc)[V],
                                            const float (&alpha)[V], const float (&bias)[V]) {
  float v[V];
#pragma unroll
  for (int j = 0; j < V; ++j)
    v[j] = fmaf(kSmallSums ? small_to_float(acc[j]) : __int2float_rn(acc[j]), alpha[j], bias[j]);
  if (a.z && a.z_float) {
    float zv[V];
    load_floats<V>(static_cast<const float*>(a.z) + e, zv);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = fmaf(zv[j], out_scale, v[j]);
  } else if (a.z) {
    const int32_t zw = load_bytes<V>(static_cast<const int8_t*>(a.z) + e);
    const float zs = a.epi.z_scale * out_scale;
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = fmaf(static_cast<float>(static_cast<int8_t>(zw >> (8 * j))), zs, v[j]);
  }
  uint32_t word = 0;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    float r = v[j];
    const bool nan = r != r;
    if (a.epi.act == 1)
      r = fmaxf(r, 0.0f);
    else if (a.epi.act == 2)
      r = fminf(fmaxf(r, a.epi.act_alpha * out_scale), a.epi.act_beta * out_scale);
    r = nan ? 0.0f : fminf(fmaxf(r, -128.0f), 127.0f);
    const int32_t q = __float_as_int(__fadd_rn(r, kMagic)) - kMagicBits;  // rintf, exact below 2^22
    word |= (static_cast<uint32_t>(q) & 0xFFu) << (8 * j);
  }
  int8_t* y = static_cast<int8_t*>(a.y) + e;
  if constexpr (V == 4)
    *reinterpret_cast<uint32_t*>(y) = word;
  else
    *y = static_cast<int8_t>(word);
}

// acc -> float32 y for V consecutive channels at element e of y (and z), as qconv_nhwc_direct_kernel
// does: bit for bit the CPU's.
template <int V, bool kSmallSums>
__device__ __forceinline__ void finish(const QConvNhwcArgs& a, int64_t e, const int32_t (&acc)[V],
                                       const float (&alpha)[V], const float (&bias)[V]) {
  float v[V];
#pragma unroll
  for (int j = 0; j < V; ++j)
    v[j] = kSmallSums ? qfused::add_rn(qfused::mul_rn(small_to_float(acc[j]), alpha[j]), bias[j])
                      : qfused::Epilogue::real(static_cast<uint32_t>(acc[j]), alpha[j], bias[j]);
  if (a.z && a.z_float) {
    float zv[V];
    load_floats<V>(static_cast<const float*>(a.z) + e, zv);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = qfused::add_rn(v[j], zv[j]);
  } else if (a.z) {
    const int32_t zw = load_bytes<V>(static_cast<const int8_t*>(a.z) + e);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = a.epi.plus_residual(v[j], static_cast<int8_t>(zw >> (8 * j)));
  }
#pragma unroll
  for (int j = 0; j < V; ++j) v[j] = a.epi.activate(v[j]);
  float* y = static_cast<float*>(a.y) + e;
  if constexpr (V == 4)
    *reinterpret_cast<float4*>(y) = make_float4(v[0], v[1], v[2], v[3]);
  else
    *y = v[0];
}

// A thread's walk over items [N][rows][cols] (pixels: rows = OH; strips: rows = strips per
// image) from item q by the grid's stride, tracked as (n, row, col) without divisions: col and row
// each carry at most once a step, since the stride's own row and col parts are below rows and cols.
struct Walk {
  int rows, cols, step_n, step_row, step_col, n, row, col;
  __device__ Walk(int q, int step, int rows_, int cols_) : rows(rows_), cols(cols_) {
    const int plane = rows * cols;
    step_n = step / plane, step_row = step % plane / cols, step_col = step % cols;
    n = q / plane, row = q % plane / cols, col = q % cols;
  }
  __device__ void advance() {
    col += step_col;
    row += step_row;
    n += step_n;
    if (col >= cols) {
      col -= cols;
      ++row;
    }
    if (row >= rows) {
      row -= rows;
      ++n;
    }
  }
};

// The epilogue's per-channel factors of channels c .. c + V - 1: an int8 y's in units of its step
// (out_scale = 1 / y_scale, finish_int8), a float32 y's as the CPU's (out_scale 1, finish).
template <int V>
__device__ __forceinline__ void scales(const QConvNhwcArgs& a, int c, float out_scale, float (&alpha)[V],
                                       float (&bias)[V]) {
#pragma unroll
  for (int j = 0; j < V; ++j) {
    alpha[j] = qfused::mul_rn(a.x_scale, a.w_scale[a.w_scale_per_channel ? c + j : 0]);
    bias[j] = a.bias ? a.bias[c + j] : 0.0f;
    if (a.epi.quantize) {
      alpha[j] *= out_scale;
      bias[j] *= out_scale;
    }
  }
}

// Thread (x, y) of block (bx, by): channels c = (by * blockDim.x + x) * V .. + V - 1 of the pixels
// p = bx * blockDim.y + y + k * (gridDim.x * blockDim.y). KH = KW = 0: sizes from d.
template <int V, int KH, int KW>
__global__ void __launch_bounds__(kThreads) depthwise_kernel(QConvNhwcArgs a, Dims d) {
  constexpr bool kFixed = KH > 0;
  const int kh_n = kFixed ? KH : d.KH, kw_n = kFixed ? KW : d.KW, taps = kh_n * kw_n;
  const int tap_step = d.dw * d.C;  // bytes of x from one tap to the next along a row
  const int c = static_cast<int>(blockIdx.y * blockDim.x + threadIdx.x) * V;
  if (c >= d.C) return;
  Weights<kFixed ? KH * KW : 0, V> weights;
  if constexpr (kFixed) weights.load(a.w + static_cast<int64_t>(c) * taps);
  const bool quantize = a.epi.quantize;
  const float out_scale = quantize ? 1.0f / a.epi.y_scale : 1.0f;
  float alpha[V], bias[V];
  scales<V>(a, c, out_scale, alpha, bias);
  const int step = static_cast<int>(gridDim.x * blockDim.y);
  int p = static_cast<int>(blockIdx.x * blockDim.y + threadIdx.y);
  for (Walk w(p, step, d.OH, d.OW); p < d.P; p += step, w.advance()) {
    const int n = w.n;
    int32_t acc[V] = {};
    const int ih0 = w.row * d.sh - d.ph, iw0 = w.col * d.sw - d.pw;
    // x[n, ih, iw0, c] (iw0 may lie outside the row; only the taps inside are read).
    auto row_of = [&](int ih) { return ((static_cast<int64_t>(n) * d.H + ih) * d.W + iw0) * d.C + c; };
    if constexpr (kFixed) {
      // Every tap's word first (0 outside the image), so that the loads are in flight together.
      int32_t xs[KH * KW];
#pragma unroll
      for (int kh = 0; kh < KH; ++kh) {
        const int ih = ih0 + kh * d.dh;
        const bool row_inside = static_cast<unsigned>(ih) < static_cast<unsigned>(d.H);
        const int64_t row = row_of(ih);
#pragma unroll
        for (int kw = 0; kw < KW; ++kw) {
          const bool inside = row_inside && static_cast<unsigned>(iw0 + kw * d.dw) < static_cast<unsigned>(d.W);
          xs[kh * KW + kw] = inside ? load_bytes<V>(a.x + row + kw * tap_step) : 0;
        }
      }
#pragma unroll
      for (int t = 0; t < KH * KW; ++t)
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] = weights.mac(t, j, xs[t], acc[j]);
    } else {
      for (int kh = 0; kh < kh_n; ++kh) {
        const int ih = ih0 + kh * d.dh;
        if (static_cast<unsigned>(ih) >= static_cast<unsigned>(d.H)) continue;
        const int64_t row = row_of(ih);
        for (int kw = 0; kw < kw_n; ++kw) {
          if (static_cast<unsigned>(iw0 + kw * d.dw) >= static_cast<unsigned>(d.W)) continue;
          const int32_t xv = load_bytes<V>(a.x + row + kw * tap_step);
#pragma unroll
          for (int j = 0; j < V; ++j) {  // weight j in byte j, read from L1 per use
            const auto b = static_cast<uint8_t>(a.w[static_cast<int64_t>(c + j) * taps + kh * kw_n + kw]);
            acc[j] = __dp4a(xv, static_cast<int32_t>(static_cast<uint32_t>(b) << (8 * j)), acc[j]);
          }
        }
      }
    }
    if (quantize)
      finish_int8<V, kFixed>(a, out_scale, static_cast<int64_t>(p) * d.C + c, acc, alpha, bias);
    else
      finish<V, kFixed>(a, static_cast<int64_t>(p) * d.C + c, acc, alpha, bias);
  }
}

// The 3x3 kernel with vertical stride S (1 or 2), no vertical dilation, an int8 y and no
// residual (MobileNetV2's layers), by strips: a thread computes channels c .. c + 3 of R output
// rows oh0 .. oh0 + R - 1 at one column ow. The R rows share their input rows, so the thread loads
// each input row's three tap words once ((R - 1) * S + 3 rows: 30 words for 8 outputs at stride 1,
// where depthwise_kernel loads 72), all of them in flight before the first multiply-add. Each row's
// words are then transposed by byte permutes into one word per channel holding its three taps,
// which meets the channel's kernel row in one __dp4a: 6 permutes and 12 __dp4a a row where the
// one-pixel kernel spends 36 __dp4a on words 3/4 zeros. The epilogue folds the activation into
// the clamp to int8 (min and max with bounds computed once), without branches. The pixel loop,
// the index arithmetic and the epilogue's branches made the one-pixel kernel issue-bound at a
// quarter of the memory's bandwidth on an H100. The grid walks items q = (n, g, ow), oh0 = g * R
// (Walk), as depthwise_kernel walks pixels.
template <int S, int R>
__global__ void __launch_bounds__(kThreads) strip_kernel(QConvNhwcArgs a, Dims d) {
  constexpr int V = 4, kRows = (R - 1) * S + 3;
  const int tap_step = d.dw * d.C;
  const int c = static_cast<int>(blockIdx.y * blockDim.x + threadIdx.x) * V;
  if (c >= d.C) return;
  // wk[kh][j]: channel c + j's kernel row kh, taps kw = 0..2 in bytes 0..2, byte 3 zero.
  int32_t wk[3][V];
#pragma unroll
  for (int kh = 0; kh < 3; ++kh)
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int8_t* wr = a.w + static_cast<int64_t>(c + j) * 9 + kh * 3;
      wk[kh][j] = static_cast<int32_t>(static_cast<uint8_t>(wr[0]) | static_cast<uint32_t>(static_cast<uint8_t>(wr[1])) << 8 |
                                       static_cast<uint32_t>(static_cast<uint8_t>(wr[2])) << 16);
    }
  const float out_scale = 1.0f / a.epi.y_scale;
  float alpha[V], bias[V];
  scales<V>(a, c, out_scale, alpha, bias);
  // The activation and the clamp to int8 as one clamp (both are clamps; run() passes act 0 to 2).
  const auto int8_range = [](float v) { return fminf(fmaxf(v, -128.0f), 127.0f); };
  const float lo = a.epi.act == 2 ? int8_range(a.epi.act_alpha * out_scale) : a.epi.act == 1 ? 0.0f : -128.0f;
  // A NaN upper bound (0 * inf) clamps nothing, as in finish_int8: fminf passes the other operand.
  const float hi = a.epi.act == 2 ? fmaxf(fminf(a.epi.act_beta * out_scale, 127.0f), -128.0f) : 127.0f;
  const int G = (d.OH + R - 1) / R, items = d.N * G * d.OW;
  const int step = static_cast<int>(gridDim.x * blockDim.y);
  int q = static_cast<int>(blockIdx.x * blockDim.y + threadIdx.y);
  for (Walk w(q, step, G, d.OW); q < items; q += step, w.advance()) {
    const int n = w.n, ow = w.col;
    const int oh0 = w.row * R, ih0 = oh0 * S - d.ph, iw0 = ow * d.sw - d.pw;
    bool col_inside[3];
#pragma unroll
    for (int kw = 0; kw < 3; ++kw) col_inside[kw] = static_cast<unsigned>(iw0 + kw * d.dw) < static_cast<unsigned>(d.W);
    const int8_t* x0 = a.x + ((static_cast<int64_t>(n) * d.H + ih0) * d.W + iw0) * d.C + c;
    const int64_t row_step = static_cast<int64_t>(d.W) * d.C;
    int32_t xs[kRows][3];  // every word first (0 outside the image)
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const bool row_inside = static_cast<unsigned>(ih0 + i) < static_cast<unsigned>(d.H);
#pragma unroll
      for (int kw = 0; kw < 3; ++kw)
        xs[i][kw] = row_inside && col_inside[kw] ? load_bytes<V>(x0 + i * row_step + kw * tap_step) : 0;
    }
    int32_t acc[R][V] = {};
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      // t[j]: channel j's taps kw = 0..2 of this row in bytes 0..2 (byte 3 meets a zero weight).
      const uint32_t lo01 = __byte_perm(xs[i][0], xs[i][1], 0x5140), hi01 = __byte_perm(xs[i][0], xs[i][1], 0x7362);
      const int32_t t[V] = {static_cast<int32_t>(__byte_perm(lo01, xs[i][2], 0x0410)),
                            static_cast<int32_t>(__byte_perm(lo01, xs[i][2], 0x0532)),
                            static_cast<int32_t>(__byte_perm(hi01, xs[i][2], 0x0610)),
                            static_cast<int32_t>(__byte_perm(hi01, xs[i][2], 0x0732))};
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int kh = i - r * S;  // input row i meets kernel row kh of output row r
        if (kh >= 0 && kh < 3)
#pragma unroll
          for (int j = 0; j < V; ++j) acc[r][j] = __dp4a(t[j], wk[kh][j], acc[r][j]);
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (oh0 + r >= d.OH) break;
      uint32_t word = 0;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float v = fmaf(small_to_float(acc[r][j]), alpha[j], bias[j]);
        const float y = v != v ? 0.0f : fminf(fmaxf(v, lo), hi);  // NaN (a NaN bias) -> 0, as the CPU
        word |= (static_cast<uint32_t>(__float_as_int(__fadd_rn(y, kMagic)) - kMagicBits) & 0xFFu) << (8 * j);
      }
      *reinterpret_cast<uint32_t*>(static_cast<int8_t*>(a.y) + ((static_cast<int64_t>(n) * d.OH + oh0 + r) * d.OW + ow) * d.C + c) = word;
    }
  }
}

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// One wave of blocks of up to 256 threads: up to 128 along the channels (V channels a thread, in
// equal chunks when there are more), the rest along `items` (pixels, or strips); the threads loop
// over the items.
void launch(void (*kernel)(QConvNhwcArgs, Dims), int V, int64_t items, const QConvNhwcArgs& a, const Dims& d,
            cudaStream_t stream) {
  constexpr const char* kWhat = "NhwcQConv (depthwise)";
  const int groups = d.C / V;
  const int chunks = (groups + kMaxChannelThreads - 1) / kMaxChannelThreads;
  const int bx = (groups + chunks - 1) / chunks, by = std::max(1, kThreads / bx);
  // Blocks of this kernel and size the GPU holds at once, per device (asked once: the query is not
  // free).
  static std::mutex mu;
  static std::map<std::tuple<int, void*, int>, int64_t> waves;
  int device = 0;
  check_cuda(cudaGetDevice(&device), kWhat);
  int64_t blocks = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    int64_t& w = waves[{device, reinterpret_cast<void*>(kernel), bx * by}];
    if (w == 0) {
      int sms = 0, per_sm = 0;
      check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), kWhat);
      check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, bx * by, 0), kWhat);
      w = std::max<int64_t>(1, int64_t{sms} * per_sm);
    }
    blocks = w;
  }
  const int64_t rows = (items + by - 1) / by;
  const int64_t wave = std::max<int64_t>(1, blocks / chunks);
  const dim3 grid(static_cast<unsigned>(std::min(rows, wave)), static_cast<unsigned>(chunks));
  kernel<<<grid, dim3(static_cast<unsigned>(bx), static_cast<unsigned>(by)), 0, stream>>>(a, d);
  check_launch(kWhat);
}

// The strip kernel for S and R: N * ceil(OH / R) * OW items.
template <int S, int R>
void launch_strips(const QConvNhwcArgs& a, const Dims& d, cudaStream_t stream) {
  launch(strip_kernel<S, R>, 4, int64_t{d.N} * ((d.OH + R - 1) / R) * d.OW, a, d, stream);
}

}  // namespace

void run(const QConvNhwcArgs& a, cudaStream_t stream) {
  if (a.C != a.M || a.C <= 0)
    throw Error("NhwcQConv: the depthwise kernel takes as many output channels as input channels, got " +
                std::to_string(a.C) + " and " + std::to_string(a.M));
  // 32-bit pixel indices with room for one grid stride past the end; channel chunks within a grid.
  constexpr int64_t kMax = int64_t{1} << 30;
  if (a.N * a.H * a.W >= kMax || a.N * a.OH * a.OW >= kMax || a.C > int64_t{65535} * kMaxChannelThreads ||
      a.KW * a.dw * a.C >= kMax || a.KH * a.KW >= kMax || a.KH * a.dh >= kMax || a.KW * a.dw >= kMax ||
      a.sh * a.OH >= kMax || a.sw * a.OW >= kMax || a.ph >= kMax || a.pw >= kMax)
    throw Error(
        "NhwcQConv: the depthwise kernel takes up to 2^30 pixels per input and output and 65535 * 128 channels; "
        "split the batch");
  auto i32 = [](int64_t v) { return static_cast<int>(v); };
  const Dims d{i32(a.H),  i32(a.W),  i32(a.C),  i32(a.OH), i32(a.OW), i32(a.KH), i32(a.KW),
               i32(a.sh), i32(a.sw), i32(a.ph), i32(a.pw), i32(a.dh), i32(a.dw), i32(a.N * a.OH * a.OW), i32(a.N)};
  if (d.P == 0) return;
  // 4 channels a thread where the words are aligned: x and an int8 y or z by 4 bytes, a float32 y
  // or z by 16; else one.
  const bool vec = a.C % 4 == 0 && aligned(a.x, 4) && aligned(a.y, a.epi.quantize ? 4 : 16) &&
                   (!a.z || aligned(a.z, a.z_float ? 16 : 4));
  if (!vec) return launch(depthwise_kernel<1, 0, 0>, 1, d.P, a, d, stream);
  const bool strips = d.KH == 3 && d.KW == 3 && d.dh == 1 && a.epi.quantize && !a.z && a.epi.act >= 0 &&
                      a.epi.act <= 2 && !std::isnan(a.epi.act_alpha) && !std::isnan(a.epi.act_beta);
  if (strips && d.sh == 1) return launch_strips<1, 8>(a, d, stream);
  if (strips && d.sh == 2) return launch_strips<2, 4>(a, d, stream);
  if (d.KH == 3 && d.KW == 3) return launch(depthwise_kernel<4, 3, 3>, 4, d.P, a, d, stream);
  if (d.KH == 5 && d.KW == 5) return launch(depthwise_kernel<4, 5, 5>, 4, d.P, a, d, stream);
  launch(depthwise_kernel<4, 0, 0>, 4, d.P, a, d, stream);
}

}  // namespace kiln::gpu::quant::depthwise
