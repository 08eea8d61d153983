// Single-precision GEMM for the CPU backend: packed, cache-blocked, register-tiled, threaded.
// No external BLAS. Micro-kernels are written with GCC vector extensions; on x86-64 the AVX2+FMA
// and AVX-512 variants are compiled via target attributes and chosen at run time, so the library
// itself builds for baseline x86-64.
#pragma once

#include <cstdint>

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

}  // namespace kiln::cpu
