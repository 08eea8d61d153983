// GPU engines end to end: a small CNN and a residual block with fused layers built for the GPU
// (FP32 and FP16) against the same models built for the CPU; enqueue on the caller's stream with
// device bindings; CUDA graph replay and re-recording after a rebind; several contexts on several
// threads; device data errors reported by check(); wrong architecture; profiling; tactics and the
// timing cache; an engine with views (a Concat written in place into a device-bound output, a view
// of that output read by a later step, a free Split) under CUDA graphs, rebound; a bottleneck whose
// downsample runs on the side stream against one stream. Skips without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <thread>

#include "../cpu/onnx_model_util.h"
#include "../cpu/small_nets.h"
#include "kiln/engine.h"
#include "build/build.h"
#include "gpu_harness.h"
#include "runtime/cuda/device.h"

namespace kiln {
namespace {

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
  build::BuildOptions o;
  o.target = target;
  o.fp16 = fp16;
  o.timing_cache = cache;
  if (log) o.log = [log](const std::string& s) { log->push_back(s); };
  return Engine::from_bytes(build::build_engine(g, o), m.graph().name());
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
  KILN_SKIP_WITHOUT_GPU();
  const auto m = small_cnn();
  auto cpu = build(m, "cpu");
  auto gpu = build(m, gpu::gpu_target());
  EXPECT_TRUE(gpu->is_gpu());
  for (unsigned seed : {1u, 2u}) expect_close(run_host(*gpu, random_input(seed)), run_host(*cpu, random_input(seed)), 1e-5);
}

TEST(GpuContext, Fp16MatchesCpu) {
  KILN_SKIP_WITHOUT_GPU();
  const auto m = small_cnn();
  auto cpu = build(m, "cpu");
  auto gpu = build(m, gpu::gpu_target(), /*fp16=*/true);
  EXPECT_EQ(gpu->inputs()[0].dtype, DataType::kFloat32);  // the boundary keeps the model's types
  EXPECT_EQ(gpu->outputs()[0].dtype, DataType::kFloat32);
  expect_close(run_host(*gpu, random_input(3)), run_host(*cpu, random_input(3)), 1e-2);
}

// x[2,16,4,4] -> GlobalAveragePool -> Flatten -> Gemm(10x16) -> y in float16: the pool of the
// float32 input stays float32 and the Gemm becomes a FusedGemm with float16 weights that reads it
// as it is (to-fp16), run by the GEMV; no Cast in the engine.
TEST(GpuContext, ClassifierHeadWithFloat16WeightsMatchesCpu) {
  KILN_SKIP_WITHOUT_GPU();
  test::OnnxModel m("head");
  m.init_rand("w", {10, 16}, -0.5f, 0.5f);
  m.init_rand("b", {10}, -0.5f, 0.5f);
  m.input("x", {2, 16, 4, 4});
  m.output("y");
  m.node("GlobalAveragePool", "pool", {"x"}, {"p"});
  m.node("Flatten", "flatten", {"p"}, {"f"});
  test::attr_int(m.node("Gemm", "gemm", {"f", "w", "b"}, {"y"}), "transB", 1);
  auto cpu = build(m.m, "cpu");
  auto gpu = build(m.m, gpu::gpu_target(), /*fp16=*/true);
  int casts = 0, products = 0;
  for (const StepInfo& s : gpu->summary().steps) {
    casts += s.op == "Cast";
    products += s.op == "FusedGemm";
  }
  EXPECT_EQ(casts, 0);
  EXPECT_EQ(products, 1);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(2 * 16 * 16);
  for (float& v : x) v = u(rng);
  expect_close(run_host(*gpu, x), run_host(*cpu, x), 2e-3);
}

// x[2,8,8,8] -> ResNet's basic block (conv-bn-relu, conv-bn, + x, relu) -> GlobalAveragePool -> y:
// fuse-epilogue makes two FusedConv layers (one with the residual), which run on the GPU through
// cuDNN's fused call or the epilogue kernel, whichever the builder timed faster; in float16 they
// run channels-last (NhwcConv).
TEST(GpuContext, FusedResidualBlockMatchesCpu) {
  KILN_SKIP_WITHOUT_GPU();
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
    // float16: channels-last, with one Transpose in (after the input's Cast); the one out, after the
    // pool ([2, 1, 1, 4] to [2, 4, 1, 1]), moves no bytes and is a view.
    int fused = 0, transposes = 0;
    for (const StepInfo& s : gpu->summary().steps) {
      fused += s.op == (fp16 ? "NhwcConv" : "FusedConv");
      transposes += s.op == "Transpose";
    }
    EXPECT_EQ(fused, 2);
    EXPECT_EQ(transposes, fp16 ? 1 : 0);
    expect_close(run(*gpu), run(*cpu), fp16 ? 1e-2 : 1e-5);
  }
}

