// The internal fused ops (FusedConv, FusedGemm, FusedMatMul): shape inference, and the CPU kernels
// against the same computation done op by op with the CPU kernels of Conv / Gemm / MatMul, Add and
// the ONNX activation ops (Relu, Clip, Gelu, ...), for every activation, with and without the
// residual Z, in float32, float16 and float64, with and without a thread pool. The channels-last
// ops (NhwcConv, NhwcMaxPool, NhwcAveragePool) against their channels-first twins on data permuted
// here.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/shape_infer.h"
#include "op_test_util.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln {
namespace {

using namespace kiln::test;  // Shape, Tensor, make, run, expect_near

Tensor random_tensor(DataType dt, Shape shape, std::mt19937& rng, double scale = 1.0) {
  std::vector<double> v(static_cast<size_t>(numel(shape)));
  std::uniform_real_distribution<double> u(-scale, scale);
  for (double& x : v) x = u(rng);
  return make(dt, shape, v);
}

double tolerance(DataType dt) {
  switch (dt) {
    case DataType::kFloat64: return 1e-12;
    case DataType::kFloat32: return 1e-5;
    default: return 4e-3;  // float16: the op-by-op reference rounds after every op
  }
}

struct ActCase {
  Activation act;
  float alpha = 0.0f, beta = 0.0f;
};

const std::vector<ActCase>& activations() {
  static const std::vector<ActCase> all = {
      {Activation::kNone},
      {Activation::kRelu},
      {Activation::kLeakyRelu, 0.1f},
      {Activation::kClip, 0.0f, 6.0f},
      {Activation::kClip, -0.25f, std::numeric_limits<float>::infinity()},
      {Activation::kSigmoid},
      {Activation::kTanh},
      {Activation::kSilu},
      {Activation::kHardSigmoid, 0.3f, 0.4f},
      {Activation::kHardSwish},
      {Activation::kGelu},
      {Activation::kGeluTanh},
  };
  return all;
}

std::string name_of(const ActCase& a) { return std::string(kEnumNames<Activation>[static_cast<size_t>(a.act)]); }

// x after the ONNX op(s) that the activation replaces, run with the CPU kernels.
Tensor activate(const Tensor& x, const ActCase& a) {
  auto one = [&](OpKind k, Attrs attrs, std::vector<const Tensor*> extra = {}) {
    std::vector<const Tensor*> in{&x};
    in.insert(in.end(), extra.begin(), extra.end());
    return run(k, attrs, in, 1)[0];
  };
  switch (a.act) {
    case Activation::kNone: return x;
    case Activation::kRelu: return one(OpKind::kRelu, NoAttrs{});
    case Activation::kLeakyRelu: return one(OpKind::kLeakyRelu, AlphaAttrs{a.alpha});
    case Activation::kClip: {
      const Tensor lo = make(x.dtype, {}, {a.alpha}), hi = make(x.dtype, {}, {a.beta});
      return one(OpKind::kClip, NoAttrs{}, {&lo, &hi});
    }
    case Activation::kSigmoid: return one(OpKind::kSigmoid, NoAttrs{});
    case Activation::kTanh: return one(OpKind::kTanh, NoAttrs{});
    case Activation::kSilu: {
      const Tensor s = one(OpKind::kSigmoid, NoAttrs{});
      return one(OpKind::kMul, NoAttrs{}, {&s});
    }
    case Activation::kHardSigmoid: return one(OpKind::kHardSigmoid, HardSigmoidAttrs{a.alpha, a.beta});
    case Activation::kHardSwish: return one(OpKind::kHardSwish, NoAttrs{});
    case Activation::kGelu: return one(OpKind::kGelu, GeluAttrs{GeluApproximation::kNone});
    case Activation::kGeluTanh: return one(OpKind::kGelu, GeluAttrs{GeluApproximation::kTanh});
  }
  return x;
}

Tensor add(const Tensor& a, const Tensor& b) { return run(OpKind::kAdd, NoAttrs{}, {&a, &b}, 1)[0]; }

void set_epilogue(EpilogueAttrs& e, const ActCase& a1, const ActCase* a2) {
  e.activation = a1.act;
  e.activation_alpha = a1.alpha;
  e.activation_beta = a1.beta;
  if (a2) {
    e.activation2 = a2->act;
    e.activation2_alpha = a2->alpha;
    e.activation2_beta = a2->beta;
  }
}

// The fused op against op by op: product (with bias where the product op has one), bias Add
// (FusedMatMul), activation, residual Add, activation2.
void check(OpKind fused, const Attrs& fa, const std::vector<const Tensor*>& in, OpKind product, const Attrs& pa,
           const ActCase& a1, const ActCase* a2, const std::string& what) {
  SCOPED_TRACE(what);
  const bool matmul = fused == OpKind::kFusedMatMul;
  std::vector<const Tensor*> pin(in.begin(), in.begin() + (matmul ? 2 : std::min<size_t>(3, in.size())));
  Tensor want = run(product, pa, pin, 1)[0];
  if (matmul && in.size() > 2 && in[2]) want = add(want, *in[2]);
  want = activate(want, a1);
  if (in.size() > 3 && in[3]) want = activate(add(want, *in[3]), *a2);
  static cpu::ThreadPool threads(3);
  for (cpu::ThreadPool* pool : {static_cast<cpu::ThreadPool*>(nullptr), &threads}) {
    const Tensor got = run(fused, fa, in, 1, pool)[0];
    EXPECT_EQ(got.shape, want.shape);
    expect_near(got.values(), want.values(), tolerance(want.dtype), op_name(fused).data());
  }
}

TEST(FusedOps, ConvEveryActivationAndResidual) {
  std::mt19937 rng(5);
  for (DataType dt : {DataType::kFloat32, DataType::kFloat16, DataType::kFloat64}) {
    // Output [2, 8, 48, 48]: large enough for the epilogue to run on the thread pool.
    const Tensor x = random_tensor(dt, {2, 3, 50, 50}, rng), w = random_tensor(dt, {8, 3, 3, 3}, rng);
    const Tensor b = random_tensor(dt, {8}, rng), z = random_tensor(dt, {2, 8, 48, 48}, rng);
    for (const ActCase& a : activations()) {
      ConvAttrs ca;
      FusedConvAttrs fa;
      static_cast<ConvAttrs&>(fa) = ca;
      set_epilogue(fa, a, nullptr);
      check(OpKind::kFusedConv, fa, {&x, &w, &b}, OpKind::kConv, ca, a, nullptr,
            std::string(dtype_name(dt)) + " " + name_of(a));
      const ActCase relu{Activation::kRelu};
      set_epilogue(fa, a, &relu);
      check(OpKind::kFusedConv, fa, {&x, &w, nullptr, &z}, OpKind::kConv, ca, a, &relu,
            std::string(dtype_name(dt)) + " " + name_of(a) + " + Z + Relu");
      set_epilogue(fa, {Activation::kNone}, &a);
      check(OpKind::kFusedConv, fa, {&x, &w, &b, &z}, OpKind::kConv, ca, {Activation::kNone}, &a,
            std::string(dtype_name(dt)) + " Z + " + name_of(a));
    }
  }
}

TEST(FusedOps, ConvWithGroupsStridesAndPads) {
  std::mt19937 rng(6);
  const Tensor x = random_tensor(DataType::kFloat32, {1, 4, 9, 7}, rng),
               w = random_tensor(DataType::kFloat32, {6, 2, 3, 3}, rng);
  const Tensor b = random_tensor(DataType::kFloat32, {6}, rng),
               z = random_tensor(DataType::kFloat32, {1, 6, 5, 4}, rng);
  ConvAttrs ca;
  ca.group = 2;
  ca.strides = {2, 2};
  ca.pads = {1, 1, 1, 2};
  FusedConvAttrs fa;
  static_cast<ConvAttrs&>(fa) = ca;
  const ActCase silu{Activation::kSilu}, relu{Activation::kRelu};
  set_epilogue(fa, silu, &relu);
  check(OpKind::kFusedConv, fa, {&x, &w, &b, &z}, OpKind::kConv, ca, silu, &relu, "grouped, strided, padded");
}

TEST(FusedOps, GemmWithCAndResidual) {
  std::mt19937 rng(7);
  for (DataType dt : {DataType::kFloat32, DataType::kFloat16}) {
    const Tensor a = random_tensor(dt, {5, 7}, rng), bt = random_tensor(dt, {9, 7}, rng);
    const Tensor c_col = random_tensor(dt, {9}, rng), c_full = random_tensor(dt, {5, 9}, rng);
    const Tensor z = random_tensor(dt, {5, 9}, rng);
    GemmAttrs ga;
    ga.alpha = 0.5f;
    ga.beta = 2.0f;
    ga.transB = 1;
    for (const ActCase& act : activations()) {
      for (const Tensor* c : {&c_col, &c_full}) {
        FusedGemmAttrs fa;
        static_cast<GemmAttrs&>(fa) = ga;
        set_epilogue(fa, act, nullptr);
        check(OpKind::kFusedGemm, fa, {&a, &bt, c}, OpKind::kGemm, ga, act, nullptr, name_of(act));
        const ActCase gelu{Activation::kGelu};
        set_epilogue(fa, act, &gelu);
        check(OpKind::kFusedGemm, fa, {&a, &bt, c, &z}, OpKind::kGemm, ga, act, &gelu, name_of(act) + " + Z + Gelu");
      }
    }
  }
}

TEST(FusedOps, MatMulBatchedWithBiasAndResidual) {
  std::mt19937 rng(8);
  for (DataType dt : {DataType::kFloat32, DataType::kFloat16, DataType::kFloat64}) {
    const Tensor a = random_tensor(dt, {3, 4, 6}, rng), b = random_tensor(dt, {6, 5}, rng);
    const Tensor bias = random_tensor(dt, {5}, rng), z = random_tensor(dt, {3, 4, 5}, rng);
    for (const ActCase& act : activations()) {
      EpilogueAttrs e;
      set_epilogue(e, act, nullptr);
      check(OpKind::kFusedMatMul, e, {&a, &b, &bias}, OpKind::kMatMul, NoAttrs{}, act, nullptr, name_of(act));
      const ActCase none{Activation::kNone};
      set_epilogue(e, act, &none);
      check(OpKind::kFusedMatMul, e, {&a, &b, nullptr, &z}, OpKind::kMatMul, NoAttrs{}, act, &none,
            name_of(act) + " + Z, no bias");
    }
  }
}

TEST(FusedOps, EpiloguePassesNaNLikeTheOnnxOps) {
  // Relu and Clip let a NaN through; the fused op must too.
  const Tensor x = make(DataType::kFloat32, {1, 1, 1, 3}, {NAN, -1.0, 2.0});
  const Tensor w = make(DataType::kFloat32, {1, 1, 1, 1}, {1.0});
  for (Activation act : {Activation::kRelu, Activation::kClip}) {
    FusedConvAttrs fa;
    fa.activation = act;
    fa.activation_alpha = 0.0f;
    fa.activation_beta = 1.0f;
    const std::vector<double> y = run(OpKind::kFusedConv, fa, {&x, &w}, 1)[0].values();
    EXPECT_TRUE(std::isnan(y[0]));
    EXPECT_EQ(y[1], 0.0);
    EXPECT_EQ(y[2], act == Activation::kRelu ? 2.0 : 1.0);
  }
}

std::string infer_error(OpKind kind, const Attrs& attrs, const std::vector<const Tensor*>& in) {
  std::vector<TensorView> v;
  for (const Tensor* t : in) v.push_back(t ? t->view() : absent_tensor());
  try {
    infer_shapes(kind, attrs, v, 1);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(FusedOps, InferenceRejectsBadFusedInputs) {
  std::mt19937 rng(9);
  const Tensor x = random_tensor(DataType::kFloat32, {1, 2, 4, 4}, rng),
               w = random_tensor(DataType::kFloat32, {3, 2, 1, 1}, rng);
  const Tensor z_bcast = random_tensor(DataType::kFloat32, {1, 3, 1, 4}, rng);
  const Tensor z_half = random_tensor(DataType::kFloat16, {1, 3, 4, 4}, rng);
  FusedConvAttrs fa;
  EXPECT_NE(
      infer_error(OpKind::kFusedConv, fa, {&x, &w, nullptr, &z_bcast}).find("must have the output's type and shape"),
      std::string::npos);
  EXPECT_NE(infer_error(OpKind::kFusedConv, fa, {&x, &w, nullptr, &z_half}).find("residual Z"), std::string::npos);
  fa.activation2 = Activation::kRelu;
  EXPECT_NE(infer_error(OpKind::kFusedConv, fa, {&x, &w}).find("needs the input Z"), std::string::npos);

  const Tensor a = random_tensor(DataType::kFloat32, {2, 3}, rng), b = random_tensor(DataType::kFloat32, {3, 4}, rng);
  const Tensor bias_wrong = random_tensor(DataType::kFloat32, {2}, rng);
  EXPECT_NE(infer_error(OpKind::kFusedMatMul, EpilogueAttrs{}, {&a, &b, &bias_wrong}).find("one value per column"),
            std::string::npos);
  const Tensor ai = make(DataType::kInt32, {2, 3}, std::vector<double>(6, 1)),
               bi = make(DataType::kInt32, {3, 4}, std::vector<double>(12, 1));
  EXPECT_NE(infer_error(OpKind::kFusedMatMul, EpilogueAttrs{}, {&ai, &bi}).find("float types only"), std::string::npos);
  EXPECT_EQ(infer_error(OpKind::kFusedMatMul, EpilogueAttrs{}, {&a, &b}), "");
}

TEST(FusedOps, ChannelsLastOpsMatchTheirChannelsFirstTwins) {
  std::mt19937 rng(10);
  for (DataType dt : {DataType::kFloat32, DataType::kFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    // NhwcConv: X [N, H, W, C], W [M, kh, kw, C/group], Z [N, OH, OW, M]; grouped and strided.
    const Tensor x = random_tensor(dt, {2, 9, 6, 7}, rng), w3 = random_tensor(dt, {6, 3, 3, 3}, rng);  // group 3
    const Tensor b = random_tensor(dt, {6}, rng), z = random_tensor(dt, {2, 6, 3, 4}, rng);
    FusedConvAttrs fa;
    fa.strides = {2, 2};
    fa.pads = {1, 1, 1, 1};
    fa.group = 3;
    fa.activation = Activation::kSilu;
    fa.activation2 = Activation::kRelu;
    const Tensor want = run(OpKind::kFusedConv, fa, {&x, &w3, &b, &z}, 1)[0];
    const Tensor xl = permute4(x, true), wl = permute4(w3, true), zl = permute4(z, true);
    const Tensor got = run(OpKind::kNhwcConv, fa, {&xl, &wl, &b, &zl}, 1)[0];
    EXPECT_EQ(got.shape, (Shape{2, 3, 4, 6}));
    expect_near(permute4(got, false).values(), want.values(), 0, "NhwcConv");
    // The pools, with ceil_mode and padding.
    PoolAttrs pa;
    pa.kernel_shape = {3, 2};
    pa.strides = {2, 2};
    pa.pads = {1, 0, 1, 1};
    pa.ceil_mode = 1;
    pa.count_include_pad = 1;
    for (auto [first, last] : {std::pair{OpKind::kMaxPool, OpKind::kNhwcMaxPool},
                               std::pair{OpKind::kAveragePool, OpKind::kNhwcAveragePool}}) {
      const Tensor pw = run(first, pa, {&x}, 1)[0];
      const Tensor pg = run(last, pa, {&xl}, 1)[0];
      expect_near(permute4(pg, false).values(), pw.values(), 0, op_name(last).data());
    }
  }
}

TEST(FusedOps, ChannelsLastInferenceChecksTheWeight) {
  std::mt19937 rng(11);
  const Tensor x = random_tensor(DataType::kFloat32, {1, 5, 5, 4}, rng);
  const Tensor w_wrong = random_tensor(DataType::kFloat32, {3, 4, 3, 3}, rng);  // channels-first W: [M, C, k, k]
  FusedConvAttrs fa;
  EXPECT_NE(infer_error(OpKind::kNhwcConv, fa, {&x, &w_wrong}), "");
  const Tensor w = random_tensor(DataType::kFloat32, {3, 3, 3, 4}, rng);
  EXPECT_EQ(infer_error(OpKind::kNhwcConv, fa, {&x, &w}), "");
}

TEST(FusedOps, InternalOpsAreNotOnnxOps) {
  for (OpKind k : {OpKind::kFusedConv, OpKind::kFusedGemm, OpKind::kFusedMatMul, OpKind::kNhwcConv,
                   OpKind::kNhwcMaxPool, OpKind::kNhwcAveragePool}) {
    EXPECT_TRUE(is_internal_op(k));
    EXPECT_FALSE(op_kind_from_name(op_name(k)).has_value()) << op_name(k);
  }
  EXPECT_FALSE(is_internal_op(OpKind::kXor));
  EXPECT_EQ(op_kind_from_name("Xor"), OpKind::kXor);
  EXPECT_EQ(op_kind_from_name("Abs"), OpKind::kAbs);
}

}  // namespace
}  // namespace kiln
