// The gemm family (Gemm, MatMul): shape inference + CPU kernels against plain float64 references
// written here, on random inputs, several dtypes, with and without a thread pool.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/shape_infer.h"
#include "nn_test_util.h"
#include "op_test_util.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln {
namespace {

using namespace kiln::test;      // Shape, Tensor, make, numel
using namespace kiln::test::nn;  // random_tensor, tolerance, forward_window, expect_infer_error

// ---- Gemm / MatMul -------------------------------------------------------------------------

TEST(NnGemm, MatchesReference) {
  std::mt19937 rng(6);
  cpu::ThreadPool pool(3);
  struct Case {
    int64_t m, n, k, ta, tb;
    std::optional<Shape> c;
    float alpha, beta;
  };
  const Case cases[] = {
      {3, 4, 5, 0, 0, std::nullopt, 1.0f, 1.0f},      {3, 4, 5, 1, 0, Shape{4}, 2.0f, 3.0f},
      {7, 2, 3, 0, 1, Shape{7, 1}, 1.0f, -1.0f},      {5, 6, 4, 1, 1, Shape{5, 6}, -2.0f, 2.0f},
      {4, 3, 2, 0, 0, Shape{}, 1.0f, 2.0f},           {4, 3, 2, 1, 1, Shape{1, 1}, 3.0f, 0.0f},
      {4, 3, 0, 0, 0, Shape{1, 3}, 1.0f, 2.0f},       {0, 3, 2, 0, 0, Shape{3}, 1.0f, 1.0f},
      {67, 45, 130, 1, 0, Shape{1, 45}, 0.5f, 0.25f},
  };
  for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16, DataType::kInt32,
                      DataType::kInt64, DataType::kUInt32, DataType::kUInt64}) {
    for (const Case& c : cases) {
      const bool integral = !is_float(dt);
      if (integral && (c.alpha != std::trunc(c.alpha) || c.beta != std::trunc(c.beta) || c.alpha < 0 || c.beta < 0))
        continue;
      Tensor A = random_tensor(dt, c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, rng, 0, 9);
      Tensor B = random_tensor(dt, c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, rng, 0, 9);
      Tensor C = c.c ? random_tensor(dt, *c.c, rng, 0, 9) : Tensor{};
      GemmAttrs a{c.alpha, c.beta, c.ta, c.tb};
      std::vector<double> av = A.values(), bv = B.values(), cv = c.c ? C.values() : std::vector<double>(), want;
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = 0; j < c.n; ++j) {
          double s = 0;
          for (int64_t p = 0; p < c.k; ++p)
            s += av[c.ta ? p * c.m + i : i * c.k + p] * bv[c.tb ? j * c.k + p : p * c.n + j];
          double cval = 0;
          if (c.c) {
            const Shape& cs = *c.c;
            const int64_t r = cs.size() == 2 && cs[0] != 1 ? i : 0;
            const int64_t q = !cs.empty() && cs.back() != 1 ? j : 0;
            cval = cv[r * (cs.empty() ? 1 : cs.back()) + q];
          }
          want.push_back(c.alpha * s + c.beta * cval);
        }
      for (cpu::ThreadPool* p : {static_cast<cpu::ThreadPool*>(nullptr), &pool}) {
        auto y = run(OpKind::kGemm, a, {&A, &B, c.c ? &C : nullptr}, 1, p);
        ASSERT_EQ(y[0].shape, (Shape{c.m, c.n}));
        expect_near(y[0].values(), want, integral ? 0 : tolerance(dt) * 10, "Gemm " + std::string(dtype_name(dt)));
      }
    }
  }
}

