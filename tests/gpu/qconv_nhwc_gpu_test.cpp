// NhwcQConv on the GPU (runtime/cuda/quant/conv/nhwc.cu: a cuDNN graph per step, or the direct
// kernel where cuDNN has no engine) against the CPU kernel (kiln.QConv on permuted tensors), with
// every tactic (candidate cuDNN plan) and under stream capture. cuDNN rounds its float epilogue in its
// own order, so an int8 output may differ by one quantization step, on at most 1% of the values
// (a wrong rounding mode, such as truncation, would move about half of them); float outputs agree to
// float32 rounding. Tactic 1000 asks for the direct kernel (the fallback where cuDNN has no engine),
// which shares the CPU's epilogue: it must match bit for bit. The tensor-core kernel (tactics 2000 +
// tile shape, runtime/cuda/quant/conv/igemm/igemm.cu, offered where C % 64 == 0 and M % 8 == 0) rounds like cuDNN, and so
// do the streaming 1x1 kernel (tactics 2100 + tile shape, runtime/cuda/quant/conv/stream/stream.cu) and, on compute
// capability 9.0, the 3x3 window kernel (tactics 2200 +, runtime/cuda/quant/conv/halo/halo.cuh); the implicit GEMM's
// split tiles (2007-2012) on ResNet-50's batch-1 layers; and two of Kiln's steps chained in one
// CUDA graph, where the second may start before the first ends (dependent_launch.cuh) and must
// still read the first's finished output. Pooled steps (pool_mean) at every tactic against the CPU.
// The channels-last pass's
// RGB stem (3 channels padded with a zero channel to 4 by a Pad) against the CPU's unpadded
// convolution.
// Depthwise steps (group = C = M: Kiln's direct depthwise kernel, runtime/cuda/quant/conv/depthwise/depthwise.cu, one tactic)
// must match the CPU (bit for bit for float32 outputs, as cuDNN for int8 ones): each kernel-size
// path, strides, pads, dilation, bias or not, each activation, int8 and float32 outputs and
// residuals, per-channel and per-tensor w_scale, direct, captured and misaligned; and exactly the
// epilogue's rounding ties, NaN and saturation with power-of-two scales, where its fused
// multiply-adds compute the CPU's values. Skips without a GPU.
#include <algorithm>
#include <cmath>

#include "gpu_harness.h"
#include "runtime/cuda/quant/conv/halo/halo.cuh"
#include "runtime/cuda/quant/conv/igemm/igemm.cuh"
#include "runtime/cuda/quant/conv/stream/stream.cuh"

