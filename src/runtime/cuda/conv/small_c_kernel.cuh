// The pieces of the small-channel stem kernels (small_c.cuh says what they take) that both
// forms share: small_c.cu multiplies with mma.sync (sm_80 and later), small_c_sm90a.cu
// with wgmma (sm_90a). What they share: the reduction's layout, the input rows staged in shared
// memory, the A fragments read straight from those rows, and the epilogue.
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
// A persistent CTA of 4 warps walks work items of `rows` output rows of one image: their
// (rows - 1) * 2 + R input rows are copied into one of two staging buffers with cp.async while the
// other is computed. Out-of-image rows and the pad columns are zeros. A channels-first X (NhwcConv's
// x_channels_first: the float32 image itself) is copied by cp.async as it is, three planes of the
// rows, into a raw buffer while the previous item is computed, then converted to float16 and
// interleaved into the staging buffer: the Cast and Transpose steps before the stem, and their
// passes over the image, are gone. A warp computes 16 output
// pixels at a time; the epilogue adds the bias, applies the activation in float and stores float16
// values, or, for a quantized output, QuantizeLinear's int8 or uint8 of the float value (Quant
// below): half the float16 output's bytes and no QuantizeLinear step.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "core/epilogue.h"
#include "runtime/cuda/conv/small_c.cuh"
#include "runtime/cuda/mma.cuh"