TEST(NnMatMul, MatchesReference) {
  std::mt19937 rng(7);
  cpu::ThreadPool pool(3);
  const std::pair<Shape, Shape> cases[] = {
      {{3}, {3}},
      {{2, 3}, {3}},
      {{3}, {2, 3, 4}},
      {{2, 1, 3, 4}, {4}},
      {{2, 3, 4}, {4, 5}},
      {{1, 3, 4}, {2, 4, 5}},
      {{2, 1, 3, 4}, {1, 5, 4, 2}},
      {{0, 3, 4}, {4, 5}},
      {{2, 3, 0}, {0, 4}},
      {{16, 5, 6}, {16, 6, 7}},
      {{3, 70, 65}, {65, 33}},
      {{2, 2, 3}, {3, 2, 3, 1}},
  };
  for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16, DataType::kInt32,
                      DataType::kInt64, DataType::kUInt32, DataType::kUInt64}) {
    for (const auto& [as, bs] : cases) {
      Tensor A = random_tensor(dt, as, rng, 0, 9), B = random_tensor(dt, bs, rng, 0, 9);
      // numpy semantics, spelled out: promote 1-D operands, broadcast the batch dims, drop added dims.
      Shape a2 = as.size() == 1 ? Shape{1, as[0]} : as, b2 = bs.size() == 1 ? Shape{bs[0], 1} : bs;
      const size_t br = std::max(a2.size(), b2.size()) - 2;
      Shape batch(br);
      for (size_t i = 0; i < br; ++i) {
        const size_t ra = a2.size() - 2, rb = b2.size() - 2;
        const int64_t da = i >= br - ra ? a2[i - (br - ra)] : 1, db = i >= br - rb ? b2[i - (br - rb)] : 1;
        batch[i] = da == 1 ? db : da;
      }
      const int64_t m = a2[a2.size() - 2], k = a2.back(), n = b2.back();
      Shape ys = batch;
      if (as.size() > 1) ys.push_back(m);
      if (bs.size() > 1) ys.push_back(n);
      std::vector<double> av = A.values(), bv = B.values(), want;
      for (int64_t bi = 0; bi < numel(batch); ++bi) {
        Shape idx = unflatten(bi, batch);
        auto offset = [&](const Shape& s) {  // broadcast batch offset in matrices
          int64_t off = 0;
          const size_t r = s.size() - 2;
          for (size_t i = 0; i < r; ++i) off = off * s[i] + (s[i] == 1 ? 0 : idx[br - r + i]);
          return off;
        };
        const int64_t oa = offset(a2) * m * k, ob = offset(b2) * k * n;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double s = 0;
            for (int64_t p = 0; p < k; ++p) s += av[oa + i * k + p] * bv[ob + p * n + j];
            want.push_back(s);
          }
      }
      for (cpu::ThreadPool* p : {static_cast<cpu::ThreadPool*>(nullptr), &pool}) {
        auto y = run(OpKind::kMatMul, NoAttrs{}, {&A, &B}, 1, p);
        ASSERT_EQ(y[0].shape, ys) << shape_string(as) << " x " << shape_string(bs);
        expect_near(y[0].values(), want, is_float(dt) ? tolerance(dt) * 10 : 0,
                    "MatMul " + shape_string(as) + " x " + shape_string(bs) + " " + std::string(dtype_name(dt)));
      }
    }
  }
}

TEST(NnMatMul, IntegersWrap) {
  Tensor a = make(DataType::kInt32, {1, 2}, {65536, 2147483647});
  Tensor b = make(DataType::kInt32, {2, 1}, {65536, 2});
  auto y = run(OpKind::kMatMul, NoAttrs{}, {&a, &b}, 1);
  // 2^32 + 2 * (2^31 - 1) wraps to -2 in 32 bits.
  EXPECT_EQ(y[0].values()[0], -2.0);
  Tensor ua = make(DataType::kUInt32, {1, 1}, {4294967295.0}), ub = make(DataType::kUInt32, {1, 1}, {3});
  y = run(OpKind::kMatMul, NoAttrs{}, {&ua, &ub}, 1);
  EXPECT_EQ(y[0].values()[0], 4294967293.0);
}

// ---- Attention's mask_period (Kiln's own) ----------------------------------------------------

