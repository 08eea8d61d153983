// Attention on the GPU (core/attention.h), with the CPU kernel's semantics
// (runtime/cpu/gemm/attention.cpp): one pass over the keys with an online softmax, so the scores
// never reach memory. A block takes kRows query rows of one (batch, head); its 4 warps share tiles of
// 32 keys and values staged in shared memory (as the compute type, rows padded by one element so
// that a lane per key reads without bank conflicts). A warp keeps its rows' outputs in registers:
// lane l owns elements l, l + 32, ... of a row, so head sizes up to 32 * kMaxChunks. Scores, softmax
// and sums in float (double for float64). Portable: any sm_70 or later.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/attention.h"
#include "runtime/cuda/dependent_launch.cuh"
#include "runtime/cuda/elementwise/elementwise_internal.cuh"
#include "runtime/cuda/mma.cuh"
#include "runtime/cuda/nn_internal.cuh"

namespace kiln::gpu::nn {

void attention_gpu(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                   GpuEnv& env);
std::vector<int32_t> attention_tactics(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                                       std::span<const TensorView> out, GpuEnv& env);
size_t attention_workspace(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                           std::span<const TensorView> out, GpuEnv& env);

namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 4;
constexpr int kRows = kWarps * kRowsPerWarp;  // query rows per block
constexpr int kKeys = 32;                     // keys per tile
constexpr int kMaxChunks = 8;                 // head sizes up to 256

struct AttnArgs {
  const void *q, *k, *v, *mask;
  void* y;
  int64_t q_heads, q_len, kv_len, group;
  int head_size, v_head_size;
  float scale, softcap;
  bool causal, has_mask, mask_bool;
  int64_t qs[4], ks[4], vs[4], ys[4], ms[4];
  int64_t mask_period;  // > 0: batch entry b reads the mask's entry b % mask_period
  __device__ int64_t mask_batch(int64_t b) const { return mask_period > 0 ? b % mask_period : b; }
};

// exp and tanh in F's precision (expf, tanhf for float).
template <class F>
__device__ __forceinline__ F exp_of(F x) {
  return std::is_same_v<F, double> ? exp(x) : expf(x);
}
template <class F>
__device__ __forceinline__ F tanh_of(F x) {
  return std::is_same_v<F, double> ? tanh(x) : tanhf(x);
}

template <class T>
__global__ void __launch_bounds__(kWarps * 32) attention_kernel(AttnArgs a) {
  using F = ew::FloatAcc<T>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  F* ktile = reinterpret_cast<F*>(smem_raw);       // [kKeys][head_size + 1]
  F* vtile = ktile + kKeys * (a.head_size + 1);    // [kKeys][v_head_size + 1]
  F* qrows = vtile + kKeys * (a.v_head_size + 1);  // [kRows][head_size]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t h = blockIdx.y, b = blockIdx.z, kh = h / a.group;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const T* q = static_cast<const T*>(a.q) + b * a.qs[0] + h * a.qs[1];
  const T* k = static_cast<const T*>(a.k) + b * a.ks[0] + kh * a.ks[1];
  const T* v = static_cast<const T*>(a.v) + b * a.vs[0] + kh * a.vs[1];
  const int D = a.head_size, DV = a.v_head_size;
  const int64_t rows_here = min(static_cast<int64_t>(kRows), a.q_len - row0);
  for (int t = threadIdx.x; t < kRows * D; t += blockDim.x) {
    const int r = t / D, d = t % D;
    qrows[t] = r < rows_here ? static_cast<F>(ew::load(q[(row0 + r) * a.qs[2] + d])) : F(0);
  }
  const F neg_inf = -std::numeric_limits<F>::infinity();
  F m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kMaxChunks];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = neg_inf;
    l[r] = 0;
#pragma unroll
    for (int c = 0; c < kMaxChunks; ++c) acc[r][c] = 0;
  }
  // Causal: no row of this block attends keys past its last row.
  const int64_t kv_end = a.causal ? min(a.kv_len, row0 + rows_here) : a.kv_len;
  for (int64_t j0 = 0; j0 < kv_end; j0 += kKeys) {
    const int keys = static_cast<int>(min(static_cast<int64_t>(kKeys), kv_end - j0));
    __syncthreads();  // the previous tile is consumed (and, first time, qrows is written)
    for (int t = threadIdx.x; t < kKeys * D; t += blockDim.x) {
      const int j = t / D, d = t % D;
      ktile[j * (D + 1) + d] = j < keys ? static_cast<F>(ew::load(k[(j0 + j) * a.ks[2] + d])) : F(0);
    }
    for (int t = threadIdx.x; t < kKeys * DV; t += blockDim.x) {
      const int j = t / DV, d = t % DV;
      vtile[j * (DV + 1) + d] = j < keys ? static_cast<F>(ew::load(v[(j0 + j) * a.vs[2] + d])) : F(0);
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int rr = warp * kRowsPerWarp + r;
      const int64_t i = row0 + rr;
      if (rr >= rows_here) continue;  // uniform across the warp
      // Lane `lane` scores key j0 + lane.
      F s = neg_inf;
      if (lane < keys) {
        const F* kr = ktile + lane * (D + 1);
        const F* qr = qrows + rr * D;
        F dot = 0;
        for (int d = 0; d < D; ++d) dot += qr[d] * kr[d];
        s = dot * static_cast<F>(a.scale);
        if (a.softcap > 0) s = static_cast<F>(a.softcap) * tanh_of(s / static_cast<F>(a.softcap));
        const int64_t j = j0 + lane;
        if (a.has_mask) {
          const int64_t at = a.mask_batch(b) * a.ms[0] + h * a.ms[1] + i * a.ms[2] + j * a.ms[3];
          if (a.mask_bool)
            s = static_cast<const uint8_t*>(a.mask)[at] ? s : neg_inf;
          else
            s += static_cast<F>(ew::load(static_cast<const T*>(a.mask)[at]));
        }
        if (a.causal && j > i) s = neg_inf;
      }
      F tile_max = s;
      for (int o = 16; o > 0; o >>= 1) tile_max = max(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, o));
      const F m_new = max(m[r], tile_max);
      if (m_new == neg_inf) continue;  // every key so far masked out
      const F p = s == neg_inf ? F(0) : exp_of(s - m_new);
      const F rescale = m[r] == neg_inf ? F(0) : exp_of(m[r] - m_new);
      F psum = p;
      for (int o = 16; o > 0; o >>= 1) psum += __shfl_xor_sync(0xffffffffu, psum, o);
      l[r] = l[r] * rescale + psum;
      m[r] = m_new;
#pragma unroll
      for (int c = 0; c < kMaxChunks; ++c) acc[r][c] *= rescale;
      for (int j = 0; j < keys; ++j) {
        const F pj = __shfl_sync(0xffffffffu, p, j);
        const F* vr = vtile + j * (DV + 1);
#pragma unroll
        for (int c = 0; c < kMaxChunks; ++c) {
          const int d = lane + 32 * c;
          if (d < DV) acc[r][c] += pj * vr[d];
        }
      }
    }
  }
  T* y = static_cast<T*>(a.y) + b * a.ys[0] + h * a.ys[1];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int rr = warp * kRowsPerWarp + r;
    if (rr >= rows_here) continue;
    const F inv = l[r] > 0 ? F(1) / l[r] : F(0);
