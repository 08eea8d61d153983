// Fully connected layers at batch 1, 2, 4 and 8 on the GPU, through the CUDA kernel table: FusedGemm
// (Gemm + bias + Relu with the weight [N, K] as torch.nn.Linear exports it, transB = 1), the step an
// engine runs for such a layer after fuse-epilogue. At these batches the product is a GEMV whose time
// is that of streaming the weights from memory, so it is measured against the copy bandwidth:
//  - weight_GB/s: weight bytes (N * K * element size) per second of one layer; copy_GB/s: a
//    cudaMemcpyAsync device to device of 512 MiB (256 MiB each way, far beyond the L2) in this
//    process, the practical HBM ceiling; of_copy: the fraction of it reached (a stream of reads alone
//    may pass 1: the copy's bytes are half writes). Time is per layer.
//  - The weights come from HBM, as in an engine, whose layers each read their own weights once per
//    inference: the benchmark keeps enough copies of them to fill four times the L2, and each call
//    reads the next copy. x, the bias and y stay in L2, as a layer's input from the layer before would.
//  - One measurement is a window of consecutive calls (one per copy, at least 8), GPU time only
//    (HeldTimer: cuBLASLt's host time per call stays out, as it does under a CUDA graph); 30 windows.
//  - Tactic: every cuBLASLt algorithm the entry offers (the heuristic's list, what the builder
//    chooses from) is timed that way and the fastest is reported (label "tactic T"). The builder
//    (choose_tactics) times each on a single copy of the weights instead, L2-warm where they fit; its
//    pick is named in the label ("builder B") and builder_x is that tactic's time here over the best
//    one's (1.00: the builder's pick streams as fast). KILN_BENCH_TACTICS=1 prints every tactic.
// Shapes (K x N): 1024x1024, 4096x4096, 4096x11008 (LLaMA-7B's MLP), 25088x4096 (VGG-16's fc6).
// Args: m (batch), k, n, float16 (0/1).
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gpu_bench_util.h"
#include "runtime/cuda/device.h"
#include "runtime/cuda/gpu_kernels.h"

namespace kiln::gpu {
namespace {

using bench::DeviceMem;
using bench::Resources;

constexpr int64_t kMinCalls = 8;

void BM_FcLayer(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const DataType dt = state.range(3) ? DataType::kFloat16 : DataType::kFloat32;
  if (!gpu_available()) {
    state.SkipWithError("no CUDA GPU");
    return;
  }
  Resources& r = Resources::get();
  const size_t es = dtype_size(dt), w_bytes = static_cast<size_t>(n * k) * es;
  int l2 = 0;
  check_cuda(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0), "cudaDeviceGetAttribute");
  const int64_t copies = 1 + static_cast<int64_t>((4 * static_cast<size_t>(l2) + w_bytes - 1) / w_bytes);
  const int64_t calls = std::max(copies, kMinCalls);
  auto w = bench::upload({dt, {copies * n, k}}, 1);
  auto x = bench::upload({dt, {m, k}}, 2);
  auto bias = bench::upload({dt, {n}}, 3);
  DeviceMem y(static_cast<size_t>(m * n) * es);
  if (!w->p || !x->p || !bias->p || !y.p) {
    state.SkipWithError("out of GPU memory");
    return;
  }
  constexpr OpKind kind = OpKind::kFusedGemm;
  FusedGemmAttrs fa;
  fa.transB = 1;
  fa.activation = Activation::kRelu;
  const Attrs attrs = fa;
  const std::vector<int64_t> x_shape = {m, k}, w_shape = {n, k}, bias_shape = {n}, y_shape = {m, n};  // (views)
  std::vector<TensorView> in = {TensorView{dt, x_shape, x->p}, TensorView{dt, w_shape, w->p},
                                TensorView{dt, bias_shape, bias->p}};
  const std::vector<TensorView> out = {TensorView{dt, y_shape, y.p}};
  const GpuKernelEntry* entry = gpu_kernel_entry(kind);
  std::unique_ptr<StepState> step;
  GpuEnv env = r.env(&step);
  // One layer on copy `c` of the weights.
  auto call = [&](int64_t c) {
    in[1].data = static_cast<char*>(w->p) + static_cast<size_t>(c) * w_bytes;
    entry->fn(kind, attrs, in, out, env);
  };
  // Sets the step up for `tactic` (workspace, cuBLASLt plan) and makes a warm-up call.
  std::unique_ptr<DeviceMem> ws;
  auto setup = [&](int32_t tactic) {
    ws = bench::set_tactic(*entry, kind, attrs, in, out, env, tactic);
    call(0);
  };
  bench::HeldTimer held;
  // GPU seconds per layer in one window of `calls` layers, each reading the next copy.
  auto window = [&] {
    return held([&] {
             for (int64_t i = 0; i < calls; ++i) call(i % copies);
           }) /
           static_cast<double>(calls);
  };
  // Per layer as choose_tactics times a tactic: the best of 3 rounds of 5 calls on one copy.
  auto builder_time = [&] {
    double best = 1e30;
    for (int round = 0; round < 3; ++round)
      best = std::min(best, r.time([&] {
        for (int i = 0; i < 5; ++i) call(0);
      }) / 5);
    return best;
  };

