// sgemm throughput: square sizes and a ResNet-style conv lowered by im2col (3x3 conv, 64 in/out
// channels, 56x56 output: m = out channels, n = output pixels, k = in channels * 3 * 3).
// Args: m, n, k, threads (0 = no pool). Reports GFLOP/s (2*m*n*k flops per call).
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <vector>

#include "runtime/cpu/gemm.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln::cpu {
namespace {

std::vector<float> random_vector(int64_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(size);
  for (float& x : v) x = dist(rng);
  return v;
}

void run_sgemm(benchmark::State& state, GemmKernel kernel, bool trans_b) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  if (!gemm_kernel_supported(kernel)) {
    state.SkipWithError("kernel not supported on this CPU");
    return;
  }
  const std::vector<float> a = random_vector(m * k, 1);
  const std::vector<float> b = random_vector(k * n, 2);
  std::vector<float> c(m * n, 0.f);
  std::unique_ptr<ThreadPool> pool = threads > 0 ? std::make_unique<ThreadPool>(threads) : nullptr;
  const int64_t ldb = trans_b ? k : n;
  for (auto _ : state) {
    sgemm_with_kernel(kernel, false, trans_b, m, n, k, 1.f, a.data(), k, b.data(), ldb, 0.f, c.data(), n, pool.get());
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * double(m) * double(n) * double(k) * double(state.iterations()) * 1e-9, benchmark::Counter::kIsRate);
  state.SetLabel(gemm_kernel_name(kernel));
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"m", "n", "k", "threads"});
  for (int threads : {0, 2}) {
    for (int64_t s : {256, 512, 1024}) b->Args({s, s, s, threads});
    b->Args({64, 3136, 576, threads});
  }
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

void BM_Sgemm(benchmark::State& state) { run_sgemm(state, GemmKernel::kAuto, false); }
BENCHMARK(BM_Sgemm)->Apply(shapes);

// B transposed (k-contiguous), as for a fully connected / MatMul layer's [out, in] weights: a
// square case, a batch-64 FC and batch-1 (matrix-vector, bandwidth-bound) FCs.
void BM_SgemmTransB(benchmark::State& state) { run_sgemm(state, GemmKernel::kAuto, true); }
void fc_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"m", "n", "k", "threads"});
  for (int threads : {0, 2}) {
    b->Args({512, 512, 512, threads})->Args({64, 4096, 4096, threads});
    b->Args({1, 4096, 4096, threads})->Args({1, 1000, 2048, threads});
  }
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}
BENCHMARK(BM_SgemmTransB)->Apply(fc_shapes);

// Per-ISA kernels, single thread, to compare against the baseline-x86-64 code path.
void BM_SgemmGeneric(benchmark::State& state) { run_sgemm(state, GemmKernel::kGeneric, false); }
void BM_SgemmAvx2(benchmark::State& state) { run_sgemm(state, GemmKernel::kAvx2, false); }
void BM_SgemmAvx512(benchmark::State& state) { run_sgemm(state, GemmKernel::kAvx512, false); }
BENCHMARK(BM_SgemmGeneric)
    ->Args({512, 512, 512, 0})
    ->ArgNames({"m", "n", "k", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_SgemmAvx2)
    ->Args({512, 512, 512, 0})
    ->ArgNames({"m", "n", "k", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_SgemmAvx512)
    ->Args({512, 512, 512, 0})
    ->ArgNames({"m", "n", "k", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace kiln::cpu
