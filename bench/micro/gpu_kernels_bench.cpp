// GPU kernel throughput through the CUDA kernel table (the path an engine takes), against the
// device's ceilings.
//  - Conv on ResNet-50 layer shapes (batch 1 and 256) and a 4096^3 Gemm, float16 and float32, and
//    Attention in float16 (BERT-base's at batch 1 and 32, long sequences): TFLOP/s (2 *
//    multiply-adds) and of_peak, the fraction of the datasheet peak below.
//  - Memory-bound ops on 100-400 MB tensors (beyond the 50-60 MB L2): Add with a per-channel
//    broadcast, Relu, Sigmoid, Cast float32 -> float16, Transpose NCHW -> NHWC, ReduceMean (over
//    H, W and over rows), Softmax: GB/s (bytes of every input and output, each counted once: the
//    least any kernel must move) and of_copy, the fraction of what a cudaMemcpyAsync device to
//    device moving as many bytes reaches in this process, timed the same way (copy_GB/s).
// Each iteration is one kernel call on a stream, timed with CUDA events (manual time). As the
// builder does, every tactic the kernel offers is timed first and the fastest runs; the step's
// state and workspace are set up before the timing (an engine does that once);
// KILN_BENCH_TACTICS=1 prints each tactic's time to stderr. Without a GPU the program says so and
// exits 0.
//
// Peaks (NVIDIA H100 SXM5 and H200 datasheets: the same 132 SMs at 1.98 GHz boost): FP16 dense on
// tensor cores 989 TFLOP/s (the sheets' 1,979 is with 2:4 sparsity), FP32 on the CUDA cores 67
// TFLOP/s (Kiln's FP32 never uses TF32). shared/docs/gpu.md: a bf16 dense product measured about
// 790 TFLOP/s there, and a device-to-device copy about 4.3 TB/s (H200) or 3.0 TB/s (H100). An H100
// PCIe has lower peaks (756 and 51): the device's name is printed in the context.
// Args (Conv): batch, in channels, image size, out channels, kernel, stride, float16 (0/1).
// Args (Gemm): m, n, k, float16 (0/1). Args (memory-bound ops): float16 (0/1).
// The same binary holds gpu_fc_bench.cpp (fully connected layers at batch 1-8 against the copy
// bandwidth) and gpu_graph_bench.cpp (the cost of a layer inside a CUDA graph); gpu_bench_util.h
// has what they share.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/shape_infer.h"
#include "gpu_bench_util.h"
#include "runtime/cuda/device.h"
#include "runtime/cuda/gpu_kernels.h"

