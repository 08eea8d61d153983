// The integer GEMM of the CPU INT8 kernels (runtime/cpu/igemm.h) against a plain triple loop, on
// every kernel this CPU has: odd and tiny shapes, leading dimensions past the width, k = 0, threads,
// and sums that wrap past int32.
#include "runtime/cpu/igemm.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <vector>

namespace kiln::cpu {
namespace {

struct Case {
  int64_t m, n, k;
};

// got [c.m x ldc] against the triple loop sum over q < c.k of a(i, q) * b(q, j) on columns below c.n,
// and the guard 0xdeadbeef past them (nothing written past a row).
template <class A, class B>
::testing::AssertionResult matches_triple_loop(const std::vector<uint32_t>& got, const Case& c, int64_t ldc, A&& a,
                                               B&& b, int kernel) {
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const uint32_t v = got[static_cast<size_t>(i * ldc + j)];
      if (j >= c.n) {
        if (v != 0xdeadbeefu) return ::testing::AssertionFailure() << "wrote past the row at " << i << "," << j;
        continue;
      }
      int64_t want = 0;
      for (int64_t q = 0; q < c.k; ++q) want += int64_t{a(i, q)} * int64_t{b(q, j)};
      if (v != static_cast<uint32_t>(want))
        return ::testing::AssertionFailure() << "kernel " << kernel << " " << c.m << "x" << c.n << "x" << c.k << " at "
                                             << i << "," << j << ": " << v << " != " << static_cast<uint32_t>(want);
    }
  return ::testing::AssertionSuccess();
}

TEST(Igemm, MatchesTripleLoopOnEveryKernel) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> u(-255, 255);
  ThreadPool pool(3);
  const Case cases[] = {{1, 1, 1},  {3, 5, 7},   {4, 16, 2}, {5, 17, 3},    {64, 70, 300},
                        {9, 1, 33}, {1, 129, 9}, {2, 3, 0},  {130, 65, 129}};
  for (IgemmKernel kernel : {IgemmKernel::kGeneric, IgemmKernel::kAvx2, IgemmKernel::kAuto}) {
    if (!igemm_kernel_supported(kernel)) continue;
    for (const Case& c : cases) {
      const int64_t lda = c.k + 3, ldb = c.n + 2, ldc = c.n + 5;
      std::vector<int16_t> a(static_cast<size_t>(c.m * lda)), b(static_cast<size_t>(std::max<int64_t>(c.k, 1) * ldb));
      for (int16_t& v : a) v = static_cast<int16_t>(u(rng));
      for (int16_t& v : b) v = static_cast<int16_t>(u(rng));
      std::vector<uint32_t> got(static_cast<size_t>(c.m * ldc), 0xdeadbeef);
      igemm16(kernel, c.m, c.n, c.k, a.data(), lda, b.data(), ldb, got.data(), ldc, c.m * c.n > 1000 ? &pool : nullptr);
      ASSERT_TRUE(matches_triple_loop(
          got, c, ldc, [&](int64_t i, int64_t q) { return a[static_cast<size_t>(i * lda + q)]; },
          [&](int64_t q, int64_t j) { return b[static_cast<size_t>(q * ldb + j)]; }, static_cast<int>(kernel)));
    }
  }
}

TEST(Igemm, SumsWrapModulo2To32) {
  const int64_t k = 70000;  // 70000 * 255 * 255 > 2^32
  std::vector<int16_t> a(k, 255), b(k, 255);
  for (IgemmKernel kernel : {IgemmKernel::kGeneric, IgemmKernel::kAvx2}) {
    if (!igemm_kernel_supported(kernel)) continue;
    uint32_t c = 0;
    igemm16(kernel, 1, 1, k, a.data(), k, b.data(), 1, &c, 1, nullptr);
    EXPECT_EQ(c, static_cast<uint32_t>(int64_t{k} * 255 * 255));
  }
}

// igemm8 (int8 operands, dot products where the CPU has them) against the triple loop, on every
// kernel this CPU has. scripts/test_jetson.sh sets KILN_EXPECT_DOTPROD under qemu (whose CPU has
// Arm's dot products), so that CI runs the SDOT kernel and not only the portable one.
TEST(Igemm8, MatchesTripleLoopOnEveryKernel) {
  if (std::getenv("KILN_EXPECT_DOTPROD")) {
    ASSERT_TRUE(igemm8_kernel_supported(Igemm8Kernel::kDot));
  }
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> u(-128, 127);
  ThreadPool pool(3);
  const Case cases[] = {{1, 1, 1},   {3, 5, 7}, {4, 16, 4},     {5, 17, 3}, {64, 70, 300}, {9, 1, 33},
                        {1, 129, 9}, {2, 3, 0}, {130, 65, 129}, {7, 48, 6}, {33, 200, 75}};
  for (Igemm8Kernel kernel : {Igemm8Kernel::kGeneric, Igemm8Kernel::kDot, Igemm8Kernel::kAuto}) {
    if (!igemm8_kernel_supported(kernel)) continue;
    for (const Case& c : cases) {
      const int64_t lda = c.k + 3, ldc = c.n + 5;
      std::vector<int8_t> a(static_cast<size_t>(c.m * lda));
      for (int8_t& v : a) v = static_cast<int8_t>(u(rng));
      Igemm8B b;
      b.resize(c.k, c.n);
      for (int8_t& v : b.data) v = static_cast<int8_t>(u(rng));  // the padding too: it must not count
      std::vector<uint32_t> got(static_cast<size_t>(c.m * ldc), 0xdeadbeef);
      igemm8(kernel, c.m, a.data(), lda, b, got.data(), ldc, c.m * c.n > 1000 ? &pool : nullptr);
      ASSERT_TRUE(matches_triple_loop(
          got, c, ldc, [&](int64_t i, int64_t q) { return a[static_cast<size_t>(i * lda + q)]; },
          [&](int64_t q, int64_t j) { return b.quad(q / 4, j)[q % 4]; }, static_cast<int>(kernel)));
    }
  }
}

TEST(Igemm8, SumsWrapModulo2To32) {
  const int64_t k = 300000;  // 300000 * 128 * 128 > 2^32
  std::vector<int8_t> a(k, -128);
  Igemm8B b;
  b.resize(k, 1);
  for (int64_t q = 0; q < k; ++q) b.set(q, 0, -128);
  for (Igemm8Kernel kernel : {Igemm8Kernel::kGeneric, Igemm8Kernel::kDot}) {
    if (!igemm8_kernel_supported(kernel)) continue;
    uint32_t c = 0;
    igemm8(kernel, 1, a.data(), k, b, &c, 1, nullptr);
    EXPECT_EQ(c, static_cast<uint32_t>(int64_t{k} * 128 * 128)) << static_cast<int>(kernel);
  }
}

}  // namespace
}  // namespace kiln::cpu
