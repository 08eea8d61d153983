// GPU tests of the nn family (Conv, ConvTranspose, Gemm, MatMul) against the CPU kernels.
//
// Float outputs here are long dot products whose summation order differs between cuDNN/cuBLASLt
// and the CPU, so the harness' elementwise tolerances do not fit: check_nn uses the harness'
// dot_tolerance (K = the number of products per output, scale = max|a| * max|b|; for float16 and
// bfloat16 also half an output ulp of the largest value). Integer products are exact.
// Every case runs direct, misaligned and under stream capture; a second suite runs each case with
// every tactic the kernel's entry offers.
#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include "gpu_harness.h"
#include "runtime/cuda/nn_gemm.h"

namespace kiln::gpu_test {
namespace {

using Inputs = std::vector<HostTensor>;

// The tactics the kernel's entry offers for these inputs (empty without a tactics function).
std::vector<int32_t> tactics_of(OpKind kind, const Attrs& attrs, const Inputs& ins) {
  std::vector<TensorView> iv, ov;
  for (const HostTensor& t : ins) iv.push_back(t.view(nullptr));
  const std::vector<OutputType> types = infer_shapes(kind, attrs, iv, 1);
  std::vector<HostTensor> outs = empty_outputs(types, 0);
  for (const HostTensor& t : outs) ov.push_back(t.view(nullptr));
  const gpu::GpuKernelEntry* entry = gpu::gpu_kernel_entry(kind);
  if (!entry || !entry->tactics) return {};
  Stream stream;
  const std::vector<const void*> host_in(ins.size(), nullptr);
  gpu::GpuEnv env = GpuResources::get().env(stream.get(), host_in, nullptr);
  return entry->tactics(kind, attrs, iv, ov, env);
}

// ---- comparing -----------------------------------------------------------------------------------
// terms: products summed per output element; scale: bound of one product's size.
void check_nn(OpKind kind, const Attrs& attrs, const Inputs& ins, double terms, double scale, GpuMode mode,
              int32_t tactic = -1, size_t shift = kModeShift) {
  std::string label;
  if (tactic >= 0) label += " tactic " + std::to_string(tactic);
  if (shift != kModeShift) label += " shifted by " + std::to_string(shift) + " bytes";
  auto tol = [&](const HostTensor& want) {
    return is_float(want.dtype) ? dot_tolerance(want.dtype, terms, scale, max_abs(want)) : Tolerance{};
  };
  // Direct runs twice: the second reuses the step state (no setup) and must give the same result.
  check_op_with(kind, attrs, ins, 1, tol, mode, GpuRunOptions{tactic, shift, 2}, label);
}

// ---- cases ---------------------------------------------------------------------------------------
struct NnCase {
  std::string name;
  OpKind kind;
  Attrs attrs;
  std::vector<DT> dtypes;
  std::function<Inputs(DT)> inputs;
  bool tactics = false;  // also run with every tactic
};

const std::vector<DT> kF = {DT::kFloat32, DT::kFloat16};
// Every float type the CPU kernels take: a selection of cases runs them all.
const std::vector<DT> kFD = {DT::kFloat32, DT::kFloat16, DT::kFloat64, DT::kBFloat16};
const std::vector<DT> kInts = {DT::kInt32, DT::kInt64, DT::kUInt32, DT::kUInt64};

int64_t product(const Shape& s, size_t from = 0) {
  int64_t p = 1;
  for (size_t i = from; i < s.size(); ++i) p *= s[i];
  return p;
}

ConvAttrs conv(std::vector<int64_t> pads = {}, std::vector<int64_t> strides = {}, int64_t group = 1,
               std::vector<int64_t> dilations = {}, AutoPad auto_pad = AutoPad::kNotSet) {
  ConvAttrs a;
  a.pads = std::move(pads);
  a.strides = std::move(strides);
  a.group = group;
  a.dilations = std::move(dilations);
  a.auto_pad = auto_pad;
  return a;
}

ConvAttrs conv_t(std::vector<int64_t> pads, std::vector<int64_t> strides, int64_t group = 1,
                 std::vector<int64_t> output_padding = {}, std::vector<int64_t> output_shape = {},
                 std::vector<int64_t> dilations = {}, AutoPad auto_pad = AutoPad::kNotSet) {
  ConvAttrs a = conv(std::move(pads), std::move(strides), group, std::move(dilations), auto_pad);
  a.output_padding = std::move(output_padding);
  a.output_shape = std::move(output_shape);
  return a;
}

// X, W (and B with `bias`), values in [-1, 1]; B has W.shape[0] (Conv) or W.shape[1] * group
// (ConvTranspose) entries.
std::function<Inputs(DT)> conv_inputs(Shape x, Shape w, bool bias, int64_t bias_len = -1) {
  return [=](DT dt) {
    Inputs in{rand_tensor(dt, x, -1, 1), rand_tensor(dt, w, -1, 1)};
    if (bias) in.push_back(rand_tensor(dt, {bias_len >= 0 ? bias_len : w[0]}, -1, 1));
    return in;
  };
}

std::vector<NnCase> conv_cases() {
  const OpKind C = OpKind::kConv, T = OpKind::kConvTranspose;
  const AutoPad su = AutoPad::kSameUpper, sl = AutoPad::kSameLower;
  return {
      // ResNet-like.
      {"Conv3x3Bias", C, conv({1, 1, 1, 1}), kFD, conv_inputs({2, 16, 14, 14}, {16, 16, 3, 3}, true), true},
      {"Conv3x3Wide", C, conv({1, 1, 1, 1}), kF, conv_inputs({1, 64, 28, 28}, {64, 64, 3, 3}, true), true},
      {"Conv1x1", C, conv(), kF, conv_inputs({1, 64, 7, 7}, {32, 64, 1, 1}, false), true},
      // 1x1 with unit strides: also a batched GEMM (tactics from 100), then the bias add (vectorized
      // when the plane is a multiple of 16 bytes).
      {"Conv1x1BiasBatch", C, conv(), kFD, conv_inputs({3, 16, 5, 7}, {24, 16, 1, 1}, true), true},
      {"Conv1x1BiasVectorPlane", C, conv(), kF, conv_inputs({2, 8, 4, 8}, {12, 8, 1, 1}, true), true},
      {"Conv1D1x1", C, conv(), kF, conv_inputs({2, 5, 9}, {3, 5, 1}, true)},
      {"Conv1x1Stride2", C, conv({}, {2, 2}), kF, conv_inputs({2, 8, 9, 9}, {16, 8, 1, 1}, true)},
      {"Conv7x7Stride2", C, conv({3, 3, 3, 3}, {2, 2}), kFD, conv_inputs({1, 3, 32, 32}, {8, 3, 7, 7}, true), true},
      // MobileNet: depthwise, with and without stride; grouped; dilated.
      {"Depthwise", C, conv({1, 1, 1, 1}, {}, 32), kF, conv_inputs({2, 32, 15, 15}, {32, 1, 3, 3}, true), true},
      {"DepthwiseStride2", C, conv({1, 1, 1, 1}, {2, 2}, 24), kF, conv_inputs({1, 24, 16, 16}, {24, 1, 3, 3}, false)},
      {"DepthwiseMultiplier", C, conv({1, 1, 1, 1}, {}, 3), kF, conv_inputs({1, 3, 8, 8}, {6, 1, 3, 3}, true)},
      {"Grouped", C, conv({1, 1, 1, 1}, {}, 3), kF, conv_inputs({1, 12, 10, 10}, {6, 4, 3, 3}, true)},
      {"Dilated", C, conv({2, 2, 2, 2}, {}, 1, {2, 2}), kF, conv_inputs({1, 5, 17, 17}, {7, 5, 3, 3}, true)},
      {"DilatedStrided", C, conv({1, 0, 2, 1}, {2, 3}, 1, {2, 1}), kF,
       conv_inputs({2, 3, 13, 11}, {4, 3, 3, 2}, false)},
      // Odd channel counts, batch > 1.
      {"OddChannels", C, conv({1, 1, 1, 1}), kF, conv_inputs({3, 7, 9, 9}, {5, 7, 3, 3}, true)},
      {"OneByOneImage", C, conv(), kF, conv_inputs({4, 3, 1, 1}, {5, 3, 1, 1}, true)},
      // Asymmetric pads: explicit, SAME_UPPER / SAME_LOWER with an odd total, 1-D.
      {"AsymmetricPads", C, conv({0, 1, 1, 2}), kFD, conv_inputs({1, 3, 11, 12}, {5, 3, 3, 3}, true)},
      {"AsymmetricPadsStrided", C, conv({2, 0, 0, 1}, {2, 2}), kF, conv_inputs({2, 4, 10, 9}, {3, 4, 3, 3}, false)},
      {"SameUpperStride2", C, conv({}, {2, 2}, 1, {}, su), kF, conv_inputs({1, 8, 16, 16}, {8, 8, 3, 3}, true), true},
      {"SameLowerStride2", C, conv({}, {2, 2}, 1, {}, sl), kF, conv_inputs({1, 8, 16, 16}, {8, 8, 3, 3}, true)},
      {"SameUpperEvenKernel", C, conv({}, {}, 1, {}, su), kF, conv_inputs({1, 2, 7, 6}, {3, 2, 2, 4}, false)},
      {"Valid", C, conv({}, {}, 1, {}, AutoPad::kValid), kF, conv_inputs({1, 3, 8, 8}, {4, 3, 3, 3}, true)},
      {"PadsBeyondKernel", C, conv({2, 3, 1, 2}), kF, conv_inputs({1, 2, 4, 4}, {3, 2, 1, 1}, true)},
      {"KernelLargerThanImage", C, conv({2, 2, 2, 2}), kF, conv_inputs({1, 2, 2, 3}, {3, 2, 5, 5}, false)},
      // 1-D and 3-D.
      {"Conv1D", C, conv({1, 2}, {2}), kFD, conv_inputs({3, 5, 20}, {4, 5, 3}, true), true},
      {"Conv1DGrouped", C, conv({1, 1}, {}, 2), kF, conv_inputs({2, 6, 17}, {6, 3, 3}, false)},
      {"Conv3D", C, conv({1, 1, 1, 1, 1, 1}), kF, conv_inputs({1, 3, 6, 7, 8}, {4, 3, 3, 3, 3}, true), true},
      {"Conv3DStrided", C, conv({0, 1, 0, 1, 0, 0}, {2, 1, 2}), kF,
       conv_inputs({2, 2, 5, 6, 7}, {3, 2, 2, 3, 2}, false)},
      // 4 spatial axes: the direct kernel.
      {"Conv4D", C, conv({1, 0, 1, 0, 0, 1, 0, 1}, {1, 2, 1, 1}), kF,
       conv_inputs({2, 3, 4, 5, 3, 4}, {2, 3, 2, 2, 2, 3}, true)},
      // Zero-size: no batch, no input channels (Y = B), no output channels.
      {"ZeroBatch", C, conv({1, 1, 1, 1}), kF, conv_inputs({0, 3, 5, 5}, {4, 3, 3, 3}, true)},
      {"ZeroInputChannels", C, conv({1, 1, 1, 1}), kF, conv_inputs({1, 0, 5, 5}, {4, 0, 3, 3}, true)},
      {"ZeroInputChannelsNoBias", C, conv(), kF, conv_inputs({2, 0, 3, 3}, {4, 0, 1, 1}, false)},
      {"ZeroOutputChannels", C, conv(), kF, conv_inputs({1, 3, 5, 5}, {0, 3, 1, 1}, false)},
      // ConvTranspose.
      {"ConvTStride2OutPad", T, conv_t({1, 1, 1, 1}, {2, 2}, 1, {1, 1}), kFD,
       conv_inputs({1, 4, 5, 5}, {4, 3, 3, 3}, true, 3), true},
      {"ConvTGrouped", T, conv_t({}, {}, 3), kF, conv_inputs({2, 6, 4, 4}, {6, 2, 3, 3}, true, 6), true},
      {"ConvTDepthwise", T, conv_t({1, 1, 1, 1}, {2, 2}, 8), kF, conv_inputs({1, 8, 6, 6}, {8, 1, 4, 4}, false)},
      {"ConvTAsymmetricPads", T, conv_t({0, 1, 1, 0}, {2, 2}), kF, conv_inputs({1, 3, 5, 5}, {3, 2, 3, 3}, true, 2),
       true},
      {"ConvTOutputShape", T, conv_t({}, {2, 2}, 1, {}, {10, 10}), kF,
       conv_inputs({1, 2, 4, 4}, {2, 3, 3, 3}, true, 3)},
      {"ConvTOutputShapeFull", T, conv_t({}, {2, 2}, 1, {}, {1, 3, 9, 8}), kF,
       conv_inputs({2, 2, 4, 4}, {2, 3, 3, 3}, false)},
      {"ConvTSameUpper", T, conv_t({}, {2, 2}, 1, {}, {}, {}, su), kF,
       conv_inputs({1, 3, 5, 4}, {3, 2, 3, 3}, true, 2)},
      {"ConvTSameLower", T, conv_t({}, {2, 2}, 1, {}, {}, {}, sl), kF, conv_inputs({1, 3, 5, 4}, {3, 2, 3, 3}, false)},
      {"ConvTDilated", T, conv_t({1, 1, 1, 1}, {1, 1}, 1, {}, {}, {2, 2}), kF,
       conv_inputs({1, 3, 6, 6}, {3, 4, 3, 3}, true, 4)},
      {"ConvTOutPadNotBelowStride", T, conv_t({}, {1, 1}, 1, {1, 1}, {}, {2, 2}), kF,
       conv_inputs({1, 2, 5, 5}, {2, 3, 3, 3}, true, 3)},
      {"ConvT1D", T, conv_t({1, 0}, {3}, 1, {2}), kFD, conv_inputs({2, 4, 7}, {4, 5, 4}, true, 5), true},
      {"ConvT3D", T, conv_t({1, 1, 1, 1, 1, 1}, {2, 2, 2}, 1, {1, 1, 1}), kF,
       conv_inputs({1, 3, 3, 4, 3}, {3, 2, 3, 3, 3}, true, 2)},
      {"ConvT4D", T, conv_t({0, 1, 0, 0, 1, 0, 0, 0}, {2, 1, 1, 2}), kF,
       conv_inputs({1, 2, 3, 2, 3, 2}, {2, 3, 2, 2, 2, 2}, true, 3)},
      {"ConvTZeroBatch", T, conv_t({}, {2, 2}), kF, conv_inputs({0, 3, 4, 4}, {3, 2, 3, 3}, true, 2)},
      {"ConvTZeroInputChannels", T, conv_t({}, {2, 2}), kF, conv_inputs({1, 0, 4, 4}, {0, 2, 3, 3}, true, 2)},
  };
}

// Products per output element of a Conv / ConvTranspose (an upper bound for the latter).
double conv_terms(OpKind kind, const Attrs& attrs, const Inputs& in) {
  const Shape& w = in[1].shape;
  const int64_t taps = product(w, 2);
  if (kind == OpKind::kConv) return static_cast<double>(w[1] * taps);
  return static_cast<double>(w[0] / std::get<ConvAttrs>(attrs).group * taps);
}

// ---- Gemm and MatMul -----------------------------------------------------------------------------
GemmAttrs gemm(int64_t ta, int64_t tb, float alpha = 1.0f, float beta = 1.0f) {
  GemmAttrs a;
  a.transA = ta;
  a.transB = tb;
  a.alpha = alpha;
  a.beta = beta;
  return a;
}

// A, B (stored per transA/transB) for [m, k] x [k, n], plus C of shape c (absent when c is null).
std::function<Inputs(DT)> gemm_inputs(int64_t m, int64_t n, int64_t k, bool ta, bool tb, std::optional<Shape> c) {
  return [=](DT dt) {
    const bool integer = !is_float(dt);
    const double lo = integer ? (dt == DT::kUInt32 || dt == DT::kUInt64 ? 0 : -9) : -1, hi = integer ? 9 : 1;
    Inputs in{rand_tensor(dt, ta ? Shape{k, m} : Shape{m, k}, lo, hi),
              rand_tensor(dt, tb ? Shape{n, k} : Shape{k, n}, lo, hi)};
    if (c) in.push_back(rand_tensor(dt, *c, lo, hi));
    return in;
  };
}

std::vector<NnCase> gemm_cases() {
  std::vector<NnCase> v;
  const int64_t m = 7, n = 5, k = 9;
  const std::vector<std::pair<std::string, std::optional<Shape>>> cs = {
      {"NoC", std::nullopt},   {"CScalar", Shape{}},  {"COne", Shape{1}},    {"CRow", Shape{n}},
      {"CRow2D", Shape{1, n}}, {"CCol", Shape{m, 1}}, {"CFull", Shape{m, n}}};
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const std::string t = "T" + std::to_string(ta) + std::to_string(tb);
      for (const auto& [cname, c] : cs) {
        v.push_back({"Gemm" + t + cname, OpKind::kGemm, gemm(ta, tb), kFD, gemm_inputs(m, n, k, ta, tb, c)});
        v.push_back({"Gemm" + t + cname + "AlphaBeta", OpKind::kGemm, gemm(ta, tb, 0.5f, -2.0f), kF,
                     gemm_inputs(m, n, k, ta, tb, c)});
      }
      v.push_back({"Gemm" + t + "Large", OpKind::kGemm, gemm(ta, tb, 1.5f, 1.0f), kF,
                   gemm_inputs(129, 67, 300, ta, tb, Shape{67}), true});
    }
  v.push_back(
      {"GemmBetaZeroIgnoresC", OpKind::kGemm, gemm(0, 0, 2.0f, 0.0f), kF, gemm_inputs(m, n, k, 0, 0, Shape{m, n})});
  v.push_back(
      {"GemmBiasBetaNotOne", OpKind::kGemm, gemm(0, 1, 1.0f, 0.25f), kF, gemm_inputs(33, 17, 40, 0, 1, Shape{17})});
  v.push_back({"GemmFullCLarge", OpKind::kGemm, gemm(1, 0, 1.0f, 1.0f), kF,
               gemm_inputs(64, 48, 33, 1, 0, Shape{64, 48}), true});
  v.push_back({"GemmK0", OpKind::kGemm, gemm(0, 0, 1.0f, 3.0f), kFD, gemm_inputs(4, 3, 0, 0, 0, Shape{4, 1})});
  v.push_back({"GemmK0NoC", OpKind::kGemm, gemm(0, 0), kF, gemm_inputs(4, 3, 0, 0, 0, std::nullopt)});
  v.push_back({"GemmM0", OpKind::kGemm, gemm(0, 0), kF, gemm_inputs(0, 3, 5, 0, 0, Shape{3})});
  v.push_back({"GemmN1", OpKind::kGemm, gemm(0, 1), kF, gemm_inputs(6, 1, 8, 0, 1, Shape{6, 1})});
  v.push_back({"GemmK1", OpKind::kGemm, gemm(0, 0), kF, gemm_inputs(6, 7, 1, 0, 0, Shape{7})});
  v.push_back({"GemmInt", OpKind::kGemm, gemm(0, 0, 2.0f, 3.0f), kInts, gemm_inputs(19, 21, 37, 0, 0, Shape{21})});
  v.push_back(
      {"GemmIntTransCCol", OpKind::kGemm, gemm(1, 1, -1.5f, 1.0f), kInts, gemm_inputs(5, 18, 17, 1, 1, Shape{5, 1})});
  v.push_back({"GemmIntK0", OpKind::kGemm, gemm(0, 0, 1.0f, 2.0f), kInts, gemm_inputs(3, 4, 0, 0, 0, Shape{4})});
  // Small batches with transB = 1 (nn.Linear): the GEMV tactic, with every form of C. k = 264 is 33
  // chunks of float16 (66 of float32), so the last lanes of each warp get one chunk fewer.
  const std::vector<std::pair<std::string, std::optional<Shape>>> small_cs = {
      {"NoC", std::nullopt}, {"CRow", Shape{37}}, {"CFull", Shape{8, 37}}, {"CCol", Shape{8, 1}}};
  for (int64_t sm : {1, 2, 5, 8})
    for (const auto& [cname, c] : small_cs) {
      std::optional<Shape> cs = c;
      if (cs && cs->size() == 2) (*cs)[0] = sm;
      v.push_back({"GemmSmallM" + std::to_string(sm) + cname, OpKind::kGemm, gemm(0, 1, 0.5f, cname == "CRow" ? 1.0f : -1.5f),
                   kFD, gemm_inputs(sm, 37, 264, 0, 1, cs), true});
    }
  // ResNet-50's classifier at batch 1 and 3.
  v.push_back({"GemmResNetClassifier", OpKind::kGemm, gemm(0, 1), kF, gemm_inputs(1, 1000, 2048, 0, 1, Shape{1000}), true});
  v.push_back({"GemmResNetClassifierB3", OpKind::kGemm, gemm(0, 1), kF, gemm_inputs(3, 1000, 2048, 0, 1, Shape{1000}), true});
  return v;
}

std::function<Inputs(DT)> matmul_inputs(Shape a, Shape b) {
  return [=](DT dt) {
    const bool integer = !is_float(dt);
    const double lo = integer ? (dt == DT::kUInt32 || dt == DT::kUInt64 ? 0 : -9) : -1, hi = integer ? 9 : 1;
    return Inputs{rand_tensor(dt, a, lo, hi), rand_tensor(dt, b, lo, hi)};
  };
}

std::vector<NnCase> matmul_cases() {
  const OpKind M = OpKind::kMatMul;
  auto mm = [&](std::string name, Shape a, Shape b, std::vector<DT> dts = kFD, bool tactics = false) {
    return NnCase{"MatMul" + name, M, NoAttrs{}, std::move(dts), matmul_inputs(std::move(a), std::move(b)), tactics};
  };
  return {
      mm("2D", {3, 4}, {4, 5}),
      mm("Large", {129, 300}, {300, 67}, kF, true),
      mm("FoldedBatch", {2, 3, 4}, {4, 5}),
      mm("FoldedBatchLarge", {8, 64, 96}, {96, 80}, kF, true),
      mm("StridedBatch", {2, 3, 4}, {2, 4, 5}, kFD, true),
      mm("SharedA", {3, 4}, {6, 4, 5}),
      mm("VectorA", {4}, {4, 5}),
      mm("VectorB", {3, 4}, {4}),
      mm("Dot", {7}, {7}),
      mm("VectorABatchedB", {5}, {2, 5, 3}),
      mm("BatchedAVectorB", {2, 3, 4}, {4}),
      mm("BroadcastBoth", {2, 1, 3, 4}, {1, 5, 4, 2}),
      mm("BroadcastOuter", {3, 1, 4, 2}, {2, 2, 6}),
      mm("BroadcastRank4", {2, 3, 2, 5}, {1, 3, 5, 4}),
      mm("K1", {3, 1}, {1, 4}),
      mm("N1", {2, 6, 9}, {2, 9, 1}),
      mm("ZeroM", {0, 4}, {4, 5}),
      mm("ZeroK", {3, 0}, {0, 5}),
      mm("ZeroKBatched", {2, 3, 0}, {0, 5}),
      mm("ZeroBatch", {2, 0, 3, 4}, {4, 5}),
      mm("Int", {2, 7, 13}, {13, 6}, kInts),
      mm("IntBroadcast", {3, 1, 4, 5}, {2, 5, 3}, kInts),
      mm("IntVectors", {6}, {6}, kInts),
      mm("IntZeroK", {3, 0}, {0, 2}, kInts),
  };
}

double gemm_terms(OpKind kind, const Attrs& attrs, const Inputs& in) {
  if (kind == OpKind::kMatMul) return static_cast<double>(in[0].shape.back());
  const auto& a = std::get<GemmAttrs>(attrs);
  return static_cast<double>(a.transA ? in[0].shape[0] : in[0].shape[1]);
}

double terms_of(const NnCase& c, const Inputs& in) {
  return c.kind == OpKind::kConv || c.kind == OpKind::kConvTranspose ? conv_terms(c.kind, c.attrs, in)
                                                                     : gemm_terms(c.kind, c.attrs, in);
}

double scale_of(const NnCase& c, const Inputs& in) {
  double s = max_abs(in[0]) * max_abs(in[1]);
  if (c.kind == OpKind::kGemm) s *= std::abs(std::get<GemmAttrs>(c.attrs).alpha);
  return s;
}

std::vector<NnCase> all_cases() {
  std::vector<NnCase> v = conv_cases();
  for (auto part : {gemm_cases(), matmul_cases()}) v.insert(v.end(), part.begin(), part.end());
  return v;
}

std::vector<NnCase> tactic_cases() {
  std::vector<NnCase> v;
  for (NnCase& c : all_cases())
    if (c.tactics) v.push_back(std::move(c));
  return v;
}

void PrintTo(const NnCase& c, std::ostream* os) { *os << c.name; }

// ---- the tests -----------------------------------------------------------------------------------
class NnGpu : public testing::TestWithParam<NnCase> {};

TEST_P(NnGpu, MatchesCpu) {
  KILN_SKIP_WITHOUT_GPU();
  const NnCase& c = GetParam();
  rng().seed(static_cast<uint32_t>(std::hash<std::string>{}(c.name)));
  for (DT dt : c.dtypes) {
    SCOPED_TRACE(std::string("dtype ") + std::string(dtype_name(dt)));
    const Inputs in = c.inputs(dt);
    for (GpuMode mode : {GpuMode::kDirect, GpuMode::kMisaligned, GpuMode::kCaptured})
      check_nn(c.kind, c.attrs, in, terms_of(c, in), scale_of(c, in), mode);
  }
}

INSTANTIATE_TEST_SUITE_P(Nn, NnGpu, testing::ValuesIn(all_cases()),
                         [](const testing::TestParamInfo<NnCase>& info) { return info.param.name; });

// Every tactic the entry offers gives the right result (the builder may pick any of them).
class NnGpuTactics : public testing::TestWithParam<NnCase> {};

TEST_P(NnGpuTactics, EveryTacticMatchesCpu) {
  KILN_SKIP_WITHOUT_GPU();
  const NnCase& c = GetParam();
  rng().seed(static_cast<uint32_t>(std::hash<std::string>{}(c.name)));
  for (DT dt : c.dtypes) {
    SCOPED_TRACE(std::string("dtype ") + std::string(dtype_name(dt)));
    const Inputs in = c.inputs(dt);
    const std::vector<int32_t> tactics = tactics_of(c.kind, c.attrs, in);
    // A bfloat16 convolution cuDNN has no algorithm for runs the direct kernel, which has no tactics.
    if (dt != DT::kBFloat16) {
      EXPECT_FALSE(tactics.empty()) << c.name << ": no tactics";
    }
    for (int32_t t : tactics) check_nn(c.kind, c.attrs, in, terms_of(c, in), scale_of(c, in), GpuMode::kDirect, t);
    // The small-batch cases exist for the GEMV: it must be offered, and it also runs captured in a
    // graph and on pointers it cannot take (shifted by one element: cuBLASLt's first algorithm instead).
    if (c.name.rfind("GemmSmallM", 0) == 0 || c.name.rfind("GemmResNet", 0) == 0) {
      const bool gemv = std::find(tactics.begin(), tactics.end(), gpu::kGemvTactic) != tactics.end();
      EXPECT_EQ(gemv, dt != DT::kFloat64) << c.name;
      if (gemv)
        for (GpuMode mode : {GpuMode::kCaptured, GpuMode::kMisaligned})
          check_nn(c.kind, c.attrs, in, terms_of(c, in), scale_of(c, in), mode, gpu::kGemvTactic);
    }
    // An unknown tactic (an engine built elsewhere) falls back to the default.
    check_nn(c.kind, c.attrs, in, terms_of(c, in), scale_of(c, in), GpuMode::kDirect, 1000);
  }
}

INSTANTIATE_TEST_SUITE_P(Nn, NnGpuTactics, testing::ValuesIn(tactic_cases()),
                         [](const testing::TestParamInfo<NnCase>& info) { return info.param.name; });

// The GEMV tactic is offered exactly where runtime/cuda/gemm/gemv.cu takes the product: at most 8 rows of A, W
// transposed, k a whole number of 16-byte chunks, a float type other than float64.
TEST(NnGpuGemv, OfferedForSmallBatchesOnly) {
  KILN_SKIP_WITHOUT_GPU();
  auto offered = [](int64_t m, int64_t k, int64_t ta, int64_t tb, DT dt) {
    const std::vector<int32_t> t = tactics_of(OpKind::kGemm, gemm(ta, tb), gemm_inputs(m, 16, k, ta, tb, Shape{16})(dt));
    return std::find(t.begin(), t.end(), gpu::kGemvTactic) != t.end();
  };
  EXPECT_TRUE(offered(1, 64, 0, 1, DT::kFloat16));
  EXPECT_TRUE(offered(8, 64, 0, 1, DT::kFloat32));
  EXPECT_TRUE(offered(4, 64, 0, 1, DT::kBFloat16));
  EXPECT_FALSE(offered(9, 64, 0, 1, DT::kFloat16));  // a batch of 9
  EXPECT_FALSE(offered(1, 60, 0, 1, DT::kFloat16));  // 60 halves: not whole 16-byte chunks
  EXPECT_TRUE(offered(1, 60, 0, 1, DT::kFloat32));   // 15 chunks of float32
  EXPECT_FALSE(offered(1, 64, 0, 0, DT::kFloat16));  // W not transposed
  EXPECT_FALSE(offered(1, 64, 1, 1, DT::kFloat16));  // A transposed
  EXPECT_FALSE(offered(1, 64, 0, 1, DT::kFloat64));
}

// Pointers 16-byte aligned (but not 32): cuDNN still runs (the direct kernel takes over below 16),
// cuBLASLt with the alignment its plan assumed; at 8 bytes cuBLASLt plans again.
TEST(NnGpuAlignment, SixteenAndEightByteShifts) {
  KILN_SKIP_WITHOUT_GPU();
  for (const NnCase& c : all_cases()) {
    if (!c.tactics) continue;
    rng().seed(static_cast<uint32_t>(std::hash<std::string>{}(c.name)));
    for (DT dt : kF) {
      const Inputs in = c.inputs(dt);
      for (size_t shift : {size_t{16}, size_t{8}})
        check_nn(c.kind, c.attrs, in, terms_of(c, in), scale_of(c, in), GpuMode::kDirect, -1, shift);
    }
  }
}

// gemm_rowmajor (nn_gemm.h), the helper other GPU code calls: transposes, leading dimensions
// wider than the matrices, strided batches with a shared A, alpha and beta, float32, float16 and
// bfloat16.
TEST(NnGpuGemmHelper, RowMajorBatchedMatchesReference) {
  KILN_SKIP_WITHOUT_GPU();
  rng().seed(7);
  for (DT dt : {DT::kFloat32, DT::kFloat16, DT::kBFloat16})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " ta " + std::to_string(ta) + " tb " + std::to_string(tb));
        const int64_t m = 13, n = 10, k = 21, batch = 3, pad = 3;
        gpu::GemmDesc d;
        d.dtype = dt;
        d.trans_a = ta;
        d.trans_b = tb;
        d.m = m;
        d.n = n;
        d.k = k;
        d.lda = (ta ? m : k) + pad;
        d.ldb = (tb ? k : n) + pad;
        d.ldc = n + pad;
        d.batch = batch;
        const int64_t a_rows = ta ? k : m, b_rows = tb ? n : k;
        d.stride_a = 0;  // one A for every batch
        d.stride_b = b_rows * d.ldb;
        d.stride_c = m * d.ldc;
        const HostTensor a = rand_tensor(dt, {a_rows * d.lda}, -1, 1);
        const HostTensor b = rand_tensor(dt, {batch * b_rows * d.ldb}, -1, 1);
        HostTensor c = rand_tensor(dt, {batch * m * d.ldc}, -1, 1);
        const float alpha = 0.75f, beta = -0.5f;
        // Reference in double from the (rounded) inputs.
        std::vector<double> want(static_cast<size_t>(c.numel()));
        for (int64_t i = 0; i < c.numel(); ++i) want[static_cast<size_t>(i)] = get(c, i);
        for (int64_t bi = 0; bi < batch; ++bi)
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double acc = 0;
              for (int64_t p = 0; p < k; ++p)
                acc += get(a, ta ? p * d.lda + i : i * d.lda + p) *
                       get(b, bi * d.stride_b + (tb ? j * d.ldb + p : p * d.ldb + j));
              double& w = want[static_cast<size_t>(bi * d.stride_c + i * d.ldc + j)];
              w = alpha * acc + beta * w;
            }
        DeviceBuffer da(a.bytes.size(), 0), db(b.bytes.size(), 0), dc(c.bytes.size(), 0);
        DeviceBuffer ws(gpu::kGemmWorkspaceBytes, 0);
        da.upload(a.bytes);
        db.upload(b.bytes);
        dc.upload(c.bytes);
        Stream stream;
        gpu::gemm_rowmajor(GpuResources::get().env(stream.get(), {}, nullptr).cublaslt, stream.get(), d, alpha,
                           da.data(), db.data(), beta, dc.data(), ws.data(), gpu::kGemmWorkspaceBytes);
        KILN_CUDA_OK(cudaStreamSynchronize(stream.get()));
        bool guards = false;
        c.bytes = dc.download(&guards);
        EXPECT_TRUE(guards);
        double max_want = 0;
        for (double w : want) max_want = std::max(max_want, std::abs(w));
        const Tolerance tol = dot_tolerance(dt, k, alpha, max_want);
        int bad = 0;
        for (int64_t i = 0; i < c.numel() && bad < 5; ++i)
          if (!same_value(get(c, i), want[static_cast<size_t>(i)], tol)) {
            ++bad;
            ADD_FAILURE() << "element " << i << ": gpu " << get(c, i) << ", reference " << want[static_cast<size_t>(i)];
          }
      }
}

