// The small-channel stem convolution (conv_small_c.cuh): an implicit GEMM on float16 mma.m16n8k16
// whose A operand is read straight from input rows staged in shared memory.
//
// With C = 3 channels last, one kernel row's taps for one output pixel (S * C values) are
// contiguous in its input row. So the reduction is laid out per kernel row r as a segment of
// kSeg slots: [D dummy slots][S * C taps][pad slots], kSeg a multiple of 8 (so that each 8-slot
// group of an mma fragment lies in one kernel row), and slot j of row r for output pixel ow is the
// staged input row's element base + 2 * C * ow + j. D (1 for the odd left pads instantiated) makes
// every even slot land on an even element, so that each 32-bit A register is one aligned shared
// load. Dummy and pad slots (and the reduction's padding to 16) have zero weights, and their A
// halves are masked to zero too, so that an infinite input next to a window cannot make a NaN.
//
// A persistent CTA of 4 warps keeps its weights in registers as B fragments (each warp: 32 output
// channels, every k step) and walks work items of kRows output rows of one image: their
// (kRows - 1) * 2 + R input rows are copied into one of two staging buffers with cp.async while
// the other is computed. Out-of-image rows and the pad columns are zeros. A warp computes 16
// output pixels x 32 channels at a time; the epilogue adds the bias, applies the activation in
// float and stores float16 pairs, or, for a quantized output, QuantizeLinear's int8 or uint8 of the
// float value (Quant below): half the float16 output's bytes and no QuantizeLinear step.
#include <atomic>

#include "core/epilogue.h"
#include "runtime/cuda/conv_small_c.cuh"
#include "runtime/cuda/qconv_mma.cuh"

