// Attention on the GPU (core/attention.h), with the CPU kernel's semantics
// (runtime/cpu/gemm/attention.cpp): one pass over the keys with an online softmax, so the scores
// never reach memory. A block takes kRows query rows of one (batch, head); its 4 warps share tiles of
// 32 keys and values staged in shared memory (as the compute type, rows padded by one element so
// that a lane per key reads without bank conflicts). A warp keeps its rows' outputs in registers:
// lane l owns elements l, l + 32, ... of a row, so head sizes up to 32 * kMaxChunks. Scores, softmax
// and sums in float (double for float64). Portable: any sm_70 or later.
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "core/attention.h"
#include "runtime/cuda/elementwise/elementwise_internal.cuh"

namespace kiln::gpu::nn {

void attention_gpu(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                   GpuEnv& env);

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
          const int64_t at = b * a.ms[0] + h * a.ms[1] + i * a.ms[2] + j * a.ms[3];
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

}  // namespace

void attention_gpu(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                   GpuEnv& env) {
  const AttentionShape g = attention_shape(std::get<AttentionAttrs>(attrs), in);
  if (out[0].numel() == 0) return;
  if (g.head_size > 32 * kMaxChunks || g.v_head_size > 32 * kMaxChunks)
    throw Error("Attention on the GPU takes head sizes up to " + std::to_string(32 * kMaxChunks) + ", got " +
                std::to_string(g.head_size) + " and " + std::to_string(g.v_head_size));
  if (g.batch > 65535 || g.q_heads > 65535) throw Error("Attention on the GPU: more than 65535 batches or heads");
  AttnArgs a{};
  a.q = in[0].data;
  a.k = in[1].data;
  a.v = in[2].data;
  a.mask = g.has_mask ? in[3].data : nullptr;
  a.y = out[0].data;
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
  for (int i = 0; i < 4; ++i) {
    a.qs[i] = g.q_stride[i];
    a.ks[i] = g.k_stride[i];
    a.vs[i] = g.v_stride[i];
    a.ys[i] = g.y_stride[i];
    a.ms[i] = g.mask_stride[i];
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