// ResNet's bottleneck at batch 1: its downsample runs on the context's side stream beside conv1 and
// conv2 (runtime/side_steps.h). Direct runs and CUDA graph replays, each with a new input, give the
// bits of a context that runs every step on one stream, and the CPU's values.
TEST(GpuContext, SideStreamMatchesOneStream) {
  KILN_SKIP_WITHOUT_GPU();
  for (auto [fp16, stride] : {std::pair{false, 1}, std::pair{true, 1}, std::pair{true, 2}}) {
    SCOPED_TRACE(std::string(fp16 ? "float16" : "float32") + ", stride " + std::to_string(stride));
    const test::SmallNet m = test::bottleneck(1, 64, 28, stride);
    auto cpu = build(m.m, "cpu");
    auto gpu = build(m.m, gpu::gpu_target(), fp16);
    int marked = 0;
    for (const StepInfo& st : gpu->summary().steps) marked += st.side_after >= -1;
    EXPECT_EQ(marked, 1);
    for (bool graph : {false, true}) {
      SCOPED_TRACE(graph ? "CUDA graph" : "direct");
      ContextOptions o, one;
      o.cuda_graph = one.cuda_graph = graph;
      one.side_stream = false;
      auto side = gpu->create_context(o);
      auto ref = gpu->create_context(one);
      EXPECT_EQ(side->side_steps(), 1u);
      EXPECT_EQ(ref->side_steps(), 0u);
      std::vector<float> x(64 * 28 * 28);
      for (uint32_t seed = 0; seed < 6; ++seed) {
        x = test::random_vec(x.size(), 100 + seed);
        auto out = [&](Context& c) {
          c.set_input("x", x.data(), x.size() * 4);
          c.run();
          auto bytes = c.output("y");
          return std::vector<std::byte>(bytes.begin(), bytes.end());
        };
        const std::vector<std::byte> got = out(*side);
        ASSERT_EQ(got, out(*ref)) << "run " << seed;
        std::vector<float> y(got.size() / 4);
        std::memcpy(y.data(), got.data(), got.size());
        expect_close(y, run_host(*cpu, x), fp16 ? 2e-2 : 1e-4);
      }
    }
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
  KILN_SKIP_WITHOUT_GPU();
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
  KILN_SKIP_WITHOUT_GPU();
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

// ContextOptions::host_staging off: device bindings run as before; host memory is refused with a
// message naming the tensor and what to call instead; an unbound output stays in the context's
// memory, where output_device() finds it (and output() refuses, naming both ways).
TEST(GpuContext, WithoutHostStagingEverythingIsOnTheDevice) {
  KILN_SKIP_WITHOUT_GPU();
  const auto m = small_cnn();
  auto cpu = build(m, "cpu");
  auto gpu = build(m, gpu::gpu_target());
  ContextOptions o;
  o.host_staging = false;
  auto ctx = gpu->create_context(o);
  DeviceBuffers d;
  std::vector<float> x = random_input(40), y(10);
  auto message = [&](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { ctx->set_input("x", x.data(), x.size() * 4); }).find("input 'x' is not bound to device memory"),
            std::string::npos);
  EXPECT_NE(message([&] { ctx->set_output("y", y.data(), 40); }).find("set_output_device"), std::string::npos);
  ctx->set_input_device("x", d.x, x.size() * 4);
  EXPECT_NE(message([&] { ctx->output_device("y"); }).find("after the first run"), std::string::npos);
  ASSERT_EQ(cudaMemcpy(d.x, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ctx->run();
  const void* own = ctx->output_device("y");
  ASSERT_NE(own, nullptr);
  ASSERT_EQ(cudaMemcpy(y.data(), own, 40, cudaMemcpyDeviceToHost), cudaSuccess);
  expect_close(y, run_host(*cpu, x), 1e-5);
  EXPECT_NE(message([&] { ctx->output("y"); }).find("output_device"), std::string::npos);
  ctx->set_output_device("y", d.y, 40);
  std::fill(y.begin(), y.end(), 0.f);
  ctx->run();
  EXPECT_EQ(ctx->output_device("y"), static_cast<const void*>(d.y));
  ASSERT_EQ(cudaMemcpy(y.data(), d.y, 40, cudaMemcpyDeviceToHost), cudaSuccess);
  expect_close(y, run_host(*cpu, x), 1e-5);
  EXPECT_THROW(ctx->output("y"), Error);
  EXPECT_THROW(cpu->create_context()->output_device("y"), Error);  // CPU engines: output()
  // Under a CUDA graph too, unbound then bound (a new binding records the graph again).
  o.cuda_graph = true;
  auto graphed = gpu->create_context(o);
  graphed->set_input_device("x", d.x, x.size() * 4);
  for (int run = 0; run < 3; ++run) {
    if (run == 2) graphed->set_output_device("y", d.y2, 40);
    graphed->run();
    const void* at = graphed->output_device("y");
    EXPECT_EQ(at == static_cast<const void*>(d.y2), run == 2) << run;
    std::fill(y.begin(), y.end(), 0.f);
    ASSERT_EQ(cudaMemcpy(y.data(), at, 40, cudaMemcpyDeviceToHost), cudaSuccess);
    expect_close(y, run_host(*cpu, x), 1e-5);
  }
}

TEST(GpuContext, ContextsOnSeveralThreadsShareTheEngine) {
  KILN_SKIP_WITHOUT_GPU();
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

// Engines say what they need (issue 41): one made for a Jetson's GPU (its header names sm_87 or
// sm_110) is refused here with both GPUs named and the command that rebuilds it; this GPU's own
// engine records the libraries it was built with, and runs.
TEST(GpuContext, WrongArchitectureIsAnError) {
  KILN_SKIP_WITHOUT_GPU();
  const std::string here = gpu::gpu_target();
  for (const char* arch : {"sm_87", "sm_110", "sm_10"}) {
    auto e = build(small_cnn(), arch);
    try {
      e->create_context();
      FAIL() << "expected an error for " << arch;
    } catch (const Error& err) {
      const std::string m = err.what();
      EXPECT_NE(m.find("built for " + gpu::describe_arch(arch) + " but this GPU is " + gpu::describe_arch(here)),
                std::string::npos)
          << m;
      EXPECT_NE(m.find("kiln optimize MODEL.onnx --device gpu"), std::string::npos) << m;
    }
  }
  EXPECT_NE(gpu::describe_arch("sm_87").find("Jetson Orin"), std::string::npos);
  auto e = build(small_cnn(), here);
  const EngineSummary s = e->summary();
  const gpu::LibraryVersions v = gpu::library_versions();
  EXPECT_GE(s.cuda_version, 12000);
  EXPECT_EQ(s.cuda_version, v.cuda);
  EXPECT_EQ(s.cudnn_version, v.cudnn);
  EXPECT_EQ(s.cublaslt_version, v.cublaslt);
  EXPECT_NO_THROW(e->create_context());
}

TEST(GpuContext, ProfileTimesEveryStep) {
  KILN_SKIP_WITHOUT_GPU();
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
  KILN_SKIP_WITHOUT_GPU();
  const auto cache = std::filesystem::temp_directory_path() / "kiln_context_gpu_test_cache.json";
  std::filesystem::remove(cache);
  std::vector<std::string> log1, log2;
  auto a = build(small_cnn(), gpu::gpu_target(), false, cache.string(), &log1);
  auto b = build(small_cnn(), gpu::gpu_target(), false, cache.string(), &log2);
  const auto chosen = std::find_if(log2.begin(), log2.end(),
                                   [](const std::string& l) { return l.rfind("choose-tactics:", 0) == 0; });
  ASSERT_NE(chosen, log2.end());
  EXPECT_NE(chosen->find(" 0 nodes timed"), std::string::npos) << *chosen;
  const auto sa = a->summary(), sb = b->summary();
  ASSERT_EQ(sa.steps.size(), sb.steps.size());
  for (size_t k = 0; k < sa.steps.size(); ++k) EXPECT_EQ(sa.steps[k].tactic, sb.steps[k].tactic) << sa.steps[k].name;
  std::filesystem::remove(cache);
}

// Gather with an index input: an index out of range is seen only by the device.
TEST(GpuContext, DeviceDataErrorNamesTheStep) {
  KILN_SKIP_WITHOUT_GPU();
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

// x[1,3,8,8] -> Conv a (3x3, 4 ch), Conv b and Conv c (1x1, 4 and 6 ch: fuse-siblings leaves them
// apart, b being written in place into y) -> c splits [2,4] -> Relu, Sigmoid; y = Concat(a, b, relu)
// is an engine output that its producers write in place; z = Gemm(Flatten(y)) reads y through a
// view; w = the Sigmoid branch.
onnx::ModelProto views_model() {
  test::OnnxModel m("views");
  m.init_rand("wa", {4, 3, 3, 3}, -0.5f, 0.5f);
  m.init_rand("wb", {4, 3, 1, 1}, -0.5f, 0.5f);
  m.init_rand("wc", {6, 3, 1, 1}, -0.5f, 0.5f);
  m.init_rand("wg", {10 * 64, 5}, -0.1f, 0.1f);
  onnx::TensorProto* sizes = m.g()->add_initializer();
  sizes->set_name("sizes");
  sizes->set_data_type(onnx::TensorProto::INT64);
  sizes->add_dims(2);
  sizes->add_int64_data(2);
  sizes->add_int64_data(4);
  m.input("x", {1, 3, 8, 8});
  test::attr_ints(m.node("Conv", "conv_a", {"x", "wa"}, {"a"}), "pads", {1, 1, 1, 1});
  m.node("Conv", "conv_b", {"x", "wb"}, {"b"});
  m.node("Conv", "conv_c", {"x", "wc"}, {"c"});
  test::attr_int(m.node("Split", "split", {"c", "sizes"}, {"c1", "c2"}), "axis", 1);
  m.node("Relu", "relu", {"c1"}, {"r"});
  m.node("Sigmoid", "sigmoid", {"c2"}, {"w"});
  test::attr_int(m.node("Concat", "cat", {"a", "b", "r"}, {"y"}), "axis", 1);
  m.node("Flatten", "flatten", {"y"}, {"f"});
  m.node("Gemm", "fc", {"f", "wg"}, {"z"});
  m.output("y");
  m.output("z");
  m.output("w");
  return m.m;
}

TEST(GpuContext, ViewsUnderGraphsWithDeviceBoundOutputs) {
  KILN_SKIP_WITHOUT_GPU();
  const auto m = views_model();
  graph::Graph g_ref = test::import_model(m), g_gpu = test::import_model(m);
  build::BuildOptions ref_options, gpu_options;
  ref_options.disabled_passes = {"fuse-siblings", "view-reshapes", "eliminate-concat", "eliminate-split"};
  gpu_options.target = gpu::gpu_target();
  auto cpu = Engine::from_bytes(build::build_engine(g_ref, ref_options), "views_cpu");
  auto gpu = Engine::from_bytes(build::build_engine(g_gpu, gpu_options), "views_gpu");
  const EngineSummary summary = gpu->summary();
  bool view_of_y = false, concat = false;
  for (const ViewInfo& v : summary.views) view_of_y |= v.base == "y";
  for (const StepInfo& st : summary.steps) concat |= st.op == "Concat" || st.op == "Split";
  EXPECT_TRUE(view_of_y) << "the Concat's inputs and the Flatten should be views of the output y";
  EXPECT_FALSE(concat);

  const size_t x_bytes = 3 * 64 * 4, y_bytes = 10 * 64 * 4, z_bytes = 5 * 4, w_bytes = 4 * 64 * 4;
  auto reference = [&](const std::vector<float>& x) {
    auto ctx = cpu->create_context();
    ctx->set_input("x", x.data(), x_bytes);
    ctx->run();
    std::map<std::string, std::vector<float>> out;
    for (const char* name : {"y", "z", "w"}) {
      auto bytes = ctx->output(name);
      out[name].resize(bytes.size() / 4);
      std::memcpy(out[name].data(), bytes.data(), bytes.size());
    }
    return out;
  };
  auto download = [](const void* d, size_t bytes, cudaStream_t s) {
    std::vector<float> h(bytes / 4);
    EXPECT_EQ(cudaMemcpyAsync(h.data(), d, bytes, cudaMemcpyDeviceToHost, s), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    return h;
  };
  void *dx = nullptr, *dy = nullptr, *dy2 = nullptr, *dz = nullptr, *dw = nullptr;
  ASSERT_EQ(cudaMalloc(&dx, x_bytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dy, y_bytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dy2, y_bytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dz, z_bytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dw, w_bytes), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  for (bool graph : {false, true}) {
    SCOPED_TRACE(graph ? "cuda graph" : "direct");
    ContextOptions o;
    o.cuda_graph = graph;
    auto ctx = gpu->create_context(o);
    ctx->set_input_device("x", dx, x_bytes);
    ctx->set_output_device("y", dy, y_bytes);
    ctx->set_output_device("z", dz, z_bytes);
    ctx->set_output_device("w", dw, w_bytes);
    for (unsigned seed = 60; seed < 64; ++seed) {  // direct, record, replay, replay
      const auto x = random_input(seed);
      std::vector<float> xs(x.begin(), x.begin() + 3 * 64);
      ASSERT_EQ(cudaMemcpyAsync(dx, xs.data(), x_bytes, cudaMemcpyHostToDevice, s), cudaSuccess);
      ctx->enqueue(s);
      auto want = reference(xs);
      expect_close(download(dy, y_bytes, s), want["y"], 1e-4);
      expect_close(download(dz, z_bytes, s), want["z"], 1e-4);
      expect_close(download(dw, w_bytes, s), want["w"], 1e-4);
      ctx->check();
    }
    // Rebind y: the views (the Concat's slices, the Flatten) follow it, the graph is recorded again,
    // and the old buffer is no longer written.
    ASSERT_EQ(cudaMemsetAsync(dy, 0xff, y_bytes, s), cudaSuccess);
    ctx->set_output_device("y", dy2, y_bytes);
    const auto x = random_input(70);
    std::vector<float> xs(x.begin(), x.begin() + 3 * 64);
    ASSERT_EQ(cudaMemcpyAsync(dx, xs.data(), x_bytes, cudaMemcpyHostToDevice, s), cudaSuccess);
    ctx->enqueue(s);
    ctx->enqueue(s);
    auto want = reference(xs);
    expect_close(download(dy2, y_bytes, s), want["y"], 1e-4);
    expect_close(download(dz, z_bytes, s), want["z"], 1e-4);
    for (float v : download(dy, y_bytes, s)) ASSERT_TRUE(std::isnan(v)) << "the old y buffer was written";
    // Host-bound outputs: the views lie in the context's arena, and come back through staging.
    auto host = gpu->create_context(o);
    std::vector<float> y(y_bytes / 4), z(z_bytes / 4);
    host->set_input("x", xs.data(), x_bytes);
    host->set_output("y", y.data(), y_bytes);
    host->set_output("z", z.data(), z_bytes);
    for (int i = 0; i < 3; ++i) host->run();
    expect_close(y, want["y"], 1e-4);
    expect_close(z, want["z"], 1e-4);
  }
  cudaStreamDestroy(s);
  for (void* p : {dx, dy, dy2, dz, dw}) cudaFree(p);
}

}  // namespace
}  // namespace kiln