namespace kiln::gpu::nn {

namespace {

namespace mma = extra::mma;

constexpr int kC = 3;             // input channels
constexpr int kStride = 2;        // on both axes
constexpr int kThreadsSC = 128;   // 4 warps
constexpr int kRows = 2;          // output rows per work item
constexpr int kDataStart = 16;    // element of (iw = 0, c = 0) in a staged row: 32 bytes, 16-byte aligned
constexpr int kMaxSmem = 48 << 10;

struct Params {
  const __half* x;
  const __half* w;
  const __half* b;
  void* y;
  const float* y_scale;  // null: float16 output
  const void* y_zero;
  bool y_signed;         // int8 (else uint8)
  int H, W, OH, OW, pad_top, pad_left;
  int row_len;      // elements per staged input row (a multiple of 8)
  int chunks;       // 16-byte chunks of one input row
  int m_tiles;      // 16-pixel tiles per output row
  int row_groups;   // work items per image: ceil(OH / kRows)
  int64_t items;    // N * row_groups
  EpilogueAttrs e;
};

// Staged input rows per work item for a kernel of R rows.
constexpr int staged_rows(int R) { return (kRows - 1) * kStride + R; }
// Slots per kernel row for S taps of kC channels and D dummy slots: whole 8-slot groups.
constexpr int seg_slots(int S, int D) { return (S * kC + D + 7) / 8 * 8; }
constexpr int kOutStride = 40;  // float16 elements per pixel row of a warp's output tile (32 + 8)
constexpr int kOutTile = 16 * kOutStride;  // a warp's [16][32] output tile with its padding
constexpr int kQStride = 48;               // bytes per pixel row of a warp's 8-bit output tile (32 + 16)

__device__ __forceinline__ uint32_t ld_pair(const __half* p) { return *reinterpret_cast<const uint32_t*>(p); }

__device__ __forceinline__ uint32_t pack(__half lo, __half hi) {
  return static_cast<uint32_t>(__half_as_ushort(lo)) | (static_cast<uint32_t>(__half_as_ushort(hi)) << 16);
}

// Copies work item `item`'s input rows into `stage` (cp.async; zeros for rows outside the image).
template <int R>
__device__ __forceinline__ void stage_rows(const Params& p, int64_t item, __half* stage) {
  const int64_t n = item / p.row_groups;
  const int ih0 = static_cast<int>(item % p.row_groups) * kRows * kStride - p.pad_top;
  const int total = staged_rows(R) * p.chunks;
  for (int i = threadIdx.x; i < total; i += kThreadsSC) {
    const int row = i / p.chunks, chunk = i - row * p.chunks;
    const int ih = ih0 + row;
    const bool inside = ih >= 0 && ih < p.H;
    const __half* src = inside ? p.x + ((n * p.H + ih) * p.W) * kC + chunk * 8 : p.x;
    mma::cp_async16(mma::smem_u32(stage + row * p.row_len + kDataStart + chunk * 8), src, inside);
  }
}

// The activation, a template argument for the common ones (kGeneric: any, through a switch).
constexpr int kGeneric = -1;
template <int A>
__device__ __forceinline__ float activate(const EpilogueAttrs& e, float v) {
  if constexpr (A == static_cast<int>(Activation::kNone)) return v;
  else if constexpr (A == static_cast<int>(Activation::kRelu)) return v < 0.0f ? 0.0f : v;
  else if constexpr (A == static_cast<int>(Activation::kClip)) {  // ReLU6; a NaN stays NaN
    const float c = v < e.activation_alpha ? e.activation_alpha : v;
    return c > e.activation_beta ? e.activation_beta : c;
  } else return epilogue::activate<float>(e.activation, v, e.activation_alpha, e.activation_beta);
}

// The output's quantization: y = saturate(round(x / s) + z) of the float output x, computed as
// round(x * r) with r = RN(1 / s) (one rounding of the product; it differs from the quotient's
// rounding only where x / s is within a unit in the last place of a half), rounded by adding
// 1.5 * 2^23 and read from the float's bits, and saturated to [lo, hi] in integers. Where the
// activation is none, Relu, or a Clip whose range holds 0, it is folded into [lo, hi] (quantizing is
// monotonic and maps 0 to z, so q(act(x)) = clamp(q(x), q(a), q(b)), NaN included: both give z) and
// the bias is pre-scaled, so that a value costs a multiply-add, an addition, an integer addition and
// two integer clamps. The conversion unit's instructions (__fdiv_rn, rintf, __float2int_rn) ran at
// a quarter of the rate and made the first version twice as slow as the float16 kernel.
struct Quant {
  float r = 1;
  int offset = 0x4B400000;  // the bits of 1.5 * 2^23, less z
  int lo = -128, hi = 127;
  bool folded = false;      // the activation is in [lo, hi] and the bias is scaled by r
};

constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23
constexpr float kLargest = 2097152.0f;      // 2^21: beyond any 8-bit range and its zero point

// round(v) + z saturated to [lo, hi], for v = x * r; NaN gives z, as QuantizeLinear's kernels do.
__device__ __forceinline__ int quantized(float v, const Quant& q) {
  if (!(fabsf(v) < kLargest)) v = v != v ? 0.0f : copysignf(kLargest, v);
  const int n = __float_as_int(__fadd_rn(v, kRoundMagic)) - q.offset;
  return min(max(n, q.lo), q.hi);
}

template <int R, int S, int D>
struct Layout {
  static constexpr int kTaps = S * kC;
  static constexpr int kSeg = seg_slots(S, D);
  static constexpr int kGroups = R * kSeg / 8;          // 8-slot groups of the reduction
  static constexpr int kSteps = (kGroups + 1) / 2;      // k16 steps; an odd last group pairs with zeros
  static constexpr int kSegGroups = kSeg / 8;
  // Whether lane q's pair at slots sb + 2q, sb + 2q + 1 may hold a dummy or pad slot, for some q.
  static constexpr bool masked(int sb) { return (sb == 0 && D > 0) || sb + 8 - D > kTaps; }
};

template <int R, int S, int D, int NG, int A>
__global__ void __launch_bounds__(kThreadsSC) small_c_kernel(Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800  // cp.async and float16 mma.m16n8k16
  using L = Layout<R, S, D>;
  constexpr int kWarpsPerGroup = 4 / NG;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int stage_len = staged_rows(R) * p.row_len;
  __half* stages = reinterpret_cast<__half*>(smem_raw);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  __half* out_tile = stages + 2 * stage_len + warp * kOutTile;
  const int cg = warp % NG, first_unit = warp / NG;
  const int M = NG * 32;

  // Zero both buffers once: the pad columns are never written again, out-of-image rows are
  // zero-filled by cp.async.
  for (int i = threadIdx.x; i < 2 * stage_len; i += kThreadsSC) stages[i] = __float2half_rn(0.0f);

  // This warp's B fragments: weights of channels cg * 32 + nt * 8 + g at slots k, k + 1.
  auto weight = [&](int n, int k) {
    const int r = k / L::kSeg, j = k - r * L::kSeg - D;
    return r < R && j >= 0 && j < L::kTaps ? p.w[(n * R + r) * L::kTaps + j] : __float2half_rn(0.0f);
  };
  uint32_t bf[L::kSteps][4][2];
  float bias[4][2];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    const int n = cg * 32 + nt * 8 + g;
#pragma unroll
    for (int ks = 0; ks < L::kSteps; ++ks)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int k = ks * 16 + h * 8 + 2 * q;
        bf[ks][nt][h] = pack(weight(n, k), weight(n, k + 1));
      }
    const int c = cg * 32 + nt * 8 + 2 * q;
    bias[nt][0] = p.b ? __half2float(p.b[c]) : 0.0f;
    bias[nt][1] = p.b ? __half2float(p.b[c + 1]) : 0.0f;
  }
  // Per 8-slot group of a segment: the mask that zeroes this lane's dummy and pad halves.
  uint32_t keep[L::kSegGroups];
#pragma unroll
  for (int i = 0; i < L::kSegGroups; ++i) {
    const int s0 = i * 8 + 2 * q - D;  // tap index of the pair's low half
    keep[i] = (s0 >= 0 && s0 < L::kTaps ? 0x0000ffffu : 0u) | (s0 + 1 >= 0 && s0 + 1 < L::kTaps ? 0xffff0000u : 0u);
  }
  // Element of slot 0 of kernel row 0 for output pixel 0 of the item's first row, plus this lane's
  // column pair; even.
  const int base0 = kDataStart - p.pad_left * kC - D + 2 * q;
  Quant quant;  // unused for float16 outputs
  if (p.y_scale) {
    quant.r = __frcp_rn(*p.y_scale);
    quant.offset -= p.y_signed ? *static_cast<const int8_t*>(p.y_zero) : *static_cast<const uint8_t*>(p.y_zero);
    if (!p.y_signed) quant.lo = 0, quant.hi = 255;
    constexpr bool kClip = A == static_cast<int>(Activation::kClip);
    const bool clip_holds_0 = kClip && p.e.activation_alpha <= 0.0f && 0.0f <= p.e.activation_beta;
    quant.folded = A == static_cast<int>(Activation::kNone) || A == static_cast<int>(Activation::kRelu) || clip_holds_0;
    if (A == static_cast<int>(Activation::kRelu)) quant.lo = max(quant.lo, quantized(0.0f, quant));
    if (clip_holds_0) {
      const int a = quantized(__fmul_rn(p.e.activation_alpha, quant.r), quant);
      const int b = quantized(__fmul_rn(p.e.activation_beta, quant.r), quant);
      quant.lo = max(quant.lo, a), quant.hi = min(quant.hi, b);
    }
    if (quant.folded)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) bias[nt][0] = __fmul_rn(bias[nt][0], quant.r), bias[nt][1] = __fmul_rn(bias[nt][1], quant.r);
  }
  __syncthreads();

  int buf = 0;
  if (blockIdx.x < p.items) stage_rows<R>(p, blockIdx.x, stages);
  mma::cp_async_commit();
  for (int64_t item = blockIdx.x; item < p.items; item += gridDim.x) {
    const int64_t next = item + gridDim.x;
    if (next < p.items) stage_rows<R>(p, next, stages + (buf ^ 1) * stage_len);
    mma::cp_async_commit();
    mma::cp_async_wait<1>();
    __syncthreads();
    const __half* stage = stages + buf * stage_len;
    const int64_t n_img = item / p.row_groups;
    const int oh0 = static_cast<int>(item % p.row_groups) * kRows;
    for (int u = first_unit; u < kRows * p.m_tiles; u += kWarpsPerGroup) {
      const int qr = u / p.m_tiles, mt = u - qr * p.m_tiles, oh = oh0 + qr;
      if (oh >= p.OH) break;
      // Kernel row r of pixel mt * 16 + g starts at rows[r]; pixel + 8 is kStride * kC * 8 further.
      const __half* rows[R];
#pragma unroll
      for (int r = 0; r < R; ++r)
        rows[r] = stage + (qr * kStride + r) * p.row_len + base0 + kStride * kC * (mt * 16 + g);
      constexpr int kPlus8 = kStride * kC * 8;
      float acc[4][4] = {};
#pragma unroll
      for (int ks = 0; ks < L::kSteps; ++ks) {
        uint32_t a[4];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int gi = ks * 2 + h;
          if (gi >= L::kGroups) {
            a[2 * h] = a[2 * h + 1] = 0;
            continue;
          }
          const int r = gi / L::kSegGroups, sg = gi % L::kSegGroups;
          uint32_t lo = ld_pair(rows[r] + sg * 8), hi = ld_pair(rows[r] + sg * 8 + kPlus8);
          if (L::masked(sg * 8)) {
            lo &= keep[sg];
            hi &= keep[sg];
          }
          a[2 * h] = lo;      // a0 / a2: pixel g, slots of group gi
          a[2 * h + 1] = hi;  // a1 / a3: pixel g + 8
        }
        const uint32_t af[4] = {a[0], a[1], a[2], a[3]};
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) mma::mma_f16(acc[nt], af, bf[ks][nt][0], bf[ks][nt][1]);
      }
      if (p.y_scale) {  // 8-bit output: the [16][32] tile of bytes, then 8-byte pieces of 32-byte rows
        unsigned char* qtile = reinterpret_cast<unsigned char*>(out_tile);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            float v0, v1;
            if (quant.folded) {
              v0 = __fmaf_rn(acc[nt][2 * half], quant.r, bias[nt][0]);
              v1 = __fmaf_rn(acc[nt][2 * half + 1], quant.r, bias[nt][1]);
            } else {
              v0 = __fmul_rn(activate<A>(p.e, acc[nt][2 * half] + bias[nt][0]), quant.r);
              v1 = __fmul_rn(activate<A>(p.e, acc[nt][2 * half + 1] + bias[nt][1]), quant.r);
            }
            // Bytes 0 of both results, side by side.
            *reinterpret_cast<uint16_t*>(qtile + (g + 8 * half) * kQStride + nt * 8 + 2 * q) = static_cast<uint16_t>(
                __byte_perm(static_cast<uint32_t>(quantized(v0, quant)), static_cast<uint32_t>(quantized(v1, quant)),
                            0x0040));
          }
        __syncwarp();
        unsigned char* yrow =
            static_cast<unsigned char*>(p.y) + ((n_img * p.OH + oh) * p.OW) * M + cg * 32 + q * 8;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int px = g + 8 * half, o = mt * 16 + px;
          if (o < p.OW)
            *reinterpret_cast<uint2*>(yrow + static_cast<int64_t>(o) * M) =
                *reinterpret_cast<const uint2*>(qtile + px * kQStride + q * 8);
        }
        __syncwarp();
        continue;
      }
      // The epilogue into the warp's [16][32] tile, then 16-byte stores of whole 64-byte pixel rows.
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const float v0 = activate<A>(p.e, acc[nt][2 * half] + bias[nt][0]);
          const float v1 = activate<A>(p.e, acc[nt][2 * half + 1] + bias[nt][1]);
          *reinterpret_cast<__half2*>(out_tile + (g + 8 * half) * kOutStride + nt * 8 + 2 * q) =
              __floats2half2_rn(v0, v1);
        }
      __syncwarp();
      __half* yrow = static_cast<__half*>(p.y) + ((n_img * p.OH + oh) * p.OW) * M + cg * 32 + q * 8;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int px = g + 8 * half, o = mt * 16 + px;
        if (o < p.OW)
          *reinterpret_cast<uint4*>(yrow + static_cast<int64_t>(o) * M) =
              *reinterpret_cast<const uint4*>(out_tile + px * kOutStride + q * 8);
      }
      __syncwarp();
    }
    __syncthreads();
    buf ^= 1;
  }
  mma::cp_async_wait<0>();
