// The pool, norm and resize families' GPU kernels beyond the op-case table
// (tests/ops/pool_norm_resize_cases.cpp, run against the CPU by op_cases_gpu_test): the errors the
// GPU kernels raise for shapes and types they do not take, and Resize without the host copies of
// its constant inputs. Skips without a GPU.
#include "gpu_harness.h"

namespace kiln::gpu_test {
namespace {

using Inputs = std::vector<HostTensor>;
using K = OpKind;

HostTensor f32_vec(const std::vector<double>& v) { return make(DT::kFloat32, {int64_t(v.size())}, v); }

// ---- errors --------------------------------------------------------------------------------------
// The GPU kernel alone (shape inference accepts these) must throw kiln::Error.
void expect_gpu_error(OpKind kind, const Attrs& attrs, const Inputs& ins, size_t n_out, const std::string& needle) {
  std::vector<TensorView> iv;
  for (const HostTensor& t : ins) iv.push_back(t.view(const_cast<uint8_t*>(t.bytes.data())));
  expect_cuda_backend_error(kind, attrs, ins, infer_shapes(kind, attrs, iv, n_out), needle);
}

TEST(PoolGpuErrors, UnsupportedShapesThrow) {
  KILN_SKIP_WITHOUT_GPU();
  PoolAttrs p4;
  p4.kernel_shape = {1, 1, 1, 2};
  expect_gpu_error(K::kMaxPool, p4, {rand_tensor(DT::kFloat32, {1, 1, 2, 2, 2, 2}, -1, 1)}, 1, "at most 3");
}

// Types that shape inference and the CPU kernels reject too, given to the GPU kernels directly.
TEST(PoolGpuErrors, UnsupportedTypesThrowNamingTheBackend) {
  KILN_SKIP_WITHOUT_GPU();
  PoolAttrs p;
  p.kernel_shape = {2, 2};
  const HostTensor i32 = rand_tensor(DT::kInt32, {1, 2, 4, 4}, -9, 9);
  expect_cuda_backend_error(K::kMaxPool, p, {i32}, {OutputType{DT::kInt32, {1, 2, 3, 3}}});
  expect_cuda_backend_error(K::kAveragePool, p, {rand_tensor(DT::kInt8, {1, 2, 4, 4}, -9, 9)},
                            {OutputType{DT::kInt8, {1, 2, 3, 3}}});
  expect_cuda_backend_error(K::kGlobalAveragePool, NoAttrs{}, {i32}, {OutputType{DT::kInt32, {1, 2, 1, 1}}});
  expect_cuda_backend_error(K::kLayerNormalization, LayerNormAttrs{}, {i32, rand_tensor(DT::kInt32, {4}, -1, 1)},
                            {OutputType{DT::kInt32, {1, 2, 4, 4}}});
  ResizeAttrs r;
  r.mode = ResizeMode::kLinear;
  expect_cuda_backend_error(K::kResize, r,
                            {rand_tensor(DT::kBool, {1, 1, 2, 2}, 0, 1), absent(), f32_vec({1, 1, 2, 2})},
                            {OutputType{DT::kBool, {1, 1, 4, 4}}});
}

// Resize's scales and sizes come from the constant inputs' host copies: without them it throws.
TEST(PoolGpuErrors, ResizeNeedsHostCopies) {
  KILN_SKIP_WITHOUT_GPU();
  const HostTensor scales = f32_vec({1, 1, 2, 2});
  const Shape xs{1, 1, 2, 2}, ys{1, 1, 4, 4};
  DeviceBuffer x(16, 0), s(16, 0), y(64, 0);
  s.upload(scales.bytes);
  const std::vector<TensorView> in = {
      {DT::kFloat32, xs, x.data()}, absent_tensor(), {DT::kFloat32, scales.shape, s.data()}};
  const std::vector<TensorView> out = {{DT::kFloat32, ys, y.data()}};
  std::unique_ptr<gpu::StepState> state;
  const std::vector<const void*> no_host_copies;
  gpu::GpuEnv env = GpuResources::get().env(nullptr, no_host_copies, &state);
  try {
    gpu::gpu_kernel(K::kResize)(K::kResize, ResizeAttrs{}, in, out, env);
    ADD_FAILURE() << "Resize without host copies should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("constant"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln::gpu_test
