// Kiln's GEMV for Gemm at small batch (declared in nn_internal.cuh): Y [m, n] = epilogue(alpha *
// A [m, k] W[n, k]^T + beta * C) for m <= kGemvMaxM, the fully connected layer of a classifier at
// batch 1 to 8 (Gemm with transB = 1, as torch.onnx exports nn.Linear). The product is bound by
// reading W once, so a warp owns one row of W (an output column): its lanes read the row in 16-byte
// chunks, each chunk multiplied with the same chunk of every row of A (A is small and shared by all
// warps, so it stays in cache), and the warp's sums meet in shuffles. Float accumulation for every type.
// W may be float16 under a float32 A (FusedGemm's float16 weights, core/infer/gemm/gemm.cpp): half
// the bytes to stream, and A, C, Z and Y stay float32.
//
// cuBLASLt's kernels for these shapes (ResNet-50's 2048 -> 1000 classifier at batch 1: 7 us in a
// 0.29 ms engine) use few CTAs; here every SM gets rows. The kernel is a Gemm tactic (kGemvTactic)
// that the builder times against cuBLASLt's, and a programmatic dependent launch: it prefetches its
// rows of W into L2, then waits for A (dependent_launch.cuh).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/epilogue.h"
#include "runtime/cuda/dependent_launch.cuh"
#include "runtime/cuda/elementwise/elementwise_internal.cuh"
#include "runtime/cuda/nn_internal.cuh"