namespace kiln::gpu_test {
namespace {

using Inputs = std::vector<HostTensor>;

constexpr int32_t kDirectTactic = 1000;  // runtime/cuda/quant/conv/nhwc.cu's direct kernel
constexpr int32_t kIgemmTactic = 2000;   // and its tensor-core kernel's first tile shape
constexpr int32_t kStreamTactic = 2100;  // and its streaming 1x1 kernel's
constexpr int32_t kHaloTactic = 2200;    // and its 3x3 window kernel's

struct Case {
  int64_t n, h, w, c, m, k, stride, pad, dilation = 1;
};

// The tile shapes a convolution the kernel takes gets on this GPU: the implicit GEMM's for P output
// pixels and M channels (the split ones where 64x64 tiles leave SMs without two CTAs), and the
// streaming kernel's with C input channels (its wgmma ones where C >= 64); runtime/cuda/quant/conv/igemm/igemm.cuh and
// runtime/cuda/quant/conv/stream/stream.cuh.
int igemm_tiles(int64_t P, int64_t M) {
  if (!hopper()) return gpu::quant::igemm::kSyncConfigs;
  int device = 0, sms = 0;
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  const bool few = (P + 63) / 64 * ((M + 63) / 64) < 2 * sms;
  return gpu::quant::igemm::kConfigs + (few ? gpu::quant::igemm::kSplitConfigs : 0);
}
// The streaming kernel's tile shapes for C input channels on this GPU (configs 0 .. n - 1), and
// whether config i's shared memory fits it.
int stream_configs(int64_t C) {
  return hopper() && C >= 64 ? gpu::quant::stream::kConfigs : gpu::quant::stream::kSyncConfigs;
}
bool stream_tile_fits(int i, int64_t C) {
  return gpu::quant::stream::shared_memory(i, static_cast<int>(C)) <= block_smem();
}
// How many of them fit: the streaming tactics the op must offer.
int stream_tiles(int64_t C) {
  int tiles = 0;
  for (int i = 0; i < stream_configs(C); ++i) tiles += stream_tile_fits(i, C);
  return tiles;
}

const Case kCases[] = {
    {2, 8, 8, 16, 32, 3, 1, 1},  {1, 14, 14, 64, 64, 1, 1, 0}, {2, 9, 7, 8, 12, 3, 2, 1},
    {1, 7, 7, 32, 16, 1, 2, 0},  {1, 6, 6, 3, 5, 3, 1, 1},
    // The tensor-core kernel's: partial tiles of pixels and channels, several 64-channel stages per
    // tap, strides, padding and dilation.
    {2, 9, 11, 64, 72, 3, 2, 1}, {1, 5, 6, 192, 24, 3, 1, 1, 2}, {3, 15, 15, 128, 136, 1, 1, 0},
    // The streaming kernel's (1x1, C of 16, 24, 32 or a multiple of 32 from 64 to 512, M % 16 ==
    // 0): a partial channel tile, two channel tiles; MobileNetV2's narrow expansions (C of 16, 24
    // and 32, rows of 2 to 4 8-byte pieces); rows of 6, 10, 12 and 14 chunks (C of 96, 160 and 224
    // end in half a sub-tile); 288 and 512 channels (the conversion unit's epilogue), and 544, which
    // it is not offered (past its widest rows); strided narrow and 6-chunk rows on odd maps.
    {2, 9, 9, 64, 80, 1, 1, 0}, {2, 9, 9, 128, 256, 1, 1, 0}, {1, 10, 10, 256, 32, 1, 1, 0},
    {2, 9, 9, 16, 96, 1, 1, 0}, {1, 10, 11, 24, 144, 1, 1, 0}, {1, 7, 9, 32, 48, 1, 1, 0},
    {1, 7, 7, 96, 576, 1, 1, 0}, {2, 5, 5, 160, 48, 1, 1, 0}, {1, 6, 7, 192, 32, 1, 1, 0},
    {1, 6, 6, 224, 144, 1, 1, 0}, {1, 5, 5, 288, 32, 1, 1, 0}, {2, 9, 9, 512, 144, 1, 1, 0},
    {1, 5, 5, 544, 32, 1, 1, 0},  {2, 9, 11, 24, 48, 1, 2, 0},
    {3, 11, 9, 96, 32, 1, 2, 0},
    // The 3x3 window kernel's (3x3, stride 1, pads 1, C of 64 or 128, M % 64 == 0): a partial last
    // tile over two images of odd width; 128 channels and three channel tiles; images so small
    // that one window spans all three.
    {2, 9, 11, 64, 64, 3, 1, 1}, {1, 12, 13, 128, 192, 3, 1, 1}, {3, 3, 4, 64, 64, 3, 1, 1},
};

enum class Residual { kNone, kInt8, kFloat };

struct Variant {
  bool bias, quantize;
  Residual residual;
  QActivation act;
};

// Each output type with each residual kind, the activations in turn, plus ResNet's steps (bias, a
// residual of each kind, ReLU, int8 output). Every variant builds its own cuDNN graph, whose plans
// take a fraction of a second each to finalize.
std::vector<Variant> variants() {
  std::vector<Variant> v;
  const QActivation acts[] = {QActivation::kRelu, QActivation::kNone, QActivation::kClip};
  int i = 0;
  for (bool q : {true, false})
    for (Residual z : {Residual::kNone, Residual::kInt8, Residual::kFloat}) {
      const QActivation act = acts[i++ % 3];
      v.push_back({act != QActivation::kClip, q, z, act});
    }
  for (Residual z : {Residual::kInt8, Residual::kFloat}) v.push_back({true, true, z, QActivation::kRelu});
  return v;
}

Inputs inputs(const Case& c, const Variant& v, int64_t oh, int64_t ow) {
  Inputs in{rand_tensor(DT::kInt8, {c.n, c.h, c.w, c.c}, -128, 127, true),
            rand_tensor(DT::kFloat32, {}, 0.01, 0.05),
            absent(),
            rand_tensor(DT::kInt8, {c.m, c.k, c.k, c.c}, -128, 127, true),
            rand_tensor(DT::kFloat32, {c.m}, 0.001, 0.01),
            absent(),
            v.bias ? rand_tensor(DT::kFloat32, {c.m}, -3, 3) : absent()};
  if (v.quantize) {
    in.push_back(rand_tensor(DT::kFloat32, {}, 0.05, 0.5));
    in.push_back(absent());
  } else {
    in.push_back(absent());
    in.push_back(absent());
  }
  if (v.residual == Residual::kInt8) {
    in.push_back(rand_tensor(DT::kInt8, {c.n, oh, ow, c.m}, -128, 127, true));
    in.push_back(rand_tensor(DT::kFloat32, {}, 0.01, 0.1));
  } else if (v.residual == Residual::kFloat) {
    in.push_back(rand_tensor(DT::kFloat32, {c.n, oh, ow, c.m}, -4, 4));
  }
  while (!in.back().exists) in.pop_back();
  return in;
}

QConvAttrs attrs_of(const Case& c, QActivation act) {
  QConvAttrs a;
  a.kernel_shape = {c.k, c.k};
  a.strides = {c.stride, c.stride};
  a.pads = {c.pad, c.pad, c.pad, c.pad};
  a.dilations = {c.dilation, c.dilation};
  a.activation = act;
  a.act_alpha = act == QActivation::kClip ? -0.5f : 0.0f;
  a.act_beta = 0.75f;
  return a;
}

// GPU against CPU: int8 within one step on at most 1% (exactly, if `exact`), float to rounding.
void compare(const HostTensor& got, const HostTensor& want, bool exact, const std::string& what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  int64_t off_by_one = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = get(got, i), r = get(want, i);
    if (got.dtype == DT::kInt8) {
      ASSERT_LE(std::abs(g - r), exact ? 0.0 : 1.0) << what << " element " << i << ": gpu " << g << ", cpu " << r;
      off_by_one += g != r;
    } else {
      ASSERT_LE(std::abs(g - r), 1e-5 * std::abs(r) + 1e-5) << what << " element " << i << ": gpu " << g << ", cpu "
                                                             << r;
    }
  }
  EXPECT_LE(off_by_one, std::max<int64_t>(1, got.numel() / 100)) << what << ": too many values one step off";
}

// Views of the inputs' host bytes (absent inputs without data).
std::vector<TensorView> views_of(const Inputs& in) {
  std::vector<TensorView> iv;
  for (const HostTensor& t : in) iv.push_back(t.view(t.exists ? const_cast<uint8_t*>(t.bytes.data()) : nullptr));
  return iv;
}

// What the kernel entry's tactics and workspace queries see: the inputs' host views (shapes and
// build-time constants), shape-only outputs and an environment on a stream of its own.
struct HostStep {
  std::vector<TensorView> iv, ov;
  std::vector<HostTensor> outs;
  Stream stream;
  std::vector<const void*> host_in;
  gpu::GpuEnv env;
  HostStep(const Inputs& in, const std::vector<OutputType>& types) : iv(views_of(in)), outs(empty_outputs(types, 0)) {
    for (HostTensor& t : outs) ov.push_back(t.view(nullptr));
    for (const TensorView& t : iv) host_in.push_back(t.data);
    env = GpuResources::get().env(stream.get(), host_in, nullptr);
  }
  HostStep(const HostStep&) = delete;  // env points into host_in
  HostStep& operator=(const HostStep&) = delete;
};

// Every tactic for `in` (cuDNN's plans, then the direct kernel), direct and under capture, against
// `want`; `expect_plan`: cuDNN must offer at least one plan.
void check_tactics(const QConvAttrs& a, const Inputs& in, const std::vector<OutputType>& types, const HostTensor& want,
                   bool expect_plan, const std::string& what) {
  HostStep step(in, types);
  std::vector<int32_t> tactics =
      gpu::gpu_kernel_entry(OpKind::kNhwcQConv)->tactics(OpKind::kNhwcQConv, a, step.iv, step.ov, step.env);
  if (expect_plan) {
    EXPECT_FALSE(tactics.empty()) << what << ": no cuDNN plan";
  }
  const int64_t C = in[0].shape.back(), M = in[3].shape[0];
  int device = 0, major = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
  const int smem = block_smem();
  const bool igemm = major >= 8 && C % 64 == 0 && M % 8 == 0;
  const bool int8_y = in.size() > 7 && in[7].exists, float_z = in.size() > 9 && in[9].dtype == DT::kFloat32;
  // 1x1 with no leading pads, and an output of (H - 1) / stride + 1 rows and columns (a trailing
  // pad that no output reads is allowed).
  const int64_t H = in[0].shape[1], W = in[0].shape[2];
  const std::vector<int64_t>& ys = types[0].shape;
  const bool stream = major >= 8 && (C == 16 || C == 24 || C == 32 || (C % 32 == 0 && C >= 64 && C <= 512)) &&
                      M % 16 == 0 &&
                      a.kernel_shape == std::vector<int64_t>{1, 1} && a.pads[0] == 0 && a.pads[1] == 0 &&
                      ys[1] == (H - 1) / a.strides[0] + 1 && ys[2] == (W - 1) / a.strides[1] + 1 && int8_y && !float_z;
  const bool halo = hopper() && (C == 64 || C == 128) && M % 64 == 0 && a.kernel_shape == std::vector<int64_t>{3, 3} &&
                    a.strides == std::vector<int64_t>{1, 1} && a.pads == std::vector<int64_t>{1, 1, 1, 1} &&
                    a.dilations == std::vector<int64_t>{1, 1} && gpu::quant::halo::shared_memory(C, W) <= smem;
  auto offered = [&](int32_t lo, int32_t hi) {
    return std::count_if(tactics.begin(), tactics.end(), [&](int32_t t) { return t >= lo && t < hi; });
  };
  EXPECT_EQ(offered(kIgemmTactic, kStreamTactic), igemm ? igemm_tiles(ys[0] * ys[1] * ys[2], M) : 0)
      << what << ": tensor-core tile shapes offered";
  EXPECT_EQ(offered(kStreamTactic, kStreamTactic + 100), stream ? stream_tiles(C) : 0)
      << what << ": streaming tile shapes offered";
  EXPECT_EQ(offered(kHaloTactic, kHaloTactic + 100), halo ? gpu::quant::halo::kConfigs : 0)
      << what << ": 3x3 window tile shapes offered";
  tactics.push_back(kDirectTactic);
  for (int32_t t : tactics) {
    const bool direct = t == kDirectTactic;
    GpuRunOptions o;
    o.tactic = t;
    for (GpuMode mode : {GpuMode::kDirect, GpuMode::kCaptured}) {
      std::vector<HostTensor> got;
      try {
        got = run_gpu(OpKind::kNhwcQConv, a, in, types, mode, o);
      } catch (const Error& e) {
        ADD_FAILURE() << what << " tactic " << t << ": " << e.what();
        continue;
      }
      compare(got[0], want, direct, what + " tactic " + std::to_string(t) + " " + mode_name(mode));
    }
  }
}

std::vector<OutputType> output_types(const QConvAttrs& a, const Inputs& in) {
  return infer_shapes(OpKind::kNhwcQConv, a, views_of(in), 1);
}

// Case c with variant v (an oh x ow output): every tactic against the CPU (check_tactics).
void check_case(const Case& c, const Variant& v, int64_t oh, int64_t ow, bool expect_plan, const std::string& what) {
  const QConvAttrs a = attrs_of(c, v.act);
  const Inputs in = inputs(c, v, oh, ow);
  const std::vector<OutputType> types = output_types(a, in);
  const std::vector<HostTensor> want = run_cpu(OpKind::kNhwcQConv, a, in, types);
  check_tactics(a, in, types, want[0], expect_plan, what);
}

TEST(GpuNhwcQConv, EveryTacticMatchesCpu) {
  KILN_SKIP_WITHOUT_GPU();
  rng().seed(43);
  for (const Case& c : kCases) {
    const int64_t span = (c.k - 1) * c.dilation + 1;
    const int64_t oh = (c.h + 2 * c.pad - span) / c.stride + 1, ow = (c.w + 2 * c.pad - span) / c.stride + 1;
    for (const Variant& v : variants()) {
      const std::string what = "case c=" + std::to_string(c.c) + " m=" + std::to_string(c.m) +
                               " k=" + std::to_string(c.k) + " quantize=" + std::to_string(v.quantize) +
                               " residual=" + std::to_string(static_cast<int>(v.residual)) +
                               " act=" + std::to_string(static_cast<int>(v.act));
      SCOPED_TRACE(what);
      check_case(c, v, oh, ow, c.c % 4 == 0, what);
    }
  }
}

// The implicit GEMM's split tiles (a cluster of 2, 4 or 8 CTAs per tile, each a share of the
// reduction, summed through distributed shared memory) on ResNet-50's batch-1 layers with deep
// reductions: layer4's 3x3 (72 stages, 9 per CTA at 8) and layer3's, and layer4's 2048 -> 512 1x1.
// ResNet's step: bias, an int8 residual, ReLU, int8 output; and float output with a float residual.
TEST(GpuNhwcQConv, SplitTilesMatchCpu) {
  KILN_SKIP_WITHOUT_GPU();
  rng().seed(79);
  const Case cases[] = {{1, 7, 7, 512, 512, 3, 1, 1}, {1, 14, 14, 256, 256, 3, 1, 1}, {1, 7, 7, 2048, 512, 1, 1, 0}};
  for (const Case& c : cases)
    for (const Variant& v : {Variant{true, true, Residual::kInt8, QActivation::kRelu},
                             Variant{true, false, Residual::kFloat, QActivation::kNone}})
      check_case(c, v, c.h, c.w, true, "split tiles: c=" + std::to_string(c.c) + " k=" + std::to_string(c.k));
}

// A step's inputs uploaded to the device (input 0, the activation, may be another step's output
// instead) and its environment on `stream`: what an engine's context gives its kernels. The views
// point into `in` and `outs` (their shapes), which must outlive the step.
struct DeviceStep {
  QConvAttrs attrs;
  std::vector<HostTensor> outs;
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  std::vector<TensorView> iv, ov;
  std::vector<const void*> host_in;
  std::unique_ptr<gpu::StepState> state;
  gpu::GpuEnv env;
  DeviceStep(const QConvAttrs& a, const Inputs& in, const std::vector<OutputType>& types, void* x, cudaStream_t stream,
             int32_t tactic)
      : attrs(a), outs(empty_outputs(types, 0)) {
    for (size_t i = 0; i < in.size(); ++i) {
      if (!in[i].exists || (i == 0 && x)) {
        iv.push_back(in[i].view(i == 0 ? x : nullptr));
      } else {
        bufs.push_back(std::make_unique<DeviceBuffer>(in[i].bytes.size(), 0));
        bufs.back()->upload(in[i].bytes);
        iv.push_back(in[i].view(bufs.back()->data()));
      }
      const bool constant = in[i].exists && (op_info(OpKind::kNhwcQConv).const_inputs >> i & 1u);
      host_in.push_back(constant ? in[i].bytes.data() : nullptr);
    }
    for (const HostTensor& t : outs) {
      bufs.push_back(std::make_unique<DeviceBuffer>(t.bytes.size(), 0));
      ov.push_back(t.view(bufs.back()->data()));
    }
    env = GpuResources::get().env(stream, host_in, &state);
    env.tactic = tactic;
  }
  DeviceStep(const DeviceStep&) = delete;  // env points into host_in, the views into outs
  DeviceStep& operator=(const DeviceStep&) = delete;
  void run() { gpu::gpu_kernel_entry(OpKind::kNhwcQConv)->fn(OpKind::kNhwcQConv, attrs, iv, ov, env); }
};

// Two steps in one CUDA graph, the second reading the first's output (ResNet's batch-1 1x1
// expansion, then its 1x1 reduction): with programmatic dependent launch the second may start
// before the first ends, and must wait for it (dependent_launch.cuh). A memset node fills the
// first output with a pattern before each replay, so a second step that read early would see it.
// Every Kiln tactic of either step (paired round-robin), over 20 replays, must give exactly what
// the same steps give run one at a time.
TEST(GpuNhwcQConv, ChainedStepsWaitForTheirInputs) {
  KILN_SKIP_WITHOUT_GPU();
  rng().seed(83);
  const Case ca{1, 56, 56, 64, 256, 1, 1, 0}, cb{1, 56, 56, 256, 64, 1, 1, 0};
  const Variant v{true, true, Residual::kNone, QActivation::kRelu};
  const QConvAttrs aa = attrs_of(ca, v.act), ab = attrs_of(cb, v.act);
  const Inputs in_a = inputs(ca, v, ca.h, ca.w);
  Inputs in_b = inputs(cb, v, cb.h, cb.w);
  const std::vector<OutputType> ta = output_types(aa, in_a), tb = output_types(ab, in_b);
  auto kiln_tactics = [](const QConvAttrs& a, const Inputs& in, const std::vector<OutputType>& types) {
    HostStep step(in, types);
    std::vector<int32_t> t =
        gpu::gpu_kernel_entry(OpKind::kNhwcQConv)->tactics(OpKind::kNhwcQConv, a, step.iv, step.ov, step.env);
    std::erase_if(t, [](int32_t x) { return x < kIgemmTactic; });
    return t;
  };
  const std::vector<int32_t> tactics_a = kiln_tactics(aa, in_a, ta), tactics_b = kiln_tactics(ab, in_b, tb);
  ASSERT_FALSE(tactics_a.empty());
  ASSERT_FALSE(tactics_b.empty());
  for (size_t i = 0; i < std::max(tactics_a.size(), tactics_b.size()); ++i) {
    const int32_t t_a = tactics_a[i % tactics_a.size()], t_b = tactics_b[i % tactics_b.size()];
    const std::string what = "tactics " + std::to_string(t_a) + " then " + std::to_string(t_b);
    GpuRunOptions oa, ob;
    oa.tactic = t_a;
    ob.tactic = t_b;
    const std::vector<HostTensor> want_a = run_gpu(OpKind::kNhwcQConv, aa, in_a, ta, GpuMode::kDirect, oa);
    in_b[0] = want_a[0];
    const std::vector<HostTensor> want_b = run_gpu(OpKind::kNhwcQConv, ab, in_b, tb, GpuMode::kDirect, ob);

    Stream stream;
    DeviceStep a(aa, in_a, ta, nullptr, stream.get(), t_a);
    void* y1 = a.bufs.back()->data();
    DeviceStep b(ab, in_b, tb, y1, stream.get(), t_b);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the uploads ran on the legacy stream
    a.run();  // first runs uncaptured, as an engine's first run (the kernels' one-time setup)
    b.run();
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    ASSERT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal), cudaSuccess);
    const cudaError_t set = cudaMemsetAsync(y1, 0x5A, want_a[0].bytes.size(), stream.get());
    a.run();
    b.run();
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(stream.get(), &graph), cudaSuccess) << what;
    ASSERT_EQ(set, cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess) << what;
    for (int replay = 0; replay < 20; ++replay) ASSERT_EQ(cudaGraphLaunch(exec, stream.get()), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess) << what;
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    GpuResources::get().throw_if_device_error();
    bool guards_a = false, guards_b = false;
    const std::vector<uint8_t> got_a = a.bufs.back()->download(&guards_a), got_b = b.bufs.back()->download(&guards_b);
    EXPECT_TRUE(guards_a && guards_b) << what << ": bytes outside the outputs were written";
    EXPECT_EQ(got_a, want_a[0].bytes) << what << ": the first step's output";
    EXPECT_EQ(got_b, want_b[0].bytes) << what << ": the second step read its input before it was complete";
  }
}

