// GPU kernel throughput through the CUDA kernel table (the path an engine takes): Conv on
// ResNet-50 layer shapes and a 4096^3 Gemm, float16 and float32, batch 1 and 256 for the convs.
// Each iteration is one kernel call on a stream, timed with CUDA events (manual time); the
// counter TFLOP/s counts 2 * multiply-adds. As the builder does, every tactic the kernel offers is
// timed first and the fastest runs; the step's state and workspace are set up before the timing
// (an engine does that once); KILN_BENCH_TACTICS=1 prints each tactic's time to stderr. Without a
// GPU the program says so and exits 0.
// Args (Conv): batch, in channels, image size, out channels, kernel, stride, float16 (0/1).
// Args (Gemm): m, n, k, float16 (0/1).
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/shape_infer.h"
#include "runtime/cuda/device.h"
#include "runtime/cuda/gpu_kernels.h"

namespace kiln::gpu {
namespace {

struct DeviceMem {
  void* p = nullptr;
  explicit DeviceMem(size_t bytes) {
    if (cudaMalloc(&p, std::max<size_t>(bytes, 1)) != cudaSuccess) p = nullptr;
  }
  ~DeviceMem() { cudaFree(p); }
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
};

// Handles and a stream shared by every benchmark of the process.
struct Resources {
  cudaStream_t stream = nullptr;
  cudnnHandle_t cudnn = nullptr;
  cublasLtHandle_t lt = nullptr;
  int* error = nullptr;
  Resources() {
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cudnn(cudnnCreate(&cudnn), "cudnnCreate");
    check_cudnn(cudnnSetStream(cudnn, stream), "cudnnSetStream");
    check_cublas(cublasLtCreate(&lt), "cublasLtCreate");
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&error), sizeof(int)), "cudaMalloc");
    check_cuda(cudaMemset(error, 0, sizeof(int)), "cudaMemset");
  }
  static Resources& get() {
    static Resources r;
    return r;
  }
};

// Random values in [-1, 1] of the element type, uploaded once.
std::unique_ptr<DeviceMem> random_tensor(DataType dt, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto mem = std::make_unique<DeviceMem>(static_cast<size_t>(n) * dtype_size(dt));
  if (!mem->p) return mem;
  if (dt == DataType::kFloat16) {
    std::vector<Half> h(static_cast<size_t>(n));
    for (Half& x : h) x = Half(u(rng));
    check_cuda(cudaMemcpy(mem->p, h.data(), h.size() * sizeof(Half), cudaMemcpyHostToDevice), "upload");
  } else {
    std::vector<float> f(static_cast<size_t>(n));
    for (float& x : f) x = u(rng);
    check_cuda(cudaMemcpy(mem->p, f.data(), f.size() * sizeof(float), cudaMemcpyHostToDevice), "upload");
  }
  return mem;
}

