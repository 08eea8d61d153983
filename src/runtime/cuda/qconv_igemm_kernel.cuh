// Kiln's tensor-core INT8 convolution over channels-last tensors: an implicit GEMM
//   Y[p, m] = sum_k A[p, k] * B[m, k],   p = (n, oh, ow), k = (kh, kw, c)
// where A is the im2col view of x (never materialized) and B is w as it lies ([M, KH, KW, C] is
// [M, K] with K contiguous). Both operands are K-contiguous, the layout mma.m16n8k32's int8 row.col
// form takes, so ldmatrix loads the fragments from shared memory without transposes.
//
// One CTA computes a BM x BN tile of Y. The reduction runs in stages of 64 channels of one
// kernel tap (hence C % 64 == 0): cp.async brings the A rows (zero-filled outside the image) and
// the B rows of the next stages into shared memory while the warps multiply the current one
// (kStages buffers). Tiles are XOR-swizzled by 16-byte chunk so that the 8 rows one ldmatrix phase
// reads fall in distinct banks. At the end the int32 sums go through shared memory so that each
// thread finishes 8 consecutive channels of one pixel, reading the residual and writing y in 8- or
// 32-byte vectors, coalesced. The epilogue works in units of y's quantization step (scale, bias,
// residual scale and clip bounds divided by y_scale once per channel) with one fused multiply-add
// per term, as cuDNN's does, rather than the CPU's exact sequence of float32 operations (an IEEE
// division per value made it cost more than the convolution on the 56x56 layers): int8 outputs
// may differ from the CPU's by one step at rounding ties.
//
// Why not only cuDNN: its INT8 plans are about twice its FP16 ones on most of ResNet-50's layers,
// but not on the 56x56 layers with 64 channels, and its residual epilogue costs more than the
// residual's bytes; this kernel is one more candidate the builder times per layer.
//
// This header is the kernel itself (qconv_igemm.cuh says what it takes), for the files that
// instantiate its tile shapes: qconv_igemm.cu (mma.sync, as described above) and
// sm90a/qconv_igemm_wgmma.cu (wgmma), through the tile's Mma policy.
#pragma once

#include <algorithm>
#include <mutex>
#include <string>

#include "kiln/types.h"
#include "runtime/cuda/gpu_kernels.h"
#include "runtime/cuda/qconv_igemm.cuh"
#include "runtime/cuda/qconv_mma.cuh"

namespace kiln::gpu::extra::igemm {

// 32-bit copies of the geometry (fits() checked that they fit).
struct Geometry {
  int H, W, C, M, OH, OW, KW, sh, sw, ph, pw, dh, dw, c_tiles, k_tiles;
  int64_t P, K;  // output pixels, reduction length
};

namespace {

using namespace mma;  // kBK: int8 values of the reduction per stage (one tap, 64 channels)
constexpr int kStages = 4;

template <int BM_, int BN_, int WARPS_M, int WARPS_N, class Mma_ = MmaSync>
struct Tile {
  using Mma = Mma_;
  static constexpr int BM = BM_, BN = BN_;
  static constexpr int kWarpsN = WARPS_N;
  static constexpr int kThreads = WARPS_M * WARPS_N * 32;
  static constexpr int kMinBlocks = kThreads >= 256 ? 2 : 3;  // CTAs per SM the registers must allow
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;  // one warp's tile
  static constexpr int MT = WM / 16, NT = WN / 8;             // its mma tiles
  static constexpr int kARows = BM * 4 / kThreads;            // 16-byte chunks a thread loads per stage
  static constexpr int kBRows = BN * 4 / kThreads;
  static constexpr int kStageBytes = (BM + BN) * kBK;
  static constexpr int kAccStride = BN + 8;  // int32s per staged row: 64-bit stores without conflicts
  static constexpr int kPad = Mma::kAlign > 128 ? Mma::kAlign : 0;  // to align the base beyond 128 bytes
  static constexpr int kSmem = std::max(kStages * kStageBytes, BM* kAccStride * 4) + kPad;
  // Shared memory for k_tiles reduction stages: fewer pipeline buffers when there are fewer
  // stages than buffers (1x1 layers with 64 or 128 channels), so that more CTAs fit on an SM.
  static int smem(int k_tiles) {
    return std::max(std::min(kStages, k_tiles) * kStageBytes, BM * kAccStride * 4) + kPad;
  }
  static_assert(WM % 16 == 0 && WN % 16 == 0 && kARows >= 1 && kBRows >= 1);
  static_assert((BM * 4) % kThreads == 0 && (BN * 4) % kThreads == 0);
};

// Signed byte k (0..7) of 8 bytes held as an int2.
__device__ __forceinline__ int32_t byte_of(int2 v, int k) {
  return static_cast<int8_t>(static_cast<uint32_t>(k < 4 ? v.x : v.y) >> (8 * (k % 4)));
}

template <class T>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks) igemm_kernel(QConvNhwcArgs a, Geometry g) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800  // cp.async, ldmatrix and int8 mma.m16n8k32
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* const smem = smem_raw + ((0u - smem_u32(smem_raw)) & (T::Mma::kAlign - 1));
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / T::kWarpsN, warp_n = warp % T::kWarpsN;
  const int n_tiles = (g.M + T::BN - 1) / T::BN;
  const int64_t p0 = static_cast<int64_t>(blockIdx.x / n_tiles) * T::BM;
  const int m0 = static_cast<int>(blockIdx.x % n_tiles) * T::BN;
  const int chunk = tid & 3;  // the same 16-byte chunk of every row this thread loads