namespace kiln::gpu::nn::small_c {

constexpr int kC = 3;           // input channels
constexpr int kStride = 2;      // on both axes
constexpr int kThreads = 128;   // 4 warps
constexpr int kDataStart = 16;  // element of (iw = 0, c = 0) in a staged row: 32 bytes, 16-byte aligned

struct Params {
  const void* x;       // [N, H, W, 3] float16, or with x_first_bytes channels-first [N, 3, H, W]
  int x_first_bytes;    // 0: channels last; a channels-first X of 4 (float32) or 2 (float16) bytes
  const __half* w;
  const __half* b;
  void* y;
  const float* y_scale;  // null: float16 output
  const void* y_zero;
  bool y_signed;  // int8 (else uint8)
  int H, W, OH, OW, pad_top, pad_left;
  int M;           // output channels
  int rows;        // output rows per work item
  int row_len;     // elements per staged input row (a multiple of 8)
  int chunks;      // 16-byte chunks of one input row
  int m_tiles;     // 16-pixel tiles per output row
  int row_groups;  // work items per image: ceil(OH / rows)
  int64_t items;   // N * row_groups
  EpilogueAttrs e;
};

// Staged input rows per work item of `rows` output rows, for a kernel of R rows.
constexpr int staged_rows(int rows, int R) { return (rows - 1) * kStride + R; }
// Bytes of the raw buffer for a channels-first X (host and device): the staged rows of 3 planes.
// W * x_first_bytes is a multiple of 16 (shape_fits).
inline __host__ __device__ int raw_bytes(int rows, int R, int W, int x_first_bytes) {
  return x_first_bytes ? staged_rows(rows, R) * kC * W * x_first_bytes : 0;
}
// Staging buffers: two, or one with a channels-first X, whose raw buffer is the one filled while
// the other is computed.
inline __host__ __device__ int stage_buffers(int x_first_bytes) { return x_first_bytes ? 1 : 2; }
// Slots per kernel row for S taps of kC channels and D dummy slots: whole 8-slot groups.
constexpr int seg_slots(int S, int D) { return (S * kC + D + 7) / 8 * 8; }

// The activations with template forms (kGeneric: any, through a switch).
constexpr int kGeneric = -1;

// Elements per staged input row (host and device): the data after kDataStart, and every element
// the last pixel tile's windows read.
int row_len(const DirectConv& g);

// The wgmma form (small_c_sm90a.cu, built where KILN_HAVE_SM90A): whether it takes
// p's shape with an R x R kernel on this device (its shared memory), and its launch.
bool wgmma_fits(const Params& p, int R);
void run_wgmma(const Params& p, int R, Activation a, cudaStream_t stream);

namespace {


constexpr int kOutStride = 8;  // float16 elements of padding per pixel row of a warp's output tile
constexpr int kQStride = 16;   // bytes of padding per pixel row of a warp's 8-bit output tile

__device__ __forceinline__ uint32_t ld_pair(const __half* p) { return *reinterpret_cast<const uint32_t*>(p); }

__device__ __forceinline__ uint32_t pack(__half lo, __half hi) {
  return static_cast<uint32_t>(__half_as_ushort(lo)) | (static_cast<uint32_t>(__half_as_ushort(hi)) << 16);
}

// Bytes of a warp's output tile of 16 pixels by NT * 8 channels (float16 or 8-bit, with padding).
template <int NT>
constexpr int out_tile_bytes() {
  return 16 * (NT * 8 + kOutStride) * 2;
}

// Copies work item `item`'s input rows into `stage` (cp.async; zeros for rows outside the image).
// A warp per row, its lanes over the row's 16-byte chunks: no division per chunk.
template <int R>
__device__ __forceinline__ void stage_rows(const Params& p, int64_t item, __half* stage) {
  const int64_t n = item / p.row_groups;
  const int ih0 = static_cast<int>(item % p.row_groups) * p.rows * kStride - p.pad_top;
  const __half* x = static_cast<const __half*>(p.x);
  for (int row = threadIdx.x / 32; row < staged_rows(p.rows, R); row += kThreads / 32) {
    const int ih = ih0 + row;
    const bool inside = ih >= 0 && ih < p.H;
    const __half* src = inside ? x + ((n * p.H + ih) * p.W) * kC : x;
    for (int chunk = threadIdx.x % 32; chunk < p.chunks; chunk += 32)
      mma::cp_async16(mma::smem_u32(stage + row * p.row_len + kDataStart + chunk * 8), inside ? src + chunk * 8 : x,
                      inside);
  }
}

// Copies work item `item`'s rows of a channels-first X into `raw` as they are (cp.async; zeros for
// rows outside the image): plane c of staged row r at (r * 3 + c) * W elements. A warp per plane
// row, as stage_rows.
template <int R>
__device__ __forceinline__ void stage_raw(const Params& p, int64_t item, unsigned char* raw) {
  const int64_t n = item / p.row_groups;
  const int ih0 = static_cast<int>(item % p.row_groups) * p.rows * kStride - p.pad_top;
  const int chunks = p.W * p.x_first_bytes / 16;  // per plane row
  const char* x = static_cast<const char*>(p.x);
  for (int rc = threadIdx.x / 32; rc < staged_rows(p.rows, R) * kC; rc += kThreads / 32) {
    const int row = rc / kC, c = rc - row * kC, ih = ih0 + row;
    const bool inside = ih >= 0 && ih < p.H;
    const char* src = inside ? x + (((n * kC + c) * p.H + ih) * p.W) * p.x_first_bytes : x;
    for (int chunk = threadIdx.x % 32; chunk < chunks; chunk += 32)
      mma::cp_async16(mma::smem_u32(raw + (rc * chunks + chunk) * 16), inside ? src + chunk * 16 : x, inside);
  }
}

// Converts `raw` (stage_raw) into the staging buffer's float16 channels-last rows: the data columns
// only (the pad columns stay zero). Rounds to nearest even, as the Cast it replaces. A thread takes
// 4 pixels of a staged row at a time: the 3 planes' 4 values (16 or 8 bytes each), written as 12
// consecutive float16 values in three 8-byte stores (a row holds a multiple of 4 pixels: its raw
// rows are whole 16-byte chunks; kDataStart and row_len keep the stores 8-byte aligned).
template <int R>
__device__ __forceinline__ void convert_raw(const Params& p, const unsigned char* raw, __half* stage) {
  const int quads = p.W / 4, total = staged_rows(p.rows, R) * quads;
  for (int i = threadIdx.x; i < total; i += kThreads) {
    const int row = i / quads, iw = (i - row * quads) * 4;
    float v[kC][4];
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const int plane = (row * kC + c) * p.W + iw;
      if (p.x_first_bytes == 4) {
        const float4 f = *reinterpret_cast<const float4*>(raw + plane * 4);
        v[c][0] = f.x, v[c][1] = f.y, v[c][2] = f.z, v[c][3] = f.w;
      } else {
        const uint2 h = *reinterpret_cast<const uint2*>(raw + plane * 2);
        const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&h.x));
        const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&h.y));
        v[c][0] = lo.x, v[c][1] = lo.y, v[c][2] = hi.x, v[c][3] = hi.y;
      }
    }
    // Pixel-major: element e = pixel * 3 + channel.
    uint32_t packed[6];
