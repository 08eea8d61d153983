// Fused convolutions of ResNet-50's shapes at batch 256, channels-last, through cuDNN's graph API
// (runtime/cuda/quant/conv/cudnn_graph.cuh): what an INT8 engine's convolution step can reach against the FP16
// one on the same GPU.
//  - fp16: y = relu(conv(x, w) + bias), x, w and y float16, float accumulation.
//  - int8: y = int8(relu(conv(x, w) * scale + bias)), x and w int8, int32 accumulation, scale per
//    output channel (the weights' per-channel scale times the input's, over the output's); y int8.
// Every candidate plan cuDNN offers is timed (the builder's tactic search) and the fastest is
// reported: time per call, TOPS (2 * N * P * K * C * R * S per second), and `plans`, the candidates.
// Args: channels in, channels out, kernel size, stride, input size, int8 (0/1).
// BM_IgemmConv times Kiln's own tensor-core INT8 kernels on the same step (per-channel scale, bias,
// ReLU, int8 out): the implicit GEMM (runtime/cuda/quant/conv/igemm/igemm.cu), on the 1x1 layers the
// streaming kernel (runtime/cuda/quant/conv/stream/stream.cu), and on Hopper's 3x3 stride-1 layers with 64 or 128 channels
// the window kernel (runtime/cuda/quant/conv/halo/halo.cuh); every tile shape timed, as the counter us<tactic> (2000 + i,
// 2100 + i, 2200 + i), the fastest reported. With `residual` 1 it also adds an int8 residual, ResNet's block
// ending. BM_IgemmConv/mobilenet_v2 times MobileNetV2's 1x1 expansions and a projection likewise.
// BM_LtInt8Conv1x1 times the 1x1 stride-1 shapes as one cuBLASLt INT8 GEMM (IMMA: int8 A and B,
// int32 sums, float scale per output channel as an alpha vector, float bias and ReLU in the
// epilogue, int8 D; with `residual` 1 an int8 C added with a host beta): every algorithm of the
// heuristic's list (up to 16) timed, the fastest reported, or an error where cuBLASLt has none.
// BM_DepthwiseQConv times Kiln's depthwise INT8 kernel (runtime/cuda/quant/conv/depthwise/depthwise.cu) on
// MobileNetV2's 3x3 depthwise layers at batch 256 (per-channel scale, bias, ReLU6, int8 out):
// GB/s of x + y + w per second, next to copy_GB/s, a device-to-device copy of as many bytes (the
// bandwidth ceiling). Args: channels, input size, stride.
#include <benchmark/benchmark.h>
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpu_bench_util.h"
#include "runtime/cuda/quant/conv/cudnn_graph.cuh"
#include "runtime/cuda/device.h"
#include "runtime/cuda/quant/conv/depthwise/depthwise.cuh"
#include "runtime/cuda/quant/conv/halo/halo.cuh"
#include "runtime/cuda/quant/conv/igemm/igemm.cuh"
#include "runtime/cuda/quant/conv/stream/stream.cuh"