// The streaming kernel walks several pixel tiles per CTA through a pipeline of up to 4 buffers (a
// grid of at most one wave): more than five tiles per CTA for every tile shape on an H100 or H200
// (132 SMs), so that every buffer is refilled, the last tile partial, and two channel tiles for the
// 128-channel shapes. ResNet's step: bias, an int8 residual, ReLU, int8 output.
TEST(GpuNhwcQConv, StreamingKernelWalksManyTiles) {
  KILN_SKIP_WITHOUT_GPU();
  rng().seed(53);
  const Case c{8, 115, 115, 64, 144, 1, 1, 0};
  check_case(c, {true, true, Residual::kInt8, QActivation::kRelu}, c.h, c.w, true, "streaming: many tiles");
}

// The 3x3 window kernel walks several tiles per CTA (a grid of one wave in all, shared by the
// channel tiles: 264 CTAs on an H100 or H200, 66 per channel tile here, about 4.6 tiles each), so
// that both window buffers and output-pixel slots are refilled, on ResNet's 56x56 layer with its
// step's epilogue and four channel tiles.
TEST(GpuNhwcQConv, WindowKernelWalksManyTiles) {
  KILN_SKIP_WITHOUT_GPU();
  rng().seed(67);
  const Case c{12, 56, 56, 64, 256, 3, 1, 1};
  check_case(c, {true, true, Residual::kNone, QActivation::kRelu}, c.h, c.w, true, "3x3 window: many tiles");
}

