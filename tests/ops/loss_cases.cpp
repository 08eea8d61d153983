// The loss family's op cases (tests/ops/op_case.h): NegativeLogLikelihoodLoss and
// SoftmaxCrossEntropyLoss with every reduction, with and without weights and ignore_index
// (including a negative one), both target types, and every float type.
#include "ops/op_case.h"

namespace kiln::optest {
namespace {

using InputSets = std::vector<Inputs>;

// ---- losses ----------------------------------------------------------------------------------
const std::vector<Shape> kLossShapes = {{3, 5},          {1, 1},      {4, 3, 7}, {2, 4, 3, 5},
                                        {2, 3, 2, 1, 3}, {3, 6, 700}, {0, 3},    {2, 3, 0}};

// ignore: kNoIgnoreIndex, 2 (a class of most shapes), or -1 (targets then include -1).
MixedCase loss_case(OpKind kind, LossReduction red, int64_t ignore, size_t n_out) {
  LossAttrs a;
  a.reduction = red;
  a.ignore_index = ignore;
  const std::string ig = ignore == kNoIgnoreIndex ? "" : ignore < 0 ? "_ignore_neg" : "_ignore2";
  return {std::string(op_name(kind)) + "_" + std::string(kEnumNames<LossReduction>[static_cast<size_t>(red)]) + ig +
              (n_out > 1 ? "_log_prob" : ""),
          kind,
          a,
          [ignore] {
            InputSets s;
            int k = 0;
            for (DT dt : {DT::kFloat32, DT::kFloat16, DT::kFloat64, DT::kBFloat16})
              for (const Shape& xs : kLossShapes)
                for (bool weights : {false, true}) {
                  const int64_t C = xs[1];
                  Shape ts{xs[0]};
                  ts.insert(ts.end(), xs.begin() + 2, xs.end());
                  const DT tdt = k++ % 2 ? DT::kInt32 : DT::kInt64;
                  Inputs in{rand_tensor(dt, xs, -3, 3), rand_tensor(tdt, ts, ignore == -1 ? -1 : 0, double(C - 1))};
                  if (weights) in.push_back(rand_tensor(dt, {C}, 0.1, 2));
                  s.push_back(std::move(in));
                }
            return s;
          },
          Accuracy::kTranscendental,
          n_out};
}

std::vector<MixedCase> all_cases() {
  std::vector<MixedCase> c;
  for (OpKind k : {OpKind::kNegativeLogLikelihoodLoss, OpKind::kSoftmaxCrossEntropyLoss})
    for (LossReduction red : {LossReduction::kNone, LossReduction::kSum, LossReduction::kMean})
      for (int64_t ignore : {kNoIgnoreIndex, int64_t{2}, int64_t{-1}})
        for (size_t n_out = 1; n_out <= (k == OpKind::kSoftmaxCrossEntropyLoss ? 2u : 1u); ++n_out)
          c.push_back(loss_case(k, red, ignore, n_out));
  return c;
}

}  // namespace

std::vector<OpCase> loss_cases() {
  std::vector<OpCase> out;
  for (const MixedCase& c : all_cases()) out.push_back(c.op_case());
  return out;
}

}  // namespace kiln::optest
