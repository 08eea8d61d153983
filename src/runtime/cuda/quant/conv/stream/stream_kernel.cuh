// Kiln's streaming INT8 1x1 convolution over channels-last tensors:
//   y[p, m] = epilogue(sum_c x[p, c] * w[m, c], z[p, m])
// for 1x1 layers whose input rows are short (C = 16 .. 512): a GEMM with a small
// reduction, where every output byte costs more memory traffic than multiply-adds. The implicit
// GEMM (quant/conv/igemm/igemm.cu) runs one tile per CTA: it waits for its operands, then for its residual,
// then stores, and its int32 staging tile leaves room for two or three CTAs per SM, so too few
// bytes are in flight to keep DRAM busy (25% of the bandwidth on ResNet-50's 64 -> 256 layers).
//
// Here a CTA owns BN output channels: their weights (BN x C) and epilogue constants stay in shared
// memory, and it walks the pixel tiles of its grid stride through a pipeline of 2 to 4 buffers:
// cp.async brings the next tiles' x rows and int8 residual while the warps multiply the current one (mma.m16n8k32 from
// ldmatrix fragments, mma.cuh) and finish it. The epilogue works on the accumulator
// fragments: it reads each residual pair from the shared tile and writes the int8 result back in
// its place, and the tile then leaves in coalesced 16-byte stores. No int32 staging.
//
// The epilogue computes the implicit GEMM's values (units of y's quantization step, one fused
// multiply-add per term, so int8 outputs may differ from the CPU's by one step at rounding ties),
// with its integer and float conversions done by float additions instead of the conversion unit
// (except the general epilogue's, below: rows of more than 256 channels and wild constants).
//
// This header is the kernel itself (stream.cuh says what it takes), for the files that
// instantiate its tile shapes: stream.cu (mma.sync, sm_80 and later) and
// stream_sm90a.cu (wgmma, sm_90a). The multiply (mma.sync above) is the tile's Mma
// policy; everything else (the pipeline, the epilogue, the launch shape) is shared.
#pragma once

#include <algorithm>
#include <atomic>
#include <string>

#include "kiln/types.h"
#include "runtime/cuda/dependent_launch.cuh"
#include "runtime/cuda/gpu_kernels.h"
#include "runtime/cuda/mma.cuh"
#include "runtime/cuda/quant/conv/stream/stream.cuh"