#pragma unroll
    for (int c = 0; c < kMaxChunks; ++c) {
      const int d = lane + 32 * c;
      if (d < DV) y[(row0 + rr) * a.ys[2] + d] = ew::store<T>(acc[r][c] * inv);
    }
  }
}

// ---- float16 and bfloat16 on tensor cores (sm_80+: mma.m16n8k16) ------------------------------
// Flash-attention style. A warp takes 16 query rows of one (batch, head); a block of W warps shares
// tiles of 64 keys and values, which cp.async brings into shared memory one tile ahead of the one
// being used (double buffering). Per tile: S = Q Kt for the warp's 16 x 64 scores in mma
// accumulators (Q's fragments read from global memory once, K's by ldmatrix), the scale, softcap,
// mask and causal limit applied there, the online softmax per row (each row's 64 scores spread over
// the 4 lanes of a quad), P rounded to T and reused as the A fragments of O += P V (V's fragments by
// ldmatrix.trans from its row-major tile). Tiles are [64][D + 8]: 16-byte rows whose 8-row
// ldmatrix phases fall in distinct banks. W is 4, 2 or 1, a tactic: fewer warps a block give more
// blocks where the grid is small (BERT-base at batch 1: 24 blocks of four warps, 96 of one), more
// share each tile's loads. Rows of Q, K, V and Y must be 16-byte aligned (the host checks; else the
// portable kernel runs).
constexpr int kMmaKeys = 64;

template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}
template <class T>
__device__ __forceinline__ void mma_t(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>)
    mma::mma_f16(d, a, b0, b1);
  else
    mma::mma_bf16(d, a, b0, b1);
}

