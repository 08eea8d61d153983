// The loss family on the GPU against the CPU kernels (the reference): NegativeLogLikelihoodLoss and
// SoftmaxCrossEntropyLoss (double inside, like the CPU, compared with the transcendental
// tolerance), every input set direct, misaligned and under stream capture; plus the device error
// of a target class outside [0, C). Skips without a GPU.
#include <algorithm>

#include "gpu_harness.h"

namespace kiln::gpu_test {
namespace {

using Inputs = std::vector<HostTensor>;
using InputSets = std::vector<Inputs>;

struct OpCase {
  std::string name;
  OpKind kind;
  Attrs attrs;
  std::function<InputSets()> inputs;
  Accuracy acc = Accuracy::kExact;
  size_t n_out = 1;
};

const GpuMode kModes[] = {GpuMode::kDirect, GpuMode::kMisaligned, GpuMode::kCaptured};

// ---- losses ----------------------------------------------------------------------------------
const std::vector<Shape> kLossShapes = {{3, 5},          {1, 1},      {4, 3, 7}, {2, 4, 3, 5},
                                        {2, 3, 2, 1, 3}, {3, 6, 700}, {0, 3},    {2, 3, 0}};

// ignore: kNoIgnoreIndex, 2 (a class of most shapes), or -1 (targets then include -1).
OpCase loss_case(OpKind kind, LossReduction red, int64_t ignore, size_t n_out) {
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

std::vector<OpCase> all_cases() {
  std::vector<OpCase> c;
  for (OpKind k : {OpKind::kNegativeLogLikelihoodLoss, OpKind::kSoftmaxCrossEntropyLoss})
    for (LossReduction red : {LossReduction::kNone, LossReduction::kSum, LossReduction::kMean})
      for (int64_t ignore : {kNoIgnoreIndex, int64_t{2}, int64_t{-1}})
        for (size_t n_out = 1; n_out <= (k == OpKind::kSoftmaxCrossEntropyLoss ? 2u : 1u); ++n_out)
          c.push_back(loss_case(k, red, ignore, n_out));
  return c;
}

const std::vector<OpCase>& cases() {
  static const std::vector<OpCase> c = all_cases();
  return c;
}

class GpuLoss : public testing::TestWithParam<OpCase> {};

TEST_P(GpuLoss, MatchesCpu) {
  KILN_SKIP_WITHOUT_GPU();
  const OpCase& c = GetParam();
  rng().seed(static_cast<uint32_t>(std::hash<std::string>{}(c.name)));
  const InputSets sets = c.inputs();
  for (size_t i = 0; i < sets.size(); ++i) {
    SCOPED_TRACE("input set " + std::to_string(i));
    for (GpuMode m : kModes) check_op(c.kind, c.attrs, sets[i], c.n_out, c.acc, m);
  }
}

void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

INSTANTIATE_TEST_SUITE_P(Loss, GpuLoss, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<OpCase>& info) { return info.param.name; });

TEST(GpuLossCoverage, EveryOpHasCases) {
  KILN_SKIP_WITHOUT_GPU();
  for (const gpu::GpuKernelEntry& e : gpu::loss_gpu_kernels()) {
    const bool tested = std::any_of(cases().begin(), cases().end(), [&](const OpCase& c) { return c.kind == e.kind; });
    EXPECT_TRUE(tested) << op_name(e.kind) << " has a GPU kernel but no case here";
  }
}

// ---- device errors ---------------------------------------------------------------------------
std::vector<OutputType> infer(OpKind kind, const Attrs& attrs, const Inputs& ins, size_t n_out) {
  std::vector<TensorView> iv;
  for (const HostTensor& t : ins) iv.push_back(t.view(nullptr));
  return infer_shapes(kind, attrs, iv, n_out);
}

TEST(GpuLossErrors, TargetOutsideTheClassesIsAnIndexError) {
  KILN_SKIP_WITHOUT_GPU();
  const HostTensor x = rand_tensor(DT::kFloat32, {2, 3, 4}, -1, 1);
  for (OpKind kind : {OpKind::kNegativeLogLikelihoodLoss, OpKind::kSoftmaxCrossEntropyLoss})
    for (LossReduction red : {LossReduction::kNone, LossReduction::kMean})
      for (DT tdt : {DT::kInt32, DT::kInt64})
        for (double bad : {3.0, -1.0, 1e9}) {
          LossAttrs a;
          a.reduction = red;
          a.ignore_index = -2;  // an ignore_index that does not cover the bad label
          HostTensor t = make(tdt, {2, 4}, {0, 1, 2, 0, 1, 2, 0, 1});
          set(t, 5, bad);
          const Inputs ins{x, t};
          const size_t n_out = kind == OpKind::kSoftmaxCrossEntropyLoss ? 2 : 1;
          const std::vector<OutputType> types = infer(kind, a, ins, n_out);
          for (GpuMode m : {GpuMode::kDirect, GpuMode::kCaptured}) {
            try {
              (void)run_gpu(kind, a, ins, types, m);
              ADD_FAILURE() << op_name(kind) << ": target " << bad << " should fail";
            } catch (const Error& e) {
              EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
            }
          }
        }
}

TEST(GpuLossErrors, IgnoredTargetMayBeAnyValue) {
  KILN_SKIP_WITHOUT_GPU();
  LossAttrs a;
  a.ignore_index = -100;
  HostTensor t = make(DT::kInt64, {4}, {0, -100, 2, -100});
  check_op(OpKind::kSoftmaxCrossEntropyLoss, a, {rand_tensor(DT::kFloat32, {4, 3}, -2, 2), t}, 2,
           Accuracy::kTranscendental);
}

}  // namespace
}  // namespace kiln::gpu_test