namespace kiln::gpu {
namespace {

constexpr double kPeakFp16Tflops = 989.0;
constexpr double kPeakFp32Tflops = 67.0;

using bench::copy_gbps;
using bench::DeviceMem;
using bench::Input;
using bench::Resources;
using bench::upload;

// What a benchmark reports: TFLOP/s against a peak (flops > 0), else GB/s against the copy.
struct Measure {
  double flops = 0;
  double peak_tflops = 0;
};

// Times kind's GPU kernel on these inputs.
void run_op(benchmark::State& state, OpKind kind, const Attrs& attrs, const std::vector<Input>& inputs,
            Measure measure = {}) {
  if (!gpu_available()) {
    state.SkipWithError("no CUDA GPU");
    return;
  }
  Resources& r = Resources::get();
  std::vector<std::unique_ptr<DeviceMem>> bufs;
  std::vector<TensorView> in, shape_only;
  std::vector<const void*> host_in;
  double bytes = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].absent) {
      in.push_back(absent_tensor());
      shape_only.push_back(absent_tensor());
      host_in.push_back(nullptr);
      continue;
    }
    bufs.push_back(upload(inputs[i], static_cast<uint32_t>(i + 1)));
    if (!bufs.back()->p) {
      state.SkipWithError("out of GPU memory");
      return;
    }
    in.push_back(TensorView{inputs[i].dtype, inputs[i].shape, bufs.back()->p});
    const bool constant = !inputs[i].constant.empty();
    host_in.push_back(constant ? inputs[i].constant.data() : nullptr);
    shape_only.push_back(TensorView{inputs[i].dtype, inputs[i].shape,
                                    constant ? const_cast<int64_t*>(inputs[i].constant.data()) : nullptr});
    if (!constant) bytes += static_cast<double>(in.back().bytes());
  }
  const std::vector<OutputType> types = infer_shapes(kind, attrs, shape_only, 1);
  const TensorView y_shape{types[0].dtype, types[0].shape};
  auto y = std::make_unique<DeviceMem>(y_shape.bytes());
  if (!y->p) {
    state.SkipWithError("out of GPU memory");
    return;
  }
  const std::vector<TensorView> out = {TensorView{types[0].dtype, types[0].shape, y->p}};
  bytes += static_cast<double>(out[0].bytes());
  const GpuKernelEntry* entry = gpu_kernel_entry(kind);
  std::unique_ptr<StepState> step;
  GpuEnv env = r.env(&step);
  env.host_in = host_in;
  // Sets the step up for `tactic` (workspace, state) and makes a warm-up call.
  std::unique_ptr<DeviceMem> ws;
  auto setup = [&](int32_t tactic) {
    ws = bench::set_tactic(*entry, kind, attrs, shape_only, out, env, tactic);
    entry->fn(kind, attrs, in, out, env);
  };
  auto time_call = [&] { return r.time([&] { entry->fn(kind, attrs, in, out, env); }); };
  // The builder's choice: the fastest tactic (best of 3 calls each).
  int32_t best = -1;
  if (entry->tactics) {
    double best_s = 1e30;
    for (int32_t t : entry->tactics(kind, attrs, shape_only, out, env)) {
      setup(t);
      double s = 1e30;
      for (int i = 0; i < 3; ++i) s = std::min(s, time_call());
      if (std::getenv("KILN_BENCH_TACTICS"))
        std::fprintf(stderr, "%s %s %s: tactic %d %.1f us\n", op_name(kind).data(),
                     shape_string(inputs[0].shape).c_str(), dtype_name(inputs[0].dtype).data(), t, s * 1e6);
      if (s < best_s) {
        best_s = s;
        best = t;
      }
    }
  }
  setup(best);
  double seconds = 0;
  for (auto _ : state) {
    const double s = time_call();
    seconds += s;
    state.SetIterationTime(s);
  }
  const auto iters = static_cast<double>(state.iterations());
  std::string label = std::string(dtype_name(inputs[0].dtype));
  if (types[0].dtype != inputs[0].dtype) label += " -> " + std::string(dtype_name(types[0].dtype));
  if (measure.flops > 0) {
    state.counters["TFLOP/s"] = benchmark::Counter(measure.flops * iters * 1e-12, benchmark::Counter::kIsRate);
    state.counters["of_peak"] = measure.flops * iters / seconds * 1e-12 / measure.peak_tflops;
    label += " tactic " + std::to_string(best);
  } else {
    const double gbps = bytes * iters / seconds * 1e-9, copy = copy_gbps(static_cast<size_t>(bytes));
    state.counters["GB/s"] = benchmark::Counter(bytes * iters * 1e-9, benchmark::Counter::kIsRate);
    state.counters["copy_GB/s"] = copy;
    state.counters["of_copy"] = copy > 0 ? gbps / copy : 0;
  }
  state.SetLabel(label);
}

DataType float_arg(benchmark::State& state, int index) {
  return state.range(index) ? DataType::kFloat16 : DataType::kFloat32;
}
double peak_of(DataType dt) { return dt == DataType::kFloat16 ? kPeakFp16Tflops : kPeakFp32Tflops; }

// ---- compute-bound: Conv, Gemm ------------------------------------------------------------------
void BM_Conv(benchmark::State& state) {
  const int64_t n = state.range(0), c = state.range(1), hw = state.range(2), m = state.range(3), k = state.range(4),
                s = state.range(5);
  const DataType dt = float_arg(state, 6);
  ConvAttrs a;
  a.pads.assign(4, k / 2);
  a.strides = {s, s};
  const int64_t out = (hw + 2 * (k / 2) - k) / s + 1;
  const double flops = 2.0 * n * m * out * out * c * k * k;
  run_op(state, OpKind::kConv, a, {{dt, {n, c, hw, hw}}, {dt, {m, c, k, k}}, {dt, {m}}}, {flops, peak_of(dt)});
}