#endif
}

// The kernels: kernel size 3 or 7 (a dummy slot leading each row: odd left pads), 32 or 64 output
// channels, activation None, Relu, Clip or any other. kernel_index() picks one (-1: none fits).
using KernelFn = void (*)(Params);
template <int R, int NG>
constexpr KernelFn kFour[4] = {small_c_kernel<R, R, 1, NG, static_cast<int>(Activation::kNone)>,
                               small_c_kernel<R, R, 1, NG, static_cast<int>(Activation::kRelu)>,
                               small_c_kernel<R, R, 1, NG, static_cast<int>(Activation::kClip)>,
                               small_c_kernel<R, R, 1, NG, kGeneric>};
constexpr int kKernels = 16;
const KernelFn kKernel[kKernels] = {kFour<3, 1>[0], kFour<3, 1>[1], kFour<3, 1>[2], kFour<3, 1>[3],
                                    kFour<3, 2>[0], kFour<3, 2>[1], kFour<3, 2>[2], kFour<3, 2>[3],
                                    kFour<7, 1>[0], kFour<7, 1>[1], kFour<7, 1>[2], kFour<7, 1>[3],
                                    kFour<7, 2>[0], kFour<7, 2>[1], kFour<7, 2>[2], kFour<7, 2>[3]};
