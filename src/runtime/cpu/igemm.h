// Integer GEMM for the CPU INT8 kernels (kiln.QConv, kiln.QMatMul): int16 operands (int8/uint8
// values with their zero points subtracted, in [-255, 255]) and 32-bit sums that wrap modulo 2^32,
// as int32 accumulators do, so results are exact and identical on every path. The AVX2 kernel
// multiplies pairs of k with vpmaddwd (each pair sum fits int32) and is chosen at run time; the
// library still builds for baseline x86-64.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/cpu/thread_pool.h"

namespace kiln::cpu {

// B [k x n] as the kernels read it: row-major with rows padded to a multiple of 16 columns (np)
// and k rounded up to even. Callers may write it directly (QConv's im2col does); the padding needs
// no zeros (A's padding is zero).
struct IgemmB {
  int64_t k = 0, n = 0, np = 0;
  std::vector<int16_t> data;
  void resize(int64_t k_, int64_t n_);
  int16_t* row(int64_t q) { return data.data() + q * np; }
  const int16_t* row(int64_t q) const { return data.data() + q * np; }
};

// kAuto picks AVX2 where the CPU has it; the others exist so tests exercise every path.
enum class IgemmKernel { kAuto, kGeneric, kAvx2 };
bool igemm_kernel_supported(IgemmKernel kernel);

// C[m x b.n] = A[m x b.k] * B, row-major with leading dimensions in elements. pool may be null.
void igemm16(IgemmKernel kernel, int64_t m, const int16_t* a, int64_t lda, const IgemmB& b, uint32_t* c, int64_t ldc,
             ThreadPool* pool);
// The same with B given row-major [k x n].
void igemm16(IgemmKernel kernel, int64_t m, int64_t n, int64_t k, const int16_t* a, int64_t lda, const int16_t* b,
             int64_t ldb, uint32_t* c, int64_t ldc, ThreadPool* pool);

// Int8 GEMM for CPUs with 4-way int8 dot products (Arm's SDOT, ARMv8.2's dot-product extension,
// which a Jetson Orin's Cortex-A78 cores have): C[m x b.n] = A[m x b.k] * B with int8 operands and
// the same 32-bit sums as igemm16 (each product fits int16, each quad's sum int32). Callers whose
// values are int8 only after a shift (uint8 activations: x - 128) correct the sums themselves
// (runtime/cpu/quant/quant_internal.h: the int8 route). B [k x n] is kept in quads of k: element
// (q, j) at ((q / 4) * np + j) * 4 + q % 4, n padded to a multiple of 16 (np), so one 16-byte load
// holds 4 columns' 4 values of k. Neither padding needs zeros (A's padding is zero).
struct Igemm8B {
  int64_t k = 0, n = 0, np = 0;
  std::vector<int8_t> data;
  void resize(int64_t k_, int64_t n_);
  int8_t* quad(int64_t q4, int64_t j) { return data.data() + (q4 * np + j) * 4; }  // q4: k / 4
  const int8_t* quad(int64_t q4, int64_t j) const { return data.data() + (q4 * np + j) * 4; }
  void set(int64_t q, int64_t j, int8_t v) { quad(q / 4, j)[q % 4] = v; }
};

// kAuto picks the dot-product kernel where the CPU has it (aarch64 with asimddp); kGeneric is the
// portable loop every CPU runs (and the reference the tests compare kDot with).
enum class Igemm8Kernel { kAuto, kGeneric, kDot };
bool igemm8_kernel_supported(Igemm8Kernel kernel);

void igemm8(Igemm8Kernel kernel, int64_t m, const int8_t* a, int64_t lda, const Igemm8B& b, uint32_t* c, int64_t ldc,
            ThreadPool* pool);

}  // namespace kiln::cpu
