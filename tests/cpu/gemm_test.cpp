// sgemm against a naive double-precision reference, for every kernel family the CPU supports, all
// transpose combinations, edge-heavy shapes, alpha/beta variants and padded leading dimensions;
// plus ThreadPool coverage/nesting/exception tests.
#include "runtime/cpu/gemm.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/cpu/thread_pool.h"

namespace kiln::cpu {
namespace {

constexpr float kSentinel = -12345.0f;  // fills C's row padding; must survive untouched

struct Shape {
  int64_t m, n, k;
};

struct Operands {
  std::vector<float> a, b, c;
  int64_t lda, ldb, ldc;
};

// Builds row-major storage for op(A) (m x k) and op(B) (k x n) with `pad` extra elements per row.
Operands make_operands(const Shape& s, bool ta, bool tb, int64_t pad, bool nan_c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  Operands o;
  const int64_t a_rows = ta ? s.k : s.m, a_cols = ta ? s.m : s.k;
  const int64_t b_rows = tb ? s.n : s.k, b_cols = tb ? s.k : s.n;
  o.lda = a_cols + pad;
  o.ldb = b_cols + pad;
  o.ldc = s.n + pad;
  o.a.resize(a_rows * o.lda);
  o.b.resize(b_rows * o.ldb);
  o.c.assign(s.m * o.ldc, kSentinel);
  for (float& x : o.a) x = dist(rng);
  for (float& x : o.b) x = dist(rng);
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      o.c[i * o.ldc + j] = nan_c ? std::numeric_limits<float>::quiet_NaN() : dist(rng);
    }
  }
  return o;
}

// Runs sgemm and checks every element against a double reference. The tolerance scales with the
// sum of |alpha*a*b| terms plus |beta*c| (the magnitude the rounding errors are relative to),
// times eps * sqrt(k) for the accumulation; a single wrong or missing term is ~1/k of that sum,
// far above the tolerance for the sizes used here.
void check_gemm(GemmKernel kernel, bool ta, bool tb, const Shape& s, float alpha, float beta, int64_t pad,
                ThreadPool* pool, uint32_t seed) {
  Operands o = make_operands(s, ta, tb, pad, /*nan_c=*/beta == 0.f, seed);
  const std::vector<float> c0 = o.c;
  sgemm_with_kernel(kernel, ta, tb, s.m, s.n, s.k, alpha, o.a.data(), o.lda, o.b.data(), o.ldb, beta, o.c.data(), o.ldc,
                    pool);
  const double eps = std::numeric_limits<float>::epsilon();
  const double tol_scale = 16.0 * eps * (1.0 + std::sqrt(double(s.k)));
  int failures = 0;
  for (int64_t i = 0; i < s.m && failures < 5; ++i) {
    for (int64_t j = 0; j < o.ldc && failures < 5; ++j) {
      const float got = o.c[i * o.ldc + j];
      if (j >= s.n) {  // padding beyond the row must not be written
        if (got != kSentinel) {
          ADD_FAILURE() << "padding written at (" << i << "," << j << ")";
          ++failures;
        }
        continue;
      }
      double sum = 0.0, mag = 0.0;
      for (int64_t p = 0; p < s.k; ++p) {
        const double av = ta ? o.a[p * o.lda + i] : o.a[i * o.lda + p];
        const double bv = tb ? o.b[j * o.ldb + p] : o.b[p * o.ldb + j];
        sum += av * bv;
        mag += std::abs(av * bv);
      }
      double want = double(alpha) * sum;
      double bound = std::abs(double(alpha)) * mag;
      if (beta != 0.f) {
        want += double(beta) * c0[i * o.ldc + j];
        bound += std::abs(double(beta) * c0[i * o.ldc + j]);
      }
      const double tol = tol_scale * bound + 1e-30;
      if (!(std::abs(double(got) - want) <= tol)) {
        ADD_FAILURE() << "C(" << i << "," << j << ") = " << got << ", want " << want << " (tol " << tol << ")";
        ++failures;
      }
    }
  }
}