int kernel_index(int64_t k, int64_t pad_left, int64_t M, Activation a) {
  if ((k != 3 && k != 7) || (pad_left * kC) % 2 != 1 || (M != 32 && M != 64)) return -1;
  const int act = a == Activation::kNone ? 0 : a == Activation::kRelu ? 1 : a == Activation::kClip ? 2 : 3;
  return (k == 7 ? 8 : 0) + (M == 64 ? 4 : 0) + act;
}

// Elements per staged input row: the data after kDataStart, and every element the last pixel
// tile's windows read.
int row_len(const DirectConv& g) {
  const int64_t d = (g.pads[1] * kC) % 2;
  const int64_t seg = seg_slots(static_cast<int>(g.kernel[1]), static_cast<int>(d));
  const int64_t m_tiles = (g.out[1] + 15) / 16;
  const int64_t last = kDataStart - g.pads[1] * kC - d + kStride * kC * (m_tiles * 16 - 1) + seg;
  const int64_t need = std::max<int64_t>(kDataStart + g.in[1] * kC, last);
  return static_cast<int>((need + 7) / 8 * 8);
}

int smem_bytes(const DirectConv& g) {
  const int warps = kThreadsSC / 32;
  return (2 * staged_rows(static_cast<int>(g.kernel[0])) * row_len(g) + warps * kOutTile) *
         static_cast<int>(sizeof(__half));
}

