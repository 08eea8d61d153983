// The conv and gemm families' op cases (tests/ops/op_case.h): Conv, ConvTranspose, Gemm, MatMul and Attention
// on ResNet-like, odd, strided, dilated, grouped, depthwise, 1-D to 3-D and zero-size shapes, with
// and without bias, auto_pad, transposes and every C broadcast; the float types and, for Gemm and
// MatMul, the integer types.
//
// Float outputs are long dot products whose summation order differs between backends (cuDNN,
// cuBLASLt, the CPU), so the tolerance is dot_tolerance (K = the number of products per output,
// scale = max|a| * max|b|; for float16 and bfloat16 also half an output ulp of the largest value).
// Integer products are exact. Cases marked `tactics` also run with every tactic the GPU kernel
// offers.
#include <cmath>
#include <limits>
#include <optional>

#include "ops/nn_case_util.h"

namespace kiln::optest {
namespace {

struct NnCase {
  std::string name;
  OpKind kind;
  Attrs attrs;
  std::vector<DT> dtypes;
  std::function<Inputs(DT)> inputs;
  bool tactics = false;  // also run with every tactic
};

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
      v.push_back({"GemmSmallM" + std::to_string(sm) + cname, OpKind::kGemm,
                   gemm(0, 1, 0.5f, cname == "CRow" ? 1.0f : -1.5f), kFD, gemm_inputs(sm, 37, 264, 0, 1, cs), true});
    }
  // ResNet-50's classifier at batch 1 and 3.
  v.push_back(
      {"GemmResNetClassifier", OpKind::kGemm, gemm(0, 1), kF, gemm_inputs(1, 1000, 2048, 0, 1, Shape{1000}), true});
  v.push_back(
      {"GemmResNetClassifierB3", OpKind::kGemm, gemm(0, 1), kF, gemm_inputs(3, 1000, 2048, 0, 1, Shape{1000}), true});
  return v;
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

// ---- Attention ----------------------------------------------------------------------------------
struct AttnCase {
  std::string name;
  AttentionAttrs attrs;
  Shape q, k, v;
  std::optional<Shape> mask;
  DT mask_dt = DT::kFloat32;  // kFloat32: Q's type
  std::vector<DT> dtypes = kF;
  bool tactics = false;  // the GPU check also runs every tactic (tensor-core blocks of 4 and 1 warps, portable)
  bool masked_row = false;  // a float mask's first row of keys all -3e38 (bfloat16's lowest is -3.39e38)
};
const std::vector<DT> kFB = {DT::kFloat32, DT::kFloat16, DT::kBFloat16};

AttentionAttrs attn(int64_t causal = 0, float scale = std::numeric_limits<float>::quiet_NaN(), float softcap = 0,
                    int64_t q_heads = 0, int64_t kv_heads = 0, int64_t packed = 0) {
  AttentionAttrs a;
  a.packed_qkv = packed;
  a.is_causal = causal;
  a.scale = scale;
  a.softcap = softcap;
  a.q_num_heads = q_heads;
  a.kv_num_heads = kv_heads;
  return a;
}

AttentionAttrs periodic(AttentionAttrs a, int64_t period) {
  a.mask_period = period;
  return a;
}

AttnCase with_masked_row(AttnCase c) {
  c.masked_row = true;
  return c;
}

// float16 and bfloat16 as well, and every tactic on the GPU: the tensor-core kernel's shapes.
AttnCase tensor_cores(AttnCase c) {
  c.dtypes = kFB;
  c.tactics = true;
  return c;
}

std::vector<AttnCase> attention_cases() {
  const float kNoScale = std::numeric_limits<float>::quiet_NaN();
  return {
      {"AttentionSmall", attn(), {2, 3, 5, 8}, {2, 3, 7, 8}, {2, 3, 7, 8}, std::nullopt, DT::kFloat32, kFD},
      {"AttentionVSize", attn(0, 0.3f), {1, 2, 9, 8}, {1, 2, 33, 8}, {1, 2, 33, 16}, std::nullopt},
      // BERT's padding mask: [batch, 1, 1, keys] of 0 and -10000, added to the scores.
      tensor_cores(
          {"AttentionPaddingMask", attn(), {2, 12, 37, 64}, {2, 12, 37, 64}, {2, 12, 37, 64}, Shape{2, 1, 1, 37}}),
      {"AttentionBoolMask", attn(), {2, 2, 17, 32}, {2, 2, 40, 32}, {2, 2, 40, 32}, Shape{17, 40}, DT::kBool},
      // GPT-2's causal mask over several tiles of keys, head size 64; and 128.
      tensor_cores({"AttentionCausal", attn(1), {1, 4, 70, 64}, {1, 4, 70, 64}, {1, 4, 70, 64}, std::nullopt}),
      {"AttentionCausal128", attn(1), {1, 2, 45, 128}, {1, 2, 45, 128}, {1, 2, 45, 128}, std::nullopt},
      {"AttentionCausalMask", attn(1), {2, 2, 33, 16}, {2, 2, 33, 16}, {2, 2, 33, 16}, Shape{2, 2, 33, 33}},
      {"AttentionGrouped", attn(), {2, 8, 11, 16}, {2, 2, 13, 16}, {2, 2, 13, 16}, std::nullopt},
      {"AttentionSoftcap", attn(0, 2.0f, 5.0f), {1, 2, 6, 8}, {1, 2, 6, 8}, {1, 2, 6, 8}, std::nullopt},
      {"Attention3D", attn(0, kNoScale, 0, 4, 2), {2, 9, 4 * 16}, {2, 21, 2 * 16}, {2, 21, 2 * 24}, Shape{9, 21}},
      {"AttentionHead256", attn(), {1, 1, 20, 256}, {1, 1, 50, 256}, {1, 1, 50, 256}, std::nullopt},
      // Swin's windows: 49 tokens, head size 32, its relative position bias and shifted-window mask
      // as one additive mask per window and head.
      tensor_cores({"AttentionWindows32", attn(), {4, 3, 49, 32}, {4, 3, 49, 32}, {4, 3, 49, 32}, Shape{4, 3, 49, 49}}),
      // A mask over several tiles of keys, its first query row masked everywhere by a huge finite
      // value (float16 holds it as -inf: zeros; float32 and bfloat16: the average of V); softcap
      // on tensor cores.
      tensor_cores(with_masked_row(
          {"AttentionLongMask", attn(), {2, 4, 70, 64}, {2, 4, 150, 64}, {2, 4, 150, 64}, Shape{2, 1, 70, 150}})),
      tensor_cores(
          {"AttentionSoftcap32", attn(0, 0.5f, 5.0f), {1, 2, 70, 32}, {1, 2, 90, 32}, {1, 2, 90, 32}, std::nullopt}),
      // At batches over 1 (Kiln's mask_period): 2 images of 3 windows, the mask repeated per image.
      tensor_cores({"AttentionWindowsPeriodic",
                    periodic(attn(), 3),
                    {6, 3, 49, 32},
                    {6, 3, 49, 32},
                    {6, 3, 49, 32},
                    Shape{3, 3, 49, 49}}),
      // Head size 32 over several tiles of keys (the prefetch, the key-split tactics).
      tensor_cores({"AttentionHead32", attn(1), {1, 2, 150, 32}, {1, 2, 150, 32}, {1, 2, 150, 32}, std::nullopt}),
      // Kiln's packed_qkv: one [batch, len, (q_heads + 2 kv_heads) * head_size] input, read in place
      // (given three times; k and v shapes unused). BERT's layout with a padding mask; grouped heads
      // of 128, causal.
      tensor_cores({"AttentionPacked", attn(0, kNoScale, 0, 4, 4, 1), {2, 37, 12 * 64}, {}, {}, Shape{2, 1, 1, 37}}),
      tensor_cores({"AttentionPackedGrouped", attn(1, kNoScale, 0, 4, 2, 1), {1, 70, 8 * 128}, {}, {}, std::nullopt}),
      // Without a mask, not causal (ViT's layout, odd length; grouped heads of 128 over more keys
      // than queries with a set scale): cuDNN's fused attention is a tactic as well.
      tensor_cores({"AttentionPackedUnmasked", attn(0, kNoScale, 0, 4, 4, 1), {2, 37, 12 * 64}, {}, {}, std::nullopt}),
      tensor_cores(
          {"AttentionGroupedUnmasked", attn(0, 0.2f), {1, 4, 33, 128}, {1, 2, 70, 128}, {1, 2, 70, 128}, std::nullopt}),
  };
}

Inputs attention_inputs(const AttnCase& c, DT dt) {
  // Packed: K and V name the packed tensor again (core/attention.h).
  const HostTensor q = rand_tensor(dt, c.q, -1, 1);
  Inputs in{q, c.attrs.packed_qkv ? q : rand_tensor(dt, c.k, -1, 1),
            c.attrs.packed_qkv ? q : rand_tensor(dt, c.v, -1, 1)};
  if (c.mask) {
    if (c.mask_dt == DT::kBool) {
      HostTensor m = rand_tensor(DT::kBool, *c.mask, 0, 1.6);  // mostly true
      const int64_t keys = c.mask->back();
      for (int64_t i = 0; i < keys; ++i) set(m, i, 0);  // the first query row attends nothing: zeros
      in.push_back(m);
    } else {
      HostTensor m = rand_tensor(dt, *c.mask, -2, 2);
      for (int64_t i = 0; i < m.numel(); i += 5) set(m, i, -10000);  // padding
      if (c.masked_row)
        for (int64_t i = 0; i < c.mask->back(); ++i) set(m, i, -3e38);
      in.push_back(m);
    }
  }
  return in;
}

}  // namespace

