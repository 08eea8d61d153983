// The loss family (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss): shape inference + CPU
// kernels against float64 references written here, on random inputs, several dtypes, with and
// without a thread pool; outputs are poisoned before the kernel runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/shape_infer.h"
#include "exact_op_util.h"
#include "op_test_util.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln {
namespace {

using namespace kiln::test;  // Shape, Tensor, make, numel, random_tensor, infer, tolerance, str

// ---- losses --------------------------------------------------------------------------------

// loss (and log_prob for SCE) per the ONNX definition, in double.
std::vector<double> loss_ref(bool sce, const Tensor& x, const Tensor& t, const Tensor* w, const LossAttrs& a,
                             std::vector<double>* log_prob) {
  const int64_t N = x.shape[0], C = x.shape[1], D = numel(x.shape) / std::max<int64_t>(N * C, 1);
  std::vector<double> v = x.values(), lab = t.values(), wt = w ? w->values() : std::vector<double>();
  if (sce) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t d = 0; d < D; ++d) {
        double mx = -INFINITY, s = 0;
        for (int64_t c = 0; c < C; ++c) mx = std::max(mx, v[(n * C + c) * D + d]);
        for (int64_t c = 0; c < C; ++c) s += std::exp(v[(n * C + c) * D + d] - mx);
        for (int64_t c = 0; c < C; ++c) v[(n * C + c) * D + d] -= mx + std::log(s);
      }
    *log_prob = v;
  }
  std::vector<double> l(static_cast<size_t>(N * D)), ws(l.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) {
      const auto c = static_cast<int64_t>(lab[n * D + d]);
      if (a.ignore_index != kNoIgnoreIndex && c == a.ignore_index) continue;
      ws[n * D + d] = w ? wt[c] : 1.0;
      l[n * D + d] = -ws[n * D + d] * v[(n * C + c) * D + d];
    }
  if (a.reduction == LossReduction::kNone) return l;
  double s = 0, sw = 0;
  for (size_t i = 0; i < l.size(); ++i) s += l[i], sw += ws[i];
  return {a.reduction == LossReduction::kSum ? s : s / sw};
}

TEST(Loss, MatchesReference) {
  std::mt19937 rng(7);
  cpu::ThreadPool pool(3);
  const std::vector<Shape> shapes = {{3, 5},          {1, 1},      {4, 3, 7}, {2, 4, 3, 5},
                                     {2, 3, 2, 1, 3}, {3, 6, 700}, {0, 3},    {2, 3, 0}};
  int cases = 0;
  for (bool sce : {false, true})
    for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16})
      for (const Shape& xs : shapes)
        for (LossReduction red : {LossReduction::kNone, LossReduction::kSum, LossReduction::kMean})
          for (int variant = 0; variant < 4; ++variant) {
            // variant: 0 plain, 1 weights, 2 ignore_index inside [0, C), 3 weights + negative ignore_index
            const int64_t C = xs[1];
            Shape ts{xs[0]};
            ts.insert(ts.end(), xs.begin() + 2, xs.end());
            LossAttrs a;
            a.reduction = red;
            if (variant == 2) a.ignore_index = C - 1;
            if (variant == 3) a.ignore_index = -1;
            const DataType tdt = (cases % 2) ? DataType::kInt32 : DataType::kInt64;
            Tensor x = random_tensor(dt, xs, rng, -3, 3);
            Tensor t = random_tensor(tdt, ts, rng, variant == 3 ? -1 : 0, static_cast<double>(C - 1));
            Tensor w = random_tensor(dt, {C}, rng, 0.1, 2);
            const bool use_w = variant == 1 || variant == 3;
            std::vector<const Tensor*> in{&x, &t};
            if (use_w) in.push_back(&w);
            for (size_t n_out = 1; n_out <= (sce ? 2u : 1u); ++n_out) {
              const OpKind kind = sce ? OpKind::kSoftmaxCrossEntropyLoss : OpKind::kNegativeLogLikelihoodLoss;
              std::vector<Tensor> out = run(kind, a, in, n_out, cases % 3 ? &pool : nullptr);
              std::vector<double> lp;
              std::vector<double> want = loss_ref(sce, x, t, use_w ? &w : nullptr, a, &lp);
              const std::string what = std::string(sce ? "SCE " : "NLL ") + str(xs) + " " +
                                       std::string(dtype_name(dt)) + " red " + std::to_string(int(red)) + " v" +
                                       std::to_string(variant);
              ASSERT_EQ(out[0].shape, red == LossReduction::kNone ? ts : Shape{}) << what;
              expect_near(out[0].values(), want, tolerance(dt) * (red == LossReduction::kNone ? 1 : 10), what);
              if (n_out == 2) {
                ASSERT_EQ(out[1].shape, xs) << what;
                expect_near(out[1].values(), lp, tolerance(dt) * 4, what + " log_prob");
              }
              ++cases;
            }
          }
  EXPECT_GT(cases, 400);
}

