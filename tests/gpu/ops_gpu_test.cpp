// The elementwise family's GPU kernels beyond the op-case table (tests/ops, run against the CPU by
// op_cases_gpu_test): training-mode Dropout, the device target, errors (an element type a kernel
// does not take, an integer division by zero, more than eight dims that cannot merge), and
// outputs beyond 2^31 elements (64-bit indices). Skips without a GPU.
#include <algorithm>
#include <iostream>
#include <regex>

#include "gpu_harness.h"

namespace kiln::gpu_test {
namespace {

// Training-mode Dropout with ratio 0 is the identity with an all-true mask (PyTorch 1.13 exports
// Swin-T so); with another ratio, or none (0.5), the device reports an error instead of copying.
// training_mode and ratio are run-time inputs here, which only the device reads.
TEST(GpuDropout, TrainingModeCopiesWithRatioZeroOnly) {
  KILN_SKIP_WITHOUT_GPU();
  for (DT dt : {DT::kFloat32, DT::kFloat16, DT::kFloat64}) {
    SCOPED_TRACE(std::string("dtype ") + std::string(dtype_name(dt)));
    const HostTensor x = rand_tensor(dt, {1031}, -9, 9), training = make(DT::kBool, {}, {1});
    const std::vector<OutputType> types{{dt, {1031}}, {DT::kBool, {1031}}};
    for (double zero : {0.0, -0.0}) {
      const std::vector<HostTensor> y =
          run_gpu(OpKind::kDropout, NoAttrs{}, {x, make(dt, {}, {zero}), training}, types, GpuMode::kDirect);
      expect_match(y[0], x, Tolerance{}, "Dropout output");
      expect_match(y[1], make(DT::kBool, {1031}, std::vector<double>(1031, 1.0)), Tolerance{}, "Dropout mask");
    }
    for (const HostTensor& ratio : {make(dt, {}, {0.3}), make(dt, {}, {1e-3}), absent()})
      EXPECT_THROW(run_gpu(OpKind::kDropout, NoAttrs{}, {x, ratio, training}, types, GpuMode::kDirect), Error);
    // Not training: any ratio copies.
    const std::vector<HostTensor> y = run_gpu(
        OpKind::kDropout, NoAttrs{}, {x, make(dt, {}, {0.3}), make(DT::kBool, {}, {0})}, types, GpuMode::kDirect);
    expect_match(y[0], x, Tolerance{}, "Dropout output");
  }
}

// ---- device, errors ----------------------------------------------------------------------------
TEST(GpuDevice, TargetNamesTheComputeCapability) {
  KILN_SKIP_WITHOUT_GPU();
  const std::string t = gpu::gpu_target();
  EXPECT_TRUE(std::regex_match(t, std::regex("sm_[0-9]+"))) << t;
  std::cout << "[ device   ] " << t << "\n";
}

// Bool arithmetic (which shape inference and the CPU kernel reject too) throws naming the backend.
TEST(GpuErrors, UnsupportedDtypeThrowsNamingTheBackend) {
  KILN_SKIP_WITHOUT_GPU();
  const HostTensor a = rand_tensor(DT::kBool, {4}, 0, 1);
  expect_cuda_backend_error(OpKind::kAdd, NoAttrs{}, {a, a}, {OutputType{DT::kBool, {4}}});
}

// What the CPU kernels throw for, the GPU kernels report through the step's error flag: an
// integer divisor of 0 (Div, Mod) and an integer 0 raised to a negative power.
TEST(GpuErrors, IntegerDivisionByZeroIsADeviceError) {
  KILN_SKIP_WITHOUT_GPU();
  struct Bad {
    OpKind kind;
    Attrs attrs;
    HostTensor a, b;
  };
  const std::vector<Bad> bad = {
      {OpKind::kDiv, NoAttrs{}, make(DT::kInt32, {4}, {1, 2, 3, 4}), make(DT::kInt32, {4}, {1, 0, 1, 1})},
      {OpKind::kDiv, NoAttrs{}, make(DT::kUInt8, {3}, {1, 2, 3}), make(DT::kUInt8, {}, {0})},
      {OpKind::kMod, ModAttrs{0}, make(DT::kInt64, {3}, {5, -5, 7}), make(DT::kInt64, {3}, {2, 0, 3})},
      {OpKind::kMod, ModAttrs{1}, make(DT::kInt16, {2}, {5, -5}), make(DT::kInt16, {2}, {0, 3})},
      {OpKind::kPow, NoAttrs{}, make(DT::kInt32, {3}, {2, 0, 3}), make(DT::kInt64, {}, {-1})},
  };
  for (const Bad& c : bad) {
    const std::vector<OutputType> types = infer_shapes(c.kind, c.attrs, infer_views(c.kind, {c.a, c.b}), 1);
    EXPECT_THROW((void)run_cpu(c.kind, c.attrs, {c.a, c.b}, types), Error) << describe(c.kind, {c.a, c.b});
    try {
      (void)run_gpu(c.kind, c.attrs, {c.a, c.b}, types, GpuMode::kDirect);
      ADD_FAILURE() << describe(c.kind, {c.a, c.b}) << " should report a device error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), gpu::gpu_error_message(gpu::kGpuBadValue)) << describe(c.kind, {c.a, c.b});
    }
  }
}

TEST(GpuErrors, MoreThanEightUnmergeableDimsThrow) {
  KILN_SKIP_WITHOUT_GPU();
  const HostTensor a = rand_tensor(DT::kFloat32, {2, 1, 2, 1, 2, 1, 2, 1, 2}, -1, 1);
  const HostTensor b = rand_tensor(DT::kFloat32, {1, 2, 1, 2, 1, 2, 1, 2, 1}, -1, 1);
  try {
    (void)run_gpu(OpKind::kAdd, NoAttrs{}, {a, b}, {OutputType{DT::kFloat32, Shape(9, 2)}}, GpuMode::kDirect);
    FAIL() << "a 9-dim broadcast should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most 8"), std::string::npos) << e.what();
  }
}

