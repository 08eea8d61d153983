// kiln.QConv and kiln.QMatMul on the GPU against the CPU kernels, bit for bit (same integer sums,
// same epilogue: runtime/qfused_math.h). Both GPU paths are covered: the tensor-core path (int8
// weights with zero point 0, uint8 weights with 128; any activations, with or without a zero
// point) and the generic one (other weight zero points), with byte and 16-byte tile loads. Shapes
// span several 64 x 64 tiles with ragged edges, groups, depthwise, strides, dilations, padding,
// 1-D to 3-D, size 0, K = 0, and a sum that wraps past int32; epilogues: bias, every activation, float / int8 / uint8
// outputs; QConv's residual z (int8/uint8, with and without its zero point) on both paths. Every
// input set runs direct, misaligned and under stream capture. Skips without a GPU.
#include <algorithm>

#include "gpu_harness.h"

namespace kiln::gpu_test {
namespace {

using Inputs = std::vector<HostTensor>;

const GpuMode kModes[] = {GpuMode::kDirect, GpuMode::kMisaligned, GpuMode::kCaptured};

double qlo(DT t) { return t == DT::kInt8 ? -128 : 0; }
double qhi(DT t) { return t == DT::kInt8 ? 127 : 255; }
HostTensor rand_q(DT t, Shape s) { return rand_tensor(t, std::move(s), qlo(t), qhi(t)); }

// How the weights' zero point is given: absent, the tensor-core value (0 for int8, 128 for
// uint8) per channel, or random per channel (the generic path).
enum class WZero { kAbsent, kTensorCore, kRandom };

struct Variant {
  DT x, w, y;  // y: the output type when quantized
  bool x_zero, bias, quantize;
  WZero w_zero;
  QActivation act;
};

std::vector<Variant> variants() {
  std::vector<Variant> v;
  const QActivation acts[] = {QActivation::kNone, QActivation::kRelu, QActivation::kClip, QActivation::kLeakyRelu};
  int i = 0;
  for (DT x : {DT::kInt8, DT::kUInt8})
    for (DT w : {DT::kInt8, DT::kUInt8})
      for (WZero wz : {WZero::kAbsent, WZero::kTensorCore, WZero::kRandom}) {
        if (w == DT::kUInt8 && wz == WZero::kAbsent) continue;  // uint8 weights always carry their zero point
        v.push_back({x, w, i % 2 ? DT::kUInt8 : DT::kInt8, i % 3 != 0, i % 2 == 0, i % 4 != 1, wz, acts[i % 4]});
        ++i;
      }
  return v;
}

Inputs inputs(const Variant& v, const Shape& xs, const Shape& ws, int64_t m) {
  Inputs in{rand_q(v.x, xs), rand_tensor(DT::kFloat32, {}, 0.005, 0.05), v.x_zero ? rand_q(v.x, {}) : absent(),
            rand_q(v.w, ws), rand_tensor(DT::kFloat32, {m}, 0.005, 0.05)};
  if (v.w_zero == WZero::kAbsent)
    in.push_back(absent());
  else if (v.w_zero == WZero::kTensorCore)
    in.push_back(make(v.w, {m}, {v.w == DT::kUInt8 ? 128.0 : 0.0}));
  else
    in.push_back(rand_q(v.w, {m}));
  in.push_back(v.bias ? rand_tensor(DT::kFloat32, {m}, -3, 3) : absent());
  if (v.quantize) {
    in.push_back(rand_tensor(DT::kFloat32, {}, 0.05, 0.5));
    in.push_back(rand_q(v.y, {}));
  }
  while (!in.back().exists) in.pop_back();
  return in;
}

void set_act(QActivation act, QActivation& a, float& alpha, float& beta) {
  a = act;
  alpha = act == QActivation::kClip ? -0.5f : 0.1f;
  beta = 0.75f;
}

struct ConvCase {
  Shape x, w;
  int64_t group;
  Shape strides, dilations, pads;
};

const std::vector<ConvCase> kConvCases = {
    {{1, 3, 5, 5}, {4, 3, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},
    {{2, 4, 7, 6}, {6, 2, 3, 2}, 2, {2, 1}, {1, 2}, {1, 0, 0, 1}},
    {{1, 2, 9}, {3, 2, 3}, 1, {2}, {}, {}},
    {{1, 3, 4, 4, 4}, {2, 3, 2, 2, 2}, 1, {}, {}, {0, 1, 0, 1, 0, 0}},
    {{2, 24, 19, 21}, {70, 24, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},  // tiles with ragged edges in m and p
    {{1, 40, 30, 30}, {130, 40, 1, 1}, 1, {}, {}, {}},           // 1x1, K = 40
    {{1, 6, 9, 9}, {6, 1, 3, 3}, 6, {2, 2}, {}, {1, 1, 1, 1}},   // depthwise
    {{2, 8, 8, 8}, {8, 4, 3, 3}, 2, {1, 1}, {2, 2}, {2, 2, 2, 2}},
    {{0, 2, 3, 3}, {2, 2, 1, 1}, 1, {}, {}, {}},
    // 16-byte tile loads (direct mode; misaligned mode takes the byte loads): 1x1 with K = 32 and
    // O = 64 (weights and x), 3x3 with K = 144 (weights), grouped 1x1 with K = 16 and O = 36.
    {{2, 32, 8, 8}, {48, 32, 1, 1}, 1, {}, {}, {}},
    {{1, 16, 4, 4}, {20, 16, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},
    {{1, 32, 6, 6}, {32, 16, 1, 1}, 2, {}, {}, {}},
};

TEST(GpuQConv, MatchesCpu) {
  KILN_SKIP_WITHOUT_GPU();
  rng().seed(41);
  for (size_t ci = 0; ci < kConvCases.size(); ++ci) {
    const ConvCase& c = kConvCases[ci];
    for (const Variant& v : variants()) {
      QConvAttrs a;
      a.group = c.group;
      a.strides = c.strides;
      a.dilations = c.dilations;
      a.pads = c.pads;
      set_act(v.act, a.activation, a.act_alpha, a.act_beta);
      const Inputs in = inputs(v, c.x, c.w, c.w[0]);
      for (GpuMode m : kModes) {
        SCOPED_TRACE("conv case " + std::to_string(ci));
        check_op(OpKind::kQConv, a, in, 1, Accuracy::kExact, m);
      }
    }
  }
}

// The residual z, y's shape, after y's parameters (absent ones spelled out: z is input 9), on both
// paths (the variants' weight zero points choose them) and every epilogue.
TEST(GpuQConv, ResidualMatchesCpu) {
  KILN_SKIP_WITHOUT_GPU();
  rng().seed(43);
  int i = 0;
  for (size_t ci = 0; ci < kConvCases.size(); ++ci) {
    const ConvCase& c = kConvCases[ci];
    for (const Variant& v : variants()) {
      QConvAttrs a;
      a.group = c.group;
      a.strides = c.strides;
      a.dilations = c.dilations;
      a.pads = c.pads;
      set_act(v.act, a.activation, a.act_alpha, a.act_beta);
      Inputs in = inputs(v, c.x, c.w, c.w[0]);
      const Shape y = infer_shapes(OpKind::kQConv, a, infer_views(OpKind::kQConv, in), 1)[0].shape;
      in.resize(9, absent());
      const DT tz = i % 2 ? DT::kInt8 : DT::kUInt8;
      in.push_back(rand_q(tz, y));
      in.push_back(rand_tensor(DT::kFloat32, {}, 0.01, 0.2));
      if (i++ % 3 != 0) in.push_back(rand_q(tz, {}));
      for (GpuMode m : kModes) {
        SCOPED_TRACE("conv case " + std::to_string(ci) + " with z");
        check_op(OpKind::kQConv, a, in, 1, Accuracy::kExact, m);
      }
    }
  }
}

TEST(GpuQMatMul, MatchesCpu) {
  KILN_SKIP_WITHOUT_GPU();
  rng().seed(42);
  const std::vector<std::pair<Shape, int64_t>> shapes = {
      {{3, 5}, 4}, {{2, 3, 17}, 9}, {{64, 300}, 70}, {{130, 129}, 65}, {{1, 1}, 1},
      {{0, 4}, 3}, {{5, 0}, 2},     {{70, 64}, 33},  {{3, 5, 32}, 16}};  // the last two: K % 16 == 0, 16-byte tile
                                                                         // loads
  for (const auto& [xs, n] : shapes)
    for (const Variant& v : variants()) {
      QMatMulAttrs a;
      set_act(v.act, a.activation, a.act_alpha, a.act_beta);
      const Inputs in = inputs(v, xs, {n, xs.back()}, n);
      for (GpuMode m : kModes) {
        SCOPED_TRACE("x " + shape_str(xs) + " n " + std::to_string(n));
        check_op(OpKind::kQMatMul, a, in, 1, Accuracy::kExact, m);
      }
    }
}

// 140000 products of -128 * -128 pass 2^31: both paths wrap like int32 accumulators.
TEST(GpuQMatMul, AccumulatorWrapsLikeTheCpu) {
  KILN_SKIP_WITHOUT_GPU();
  for (DT w : {DT::kInt8, DT::kUInt8}) {  // tensor cores, then the generic path (uint8 weights, no zero point)
    const Inputs in{make(DT::kInt8, {2, 140000}, {-128}), make(DT::kFloat32, {}, {1}), absent(),
                    make(w, {3, 140000}, {w == DT::kInt8 ? -128.0 : 255.0}), make(DT::kFloat32, {}, {1})};
    for (GpuMode m : kModes) check_op(OpKind::kQMatMul, QMatMulAttrs{}, in, 1, Accuracy::kExact, m);
  }
}

TEST(GpuQConv, ParametersMustBeConstants) {
  KILN_SKIP_WITHOUT_GPU();
  // The harness gives host copies of the op's constant inputs only; a kernel called without them
  // (not possible from an engine) says which input it needs.
  const Inputs in{rand_q(DT::kInt8, {1, 2, 3, 3}), make(DT::kFloat32, {}, {0.1}), absent(),
                  rand_q(DT::kInt8, {2, 2, 1, 1}), make(DT::kFloat32, {2}, {0.1})};
  std::vector<TensorView> views;
  for (const HostTensor& t : in) views.push_back(t.view(nullptr));
  const std::vector<OutputType> types = infer_shapes(OpKind::kQConv, QConvAttrs{}, infer_views(OpKind::kQConv, in), 1);
  EXPECT_EQ(types[0].dtype, DT::kFloat32);
  GpuResources& res = GpuResources::get();
  Stream s;
  std::unique_ptr<gpu::StepState> state;
  const std::vector<const void*> no_host(in.size(), nullptr);
  gpu::GpuEnv env = res.env(s.get(), no_host, &state);
  std::vector<TensorView> outs = {TensorView{DT::kFloat32, types[0].shape, nullptr, true}};
  try {
    gpu::gpu_kernel(OpKind::kQConv)(OpKind::kQConv, QConvAttrs{}, views, outs, env);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kiln.QConv: input 1 must be a build-time constant"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiln::gpu_test
