// Single-precision GEMM for the CPU backend: packed, cache-blocked, register-tiled, threaded.
// sgemm hands products of some size to oneDNN's GEMM where Kiln has it (runtime/cpu/onednn.h;
// not with KILN_CPU_KERNELS=kiln); sgemm_with_kernel always runs Kiln's. Micro-kernels are written with GCC vector
// extensions; on x86-64 the AVX2+FMA and AVX-512 variants are compiled via target attributes and chosen at run time, so
// the library itself builds for baseline x86-64.
#pragma once

#include <cstdint>
#include <type_traits>

#include "runtime/cpu/thread_pool.h"

namespace kiln::cpu {

// C[m x n] = alpha * op(A)[m x k] * op(B)[k x n] + beta * C, row-major, leading dimensions in
// elements. op(X) = X or X^T per trans flag (with trans_a, A is stored k x m). beta == 0 means C
// is not read (may hold NaN). pool may be null: single thread.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc, ThreadPool* pool);

// Micro-kernel families. kAuto picks the best one the CPU supports; the others exist so tests and
// benchmarks can exercise every code path on one machine.
enum class GemmKernel { kAuto, kGeneric, kAvx2, kAvx512 };

bool gemm_kernel_supported(GemmKernel kernel);
const char* gemm_kernel_name(GemmKernel kernel);  // kAuto: name of the one it resolves to

// sgemm with an explicit kernel family; an unsupported one falls back to kGeneric.
void sgemm_with_kernel(GemmKernel kernel, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                       ThreadPool* pool);

namespace gemm {
// C = op(A) op(B) in float64 (beta 0), with the gemm family's generic kernel (gemm/gemm.cpp).
void gemm_f64(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
              int64_t ldb, double* c, int64_t ldc, ThreadPool* pool);
}  // namespace gemm

// C = op(A) op(B) in T, float (sgemm) or double (gemm_f64): the float32 kernels and their float64
// references share one code path (Conv, ConvTranspose, Attention).
template <class T>
void gemm_t(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
            int64_t ldc, ThreadPool* pool) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  if constexpr (std::is_same_v<T, float>)
    sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc, pool);
  else
    gemm::gemm_f64(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, pool);
}

}  // namespace kiln::cpu