// One warp's 16 query rows (gid and gid + 8 of each thread's quad) as it walks tiles of keys: Q's
// fragments, the running maxima (in log2 units: scores times log2(e)) and sums of the online
// softmax, and O in mma accumulators. kMask: the op has a mask (without one, no registers hold
// its values).
template <class T, int D, bool kMask>
struct WarpRows {
  static constexpr int S = D + 8, kTile = kMmaKeys * S;  // row stride (halves), elements per tile
  int64_t b, h;
  int row[2], gid, tig;
  const unsigned char* mrow[2];  // the mask's row for each of the thread's rows (clamped into it)
  int mstep;                     // bytes from one key's mask value to the next (0: broadcast)
  uint32_t qf[D / 16][4];
  float o[D / 8][4];
  float m[2], l[2];

  // Rows row0 .. row0 + 15 of head h of batch b; Q's fragments from global memory.
  __device__ void start(const AttnArgs& a, int64_t b_, int64_t h_, int64_t row0, int lane) {
    b = b_;
    h = h_;
    gid = lane >> 2;
    tig = lane & 3;
    row[0] = static_cast<int>(row0) + gid;
    row[1] = static_cast<int>(row0) + gid + 8;
    const T* q = static_cast<const T*>(a.q) + b * a.qs[0] + h * a.qs[1];
    const int esize = a.mask_bool ? 1 : static_cast<int>(sizeof(T));
    mstep = static_cast<int>(a.ms[3]) * esize;
    for (int ri = 0; ri < 2; ++ri)
      mrow[ri] = a.has_mask ? static_cast<const unsigned char*>(a.mask) +
                                  (a.mask_batch(b) * a.ms[0] + h * a.ms[1] +
                                   min(static_cast<int64_t>(row[ri]), a.q_len - 1) * a.ms[2]) *
                                      esize
                            : nullptr;
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t r = row[e & 1];
        qf[kc][e] = r < a.q_len ? *reinterpret_cast<const uint32_t*>(q + r * a.qs[2] + kc * 16 + (e >> 1) * 8 + tig * 2)
                                : 0u;  // 64-bit offsets: Q may span more than 2^31 elements
      }
#pragma unroll
    for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.f;
  }

  // The mask's values for this thread's scores of keys j0 .. j0 + 63 (indices clamped into the
  // tensor; the out-of-range ones are not used). Loaded before the tile's wait, so that their
  // latency overlaps the tile's. Indices within a head are 32-bit (the host checks they fit).
  __device__ void load_mask(const AttnArgs& a, int j0, float (&mv)[kMmaKeys / 8][4]) const {
    if constexpr (!kMask) return;
    const int kv_len = static_cast<int>(a.kv_len);
#pragma unroll
    for (int nt = 0; nt < kMmaKeys / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = min(j0 + nt * 8 + tig * 2 + (e & 1), kv_len - 1);
        const unsigned char* at = mrow[e >> 1] + j * mstep;
        if (a.mask_bool) {
          mv[nt][e] = *at ? 0.f : -INFINITY;
        } else {
          // A finite mask value stays finite in log2 units (fmaf(v, log2 e, x) overflows to -inf
          // below -2.36e38: bfloat16's lowest, Hugging Face's mask value), so that a row whose
          // every key has it averages V as the CPU does instead of giving zeros; -inf stays -inf
          // and NaN NaN.
          const float v = static_cast<float>(*reinterpret_cast<const T*>(at));
          mv[nt][e] = v < -2.0e38f && v != -INFINITY ? -2.0e38f : v;
        }
      }
  }

  // The keys j0 .. j0 + 63 from the [kMmaKeys][S] tiles kt and vt in shared memory, with their
  // mask values mv (load_mask).
  __device__ void attend(const AttnArgs& a, const T* kt, const T* vt, int j0, const float (&mv)[kMmaKeys / 8][4],
                         int lane) {
    const float neg_inf = -INFINITY;
    constexpr float kLog2e = 1.4426950408889634f;
    const int kv_len = static_cast<int>(a.kv_len);
    // ldmatrix: lane l gives the address of row l % 8 of matrix l / 8.
    const int lm = lane >> 3, lr = lane & 7;
    // S = Q Kt: 8 tiles of 8 keys; one ldmatrix_x4 gives two key tiles' fragments for 16 of D.
    float s[kMmaKeys / 8][4];
#pragma unroll
    for (int nt = 0; nt < kMmaKeys / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc)
#pragma unroll
      for (int np = 0; np < kMmaKeys / 16; ++np) {
        uint32_t f[4];
        mma::ldmatrix_x4(mma::smem_u32(kt + (np * 16 + (lm >> 1) * 8 + lr) * S + kc * 16 + (lm & 1) * 8), f);
        mma_t<T>(s[2 * np], qf[kc], f[0], f[1]);
        mma_t<T>(s[2 * np + 1], qf[kc], f[2], f[3]);
      }
    // Scale, softcap, mask, in log2 units (exp2 of the differences is the softmax's exp); keys past
    // the end or after the row (causal) only in the tiles that have them (warp-uniform). Rows past
    // q_len (Q's zeros) are computed and never stored.
    const bool edge = j0 + kMmaKeys > kv_len || (a.causal && j0 + kMmaKeys - 1 > row[0] - gid);
    const float scale_log2 = a.scale * kLog2e;
    float tmax[2] = {neg_inf, neg_inf};
#pragma unroll
    for (int nt = 0; nt < kMmaKeys / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int ri = e >> 1;
        float x = a.softcap > 0 ? a.softcap * tanhf(s[nt][e] * a.scale / a.softcap) * kLog2e : s[nt][e] * scale_log2;
        if constexpr (kMask) x = fmaf(mv[nt][e], kLog2e, x);
        if (edge) {
          const int j = j0 + nt * 8 + tig * 2 + (e & 1);
          if (j >= kv_len || (a.causal && j > row[ri])) x = neg_inf;
        }
        s[nt][e] = x;
        tmax[ri] = fmaxf(tmax[ri], x);
      }
    float mu[2];
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
      tmax[ri] = fmaxf(tmax[ri], __shfl_xor_sync(0xffffffffu, tmax[ri], 1));
      tmax[ri] = fmaxf(tmax[ri], __shfl_xor_sync(0xffffffffu, tmax[ri], 2));
      const float m_new = fmaxf(m[ri], tmax[ri]);
      mu[ri] = m_new == neg_inf ? 0.f : m_new;  // every score so far masked: p = 0, nothing to rescale
      const float alpha = exp2f(m[ri] - mu[ri]);
      m[ri] = m_new;
      l[ri] *= alpha;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[n][2 * ri] *= alpha;
        o[n][2 * ri + 1] *= alpha;
      }
    }
    // P, its row sums, and O += P V: 16 keys per mma; one ldmatrix_x4_trans gives two 8-column
    // tiles' fragments of V.