// ---- errors --------------------------------------------------------------------------------------
void expect_gpu_throws(OpKind kind, const Attrs& attrs, const Inputs& in, const std::string& needle) {
  std::vector<TensorView> iv;
  for (const HostTensor& t : in) iv.push_back(t.view(nullptr));
  expect_cuda_backend_error(kind, attrs, in, infer_shapes(kind, attrs, iv, 1), needle);
}

// FusedGemm's float16 weights under a float32 product (to-fp16's classifier head,
// core/infer/gemm/gemm.cpp): the GEMV is the only tactic and runs it whatever the engine's tactic,
// against the CPU kernel, which widens the weights first; pointers the GEMV cannot take are refused
// with a message rather than run by another kernel that reads one type.
TEST(NnGpuGemv, Float16WeightsUnderFloat32Product) {
  KILN_SKIP_WITHOUT_GPU();
  FusedGemmAttrs a;
  a.transB = 1;
  a.alpha = 0.5f;
  a.activation = Activation::kRelu;
  struct Case {
    int64_t m, n, k;
    std::optional<Shape> c;
  };
  for (const Case& c :
       {Case{1, 1000, 2048, Shape{1000}}, Case{3, 40, 64, std::nullopt}, Case{8, 20, 48, Shape{8, 20}}}) {
    SCOPED_TRACE("m " + std::to_string(c.m) + " n " + std::to_string(c.n) + " k " + std::to_string(c.k));
    Inputs in{rand_tensor(DT::kFloat32, Shape{c.m, c.k}, -1, 1), rand_tensor(DT::kFloat16, Shape{c.n, c.k}, -1, 1)};
    if (c.c) in.push_back(rand_tensor(DT::kFloat32, *c.c, -1, 1));
    EXPECT_EQ(tactics_of(OpKind::kFusedGemm, a, in), std::vector<int32_t>{gpu::kGemvTactic});
    const double scale = max_abs(in[0]) * max_abs(in[1]) * a.alpha;
    for (GpuMode mode : {GpuMode::kDirect, GpuMode::kCaptured})
      for (int32_t tactic : {-1, 0, gpu::kGemvTactic})
        check_nn(OpKind::kFusedGemm, a, in, static_cast<double>(c.k), scale, mode, tactic);
  }
  Inputs odd{rand_tensor(DT::kFloat32, Shape{9, 64}, -1, 1), rand_tensor(DT::kFloat16, Shape{16, 64}, -1, 1)};
  expect_gpu_throws(OpKind::kFusedGemm, a, odd, "runs only as a matrix-vector product");
}

