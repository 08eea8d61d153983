// The fused ops' cases (tests/ops/op_case.h; FusedConv of the conv family, FusedGemm and FusedMatMul
// of the gemm family): every activation before and after the residual, and each route the GPU
// kernels take: cuDNN's fused call (Relu or identity, with a bias, with and without the residual),
// cuBLASLt's epilogues (BIAS, RELU, GELU with the residual as C), and the epilogue kernel after a
// plain product (vectorized along the plane, along the channels, or one element per thread); cases
// marked `tactics` run with every tactic the GPU kernel offers. Tolerance: epilogue_tolerance.
#include <limits>
#include <optional>

#include "ops/op_case.h"

namespace kiln::optest {
namespace {

struct FusedCase {
  std::string name;
  OpKind kind;
  Attrs attrs;
  std::vector<DT> dtypes;
  std::function<Inputs(DT)> inputs;
  bool tactics = false;  // also run with every tactic
};

const std::vector<DT> kF = {DT::kFloat32, DT::kFloat16};
const std::vector<DT> kFB = {DT::kFloat32, DT::kFloat16, DT::kBFloat16};  // the transformer products' cases
const std::vector<DT> kFD = {DT::kFloat32, DT::kFloat16, DT::kFloat64};

struct Act {
  std::string name;
  Activation act;
  float alpha = 0.0f, beta = 0.0f;
};

const std::vector<Act>& activations() {
  static const std::vector<Act> all = {
      {"None", Activation::kNone},
      {"Relu", Activation::kRelu},
      {"LeakyRelu", Activation::kLeakyRelu, 0.1f},
      {"Relu6", Activation::kClip, 0.0f, 6.0f},
      {"ClipBelow", Activation::kClip, -0.2f, std::numeric_limits<float>::infinity()},
      {"Sigmoid", Activation::kSigmoid},
      {"Tanh", Activation::kTanh},
      {"Silu", Activation::kSilu},
      {"HardSigmoid", Activation::kHardSigmoid, 0.2f, 0.5f},
      {"HardSwish", Activation::kHardSwish},
      {"Gelu", Activation::kGelu},
      {"GeluTanh", Activation::kGeluTanh},
  };
  return all;
}
const Act kNoAct{"None", Activation::kNone};
const Act kRelu{"Relu", Activation::kRelu};

template <class A>
A with_epilogue(A attrs, const Act& a1, const Act& a2 = kNoAct) {
  EpilogueAttrs& e = attrs;
  e.activation = a1.act;
  e.activation_alpha = a1.alpha;
  e.activation_beta = a1.beta;
  e.activation2 = a2.act;
  e.activation2_alpha = a2.alpha;
  e.activation2_beta = a2.beta;
  return attrs;
}

FusedConvAttrs fused_conv(const Act& a1, const Act& a2 = kNoAct, std::vector<int64_t> pads = {},
                          std::vector<int64_t> strides = {}, int64_t group = 1) {
  FusedConvAttrs a;
  a.pads = std::move(pads);
  a.strides = std::move(strides);
  a.group = group;
  return with_epilogue(a, a1, a2);
}

// X, W, B (or absent), Z (or none); values in [-1, 1]. y: the output shape.
std::function<Inputs(DT)> conv_inputs(Shape x, Shape w, bool bias, std::optional<Shape> z) {
  return [=](DT dt) {
    Inputs in{rand_tensor(dt, x, -1, 1), rand_tensor(dt, w, -1, 1), bias ? rand_tensor(dt, {w[0]}, -1, 1) : absent()};
    if (z) in.push_back(rand_tensor(dt, *z, -1, 1));
    return in;
  };
}

std::vector<FusedCase> conv_cases() {
  const OpKind F = OpKind::kFusedConv;
  const Shape x{2, 16, 10, 10}, w{16, 16, 3, 3}, y{2, 16, 10, 10};
  const std::vector<int64_t> p1{1, 1, 1, 1};
  std::vector<FusedCase> v;
  for (const Act& a : activations()) {
    // Relu and None: cuDNN's fused call (and its unfused tactic); the rest: the epilogue kernel.
    const bool fusable = a.act == Activation::kNone || a.act == Activation::kRelu;
    v.push_back({"Conv3x3" + a.name, F, fused_conv(a, kNoAct, p1), kF, conv_inputs(x, w, true, std::nullopt), fusable});
    v.push_back({"Conv3x3" + a.name + "ResidualRelu", F, fused_conv(a, kRelu, p1), kF, conv_inputs(x, w, true, y)});
    v.push_back({"Conv3x3Residual" + a.name, F, fused_conv(kNoAct, a, p1), kF, conv_inputs(x, w, true, y), fusable});
  }
  // ResNet's shapes: 1x1 (also a GEMM tactic) with the residual, and a strided 3x3 with a plane of 25.
  v.push_back({"Conv1x1ResidualRelu", F, fused_conv(kNoAct, kRelu), kFD,
               conv_inputs({2, 32, 7, 8}, {16, 32, 1, 1}, true, Shape{2, 16, 7, 8}), true});
  v.push_back({"Conv1x1Silu", F, fused_conv({"Silu", Activation::kSilu}), kF,
               conv_inputs({2, 32, 7, 8}, {24, 32, 1, 1}, true, std::nullopt), true});
  v.push_back({"Conv3x3Stride2ResidualRelu", F, fused_conv(kNoAct, kRelu, p1, {2, 2}), kFD,
               conv_inputs({2, 8, 10, 10}, {12, 8, 3, 3}, true, Shape{2, 12, 5, 5}), true});
  // No bias: cuDNN's fused call needs one.
  v.push_back(
      {"Conv3x3NoBiasRelu", F, fused_conv(kRelu, kNoAct, p1), kF, conv_inputs(x, w, false, std::nullopt), true});
  v.push_back({"Conv3x3NoBiasResidualRelu", F, fused_conv(kNoAct, kRelu, p1), kF, conv_inputs(x, w, false, y)});
  // MobileNet: depthwise with ReLU6; odd channels and planes (one element per thread).
  v.push_back({"DepthwiseRelu6", F, fused_conv({"Relu6", Activation::kClip, 0.0f, 6.0f}, kNoAct, p1, {}, 32), kF,
               conv_inputs({2, 32, 9, 9}, {32, 1, 3, 3}, true, std::nullopt)});
  v.push_back({"OddShapesResidualHardSwish", F, fused_conv(kRelu, {"HardSwish", Activation::kHardSwish}, p1), kFD,
               conv_inputs({1, 5, 5, 7}, {7, 5, 3, 3}, true, Shape{1, 7, 5, 7})});
  // The direct kernel (4 spatial axes), the bias fill (no input channels), no batch.
  v.push_back({"Conv4DResidualSigmoid", F, fused_conv(kNoAct, {"Sigmoid", Activation::kSigmoid}), kF,
               conv_inputs({1, 2, 3, 3, 3, 3}, {3, 2, 2, 2, 2, 2}, true, Shape{1, 3, 2, 2, 2, 2})});
  v.push_back({"ZeroInputChannelsTanh", F, fused_conv({"Tanh", Activation::kTanh}), kF,
               conv_inputs({1, 0, 4, 4}, {4, 0, 1, 1}, true, std::nullopt)});
  v.push_back({"ZeroBatch", F, fused_conv(kRelu, kRelu, p1), kF,
               conv_inputs({0, 3, 5, 5}, {4, 3, 3, 3}, true, Shape{0, 4, 5, 5})});
  return v;
}

FusedGemmAttrs fused_gemm(const Act& a1, const Act& a2, int64_t ta, int64_t tb, float alpha, float beta) {
  FusedGemmAttrs a;
  a.transA = ta;
  a.transB = tb;
  a.alpha = alpha;
  a.beta = beta;
  return with_epilogue(a, a1, a2);
}

std::function<Inputs(DT)> gemm_inputs(int64_t m, int64_t n, int64_t k, bool ta, bool tb, std::optional<Shape> c,
                                      bool z) {
  return [=](DT dt) {
    Inputs in{rand_tensor(dt, ta ? Shape{k, m} : Shape{m, k}, -1, 1),
              rand_tensor(dt, tb ? Shape{n, k} : Shape{k, n}, -1, 1), c ? rand_tensor(dt, *c, -1, 1) : absent()};
    if (z) in.push_back(rand_tensor(dt, {m, n}, -1, 1));
    return in;
  };
}

std::vector<FusedCase> gemm_cases() {
  const OpKind F = OpKind::kFusedGemm;
  const int64_t m = 33, n = 24, k = 40;
  const Act gelu_tanh{"GeluTanh", Activation::kGeluTanh}, gelu{"Gelu", Activation::kGelu};
  const Act silu{"Silu", Activation::kSilu}, sigmoid{"Sigmoid", Activation::kSigmoid};
  return {
      // cuBLASLt alone: RELU_BIAS (C per column, beta 1), GELU without C, RELU with a full C.
      {"GemmBiasRelu", F, fused_gemm(kRelu, kNoAct, 0, 1, 1.0f, 1.0f), kFD, gemm_inputs(m, n, k, 0, 1, Shape{n}, false),
       true},
      {"GemmGeluTanh", F, fused_gemm(gelu_tanh, kNoAct, 1, 0, 0.5f, 1.0f), kF,
       gemm_inputs(m, n, k, 1, 0, std::nullopt, false), true},
      {"GemmFullCRelu", F, fused_gemm(kRelu, kNoAct, 0, 0, 1.0f, 0.5f), kF,
       gemm_inputs(m, n, k, 0, 0, Shape{m, n}, false)},
      // The residual as cuBLASLt's C, with and without the bias epilogue.
      {"GemmBiasResidualRelu", F, fused_gemm(kNoAct, kRelu, 0, 1, 1.0f, 1.0f), kF,
       gemm_inputs(m, n, k, 0, 1, Shape{1, n}, true), true},
      {"GemmResidualGeluTanh", F, fused_gemm(kNoAct, gelu_tanh, 1, 1, 2.0f, 1.0f), kF,
       gemm_inputs(m, n, k, 1, 1, std::nullopt, true)},
      // The epilogue kernel: GELU (erf), an activation before the residual, C that is not free.
      {"GemmBiasGelu", F, fused_gemm(gelu, kNoAct, 0, 0, 1.0f, 1.0f), kFD, gemm_inputs(m, n, k, 0, 0, Shape{n}, false),
       true},
      {"GemmSiluResidualSigmoid", F, fused_gemm(silu, sigmoid, 0, 1, 1.0f, 1.0f), kF,
       gemm_inputs(m, n, k, 0, 1, Shape{n}, true)},
      {"GemmFullCResidualRelu", F, fused_gemm(kNoAct, kRelu, 0, 0, 1.0f, 0.25f), kF,
       gemm_inputs(m, n, k, 0, 0, Shape{m, n}, true)},
      {"GemmRowCResidual", F, fused_gemm(kNoAct, kNoAct, 0, 0, 1.0f, 1.0f), kF,
       gemm_inputs(m, n, k, 0, 0, Shape{m, 1}, true)},
      {"GemmOddColumnsHardSwish", F, fused_gemm({"HardSwish", Activation::kHardSwish}, kNoAct, 0, 0, 1.0f, 1.0f), kF,
       gemm_inputs(7, 5, 9, 0, 0, Shape{5}, false)},
      {"GemmK0Relu", F, fused_gemm(kRelu, kRelu, 0, 0, 1.0f, 2.0f), kF, gemm_inputs(4, 8, 0, 0, 0, Shape{8}, true)},
      // Small batches with transB = 1: the GEMV tactic computes the whole epilogue itself.
      {"GemvBiasSiluResidualSigmoid", F, fused_gemm(silu, sigmoid, 0, 1, 1.0f, 1.0f), kFD,
       gemm_inputs(3, 37, 64, 0, 1, Shape{37}, true), true},
      {"GemvFullCRelu", F, fused_gemm(kRelu, kNoAct, 0, 1, 0.5f, -1.5f), kF,
       gemm_inputs(8, 20, 48, 0, 1, Shape{8, 20}, false), true},
      {"GemvGeluResidual", F, fused_gemm(gelu, kNoAct, 0, 1, 1.0f, 1.0f), kF,
       gemm_inputs(1, 300, 512, 0, 1, std::nullopt, true), true},
      // A transformer's linear layers (nn.Linear: B transposed): cuDNN's fused products as well,
      // with the whole epilogue in one graph.
      {"GemmLinearBiasGeluTanhResidual", F, fused_gemm(gelu_tanh, kNoAct, 0, 1, 1.0f, 1.0f), kFB,
       gemm_inputs(130, 200, 264, 0, 1, Shape{200}, true), true},
      {"GemmLinearFullCResidualRelu", F, fused_gemm(kNoAct, kRelu, 0, 1, 1.0f, 1.0f), kFB,
       gemm_inputs(70, 48, 264, 0, 1, Shape{70, 48}, true), true},
  };
}

// A, B, the bias (or absent), Z (or none) for MatMul of a and b giving y.
std::function<Inputs(DT)> matmul_inputs(Shape a, Shape b, Shape y, bool bias, bool z) {
  return [=](DT dt) {
    Inputs in{rand_tensor(dt, a, -1, 1), rand_tensor(dt, b, -1, 1),
              bias ? rand_tensor(dt, {y.back()}, -1, 1) : absent()};
    if (z) in.push_back(rand_tensor(dt, y, -1, 1));
    return in;
  };
}

std::vector<FusedCase> matmul_cases() {
  const OpKind F = OpKind::kFusedMatMul;
  auto e = [](const Act& a1, const Act& a2 = kNoAct) { return with_epilogue(EpilogueAttrs{}, a1, a2); };
  const Act gelu_tanh{"GeluTanh", Activation::kGeluTanh}, gelu{"Gelu", Activation::kGelu};
  std::vector<FusedCase> v = {
      {"MatMulBiasRelu", F, e(kRelu), kFD, matmul_inputs({33, 40}, {40, 24}, {33, 24}, true, false), true},
      {"MatMulFoldedBatchBiasGeluTanh", F, e(gelu_tanh), kF,
       matmul_inputs({4, 8, 40}, {40, 24}, {4, 8, 24}, true, false), true},
      {"MatMulStridedBatchBiasResidualRelu", F, e(kNoAct, kRelu), kF,
       matmul_inputs({3, 8, 40}, {3, 40, 24}, {3, 8, 24}, true, true), true},
      {"MatMulBroadcastBiasResidualGelu", F, e(kNoAct, gelu), kF,
       matmul_inputs({2, 1, 8, 16}, {1, 3, 16, 8}, {2, 3, 8, 8}, true, true)},
      {"MatMulVectorBBiasResidual", F, e(kRelu, kRelu), kF, matmul_inputs({2, 5, 16}, {16}, {2, 5}, true, true)},
      {"MatMulResidualOnly", F, e(kNoAct), kF, matmul_inputs({6, 16}, {16, 8}, {6, 8}, false, true)},
      {"MatMulZeroK", F, e(kRelu, kRelu), kF, matmul_inputs({3, 0}, {0, 8}, {3, 8}, true, true)},
      // A transformer's FFN (bias, erf GELU) on a folded batch of 144 rows and its output
      // projection (bias, residual): cuDNN's fused products as well.
      {"MatMulFfnBiasGelu", F, e(gelu), kFB, matmul_inputs({2, 72, 256}, {256, 136}, {2, 72, 136}, true, false), true},
      {"MatMulProjectionBiasResidual", F, e(kNoAct), kFB,
       matmul_inputs({1, 100, 1000}, {1000, 64}, {1, 100, 64}, true, true), true},
  };
  for (const Act& a : activations())
    v.push_back({"MatMulBiasThen" + a.name, F, e(a), kF, matmul_inputs({16, 24}, {24, 16}, {16, 16}, true, false)});
  return v;
}

double terms_of(const FusedCase& c, const Inputs& in) {
  if (c.kind == OpKind::kFusedConv) {
    double taps = 1;
    for (size_t i = 1; i < in[1].shape.size(); ++i) taps *= static_cast<double>(in[1].shape[i]);
    return taps;
  }
  if (c.kind == OpKind::kFusedGemm) {
    const auto& a = std::get<FusedGemmAttrs>(c.attrs);
    return static_cast<double>(a.transA ? in[0].shape[0] : in[0].shape[1]);
  }
  return static_cast<double>(in[0].shape.back());
}

double scale_of(const FusedCase& c, const Inputs& in) {
  double s = max_abs(in[0]) * max_abs(in[1]);
  if (c.kind == OpKind::kFusedGemm) s *= std::abs(std::get<FusedGemmAttrs>(c.attrs).alpha);
  return s;
}

std::vector<FusedCase> all_cases() {
  std::vector<FusedCase> v = conv_cases();
  for (auto part : {gemm_cases(), matmul_cases()}) v.insert(v.end(), part.begin(), part.end());
  return v;
}

}  // namespace

std::vector<OpCase> fused_cases() {
  std::vector<OpCase> out;
  for (const FusedCase& c : all_cases())
    out.push_back(one_run_case(
        "Fused" + c.name, c.kind, c.attrs, c.dtypes, c.inputs,
        [c](const Inputs& in) -> ToleranceFn {
          const double terms = terms_of(c, in), scale = scale_of(c, in);
          return [terms, scale](const HostTensor& want) { return epilogue_tolerance(want, terms, scale); };
        },
        c.tactics));
  return out;
}

}  // namespace kiln::optest