#pragma unroll
    for (int kc = 0; kc < kMmaKeys / 16; ++kc) {
      float p[2][4];
#pragma unroll
      for (int half_tile = 0; half_tile < 2; ++half_tile)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float x = exp2f(s[2 * kc + half_tile][e] - mu[e >> 1]);
          p[half_tile][e] = x;
          l[e >> 1] += x;
        }
      const uint32_t pa[4] = {pack2<T>(p[0][0], p[0][1]), pack2<T>(p[0][2], p[0][3]), pack2<T>(p[1][0], p[1][1]),
                              pack2<T>(p[1][2], p[1][3])};
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        uint32_t f[4];
        mma::ldmatrix_x4_trans(mma::smem_u32(vt + (kc * 16 + (lm & 1) * 8 + lr) * S + np * 16 + (lm >> 1) * 8), f);
        mma_t<T>(o[2 * np], pa, f[0], f[1]);
        mma_t<T>(o[2 * np + 1], pa, f[2], f[3]);
      }
    }
  }

  // Each row's sum over its quad (the threads held parts of it).
  __device__ void sum_rows() {
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
      l[ri] += __shfl_xor_sync(0xffffffffu, l[ri], 1);
      l[ri] += __shfl_xor_sync(0xffffffffu, l[ri], 2);
    }
  }

  // Y = O / l (after sum_rows).
  __device__ void store(const AttnArgs& a) const {
    T* y = static_cast<T*>(a.y) + b * a.ys[0] + h * a.ys[1];
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
      if (row[ri] >= a.q_len) continue;
      const float inv = l[ri] > 0 ? 1.f / l[ri] : 0.f;
      T* yr = y + row[ri] * a.ys[2];
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<uint32_t*>(yr + n * 8 + tig * 2) = pack2<T>(o[n][2 * ri] * inv, o[n][2 * ri + 1] * inv);
    }
  }
};

