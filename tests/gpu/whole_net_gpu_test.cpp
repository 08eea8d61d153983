// The whole-network kernel (runtime/cuda/whole_net.h) end to end. The small networks of
// tests/cpu/small_nets.h (LeNet-5, an MLP, two CNNs of odd shapes: odd channels, strides, asymmetric
// pads, groups, dilations, AveragePool with and without the padding, global pools) are built for
// this GPU in float32 and float16 at batch 1, 3 and 8, and run with the kernel (Context::whole_network)
// and without it (the steps), each with CUDA graphs off and on, against the CPU engine on random
// inputs (three runs per context, each with new data, so that a replayed graph reads it). Also:
// device bindings rebound under a graph, NaN inputs treated as the CPU kernels treat them, engines
// the kernel refuses (a Softmax, activations beyond shared memory) running the steps and still
// matching, and profiling, which times the steps. Skips without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "../cpu/small_nets.h"
#include "gpu_harness.h"
#include "kiln/engine.h"
#include "build/build.h"

namespace kiln {
namespace {

using test::SmallNet;
using Vec = std::vector<float>;

std::shared_ptr<const Engine> build(const SmallNet& m, const std::string& target, bool fp16) {
  graph::Graph g = m.import();
  build::BuildOptions o;
  o.target = target;
  o.fp16 = fp16;
  return Engine::from_bytes(build::build_engine(g, o), m.m.graph().name());
}

size_t input_numel(const Engine& e) { return static_cast<size_t>(e.inputs()[0].numel()); }

// One context, one run per input (host bindings); the outputs.
std::vector<Vec> run(const Engine& e, const std::vector<Vec>& inputs, const ContextOptions& o, bool expect_whole) {
  auto ctx = e.create_context(o);
  EXPECT_EQ(ctx->whole_network(), expect_whole);
  std::vector<Vec> outs;
  for (const Vec& x : inputs) {
    ctx->set_input(e.inputs()[0].name, x.data(), x.size() * 4);
    ctx->run();
    auto bytes = ctx->output(e.outputs()[0].name);
    Vec y(bytes.size() / 4);
    std::memcpy(y.data(), bytes.data(), bytes.size());
    outs.push_back(std::move(y));
  }
  return outs;
}

// Within tol of the largest reference value (at least 1); a NaN only where the reference has one.
void expect_close(const Vec& got, const Vec& want, float tol) {
  ASSERT_EQ(got.size(), want.size());
  float scale = 1;
  for (float v : want)
    if (!std::isnan(v)) scale = std::max(scale, std::fabs(v));
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    const bool ok = std::isnan(want[i]) ? std::isnan(got[i]) : std::fabs(got[i] - want[i]) <= tol * scale;
    if (!ok) {
      ++bad;
      ADD_FAILURE() << "element " << i << ": " << got[i] << ", the CPU " << want[i];
    }
  }
}

std::vector<Vec> random_inputs(size_t n, uint32_t seed) {
  return {test::random_vec(n, seed), test::random_vec(n, seed + 1), test::random_vec(n, seed + 2)};
}

// The net at batch 1, 3 and 8, float32 and float16: the kernel and the steps, graphs off and on,
// against the CPU engine.
void check_net(SmallNet (*make)(int64_t)) {
  for (int64_t batch : {1, 3, 8}) {
    const SmallNet m = make(batch);
    auto cpu = build(m, "cpu", false);
    const std::vector<Vec> inputs = random_inputs(input_numel(*cpu), static_cast<uint32_t>(batch) * 10);
    const std::vector<Vec> want = run(*cpu, inputs, {}, false);
    for (bool fp16 : {false, true}) {
      auto gpu = build(m, gpu::gpu_target(), fp16);
      EXPECT_EQ(gpu->summary().whole_network.rfind("not used", 0), std::string::npos) << gpu->summary().whole_network;
      for (bool graph : {false, true})
        for (bool whole : {true, false}) {
          SCOPED_TRACE(m.m.graph().name() + " batch " + std::to_string(batch) + (fp16 ? " float16" : " float32") +
                       (graph ? ", CUDA graph" : "") + (whole ? ", whole network" : ", steps"));
          ContextOptions o;
          o.cuda_graph = graph;
          o.whole_network = whole;
          const std::vector<Vec> got = run(*gpu, inputs, o, whole);
          for (size_t r = 0; r < inputs.size(); ++r) expect_close(got[r], want[r], fp16 ? 1e-2f : 1e-4f);
        }
    }
  }
}

TEST(WholeNetGpu, LeNet5MatchesCpu) {
  KILN_SKIP_WITHOUT_GPU();
  check_net(test::lenet5);
}

TEST(WholeNetGpu, MlpMatchesCpu) {
  KILN_SKIP_WITHOUT_GPU();
  check_net(test::mlp);
}

TEST(WholeNetGpu, OddCnnMatchesCpu) {
  KILN_SKIP_WITHOUT_GPU();
  check_net(test::odd_cnn);
}

TEST(WholeNetGpu, OddCnn2MatchesCpu) {
  KILN_SKIP_WITHOUT_GPU();
  check_net(test::odd_cnn2);
}

// Caller device memory, enqueue on the caller's stream, CUDA graph; then the output rebound to
// another buffer and new input data: the graph is recorded again and writes the new buffer.
TEST(WholeNetGpu, DeviceBindingsUnderAGraph) {
  KILN_SKIP_WITHOUT_GPU();
  const SmallNet m = test::lenet5(3);
  auto cpu = build(m, "cpu", false);
  auto gpu = build(m, gpu::gpu_target(), false);
  const std::vector<Vec> inputs = random_inputs(input_numel(*cpu), 90);
  const std::vector<Vec> want = run(*cpu, inputs, {}, false);
  const size_t in_bytes = inputs[0].size() * 4, out_bytes = want[0].size() * 4;
  void *x = nullptr, *y1 = nullptr, *y2 = nullptr;
  KILN_CUDA_OK(cudaMalloc(&x, in_bytes));
  KILN_CUDA_OK(cudaMalloc(&y1, out_bytes));
  KILN_CUDA_OK(cudaMalloc(&y2, out_bytes));
  cudaStream_t stream = nullptr;
  KILN_CUDA_OK(cudaStreamCreate(&stream));
  ContextOptions o;
  o.cuda_graph = true;
  o.whole_network = true;
  auto ctx = gpu->create_context(o);
  EXPECT_TRUE(ctx->whole_network());
  auto fetch = [&](void* y) {
    Vec h(want[0].size());
    EXPECT_EQ(cudaMemcpy(h.data(), y, out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  };
  ctx->set_input_device("x", x, in_bytes);
  ctx->set_output_device("y", y1, out_bytes);
  KILN_CUDA_OK(cudaMemcpy(x, inputs[0].data(), in_bytes, cudaMemcpyHostToDevice));
  for (int i = 0; i < 3; ++i) ctx->enqueue(stream);  // direct, recorded, replayed
  KILN_CUDA_OK(cudaStreamSynchronize(stream));
  ctx->check();
  expect_close(fetch(y1), want[0], 1e-4f);
  ctx->set_output_device("y", y2, out_bytes);
  KILN_CUDA_OK(cudaMemcpy(x, inputs[1].data(), in_bytes, cudaMemcpyHostToDevice));
  for (int i = 0; i < 2; ++i) ctx->enqueue(stream);
  KILN_CUDA_OK(cudaStreamSynchronize(stream));
  expect_close(fetch(y2), want[1], 1e-4f);
  expect_close(fetch(y1), want[0], 1e-4f);  // the old buffer is left alone
  cudaStreamDestroy(stream);
  cudaFree(x);
  cudaFree(y1);
  cudaFree(y2);
}

// NaN inputs: Relu passes NaN, MaxPool prefers a number, GlobalMaxPool (ReduceMax in float16)
// propagates it: the output is NaN for exactly the plane whose MaxPool window was all NaN.
TEST(WholeNetGpu, NanFollowsTheCpu) {
  KILN_SKIP_WITHOUT_GPU();
  const SmallNet m = test::nan_pools(2);
  auto cpu = build(m, "cpu", false);
  const Vec x = test::nan_pools_input(2, 5);
  const Vec want = run(*cpu, {x}, {}, false)[0];
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(std::isnan(want[i]), i == 1) << i;  // the test's premise
  ContextOptions whole;
  whole.whole_network = true;
  for (bool fp16 : {false, true}) {
    SCOPED_TRACE(fp16 ? "float16" : "float32");
    expect_close(run(*build(m, gpu::gpu_target(), fp16), {x}, whole, true)[0], want, fp16 ? 1e-2f : 1e-5f);
  }
}

// Engines the kernel refuses run their steps, whatever the option says, and match the CPU.
TEST(WholeNetGpu, RefusedEnginesRunTheSteps) {
  KILN_SKIP_WITHOUT_GPU();
  for (auto make : {test::softmax_mlp, test::big_cnn}) {
    const SmallNet m = make(2);
    SCOPED_TRACE(m.m.graph().name());
    auto cpu = build(m, "cpu", false);
    auto gpu = build(m, gpu::gpu_target(), false);
    EXPECT_EQ(gpu->summary().whole_network.rfind("not used: ", 0), 0u) << gpu->summary().whole_network;
    const std::vector<Vec> inputs = random_inputs(input_numel(*cpu), 40);
    const std::vector<Vec> want = run(*cpu, inputs, {}, false);
    for (bool graph : {false, true}) {
      ContextOptions o;
      o.cuda_graph = graph;
      o.whole_network = true;  // asked for, but the engine is refused: the steps run
      const std::vector<Vec> got = run(*gpu, inputs, o, false);
      for (size_t r = 0; r < inputs.size(); ++r) expect_close(got[r], want[r], 1e-4f);
    }
  }
}

// Profiling times the steps one by one: no whole-network kernel, one entry per step.
TEST(WholeNetGpu, ProfilingRunsTheSteps) {
  KILN_SKIP_WITHOUT_GPU();
  const SmallNet m = test::lenet5(1);
  auto cpu = build(m, "cpu", false);
  auto gpu = build(m, gpu::gpu_target(), false);
  const std::vector<Vec> inputs = random_inputs(input_numel(*cpu), 60);
  ContextOptions o;
  o.profile = true;
  auto ctx = gpu->create_context(o);
  EXPECT_FALSE(ctx->whole_network());
  ctx->set_input("x", inputs[0].data(), inputs[0].size() * 4);
  ctx->run();
  EXPECT_EQ(ctx->step_times().size(), gpu->summary().steps.size());
  auto bytes = ctx->output("y");
  Vec y(bytes.size() / 4);
  std::memcpy(y.data(), bytes.data(), bytes.size());
  expect_close(y, run(*cpu, {inputs[0]}, {}, false)[0], 1e-4f);
}

}  // namespace
}  // namespace kiln