  // The A rows (output pixels) this thread loads: image offset and the window's corner.
  int64_t a_img[T::kARows];
  int a_ih[T::kARows], a_iw[T::kARows];
  bool a_ok[T::kARows];
#pragma unroll
  for (int i = 0; i < T::kARows; ++i) {
    const int64_t p = p0 + ((tid + i * T::kThreads) >> 2);
    a_ok[i] = p < g.P;
    const int64_t pp = a_ok[i] ? p : 0;
    const int64_t n = pp / (static_cast<int64_t>(g.OH) * g.OW);
    const int r = static_cast<int>(pp - n * g.OH * g.OW), oh = r / g.OW, ow = r % g.OW;
    a_img[i] = n * g.H * g.W * g.C;
    a_ih[i] = oh * g.sh - g.ph;
    a_iw[i] = ow * g.sw - g.pw;
  }
  const int8_t* b_row[T::kBRows];
  bool b_ok[T::kBRows];
#pragma unroll
  for (int i = 0; i < T::kBRows; ++i) {
    const int m = m0 + ((tid + i * T::kThreads) >> 2);
    b_ok[i] = m < g.M;
    b_row[i] = a.w + (b_ok[i] ? m : 0) * g.K + chunk * 16;
  }

  auto load_stage = [&](int stage, int kt) {
    const uint32_t base = smem_u32(smem) + stage * T::kStageBytes;
    const int tap = kt / g.c_tiles, c0 = (kt - tap * g.c_tiles) * kBK;
    const int kh = tap / g.KW, kw = tap - kh * g.KW;
#pragma unroll
    for (int i = 0; i < T::kARows; ++i) {
      const int row = (tid + i * T::kThreads) >> 2;
      const int ih = a_ih[i] + kh * g.dh, iw = a_iw[i] + kw * g.dw;
      const bool ok = a_ok[i] && ih >= 0 && ih < g.H && iw >= 0 && iw < g.W;
      const int8_t* src = ok ? a.x + a_img[i] + (static_cast<int64_t>(ih) * g.W + iw) * g.C + c0 + chunk * 16 : a.x;
      cp_async16(base + swizzled(row, chunk), src, ok);
    }
#pragma unroll
    for (int i = 0; i < T::kBRows; ++i) {
      const int row = (tid + i * T::kThreads) >> 2;
      cp_async16(base + T::BM * kBK + swizzled(row, chunk), b_ok[i] ? b_row[i] + static_cast<int64_t>(kt) * kBK : a.w,
                 b_ok[i]);
    }
  };

  int32_t acc[T::MT][T::NT][4];
#pragma unroll
  for (int i = 0; i < T::MT; ++i)
#pragma unroll
    for (int j = 0; j < T::NT; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[i][j][k] = 0;

  // Stages loaded ahead: with stages' multiplies still in flight after their iteration (wgmma), the
  // buffer refilled at iteration kt is the one stage kt - 1 - kInFlight read, which every warp has
  // finished (it waited for it before the barrier).
  constexpr int kAhead = kStages - 1 - T::Mma::kInFlight;
#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    if (s < g.k_tiles) load_stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < g.k_tiles; ++kt) {
    cp_async_wait<kAhead - 1>();
    T::Mma::operands_landed();
    __syncthreads();  // stage kt has landed, and every warp is done with the stage refilled next
    const int next = kt + kAhead;
    if (next < g.k_tiles) load_stage(next % kStages, next);
    cp_async_commit();
    const uint32_t a_tile = smem_u32(smem) + (kt % kStages) * T::kStageBytes, b_tile = a_tile + T::BM * kBK;
    T::Mma::begin(acc);
#pragma unroll
    for (int ks = 0; ks < 2; ++ks)  // two k32 steps per stage
      T::Mma::template step<T>(acc, a_tile, b_tile, warp_m, warp_n, ks, lane, kt == 0 && ks == 0);
    T::Mma::end(acc);
    T::Mma::template wait<T::Mma::kInFlight>(acc);
  }
  T::Mma::template wait<0>(acc);
  cp_async_wait<0>();
  __syncthreads();  // the pipeline's buffers become the staging tile