// The same for 256 input channels (ResNet's layer3 expansions; the x rows' copies step by whole
// rows per pass of the threads) and a partial second channel tile of 16 channels.
TEST(GpuNhwcQConv, StreamingKernelWalksManyDeepTiles) {
  KILN_SKIP_WITHOUT_GPU();
  rng().seed(71);
  const Case c{8, 57, 57, 256, 272, 1, 1, 0};
  check_case(c, {true, true, Residual::kInt8, QActivation::kRelu}, c.h, c.w, true, "streaming: many deep tiles");
}

// A strided 1x1 layer (ResNet's 256 -> 512 downsample, here of an odd 57 x 55 map with
// strides 2 and 3): each pixel's input row found by division, over several tiles per CTA.
TEST(GpuNhwcQConv, StreamingKernelWalksManyStridedTiles) {
  KILN_SKIP_WITHOUT_GPU();
  rng().seed(73);
  const Case c{32, 57, 55, 256, 512, 1, 2, 0};
  QConvAttrs a = attrs_of(c, QActivation::kNone);
  a.strides = {2, 3};
  const Variant v{true, true, Residual::kInt8, QActivation::kNone};
  const Inputs in = inputs(c, v, 29, 19);
  const std::vector<OutputType> types = output_types(a, in);
  ASSERT_EQ(types[0].shape, (std::vector<int64_t>{32, 29, 19, 512}));
  const std::vector<HostTensor> want = run_cpu(OpKind::kNhwcQConv, a, in, types);
  check_tactics(a, in, types, want[0], true, "streaming: many strided tiles");
}

