// GPU engines end to end: a small CNN and a residual block with fused layers built for the GPU
// (FP32 and FP16) against the same models built for the CPU; enqueue on the caller's stream with
// device bindings; CUDA graph replay and re-recording after a rebind; several contexts on several
// threads; device data errors reported by check(); wrong architecture; profiling; tactics and the
// timing cache. Skips without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <thread>

#include "../cpu/onnx_model_util.h"
#include "kiln/engine.h"
#include "passes/build.h"
#include "runtime/cuda/device.h"

namespace kiln {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!gpu::gpu_available()) GTEST_SKIP() << "needs a CUDA GPU"

// x[2,3,8,8] -> Conv(4x3x3x3, pads 1) -> Relu -> GlobalAveragePool -> Flatten -> Gemm(5x4) -> Softmax.
onnx::ModelProto small_cnn() {
  test::OnnxModel m("small_cnn");
  m.init_rand("w", {4, 3, 3, 3}, -0.5f, 0.5f);
  m.init_rand("b", {4}, -0.5f, 0.5f);
  m.init_rand("w2", {5, 4}, -0.5f, 0.5f);
  m.init_rand("b2", {5}, -0.5f, 0.5f);
  m.input("x", {2, 3, 8, 8});
  m.output("y");
  test::attr_ints(m.node("Conv", "conv", {"x", "w", "b"}, {"c"}), "pads", {1, 1, 1, 1});
  m.node("Relu", "relu", {"c"}, {"r"});
  m.node("GlobalAveragePool", "pool", {"r"}, {"p"});
  m.node("Flatten", "flatten", {"p"}, {"f"});
  test::attr_int(m.node("Gemm", "gemm", {"f", "w2", "b2"}, {"z"}), "transB", 1);
  m.node("Softmax", "softmax", {"z"}, {"y"});
  return m.m;
}

std::shared_ptr<const Engine> build(const onnx::ModelProto& m, const std::string& target, bool fp16 = false,
                                    const std::string& cache = "", std::vector<std::string>* log = nullptr) {
  graph::Graph g = test::import_model(m);
  passes::BuildOptions o;
  o.target = target;
  o.fp16 = fp16;
  o.timing_cache = cache;
  if (log) o.log = [log](const std::string& s) { log->push_back(s); };
  return Engine::from_bytes(passes::build_engine(g, o), m.graph().name());
}

std::vector<float> random_input(unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(2 * 3 * 8 * 8);
  for (float& v : x) v = u(rng);
  return x;
}