std::vector<OpCase> conv_gemm_cases() {
  std::vector<OpCase> out;
  for (const NnCase& c : all_cases())
    out.push_back(one_run_case(
        c.name, c.kind, c.attrs, c.dtypes, c.inputs,
        [c](const Inputs& in) -> ToleranceFn {
          const double terms = terms_of(c, in), scale = scale_of(c, in);
          return [terms, scale](const HostTensor& want) {
            return is_float(want.dtype) ? dot_tolerance(want.dtype, terms, scale, max_abs(want)) : Tolerance{};
          };
        },
        c.tactics));
  for (const AttnCase& c : attention_cases())
    out.push_back(one_run_case(
        c.name, OpKind::kAttention, c.attrs, c.dtypes, [c](DT dt) { return attention_inputs(c, dt); },
        [c](const Inputs& in) -> ToleranceFn {
          // A score's error (head size products) moves its probability by as much, relative; the
          // weighted sum adds one product per key.
          const int64_t d = c.q.size() == 4      ? c.q[3]
                            : c.attrs.packed_qkv ? c.q[2] / (c.attrs.q_num_heads + 2 * c.attrs.kv_num_heads)
                                                 : c.q[2] / c.attrs.q_num_heads;
          const double s = std::isnan(c.attrs.scale) ? 1 / std::sqrt(static_cast<double>(d)) : c.attrs.scale;
          const HostTensor &k = in[c.attrs.packed_qkv ? 0 : 1], &v = in[c.attrs.packed_qkv ? 0 : 2];
          const double scores = s * max_abs(in[0]) * max_abs(k),
                       keys = static_cast<double>(c.attrs.packed_qkv ? c.q[1] : in[1].shape[in[1].shape.size() - 2]);
          const double terms = static_cast<double>(d) + keys, scale = max_abs(v) * std::max(1.0, scores);
          return
              [terms, scale](const HostTensor& want) { return dot_tolerance(want.dtype, terms, scale, max_abs(want)); };
        },
        c.tactics));
  return out;
}

}  // namespace kiln::optest
