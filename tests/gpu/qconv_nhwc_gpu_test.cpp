// NhwcQConv on the GPU (runtime/cuda/extra_qconv_nhwc.cu: a cuDNN graph per step, or the direct
// kernel where cuDNN has no engine) against the CPU kernel (kiln.QConv on permuted tensors), with
// every tactic (candidate cuDNN plan) and under stream capture. cuDNN rounds its float epilogue in its
// own order, so an int8 output may differ by one quantization step, on at most 1% of the values
// (a wrong rounding mode, such as truncation, would move about half of them); float outputs agree to
// float32 rounding. Tactic 1000 asks for the direct kernel (the fallback where cuDNN has no engine),
// which shares the CPU's epilogue: it must match bit for bit. The tensor-core kernel (tactics 2000 +
// tile shape, qconv_igemm.cu, offered where C % 64 == 0 and M % 8 == 0) rounds like cuDNN. The
// channels-last pass's RGB stem (3
// channels padded with a zero channel to 4 by a Pad) against the CPU's unpadded convolution. Skips
// without a GPU.
#include <algorithm>
#include <cmath>

#include "gpu_harness.h"

namespace kiln::gpu_test {
namespace {

using Inputs = std::vector<HostTensor>;

constexpr int32_t kDirectTactic = 1000;  // extra_qconv_nhwc.cu's direct kernel
constexpr int32_t kIgemmTactic = 2000;   // and its tensor-core kernel's first tile shape

struct Case {
  int64_t n, h, w, c, m, k, stride, pad, dilation = 1;
};

const Case kCases[] = {
    {2, 8, 8, 16, 32, 3, 1, 1},  {1, 14, 14, 64, 64, 1, 1, 0}, {2, 9, 7, 8, 12, 3, 2, 1},
    {1, 7, 7, 32, 16, 1, 2, 0},  {1, 6, 6, 3, 5, 3, 1, 1},
    // The tensor-core kernel's: partial tiles of pixels and channels, several 64-channel stages per
    // tap, strides, padding and dilation.
    {2, 9, 11, 64, 72, 3, 2, 1}, {1, 5, 6, 192, 24, 3, 1, 1, 2}, {3, 15, 15, 128, 136, 1, 1, 0},
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

// Every tactic for `in` (cuDNN's plans, then the direct kernel), direct and under capture, against
// `want`; `expect_plan`: cuDNN must offer at least one plan.
void check_tactics(const QConvAttrs& a, const Inputs& in, const std::vector<OutputType>& types, const HostTensor& want,
                   bool expect_plan, const std::string& what) {
  std::vector<TensorView> iv;
  for (const HostTensor& t : in) iv.push_back(t.view(t.exists ? const_cast<uint8_t*>(t.bytes.data()) : nullptr));
  std::vector<HostTensor> outs = empty_outputs(types, 0);
  std::vector<TensorView> ov;
  for (HostTensor& t : outs) ov.push_back(t.view(nullptr));
  Stream stream;
  std::vector<const void*> host_in;
  for (const TensorView& t : iv) host_in.push_back(t.data);
  gpu::GpuEnv env = GpuResources::get().env(stream.get(), host_in, nullptr);
  std::vector<int32_t> tactics = gpu::gpu_kernel_entry(OpKind::kNhwcQConv)->tactics(OpKind::kNhwcQConv, a, iv, ov, env);
  if (expect_plan) {
    EXPECT_FALSE(tactics.empty()) << what << ": no cuDNN plan";
  }
  const bool igemm = in[0].shape.back() % 64 == 0 && in[3].shape[0] % 8 == 0;
  EXPECT_EQ(std::count_if(tactics.begin(), tactics.end(), [](int32_t t) { return t >= kIgemmTactic; }), igemm ? 3 : 0)
      << what << ": tensor-core tile shapes offered";
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
  std::vector<TensorView> iv;
  for (const HostTensor& t : in) iv.push_back(t.view(t.exists ? const_cast<uint8_t*>(t.bytes.data()) : nullptr));
  return infer_shapes(OpKind::kNhwcQConv, a, iv, 1);
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
      const QConvAttrs a = attrs_of(c, v.act);
      const Inputs in = inputs(c, v, oh, ow);
      const std::vector<OutputType> types = output_types(a, in);
      const std::vector<HostTensor> want = run_cpu(OpKind::kNhwcQConv, a, in, types);
      check_tactics(a, in, types, want[0], c.c % 4 == 0, what);
    }
  }
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

}  // namespace
}  // namespace kiln::gpu_test
