// The reduce family's GPU kernels beyond the op-case table (tests/ops/reduce_cases.cpp, run against
// the CPU by op_cases_gpu_test): the element types and axes the kernels reject. Skips without a
// GPU.
#include "gpu_harness.h"

namespace kiln::gpu_test {
namespace {

HostTensor i64(std::vector<double> v) { return make(DT::kInt64, {static_cast<int64_t>(v.size())}, v); }

// ---- errors ------------------------------------------------------------------------------------
// The types the CPU kernel rejects too: Reduce* takes no 16-bit integers, and no 8-bit ones
// except for Max and Min.
TEST(GpuReduceErrors, TypesTheCpuRejectsThrowNamingTheBackend) {
  KILN_SKIP_WITHOUT_GPU();
  const HostTensor b = rand_tensor(DT::kInt8, {4, 3}, -5, 5);
  expect_cuda_backend_error(OpKind::kReduceSum, ReduceAttrs{}, {b, i64({1})}, {OutputType{DT::kInt8, {4, 1}}});
  const HostTensor h = rand_tensor(DT::kInt16, {4, 3}, -5, 5);
  expect_cuda_backend_error(OpKind::kReduceMax, ReduceAttrs{}, {h, i64({1})}, {OutputType{DT::kInt16, {4, 1}}});
}

TEST(GpuReduceErrors, BadAxesThrow) {
  KILN_SKIP_WITHOUT_GPU();
  const HostTensor x = rand_tensor(DT::kFloat32, {4, 3}, -1, 1);
  for (const HostTensor& axes : {i64({2}), i64({1, 1}), i64({-3})}) {
    EXPECT_THROW((void)run_gpu(OpKind::kReduceSum, ReduceAttrs{}, {x, axes}, {OutputType{DT::kFloat32, {4, 1}}},
                               GpuMode::kDirect),
                 Error);
  }
}

}  // namespace
}  // namespace kiln::gpu_test