void BM_Gemm(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const DataType dt = float_arg(state, 3);
  run_op(state, OpKind::kGemm, GemmAttrs{}, {{dt, {m, k}}, {dt, {k, n}}}, {2.0 * m * n * k, peak_of(dt)});
}

// A transformer FFN's first product as the engines run it: FusedMatMul [m, 768] x [768, 3072] with
// a per-column bias and erf GELU (or Relu), float16 (cuDNN's fused graphs, or cuBLASLt's product
// and Kiln's epilogue kernel: KILN_BENCH_TACTICS=1 prints each). Args: m (tokens; ViT-B/16 at
// batch 64 has 12608), GELU (1) or Relu (0).
void BM_FfnGelu(benchmark::State& state) {
  const int64_t m = state.range(0), n = 3072, k = 768;
  EpilogueAttrs e;
  e.activation = state.range(1) ? Activation::kGelu : Activation::kRelu;
  const DataType h = DataType::kFloat16;
  run_op(state, OpKind::kFusedMatMul, e, {{h, {m, k}}, {h, {k, n}}, {h, {n}}}, {2.0 * m * n * k, kPeakFp16Tflops});
}

// Attention (float16, tensor cores): one packed [batch, len, 3 * heads * d] input as BERT's and
// GPT-2's engines run it (packed_qkv), causal or with none; flops 4 * batch * heads * len^2 * d
// (the two products), halved when causal.
// Args: batch, heads, len, head size, causal (0/1).
void BM_Attention(benchmark::State& state) {
  const int64_t b = state.range(0), h = state.range(1), s = state.range(2), d = state.range(3);
  AttentionAttrs a;
  a.is_causal = state.range(4);
  a.q_num_heads = a.kv_num_heads = h;
  a.packed_qkv = 1;
  const DataType dt = DataType::kFloat16;
  const double flops = 4.0 * static_cast<double>(b * h * s * s * d) * (a.is_causal ? 0.5 : 1.0);
  // K and V name the packed tensor again (the kernel reads input 0 only; these copies stay unread).
  const Input packed{dt, {b, s, 3 * h * d}};
  run_op(state, OpKind::kAttention, a, {packed, packed, packed}, {flops, kPeakFp16Tflops});
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

// Stems channels last in float16, with bias and activation (the NhwcConv steps of the FP16 and
// --best engines): ResNet-50's 7x7 / 2 to 64 channels with Relu and MobileNetV2's 3x3 / 2 to 32
// with ReLU6 (Clip), at batch n.
// Args: n, kernel, out channels. The fastest tactic runs: Kiln's small-channel kernel (300, or 301
// on wgmma) or one of cuDNN's (KILN_BENCH_TACTICS=1 prints each).
void BM_NhwcConvStem(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  FusedConvAttrs a;
  a.pads.assign(4, k / 2);
  a.strides = {2, 2};
  a.activation = k == 7 ? Activation::kRelu : Activation::kClip;
  a.activation_beta = 6.0f;
  const DataType h = DataType::kFloat16;
  const double flops = 2.0 * n * m * 112 * 112 * 3 * k * k;
  run_op(state, OpKind::kNhwcConv, a, {{h, {n, 224, 224, 3}}, {h, {m, k, k, 3}}, {h, {m}}}, {flops, kPeakFp16Tflops});
}

// ResNet-50's stem as the --best engine runs it: with the fused QuantizeLinear of its output to
// int8 (y_scale 0.01, zero point 0; fuse-conv-quantize), at batch 256.
void BM_NhwcConvStemQuant(benchmark::State& state) {
  FusedConvAttrs a;
  a.pads.assign(4, 3);
  a.strides = {2, 2};
  a.activation = Activation::kRelu;
  const DataType h = DataType::kFloat16;
  const double flops = 2.0 * 256 * 64 * 112 * 112 * 3 * 49;
  run_op(state, OpKind::kNhwcConv, a,
         {{h, {256, 224, 224, 3}},
          {h, {64, 7, 7, 3}},
          {h, {64}},
          {h, {}, {}, true},
          {DataType::kFloat32, {}, {0x3C23D70A}},  // the bits of 0.01f
          {DataType::kInt8, {}, {0}}},
         {flops, kPeakFp16Tflops});
}

// ---- memory-bound ---------------------------------------------------------------------------------
// An activation of ResNet-50's first stage at batch 64: [64, 256, 56, 56], 51M elements.
const std::vector<int64_t> kAct = {64, 256, 56, 56};

void BM_AddBroadcast(benchmark::State& state) {  // x + per-channel bias
  const DataType dt = float_arg(state, 0);
  run_op(state, OpKind::kAdd, NoAttrs{}, {{dt, kAct}, {dt, {1, kAct[1], 1, 1}}});
}

void BM_Relu(benchmark::State& state) { run_op(state, OpKind::kRelu, NoAttrs{}, {{float_arg(state, 0), kAct}}); }

void BM_Gelu(benchmark::State& state) {  // the erf form
  run_op(state, OpKind::kGelu, GeluAttrs{}, {{float_arg(state, 0), kAct}});
}

void BM_Sigmoid(benchmark::State& state) { run_op(state, OpKind::kSigmoid, NoAttrs{}, {{float_arg(state, 0), kAct}}); }

void BM_CastF32ToF16(benchmark::State& state) {
  run_op(state, OpKind::kCast, CastAttrs{DataType::kFloat16}, {{DataType::kFloat32, kAct}});
}

void BM_TransposeNchwToNhwc(benchmark::State& state) {
  run_op(state, OpKind::kTranspose, TransposeAttrs{{0, 2, 3, 1}}, {{float_arg(state, 0), kAct}});
}

// An image network's input at batch 256 into channels-last float16 ([256, 3, 224, 224]), the step
// after the input cast.
void BM_TransposeInput(benchmark::State& state) {
  run_op(state, OpKind::kTranspose, TransposeAttrs{{0, 2, 3, 1}}, {{DataType::kFloat16, {256, 3, 224, 224}}});
}

// ResNet-50's stem output at batch 256, channels-last ([256, 112, 112, 64]): quantized to int8
// (float16 in, what --best runs), and max-pooled 3x3 / 2 (float16 and int8).
const std::vector<int64_t> kStem = {256, 112, 112, 64};

void BM_QuantizeStem(benchmark::State& state) {
  run_op(state, OpKind::kQuantizeLinear, QuantizeAttrs{},
         {{DataType::kFloat16, kStem}, {DataType::kFloat32, {}}, {DataType::kInt8, {}}});  // random scale: timing only
}

void BM_NhwcMaxPoolStem(benchmark::State& state) {
  PoolAttrs a;
  a.kernel_shape = {3, 3};
  a.strides = {2, 2};
  a.pads = {1, 1, 1, 1};
  run_op(state, OpKind::kNhwcMaxPool, a, {{state.range(0) ? DataType::kInt8 : DataType::kFloat16, kStem}});
}

// ResNet-50's global pool at batch 256 ([256, 2048, 7, 7] over H and W), and rows ([65536, 1024]
// over the last axis).
void BM_ReduceMeanSpatial(benchmark::State& state) {
  run_op(state, OpKind::kReduceMean, ReduceAttrs{},
         {{float_arg(state, 0), {256, 2048, 7, 7}}, {DataType::kInt64, {2}, {2, 3}}});
}

void BM_ReduceMeanRows(benchmark::State& state) {
  run_op(state, OpKind::kReduceMean, ReduceAttrs{},
         {{float_arg(state, 0), {65536, 1024}}, {DataType::kInt64, {1}, {1}}});
}

// Attention scores: 32768 rows of 1024 (batch 8, 4 heads, 1024 tokens).
void BM_Softmax(benchmark::State& state) {
  run_op(state, OpKind::kSoftmax, SoftmaxAttrs{}, {{float_arg(state, 0), {32768, 1024}}});
}

// LayerNormalization over the last axis, float16, of transformers' activations at large batches:
// Swin-T's stages 1 and 2 at batch 64 ([200704, 96], [50176, 192]), ViT-B/16 at batch 64
// ([12608, 768]) and BERT-base at batch 32 ([4096, 768]).
void BM_LayerNorm(benchmark::State& state) {
  const int64_t rows = state.range(0), d = state.range(1);
  const DataType dt = DataType::kFloat16;
  run_op(state, OpKind::kLayerNormalization, LayerNormAttrs{}, {{dt, {rows, d}}, {dt, {d}}, {dt, {d}}});
}

// The ceiling itself, as a benchmark: a device-to-device copy moving 2 * size MiB.
void BM_Copy(benchmark::State& state) {
  if (!gpu_available()) {
    state.SkipWithError("no CUDA GPU");
    return;
  }
  Resources& r = Resources::get();
  const size_t half = static_cast<size_t>(state.range(0)) << 20;
  DeviceMem a(half), b(half);
  if (!a.p || !b.p) {
    state.SkipWithError("out of GPU memory");
    return;
  }
  auto copy = [&] { check_cuda(cudaMemcpyAsync(b.p, a.p, half, cudaMemcpyDeviceToDevice, r.stream), "copy"); };
  r.time(copy);
  for (auto _ : state) state.SetIterationTime(r.time(copy));
  state.counters["GB/s"] = benchmark::Counter(
      2.0 * static_cast<double>(half) * static_cast<double>(state.iterations()) * 1e-9, benchmark::Counter::kIsRate);
}

// The memory-bound ops: float16, then float32.
void memory_bound(benchmark::internal::Benchmark* b) {
  b->ArgNames({"fp16"})->Arg(1)->Arg(0)->UseManualTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_Conv)->Apply(conv_shapes)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_NhwcConvStem)
    ->ArgNames({"n", "k", "m"})
    ->Args({256, 7, 64})
    ->Args({1, 7, 64})
    ->Args({256, 3, 32})
    ->Args({1, 3, 32})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Gemm)
    ->ArgNames({"m", "n", "k", "fp16"})
    ->Args({4096, 4096, 4096, 1})
    ->Args({4096, 4096, 4096, 0})
    // BERT-base's layers at batch 1 (128 tokens): packed Q/K/V, output projection, FFN in and out.
    ->Args({128, 2304, 768, 1})
    ->Args({128, 768, 768, 1})
    ->Args({128, 3072, 768, 1})
    ->Args({128, 768, 3072, 1})
    // ViT-B/16's FFN at batch 64 (12608 tokens), in and out.
    ->Args({12608, 3072, 768, 1})
    ->Args({12608, 768, 3072, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FfnGelu)
    ->ArgNames({"m", "gelu"})
    ->Args({128, 1})
    ->Args({12608, 1})
    ->Args({12608, 0})  // cuBLASLt's epilogue has Relu: the product's own cost
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Attention)
    ->ArgNames({"b", "h", "s", "d", "causal"})
    ->Args({1, 12, 128, 64, 0})
    ->Args({1, 12, 128, 64, 1})
    ->Args({32, 12, 128, 64, 0})
    ->Args({64, 12, 197, 64, 0})  // ViT-B/16 at batch 64
    ->Args({1, 16, 2048, 128, 0})
    ->Args({1, 16, 2048, 128, 1})
    ->Args({8, 16, 2048, 64, 0})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Copy)->ArgNames({"MiB"})->Arg(64)->Arg(256)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AddBroadcast)->Apply(memory_bound);
BENCHMARK(BM_Relu)->Apply(memory_bound);
BENCHMARK(BM_Sigmoid)->Apply(memory_bound);
BENCHMARK(BM_Gelu)->Apply(memory_bound);
BENCHMARK(BM_CastF32ToF16)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TransposeNchwToNhwc)->Apply(memory_bound);
BENCHMARK(BM_ReduceMeanSpatial)->Apply(memory_bound);
BENCHMARK(BM_ReduceMeanRows)->Apply(memory_bound);
BENCHMARK(BM_Softmax)->Apply(memory_bound);
BENCHMARK(BM_LayerNorm)
    ->ArgNames({"rows", "d"})
    ->Args({200704, 96})
    ->Args({50176, 192})
    ->Args({12608, 768})
    ->Args({4096, 768})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TransposeInput)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_NhwcConvStemQuant)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_QuantizeStem)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_NhwcMaxPoolStem)->ArgNames({"int8"})->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kiln::gpu

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (!kiln::gpu::gpu_available()) {
    std::printf("gpu_kernels_bench: no CUDA GPU here, nothing to measure (skipped)\n");
    return 0;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) benchmark::AddCustomContext("device", prop.name);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