ThreadPool& two_thread_pool() {
  static ThreadPool pool(2);
  return pool;
}

std::vector<Shape> test_shapes() {
  std::vector<Shape> shapes;
  // Every combination of tiny and odd sizes: exercises partial MR/NR tiles on both edges.
  const int64_t small[] = {1, 2, 3, 7, 17};
  for (int64_t m : small) {
    for (int64_t n : small) {
      for (int64_t k : small) shapes.push_back({m, n, k});
    }
  }
  // Around tile, block, KC (192 / 256) and NC (4096) boundaries, primes, threaded sizes.
  const Shape larger[] = {
      {63, 65, 64},   {65, 63, 129},   {129, 129, 129}, {64, 64, 64},  {31, 97, 257},  {150, 33, 300},
      {300, 47, 513}, {1, 257, 129},   {257, 1, 129},   {13, 4100, 5}, {289, 130, 70}, {2, 1000, 300},
      {1000, 3, 260}, {127, 131, 137}, {96, 96, 1},     {1, 700, 403}, {600, 1, 517},  // matrix-vector shapes big
                                                                                       // enough to be threaded
  };
  shapes.insert(shapes.end(), std::begin(larger), std::end(larger));
  return shapes;
}

struct ScalarPair {
  float alpha, beta;
};
constexpr ScalarPair kScalars[] = {{1.f, 0.f}, {1.f, 1.f}, {-0.5f, 2.f}, {2.f, -1.f}, {0.75f, 0.f}};

using GemmParam = std::tuple<GemmKernel, bool /*ta*/, bool /*tb*/, bool /*pool*/>;

class GemmTest : public ::testing::TestWithParam<GemmParam> {
 protected:
  void SetUp() override {
    if (!gemm_kernel_supported(std::get<0>(GetParam()))) GTEST_SKIP() << "kernel not supported";
  }
  ThreadPool* pool() const { return std::get<3>(GetParam()) ? &two_thread_pool() : nullptr; }
};

TEST_P(GemmTest, MatchesReference) {
  const auto [kernel, ta, tb, use_pool] = GetParam();
  uint32_t seed = 1;
  for (const Shape& s : test_shapes()) {
    // Rotate alpha/beta and padding over shapes so every pair meets many edge cases.
    const ScalarPair& sc = kScalars[seed % std::size(kScalars)];
    const int64_t pad = (seed % 3 == 0) ? 0 : int64_t(seed % 5) + 1;
    SCOPED_TRACE(::testing::Message() << "m=" << s.m << " n=" << s.n << " k=" << s.k << " alpha=" << sc.alpha
                                      << " beta=" << sc.beta << " pad=" << pad);
    check_gemm(kernel, ta, tb, s, sc.alpha, sc.beta, pad, pool(), seed++);
    if (HasFailure()) return;
  }
}

TEST_P(GemmTest, BetaZeroIgnoresNanAcrossKBlocks) {
  const auto [kernel, ta, tb, use_pool] = GetParam();
  // k > KC so later k blocks accumulate into C that the first block overwrote.
  check_gemm(kernel, ta, tb, {70, 45, 600}, 1.f, 0.f, 3, pool(), 77);
}

TEST_P(GemmTest, ZeroKAndZeroAlphaScaleC) {
  const auto [kernel, ta, tb, use_pool] = GetParam();
  for (float beta : {0.f, 1.f, -3.f}) {
    check_gemm(kernel, ta, tb, {5, 9, 0}, 1.f, beta, 2, pool(), 5);
    check_gemm(kernel, ta, tb, {5, 9, 4}, 0.f, beta, 2, pool(), 6);
  }
}