// Keys j0 .. j0 + 63 of K and V into the [kMmaKeys][D + 8] tiles kt and vt by cp.async, the
// threads tid, tid + threads, ... each taking 16-byte chunks; keys past kv_len zero-filled (their
// scores are masked to -inf). Commits one group.
template <class T, int D>
__device__ void load_tile(const AttnArgs& a, const T* k, const T* v, T* kt, T* vt, int64_t j0, int tid, int threads) {
  constexpr int S = D + 8, kChunks = D / 8;
  for (int i = tid; i < kMmaKeys * kChunks; i += threads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool ok = j0 + r < a.kv_len;
    mma::cp_async16(mma::smem_u32(kt + r * S + c * 8), ok ? k + (j0 + r) * a.ks[2] + c * 8 : k, ok);
    mma::cp_async16(mma::smem_u32(vt + r * S + c * 8), ok ? v + (j0 + r) * a.vs[2] + c * 8 : v, ok);
  }
  mma::cp_async_commit();
}

// W warps of 16 rows each share every tile: tile t + 1 loads while tile t is used.
template <class T, int D, int W, bool kMask>
__global__ void __launch_bounds__(W * 32) attention_mma_kernel(AttnArgs a) {
  using Rows = WarpRows<T, D, kMask>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* kbuf = reinterpret_cast<T*>(smem_raw);  // [2][kMmaKeys][S]
  T* vbuf = kbuf + 2 * Rows::kTile;          // [2][kMmaKeys][S]
  wait_for_inputs();  // a programmatic dependent launch (launch_mma)
  start_next_kernel();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t h = blockIdx.y, b = blockIdx.z, kh = h / a.group;
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * (16 * W);
  const T* k = static_cast<const T*>(a.k) + b * a.ks[0] + kh * a.ks[1];
  const T* v = static_cast<const T*>(a.v) + b * a.vs[0] + kh * a.vs[1];
  const int64_t kv_end = a.causal ? min(a.kv_len, q0 + 16 * W) : a.kv_len;
  const int tiles = static_cast<int>((kv_end + kMmaKeys - 1) / kMmaKeys);
  if (tiles > 0) load_tile<T, D>(a, k, v, kbuf, vbuf, 0, tid, W * 32);
  Rows w;
  w.start(a, b, h, q0 + warp * 16, lane);
  for (int t = 0; t < tiles; ++t) {
    float mv[kMmaKeys / 8][4];
    w.load_mask(a, t * kMmaKeys, mv);
    if (t + 1 < tiles) {
      load_tile<T, D>(a, k, v, kbuf + ((t + 1) & 1) * Rows::kTile, vbuf + ((t + 1) & 1) * Rows::kTile,
                      static_cast<int64_t>(t + 1) * kMmaKeys, tid, W * 32);
      mma::cp_async_wait<1>();
    } else {
      mma::cp_async_wait<0>();
    }
    __syncthreads();  // tile t is in shared memory for every warp
    w.attend(a, kbuf + (t & 1) * Rows::kTile, vbuf + (t & 1) * Rows::kTile, t * kMmaKeys, mv, lane);
    __syncthreads();  // every warp is done with tile t before tile t + 2 is loaded into its buffer
  }
  w.sum_rows();
  w.store(a);
}