#pragma unroll
    for (int e = 0; e < 12; e += 2) {
      const __half2 h2 = __floats2half2_rn(v[e % kC][e / kC], v[(e + 1) % kC][(e + 1) / kC]);
      packed[e / 2] = *reinterpret_cast<const uint32_t*>(&h2);
    }
    uint2* dst = reinterpret_cast<uint2*>(stage + row * p.row_len + kDataStart + iw * kC);
    dst[0] = make_uint2(packed[0], packed[1]);
    dst[1] = make_uint2(packed[2], packed[3]);
    dst[2] = make_uint2(packed[4], packed[5]);
  }
}

// Zeroes `halves` float16 values at `stages` (a multiple of 8, 16-byte aligned) in 16-byte stores.
__device__ __forceinline__ void zero_stages(__half* stages, int halves) {
  uint4* s = reinterpret_cast<uint4*>(stages);
  for (int i = threadIdx.x; i < halves / 8; i += kThreads) s[i] = make_uint4(0, 0, 0, 0);
}

// A channels-first X's first work item copied into `raw` before the kernel reads its weights, so
// that the two round trips overlap (at batch 1 each CTA has one work item, so nothing else would
// hide them). The raw buffer is not zeroed, so no barrier is needed first. Pass staged = true to
// walk_items afterwards.
template <int R>
__device__ __forceinline__ bool stage_first_raw(const Params& p, unsigned char* raw) {
  if (!p.x_first_bytes) return false;
  if (blockIdx.x < p.items) stage_raw<R>(p, blockIdx.x, raw);
  return true;
}

// walk_items for a channels-first X, with one staging buffer: item k + 1's rows are copied into
// the raw buffer while body computes item k from the staging buffer; after a barrier they are
// converted into it. `staged`: the kernel has already issued the first item's copies
// (stage_first_raw).
template <int R, class Body>
__device__ __forceinline__ void walk_items_first(const Params& p, __half* stage, unsigned char* raw, bool staged,
                                                 Body&& body) {
  if (!staged && blockIdx.x < p.items) stage_raw<R>(p, blockIdx.x, raw);
  mma::cp_async_commit();
  mma::cp_async_wait<0>();
  __syncthreads();
  if (blockIdx.x < p.items) convert_raw<R>(p, raw, stage);
  for (int64_t item = blockIdx.x; item < p.items; item += gridDim.x) {
    const int64_t next = item + gridDim.x;
    __syncthreads();  // the conversion is done: the staging buffer is complete and `raw` free again
    if (next < p.items) stage_raw<R>(p, next, raw);
    mma::cp_async_commit();
    body(stage, item / p.row_groups, static_cast<int>(item % p.row_groups) * p.rows);
    mma::cp_async_wait<0>();
    __syncthreads();  // every thread's copies landed, and every warp is done with the staging buffer
    if (next < p.items) convert_raw<R>(p, raw, stage);
  }
}

// The persistent CTA's walk over its work items (blockIdx.x, then every gridDim.x-th): item k + 1's
// rows are copied into the other of two staging buffers while body(stage, image, first output
// row) computes item k from its buffer. `raw`: walk_items_first's buffer, for a channels-first X.
template <int R, class Body>
__device__ __forceinline__ void walk_items(const Params& p, __half* stages, int stage_len, unsigned char* raw,
                                           Body&& body, bool staged = false) {
  if (p.x_first_bytes) return walk_items_first<R>(p, stages, raw, staged, body);
  int buf = 0;
  if (blockIdx.x < p.items) stage_rows<R>(p, blockIdx.x, stages);
  mma::cp_async_commit();
  for (int64_t item = blockIdx.x; item < p.items; item += gridDim.x) {
    const int64_t next = item + gridDim.x;
    if (next < p.items) stage_rows<R>(p, next, stages + (buf ^ 1) * stage_len);
    mma::cp_async_commit();
    mma::cp_async_wait<1>();
    __syncthreads();
    body(stages + buf * stage_len, item / p.row_groups, static_cast<int>(item % p.row_groups) * p.rows);
    __syncthreads();  // every warp is done with this buffer before it is refilled
    buf ^= 1;
  }
  mma::cp_async_wait<0>();
}

