// Mapped host inputs and outputs (ContextOptions::mapped_io, what a Jetson's integrated GPU does by
// default): forced on the discrete GPU here, the kernels read and write host memory in place. The
// outputs equal the copied path's (fixed, range and data-dependent engines, with and without a CUDA
// graph); a pinned caller buffer is read when the kernels run, not copied when the run is enqueued
// (a stream held back by a host function shows which), and a pinned output buffer is where the
// kernels write. Skips without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "../cpu/data_dependent_cases.h"
#include "gpu_harness.h"
#include "kiln/engine.h"
#include "runtime/cuda/device.h"

namespace kiln {
namespace {

using namespace kiln::test;
using MappedIo = ContextOptions::MappedIo;

// x[N,3,16,16] -> Conv(8, pads 1) -> Relu -> GlobalAveragePool -> Flatten -> Gemm(10) -> y[N,10].
// N is symbolic for the range engine.
OnnxModel convnet() {
  OnnxModel m("mapped_io");
  m.input_batched("x", "N", {3, 16, 16});
  m.init_rand("w", {8, 3, 3, 3}, -0.5f, 0.5f);
  m.init_rand("fw", {10, 8}, -0.5f, 0.5f);
  m.init_rand("fb", {10}, -0.5f, 0.5f);
  attr_ints(m.node("Conv", "conv", {"x", "w"}, {"c"}), "pads", {1, 1, 1, 1});
  m.node("Relu", "relu", {"c"}, {"r"});
  m.node("GlobalAveragePool", "gap", {"r"}, {"g"});
  m.node("Flatten", "flatten", {"g"}, {"f"});
  attr_int(m.node("Gemm", "fc", {"f", "fw", "fb"}, {"y"}), "transB", 1);
  m.output("y");
  return m;
}

std::shared_ptr<const Engine> build(int64_t lo, int64_t hi) {
  graph::Graph g = convnet().import();
  build::BuildOptions o;
  o.target = gpu::gpu_target();
  o.batch = hi;
  if (lo != hi) o.batch_range = {lo, hi};
  return Engine::from_bytes(build::build_engine(g, o), "mapped_io");
}

std::vector<float> random_rows(int64_t n, unsigned seed) {
  return random_vec(static_cast<size_t>(n * 3 * 16 * 16), seed);
}

std::vector<float> run(Context& ctx, int64_t n, const std::vector<float>& x) {
  if (!ctx.engine().ranges().empty()) ctx.set_input_shape("x", {n, 3, 16, 16});
  return run_floats(ctx, "x", x, "y");
}

ContextOptions with(MappedIo m, bool graph = false) {
  ContextOptions o;
  o.mapped_io = m;
  o.cuda_graph = graph;
  return o;
}

void expect_same(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], 1e-5f * (1 + std::abs(b[i]))) << what << " [" << i << "]";
}

TEST(MappedIo, OutputsEqualTheCopiedPath) {
  KILN_SKIP_WITHOUT_GPU();
  const auto e = build(4, 4);
  int device = 0, integrated = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&integrated, cudaDevAttrIntegrated, device), cudaSuccess);
  EXPECT_EQ(e->create_context(with(MappedIo::kAuto))->mapped_io(), integrated != 0)
      << "kAuto maps exactly on an integrated GPU";
  for (bool graph : {false, true}) {
    auto copied = e->create_context(with(MappedIo::kOff, graph));
    auto mapped = e->create_context(with(MappedIo::kOn, graph));
    EXPECT_FALSE(copied->mapped_io());
    EXPECT_TRUE(mapped->mapped_io());
    for (unsigned seed : {1u, 2u, 3u}) {  // the third replays a recorded graph
      const std::vector<float> x = random_rows(4, seed);
      expect_same(run(*mapped, 4, x), run(*copied, 4, x), graph ? "graph" : "steps");
    }
    // An output bound to a plain host buffer gets the data too (a CPU copy after the kernels).
    std::vector<float> y(40, -1.f), x = random_rows(4, 9);
    mapped->set_output("y", y.data(), y.size() * 4);
    run(*mapped, 4, x);
    expect_same(y, run(*copied, 4, x), "set_output");
  }
}