// The same for a narrow expansion (MobileNetV2's 24 -> 144 with ReLU6 and int8 output): every
// buffer's zero padding must survive its refills.
TEST(GpuNhwcQConv, StreamingKernelWalksManyNarrowTiles) {
  KILN_SKIP_WITHOUT_GPU();
  rng().seed(59);
  const Case c{4, 115, 115, 24, 144, 1, 1, 0};
  check_case(c, {true, true, Residual::kNone, QActivation::kClip}, c.h, c.w, true, "streaming: many narrow tiles");
}

// The same for rows of a number of chunks that is not a power of two, ending in half a sub-tile
// (MobileNetV2's 160 -> 960 expansions), with two channel tiles for every tile shape.
TEST(GpuNhwcQConv, StreamingKernelWalksManyWideTiles) {
  KILN_SKIP_WITHOUT_GPU();
  rng().seed(61);
  const Case c{4, 61, 61, 160, 272, 1, 1, 0};
  check_case(c, {true, true, Residual::kInt8, QActivation::kClip}, c.h, c.w, true, "streaming: many wide tiles");
}

// The streaming kernel's general epilogue (constants that can make a NaN): NaN, infinite and huge
// biases on the first channels, with each activation NhwcQConv takes, against the CPU, which
// quantizes a NaN to 0 (the fast epilogue's clamp alone would give it the lower bound). Its
// tactics only: cuDNN's plans need not agree on NaN.
TEST(GpuNhwcQConv, StreamingKernelGeneralEpilogue) {
  KILN_SKIP_WITHOUT_GPU();
  rng().seed(59);
  const Case c{2, 9, 9, 128, 32, 1, 1, 0};
  for (QActivation act : {QActivation::kNone, QActivation::kClip, QActivation::kRelu})
    for (Residual z : {Residual::kNone, Residual::kInt8}) {
      const std::string what = "general epilogue act=" + std::to_string(static_cast<int>(act)) +
                               " residual=" + std::to_string(static_cast<int>(z));
      SCOPED_TRACE(what);
      const QConvAttrs a = attrs_of(c, act);
      Inputs in = inputs(c, {true, true, z, act}, c.h, c.w);
      const double special[] = {std::nan(""), INFINITY, -INFINITY, 1e38};
      for (int k = 0; k < 4; ++k) set(in[6], k, special[k]);
      const std::vector<OutputType> types = output_types(a, in);
      const std::vector<HostTensor> want = run_cpu(OpKind::kNhwcQConv, a, in, types);
      for (int i = 0; i < stream_tiles(c.c); ++i) {
        GpuRunOptions o;
        o.tactic = kStreamTactic + i;
        const std::vector<HostTensor> got = run_gpu(OpKind::kNhwcQConv, a, in, types, GpuMode::kDirect, o);
        compare(got[0], want[0], false, what + " tactic " + std::to_string(o.tactic));
      }
    }
}

// Rows of more than 256 channels: the sums pass 2^22, and the streaming kernel converts them on the
// conversion unit (exact to 2^24). ResNet-50's 512 -> 128 and 512 -> 256 shapes at batch 1 (with a
// residual and ReLU, as its block ends have), rows of 480 channels (30 chunks: the largest general
// split, ending in half a sub-tile), and the largest sums 512 products can make: x all -128 with
// weights all -128 (2^23) or all 127 on alternate channels, where the fast epilogue's conversion
// would be wrong by 2^22. Every streaming tile shape that fits the GPU, which must be the ones the
// op offers, against the CPU; none where none fits (GPUs with 99 KB per CTA).
TEST(GpuNhwcQConv, StreamingKernelWideRows) {
  KILN_SKIP_WITHOUT_GPU();
  rng().seed(67);
  auto check_every_tile = [&](const Case& c, const Variant& v, bool extreme, const std::string& what) {
    const QConvAttrs a = attrs_of(c, v.act);
    Inputs in = inputs(c, v, c.h, c.w);
    if (extreme) {
      std::fill(in[0].bytes.begin(), in[0].bytes.end(), uint8_t{0x80});  // -128
      for (int64_t m = 0; m < c.m; ++m)
        std::fill_n(in[3].bytes.begin() + m * c.c, c.c, m % 2 == 0 ? uint8_t{0x80} : uint8_t{0x7f});
      set(in[1], 0, 1.0);
      for (int64_t m = 0; m < c.m; ++m) set(in[4], m, 1e-5);  // sums of +-2^23 give +-84 steps
      set(in[7], 0, 1.0);
    }
    const std::vector<OutputType> types = output_types(a, in);
    const std::vector<HostTensor> want = run_cpu(OpKind::kNhwcQConv, a, in, types);
    HostStep step(in, types);
    const std::vector<int32_t> tactics =
        gpu::gpu_kernel_entry(OpKind::kNhwcQConv)->tactics(OpKind::kNhwcQConv, a, step.iv, step.ov, step.env);
    for (int i = 0; i < stream_configs(c.c); ++i) {
      const bool fits = stream_tile_fits(i, c.c);
      EXPECT_EQ(std::count(tactics.begin(), tactics.end(), kStreamTactic + i), fits ? 1 : 0)
          << what << ": streaming tile shape " << i << " offered";
      if (!fits) continue;
      GpuRunOptions o;
      o.tactic = kStreamTactic + i;
      for (GpuMode mode : {GpuMode::kDirect, GpuMode::kCaptured}) {
        const std::vector<HostTensor> got = run_gpu(OpKind::kNhwcQConv, a, in, types, mode, o);
        compare(got[0], want[0], false, what + " tactic " + std::to_string(o.tactic) + " " + mode_name(mode));
      }
    }
  };
  const Variant resnet{true, true, Residual::kInt8, QActivation::kRelu};
  check_every_tile({1, 28, 28, 512, 128, 1, 1, 0}, resnet, false, "512 -> 128 at 28x28");
  check_every_tile({1, 28, 28, 512, 256, 1, 1, 0}, resnet, false, "512 -> 256 at 28x28");
  check_every_tile({2, 5, 5, 480, 64, 1, 1, 0}, resnet, false, "480 channels");
  check_every_tile({2, 5, 7, 512, 48, 1, 1, 0}, {false, true, Residual::kNone, QActivation::kNone}, true,
                   "extreme sums");
}