namespace kiln::gpu::quant::stream {

namespace {

using namespace mma;
// Input channels: the weights of BN channels stay in shared memory. Sums of up to kFastC products
// of int8 values stay within exact_float's 2^22 (256 * 128 * 128 = 2^22); wider rows (ResNet's
// 512 -> 128 reductions, up to 2^23) take the general epilogue, which converts on the conversion
// unit (exact to 2^24).
constexpr int kMaxC = 512;
constexpr int kFastC = 256;

template <int BM_, int BN_, int WARPS_M, int WARPS_N, int MIN_BLOCKS, class Mma_ = MmaSync>
struct Tile {
  using Mma = Mma_;
  static constexpr int BM = BM_, BN = BN_;
  static constexpr int kWarpsN = WARPS_N;
  static constexpr int kThreads = WARPS_M * WARPS_N * 32;
  static constexpr int kMinBlocks = MIN_BLOCKS;  // CTAs per SM the registers must allow
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
  static constexpr int MT = WM / 16, NT = WN / 8;
  static constexpr int kZStride = BN + 16;  // bytes per row of the residual / output tile
  // Shared memory for C input channels and `stages` buffers: the weights, alpha and bias, and per
  // buffer a tile's x rows and its residual / output tile.
  // (Plus room to align the base where the operand tiles need more than the declared 128 bytes.)
  static constexpr int smem(int C, int stages) {
    return BN * C + 8 * BN + stages * (BM * C + BM * kZStride) + (Mma::kAlign > 128 ? Mma::kAlign : 0);
  }
  static_assert(WM % 16 == 0 && WN % 16 == 0);
};

constexpr int kMaxStages = 4;

// The epilogue's conversions without the conversion unit, whose quarter rate bounds a kernel that
// converts three values per output byte (measured: 250 us where the bytes take 110): a float's
// significand holds an integer exactly where the exponent makes its unit 1.
constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23: floats near it step by 1

// float(v), exactly, for |v| <= 2^22 (the sums of C <= 256 products of int8 values).
__device__ __forceinline__ float exact_float(int32_t v) { return __int_as_float(0x4B400000 + v) - kMagic; }
// The floats of two signed bytes (v's low 16 bits), exactly: 2^23 + (byte + 128), less 2^23 + 128.
__device__ __forceinline__ void byte_floats(uint32_t v, float& lo, float& hi) {
  const uint32_t u = v ^ 0x8080u;  // each byte + 128
  lo = __int_as_float((u & 0xffu) | 0x4B000000u) - 8388736.0f;
  hi = __int_as_float(__funnelshift_r(u, 0x4Bu, 8)) - 8388736.0f;  // (u >> 8) | 0x4B000000
}
// round-half-even(r) in the low byte of the result, for r in [-128, 127] (what __float2int_rn
// gives there): the addition rounds in the current (nearest-even) mode.
__device__ __forceinline__ int rounded_bits(float r) { return __float_as_int(r + kMagic); }

// The epilogue's scalars in units of y's step: the residual's scale and the clamp (the
// activation's bounds within int8's range).
struct Consts {
  float z_scale, lo, hi;
};

// The epilogue of one tile on a warp's accumulator fragments (rows row0 + 16 i + 8 h, columns
// col0 + 8 j and the next): residual pairs in from the shared tile, int8 pairs out in their place.
// kGeneral: NaN to 0, as the CPU quantizes it (the clamp alone would give it the lower bound), and
// the sums converted by the conversion unit (C above kFastC); without it, C <= kFastC and
// constants whose sums cannot overflow, so that no NaN can arise.
template <class T, bool kZ, bool kGeneral>
__device__ __forceinline__ void finish(const int32_t (&acc)[T::MT][T::NT][4], uint8_t* z_s, const float* alpha_s,
                                       const float* bias_s, const Consts& e, int row0, int col0) {
#pragma unroll
  for (int j = 0; j < T::NT; ++j) {
    const int col = col0 + j * 8;
    const float al[2] = {alpha_s[col], alpha_s[col + 1]}, bi[2] = {bias_s[col], bias_s[col + 1]};
#pragma unroll
    for (int i = 0; i < T::MT; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint16_t* const zp = reinterpret_cast<uint16_t*>(z_s + (row0 + i * 16 + h * 8) * T::kZStride + col);
        float zf[2] = {0.0f, 0.0f};
        if (kZ) byte_floats(*zp, zf[0], zf[1]);
        int q[2];
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          const int32_t v = acc[i][j][2 * h + k];
          float r = fmaf(kGeneral ? __int2float_rn(v) : exact_float(v), al[k], bi[k]);
          if (kZ) r = fmaf(zf[k], e.z_scale, r);
          if (kGeneral && r != r) r = 0.0f;
          q[k] = rounded_bits(fminf(fmaxf(r, e.lo), e.hi));
        }
        *zp = static_cast<uint16_t>(__byte_perm(q[0], q[1], 0x0040));  // the low bytes: int8 values
      }
  }
}

// n / d for 0 <= n < 2^31 and d >= 1 by a multiply-high and a shift (the round-up method, as in
// CUTLASS's FastDivmod): a division by a run-time divisor otherwise takes three passes through the
// quarter-rate conversion unit, which bounded the strided copies (154 us where 84 moved as many
// output bytes).
struct FastDiv {
  uint32_t mul = 0, shift = 0;  // mul 0: d is 1
  static FastDiv of(int d) {
    FastDiv f;
    if (d > 1) {
      int l = 0;  // ceil(log2(d))
      while ((int64_t{1} << l) < d) ++l;
      f.mul = static_cast<uint32_t>(((uint64_t{1} << (31 + l)) + d - 1) / static_cast<uint64_t>(d));
      f.shift = static_cast<uint32_t>(l - 1);
    }
    return f;
  }
  __device__ __forceinline__ int operator()(int n) const {
    return mul == 0 ? n : static_cast<int>(__umulhi(static_cast<uint32_t>(n), mul) >> shift);
  }
};

// chunks: 16-byte chunks of an x or w row (C / 16), and chunk_div = ceil(2^20 / chunks), which
// divides a tile's chunk indices i exactly, i / chunks = i * chunk_div >> 20: the rounding error
// i * (chunk_div * chunks - 2^20) / 2^20 stays below 1 for i * (chunks - 1) < 2^20 (i < 256 rows
// * 32 chunks here), and i * chunk_div below 2^31.
// row_shift: log2(chunks) where chunks is a power of two that divides the CTA's threads (C of 64,
// 128 or 256; 512 takes the general split), so that every pass of the threads over a tile's x
// chunks covers whole rows and a
// thread copies the same chunk column of rows r, r + step, ... (step a multiple of 8, where the
// swizzle repeats, and a divisor of BM); else -1 (the general split).
// strided: a stride above 1 (downsampling 1x1 layers), where output pixel p = (n, oh, ow) of the
// OH x OW map (OHW = OH * OW pixels an image) reads input pixel (n, oh * sh, ow * sw) of H x W;
// such convolutions have P < 2^31 (fits()).
struct Geometry {
  int C, M, n_tiles, p_tiles, stages, chunks, chunk_div, row_shift;
  int64_t P;
  bool strided;
  int H, W, OW, OHW, sh, sw;
  FastDiv by_ow, by_ohw;
};

// Bytes of an x or w row in shared memory: C of 16 to 32 padded to 64 (a sub-tile), others to a
// multiple of 64 (C of 96, 160 or 224: the last sub-tile's upper half is left unread).
constexpr int row_bytes_of(int C) { return (C + kBK - 1) / kBK * kBK; }

// Waits until at most n - 1 groups of cp.async copies are pending (n = 2 .. kMaxStages).
__device__ __forceinline__ void wait_all_but(int n) {
  switch (n) {
    case 2: cp_async_wait<1>(); break;
    case 3: cp_async_wait<2>(); break;
    default: cp_async_wait<kMaxStages - 1>(); break;
  }
}

// NP: 0 for C a multiple of 32 from 64 to 512, in 16-byte chunks; for C of 16, 24 or 32
// (MobileNet's expansions), the 8-byte pieces of a row (2, 3 or 4): its x and w rows are then
// padded with zeros to one 64-byte sub-tile, whose upper half (bytes 32 .. 63) is zero and skipped.
// Where C is an odd multiple of 32 (96, 160, 224), the last sub-tile's upper half is skipped likewise.
template <class T, int NP>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks) stream_kernel(QConvNhwcArgs a, Geometry g) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800  // cp.async, ldmatrix and int8 mma.m16n8k32
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* const smem = aligned_smem<T::Mma::kAlign>(smem_raw);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / T::kWarpsN, warp_n = warp % T::kWarpsN;
  const int m0 = static_cast<int>(blockIdx.x % g.n_tiles) * T::BN;
  const int step = static_cast<int>(gridDim.x) / g.n_tiles;
  constexpr bool kNarrow = NP > 0;
  const int row_bytes = kNarrow ? kBK : row_bytes_of(g.C);  // of an x or w row in shared memory
  const int subs = kNarrow ? 1 : row_bytes / kBK;             // [rows][64] sub-tiles of the reduction
  const bool half_last = !kNarrow && g.C % kBK != 0;  // the last sub-tile's upper k32 half is not C's
  const int chunks = g.chunks;
  auto split = [&](int i, int& row, int& cc) {  // chunk index i -> (row, chunk of the row)
    row = (i * g.chunk_div) >> 20;
    cc = i - row * chunks;
  };
  uint8_t* const w_s = smem;
  float* const alpha_s = reinterpret_cast<float*>(smem + T::BN * row_bytes);
  float* const bias_s = alpha_s + T::BN;
  uint8_t* const buf = reinterpret_cast<uint8_t*>(bias_s + T::BN);
  const int buf_bytes = T::BM * row_bytes + T::BM * T::kZStride;
  const bool has_z = a.z != nullptr;

  // The weights of this CTA's channels, once; rows past M are zeros.
  if constexpr (kNarrow) {
    // Zeros first where no copy writes (the rows' padding), in the weights and every x buffer.
    for (int i = tid; i < T::BN * kBK / 16; i += T::kThreads) reinterpret_cast<int4*>(w_s)[i] = int4{};
    for (int b = 0; b < g.stages; ++b)
      for (int i = tid; i < T::BM * kBK / 16; i += T::kThreads)
        reinterpret_cast<int4*>(buf + b * buf_bytes)[i] = int4{};
    __syncthreads();
    for (int i = tid; i < T::BN * NP; i += T::kThreads) {
      const int row = i / NP, j = i % NP, m = m0 + row;
      cp_async8(smem_u32(w_s) + swizzled(row, j >> 1) + (j & 1) * 8,
                m < g.M ? a.w + static_cast<int64_t>(m) * g.C + j * 8 : a.w, m < g.M);
    }
  } else {
    for (int i = tid; i < T::BN * chunks; i += T::kThreads) {
      int row, cc;
      split(i, row, cc);
      const int m = m0 + row;
      cp_async16(smem_u32(w_s) + (cc / 4) * T::BN * kBK + swizzled(row, cc % 4),
                 m < g.M ? a.w + static_cast<int64_t>(m) * g.C + cc * 16 : a.w, m < g.M);
    }
  }
  // Everything below may read what the previous kernel wrote: w_scale and bias need not be
  // constants (dependent_launch.cuh); the weights' copies above overlap that kernel's end.
  wait_for_inputs();
  start_next_kernel();  // only now: one kernel ahead at most (dependent_launch.cuh)
  // Epilogue constants, in units of y's step. The activation's bounds (ReLU or Clip) and int8's
  // range are one clamp in float before the conversion.
  const float out_scale = 1.0f / a.epi.y_scale;
  Consts e{a.epi.z_scale * out_scale, -128.0f, 127.0f};
  if (a.epi.act == 1) e.lo = 0.0f;
  if (a.epi.act == 2) {
    e.lo = fminf(fmaxf(a.epi.act_alpha * out_scale, -128.0f), 127.0f);
    e.hi = fminf(fmaxf(a.epi.act_beta * out_scale, -128.0f), 127.0f);
  }
  // Tame constants: every term finite and their sum below float's range (|sum| <= 2^22 where C <=
  // kFastC, |z| <= 128), so that no value can be NaN. Else, and for wider rows, the general epilogue.
  auto tame = [](float v, float bound) { return fabsf(v) * bound < 1e30f; };  // false for NaN, inf
  bool wild = tid == 0 && !tame(e.z_scale, 128.0f);
  for (int i = tid; i < T::BN; i += T::kThreads) {
    const int m = m0 + i;
    const bool in = m < g.M;
    alpha_s[i] = in ? a.x_scale * __ldg(a.w_scale + (a.w_scale_per_channel ? m : 0)) * out_scale : 0.0f;
    bias_s[i] = in && a.bias ? __ldg(a.bias + m) * out_scale : 0.0f;
    wild = wild || !tame(alpha_s[i], 4194304.0f) || !tame(bias_s[i], 1.0f);
  }
  const bool general = __syncthreads_or(wild) != 0 || g.C > kFastC;

  // f(offset in y and z, offset in the shared output tile, in range) for each of the thread's
  // 16-byte chunks of pixel tile p0's output (or residual) tile. Where the tile's rows have a
  // whole number of chunks per pass of the threads, the thread's chunk column and rows follow
  // from tid once, and the offsets step by a constant.
  auto out_chunks = [&](int64_t p0, auto&& f) {
    constexpr int kChunks = T::BN / 16;
    if constexpr (T::kThreads % kChunks == 0) {
      constexpr int kStep = T::kThreads / kChunks;
      static_assert(T::BM % kStep == 0);
      const int row = tid / kChunks, cc = tid % kChunks;
      const bool col_in = m0 + cc * 16 < g.M;
      const int64_t offset = (p0 + row) * g.M + m0 + cc * 16;
#pragma unroll
      for (int k = 0; k < T::BM / kStep; ++k)
        f(offset + static_cast<int64_t>(k * kStep) * g.M, (row + k * kStep) * T::kZStride + cc * 16,
          col_in && p0 + row + k * kStep < g.P);
    } else {
      for (int i = tid; i < T::BM * kChunks; i += T::kThreads) {
        const int row = i / kChunks, cc = i % kChunks;
        f((p0 + row) * g.M + m0 + cc * 16, row * T::kZStride + cc * 16, p0 + row < g.P && m0 + cc * 16 < g.M);
      }
    }
  };

  // The offset in x of output pixel p's input row.
  auto x_row = [&](int64_t p) -> int64_t {
    if (!g.strided) return p * g.C;
    const int n = g.by_ohw(static_cast<int>(p)), r = static_cast<int>(p) - n * g.OHW, oh = g.by_ow(r), ow = r - oh * g.OW;
    return ((static_cast<int64_t>(n) * g.H + oh * g.sh) * g.W + static_cast<int64_t>(ow) * g.sw) * g.C;
  };

  // Pixel tile pt's x rows (zeros past P) and residual into buffer b.
  auto load_tile = [&](int b, int pt) {
    const int64_t p0 = static_cast<int64_t>(pt) * T::BM;
    uint8_t* const x_s = buf + b * buf_bytes;
    if (!kNarrow && g.row_shift >= 0) {
      // Whole rows per pass: the thread's chunk column and first row once, then a constant step
      // (a multiple of 8 rows, so the swizzle of the column repeats).
      const int step = T::kThreads >> g.row_shift, cc = tid & (chunks - 1);
      int64_t p = p0 + (tid >> g.row_shift);
      uint32_t dst = smem_u32(x_s) + (cc / 4) * T::BM * kBK + swizzled(tid >> g.row_shift, cc % 4);
      if (!g.strided) {
        int64_t offset = p * g.C + cc * 16;
        for (int r = 0; r < T::BM; r += step, p += step, offset += step * g.C, dst += step * kBK)
          cp_async16(dst, p < g.P ? a.x + offset : a.x, p < g.P);
      } else {
        for (int r = 0; r < T::BM; r += step, p += step, dst += step * kBK)
          cp_async16(dst, p < g.P ? a.x + x_row(p) + cc * 16 : a.x, p < g.P);
      }
    } else if constexpr (kNarrow) {
      for (int i = tid; i < T::BM * NP; i += T::kThreads) {
        const int row = i / NP, j = i % NP;
        const bool ok = p0 + row < g.P;
        cp_async8(smem_u32(x_s) + swizzled(row, j >> 1) + (j & 1) * 8, ok ? a.x + x_row(p0 + row) + j * 8 : a.x, ok);
      }
    } else {
      for (int i = tid; i < T::BM * chunks; i += T::kThreads) {
        int row, cc;
        split(i, row, cc);
        const bool ok = p0 + row < g.P;
        cp_async16(smem_u32(x_s) + (cc / 4) * T::BM * kBK + swizzled(row, cc % 4),
                   ok ? a.x + x_row(p0 + row) + cc * 16 : a.x, ok);
      }
    }
    if (!has_z) return;
    uint8_t* const z_s = x_s + T::BM * row_bytes;
    out_chunks(p0, [&](int64_t offset, int s_offset, bool ok) {
      cp_async16(smem_u32(z_s) + s_offset, ok ? static_cast<const int8_t*>(a.z) + offset : a.x, ok);
    });
  };

  // The first stages - 1 tiles ahead (one copy group each, the weights in the first), then one more
  // per tile.
  int pt = static_cast<int>(blockIdx.x / g.n_tiles);
  for (int s = 0; s < g.stages - 1; ++s) {
    if (pt + s * step < g.p_tiles) load_tile(s, pt + s * step);
    cp_async_commit();
  }
  // b: this tile's buffer; the one stages - 1 tiles ahead is the one before it.
  for (int b = 0; pt < g.p_tiles; b = b + 1 == g.stages ? 0 : b + 1, pt += step) {
    const int ahead = pt + (g.stages - 1) * step;
    if (ahead < g.p_tiles) load_tile(b == 0 ? g.stages - 1 : b - 1, ahead);
    cp_async_commit();
    wait_all_but(g.stages);
    T::Mma::operands_landed();
    __syncthreads();  // this tile (and at first the weights and constants) has landed

    int32_t acc[T::MT][T::NT][4] = {};
    const uint32_t x_tile = smem_u32(buf + b * buf_bytes);
    T::Mma::begin(acc);
    for (int s = 0; s < subs; ++s)
#pragma unroll
      for (int ks = 0; ks < (kNarrow ? 1 : 2); ++ks) {
        if (ks == 1 && half_last && s == subs - 1) break;
        T::Mma::template step<T>(acc, x_tile + s * T::BM * kBK, smem_u32(w_s) + s * T::BN * kBK, warp_m, warp_n, ks,
                                 lane, s == 0 && ks == 0);
      }
    T::Mma::end(acc);
    T::Mma::template wait<0>(acc);

    uint8_t* const z_s = buf + b * buf_bytes + T::BM * row_bytes;
    const int row0 = warp_m * T::WM + (lane >> 2), col0 = warp_n * T::WN + (lane & 3) * 2;
    if (has_z)
      general ? finish<T, true, true>(acc, z_s, alpha_s, bias_s, e, row0, col0)
              : finish<T, true, false>(acc, z_s, alpha_s, bias_s, e, row0, col0);
    else
      general ? finish<T, false, true>(acc, z_s, alpha_s, bias_s, e, row0, col0)
              : finish<T, false, false>(acc, z_s, alpha_s, bias_s, e, row0, col0);
    __syncthreads();  // the output tile is complete

    out_chunks(static_cast<int64_t>(pt) * T::BM, [&](int64_t offset, int s_offset, bool ok) {
      if (ok)
        *reinterpret_cast<int4*>(static_cast<int8_t*>(a.y) + offset) = *reinterpret_cast<const int4*>(z_s + s_offset);
    });
    __syncthreads();  // every thread has read this buffer before the next iteration refills it
  }
  cp_async_wait<0>();
