// The tensor family's GPU kernels beyond the op-case table (tests/ops/tensor_cases.cpp, run against
// the CPU by op_cases_gpu_test): out-of-range indices must raise kiln::Error through the device
// error flag, in-place views copy nothing, and Expand/Concat beyond 2^31 elements. Skips without a
// GPU.
#include <algorithm>
#include <map>
#include <numeric>

#include "gpu_harness.h"

namespace kiln::gpu_test {
namespace {

const std::vector<GpuMode> kModes = {GpuMode::kDirect, GpuMode::kMisaligned, GpuMode::kCaptured};

HostTensor data(DT dt, Shape s) { return rand_tensor(dt, std::move(s), -9, 9); }

void check(OpKind kind, const OpRun& r, Accuracy acc, GpuMode mode) {
  check_op(kind, r.attrs, r.in, r.n_out, acc, mode);
}

// ---- errors ------------------------------------------------------------------------------------
// An index outside [-dim, dim) must come back as kiln::Error (the device error flag), in every
// mode, without writing outside the output (run_gpu checks the guards only when it returns, so
// the throw also shows that the kernel did not crash).
struct BadCase {
  std::string name;
  OpKind kind;
  OpRun run;
};

std::vector<BadCase> bad_cases() {
  const DT f = DT::kFloat32;
  const auto none = ScatterReduction::kNone, add = ScatterReduction::kAdd;
  return {
      {"Gather_past_end", OpKind::kGather, {AxisAttrs{0}, {data(f, {3, 2}), ints({0, 3})}}},
      {"Gather_before_start", OpKind::kGather, {AxisAttrs{1}, {data(f, {2, 4}), ints({-5}, DT::kInt32)}}},
      {"Gather_huge", OpKind::kGather, {AxisAttrs{0}, {data(f, {3, 2}), ints({int64_t{1} << 40})}}},
      {"Gather_empty_data", OpKind::kGather, {AxisAttrs{0}, {data(f, {0, 2}), ints({0})}}},
      {"Gather_empty_output", OpKind::kGather, {AxisAttrs{0}, {data(f, {3, 0}), ints({1, 3})}}},
      {"GatherElements", OpKind::kGatherElements, {AxisAttrs{1}, {data(f, {3, 4}), make(DT::kInt64, {1, 2}, {0, 4})}}},
      {"GatherElements_negative",
       OpKind::kGatherElements,
       {AxisAttrs{0}, {data(f, {3, 4}), make(DT::kInt32, {2, 2}, {0, -4, 1, 2})}}},
      {"GatherND", OpKind::kGatherND, {GatherNDAttrs{0}, {data(f, {2, 3}), make(DT::kInt64, {1, 2}, {1, 3})}}},
      {"GatherND_batch", OpKind::kGatherND, {GatherNDAttrs{1}, {data(f, {2, 3}), make(DT::kInt64, {2, 1}, {0, -4})}}},
      {"GatherND_empty_output",
       OpKind::kGatherND,
       {GatherNDAttrs{0}, {data(f, {2, 3, 0}), make(DT::kInt64, {1, 2}, {2, 0})}}},
      {"ScatterElements",
       OpKind::kScatterElements,
       {ScatterAttrs{0, none}, {data(f, {3, 2}), make(DT::kInt64, {1, 2}, {0, 3}), data(f, {1, 2})}}},
      {"ScatterElements_add",
       OpKind::kScatterElements,
       {ScatterAttrs{1, add}, {data(f, {3, 2}), make(DT::kInt32, {1, 2}, {-3, 0}), data(f, {1, 2})}}},
      {"ScatterND",
       OpKind::kScatterND,
       {ScatterAttrs{0, none}, {data(f, {4, 3}), make(DT::kInt64, {2, 1}, {1, 4}), data(f, {2, 3})}}},
      {"ScatterND_add",
       OpKind::kScatterND,
       {ScatterAttrs{0, add}, {data(f, {4, 3}), make(DT::kInt64, {1, 2}, {-5, 0}), data(f, {1})}}},
      {"ScatterND_empty_slice",
       OpKind::kScatterND,
       {ScatterAttrs{0, none}, {data(f, {4, 0}), make(DT::kInt64, {1, 1}, {4}), data(f, {1, 0})}}},
  };
}

TEST(TensorGpuErrors, OutOfRangeIndicesThrow) {
  KILN_SKIP_WITHOUT_GPU();
  for (const BadCase& c : bad_cases()) {
    const std::vector<OutputType> types = infer_shapes(c.kind, c.run.attrs, infer_views(c.kind, c.run.in), 1);
    EXPECT_THROW((void)run_cpu(c.kind, c.run.attrs, c.run.in, types), Error) << c.name << ": the CPU accepts it";
    for (GpuMode mode : kModes) {
      try {
        (void)run_gpu(c.kind, c.run.attrs, c.run.in, types, mode);
        ADD_FAILURE() << c.name << " " << mode_name(mode) << ": no error";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << c.name << ": " << e.what();
      }
    }
  }
  // The flag is per run: a good run after a bad one reports nothing.
  check(OpKind::kGather, {AxisAttrs{0}, {data(DT::kFloat32, {3, 2}), ints({0, 2})}}, Accuracy::kExact,
        GpuMode::kDirect);
}

// ---- in place, large ---------------------------------------------------------------------------
// A view op whose output shares the input's memory enqueues nothing (and under capture leaves an
// empty graph); the data stays.
TEST(TensorGpuViews, InPlaceCopiesNothing) {
  KILN_SKIP_WITHOUT_GPU();
  const HostTensor x = data(DT::kFloat32, {2, 3});
  DeviceBuffer buf(x.bytes.size(), 0);
  buf.upload(x.bytes);
  const Shape s6{6}, s23{2, 3}, sh{1};
  const std::vector<TensorView> in = {{DT::kFloat32, s23, buf.data()}, {DT::kInt64, sh, nullptr}};
  const std::vector<TensorView> out = {{DT::kFloat32, s6, buf.data()}};
  gpu::GpuEnv env;
  for (OpKind k : {OpKind::kReshape, OpKind::kFlatten, OpKind::kSqueeze, OpKind::kUnsqueeze})
    gpu::gpu_kernel(k)(k, k == OpKind::kFlatten ? Attrs{AxisAttrs{0}} : default_attrs(k), in, out, env);
  KILN_CUDA_OK(cudaDeviceSynchronize());
  bool guards = false;
  EXPECT_EQ(buf.download(&guards), x.bytes);
  EXPECT_TRUE(guards);
}

// int8 Expand of one element to 2^31 + 17 (the strided copy's 64-bit flavour) and Concat of that
// with 3 more (the block mover's); samples are compared at the start, around 2^31 and the end.
TEST(TensorGpuLarge, Beyond2To31Elements) {
  KILN_SKIP_WITHOUT_GPU();
  const int64_t n = (int64_t{1} << 31) + 17;
  size_t free_b = 0, total_b = 0;
  KILN_CUDA_OK(cudaMemGetInfo(&free_b, &total_b));
  const size_t need = static_cast<size_t>(n) * 2 + (size_t{1} << 30);
  if (free_b < need) GTEST_SKIP() << "needs " << (need >> 20) << " MiB of free GPU memory, has " << (free_b >> 20);
  void *xv = nullptr, *yv = nullptr, *zv = nullptr;
  KILN_CUDA_OK(cudaMalloc(&xv, 16));
  KILN_CUDA_OK(cudaMalloc(&yv, static_cast<size_t>(n)));
  KILN_CUDA_OK(cudaMalloc(&zv, static_cast<size_t>(n) + 3));
  auto *x = static_cast<uint8_t*>(xv), *y = static_cast<uint8_t*>(yv), *z = static_cast<uint8_t*>(zv);
  KILN_CUDA_OK(cudaMemset(x, 7, 16));
  KILN_CUDA_OK(cudaMemset(y, 0, static_cast<size_t>(n)));
  KILN_CUDA_OK(cudaMemset(z, 0, static_cast<size_t>(n) + 3));
  auto sample = [](const uint8_t* p, int64_t i) {
    uint8_t v = 0;
    EXPECT_EQ(cudaMemcpy(&v, p + i, 1, cudaMemcpyDeviceToHost), cudaSuccess);
    return static_cast<int>(v);
  };
  std::vector<int64_t> at;
  for (int64_t base : {int64_t{0}, (int64_t{1} << 31) - 4, n - 8})
    for (int64_t i = base; i < base + 8; ++i) at.push_back(i);
  gpu::GpuEnv env;
  const Shape s1{1}, sn{n}, s3{3}, sz{n + 3};
  {  // the shape input is not read: the output view carries the shape
    const std::vector<TensorView> in = {{DT::kInt8, s1, x}, {DT::kInt64, s1, nullptr}};
    const std::vector<TensorView> out = {{DT::kInt8, sn, y}};
    gpu::gpu_kernel(OpKind::kExpand)(OpKind::kExpand, NoAttrs{}, in, out, env);
    KILN_CUDA_OK(cudaDeviceSynchronize());
    for (int64_t i : at) EXPECT_EQ(sample(y, i), 7) << "Expand, element " << i;
  }
  {
    const std::vector<TensorView> in = {{DT::kInt8, sn, y}, {DT::kInt8, s3, x}};
    const std::vector<TensorView> out = {{DT::kInt8, sz, z}};
    KILN_CUDA_OK(cudaMemset(y + n - 1, 9, 1));
    gpu::gpu_kernel(OpKind::kConcat)(OpKind::kConcat, AxisAttrs{0}, in, out, env);
    KILN_CUDA_OK(cudaDeviceSynchronize());
    for (int64_t i : at) EXPECT_EQ(sample(z, i), i == n - 1 ? 9 : 7) << "Concat, element " << i;
    for (int64_t i = n; i < n + 3; ++i) EXPECT_EQ(sample(z, i), 7) << "Concat, element " << i;
  }
  cudaFree(x);
  cudaFree(y);
  cudaFree(z);
}

}  // namespace
}  // namespace kiln::gpu_test