template <int A>
__device__ __forceinline__ float activate(const EpilogueAttrs& e, float v) {
  if constexpr (A == static_cast<int>(Activation::kNone))
    return v;
  else if constexpr (A == static_cast<int>(Activation::kRelu))
    return v < 0.0f ? 0.0f : v;
  else if constexpr (A == static_cast<int>(Activation::kClip)) {  // ReLU6; a NaN stays NaN
    const float c = v < e.activation_alpha ? e.activation_alpha : v;
    return c > e.activation_beta ? e.activation_beta : c;
  } else
    return epilogue::activate<float>(e.activation, v, e.activation_alpha, e.activation_beta);
}

// The output's quantization: y = saturate(round(x / s) + z) of the float output x, computed as
// round(x * r) with r = RN(1 / s) (one rounding of the product; it differs from the quotient's
// rounding only where x / s is within a unit in the last place of a half). For v = x * r the
// kernels clamp v to [lo - z, hi - z] in float (the bounds are integers, so clamping commutes with
// rounding, and no value can overflow what follows), add 1.5 * 2^23, whose float then holds
// round-half-even(v) in its low mantissa bits, and keep the low byte of those bits plus z. Where z
// is even it is added to the 1.5 * 2^23 instead (the integer part's parity, which decides ties, is
// then unchanged). Where the activation is none, Relu, or a Clip whose range holds 0, it is folded
// into [lo, hi] (quantizing is monotonic and maps 0 to z, so q(act(x)) = clamp(q(x), q(a), q(b)))
// and the bias is pre-scaled, so that a value costs a multiply-add, two min/max and an addition.
// NaN gives z, as QuantizeLinear's kernels do: the clamp gives lo - z for it, which is 0 where lo
// is z (Relu), else a select mends it. The conversion unit's instructions (__fdiv_rn, rintf,
// __float2int_rn) run at a quarter of the rate.
struct Quant {
  float r = 1;
  float lo = -128, hi = 127;  // the clamp, less z
  float magic = 12582912.0f;  // 1.5 * 2^23, plus z where z is even
  int add_z = 0;              // z where it is odd
  bool nan_fix = false;       // lo is not z: NaN needs the select
  bool folded = false;        // the activation is in [lo, hi] and the bias is scaled by r
};

// Whether activation A always folds into the clamp, with lo = z (Relu: NaN needs no select).
template <int A>
constexpr bool kFolds = A == static_cast<int>(Activation::kNone) || A == static_cast<int>(Activation::kRelu);
template <int A>
constexpr bool kLoIsZ = A == static_cast<int>(Activation::kRelu);

// round(v) + z saturated to [lo, hi] (in the low byte), for v = x * r; NaN gives z.
template <int A>
__device__ __forceinline__ int quantized(float v, const Quant& q) {
  float c = fminf(fmaxf(v, q.lo), q.hi);
  if (!kLoIsZ<A> && q.nan_fix && v != v) c = 0.0f;
  return __float_as_int(c + q.magic) + q.add_z;
}

// QuantizeLinear of one value v = x * r into [lo, hi] with zero point z (NaN gives z), once per
// kernel.
__device__ __forceinline__ int quantize_once(float v, int z, int lo, int hi) {
  if (v != v) return z;
  return min(max(__float2int_rn(fminf(fmaxf(v, -1e6f), 1e6f)) + z, lo), hi);
}