// The keys split over W warps for one block's 16 rows (small grids: BERT-base at batch 1 has 96
// such row groups for 132 SMs, and a warp's two tiles of keys are its critical path): warp w takes
// tiles w, w + W, ..., each into its own buffers, then the warps' partial softmaxes combine
// through shared memory (max, rescaled sums and outputs).
template <class T, int D, int W, bool kMask>
__global__ void __launch_bounds__(W * 32) attention_split_kernel(AttnArgs a) {
  using Rows = WarpRows<T, D, kMask>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  wait_for_inputs();  // a programmatic dependent launch (launch_split)
  start_next_kernel();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  T* kt = reinterpret_cast<T*>(smem_raw) + warp * 2 * Rows::kTile;  // this warp's [kMmaKeys][S] K and V
  T* vt = kt + Rows::kTile;
  const int64_t h = blockIdx.y, b = blockIdx.z, kh = h / a.group;
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * 16;
  const T* k = static_cast<const T*>(a.k) + b * a.ks[0] + kh * a.ks[1];
  const T* v = static_cast<const T*>(a.v) + b * a.vs[0] + kh * a.vs[1];
  const int64_t kv_end = a.causal ? min(a.kv_len, q0 + 16) : a.kv_len;
  const int tiles = static_cast<int>((kv_end + kMmaKeys - 1) / kMmaKeys);
  Rows w;
  w.start(a, b, h, q0, lane);
  for (int t = warp; t < tiles; t += W) {
    load_tile<T, D>(a, k, v, kt, vt, static_cast<int64_t>(t) * kMmaKeys, lane, 32);
    float mv[kMmaKeys / 8][4];
    w.load_mask(a, t * kMmaKeys, mv);
    mma::cp_async_wait<0>();
    __syncwarp();
    w.attend(a, kt, vt, t * kMmaKeys, mv, lane);
    __syncwarp();  // the tile is used up before the next load overwrites it
  }
  w.sum_rows();
  // Partial results into shared memory (over the tiles, which every warp is done with).
  __syncthreads();
  float* part_o = reinterpret_cast<float*>(smem_raw);  // [W][16][D]
  float* part_m = part_o + W * 16 * D;                 // [W][16]
  float* part_l = part_m + W * 16;                     // [W][16]
#pragma unroll
  for (int ri = 0; ri < 2; ++ri) {
    const int r = w.gid + 8 * ri;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      part_o[(warp * 16 + r) * D + n * 8 + w.tig * 2] = w.o[n][2 * ri];
      part_o[(warp * 16 + r) * D + n * 8 + w.tig * 2 + 1] = w.o[n][2 * ri + 1];
    }
    if (w.tig == 0) {
      part_m[warp * 16 + r] = w.m[ri];
      part_l[warp * 16 + r] = w.l[ri];
    }
  }
  __syncthreads();
  T* y = static_cast<T*>(a.y) + b * a.ys[0] + h * a.ys[1];
  for (int i = tid; i < 16 * D; i += W * 32) {
    const int r = i / D, c = i % D;
    if (q0 + r >= a.q_len) continue;
    float mx = -INFINITY;
#pragma unroll
    for (int u = 0; u < W; ++u) mx = fmaxf(mx, part_m[u * 16 + r]);
    float sum = 0.f, acc = 0.f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int u = 0; u < W; ++u) {
        // A warp whose keys were all masked has m = -inf: weight 0.
        const float f = exp2f(part_m[u * 16 + r] - mx);  // log2 units
        sum += part_l[u * 16 + r] * f;
        acc += part_o[(u * 16 + r) * D + c] * f;
      }
    }
    y[(q0 + r) * a.ys[2] + c] = static_cast<T>(sum > 0 ? acc / sum : 0.f);
  }
}

// The tensor-core kernel takes float16 or bfloat16 with head sizes 32, 64 or 128 (both Q/K and V),
// rows of Q, K, V and Y 16-byte aligned, on sm_80 and later.
bool mma_path(const AttentionShape& g, const AttnArgs& a, DataType t) {
  if ((t != DataType::kFloat16 && t != DataType::kBFloat16) || g.head_size != g.v_head_size ||
      (g.head_size != 32 && g.head_size != 64 && g.head_size != 128) || !mma::device_supported())
    return false;
  auto aligned = [](const void* p, int64_t stride) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0 && (stride * 2) % 16 == 0;
  };
  return aligned(a.q, g.q_stride[2]) && aligned(a.k, g.k_stride[2]) && aligned(a.v, g.v_stride[2]) &&
         aligned(a.y, g.y_stride[2]) && g.q_stride[3] == 1;
}

// Launches kWithMask or kWithout (the kernel without the mask's loads) on grid, with smem bytes of
// dynamic shared memory.
template <auto kWithMask, auto kWithout>
void launch_attention(const AttnArgs& a, dim3 grid, int threads, size_t smem, cudaStream_t stream) {
  if (smem > 48 * 1024 && cudaFuncSetAttribute(a.has_mask ? kWithMask : kWithout,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(smem)) != cudaSuccess)
    throw Error("Attention on the GPU: " + std::to_string(smem) + " bytes of shared memory are not available");
  if (a.has_mask)
    launch_dependent<kWithMask>(grid, threads, smem, stream, 1, "Attention", a);
  else
    launch_dependent<kWithout>(grid, threads, smem, stream, 1, "Attention", a);
}

// Shared memory of attention_split_kernel<T, D, W>: per warp a K and a V tile, reused for the
// partial results.
template <class T, int D, int W>
void launch_split(const AttentionShape& g, const AttnArgs& a, cudaStream_t stream) {
  constexpr size_t tiles = sizeof(T) * W * 2 * kMmaKeys * (D + 8), parts = sizeof(float) * W * 16 * (D + 2);
  constexpr size_t smem = tiles > parts ? tiles : parts;
  const dim3 grid(static_cast<unsigned>((g.q_len + 15) / 16), static_cast<unsigned>(g.q_heads),
                  static_cast<unsigned>(g.batch));
  launch_attention<attention_split_kernel<T, D, W, true>, attention_split_kernel<T, D, W, false>>(a, grid, W * 32, smem,
                                                                                               stream);
}