#endif
}

// The pipeline's depth for shared rows of C bytes (C padded to a multiple of 64) and the
// grid's CTAs: of 2 .. kMaxStages buffers, the depth
// with the most tiles in flight per SM (resident CTAs x (stages - 1)), and the CTAs that fit the
// GPU once. Asked once per device and channel count (run() is called on every step).
struct Launch {
  int stages = 0, ctas = 0;
};

template <class T, int NP>
Launch launch_shape(int device, int C) {
  // One per row size in shared memory (narrow rows are 64 bytes: slot 0 of their own function).
  // Not remembered under an architecture limit (--target-arch: less shared memory than the device's).
  static std::atomic<int64_t> known[kMaxDevices][kMaxC / kBK] = {};  // stages << 32 | ctas, 0 unknown
  const int slot = C / kBK - 1;
  const int device_most = std::min(device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(device),
                                   T::smem(kMaxC, kMaxStages));
  const int most = std::min(max_block_smem(device), T::smem(kMaxC, kMaxStages));
  const bool remember = device < kMaxDevices && most == device_most;
  if (remember)
    if (const int64_t v = known[device][slot].load(std::memory_order_relaxed); v != 0)
      return {static_cast<int>(v >> 32), static_cast<int>(v & 0xffffffff)};
  const int sms = device_attribute<cudaDevAttrMultiProcessorCount>(device);
  // The most any channel count and depth needs, within the device's limit (one value for the
  // function, whichever C comes first, whatever limit the thread has: the attribute is the kernel's).
  check_cuda(cudaFuncSetAttribute(stream_kernel<T, NP>, cudaFuncAttributeMaxDynamicSharedMemorySize, device_most),
             "NhwcQConv: asking for the streaming kernel's shared memory");
  Launch best;
  int best_flight = 0;
  for (int s = 2; s <= kMaxStages; ++s) {
    if (T::smem(C, s) > most) break;
    int per_sm = 0;
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, stream_kernel<T, NP>, T::kThreads, T::smem(C, s)),
               "NhwcQConv: the streaming kernel's occupancy");
    if (per_sm * (s - 1) > best_flight) best_flight = per_sm * (s - 1), best = {s, per_sm * sms};
  }
  if (best.stages == 0) throw Error("NhwcQConv: the streaming kernel does not fit this GPU's shared memory");
  if (remember) known[device][slot].store(int64_t{best.stages} << 32 | best.ctas, std::memory_order_relaxed);
  return best;
}

