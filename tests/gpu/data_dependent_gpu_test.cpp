// Data-dependent shapes (decision 56) on a GPU: tests/cpu/data_dependent_cases.h's runs of one
// context (each count read back, steps re-inferred, outputs copied at the run's size), with and
// without a CUDA graph asked for, and enqueue inside a caller's stream capture refused.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "../cpu/data_dependent_cases.h"
#include "gpu_harness.h"
#include "runtime/cuda/device.h"

namespace kiln {
namespace {

using namespace kiln::test;

TEST(DataDependentGpu, NonZeroShapesFollowEachRunOnOneContext) {
  KILN_SKIP_WITHOUT_GPU();
  check_nonzero_runs(*build_for(nonzero_model(), gpu::gpu_target()));
}

TEST(DataDependentGpu, NonMaxSuppressionKeepsMoreAfterFewerAndNone) {
  KILN_SKIP_WITHOUT_GPU();
  check_nms_runs(*build_for(nms_model(), gpu::gpu_target()));
}

TEST(DataDependentGpu, ShapesTakenAsValuesFollowEachRun) {
  KILN_SKIP_WITHOUT_GPU();
  check_shape_value_runs(*build_for(shape_value_model(), gpu::gpu_target()));
}

TEST(DataDependentGpu, IfOnTheDataTakesEachBranchOnOneContext) {
  KILN_SKIP_WITHOUT_GPU();
  check_if_on_data_runs(*build_for(if_on_data_model(), gpu::gpu_target()));
}

TEST(DataDependentGpu, CudaGraphOptionRunsStepByStepAndCaptureIsRefused) {
  KILN_SKIP_WITHOUT_GPU();
  const auto e = build_for(nonzero_model(), gpu::gpu_target());
  ContextOptions o;
  o.cuda_graph = true;
  auto ctx = e->create_context(o);
  std::vector<float> x(12, 0.f);
  for (int hits = 0; hits < 4; ++hits) {  // graphs would replay the first run's count
    x[static_cast<size_t>(hits * 3)] = 2.f;
    ctx->set_input("x", x.data(), x.size() * 4);
    ctx->run();
    EXPECT_EQ(ctx->output_shape("coords"), (std::vector<int64_t>{hits + 1, 2}));
  }
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  try {
    ctx->enqueue(s);
    ADD_FAILURE() << "enqueue inside a stream capture did not throw";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("cannot be recorded into a CUDA graph"), std::string::npos) << err.what();
  }
  cudaGraph_t g = nullptr;
  cudaStreamEndCapture(s, &g);
  if (g) cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace kiln