// ---- beyond 2^31 elements ----------------------------------------------------------------------
// float16 [3, M] + [3, 1] with 3M > 2^31: the strided kernel's 64-bit flavour; and [3M] + [] the
// flat kernel past 2^31. Inputs are filled on the device (every half 0x3C3C = 1.05859375) and only
// samples are copied back: near the start, the row boundaries, 2^31 and the end.
TEST(GpuLarge, OutputsBeyond2To31Elements) {
  KILN_SKIP_WITHOUT_GPU();
  const int64_t m = 715827883, n = 3 * m;  // n = 2^31 + 1
  static_assert(3 * int64_t{715827883} > (int64_t{1} << 31));
  size_t free_b = 0, total_b = 0;
  KILN_CUDA_OK(cudaMemGetInfo(&free_b, &total_b));
  const size_t need = static_cast<size_t>(n) * 2 * 2 + (size_t{1} << 30);
  if (free_b < need) GTEST_SKIP() << "needs " << (need >> 20) << " MiB of free GPU memory, has " << (free_b >> 20);
  void *x = nullptr, *y = nullptr, *b = nullptr;
  KILN_CUDA_OK(cudaMalloc(&x, static_cast<size_t>(n) * 2));
  KILN_CUDA_OK(cudaMalloc(&y, static_cast<size_t>(n) * 2));
  KILN_CUDA_OK(cudaMalloc(&b, 16));
  KILN_CUDA_OK(cudaMemset(x, 0x3C, static_cast<size_t>(n) * 2));
  const uint16_t rows[3] = {Half(1.0f).bits, Half(2.0f).bits, Half(3.0f).bits};
  KILN_CUDA_OK(cudaMemcpy(b, rows, sizeof(rows), cudaMemcpyHostToDevice));
  const float x0 = Half::to_float(0x3C3C);

  auto sample = [&](int64_t i) {
    uint16_t h = 0;
    EXPECT_EQ(cudaMemcpy(&h, static_cast<uint16_t*>(y) + i, 2, cudaMemcpyDeviceToHost), cudaSuccess);
    return Half::to_float(h);
  };
  std::vector<int64_t> at;
  for (int64_t base : {int64_t{0}, m - 4, 2 * m - 4, (int64_t{1} << 31) - 4, n - 8})
    for (int64_t i = base; i < base + 8 && i < n; ++i) at.push_back(i);

  gpu::GpuEnv env;
  const Shape s2{3, m}, sb{3, 1}, s1{n}, s0{};
  {  // strided: [3, M] + [3, 1]
    KILN_CUDA_OK(cudaMemset(y, 0xFF, static_cast<size_t>(n) * 2));
    const std::vector<TensorView> in = {{DT::kFloat16, s2, x}, {DT::kFloat16, sb, b}};
    const std::vector<TensorView> out = {{DT::kFloat16, s2, y}};
    gpu::gpu_kernel(OpKind::kAdd)(OpKind::kAdd, NoAttrs{}, in, out, env);
    KILN_CUDA_OK(cudaDeviceSynchronize());
    for (int64_t i : at) EXPECT_EQ(sample(i), float(Half(x0 + float(i / m + 1)))) << "strided, element " << i;
  }
  {  // flat: [3M] + [] (the scalar 1.0)
    KILN_CUDA_OK(cudaMemset(y, 0xFF, static_cast<size_t>(n) * 2));
    const std::vector<TensorView> in = {{DT::kFloat16, s1, x}, {DT::kFloat16, s0, b}};
    const std::vector<TensorView> out = {{DT::kFloat16, s1, y}};
    gpu::gpu_kernel(OpKind::kAdd)(OpKind::kAdd, NoAttrs{}, in, out, env);
    KILN_CUDA_OK(cudaDeviceSynchronize());
    for (int64_t i : at) EXPECT_EQ(sample(i), float(Half(x0 + 1.0f))) << "flat, element " << i;
  }
  cudaFree(x);
  cudaFree(y);
  cudaFree(b);
}

}  // namespace
}  // namespace kiln::gpu_test