std::vector<float> run_host(const Engine& e, const std::vector<float>& x) {
  auto ctx = e.create_context();
  ctx->set_input("x", x.data(), x.size() * 4);
  ctx->run();
  auto out = ctx->output("y");
  std::vector<float> y(out.size() / 4);
  std::memcpy(y.data(), out.data(), out.size());
  return y;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

TEST(GpuContext, Fp32MatchesCpu) {
  SKIP_WITHOUT_GPU();
  const auto m = small_cnn();
  auto cpu = build(m, "cpu");
  auto gpu = build(m, gpu::gpu_target());
  EXPECT_TRUE(gpu->is_gpu());
  for (unsigned seed : {1u, 2u}) expect_close(run_host(*gpu, random_input(seed)), run_host(*cpu, random_input(seed)), 1e-5);
}

TEST(GpuContext, Fp16MatchesCpu) {
  SKIP_WITHOUT_GPU();
  const auto m = small_cnn();
  auto cpu = build(m, "cpu");
  auto gpu = build(m, gpu::gpu_target(), /*fp16=*/true);
  EXPECT_EQ(gpu->inputs()[0].dtype, DataType::kFloat32);  // the boundary keeps the model's types
  EXPECT_EQ(gpu->outputs()[0].dtype, DataType::kFloat32);
  expect_close(run_host(*gpu, random_input(3)), run_host(*cpu, random_input(3)), 1e-2);
}

// x[2,8,8,8] -> ResNet's basic block (conv-bn-relu, conv-bn, + x, relu) -> GlobalAveragePool -> y:
// fuse-epilogue makes two FusedConv layers (one with the residual), which run on the GPU through
// cuDNN's fused call or the epilogue kernel, whichever the builder timed faster; in float16 they
// run channels-last (NhwcConv).
TEST(GpuContext, FusedResidualBlockMatchesCpu) {
  SKIP_WITHOUT_GPU();
  test::OnnxModel m("basic_block");
  m.input("x", {2, 8, 8, 8});
  m.output("y");
  for (const char* conv : {"conv1", "conv2"}) {
    m.init_rand(std::string(conv) + ".w", {8, 8, 3, 3}, -0.3f, 0.3f);
    m.init_rand(std::string(conv) + ".b", {8}, -0.3f, 0.3f);
  }
  test::attr_ints(m.node("Conv", "conv1", {"x", "conv1.w", "conv1.b"}, {"c1"}), "pads", {1, 1, 1, 1});
  m.node("Relu", "relu1", {"c1"}, {"r1"});
  test::attr_ints(m.node("Conv", "conv2", {"r1", "conv2.w", "conv2.b"}, {"c2"}), "pads", {1, 1, 1, 1});
  m.node("Add", "add", {"c2", "x"}, {"s"});
  m.node("Relu", "relu2", {"s"}, {"r2"});
  m.node("GlobalAveragePool", "pool", {"r2"}, {"y"});
  auto cpu = build(m.m, "cpu");
  std::mt19937 rng(60);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(2 * 8 * 8 * 8);
  for (float& v : x) v = u(rng);
  auto run = [&](const Engine& e) {
    auto ctx = e.create_context();
    ctx->set_input("x", x.data(), x.size() * 4);
    ctx->run();
    auto out = ctx->output("y");
    std::vector<float> y(out.size() / 4);
    std::memcpy(y.data(), out.data(), out.size());
    return y;
  };
  for (bool fp16 : {false, true}) {
    SCOPED_TRACE(fp16 ? "float16" : "float32");
    auto gpu = build(m.m, gpu::gpu_target(), fp16);
    // float16: channels-last, with one Transpose in (after the input's Cast) and one out (after the pool).
    int fused = 0, transposes = 0;
    for (const StepInfo& s : gpu->summary().steps) {
      fused += s.op == (fp16 ? "NhwcConv" : "FusedConv");
      transposes += s.op == "Transpose";
    }
    EXPECT_EQ(fused, 2);
    EXPECT_EQ(transposes, fp16 ? 2 : 0);
    expect_close(run(*gpu), run(*cpu), fp16 ? 1e-2 : 1e-5);
  }
}

struct DeviceBuffers {
  float *x = nullptr, *y = nullptr, *y2 = nullptr;
  DeviceBuffers() {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&x), 2 * 3 * 8 * 8 * 4), cudaSuccess);
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&y), 10 * 4), cudaSuccess);
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&y2), 10 * 4), cudaSuccess);
  }
  ~DeviceBuffers() {
    cudaFree(x);
    cudaFree(y);
    cudaFree(y2);
  }
};

std::vector<float> download(const float* d, cudaStream_t s) {
  std::vector<float> h(10);
  EXPECT_EQ(cudaMemcpyAsync(h.data(), d, 40, cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  return h;
}

TEST(GpuContext, EnqueueWithDeviceBindingsAndGraphs) {
  SKIP_WITHOUT_GPU();
  const auto m = small_cnn();
  auto cpu = build(m, "cpu");
  auto gpu = build(m, gpu::gpu_target());
  for (bool graph : {false, true}) {
    ContextOptions o;
    o.cuda_graph = graph;
    auto ctx = gpu->create_context(o);
    DeviceBuffers d;
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    ctx->set_input_device("x", d.x, 2 * 3 * 8 * 8 * 4);
    ctx->set_output_device("y", d.y, 40);
    EXPECT_THROW(ctx->output("y"), Error);         // bound to device memory
    for (unsigned seed = 10; seed < 14; ++seed) {  // direct, record, replay, replay
      const auto x = random_input(seed);
      ASSERT_EQ(cudaMemcpyAsync(d.x, x.data(), x.size() * 4, cudaMemcpyHostToDevice, s), cudaSuccess);
      ctx->enqueue(s);
      expect_close(download(d.y, s), run_host(*cpu, x), 1e-5);
      ctx->check();
    }
    ctx->set_output_device("y", d.y2, 40);  // a new binding: the graph is recorded again
    const auto x = random_input(20);
    ASSERT_EQ(cudaMemcpyAsync(d.x, x.data(), x.size() * 4, cudaMemcpyHostToDevice, s), cudaSuccess);
    ctx->enqueue(s);
    ctx->enqueue(s);
    expect_close(download(d.y2, s), run_host(*cpu, x), 1e-5);
    cudaStreamDestroy(s);
  }
}

TEST(GpuContext, HostBindingsThroughStagingWithEnqueue) {
  SKIP_WITHOUT_GPU();
  const auto m = small_cnn();
  auto cpu = build(m, "cpu");
  auto gpu = build(m, gpu::gpu_target());
  auto ctx = gpu->create_context();
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  std::vector<float> y(10, -1.f);
  auto x = random_input(30);
  ctx->set_input("x", x.data(), x.size() * 4);
  ctx->set_output("y", y.data(), 40);
  ctx->enqueue(s);
  const auto want = run_host(*cpu, x);
  std::fill(x.begin(), x.end(), 0.f);  // the input was staged at enqueue: changing it now is fine
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  expect_close(y, want, 1e-5);
  cudaStreamDestroy(s);
}

TEST(GpuContext, ContextsOnSeveralThreadsShareTheEngine) {
  SKIP_WITHOUT_GPU();
  const auto m = small_cnn();
  auto cpu = build(m, "cpu");
  auto gpu = build(m, gpu::gpu_target());
  const auto x = random_input(40);
  const auto want = run_host(*cpu, x);
  std::vector<std::vector<float>> got(4);
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        ContextOptions o;
        o.cuda_graph = t % 2 == 1;
        auto ctx = gpu->create_context(o);
        std::vector<float> y(10);
        ctx->set_input("x", x.data(), x.size() * 4);
        ctx->set_output("y", y.data(), 40);
        for (int i = 0; i < 20; ++i) ctx->run();
        got[static_cast<size_t>(t)] = y;
      });
  }
  for (const auto& y : got) expect_close(y, want, 1e-5);
}