// The stem as the channels-last pass writes it: x [N, H, W, 3] padded to 4 channels by a Pad on the
// GPU (checked against the CPU's Pad), W [M, 7, 7, 4] with zeros in channel 3; the GPU's NhwcQConv on
// these against the CPU's on the unpadded x and W. ReLU and an int8 output, as after fuse-qdq.
TEST(GpuNhwcQConv, PaddedStemMatchesUnpaddedCpu) {
  KILN_SKIP_WITHOUT_GPU();
  rng().seed(47);
  const Case c{2, 32, 32, 3, 16, 7, 2, 3};
  const int64_t oh = 16, ow = 16;
  const QConvAttrs a = attrs_of(c, QActivation::kRelu);
  const Inputs in3 = inputs(c, {true, true, Residual::kNone, QActivation::kRelu}, oh, ow);
  const std::vector<OutputType> types = output_types(a, in3);
  const std::vector<HostTensor> want = run_cpu(OpKind::kNhwcQConv, a, in3, types);

  const Inputs pad_in{in3[0], make(DT::kInt64, {8}, {0, 0, 0, 0, 0, 0, 0, 1})};
  const std::vector<OutputType> pad_types =
      infer_shapes(OpKind::kPad, PadAttrs{}, infer_views(OpKind::kPad, pad_in), 1);
  ASSERT_EQ(pad_types[0].shape, (Shape{c.n, c.h, c.w, 4}));
  const HostTensor x4 = run_gpu(OpKind::kPad, PadAttrs{}, pad_in, pad_types, GpuMode::kDirect)[0];
  expect_match(x4, run_cpu(OpKind::kPad, PadAttrs{}, pad_in, pad_types)[0], {}, "Pad");

  Inputs in4 = in3;
  in4[0] = x4;
  in4[3] = make(DT::kInt8, {c.m, c.k, c.k, 4}, {0});
  for (int64_t i = 0; i < in3[3].numel(); ++i) set(in4[3], i / 3 * 4 + i % 3, get(in3[3], i));
  check_tactics(a, in4, output_types(a, in4), want[0], true, "padded stem");
}

// Zero points other than 0 are not what the channels-last pass makes; a crafted engine gets a clear
// error instead of wrong values.
TEST(GpuNhwcQConv, RejectsNonZeroZeroPoints) {
  KILN_SKIP_WITHOUT_GPU();
  const Case c{1, 4, 4, 8, 8, 1, 1, 0};
  const QConvAttrs a = attrs_of(c, QActivation::kNone);
  Inputs in = inputs(c, {true, true, Residual::kNone, QActivation::kNone}, 4, 4);
  in[2] = make(DT::kInt8, {}, {3});
  std::vector<TensorView> iv;
  for (const HostTensor& t : in) iv.push_back(t.view(t.exists ? const_cast<uint8_t*>(t.bytes.data()) : nullptr));
  expect_cuda_backend_error(OpKind::kNhwcQConv, a, in, infer_shapes(OpKind::kNhwcQConv, a, iv, 1),
                            "zero points of 0 only");
}

// ---- pool_mean (fuse-conv-pool): y [N, 1, 1, M], the mean of each image's outputs ----------------

// Every tactic of a pooled step (those of the same convolution without the pooling, plus the direct
// kernel), direct and captured, against the CPU (the convolution, then ReduceMean). The mean of
// mixed-sign values may cancel, so the bound is absolute as well as relative. The tensor-core tile
// shapes whose tiles hold whole images average in their epilogue and ask for no workspace; the
// others compute the full output into the workspace and reduce it there.
void check_pooled(const Case& c, const Variant& v, const std::string& what) {
  QConvAttrs a = attrs_of(c, v.act);
  const int64_t span = (c.k - 1) * c.dilation + 1;
  const int64_t oh = (c.h + 2 * c.pad - span) / c.stride + 1, ow = (c.w + 2 * c.pad - span) / c.stride + 1;
  const Inputs in = inputs(c, v, oh, ow);
  a.pool_mean = 1;
  const std::vector<OutputType> types = output_types(a, in);
  ASSERT_EQ(types[0].shape, (std::vector<int64_t>{c.n, 1, 1, c.m})) << what;
  const HostTensor want = run_cpu(OpKind::kNhwcQConv, a, in, types)[0];
  HostStep step(in, types);
  const gpu::GpuKernelEntry* e = gpu::gpu_kernel_entry(OpKind::kNhwcQConv);
  std::vector<int32_t> tactics = e->tactics(OpKind::kNhwcQConv, a, step.iv, step.ov, step.env);
  QConvAttrs plain = a;
  plain.pool_mean = 0;
  {
    HostStep unpooled(in, output_types(plain, in));
    EXPECT_EQ(tactics, e->tactics(OpKind::kNhwcQConv, plain, unpooled.iv, unpooled.ov, unpooled.env))
        << what << ": the tactics of the convolution without the pooling";
  }
  tactics.push_back(kDirectTactic);
  int in_kernel = 0;
  for (int32_t t : tactics) {
    step.env.tactic = t;
    const size_t ws = e->workspace(OpKind::kNhwcQConv, a, step.iv, step.ov, step.env);
    in_kernel += ws == 0;
    if (t < kIgemmTactic || t >= kStreamTactic) {
      EXPECT_GE(ws, static_cast<size_t>(c.n * oh * ow * c.m * 4)) << what << " tactic " << t << ": the full output";
    }
    GpuRunOptions o;
    o.tactic = t;
    for (GpuMode mode : {GpuMode::kDirect, GpuMode::kCaptured}) {
      std::vector<HostTensor> got;
      try {
        got = run_gpu(OpKind::kNhwcQConv, a, in, types, mode, o);
      } catch (const Error& err) {
        ADD_FAILURE() << what << " tactic " << t << ": " << err.what();
        continue;
      }
      ASSERT_EQ(got[0].numel(), want.numel());
      for (int64_t i = 0; i < want.numel(); ++i) {
        const double g = get(got[0], i), r = get(want, i);
        ASSERT_LE(std::abs(g - r), 1e-5 * std::abs(r) + 1e-4)
            << what << " tactic " << t << " " << mode_name(mode) << " element " << i << ": gpu " << g << ", cpu " << r;
      }
    }
  }
  int device = 0, major = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
  const bool igemm = major >= 8 && c.c % 64 == 0 && c.m % 8 == 0;  // Kiln's tensor-core kernel takes it
  if (igemm) {
    EXPECT_GT(in_kernel, 0) << what << ": no tile shape averaged in its epilogue";
  } else {
    EXPECT_EQ(in_kernel, 0) << what;
  }
}