std::string param_name(const ::testing::TestParamInfo<GemmParam>& info) {
  const auto [kernel, ta, tb, use_pool] = info.param;
  std::string name = gemm_kernel_supported(kernel) ? gemm_kernel_name(kernel) : "unsupported";
  name += ta ? "_At" : "_A";
  name += tb ? "_Bt" : "_B";
  name += use_pool ? "_pool2" : "_serial";
  return name + "_" + std::to_string(static_cast<int>(kernel));
}

INSTANTIATE_TEST_SUITE_P(All, GemmTest,
                         ::testing::Combine(::testing::Values(GemmKernel::kGeneric, GemmKernel::kAvx2,
                                                              GemmKernel::kAvx512),
                                            ::testing::Bool(), ::testing::Bool(), ::testing::Bool()),
                         param_name);

TEST(Gemm, DegenerateShapesDoNothing) {
  float c = 3.f;
  sgemm(false, false, 0, 1, 5, 1.f, nullptr, 5, nullptr, 1, 0.f, &c, 1, nullptr);
  sgemm(false, false, 1, 0, 5, 1.f, nullptr, 5, nullptr, 1, 0.f, &c, 1, nullptr);
  EXPECT_EQ(c, 3.f);
}

TEST(Gemm, ConvIm2colShapeThreaded) {
  check_gemm(GemmKernel::kAuto, false, false, {64, 3136, 576}, 1.f, 0.f, 0, &two_thread_pool(), 9);
}

TEST(Gemm, ThreadedMatchesSerialBitwise) {
  // Work is partitioned over C tiles only (never over k), so threading must not change results.
  const Shape s{200, 300, 400};
  Operands o = make_operands(s, false, true, 1, false, 11);
  std::vector<float> serial = o.c, threaded = o.c;
  sgemm(false, true, s.m, s.n, s.k, 1.f, o.a.data(), o.lda, o.b.data(), o.ldb, 0.5f, serial.data(), o.ldc, nullptr);
  sgemm(false, true, s.m, s.n, s.k, 1.f, o.a.data(), o.lda, o.b.data(), o.ldb, 0.5f, threaded.data(), o.ldc,
        &two_thread_pool());
  EXPECT_EQ(serial, threaded);
}

TEST(ThreadPool, VisitsEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1000, 100003}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, [&](int64_t begin, int64_t end) {
        ASSERT_LE(0, begin);
        ASSERT_LT(begin, end);
        ASSERT_LE(end, n);
        for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "threads=" << threads << " n=" << n << " i=" << i;
    }
  }
}

TEST(ThreadPool, DefaultSizeIsHardwareConcurrency) {
  ThreadPool pool(0);
  EXPECT_GE(pool.size(), 1);
}

TEST(ThreadPool, ManyBackToBackCalls) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  for (int iter = 0; iter < 20000; ++iter) {
    pool.parallel_for(5, [&](int64_t begin, int64_t end) { total.fetch_add(end - begin); });
  }
  EXPECT_EQ(total.load(), 5 * 20000);
}

TEST(ThreadPool, NestedCallsRunSerially) {
  ThreadPool pool(2);
  std::vector<std::atomic<int>> hits(40 * 30);
  pool.parallel_for(40, [&](int64_t b0, int64_t e0) {
    for (int64_t i = b0; i < e0; ++i) {
      pool.parallel_for(30, [&](int64_t b1, int64_t e1) {
        EXPECT_EQ(b1, 0);  // inline: one call covering the whole range
        EXPECT_EQ(e1, 30);
        for (int64_t j = b1; j < e1; ++j) hits[i * 30 + j].fetch_add(1);
      });
    }
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(ThreadPool, PropagatesExceptions) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(100,
                                 [](int64_t begin, int64_t end) {
                                   if (begin <= 57 && 57 < end) throw std::runtime_error("boom");
                                 }),
               std::runtime_error);
  // The pool stays usable afterwards.
  std::atomic<int64_t> total{0};
  pool.parallel_for(100, [&](int64_t begin, int64_t end) { total.fetch_add(end - begin); });
  EXPECT_EQ(total.load(), 100);
}

}  // namespace
}  // namespace kiln::cpu