// The CTAs of a persistent grid: those resident at once with the most shared memory a shape may
// take, asked once per device and kernel (run() is called on every step).
int resident_ctas(int which) {
  static std::atomic<int> known[mma::kMaxDevices][kKernels] = {};  // 0: not asked yet
  int device = 0;
  check_cuda(cudaGetDevice(&device), "NhwcConv");
  if (device < mma::kMaxDevices)
    if (const int v = known[device][which].load(std::memory_order_relaxed); v != 0) return v;
  int per_sm = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel[which], kThreadsSC, kMaxSmem),
             "NhwcConv: the small-channel kernel's occupancy");
  const int v = std::max(1, per_sm) * std::max(1, mma::device_attribute<cudaDevAttrMultiProcessorCount>(device));
  if (device < mma::kMaxDevices) known[device][which].store(v, std::memory_order_relaxed);
  return v;
}

}  // namespace

bool small_c_conv_fits(const DirectConv& g, DataType dt, bool has_z) {
  if (dt != DataType::kFloat16 || has_z || g.transpose || !g.channels_last || g.rank != 2 || g.G != 1) return false;
  if (g.C != kC || (g.M != 32 && g.M != 64)) return false;
  if (g.kernel[0] != g.kernel[1] || (g.kernel[0] != 3 && g.kernel[0] != 7)) return false;
  for (int i = 0; i < 2; ++i)
    if (g.strides[i] != kStride || g.dilations[i] != 1 || g.pads[i] < 0 || g.pads[i] >= g.kernel[i]) return false;
  if (g.pads[1] > 5 || kernel_index(g.kernel[1], g.pads[1], g.M, Activation::kNone) < 0) return false;
  if ((g.in[1] * kC) % 8 != 0 || g.out[0] <= 0 || g.out[1] <= 0 || g.in[0] >= (1 << 24) || g.in[1] >= (1 << 16))
    return false;
  if (g.batch * g.in[0] * g.in[1] * kC >= (int64_t{1} << 40)) return false;
  return smem_bytes(g) <= kMaxSmem && mma::device_supported();
}

void small_c_conv(const DirectConv& g, const EpilogueAttrs& e, const void* x, const void* w, const void* b, void* y,
                  const SmallCQuant* quant, cudaStream_t stream) {
  Params p;
  p.x = static_cast<const __half*>(x);
  p.w = static_cast<const __half*>(w);
  p.b = static_cast<const __half*>(b);
  p.y = y;
  p.y_scale = quant ? quant->scale : nullptr;
  p.y_zero = quant ? quant->zero_point : nullptr;
  p.y_signed = quant && quant->type == DataType::kInt8;
  p.H = static_cast<int>(g.in[0]);
  p.W = static_cast<int>(g.in[1]);
  p.OH = static_cast<int>(g.out[0]);
  p.OW = static_cast<int>(g.out[1]);
  p.pad_top = static_cast<int>(g.pads[0]);
  p.pad_left = static_cast<int>(g.pads[1]);
  p.row_len = row_len(g);
  p.chunks = static_cast<int>(g.in[1] * kC / 8);
  p.m_tiles = (p.OW + 15) / 16;
  p.row_groups = (p.OH + kRows - 1) / kRows;
  p.items = g.batch * p.row_groups;
  p.e = e;
  const int which = kernel_index(g.kernel[1], g.pads[1], g.M, e.activation);
  const int smem = smem_bytes(g);
  const int64_t blocks = std::min<int64_t>(p.items, resident_ctas(which));
  kKernel[which]<<<static_cast<unsigned>(blocks), kThreadsSC, smem, stream>>>(p);
  check_launch("NhwcConv");
}

}  // namespace kiln::gpu::nn