TEST(GpuNhwcQConv, PooledOutputMatchesCpu) {
  KILN_SKIP_WITHOUT_GPU();
  rng().seed(101);
  const Variant resnet{true, false, Residual::kInt8, QActivation::kRelu};  // ResNet-50's last block
  const Variant mixed{true, false, Residual::kFloat, QActivation::kNone};   // signed values
  const Variant clip{false, false, Residual::kNone, QActivation::kClip};
  // ResNet-50's last layer at batch 1 (the split tiles) and 2; 3x3 over three images of 49 pixels,
  // two per 128-row tile, with a partial channel tile; 64 pixels (one image fills a 64-row tile); 81
  // pixels (only the 128-row tiles hold an image); channels the tensor-core kernel does not take.
  const Case cases[] = {{1, 7, 7, 512, 2048, 1, 1, 0}, {2, 7, 7, 512, 256, 1, 1, 0}, {3, 7, 7, 64, 72, 3, 1, 1},
                        {2, 8, 8, 128, 64, 1, 1, 0},   {2, 9, 9, 64, 64, 3, 1, 1},   {2, 7, 7, 32, 16, 1, 1, 0}};
  for (const Case& c : cases)
    for (const Variant& v : {resnet, mixed, clip}) {
      const std::string what = "pooled n=" + std::to_string(c.n) + " " + std::to_string(c.h) + "x" +
                               std::to_string(c.w) + " c=" + std::to_string(c.c) + " m=" + std::to_string(c.m) +
                               " act=" + std::to_string(static_cast<int>(v.act));
      SCOPED_TRACE(what);
      check_pooled(c, v, what);
    }
}

// A pooled output must be float32: an int8 one (y_scale given) is refused by shape inference, and a
// crafted engine's step whose y is not [N, 1, 1, M] by the kernel.
TEST(GpuNhwcQConv, PooledOutputRejectsOtherShapes) {
  KILN_SKIP_WITHOUT_GPU();
  const Case c{1, 7, 7, 64, 64, 1, 1, 0};
  QConvAttrs a = attrs_of(c, QActivation::kRelu);
  a.pool_mean = 1;
  const Inputs in = inputs(c, {true, false, Residual::kNone, QActivation::kRelu}, 7, 7);
  std::vector<OutputType> types = output_types(a, in);
  types[0].shape = {1, 7, 7, 64};
  expect_cuda_backend_error(OpKind::kNhwcQConv, a, in, types, "with pool_mean, y must be float32 [N, 1, 1, M]");
}

// ---- depthwise (group = C = M, w [C, k, k, 1]): Kiln's direct depthwise kernel -----------------

constexpr int32_t kDepthwiseTactic = 3000;  // its one tactic (any tactic runs it)

struct DwCase {
  int64_t n, h, w, c, k, stride, pad, dilation = 1;
};

// 3x3 with vertical stride 1 or 2 (the strip kernel: 8 or 4 output rows a thread, here with a
// last strip cut short by the image's bottom: 9, 7, 5 and 1 output rows), 3x3 dilated, 5x5
// (weights in registers), 7x7 and 1x1 (the generic path); pads 0 to 3; C = 12 (three words a
// pixel) and C = 6 (not a multiple of 4: one channel a thread); MobileNetV2's 96 channels at
// stride 2. The 56x56x512 and 64 7x7x512 cases have more pixels (3136) than one wave of the
// one-pixel grid covers, so its threads step to further pixels (a step spans whole images in the
// second); the last two have more strips than a wave of the strip kernel's grid (about 400 blocks
// of 32 strips on an H100), at stride 1 and 2.
const DwCase kDwCases[] = {
    {2, 9, 9, 8, 3, 1, 1},   {2, 16, 16, 32, 3, 2, 1}, {1, 14, 14, 96, 3, 2, 1}, {2, 10, 10, 16, 3, 1, 2, 2},
    {2, 7, 9, 12, 5, 1, 2},  {1, 11, 11, 32, 5, 2, 2}, {2, 6, 6, 8, 3, 2, 0},    {1, 8, 8, 8, 3, 1, 0},
    {1, 9, 7, 12, 7, 2, 3},  {1, 10, 8, 6, 3, 1, 1},   {1, 5, 5, 4, 1, 1, 0},    {2, 11, 7, 8, 3, 2, 0},
    {3, 1, 5, 8, 3, 1, 1},   {1, 56, 56, 512, 3, 1, 1}, {64, 7, 7, 512, 3, 1, 1}, {64, 56, 56, 32, 3, 1, 1},
    {128, 56, 56, 32, 3, 2, 1},
};

QConvAttrs dw_attrs(const DwCase& c, QActivation act) {
  QConvAttrs a;
  a.kernel_shape = {c.k, c.k};
  a.strides = {c.stride, c.stride};
  a.pads = {c.pad, c.pad, c.pad, c.pad};
  a.dilations = {c.dilation, c.dilation};
  a.group = c.c;
  a.activation = act;
  a.act_alpha = act == QActivation::kClip ? -0.5f : 0.0f;
  a.act_beta = 0.75f;
  return a;
}

// x [n, h, w, c], w [c, k, k, 1]; w_scale per channel or one; the rest as inputs() makes it.
Inputs dw_inputs(const DwCase& c, const Variant& v, bool per_channel, int64_t oh, int64_t ow) {
  const Case as_case{c.n, c.h, c.w, c.c, c.c, c.k, c.stride, c.pad, c.dilation};
  Inputs in = inputs(as_case, v, oh, ow);
  in[3] = rand_tensor(DT::kInt8, {c.c, c.k, c.k, 1}, -128, 127, true);
  if (!per_channel) in[4] = rand_tensor(DT::kFloat32, {}, 0.001, 0.01);
  return in;
}

