// The fused INT8 ops' cases (tests/ops/op_case.h): kiln.QConv, kiln.QMatMul and NhwcQConv, bit for
// bit between backends (the same integer sums and epilogue: runtime/qfused_math.h). QConv and
// QMatMul: the GPU's tensor-core path (int8 weights with zero point 0, uint8 weights with 128; any
// activations, with or without a zero point) and its generic one (other weight zero points), with
// byte and 16-byte tile loads; shapes over several 64 x 64 tiles with ragged edges, groups,
// depthwise, strides, dilations, padding, 1-D to 3-D, size 0, K = 0; epilogues: bias, every
// activation, float / int8 / uint8 outputs; QConv's residual z (int8/uint8, with and without its
// zero point). NhwcQConv: channels-last geometries with every output type and residual kind, run on
// the GPU by its direct kernel (tactic 1000), which shares the CPU's epilogue; its other tactics
// (cuDNN's plans, the tensor-core, streaming and window kernels) round like cuDNN and have their
// own test, tests/gpu/qconv_nhwc_gpu_test.cpp.
#include "ops/op_case.h"

namespace kiln::optest {
namespace {

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

QConvAttrs qconv_attrs(const ConvCase& c, QActivation act) {
  QConvAttrs a;
  a.group = c.group;
  a.strides = c.strides;
  a.dilations = c.dilations;
  a.pads = c.pads;
  set_act(act, a.activation, a.act_alpha, a.act_beta);
  return a;
}

OpCase mixed(std::string name, OpKind kind, std::function<OpRuns()> runs) {
  return {std::move(name), kind, {}, [runs](DT) { return runs(); }};
}

void add_qconv_cases(std::vector<OpCase>& out) {
  for (size_t ci = 0; ci < kConvCases.size(); ++ci) {
    const ConvCase& c = kConvCases[ci];
    out.push_back(mixed("QConv_conv" + std::to_string(ci), OpKind::kQConv, [c] {
      OpRuns runs;
      for (const Variant& v : variants())
        runs.push_back({qconv_attrs(c, v.act), inputs(v, c.x, c.w, c.w[0]), 1, nullptr});
      return runs;
    }));
    // The residual z, y's shape, after y's parameters (absent ones spelled out: z is input 9), on
    // both paths (the variants' weight zero points choose them) and every epilogue.
    out.push_back(mixed("QConv_conv" + std::to_string(ci) + "_residual", OpKind::kQConv, [c, ci] {
      OpRuns runs;
      const std::vector<Variant> vs = variants();
      for (size_t vi = 0; vi < vs.size(); ++vi) {
        const QConvAttrs a = qconv_attrs(c, vs[vi].act);
        Inputs in = inputs(vs[vi], c.x, c.w, c.w[0]);
        const Shape y = infer_shapes(OpKind::kQConv, a, infer_views(OpKind::kQConv, in), 1)[0].shape;
        const size_t i = ci * vs.size() + vi;
        in.resize(9, absent());
        const DT tz = i % 2 ? DT::kInt8 : DT::kUInt8;
        in.push_back(rand_q(tz, y));
        in.push_back(rand_tensor(DT::kFloat32, {}, 0.01, 0.2));
        if (i % 3 != 0) in.push_back(rand_q(tz, {}));
        runs.push_back({a, std::move(in), 1, nullptr});
      }
      return runs;
    }));
  }
}

void add_qmatmul_cases(std::vector<OpCase>& out) {
  // The last two: K % 16 == 0, 16-byte tile loads.
  const std::vector<std::pair<Shape, int64_t>> shapes = {{{3, 5}, 4},      {{2, 3, 17}, 9}, {{64, 300}, 70},
                                                         {{130, 129}, 65}, {{1, 1}, 1},     {{0, 4}, 3},
                                                         {{5, 0}, 2},      {{70, 64}, 33},  {{3, 5, 32}, 16}};
  for (size_t si = 0; si < shapes.size(); ++si) {
    const auto [xs, n] = shapes[si];
    out.push_back(mixed("QMatMul_" + std::to_string(si), OpKind::kQMatMul, [xs, n] {
      OpRuns runs;
      for (const Variant& v : variants()) {
        QMatMulAttrs a;
        set_act(v.act, a.activation, a.act_alpha, a.act_beta);
        runs.push_back({a, inputs(v, xs, {n, xs.back()}, n), 1, nullptr});
      }
      return runs;
    }));
  }
}

// ---- NhwcQConv ---------------------------------------------------------------------------------
struct NhwcGeometry {
  int64_t n, h, w, c, m, k, stride, pad, dilation = 1;
};

enum class Residual { kNone, kInt8, kFloat };

Inputs nhwc_inputs(const NhwcGeometry& g, bool bias, bool quantize, Residual z, int64_t oh, int64_t ow) {
  Inputs in{rand_tensor(DT::kInt8, {g.n, g.h, g.w, g.c}, -128, 127, true),
            rand_tensor(DT::kFloat32, {}, 0.01, 0.05),
            absent(),
            rand_tensor(DT::kInt8, {g.m, g.k, g.k, g.c}, -128, 127, true),
            rand_tensor(DT::kFloat32, {g.m}, 0.001, 0.01),
            absent(),
            bias ? rand_tensor(DT::kFloat32, {g.m}, -3, 3) : absent(),
            quantize ? rand_tensor(DT::kFloat32, {}, 0.05, 0.5) : absent(),
            absent()};
  if (z == Residual::kInt8) {
    in.push_back(rand_tensor(DT::kInt8, {g.n, oh, ow, g.m}, -128, 127, true));
    in.push_back(rand_tensor(DT::kFloat32, {}, 0.01, 0.1));
  } else if (z == Residual::kFloat) {
    in.push_back(rand_tensor(DT::kFloat32, {g.n, oh, ow, g.m}, -4, 4));
  }
  while (!in.back().exists) in.pop_back();
  return in;
}

void add_nhwc_qconv_cases(std::vector<OpCase>& out) {
  // 3x3 and 1x1, strides, padding, dilation, channels of 3 to 72 (not multiples of the tiles).
  const std::vector<NhwcGeometry> geometries = {{2, 8, 8, 16, 32, 3, 1, 1},
                                                {1, 7, 7, 32, 16, 1, 2, 0},
                                                {2, 9, 7, 8, 12, 3, 2, 1},
                                                {1, 6, 6, 3, 5, 3, 1, 1},
                                                {1, 5, 6, 24, 72, 3, 1, 1, 2}};
  for (size_t gi = 0; gi < geometries.size(); ++gi) {
    const NhwcGeometry g = geometries[gi];
    OpCase c = mixed("NhwcQConv_" + std::to_string(gi), OpKind::kNhwcQConv, [g] {
      const int64_t span = (g.k - 1) * g.dilation + 1;
      const int64_t oh = (g.h + 2 * g.pad - span) / g.stride + 1, ow = (g.w + 2 * g.pad - span) / g.stride + 1;
      OpRuns runs;
      const QActivation acts[] = {QActivation::kRelu, QActivation::kNone, QActivation::kClip};
      int i = 0;
      for (bool quantize : {true, false})
        for (Residual z : {Residual::kNone, Residual::kInt8, Residual::kFloat}) {
          QConvAttrs a;
          a.kernel_shape = {g.k, g.k};
          a.strides = {g.stride, g.stride};
          a.pads = {g.pad, g.pad, g.pad, g.pad};
          a.dilations = {g.dilation, g.dilation};
          set_act(acts[i % 3], a.activation, a.act_alpha, a.act_beta);
          runs.push_back({a, nhwc_inputs(g, i++ % 3 != 2, quantize, z, oh, ow), 1, nullptr});
        }
      return runs;
    });
    c.tactic = 1000;  // the GPU's direct kernel: the CPU's epilogue, bit for bit
    out.push_back(std::move(c));
  }
}

}  // namespace

std::vector<OpCase> qfused_cases() {
  std::vector<OpCase> out;
  add_qconv_cases(out);
  add_qmatmul_cases(out);
  add_nhwc_qconv_cases(out);
  return out;
}

}  // namespace kiln::optest
