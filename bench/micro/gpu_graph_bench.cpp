// The cost of one layer inside a CUDA graph. An engine of N chained Relu steps on a float32 [1, 64]
// tensor (graph IR -> build::build_engine for this GPU, as `kiln optimize --device gpu` builds one;
// input and output bound to device memory) runs through Context::enqueue, replayed as a CUDA graph
// (graph=1) or launched step by step (graph=0). Each kernel does almost nothing, so what a run costs
// beyond the first layer is the per-layer overhead.
//  - T(N): GPU time of one run, without the host's time to enqueue it (HeldTimer); the Time column.
//  - per_layer_us = (T(N) - T(1)) / (N - 1), with T(1) measured alongside in the same benchmark: what
//    each layer adds to a run on the GPU, its kernel's execution and the gap before the next kernel.
//  - kernel_alone_us: one such Relu kernel enqueued by itself on the stream (the kernel table's entry,
//    GPU time between the events around it: launch latency on the device plus execution).
//    per_layer_us at or below kernel_alone_us in a graph means that a layer in the graph costs no more
//    than its kernel does by itself: the graph adds nothing between layers; what it costs above that is
//    the graph's overhead per layer.
//  - enqueue_us_per_layer: the host's time in Context::enqueue per extra layer. Without a graph the
//    host launches every kernel, and a run cannot go faster than this per layer; with a graph the host
//    launches the whole graph at once (this is then close to 0).
// Args: n (layers), graph (0/1).
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "gpu_bench_util.h"
#include "kiln/engine.h"
#include "build/build.h"
#include "runtime/cuda/device.h"
#include "runtime/cuda/gpu_kernels.h"

namespace kiln::gpu {
namespace {

using bench::DeviceMem;
using bench::Resources;

constexpr int64_t kWidth = 64;
constexpr size_t kBytes = kWidth * sizeof(float);

// "r7" (appended, not "r" + ...: GCC 12 warns falsely about the latter, -Wrestrict).
std::string numbered(const char* base, int64_t i) {
  std::string s = base;
  s += std::to_string(i);
  return s;
}

// x -> Relu -> r1 -> ... -> Relu -> rN: N steps, built for this GPU.
std::shared_ptr<const Engine> relu_chain(int64_t n) {
  graph::Graph g;
  g.name = numbered("relu_chain_", n);
  auto value = [&](const std::string& name) {
    graph::Value v;
    v.name = name;
    v.shape = {1, kWidth};
    v.has_shape = true;
    return g.add_value(std::move(v));
  };
  graph::ValueId x = value("x");
  g.inputs.push_back(x);
  for (int64_t i = 1; i <= n; ++i) {
    const std::string name = numbered("relu", i);
    const graph::ValueId y = value(numbered("r", i));
    g.nodes.push_back(graph::Node{name, OpKind::kRelu, default_attrs(OpKind::kRelu), {x}, {y}, name});
    x = y;
  }
  g.outputs.push_back(x);
  build::BuildOptions o;
  o.target = gpu_target();
  return Engine::from_bytes(build::build_engine(g, o), g.name);
}

// A context of the n-step engine on device-bound x and y, past its first runs (the direct run, and
// with a graph its recording).
std::unique_ptr<Context> chain_context(int64_t n, bool graph, const DeviceMem& x, const DeviceMem& y) {
  std::shared_ptr<const Engine> e = relu_chain(n);
  const size_t steps = e->summary().steps.size();
  if (steps != static_cast<size_t>(n))
    throw Error("relu_chain: the builder made " + std::to_string(steps) + " steps of " + std::to_string(n) +
                " Relu nodes; the benchmark needs one step per node");
  ContextOptions o;
  o.cuda_graph = graph;
  std::unique_ptr<Context> ctx = e->create_context(o);
  ctx->set_input_device("x", x.p, kBytes);
  ctx->set_output_device(numbered("r", n), y.p, kBytes);
  Resources& r = Resources::get();
  for (int i = 0; i < 3; ++i) ctx->enqueue(r.stream);
  check_cuda(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize");
  ctx->check();
  return ctx;
}

// GPU microseconds of one Relu [1, 64] kernel enqueued alone (the mean of 200), measured once.
double kernel_alone_us(const DeviceMem& x, const DeviceMem& y) {
  static double us = -1;
  if (us >= 0) return us;
  Resources& r = Resources::get();
  const GpuKernelEntry* entry = gpu_kernel_entry(OpKind::kRelu);
  const Attrs attrs = default_attrs(OpKind::kRelu);
  const std::vector<int64_t> shape = {1, kWidth};
  const std::vector<TensorView> in = {TensorView{DataType::kFloat32, shape, x.p}};
  const std::vector<TensorView> out = {TensorView{DataType::kFloat32, shape, y.p}};
  GpuEnv env = r.env(nullptr);
  auto launch = [&] { entry->fn(OpKind::kRelu, attrs, in, out, env); };
  bench::HeldTimer held;
  held(launch);
  constexpr int kRuns = 200;
  double total = 0;
  for (int i = 0; i < kRuns; ++i) total += held(launch);
  return us = total / kRuns * 1e6;
}

void BM_GraphLayerCost(benchmark::State& state) {
  const int64_t n = state.range(0);
  const bool graph = state.range(1) != 0;
  if (!gpu_available()) {
    state.SkipWithError("no CUDA GPU");
    return;
  }
  Resources& r = Resources::get();
  DeviceMem x(kBytes), y(kBytes);
  if (!x.p || !y.p) {
    state.SkipWithError("out of GPU memory");
    return;
  }
  check_cuda(cudaMemset(x.p, 0, kBytes), "cudaMemset");
  std::unique_ptr<Context> ctx, one;
  try {
    ctx = chain_context(n, graph, x, y);
    if (n > 1) one = chain_context(1, graph, x, y);
  } catch (const Error& e) {
    state.SkipWithError(e.what());
    return;
  }
  bench::HeldTimer held_n, held_1;  // (each keeps the hold its own enqueue needs)
  double tn = 0, t1 = 0, hn = 0, h1 = 0;
  for (auto _ : state) {
    double host = 0;
    const double s = held_n([&] { ctx->enqueue(r.stream); }, &host);
    tn += s;
    hn += host;
    state.SetIterationTime(s);
    if (one) {
      t1 += held_1([&] { one->enqueue(r.stream); }, &host);
      h1 += host;
    }
  }
  ctx->check();
  if (one) one->check();
  const double iters = static_cast<double>(state.iterations());
  if (one) {
    const double layers = static_cast<double>(n - 1) * iters;
    state.counters["per_layer_us"] = (tn - t1) / layers * 1e6;
    state.counters["enqueue_us_per_layer"] = (hn - h1) / layers * 1e6;
  }
  state.counters["kernel_alone_us"] = kernel_alone_us(x, y);
  state.SetLabel(graph ? "CUDA graph" : "stream, step by step");
}

BENCHMARK(BM_GraphLayerCost)
    ->ArgNames({"n", "graph"})
    ->ArgsProduct({{1, 16, 64}, {1, 0}})
    ->UseManualTime()
    ->Iterations(1000)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kiln::gpu