// Bit for bit: int8 values equal, float32 values with the same bits (NaN: both NaN).
void expect_bit_exact(const HostTensor& got, const HostTensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype, want.dtype) << what;
  ASSERT_EQ(got.numel(), want.numel()) << what;
  const auto es = static_cast<int64_t>(dtype_size(got.dtype));
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = get(got, i), r = get(want, i);
    if (got.dtype == DT::kFloat32 && std::isnan(g) && std::isnan(r)) continue;
    ASSERT_TRUE(std::equal(got.bytes.begin() + i * es, got.bytes.begin() + (i + 1) * es, want.bytes.begin() + i * es))
        << what << " element " << i << ": gpu " << g << ", cpu " << r;
  }
}

// The depthwise step offers its one tactic and needs no workspace; its results, with that tactic and
// the default one, direct, captured and misaligned (one channel a thread), are the CPU's: bit for bit
// for a float32 y, within one step on at most 1% of the values for an int8 y (its epilogue works in
// units of y's step with fused multiply-adds, as the tensor-core kernel's and cuDNN's do), or
// exactly with `exact`.
void check_depthwise(const QConvAttrs& a, const Inputs& in, const std::string& what, bool exact = false) {
  const std::vector<OutputType> types = output_types(a, in);
  const HostTensor want = run_cpu(OpKind::kNhwcQConv, a, in, types)[0];
  HostStep step(in, types);
  const gpu::GpuKernelEntry* entry = gpu::gpu_kernel_entry(OpKind::kNhwcQConv);
  EXPECT_EQ(entry->tactics(OpKind::kNhwcQConv, a, step.iv, step.ov, step.env),
            std::vector<int32_t>{kDepthwiseTactic})
      << what;
  step.env.tactic = kDepthwiseTactic;
  EXPECT_EQ(entry->workspace(OpKind::kNhwcQConv, a, step.iv, step.ov, step.env), 0u) << what;
  for (GpuMode mode : {GpuMode::kDirect, GpuMode::kCaptured, GpuMode::kMisaligned})
    for (int32_t tactic : {kDepthwiseTactic, -1}) {
      if (tactic == -1 && mode != GpuMode::kDirect) continue;
      GpuRunOptions o;
      o.tactic = tactic;
      const std::string run = what + " tactic " + std::to_string(tactic) + " " + mode_name(mode);
      try {
        const HostTensor got = run_gpu(OpKind::kNhwcQConv, a, in, types, mode, o)[0];
        if (got.dtype == DT::kInt8 && !exact)
          compare(got, want, false, run);
        else
          expect_bit_exact(got, want, run);
      } catch (const Error& e) {
        ADD_FAILURE() << run << ": " << e.what();
      }
    }
}

TEST(GpuNhwcQConvDepthwise, MatchesCpu) {
  KILN_SKIP_WITHOUT_GPU();
  rng().seed(53);
  int i = 0;
  for (const DwCase& c : kDwCases) {
    const int64_t span = (c.k - 1) * c.dilation + 1;
    const int64_t oh = (c.h + 2 * c.pad - span) / c.stride + 1, ow = (c.w + 2 * c.pad - span) / c.stride + 1;
    for (bool quantize : {true, false})
      for (Residual z : {Residual::kNone, Residual::kInt8, Residual::kFloat})
        for (QActivation act : {QActivation::kNone, QActivation::kRelu, QActivation::kClip}) {
          const bool bias = i % 2 == 0, per_channel = i % 3 != 0;
          ++i;
          const std::string what = "c=" + std::to_string(c.c) + " k=" + std::to_string(c.k) +
                                   " stride=" + std::to_string(c.stride) + " pad=" + std::to_string(c.pad) +
                                   " dilation=" + std::to_string(c.dilation) + " quantize=" + std::to_string(quantize) +
                                   " residual=" + std::to_string(static_cast<int>(z)) +
                                   " act=" + std::to_string(static_cast<int>(act)) + " bias=" + std::to_string(bias) +
                                   " per_channel=" + std::to_string(per_channel);
          SCOPED_TRACE(what);
          check_depthwise(dw_attrs(c, act), dw_inputs(c, {bias, quantize, z, act}, per_channel, oh, ow), what);
        }
  }
}

// The epilogue's corner cases, where the kernel's float tricks must agree with the CPU's rintf and
// conversions: scales of 1 and small values, so that v = acc + bias is exact and, with biases of
// halves, a rounding tie (to even); NaN (y_zero, 0) and infinite biases (saturation); large sums
// (saturation); clip bounds at halves.
TEST(GpuNhwcQConvDepthwise, EpilogueTiesNanAndSaturation) {
  KILN_SKIP_WITHOUT_GPU();
  rng().seed(59);
  const std::vector<double> biases{kNaN, kInf, -kInf, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.0, -0.0, 126.5, -127.5, 1e30};
  for (double y_scale : {1.0, 2.0, 0.5})
    for (double range : {3.0, 127.0})
      for (QActivation act : {QActivation::kNone, QActivation::kRelu, QActivation::kClip}) {
        const DwCase c{2, 6, 6, 16, 3, 1, 1};
        QConvAttrs a = dw_attrs(c, act);
        a.act_alpha = -20.5f;
        a.act_beta = 30.5f;
        Inputs in{rand_tensor(DT::kInt8, {c.n, c.h, c.w, c.c}, -range, range, true),
                  make(DT::kFloat32, {}, {1.0}),
                  absent(),
                  rand_tensor(DT::kInt8, {c.c, c.k, c.k, 1}, -range, range, true),
                  make(DT::kFloat32, {c.c}, {1.0}),
                  absent(),
                  make(DT::kFloat32, {c.c}, biases),
                  make(DT::kFloat32, {}, {y_scale})};
        const std::string what = "y_scale=" + std::to_string(y_scale) + " range=" + std::to_string(range) +
                                 " act=" + std::to_string(static_cast<int>(act));
        SCOPED_TRACE(what);
        check_depthwise(a, in, what, true);
        in.pop_back();  // a float32 output: NaN and infinities pass through
        check_depthwise(a, in, what + " float", true);
      }
}

// Grouped convolutions (1 < group < C) are not what the channels-last pass makes: a clear error.
TEST(GpuNhwcQConvDepthwise, RejectsGroupedConvolutions) {
  KILN_SKIP_WITHOUT_GPU();
  const DwCase c{1, 6, 6, 8, 3, 1, 1};
  QConvAttrs a = dw_attrs(c, QActivation::kNone);
  a.group = 2;
  Inputs in = dw_inputs(c, {true, true, Residual::kNone, QActivation::kNone}, true, 6, 6);
  in[3] = rand_tensor(DT::kInt8, {8, 3, 3, 4}, -128, 127, true);
  expect_cuda_backend_error(OpKind::kNhwcQConv, a, in, output_types(a, in), "depthwise");
}

}  // namespace
}  // namespace kiln::gpu_test