TEST(Loss, MeanOfNothingIsNaNAndBadLabelThrows) {
  Tensor x = make(DataType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor t = make(DataType::kInt64, {2}, {1, 1});
  LossAttrs a;
  a.ignore_index = 1;
  EXPECT_TRUE(std::isnan(run(OpKind::kNegativeLogLikelihoodLoss, a, {&x, &t}, 1)[0].values()[0]));
  a.reduction = LossReduction::kSum;
  EXPECT_EQ(run(OpKind::kSoftmaxCrossEntropyLoss, a, {&x, &t}, 1)[0].values()[0], 0.0);
  a.ignore_index = kNoIgnoreIndex;
  // Known values: NLL sum = -(2 + 5); SCE mean of log-sum-exp minus picked logit.
  EXPECT_DOUBLE_EQ(run(OpKind::kNegativeLogLikelihoodLoss, a, {&x, &t}, 1)[0].values()[0], -7.0);
  for (double bad : {3.0, -1.0}) {
    Tensor tb = make(DataType::kInt32, {2}, {0, bad});
    EXPECT_THROW(run(OpKind::kNegativeLogLikelihoodLoss, a, {&x, &tb}, 1), Error);
    EXPECT_THROW(run(OpKind::kSoftmaxCrossEntropyLoss, a, {&x, &tb}, 2), Error);
  }
}

TEST(Loss, InferenceRejectsBadInputs) {
  LossAttrs a;
  Tensor x = make(DataType::kFloat32, {2, 3, 4}, std::vector<double>(24, 0));
  Tensor t = make(DataType::kInt64, {2, 4}, std::vector<double>(8, 0));
  Tensor t_bad = make(DataType::kInt64, {2, 3}, std::vector<double>(6, 0));
  Tensor t_rank = make(DataType::kInt64, {2}, std::vector<double>(2, 0));
  Tensor t_float = make(DataType::kFloat32, {2, 4}, std::vector<double>(8, 0));
  Tensor w_bad = make(DataType::kFloat32, {4}, std::vector<double>(4, 1));
  Tensor w_type = make(DataType::kFloat64, {3}, std::vector<double>(3, 1));
  Tensor x1 = make(DataType::kFloat32, {3}, std::vector<double>(3, 0));
  Tensor xi = make(DataType::kInt32, {2, 3, 4}, std::vector<double>(24, 0));
  for (OpKind k : {OpKind::kNegativeLogLikelihoodLoss, OpKind::kSoftmaxCrossEntropyLoss}) {
    EXPECT_NO_THROW(infer(k, a, {&x, &t}, 1));
    EXPECT_THROW(infer(k, a, {&x, &t_bad}, 1), Error);
    EXPECT_THROW(infer(k, a, {&x, &t_rank}, 1), Error);
    EXPECT_THROW(infer(k, a, {&x, &t_float}, 1), Error);
    EXPECT_THROW(infer(k, a, {&x, &t, &w_bad}, 1), Error);
    EXPECT_THROW(infer(k, a, {&x, &t, &w_type}, 1), Error);
    EXPECT_THROW(infer(k, a, {&x1, &t_rank}, 1), Error);
    EXPECT_THROW(infer(k, a, {&xi, &t}, 1), Error);
    LossAttrs bad;
    bad.reduction = static_cast<LossReduction>(7);
    EXPECT_THROW(infer(k, bad, {&x, &t}, 1), Error);
  }
  EXPECT_THROW(infer(OpKind::kNegativeLogLikelihoodLoss, a, {&x, &t}, 2), Error);
}

}  // namespace
}  // namespace kiln