// A mask of 3 entries repeated along a batch of 6 gives what the same mask tiled to 6 entries
// gives through ordinary broadcasting (an independent path through the kernel).
TEST(NnAttention, MaskPeriodIsTheTiledMask) {
  const int64_t b = 6, h = 2, s = 9, d = 8, period = 3;
  std::mt19937 rng(7);
  Tensor q = random_tensor(DataType::kFloat32, {b, h, s, d}, rng),
         k = random_tensor(DataType::kFloat32, {b, h, s, d}, rng),
         v = random_tensor(DataType::kFloat32, {b, h, s, d}, rng),
         m = random_tensor(DataType::kFloat32, {period, 1, s, s}, rng);
  std::vector<double> tiled;
  for (int64_t r = 0; r < b / period; ++r)
    for (double x : m.values()) tiled.push_back(x);
  Tensor mt = make(DataType::kFloat32, {b, 1, s, s}, tiled);
  AttentionAttrs a;
  const auto want = run(OpKind::kAttention, a, {&q, &k, &v, &mt}, 1);
  a.mask_period = period;
  const auto got = run(OpKind::kAttention, a, {&q, &k, &v, &m}, 1);
  EXPECT_EQ(got[0].values(), want[0].values());
}

TEST(NnAttention, MaskPeriodRejectsBadInput) {
  Tensor q = shaped({6, 2, 9, 8}), m3 = shaped({3, 1, 9, 9}), m4 = shaped({4, 1, 9, 9}), m2d = shaped({9, 9});
  AttentionAttrs a;
  a.mask_period = 4;
  expect_infer_error(OpKind::kAttention, a, {&q, &q, &q, &m4}, 1, "period not dividing the batch");
  a.mask_period = 3;
  expect_infer_error(OpKind::kAttention, a, {&q, &q, &q, &m4}, 1, "mask entries other than the period");
  expect_infer_error(OpKind::kAttention, a, {&q, &q, &q, &m2d}, 1, "2-D mask");
  expect_infer_error(OpKind::kAttention, a, {&q, &q, &q}, 1, "no mask");
  a.mask_period = -1;
  expect_infer_error(OpKind::kAttention, a, {&q, &q, &q, &m3}, 1, "negative");
}

// ---- inference errors ----------------------------------------------------------------------

TEST(GemmInfer, RejectsBadInput) {
  Tensor a23 = shaped({2, 3}), b34 = shaped({3, 4}), b44 = shaped({4, 4}), c32 = shaped({3, 2}),
         a3d = shaped({1, 2, 3});
  Tensor bi = shaped({3, 4}, DataType::kInt32), ab = shaped({2, 3}, DataType::kBool),
         bb = shaped({3, 4}, DataType::kBool);
  expect_infer_error(OpKind::kGemm, GemmAttrs{}, {&a3d, &b34}, 1, "Gemm rank");
  expect_infer_error(OpKind::kGemm, GemmAttrs{}, {&a23, &b44}, 1, "Gemm K");
  expect_infer_error(OpKind::kGemm, GemmAttrs{}, {&a23, &b34, &c32}, 1, "Gemm C");
  expect_infer_error(OpKind::kGemm, GemmAttrs{}, {&a23, &bi}, 1, "Gemm dtype mix");
  expect_infer_error(OpKind::kGemm, GemmAttrs{}, {&ab, &bb}, 1, "Gemm bool");
  expect_infer_error(OpKind::kGemm, GemmAttrs{1, 1, 2, 0}, {&a23, &b34}, 1, "transA 2");
  Tensor m234 = shaped({2, 3, 4}), m345 = shaped({3, 4, 5}), s0 = shaped({}), i8a = shaped({2, 3}, DataType::kInt8),
         i8b = shaped({3, 4}, DataType::kInt8);
  expect_infer_error(OpKind::kMatMul, NoAttrs{}, {&a23, &b44}, 1, "MatMul K");
  expect_infer_error(OpKind::kMatMul, NoAttrs{}, {&m234, &m345}, 1, "MatMul batch");
  expect_infer_error(OpKind::kMatMul, NoAttrs{}, {&s0, &b34}, 1, "MatMul scalar");
  expect_infer_error(OpKind::kMatMul, NoAttrs{}, {&i8a, &i8b}, 1, "MatMul int8");
}

}  // namespace
}  // namespace kiln
