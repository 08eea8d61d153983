// The loss family's GPU kernels beyond the op-case table (tests/ops/loss_cases.cpp, run against the
// CPU by op_cases_gpu_test): the device error of a target class outside [0, C), and an ignored
// target of any value. Skips without a GPU.
#include "gpu_harness.h"

namespace kiln::gpu_test {
namespace {

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
