// Range engines on the GPU (docs/decisions/55-shape-ranges.md): a batch range engine against fixed
// GPU engines of its buckets (bit for bit, rows padded) and of the exact shape (tolerance), with
// host and device bindings, CUDA graphs and shapes changing between runs; the device padding kernel
// against the host's. The fixed engines share the range engine's timing cache, so that they make its
// kernel choices. Skips without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "../cpu/onnx_model_util.h"
#include "build/build.h"
#include "gpu_harness.h"
#include "kiln/engine.h"
#include "runtime/copy_corner.h"
#include "runtime/cuda/copy_corner.h"
#include "runtime/cuda/device.h"

namespace kiln {
namespace {

using test::I64s;

// x[N,3,16,16] -> Conv(8, pads 1) -> Relu -> MaxPool 2 -> Conv(8, pads 1) -> GlobalAveragePool ->
// Flatten -> Gemm(10): every row on its own.
onnx::ModelProto convnet() {
  test::OnnxModel m("range_gpu");
  m.input_batched("x", "N", {3, 16, 16});
  m.init_rand("w1", {8, 3, 3, 3}, -0.5f, 0.5f);
  m.init_rand("w2", {8, 8, 3, 3}, -0.5f, 0.5f);
  m.init_rand("fw", {10, 8}, -0.5f, 0.5f);
  m.init_rand("fb", {10}, -0.5f, 0.5f);
  test::attr_ints(m.node("Conv", "conv1", {"x", "w1"}, {"c1"}), "pads", {1, 1, 1, 1});
  m.node("Relu", "relu", {"c1"}, {"r"});
  auto* pool = m.node("MaxPool", "pool", {"r"}, {"p"});
  test::attr_ints(pool, "kernel_shape", {2, 2});
  test::attr_ints(pool, "strides", {2, 2});
  test::attr_ints(m.node("Conv", "conv2", {"p", "w2"}, {"c2"}), "pads", {1, 1, 1, 1});
  m.node("GlobalAveragePool", "gap", {"c2"}, {"g"});
  m.node("Flatten", "flatten", {"g"}, {"f"});
  test::attr_int(m.node("Gemm", "fc", {"f", "fw", "fb"}, {"y"}), "transB", 1);
  m.output("y");
  return m.m;
}

// One timing cache for every build of a test, so that the fixed engines make the range engine's
// kernel choices (two builds timed apart may choose differently where tactics tie).
std::string timing_cache() {
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("kiln-range-gpu-" + std::to_string(::getpid()) + ".json")).string();
  return path;
}

std::shared_ptr<const Engine> build(const onnx::ModelProto& m, int64_t lo, int64_t hi, bool fp16) {
  graph::Graph g = test::import_model(m);
  build::BuildOptions o;
  o.target = gpu::gpu_target();
  o.timing_cache = timing_cache() + (fp16 ? ".fp16" : "");
  o.fp16 = fp16;
  o.batch = hi;
  o.batch_range = {lo, hi};
  return Engine::from_bytes(build::build_engine(g, o), lo == hi ? "fixed" : "range");
}

std::vector<float> rows(int64_t n, unsigned seed) {
  return test::random_vec(static_cast<size_t>(n * 3 * 16 * 16), seed);
}

std::vector<float> run_host(Context& ctx, int64_t n, const std::vector<float>& x) {
  if (!ctx.engine().ranges().empty()) ctx.set_input_shape("x", {n, 3, 16, 16});
  return test::run_floats(ctx, "x", x, "y");
}

class RangeGpu : public ::testing::TestWithParam<bool> {};

TEST_P(RangeGpu, RowsEqualTheBucketsFixedEngine) {
  KILN_SKIP_WITHOUT_GPU();
  const bool fp16 = GetParam();
  const auto m = convnet();
  auto range = build(m, 1, 16, fp16);
  ASSERT_EQ(range->ranges().size(), 1u);
  EXPECT_TRUE(range->ranges()[0].pad_rows);
  EXPECT_EQ(range->ranges()[0].buckets, (I64s{1, 2, 4, 8, 16}));
  ContextOptions graphs;
  graphs.cuda_graph = true;
  auto direct = range->create_context();
  auto replayed = range->create_context(graphs);
  // Shapes change from run to run, across buckets and inside one (5, 7 and 8 share bucket 8).
  for (int64_t n : {5, 16, 7, 1, 8, 3, 5, 12}) {
    SCOPED_TRACE("batch " + std::to_string(n));
    int64_t bucket = 1;
    while (bucket < n) bucket *= 2;
    const std::vector<float> x = rows(n, static_cast<unsigned>(n));
    std::vector<float> padded(static_cast<size_t>(bucket * 3 * 256), 0.f);
    std::copy(x.begin(), x.end(), padded.begin());
    auto fixed = build(m, bucket, bucket, fp16);
    auto fctx = fixed->create_context();
    const std::vector<float> want = run_host(*fctx, bucket, padded);
    for (Context* ctx : {direct.get(), replayed.get()}) {
      for (int rep = 0; rep < 2; ++rep) {  // the second: a replayed graph
        const std::vector<float> y = run_host(*ctx, n, x);
        ASSERT_EQ(y.size(), static_cast<size_t>(n * 10));
        EXPECT_EQ(std::memcmp(y.data(), want.data(), y.size() * 4), 0);
        EXPECT_EQ(ctx->bucket(), (I64s{bucket}));
      }
    }
    auto exact = build(m, n, n, fp16);
    auto ectx = exact->create_context();
    const std::vector<float> e = run_host(*ectx, n, x);
    const std::vector<float> y = run_host(*direct, n, x);
    for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], e[i], fp16 ? 2e-2 : 1e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(Precision, RangeGpu, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Fp16" : "Fp32"; });

TEST(RangeGpuDevice, DeviceBindingsArePaddedAndSliced) {
  KILN_SKIP_WITHOUT_GPU();
  const auto m = convnet();
  auto range = build(m, 1, 8, false);
  ContextOptions o;
  o.cuda_graph = true;
  o.host_staging = false;
  auto ctx = range->create_context(o);
  auto host = range->create_context();
  void *dx = nullptr, *dy = nullptr;
  ASSERT_EQ(cudaMalloc(&dx, 8 * 3 * 256 * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dy, 8 * 10 * 4), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (int64_t n : {3, 8, 6, 3}) {
    SCOPED_TRACE("batch " + std::to_string(n));
    const std::vector<float> x = rows(n, 40 + static_cast<unsigned>(n));
    ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ctx->set_input_shape("x", {n, 3, 16, 16});
    ctx->set_input_device("x", dx, x.size() * 4);
    ctx->set_output_device("y", dy, static_cast<size_t>(n) * 40);
    for (int rep = 0; rep < 3; ++rep) ctx->enqueue(stream);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ctx->check();
    std::vector<float> y(static_cast<size_t>(n * 10));
    ASSERT_EQ(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    const std::vector<float> want = run_host(*host, n, x);
    EXPECT_EQ(std::memcmp(y.data(), want.data(), y.size() * 4), 0);
    // Unbound: the context's own memory holds the output at its shape.
    auto own = range->create_context(o);
    own->set_input_shape("x", {n, 3, 16, 16});
    own->set_input_device("x", dx, x.size() * 4);
    own->enqueue(stream);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<float> z(y.size());
    ASSERT_EQ(cudaMemcpy(z.data(), own->output_device("y"), z.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(z, y);
  }
  cudaStreamDestroy(stream);
  cudaFree(dx);
  cudaFree(dy);
}

TEST(RangeGpuDevice, CopyCornerMatchesTheHost) {
  KILN_SKIP_WITHOUT_GPU();
  std::mt19937 rng(11);
  for (int trial = 0; trial < 100; ++trial) {
    const size_t rank = 1 + rng() % 5;
    I64s from(rank), to(rank);
    for (size_t a = 0; a < rank; ++a) {
      from[a] = 1 + rng() % 5;
      to[a] = rng() % 2 ? from[a] : int64_t(1 + rng() % 5);
    }
    const size_t elem = size_t{1} << (rng() % 4);
    std::vector<uint8_t> src(static_cast<size_t>(detail::element_count(from)) * elem);
    for (uint8_t& v : src) v = static_cast<uint8_t>(1 + rng() % 255);
    const size_t out = static_cast<size_t>(detail::element_count(to)) * elem;
    std::vector<uint8_t> want(out, 0), got(out, 0xCD);
    detail::copy_corner(src.data(), from, want.data(), to, elem, true);
    void *ds = nullptr, *dd = nullptr;
    ASSERT_EQ(cudaMalloc(&ds, src.size()), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dd, out), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(ds, src.data(), src.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemset(dd, 0xCD, out), cudaSuccess);
    gpu::copy_corner_device(ds, from, dd, to, elem, nullptr);
    ASSERT_EQ(cudaMemcpy(got.data(), dd, out, cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(ds);
    cudaFree(dd);
    ASSERT_EQ(got, want) << shape_string(from) << " -> " << shape_string(to) << ", " << elem << " bytes";
  }
}

}  // namespace
}  // namespace kiln