template <class T, int NP>
void launch_with(const QConvNhwcArgs& a, cudaStream_t stream) {
  Geometry g;
  g.C = static_cast<int>(a.C);
  g.chunks = g.C / 16;
  g.chunk_div = ((1 << 20) + g.chunks - 1) / g.chunks;
  g.row_shift = -1;
  for (int sh = 0; sh <= 4; ++sh) {  // chunks of 1 .. 16
    const int step = T::kThreads >> sh;  // rows per pass
    if (g.chunks == 1 << sh && T::kThreads % g.chunks == 0 && step % 8 == 0 && T::BM % step == 0) g.row_shift = sh;
  }
  const int row_bytes = row_bytes_of(g.C);  // in shared memory
  g.M = static_cast<int>(a.M);
  g.P = a.N * a.OH * a.OW;
  g.strided = a.sh != 1 || a.sw != 1;
  g.H = static_cast<int>(a.H), g.W = static_cast<int>(a.W), g.OW = static_cast<int>(a.OW);
  g.OHW = static_cast<int>(a.OH * a.OW), g.sh = static_cast<int>(a.sh), g.sw = static_cast<int>(a.sw);
  g.by_ow = FastDiv::of(g.OW), g.by_ohw = FastDiv::of(g.OHW);
  g.n_tiles = (g.M + T::BN - 1) / T::BN;
  const int64_t p_tiles = (g.P + T::BM - 1) / T::BM;
  // Tile indices stay in 32 bits: a CTA's look-ahead reaches below 4 * p_tiles.
  if (p_tiles >= int64_t{1} << 29)
    throw Error("NhwcQConv: the convolution has too many pixels for the streaming kernel");
  g.p_tiles = static_cast<int>(p_tiles);
  int device = 0;
  check_cuda(cudaGetDevice(&device), "NhwcQConv");
  // Before its first launch, uncaptured (the builder times every tactic first).
  const Launch l = launch_shape<T, NP>(device, row_bytes);
  g.stages = l.stages;
  const int64_t blocks = std::min<int64_t>(p_tiles, std::max(1, l.ctas / g.n_tiles)) * g.n_tiles;
  launch_dependent<stream_kernel<T, NP>>(dim3(static_cast<unsigned>(blocks)), T::kThreads,
                                         static_cast<size_t>(T::smem(row_bytes, g.stages)), stream, 1,
                                         "NhwcQConv: launching the streaming kernel", a, g);
}

template <class T>
void launch(const QConvNhwcArgs& a, cudaStream_t stream) {
  switch (a.C) {
    case 16: return launch_with<T, 2>(a, stream);
    case 24: return launch_with<T, 3>(a, stream);
    case 32: return launch_with<T, 4>(a, stream);
    default: return launch_with<T, 0>(a, stream);
  }
}

}  // namespace

// The wgmma tile shapes (stream_sm90a.cu, built where KILN_HAVE_SM90A): config 0 ..
// kConfigs - kSyncConfigs - 1, for C of 64 to 512 on compute capability 9.0 (runs() and run() in
// stream.cu check), and the shared memory per CTA wgmma tile shape `config` needs with C
// input channels and the shortest pipeline (199 KB for 128 x 256 tiles and C = 256).
void run_wgmma(int config, const QConvNhwcArgs& a, cudaStream_t stream);
int wgmma_shared_memory(int config, int C);

}  // namespace kiln::gpu::quant::stream