template <class T, int D, int W>
void launch_mma(const AttentionShape& g, const AttnArgs& a, cudaStream_t stream) {
  constexpr size_t smem = sizeof(T) * 4 * kMmaKeys * (D + 8);
  const dim3 grid(static_cast<unsigned>((g.q_len + 16 * W - 1) / (16 * W)), static_cast<unsigned>(g.q_heads),
                  static_cast<unsigned>(g.batch));
  launch_attention<attention_mma_kernel<T, D, W, true>, attention_mma_kernel<T, D, W, false>>(a, grid, W * 32, smem,
                                                                                           stream);
}


// Tactics: the tensor-core kernel with blocks of 4, 2 or 1 warps, with the keys split over 2 or 4
// warps, the portable kernel; -1
// (no timing): the tensor-core kernel where it applies, 4 warps a block where that still gives every
// SM a block.
enum AttentionTactic : int32_t { kMma4 = 0, kMma1 = 1, kPortable = 2, kMma2 = 3, kSplit2 = 4, kSplit4 = 5 };

AttentionShape checked_shape(const Attrs& attrs, std::span<const TensorView> in) {
  const AttentionShape g = attention_shape(std::get<AttentionAttrs>(attrs), in);
  if (g.head_size > 32 * kMaxChunks || g.v_head_size > 32 * kMaxChunks)
    throw Error("Attention on the GPU takes head sizes up to " + std::to_string(32 * kMaxChunks) + ", got " +
                std::to_string(g.head_size) + " and " + std::to_string(g.v_head_size));
  if (g.batch > 65535 || g.q_heads > 65535) throw Error("Attention on the GPU: more than 65535 batches or heads");
  if (g.q_len >= (int64_t{1} << 30) || g.kv_len >= (int64_t{1} << 30))
    throw Error("Attention on the GPU: sequences of 2^30 or more positions");
  return g;
}

AttnArgs args_of(const AttentionShape& g, std::span<const TensorView> in, const TensorView& y) {
  const size_t esize = dtype_size(in[0].dtype);
  auto at = [&](size_t i, int64_t offset) -> const void* {
    return in[i].data ? static_cast<const unsigned char*>(in[i].data) + offset * static_cast<int64_t>(esize) : nullptr;
  };
  AttnArgs a{};
  a.q = at(0, g.q_offset);
  a.k = at(g.k_input(), g.k_offset);
  a.v = at(g.v_input(), g.v_offset);
  a.mask = g.has_mask ? in[3].data : nullptr;
  a.y = y.data;
  a.q_heads = g.q_heads;
  a.q_len = g.q_len;
  a.kv_len = g.kv_len;
  a.group = g.q_heads / g.kv_heads;
  a.head_size = static_cast<int>(g.head_size);
  a.v_head_size = static_cast<int>(g.v_head_size);
  a.scale = g.scale;
  a.softcap = g.softcap;
  a.causal = g.causal;
  a.has_mask = g.has_mask;
  a.mask_bool = g.mask_bool;
  a.mask_period = g.mask_period;
  for (int i = 0; i < 4; ++i) {
    a.qs[i] = g.q_stride[i];
    a.ks[i] = g.k_stride[i];
    a.vs[i] = g.v_stride[i];
    a.ys[i] = g.y_stride[i];
    a.ms[i] = g.mask_stride[i];
  }
  return a;
}

// The current device's SM count (1 where the query fails).
int sm_count() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 1;
  return std::max(1, mma::device_attribute<cudaDevAttrMultiProcessorCount>(dev));
}

template <class T, int D>
void launch_mma(const AttentionShape& g, const AttnArgs& a, int32_t tactic, cudaStream_t stream) {
  const bool four = tactic == kMma4 || (tactic < 0 && g.batch * g.q_heads * ((g.q_len + 63) / 64) >= sm_count());
  if (tactic == kSplit2)
    launch_split<T, D, 2>(g, a, stream);
  else if (tactic == kSplit4)
    launch_split<T, D, 4>(g, a, stream);
  else if (four)
    launch_mma<T, D, 4>(g, a, stream);
  else if (tactic == kMma2)
    launch_mma<T, D, 2>(g, a, stream);
  else
    launch_mma<T, D, 1>(g, a, stream);
}

std::array<const void*, 4> qkvy_of(const AttnArgs& a) { return {a.q, a.k, a.v, a.y}; }