// Types that shape inference and the CPU kernels reject too, given to the GPU kernels directly.
TEST(NnGpuErrors, UnsupportedTypesThrowNamingTheBackend) {
  KILN_SKIP_WITHOUT_GPU();
  expect_cuda_backend_error(OpKind::kConv, conv(), conv_inputs({1, 2, 4, 4}, {3, 2, 3, 3}, false)(DT::kInt32),
                            {OutputType{DT::kInt32, {1, 3, 2, 2}}});
  expect_cuda_backend_error(OpKind::kMatMul, NoAttrs{}, matmul_inputs({2, 3}, {3, 2})(DT::kInt8),
                            {OutputType{DT::kInt8, {2, 2}}});
}

TEST(NnGpuErrors, MoreThanEightSpatialAxesThrow) {
  KILN_SKIP_WITHOUT_GPU();
  const Shape x(11, 1), w(11, 1);
  expect_gpu_throws(OpKind::kConv, conv(), conv_inputs(x, w, false)(DT::kFloat32), "at most 8");
}

TEST(NnGpuErrors, ShapeErrorsThrowBeforeTheGpu) {
  // Shape inference rejects these; the GPU kernels trust the output views it computes.
  const Inputs bad = matmul_inputs({2, 3}, {4, 2})(DT::kFloat32);
  std::vector<TensorView> iv;
  for (const HostTensor& t : bad) iv.push_back(t.view(nullptr));
  EXPECT_THROW(infer_shapes(OpKind::kMatMul, NoAttrs{}, iv, 1), Error);
}

}  // namespace
}  // namespace kiln::gpu_test