TEST(GpuContext, WrongArchitectureIsAnError) {
  SKIP_WITHOUT_GPU();
  auto e = build(small_cnn(), "sm_10");
  try {
    e->create_context();
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("built for sm_10"), std::string::npos) << err.what();
  }
}

TEST(GpuContext, ProfileTimesEveryStep) {
  SKIP_WITHOUT_GPU();
  auto e = build(small_cnn(), gpu::gpu_target());
  ContextOptions o;
  o.profile = true;
  auto ctx = e->create_context(o);
  const auto x = random_input(50);
  ctx->set_input("x", x.data(), x.size() * 4);
  for (int i = 0; i < 3; ++i) ctx->run();
  const auto times = ctx->step_times();
  ASSERT_EQ(times.size(), e->summary().steps.size());
  double total = 0;
  for (const auto& t : times) {
    EXPECT_EQ(t.runs, 3);
    total += t.total_ms;
  }
  EXPECT_GT(total, 0);
}

TEST(GpuContext, TimingCacheMakesRebuildsMeasureNothing) {
  SKIP_WITHOUT_GPU();
  const auto cache = std::filesystem::temp_directory_path() / "kiln_context_gpu_test_cache.json";
  std::filesystem::remove(cache);
  std::vector<std::string> log1, log2;
  auto a = build(small_cnn(), gpu::gpu_target(), false, cache.string(), &log1);
  auto b = build(small_cnn(), gpu::gpu_target(), false, cache.string(), &log2);
  ASSERT_FALSE(log2.empty());
  EXPECT_NE(log2.back().find(" 0 nodes timed"), std::string::npos) << log2.back();
  const auto sa = a->summary(), sb = b->summary();
  ASSERT_EQ(sa.steps.size(), sb.steps.size());
  for (size_t k = 0; k < sa.steps.size(); ++k) EXPECT_EQ(sa.steps[k].tactic, sb.steps[k].tactic) << sa.steps[k].name;
  std::filesystem::remove(cache);
}

// Gather with an index input: an index out of range is seen only by the device.
TEST(GpuContext, DeviceDataErrorNamesTheStep) {
  SKIP_WITHOUT_GPU();
  test::OnnxModel m("gather");
  onnx::TensorProto* t = m.g()->add_initializer();
  t->set_name("table");
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(4);
  for (int i = 0; i < 4; ++i) t->add_float_data(float(i));
  m.input("i", {3}, onnx::TensorProto::INT64);
  m.output("y");
  m.node("Gather", "lookup", {"table", "i"}, {"y"});
  auto e = build(m.m, gpu::gpu_target());
  auto ctx = e->create_context();
  std::vector<int64_t> good = {0, 3, -1}, bad = {0, 4, 1};
  ctx->set_input("i", good.data(), 24);
  ctx->run();
  const float* y = reinterpret_cast<const float*>(ctx->output("y").data());
  EXPECT_EQ(y[1], 3.f);
  EXPECT_EQ(y[2], 3.f);
  ctx->set_input("i", bad.data(), 24);
  try {
    ctx->run();
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("lookup"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("out of range"), std::string::npos) << err.what();
  }
  ctx->set_input("i", good.data(), 24);
  EXPECT_NO_THROW(ctx->run());  // the error was cleared
}

}  // namespace
}  // namespace kiln