// cuDNN's graph for this step, where cuDNN takes it and the tactic is one of cuDNN's.
std::shared_ptr<const CudnnAttention> cudnn_graph_of(const AttentionShape& g, const AttnArgs& a, DataType dt,
                                                     int32_t tactic, cudaStream_t stream) {
  if (tactic < kCudnnTactic || tactic >= kCudnnTactic + kCudnnTactics) return nullptr;
  return cudnn_attention(g, dt, qkvy_of(a), stream);
}

}  // namespace

std::vector<int32_t> attention_tactics(OpKind, const Attrs& attrs, std::span<const TensorView> in,
                                       std::span<const TensorView> out, GpuEnv& env) {
  const AttentionShape g = checked_shape(attrs, in);
  const AttnArgs a = args_of(g, in, out[0]);
  std::vector<int32_t> t;
  if (mma_path(g, a, in[0].dtype)) {
    // Keys split over warps where each warp gets a tile at least.
    t = {kMma4, kMma2, kMma1, kPortable};
    const int64_t key_tiles = (g.kv_len + kMmaKeys - 1) / kMmaKeys;
    if (key_tiles >= 2) t.push_back(kSplit2);
    if (key_tiles >= 4) t.push_back(kSplit4);
  }
  // cuDNN's graphs beside them, and beside the portable kernel where the tensor-core one does not
  // take the head size (80, 96).
  if (out[0].numel() > 0)
    if (const std::shared_ptr<const CudnnAttention> c = cudnn_attention(g, in[0].dtype, qkvy_of(a), env.stream)) {
      const std::vector<int32_t> more = cudnn_attention_tactics(*c);
      if (t.empty() && !more.empty()) t.push_back(kPortable);
      t.insert(t.end(), more.begin(), more.end());
    }
  return t;
}

size_t attention_workspace(OpKind, const Attrs& attrs, std::span<const TensorView> in,
                           std::span<const TensorView> out, GpuEnv& env) {
  const AttentionShape g = checked_shape(attrs, in);
  const std::shared_ptr<const CudnnAttention> c =
      cudnn_graph_of(g, args_of(g, in, out[0]), in[0].dtype, env.tactic, env.stream);
  return c ? cudnn_attention_workspace(*c, env.tactic) : 0;
}

void attention_gpu(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                   GpuEnv& env) {
  const AttentionShape g = checked_shape(attrs, in);
  if (out[0].numel() == 0) return;
  const AttnArgs a = args_of(g, in, out[0]);
  // cuDNN's tactics where their plan runs here (pointers aligned as planned, a plan finalized
  // before any capture, the workspace reserved); else Kiln's kernel with its default choice.
  if (const std::shared_ptr<const CudnnAttention> c = cudnn_graph_of(g, a, in[0].dtype, env.tactic, env.stream)) {
    if (cudnn_attention_runs(*c, env.tactic, env.workspace_bytes, env.stream)) {
      cudnn_attention_run(*c, env.tactic, qkvy_of(a), g.scale, env);
      return;
    }
  }
  const int32_t tactic = env.tactic >= kCudnnTactic ? -1 : env.tactic;
  if (tactic != kPortable && mma_path(g, a, in[0].dtype)) {
    const bool half = in[0].dtype == DataType::kFloat16;
    auto launch = [&](auto tag) {
      using T = decltype(tag);
      if (g.head_size == 32)
        launch_mma<T, 32>(g, a, tactic, env.stream);
      else if (g.head_size == 64)
        launch_mma<T, 64>(g, a, tactic, env.stream);
      else
        launch_mma<T, 128>(g, a, tactic, env.stream);
    };
    if (half)
      launch(__half{});
    else
      launch(__nv_bfloat16{});
    check_launch("Attention");
    return;
  }
  const dim3 grid(static_cast<unsigned>((g.q_len + kRows - 1) / kRows), static_cast<unsigned>(g.q_heads),
                  static_cast<unsigned>(g.batch));
  ew::dispatch_ew_float(in[0].dtype, "Attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using F = ew::FloatAcc<T>;
    const size_t smem = sizeof(F) * (kKeys * (g.head_size + 1) + kKeys * (g.v_head_size + 1) + kRows * g.head_size);
    if (smem > 48 * 1024 && cudaFuncSetAttribute(attention_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 static_cast<int>(smem)) != cudaSuccess)
      throw Error("Attention on the GPU: " + std::to_string(smem) + " bytes of shared memory are not available");
    attention_kernel<T><<<grid, kWarps * 32, smem, env.stream>>>(a);
  });
  check_launch("Attention");
}

}  // namespace kiln::gpu::nn