namespace kiln::gpu {
namespace {

using bench::DeviceMem;
using bench::Resources;
namespace cg = cudnn_graph;

constexpr int64_t kBatch = 256;

void BM_FusedConv(benchmark::State& state) {
  if (!gpu_available()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const int64_t C = state.range(0), K = state.range(1), R = state.range(2), stride = state.range(3),
                H = state.range(4);
  const bool int8 = state.range(5) != 0;
  const int64_t pad = R / 2, P = (H + 2 * pad - R) / stride + 1;
  const std::vector<int64_t> xd{kBatch, C, H, H}, wd{K, C, R, R}, yd{kBatch, K, P, P}, cd{1, K, 1, 1};
  const cudnnDataType_t io = int8 ? CUDNN_DATA_INT8 : CUDNN_DATA_HALF;
  const size_t es = int8 ? 1 : 2;
  Resources& r = Resources::get();

  cg::Desc x = cg::tensor('x', io, xd, cg::channels_last_strides(xd));
  cg::Desc w = cg::tensor('w', io, wd, cg::channels_last_strides(wd));
  cg::Desc acc = cg::tensor('a', CUDNN_DATA_FLOAT, yd, cg::channels_last_strides(yd), true);
  cg::Desc scaled = cg::tensor('m', CUDNN_DATA_FLOAT, yd, cg::channels_last_strides(yd), true);
  cg::Desc biased = cg::tensor('p', CUDNN_DATA_FLOAT, yd, cg::channels_last_strides(yd), true);
  cg::Desc y = cg::tensor('y', io, yd, cg::channels_last_strides(yd));
  cg::Desc scale = cg::tensor('s', CUDNN_DATA_FLOAT, cd, cg::channels_last_strides(cd));
  cg::Desc bias = cg::tensor('b', CUDNN_DATA_FLOAT, cd, cg::channels_last_strides(cd));
  cg::ConvGeometry g{{pad, pad}, {pad, pad}, {stride, stride}, {1, 1}};
  cg::Desc conv = cg::conv_forward(x, w, acc, g, int8 ? CUDNN_DATA_INT32 : CUDNN_DATA_FLOAT);
  cg::Desc mul = cg::pointwise(CUDNN_POINTWISE_MUL, acc, &scale, scaled);
  cg::Desc add = cg::pointwise(CUDNN_POINTWISE_ADD, int8 ? scaled : acc, &bias, biased);
  cg::Desc act = cg::relu(biased, y, 0, std::nullopt);
  std::vector<const cg::Desc*> ops{&conv};
  if (int8) ops.push_back(&mul);
  ops.push_back(&add);
  ops.push_back(&act);

  std::unique_ptr<cg::Graph> graph;
  try {
    graph = std::make_unique<cg::Graph>(r.cudnn, ops, size_t{256} << 20, "fused conv");
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  DeviceMem xm(static_cast<size_t>(kBatch * C * H * H) * es), wm(static_cast<size_t>(K * C * R * R) * es),
      ym(static_cast<size_t>(kBatch * K * P * P) * es), sm(static_cast<size_t>(K) * 4), bm(static_cast<size_t>(K) * 4);
  check_cuda(cudaMemset(xm.p, 1, static_cast<size_t>(kBatch * C * H * H) * es), "memset");
  check_cuda(cudaMemset(wm.p, 1, static_cast<size_t>(K * C * R * R) * es), "memset");
  check_cuda(cudaMemset(sm.p, 0, static_cast<size_t>(K) * 4), "memset");
  check_cuda(cudaMemset(bm.p, 0, static_cast<size_t>(K) * 4), "memset");
  size_t max_ws = 0;
  for (size_t i = 0; i < graph->candidates(); ++i)
    if (graph->usable(i) == i) max_ws = std::max(max_ws, graph->workspace(i));
  DeviceMem ws(max_ws);
  std::vector<int64_t> uids{'x', 'w', 'y', 'b'};
  std::vector<void*> ptrs{xm.p, wm.p, ym.p, bm.p};
  if (int8) {
    uids.push_back('s');
    ptrs.push_back(sm.p);
  }
  auto run = [&](size_t plan) { graph->run(r.cudnn, plan, uids, ptrs, ws.p); };
  size_t best = 0;
  double best_s = 1e30;
  for (size_t i = 0; i < graph->candidates(); ++i) {
    if (graph->usable(i) != i) continue;
    try {
      r.time([&] { run(i); });
      double s = 1e30;
      for (int k = 0; k < 3; ++k) s = std::min(s, r.time([&] { run(i); }));
      if (s < best_s) best_s = s, best = i;
    } catch (const std::exception&) {
    }
  }
  for (auto _ : state) state.SetIterationTime(r.time([&] { run(best); }));
  const double ops_per_call = 2.0 * kBatch * P * P * K * C * R * R;
  state.counters["TOPS"] = benchmark::Counter(ops_per_call * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["plans"] = static_cast<double>(graph->candidates());
}

void BM_IgemmConv(benchmark::State& state) {
  if (!gpu_available()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const int64_t C = state.range(0), K = state.range(1), R = state.range(2), stride = state.range(3),
                H = state.range(4);
  const bool residual = state.range(5) != 0;
  const int64_t pad = R / 2, P = (H + 2 * pad - R) / stride + 1;
  Resources& r = Resources::get();
  const size_t xs = static_cast<size_t>(kBatch * H * H * C), ys = static_cast<size_t>(kBatch * P * P * K);
  DeviceMem xm(xs), wm(static_cast<size_t>(K * R * R * C)), ym(ys), zm(ys), sm(static_cast<size_t>(K) * 4),
      bm(static_cast<size_t>(K) * 4);
  check_cuda(cudaMemset(xm.p, 1, xs), "memset");
  check_cuda(cudaMemset(wm.p, 1, static_cast<size_t>(K * R * R * C)), "memset");
  check_cuda(cudaMemset(zm.p, 1, ys), "memset");
  check_cuda(cudaMemset(sm.p, 0, static_cast<size_t>(K) * 4), "memset");
  check_cuda(cudaMemset(bm.p, 0, static_cast<size_t>(K) * 4), "memset");
  quant::QConvNhwcArgs a{kBatch, H, H, C, K, P, P, R, R, stride, stride, pad, pad, 1, 1,
                         static_cast<const int8_t*>(xm.p), static_cast<const int8_t*>(wm.p), ym.p,
                         static_cast<const float*>(sm.p), true, static_cast<const float*>(bm.p), 0.02f,
                         residual ? zm.p : nullptr, false, {}};
  a.epi.act = 1;
  a.epi.quantize = true;
  a.epi.y_scale = 0.1f;
  a.epi.z_scale = 0.05f;
  // Every tile shape of Kiln's kernels, as NhwcQConv's tactics number them.
  std::vector<std::pair<int, std::function<void()>>> candidates;
  for (int c = 0, n = quant::igemm::configs(a); c < n; ++c)
    candidates.emplace_back(2000 + c, [&a, &r, c] { quant::igemm::run(c, a, r.stream); });
  for (int c = 0, n = quant::stream::configs(a); c < n; ++c)
    if (quant::stream::runs(c, a))
      candidates.emplace_back(2100 + c, [&a, &r, c] { quant::stream::run(c, a, r.stream); });
  for (int c = 0, n = quant::halo::configs(a); c < n; ++c)
    candidates.emplace_back(2200 + c, [&a, &r, c] { quant::halo::run(c, a, r.stream); });
  size_t best = 0;
  double best_s = 1e30;
  for (size_t c = 0; c < candidates.size(); ++c) {
    const auto& [tactic, run] = candidates[c];
    r.time(run);
    double s = 1e30;
    for (int k = 0; k < 3; ++k) s = std::min(s, r.time(run));
    if (s < best_s) best_s = s, best = c;
    state.counters["us" + std::to_string(tactic)] = s * 1e6;
  }
  if (candidates.empty()) {
    state.SkipWithError("no Kiln kernel takes this convolution");
    return;
  }
  for (auto _ : state) state.SetIterationTime(r.time(candidates[best].second));
  const double ops_per_call = 2.0 * kBatch * P * P * K * C * R * R;
  state.counters["TOPS"] = benchmark::Counter(ops_per_call * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tactic"] = candidates[best].first;
}

template <class V>
void lt_set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, V v) {
  check_cublas(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)), "cublasLtMatmulDescSetAttribute");
}

void BM_LtInt8Conv1x1(benchmark::State& state) {
  if (!gpu_available()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const int64_t C = state.range(0), K = state.range(1), R = state.range(2), stride = state.range(3),
                H = state.range(4);
  const bool residual = state.range(5) != 0;
  if (R != 1 || stride != 1) {
    state.SkipWithError("1x1 stride-1 convolutions only");
    return;
  }
  const int64_t P = kBatch * H * H;  // output pixels: the GEMM's columns (column-major D is K x P)
  Resources& r = Resources::get();
  DeviceMem xm(static_cast<size_t>(P * C)), wm(static_cast<size_t>(K * C)), ym(static_cast<size_t>(P * K)),
      zm(static_cast<size_t>(P * K)), am(static_cast<size_t>(K) * 4), bm(static_cast<size_t>(K) * 4);
  check_cuda(cudaMemset(xm.p, 1, static_cast<size_t>(P * C)), "memset");
  check_cuda(cudaMemset(wm.p, 1, static_cast<size_t>(K * C)), "memset");
  check_cuda(cudaMemset(zm.p, 1, static_cast<size_t>(P * K)), "memset");
  check_cuda(cudaMemset(am.p, 0, static_cast<size_t>(K) * 4), "memset");
  check_cuda(cudaMemset(bm.p, 0, static_cast<size_t>(K) * 4), "memset");
  cublasLtMatmulDesc_t op = nullptr;
  check_cublas(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32I, CUDA_R_32F), "cublasLtMatmulDescCreate");
  lt_set(op, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  lt_set(op, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  lt_set(op, CUBLASLT_MATMUL_DESC_POINTER_MODE, residual ? CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST
                                                         : CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO);
  lt_set(op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_RELU_BIAS);
  lt_set(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bm.p));
  lt_set(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_32F);
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  check_cublas(cublasLtMatrixLayoutCreate(&la, CUDA_R_8I, static_cast<uint64_t>(C), static_cast<uint64_t>(K), C), "A");
  check_cublas(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8I, static_cast<uint64_t>(C), static_cast<uint64_t>(P), C), "B");
  check_cublas(cublasLtMatrixLayoutCreate(&lc, CUDA_R_8I, static_cast<uint64_t>(K), static_cast<uint64_t>(P), K), "C");
  cublasLtMatmulPreference_t pref = nullptr;
  check_cublas(cublasLtMatmulPreferenceCreate(&pref), "pref");
  const size_t ws_bytes = size_t{64} << 20;
  DeviceMem ws(ws_bytes);
  check_cublas(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                    sizeof(ws_bytes)), "pref");
  cublasLtMatmulHeuristicResult_t found[16] = {};
  int count = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(r.lt, op, la, lb, lc, lc, pref, 16, found, &count);
  const float beta = 0.5f;
  int best = -1;
  double best_s = 1e30;
  auto run = [&](int i) {
    check_cublas(cublasLtMatmul(r.lt, op, am.p, wm.p, la, xm.p, lb, &beta, residual ? zm.p : ym.p, lc, ym.p, lc,
                                &found[i].algo, ws.p, ws_bytes, r.stream),
                 "cublasLtMatmul");
  };
  for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < count; ++i) {
    try {
      r.time([&] { run(i); });
      double t = 1e30;
      for (int k = 0; k < 3; ++k) t = std::min(t, r.time([&] { run(i); }));
      if (t < best_s) best_s = t, best = i;
    } catch (const std::exception&) {
    }
  }
  if (best < 0) {
    state.SkipWithError(("cuBLASLt has no INT8 algorithm for this GEMM (status " + std::to_string(st) + ", " +
                         std::to_string(count) + " found)").c_str());
  } else {
    for (auto _ : state) state.SetIterationTime(r.time([&] { run(best); }));
    state.counters["TOPS"] =
        benchmark::Counter(2.0 * P * K * C * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["algos"] = count;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
}

void BM_DepthwiseQConv(benchmark::State& state) {
  if (!gpu_available()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const int64_t C = state.range(0), H = state.range(1), stride = state.range(2), R = 3, pad = 1;
  const int64_t P = (H + 2 * pad - R) / stride + 1;
  Resources& r = Resources::get();
  const size_t xs = static_cast<size_t>(kBatch * H * H * C), ys = static_cast<size_t>(kBatch * P * P * C),
               ws = static_cast<size_t>(C * R * R);
  DeviceMem xm(xs), wm(ws), ym(ys), sm(static_cast<size_t>(C) * 4), bm(static_cast<size_t>(C) * 4);
  check_cuda(cudaMemset(xm.p, 1, xs), "memset");
  check_cuda(cudaMemset(wm.p, 1, ws), "memset");
  check_cuda(cudaMemset(sm.p, 0, static_cast<size_t>(C) * 4), "memset");
  check_cuda(cudaMemset(bm.p, 0, static_cast<size_t>(C) * 4), "memset");
  quant::QConvNhwcArgs a{kBatch, H, H, C, C, P, P, R, R, stride, stride, pad, pad, 1, 1,
                         static_cast<const int8_t*>(xm.p), static_cast<const int8_t*>(wm.p), ym.p,
                         static_cast<const float*>(sm.p), true, static_cast<const float*>(bm.p), 0.02f,
                         nullptr, false, {}};
  a.epi.act = 2;  // clip: ReLU6
  a.epi.act_beta = 6;
  a.epi.quantize = true;
  a.epi.y_scale = 0.05f;
  auto run = [&] { quant::depthwise::run(a, r.stream); };
  r.time(run);
  for (auto _ : state) state.SetIterationTime(r.time(run));
  const double bytes = static_cast<double>(xs + ys + ws);
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["copy_GB/s"] = bench::copy_gbps(xs + ys + ws);
}

// ResNet-50's convolutions (C, K, kernel, stride, input size): the bottleneck's 1x1 reduce, 3x3 and
// 1x1 expand in each stage, the strided 3x3 and the second stage's strided 1x1 downsample; the last
// argument is named `flag`.
void conv_shapes(benchmark::internal::Benchmark* b, const char* flag) {
  const std::vector<std::vector<int64_t>> shapes{
      {256, 64, 1, 1, 56},   {64, 64, 3, 1, 56},   {64, 256, 1, 1, 56},  {128, 128, 3, 2, 56},
      {128, 128, 3, 1, 28},  {512, 128, 1, 1, 28}, {128, 512, 1, 1, 28}, {256, 256, 3, 1, 14},
      {1024, 256, 1, 1, 14}, {256, 1024, 1, 1, 14}, {512, 512, 3, 1, 7},  {2048, 512, 1, 1, 7},
      {256, 512, 1, 2, 56}};
  for (const auto& s : shapes)
    for (int64_t f : {0, 1}) b->Args({s[0], s[1], s[2], s[3], s[4], f});
  b->ArgNames({"C", "K", "R", "stride", "H", flag});
}

BENCHMARK(BM_FusedConv)->Apply([](auto* b) { conv_shapes(b, "int8"); })->UseManualTime()->Iterations(20)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_IgemmConv)->Apply([](auto* b) { conv_shapes(b, "residual"); })->UseManualTime()->Iterations(20)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LtInt8Conv1x1)->Apply([](auto* b) { conv_shapes(b, "residual"); })->UseManualTime()->Iterations(20)->Unit(benchmark::kMicrosecond);
// MobileNetV2's 1x1 expansions (no residual) and its 192 -> 32 projection with a residual.
BENCHMARK(BM_IgemmConv)
    ->Name("BM_IgemmConv/mobilenet_v2")
    ->Args({16, 96, 1, 1, 112, 0})
    ->Args({24, 144, 1, 1, 56, 0})
    ->Args({32, 192, 1, 1, 28, 0})
    ->Args({64, 384, 1, 1, 14, 0})
    ->Args({96, 576, 1, 1, 14, 0})
    ->Args({160, 960, 1, 1, 7, 0})
    ->Args({192, 32, 1, 1, 28, 1})
    ->ArgNames({"C", "K", "R", "stride", "H", "residual"})
    ->UseManualTime()
    ->Iterations(20)
    ->Unit(benchmark::kMicrosecond);

// MobileNetV2's depthwise layers (channels, input size, stride).
BENCHMARK(BM_DepthwiseQConv)
    ->Args({32, 112, 1})
    ->Args({96, 112, 2})
    ->Args({144, 56, 1})
    ->Args({144, 56, 2})
    ->Args({192, 28, 1})
    ->Args({192, 28, 2})
    ->Args({384, 14, 1})
    ->Args({576, 14, 1})
    ->Args({576, 14, 2})
    ->Args({960, 7, 1})
    ->ArgNames({"C", "H", "stride"})
    ->UseManualTime()
    ->Iterations(20)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kiln::gpu
