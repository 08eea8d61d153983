// kiln.QConv and kiln.QMatMul on the GPU beyond the op-case table (tests/ops/qfused_cases.cpp, run
// against the CPU by op_cases_gpu_test): a sum that wraps past int32 on both paths, and a kernel
// called without the host copies of its constant parameters. Skips without a GPU.
#include <algorithm>

#include "gpu_harness.h"

namespace kiln::gpu_test {
namespace {

using Inputs = std::vector<HostTensor>;

const GpuMode kModes[] = {GpuMode::kDirect, GpuMode::kMisaligned, GpuMode::kCaptured};

// 140000 products of -128 * -128 pass 2^31: both paths wrap like int32 accumulators.
TEST(GpuQMatMul, AccumulatorWrapsLikeTheCpu) {
  KILN_SKIP_WITHOUT_GPU();
  for (DT w : {DT::kInt8, DT::kUInt8}) {  // tensor cores, then the generic path (uint8 weights, no zero point)
    const Inputs in{make(DT::kInt8, {2, 140000}, {-128}), make(DT::kFloat32, {}, {1}), absent(),
                    make(w, {3, 140000}, {w == DT::kInt8 ? -128.0 : 255.0}), make(DT::kFloat32, {}, {1})};
    for (GpuMode m : kModes) check_op(OpKind::kQMatMul, QMatMulAttrs{}, in, 1, Accuracy::kExact, m);
  }
}

TEST(GpuQConv, ParametersMustBeConstants) {
  KILN_SKIP_WITHOUT_GPU();
  // The harness gives host copies of the op's constant inputs only; a kernel called without them
  // (not possible from an engine) says which input it needs.
  const Inputs in{rand_q(DT::kInt8, {1, 2, 3, 3}), make(DT::kFloat32, {}, {0.1}), absent(),
                  rand_q(DT::kInt8, {2, 2, 1, 1}), make(DT::kFloat32, {2}, {0.1})};
  std::vector<TensorView> views;
  for (const HostTensor& t : in) views.push_back(t.view(nullptr));
  const std::vector<OutputType> types = infer_shapes(OpKind::kQConv, QConvAttrs{}, infer_views(OpKind::kQConv, in), 1);
  EXPECT_EQ(types[0].dtype, DT::kFloat32);
  GpuResources& res = GpuResources::get();
  Stream s;
  std::unique_ptr<gpu::StepState> state;
  const std::vector<const void*> no_host(in.size(), nullptr);
  gpu::GpuEnv env = res.env(s.get(), no_host, &state);
  std::vector<TensorView> outs = {TensorView{DT::kFloat32, types[0].shape, nullptr, true}};
  try {
    gpu::gpu_kernel(OpKind::kQConv)(OpKind::kQConv, QConvAttrs{}, views, outs, env);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kiln.QConv: input 1 must be a build-time constant"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiln::gpu_test