// The quantization of p's output (unused for float16 outputs).
template <int A>
__device__ __forceinline__ Quant quant_of(const Params& p) {
  Quant quant;
  if (!p.y_scale) return quant;
  quant.r = __frcp_rn(*p.y_scale);
  const int z = p.y_signed ? *static_cast<const int8_t*>(p.y_zero) : *static_cast<const uint8_t*>(p.y_zero);
  const int type_lo = p.y_signed ? -128 : 0, type_hi = p.y_signed ? 127 : 255;
  int lo = type_lo, hi = type_hi;
  constexpr bool kClip = A == static_cast<int>(Activation::kClip);
  const bool clip_holds_0 = kClip && p.e.activation_alpha <= 0.0f && 0.0f <= p.e.activation_beta;
  quant.folded = kFolds<A> || clip_holds_0;
  if (A == static_cast<int>(Activation::kRelu)) lo = max(lo, z);
  if (clip_holds_0) {
    lo = max(lo, quantize_once(__fmul_rn(p.e.activation_alpha, quant.r), z, type_lo, type_hi));
    hi = min(hi, quantize_once(__fmul_rn(p.e.activation_beta, quant.r), z, type_lo, type_hi));
  }
  quant.lo = static_cast<float>(lo - z);
  quant.hi = static_cast<float>(hi - z);
  quant.nan_fix = lo != z;
  if (z % 2 == 0)
    quant.magic += static_cast<float>(z);
  else
    quant.add_z = z;
  return quant;
}

// This lane's bias pairs for NT 8-channel tiles from channel c0 (channels c0 + 8 nt + 2 q, + 1),
// pre-scaled by r where the activation folds into the quantization's clamp.
template <int NT>
__device__ __forceinline__ void lane_bias(const Params& p, const Quant& quant, int c0, int q, float (&bias)[NT][2]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const float b = p.b ? __half2float(p.b[c0 + nt * 8 + 2 * q + k]) : 0.0f;
      bias[nt][k] = quant.folded ? __fmul_rn(b, quant.r) : b;
    }
}

template <int R, int S, int D>
struct Layout {
  static constexpr int kTaps = S * kC;
  static constexpr int kSeg = seg_slots(S, D);
  static constexpr int kGroups = R * kSeg / 8;      // 8-slot groups of the reduction
  static constexpr int kSteps = (kGroups + 1) / 2;  // k16 steps; an odd last group pairs with zeros
  static constexpr int kSegGroups = kSeg / 8;
  // Whether lane q's pair at slots sb + 2q, sb + 2q + 1 may hold a dummy or pad slot, for some q.
  static constexpr bool masked(int sb) { return (sb == 0 && D > 0) || sb + 8 - D > kTaps; }

  // The weight of output channel n at reduction slot k (zero at dummy, pad and padding slots).
  __device__ static __half weight(const __half* w, int n, int k) {
    const int r = k / kSeg, j = k - r * kSeg - D;
    return r < R && j >= 0 && j < kTaps ? w[(n * R + r) * kTaps + j] : __float2half_rn(0.0f);
  }
  // Per 8-slot group of a segment: the mask that zeroes lane q's dummy and pad halves.
  __device__ static void keep_masks(int q, uint32_t (&keep)[kSegGroups]) {
#pragma unroll
    for (int i = 0; i < kSegGroups; ++i) {
      const int s0 = i * 8 + 2 * q - D;  // tap index of the pair's low half
      keep[i] = (s0 >= 0 && s0 < kTaps ? 0x0000ffffu : 0u) | (s0 + 1 >= 0 && s0 + 1 < kTaps ? 0xffff0000u : 0u);
    }
  }
  // Where kernel row r starts in `stage` for lane (g, q)'s pixel g of 16-pixel tile mt of the
  // item's output row qr: the row's first slot (element kDataStart is the row's pixel 0, channel 0),
  // plus the lane's column pair; even.
  __device__ static void row_starts(const Params& p, const __half* stage, int qr, int mt, int g, int q,
                                    const __half* (&rows)[R]) {
    const int base = kDataStart - p.pad_left * kC - D + 2 * q + kStride * kC * (mt * 16 + g);
#pragma unroll
    for (int r = 0; r < R; ++r) rows[r] = stage + (qr * kStride + r) * p.row_len + base;
  }
  // k16 step ks's A fragment (mma.m16n8k16's order) for the warp's 16 pixels, whose kernel row r
  // starts at rows[r] for pixel g; pixel g + 8 is kStride * kC * 8 elements further.
  __device__ static void a_fragment(const __half* const (&rows)[R], const uint32_t (&keep)[kSegGroups], int ks,
                                    uint32_t (&a)[4]) {
    constexpr int kPlus8 = kStride * kC * 8;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int gi = ks * 2 + h;
      if (gi >= kGroups) {
        a[2 * h] = a[2 * h + 1] = 0;
        continue;
      }
      const int r = gi / kSegGroups, sg = gi % kSegGroups;
      uint32_t lo = ld_pair(rows[r] + sg * 8), hi = ld_pair(rows[r] + sg * 8 + kPlus8);
      if (masked(sg * 8)) {
        lo &= keep[sg];
        hi &= keep[sg];
      }
      a[2 * h] = lo;      // a0 / a2: pixel g, slots of group gi
      a[2 * h + 1] = hi;  // a1 / a3: pixel g + 8
    }
  }
};

