// The epilogue of Kiln's tensor-core INT8 convolutions that stage their int32 sums in shared memory
// (quant/conv/igemm/igemm_kernel.cuh, quant/conv/halo/halo_sm90a.cu): a BM x BN tile of sums goes through shared
// memory so that each thread finishes 8 consecutive channels of several pixels, reading the
// residual and writing y in 8- or 32-byte vectors, coalesced. It works in units of y's
// quantization step (scale, bias, residual scale and clip bounds divided by y_scale once per
// channel) with one fused multiply-add per term, as cuDNN's does, rather than the CPU's exact
// sequence of float32 operations: int8 outputs may differ from the CPU's by one step at rounding
// ties.
#pragma once

#include <cstdint>

#include "runtime/cuda/quant/conv/igemm/igemm.cuh"

namespace kiln::gpu::quant::epilogue {

// Signed byte k (0..7) of 8 bytes held as an int2.
__device__ __forceinline__ int32_t byte_of(int2 v, int k) {
  return static_cast<int8_t>(static_cast<uint32_t>(k < 4 ? v.x : v.y) >> (8 * (k % 4)));
}

// int8 of v (in units of y's step): v rounded to nearest even and saturated, NaN to 0, in the low
// byte. Clamped first, v + 1.5 * 2^23 holds the rounded value in its low mantissa bits: ALU work
// where __float2int_rn takes the conversion unit, which runs at a quarter of the rate.
__device__ __forceinline__ uint32_t rounded_byte(float v) {
  const float c = v != v ? 0.0f : fminf(fmaxf(v, -128.0f), 127.0f);
  return static_cast<uint32_t>(__float_as_int(c + 12582912.0f));
}

// One thread's part of a BM x BN tile's epilogue, kThreads threads per tile.
template <int BM, int BN, int kThreads>
struct Tile {
  static constexpr int kAccStride = BN + 8;  // int32s per staged row: 64-bit stores without conflicts
  static constexpr int kStagedBytes = BM * kAccStride * 4;
  static constexpr int kVecs = BN / 8, kPasses = BM * kVecs / kThreads;
  static_assert(kThreads % kVecs == 0 && (BM * kVecs) % kThreads == 0);

  int em;  // this thread's first channel
  float out_scale, z_scale, clip_lo, clip_hi;
  float alpha[8], bias[8];

  // The channels' scale and bias for the tile whose first channel is m0, of M.
  __device__ Tile(const QConvNhwcArgs& a, int M, int m0) : em(m0 + (threadIdx.x % kVecs) * 8) {
    out_scale = a.epi.quantize ? 1.0f / a.epi.y_scale : 1.0f;
    z_scale = a.epi.z_scale * out_scale;
    clip_lo = a.epi.act_alpha * out_scale;
    clip_hi = a.epi.act_beta * out_scale;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const bool in = em + k < M;
      alpha[k] = in ? a.x_scale * __ldg(a.w_scale + (a.w_scale_per_channel ? em + k : 0)) * out_scale : 0.0f;
      bias[k] = in && a.bias ? __ldg(a.bias + em + k) * out_scale : 0.0f;
    }
  }

  // Stores a warp's MT x NT mma.sync-ordered accumulator tiles, whose first row and column in the
  // tile are row0 and col0, into `staged`.
  template <int MT, int NT>
  __device__ static void stage(int32_t* staged, const int32_t (&acc)[MT][NT][4], int row0, int col0, int lane) {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int row = row0 + i * 16 + (lane >> 2), col = col0 + j * 8 + (lane & 3) * 2;
        *reinterpret_cast<int2*>(staged + row * kAccStride + col) = make_int2(acc[i][j][0], acc[i][j][1]);
        *reinterpret_cast<int2*>(staged + (row + 8) * kAccStride + col) = make_int2(acc[i][j][2], acc[i][j][3]);
      }
  }

  // Finishes the staged rows (after a barrier): pixel_of(row) is y's pixel of the tile's row, or
  // -1 where the row is no output. kInPlace: the float values replace the row's sums in `staged`
  // (for a pooling of the tile's rows) instead of going to y.
  template <bool kInPlace = false, class PixelOf>
  __device__ void finish(const QConvNhwcArgs& a, int M, int32_t* staged, PixelOf pixel_of) const {
    if (em >= M) return;
    const int tid = threadIdx.x;
    int64_t pix[kPasses];
#pragma unroll
    for (int i = 0; i < kPasses; ++i) pix[i] = pixel_of((tid + i * kThreads) / kVecs);
    // int8 residuals of every pass first (8 bytes each), so that their loads overlap.
    int2 zq[kPasses] = {};
    if (a.z && !a.z_float) {
#pragma unroll
      for (int i = 0; i < kPasses; ++i)
        if (pix[i] >= 0)
          zq[i] = __ldg(reinterpret_cast<const int2*>(static_cast<const int8_t*>(a.z) + pix[i] * M + em));
    }
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      if (pix[i] < 0) continue;
      const int row = (tid + i * kThreads) / kVecs;
      int32_t* s = staged + row * kAccStride + (tid % kVecs) * 8;
      const int4 lo = *reinterpret_cast<const int4*>(s), hi = *reinterpret_cast<const int4*>(s + 4);
      const int32_t sums[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      const int64_t e = pix[i] * M + em;  // y's (and z's) element index of the first channel
      float zf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (a.z && a.z_float) {
        const float4* zp = reinterpret_cast<const float4*>(static_cast<const float*>(a.z) + e);
        const float4 z0 = __ldg(zp), z1 = __ldg(zp + 1);
        const float t[8] = {z0.x, z0.y, z0.z, z0.w, z1.x, z1.y, z1.z, z1.w};
#pragma unroll
        for (int k = 0; k < 8; ++k) zf[k] = t[k];
      }
      float out[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        float r = fmaf(static_cast<float>(sums[k]), alpha[k], bias[k]);
        if (a.z) r = a.z_float ? r + zf[k] * out_scale : fmaf(static_cast<float>(byte_of(zq[i], k)), z_scale, r);
        switch (a.epi.act) {
          case 1: r = fmaxf(r, 0.0f); break;
          case 2: r = fminf(fmaxf(r, clip_lo), clip_hi); break;
          case 3: r = r < 0.0f ? r * a.epi.act_alpha : r; break;
          default: break;
        }
        out[k] = r;
      }
      if constexpr (kInPlace) {
        reinterpret_cast<float4*>(s)[0] = make_float4(out[0], out[1], out[2], out[3]);
        reinterpret_cast<float4*>(s)[1] = make_float4(out[4], out[5], out[6], out[7]);
      } else if (a.epi.quantize) {
        uint32_t b[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) b[k] = rounded_byte(out[k]);
        *reinterpret_cast<uint2*>(static_cast<int8_t*>(a.y) + e) =
            make_uint2(__byte_perm(__byte_perm(b[0], b[1], 0x0040), __byte_perm(b[2], b[3], 0x0040), 0x5410),
                       __byte_perm(__byte_perm(b[4], b[5], 0x0040), __byte_perm(b[6], b[7], 0x0040), 0x5410));
      } else {
        float4* yp = reinterpret_cast<float4*>(static_cast<float*>(a.y) + e);
        yp[0] = make_float4(out[0], out[1], out[2], out[3]);
        yp[1] = make_float4(out[4], out[5], out[6], out[7]);
      }
    }
  }
};

}  // namespace kiln::gpu::quant::epilogue