  std::vector<int32_t> tactics = entry->tactics ? entry->tactics(kind, attrs, in, out, env) : std::vector<int32_t>{};
  if (tactics.empty()) tactics.push_back(-1);
  int32_t best = -2, builder = -2;
  double best_s = 1e30, builder_s = 1e30;
  std::map<int32_t, double> from_hbm;
  for (int32_t t : tactics) {
    try {
      setup(t);
      double s = 1e30;
      for (int i = 0; i < 3; ++i) s = std::min(s, window());
      const double b = builder_time();
      from_hbm[t] = s;
      if (std::getenv("KILN_BENCH_TACTICS"))
        std::fprintf(
            stderr, "FusedGemm m=%lld k=%lld n=%lld %s: tactic %d %.2f us per layer, %.2f us as the builder times it\n",
            static_cast<long long>(m), static_cast<long long>(k), static_cast<long long>(n), dtype_name(dt).data(), t,
            s * 1e6, b * 1e6);
      if (s < best_s) best_s = s, best = t;
      if (b < builder_s) builder_s = b, builder = t;
    } catch (const Error& e) {  // as choose_tactics does: a tactic that fails is left out
      (void)cudaGetLastError();
      std::fprintf(stderr, "FusedGemm m=%lld k=%lld n=%lld: tactic %d failed: %s\n", static_cast<long long>(m),
                   static_cast<long long>(k), static_cast<long long>(n), t, e.what());
    }
  }
  if (best == -2) {
    state.SkipWithError("every tactic failed");
    return;
  }
  setup(best);
  double seconds = 0;
  for (auto _ : state) {
    const double s = window();
    seconds += s;
    state.SetIterationTime(s);
  }
  const double gbps = static_cast<double>(w_bytes) * static_cast<double>(state.iterations()) / seconds * 1e-9;
  const double copy = bench::copy_gbps(size_t{512} << 20);
  state.counters["weight_GB/s"] = gbps;
  state.counters["copy_GB/s"] = copy;
  state.counters["of_copy"] = copy > 0 ? gbps / copy : 0;
  state.counters["builder_x"] = from_hbm[builder] / best_s;
  state.SetLabel(std::string(dtype_name(dt)) + " tactic " + std::to_string(best) + ", builder " +
                 std::to_string(builder));
}

// Float16, then float32; per shape, batch 1, 2, 4, 8.
void fc_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"m", "k", "n", "fp16"});
  const int64_t shapes[][2] = {{1024, 1024}, {4096, 4096}, {4096, 11008}, {25088, 4096}};
  for (int64_t fp16 : {1, 0})
    for (const auto& s : shapes)
      for (int64_t m : {1, 2, 4, 8}) b->Args({m, s[0], s[1], fp16});
}

BENCHMARK(BM_FcLayer)->Apply(fc_shapes)->UseManualTime()->Iterations(30)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kiln::gpu