namespace kiln::gpu::nn {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

struct Args {
  int64_t m, n, k;
  float alpha, beta;
  int64_t crs, ccs;  // C element (i, j) at i * crs + j * ccs
  bool epilogue, has_z;
  EpilogueAttrs e;
};

// 16 bytes of T as floats.
template <class T>
__device__ __forceinline__ void unpack(const uint4& v, float* f) {
  constexpr int kV = 16 / sizeof(T);
  const T* t = reinterpret_cast<const T*>(&v);
#pragma unroll
  for (int i = 0; i < kV; ++i) f[i] = static_cast<float>(ew::load(t[i]));
}

// A weight chunk read once: past L1 (ld.global.nc.L1::no_allocate).
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// kV elements of A (type TA) at element e as floats: one or two 16-byte loads (A is never narrower
// than W, so kV elements of A are a whole number of 16-byte chunks).
template <class TA, int kV>
__device__ __forceinline__ void load_a(const TA* a, int64_t e, float* f) {
  constexpr int kA = 16 / sizeof(TA);
  static_assert(kV % kA == 0, "A is at least as wide as W");
#pragma unroll
  for (int c = 0; c < kV / kA; ++c) unpack<TA>(*reinterpret_cast<const uint4*>(a + e + c * kA), f + c * kA);
}

// TA: A's, C's, Z's and Y's type; TW: W's (TA, or float16 under a float32 A).
template <class TA, class TW, int M>
__global__ void __launch_bounds__(kThreads)
    gemv_kernel(const TA* __restrict__ a, const TW* __restrict__ w, const TA* __restrict__ c, const TA* __restrict__ z,
                TA* __restrict__ y, Args g) {
  constexpr int kV = 16 / sizeof(TW);
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int64_t chunks = g.k / kV;
  const uint4* row = reinterpret_cast<const uint4*>(w + (j < g.n ? j : 0) * g.k);
  // Before the wait only a prefetch into L2 of this warp's row (one 128-byte line per lane and step):
  // a hint that reads nothing into the kernel, so it is safe even where W is computed.
  if (j < g.n)
    for (int64_t line = lane; line * 8 < chunks; line += 32) asm volatile("prefetch.global.L2 [%0];" ::"l"(row + line * 8));
  wait_for_inputs();
  start_next_kernel();
  if (j >= g.n) return;  // the whole warp: no block-wide synchronisation follows
  float acc[M];
#pragma unroll
  for (int i = 0; i < M; ++i) acc[i] = 0.f;
  // kBatch chunks of W per lane in flight before any is used: the row is read in one or two round
  // trips (2,048 float16 or float32 weights) rather than one per chunk.
  constexpr int kBatch = 8;
  for (int64_t base = lane; base < chunks; base += 32 * kBatch) {
    uint4 wv[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int64_t ch = base + b * 32;
      wv[b] = ch < chunks ? load_stream(row + ch) : uint4{};
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int64_t ch = base + b * 32;
      if (ch >= chunks) break;
      float wf[kV];
      unpack<TW>(wv[b], wf);
#pragma unroll
      for (int i = 0; i < M; ++i) {
        float af[kV];
        load_a<TA, kV>(a + i * g.k, ch * kV, af);
#pragma unroll
        for (int q = 0; q < kV; ++q) acc[i] = fmaf(af[q], wf[q], acc[i]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int s = 16; s >= 1; s >>= 1) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], s);
  if (lane < M) {
    float v = 0.f;
#pragma unroll
    for (int i = 0; i < M; ++i)
      if (i == lane) v = acc[i];  // registers stay registers: no dynamic index
    v *= g.alpha;
    if (c) v += g.beta * static_cast<float>(ew::load(c[lane * g.crs + j * g.ccs]));
    if (g.epilogue) {
      const float zv = g.has_z ? static_cast<float>(ew::load(z[lane * g.n + j])) : 0.f;
      v = epilogue::apply<float>(g.e, v, 0.f, zv, g.has_z);
    }
    y[lane * g.n + j] = ew::store<TA>(v);
  }
}

template <class TA, class TW, int M>
void launch(const Gemv& p, const void* a, const void* w, void* y, cudaStream_t stream, const char* op) {
  Args g{p.m, p.n, p.k, p.alpha, p.beta, p.crs, p.ccs, p.epi != nullptr, p.z != nullptr, p.epi ? *p.epi : EpilogueAttrs{}};
  const dim3 grid(static_cast<unsigned>((p.n + kWarps - 1) / kWarps));
  launch_dependent<gemv_kernel<TA, TW, M>>(grid, kThreads, 0, stream, 1, op, static_cast<const TA*>(a),
                                                  static_cast<const TW*>(w), static_cast<const TA*>(p.c),
                                                  static_cast<const TA*>(p.z), static_cast<TA*>(y), g);
}

template <class TA, class TW>
void launch_m(const Gemv& p, const void* a, const void* w, void* y, cudaStream_t stream, const char* op) {
  switch (p.m) {
    case 1: return launch<TA, TW, 1>(p, a, w, y, stream, op);
    case 2: return launch<TA, TW, 2>(p, a, w, y, stream, op);
    case 3: return launch<TA, TW, 3>(p, a, w, y, stream, op);
    case 4: return launch<TA, TW, 4>(p, a, w, y, stream, op);
    case 5: return launch<TA, TW, 5>(p, a, w, y, stream, op);
    case 6: return launch<TA, TW, 6>(p, a, w, y, stream, op);
    case 7: return launch<TA, TW, 7>(p, a, w, y, stream, op);
    default: return launch<TA, TW, 8>(p, a, w, y, stream, op);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool gemv_fits(DataType a_dt, DataType w_dt, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b,
               const void* a, const void* w) {
  const bool same =
      a_dt == w_dt && (a_dt == DataType::kFloat32 || a_dt == DataType::kFloat16 || a_dt == DataType::kBFloat16);
  const bool mixed = a_dt == DataType::kFloat32 && w_dt == DataType::kFloat16;
  if (!(same || mixed) || trans_a || !trans_b || m < 1 || m > kGemvMaxM || n < 1 || k < 1) return false;
  const int64_t vec = 16 / static_cast<int64_t>(dtype_size(w_dt));
  return k % vec == 0 && n < (int64_t{1} << 31) && aligned16(a) && aligned16(w);
}

void gemv(const Gemv& p, DataType a_dt, DataType w_dt, const void* a, const void* w, void* y, cudaStream_t stream,
          const char* op) {
  if (a_dt == DataType::kFloat32 && w_dt == DataType::kFloat16) return launch_m<float, __half>(p, a, w, y, stream, op);
  if (a_dt == DataType::kFloat32) return launch_m<float, float>(p, a, w, y, stream, op);
  if (a_dt == DataType::kFloat16) return launch_m<__half, __half>(p, a, w, y, stream, op);
  return launch_m<__nv_bfloat16, __nv_bfloat16>(p, a, w, y, stream, op);
}

}  // namespace kiln::gpu::nn