// Times kind's GPU kernel on inputs of these shapes; flops per call for the counter.
void run_op(benchmark::State& state, OpKind kind, const Attrs& attrs, DataType dt,
            const std::vector<std::vector<int64_t>>& shapes, double flops) {
  if (!gpu_available()) {
    state.SkipWithError("no CUDA GPU");
    return;
  }
  Resources& r = Resources::get();
  std::vector<std::unique_ptr<DeviceMem>> bufs;
  std::vector<TensorView> in, out;
  for (size_t i = 0; i < shapes.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : shapes[i]) n *= d;
    bufs.push_back(random_tensor(dt, n, static_cast<uint32_t>(i + 1)));
    if (!bufs.back()->p) {
      state.SkipWithError("out of GPU memory");
      return;
    }
    in.push_back(TensorView{dt, shapes[i], bufs.back()->p});
  }
  const std::vector<OutputType> types = infer_shapes(kind, attrs, in, 1);
  std::vector<TensorView> shape_only = in;
  for (TensorView& t : shape_only) t.data = nullptr;
  auto y = std::make_unique<DeviceMem>(static_cast<size_t>(TensorView{dt, types[0].shape}.numel()) * dtype_size(dt));
  if (!y->p) {
    state.SkipWithError("out of GPU memory");
    return;
  }
  out.push_back(TensorView{dt, types[0].shape, y->p});
  const GpuKernelEntry* entry = gpu_kernel_entry(kind);
  std::unique_ptr<StepState> step;
  GpuEnv env;
  env.stream = r.stream;
  env.cudnn = r.cudnn;
  env.cublaslt = r.lt;
  env.error = r.error;
  env.state = &step;
  cudaEvent_t start, stop;
  check_cuda(cudaEventCreate(&start), "cudaEventCreate");
  check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
  // Sets the step up for `tactic` (workspace, state) and makes a warm-up call.
  std::unique_ptr<DeviceMem> ws;
  auto setup = [&](int32_t tactic) {
    env.tactic = tactic;
    env.workspace = nullptr;
    env.workspace_bytes = 0;
    const size_t bytes = entry->workspace ? entry->workspace(kind, attrs, shape_only, out, env) : 0;
    ws = std::make_unique<DeviceMem>(bytes);
    env.workspace = ws->p;
    env.workspace_bytes = bytes;
    entry->fn(kind, attrs, in, out, env);
  };
  auto time_call = [&] {  // seconds
    check_cuda(cudaEventRecord(start, r.stream), "cudaEventRecord");
    entry->fn(kind, attrs, in, out, env);
    check_cuda(cudaEventRecord(stop, r.stream), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    return ms * 1e-3;
  };
  // The builder's choice: the fastest tactic (best of 3 calls each).
  int32_t best = -1;
  if (entry->tactics) {
    double best_s = 1e30;
    for (int32_t t : entry->tactics(kind, attrs, shape_only, out, env)) {
      setup(t);
      double s = 1e30;
      for (int i = 0; i < 3; ++i) s = std::min(s, time_call());
      if (std::getenv("KILN_BENCH_TACTICS"))
        std::fprintf(stderr, "%s %s %s %s: tactic %d %.1f us\n", op_name(kind).data(), shape_string(shapes[0]).c_str(),
                     shape_string(shapes[1]).c_str(), dtype_name(dt).data(), t, s * 1e6);
      if (s < best_s) {
        best_s = s;
        best = t;
      }
    }
  }
  setup(best);
  for (auto _ : state) state.SetIterationTime(time_call());
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  state.counters["TFLOP/s"] =
      benchmark::Counter(flops * static_cast<double>(state.iterations()) * 1e-12, benchmark::Counter::kIsRate);
  state.SetLabel(std::string(dtype_name(dt)) + " tactic " + std::to_string(best));
}

void BM_Conv(benchmark::State& state) {
  const int64_t n = state.range(0), c = state.range(1), hw = state.range(2), m = state.range(3), k = state.range(4),
                s = state.range(5);
  const DataType dt = state.range(6) ? DataType::kFloat16 : DataType::kFloat32;
  ConvAttrs a;
  a.pads.assign(4, k / 2);
  a.strides = {s, s};
  const int64_t out = (hw + 2 * (k / 2) - k) / s + 1;
  const double flops = 2.0 * n * m * out * out * c * k * k;
  run_op(state, OpKind::kConv, a, dt, {{n, c, hw, hw}, {m, c, k, k}, {m}}, flops);
}

void BM_Gemm(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const DataType dt = state.range(3) ? DataType::kFloat16 : DataType::kFloat32;
  run_op(state, OpKind::kGemm, GemmAttrs{}, dt, {{m, k}, {k, n}}, 2.0 * m * n * k);
}

// ResNet-50: the stem and one layer of each kind per stage (in, image, out, kernel, stride).
void conv_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"n", "c", "hw", "m", "k", "s", "fp16"});
  const int64_t layers[][5] = {
      {3, 224, 64, 7, 2},    {64, 56, 64, 1, 1},   {64, 56, 64, 3, 1},   {64, 56, 256, 1, 1},
      {256, 56, 128, 1, 1},  {128, 56, 128, 3, 2}, {128, 28, 512, 1, 1}, {256, 14, 256, 3, 1},
      {1024, 14, 256, 1, 1}, {512, 7, 512, 3, 1},  {512, 7, 2048, 1, 1},
  };
  for (int64_t fp16 : {1, 0})
    for (int64_t n : {1, 256})
      for (const auto& l : layers) b->Args({n, l[0], l[1], l[2], l[3], l[4], fp16});
}

BENCHMARK(BM_Conv)->Apply(conv_shapes)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Gemm)
    ->ArgNames({"m", "n", "k", "fp16"})
    ->Args({4096, 4096, 4096, 1})
    ->Args({4096, 4096, 4096, 0})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kiln::gpu

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (!kiln::gpu::gpu_available()) {
    std::printf("gpu_kernels_bench: no CUDA GPU here, nothing to measure (skipped)\n");
    return 0;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