  // The epilogue's channels: each thread finishes the same 8 channels of several pixels; their
  // scale and bias are read now, while the sums go through shared memory.
  constexpr int kVecs = T::BN / 8, kPasses = T::BM * kVecs / T::kThreads;
  static_assert(T::kThreads % kVecs == 0 && (T::BM * kVecs) % T::kThreads == 0);
  const int em = m0 + (tid % kVecs) * 8;
  // In units of y's quantization step for an int8 y: one fused multiply-add per value, as cuDNN does.
  const bool quantize = a.epi.quantize;
  const float out_scale = quantize ? 1.0f / a.epi.y_scale : 1.0f, z_scale = a.epi.z_scale * out_scale;
  const float clip_lo = a.epi.act_alpha * out_scale, clip_hi = a.epi.act_beta * out_scale;
  float alpha[8], bias[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const bool in = em + k < g.M;
    alpha[k] = in ? a.x_scale * __ldg(a.w_scale + (a.w_scale_per_channel ? em + k : 0)) * out_scale : 0.0f;
    bias[k] = in && a.bias ? __ldg(a.bias + em + k) * out_scale : 0.0f;
  }

  int32_t* staged = reinterpret_cast<int32_t*>(smem);
#pragma unroll
  for (int i = 0; i < T::MT; ++i)
#pragma unroll
    for (int j = 0; j < T::NT; ++j) {
      const int row = warp_m * T::WM + i * 16 + (lane >> 2), col = warp_n * T::WN + j * 8 + (lane & 3) * 2;
      *reinterpret_cast<int2*>(staged + row * T::kAccStride + col) = make_int2(acc[i][j][0], acc[i][j][1]);
      *reinterpret_cast<int2*>(staged + (row + 8) * T::kAccStride + col) = make_int2(acc[i][j][2], acc[i][j][3]);
    }
  __syncthreads();

  if (em >= g.M) return;
  // int8 residuals of every pass first (8 bytes each), so that their loads overlap.
  int2 zq[kPasses] = {};
  if (a.z && !a.z_float) {
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int64_t p = p0 + (tid + i * T::kThreads) / kVecs;
      zq[i] = p < g.P ? __ldg(reinterpret_cast<const int2*>(static_cast<const int8_t*>(a.z) + p * g.M + em))
                      : make_int2(0, 0);
    }
  }
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    const int row = (tid + i * T::kThreads) / kVecs;
    const int64_t p = p0 + row;
    if (p >= g.P) break;
    const int32_t* s = staged + row * T::kAccStride + (tid % kVecs) * 8;
    const int4 lo = *reinterpret_cast<const int4*>(s), hi = *reinterpret_cast<const int4*>(s + 4);
    const int32_t sums[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    const int64_t e = p * g.M + em;  // y's (and z's) element index of the first channel
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
    if (quantize) {
      uint32_t q[2] = {0, 0};
#pragma unroll
      for (int k = 0; k < 8; ++k)
        q[k / 4] |= (static_cast<uint32_t>(min(max(__float2int_rn(out[k]), -128), 127)) & 0xffu) << (8 * (k % 4));
      *reinterpret_cast<uint2*>(static_cast<int8_t*>(a.y) + e) = make_uint2(q[0], q[1]);
    } else {
      float4* yp = reinterpret_cast<float4*>(static_cast<float*>(a.y) + e);
      yp[0] = make_float4(out[0], out[1], out[2], out[3]);
      yp[1] = make_float4(out[4], out[5], out[6], out[7]);
    }
  }
#endif
}

template <class T>
void launch(const QConvNhwcArgs& a, const Geometry& g, cudaStream_t stream) {
  const int64_t blocks = (g.P + T::BM - 1) / T::BM * ((g.M + T::BN - 1) / T::BN);
  if (blocks >= int64_t{1} << 31)
    throw Error("NhwcQConv: the convolution has too many output pixels for the tensor-core kernel");
  // Above 48 KiB of shared memory a kernel must ask for it, once per device (before any capture:
  // the builder and the engine's first run launch it uncaptured); after that a launch costs one
  // atomic load here, no lock.
  static std::once_flag asked[kMaxDevices];
  int device = 0;
  check_cuda(cudaGetDevice(&device), "NhwcQConv");
  auto ask = [] {
    check_cuda(cudaFuncSetAttribute(igemm_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmem),
               "NhwcQConv: asking for the tensor-core kernel's shared memory");
  };
  if (device < kMaxDevices)
    std::call_once(asked[device], ask);
  else
    ask();
  igemm_kernel<T><<<static_cast<unsigned>(blocks), T::kThreads, T::smem(g.k_tiles), stream>>>(a, g);
  check_launch("NhwcQConv");
}

}  // namespace

// The wgmma tile shapes (sm90a/qconv_igemm_wgmma.cu, built where KILN_HAVE_SM90A): config 0 ..
// kConfigs - kSyncConfigs - 1, on compute capability 9.0 (configs() and run() in qconv_igemm.cu
// check).
void run_wgmma(int config, const QConvNhwcArgs& a, const Geometry& g, cudaStream_t stream);

}  // namespace kiln::gpu::extra::igemm