// Holds a stream back until released (at most 10 s, so that a failing test does not hang).
struct StreamGate {
  std::atomic<bool> open{false};
  static void CUDART_CB wait(void* p) {
    auto* g = static_cast<StreamGate*>(p);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!g->open.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  }
};

// Enqueues a run on x_a held back by a gate, then writes x_b into the input buffer and opens the
// gate: returns what the run computed.
std::vector<float> run_behind_gate(Context& ctx, float* in, float* out, const std::vector<float>& x_a,
                                   const std::vector<float>& x_b) {
  cudaStream_t s = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const size_t bytes = x_a.size() * 4;
  std::memcpy(in, x_a.data(), bytes);
  ctx.set_input("x", in, bytes);
  ctx.set_output("y", out, 40 * 4);
  ctx.run();  // a first run outside the gate: the libraries' lazy setup
  StreamGate gate;
  EXPECT_EQ(cudaLaunchHostFunc(s, StreamGate::wait, &gate), cudaSuccess);
  ctx.enqueue(s);
  std::memcpy(in, x_b.data(), bytes);
  gate.open = true;
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ctx.check();
  cudaStreamDestroy(s);
  return std::vector<float>(out, out + 40);
}

TEST(MappedIo, PinnedCallerBuffersAreUsedInPlace) {
  KILN_SKIP_WITHOUT_GPU();
  const auto e = build(4, 4);
  const std::vector<float> x_a = random_rows(4, 11), x_b = random_rows(4, 12);
  auto reference = e->create_context(with(MappedIo::kOff));
  const std::vector<float> y_a = run(*reference, 4, x_a), y_b = run(*reference, 4, x_b);

  const size_t bytes = x_a.size() * 4;
  float *in = nullptr, *out = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&in), bytes, cudaHostAllocMapped), cudaSuccess);
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&out), 40 * 4, cudaHostAllocMapped), cudaSuccess);
  {
    // Mapped: the kernels read the caller's pinned input when they run (x_b) and write its output.
    auto mapped = e->create_context(with(MappedIo::kOn));
    expect_same(run_behind_gate(*mapped, in, out, x_a, x_b), y_b, "mapped, pinned input");
    void* out_dev = nullptr;
    ASSERT_EQ(cudaHostGetDevicePointer(&out_dev, out, 0), cudaSuccess);
    EXPECT_EQ(mapped->output_device("y"), out_dev) << "the kernels wrote the caller's pinned output in place";
    // Copied: the input was taken when the run was enqueued (x_a).
    auto copied = e->create_context(with(MappedIo::kOff));
    expect_same(run_behind_gate(*copied, in, out, x_a, x_b), y_a, "copied, pinned input");
  }
  {
    // Mapped with a plain host buffer: copied into the mapped staging when enqueued (x_a).
    auto mapped = e->create_context(with(MappedIo::kOn));
    std::vector<float> plain(x_a.size()), plain_out(40);
    expect_same(run_behind_gate(*mapped, plain.data(), plain_out.data(), x_a, x_b), y_a, "mapped, plain input");
  }
  cudaFreeHost(in);
  cudaFreeHost(out);
}

TEST(MappedIo, RangeEngineBetweenBuckets) {
  KILN_SKIP_WITHOUT_GPU();
  const auto e = build(1, 8);
  auto copied = e->create_context(with(MappedIo::kOff, true));
  auto mapped = e->create_context(with(MappedIo::kOn, true));
  for (int64_t n : {3, 8, 1, 5, 3}) {  // 3 and 5 run padded in the buckets of 4 and 8
    const std::vector<float> x = random_rows(n, static_cast<unsigned>(n));
    const std::vector<float> y = run(*mapped, n, x);
    EXPECT_EQ(y.size(), static_cast<size_t>(n * 10));
    expect_same(y, run(*copied, n, x), "batch " + std::to_string(n));
  }
}

TEST(MappedIo, DataDependentShapes) {
  KILN_SKIP_WITHOUT_GPU();
  ContextOptions o;
  o.mapped_io = MappedIo::kOn;
  const auto nonzero = build_for(nonzero_model(), gpu::gpu_target());
  ASSERT_TRUE(nonzero->create_context(o)->mapped_io());
  check_nonzero_runs(*nonzero, o);
  check_nms_runs(*build_for(nms_model(), gpu::gpu_target()), o);
}

}  // namespace
}  // namespace kiln