// The epilogue of a warp's 16 pixels (output row oh of image n, pixels mt * 16 ..) by NT * 8
// channels from c0, from accumulators in mma.sync's fragment order: bias (pre-scaled where
// quant.folded) and activation, float16 or 8-bit values into the warp's tile, then 16-byte (8-byte
// for 8-bit) stores of its rows.
template <int NT, int A>
__device__ __forceinline__ void store_tile(const Params& p, const Quant& quant, const float (&acc)[NT][4],
                                           const float (&bias)[NT][2], unsigned char* tile, int64_t n, int oh, int mt,
                                           int c0) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int64_t row = ((n * p.OH + oh) * p.OW) * p.M + c0;
  if (p.y_scale) {
    constexpr int kStrideQ = NT * 8 + kQStride;  // bytes per pixel row
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float v0, v1;
        if (kFolds<A> || quant.folded) {
          v0 = __fmaf_rn(acc[nt][2 * half], quant.r, bias[nt][0]);
          v1 = __fmaf_rn(acc[nt][2 * half + 1], quant.r, bias[nt][1]);
        } else {
          v0 = __fmul_rn(activate<A>(p.e, acc[nt][2 * half] + bias[nt][0]), quant.r);
          v1 = __fmul_rn(activate<A>(p.e, acc[nt][2 * half + 1] + bias[nt][1]), quant.r);
        }
        // Bytes 0 of both results, side by side.
        *reinterpret_cast<uint16_t*>(tile + (g + 8 * half) * kStrideQ + nt * 8 + 2 * q) =
            static_cast<uint16_t>(__byte_perm(static_cast<uint32_t>(quantized<A>(v0, quant)),
                                              static_cast<uint32_t>(quantized<A>(v1, quant)), 0x0040));
      }
    __syncwarp();
    unsigned char* const y = static_cast<unsigned char*>(p.y) + row;
#pragma unroll
    for (int i = lane; i < 16 * NT; i += 32) {  // NT 8-byte pieces per pixel
      const int px = i / NT, piece = i % NT, o = mt * 16 + px;
      if (o < p.OW)
        *reinterpret_cast<uint2*>(y + static_cast<int64_t>(o) * p.M + piece * 8) =
            *reinterpret_cast<const uint2*>(tile + px * kStrideQ + piece * 8);
    }
    __syncwarp();
    return;
  }
  constexpr int kStrideH = NT * 8 + kOutStride;  // float16 elements per pixel row
  __half* const out = reinterpret_cast<__half*>(tile);
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float v0 = activate<A>(p.e, acc[nt][2 * half] + bias[nt][0]);
      const float v1 = activate<A>(p.e, acc[nt][2 * half + 1] + bias[nt][1]);
      *reinterpret_cast<__half2*>(out + (g + 8 * half) * kStrideH + nt * 8 + 2 * q) = __floats2half2_rn(v0, v1);
    }
  __syncwarp();
  __half* const y = static_cast<__half*>(p.y) + row;
#pragma unroll
  for (int i = lane; i < 16 * NT; i += 32) {  // NT 16-byte chunks per pixel
    const int px = i / NT, chunk = i % NT, o = mt * 16 + px;
    if (o < p.OW)
      *reinterpret_cast<uint4*>(y + static_cast<int64_t>(o) * p.M + chunk * 8) =
          *reinterpret_cast<const uint4*>(out + px * kStrideH + chunk * 8);
  }
  __syncwarp();
}

}  // namespace
}  // namespace kiln::gpu::nn::small_c
