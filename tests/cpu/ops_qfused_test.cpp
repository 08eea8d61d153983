// The CPU kernels of kiln.QConv and kiln.QMatMul against a reference made of the ONNX integer ops
// (ConvInteger, MatMulInteger: exact int32 sums, tested against float64 sums in ops_quant_test.cpp)
// and the epilogue written out here: real = float(acc) * (x_scale * w_scale[m]) + bias[m], then the
// activation, then QuantizeLinear's rounding. Results must be identical. Covers int8/uint8 inputs
// and weights, zero points (none, scalar, per channel), bias, every activation, float / int8 /
// uint8 outputs, groups, strides, dilations, padding, 1-D to 3-D, size 0, threads, and the shape
// inference errors. QConv's residual z (int8/uint8, with and without its zero point) joins the
// reference epilogue as z_scale * float(z - z_zero), added after the bias; NhwcQConv with z must
// equal QConv with z on permuted data.
#include <algorithm>
#include <cmath>
#include <random>

#include "op_test_util.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln {
namespace {

using namespace kiln::test;

Tensor random_tensor(DataType dt, Shape shape, std::mt19937& rng, double lo, double hi) {
  std::vector<double> v(static_cast<size_t>(numel(shape)));
  std::uniform_real_distribution<double> uf(lo, hi);
  std::uniform_int_distribution<int64_t> ui(static_cast<int64_t>(lo), static_cast<int64_t>(hi));
  for (double& x : v) x = is_float(dt) ? uf(rng) : static_cast<double>(ui(rng));
  Tensor t = make(dt, shape, v);
  return make(dt, shape, t.values());
}

double qlo(DataType t) { return t == DataType::kInt8 ? -128 : 0; }
double qhi(DataType t) { return t == DataType::kInt8 ? 127 : 255; }

struct Epi {
  QActivation act = QActivation::kNone;
  float a = 0, b = 0;
};
const Epi kEpis[] = {{}, {QActivation::kRelu}, {QActivation::kClip, -0.5f, 0.75f}, {QActivation::kLeakyRelu, 0.1f}};

// One output of channel m from its exact sum.
// zr: the residual's real value (float32), if any.
double epilogue(int32_t acc, float sx, float sw, float bias, const Epi& e, const Tensor* sy, const Tensor* zy,
                DataType out, const float* zr = nullptr) {
  const float alpha = sx * sw;
  float v = static_cast<float>(acc) * alpha;
  v = v + bias;
  if (zr) v = v + *zr;
  if (e.act == QActivation::kRelu) v = std::max(v, 0.0f);
  if (e.act == QActivation::kClip) v = std::min(std::max(v, e.a), e.b);
  if (e.act == QActivation::kLeakyRelu && v < 0) v = v * e.a;
  if (!sy) return v;
  float q = std::nearbyint(v / static_cast<float>(sy->values()[0]));
  q += zy ? static_cast<float>(zy->values()[0]) : 0.0f;
  return std::clamp<double>(q, qlo(out), qhi(out));
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
    {{2, 8, 20, 20}, {16, 8, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},
    {{1, 6, 9, 9}, {6, 1, 3, 3}, 6, {2, 2}, {}, {1, 1, 1, 1}},
    {{0, 2, 3, 3}, {2, 2, 1, 1}, 1, {}, {}, {}},
};

struct Inputs {
  Tensor x, sx, zx, w, sw, zw, bias, sy, zy;
  bool has_zx, has_zw, has_bias, quantize;
  std::vector<const Tensor*> list() const {
    return {&x,
            &sx,
            has_zx ? &zx : nullptr,
            &w,
            &sw,
            has_zw ? &zw : nullptr,
            has_bias ? &bias : nullptr,
            quantize ? &sy : nullptr,
            quantize ? &zy : nullptr};
  }
};

// variant: bit 0 zero points, bit 1 per-channel w parameters, bit 2 bias, bit 3 quantized output.
Inputs random_inputs(DataType tx, DataType tw, DataType ty, const Shape& xs, const Shape& ws, int64_t m, int variant,
                     std::mt19937& rng) {
  Inputs in;
  const Shape pw = variant & 2 ? Shape{m} : Shape{};
  in.x = random_tensor(tx, xs, rng, qlo(tx), qhi(tx));
  in.w = random_tensor(tw, ws, rng, qlo(tw), qhi(tw));
  in.sx = random_tensor(DataType::kFloat32, {}, rng, 0.005, 0.05);
  in.sw = random_tensor(DataType::kFloat32, pw, rng, 0.005, 0.05);
  in.zx = random_tensor(tx, {}, rng, qlo(tx), qhi(tx));
  in.zw = random_tensor(tw, pw, rng, qlo(tw), qhi(tw));
  in.bias = random_tensor(DataType::kFloat32, {m}, rng, -3, 3);
  in.sy = random_tensor(DataType::kFloat32, {}, rng, 0.05, 0.5);
  in.zy = random_tensor(ty, {}, rng, qlo(ty), qhi(ty));
  in.has_zw = variant & 1;
  in.has_zx = (variant & 3) != 0;  // also x zero points without w's (the int8 route's zs)
  in.has_bias = variant & 4;
  in.quantize = variant & 8;
  return in;
}

// Checks `got` against epilogue(acc) per element; channel(e) gives element e's output channel.
template <class Channel>
void check(const Tensor& got, const std::vector<double>& acc, const Inputs& in, const Epi& e, DataType ty,
           Channel channel, const std::string& what, const std::vector<float>* zr = nullptr) {
  ASSERT_EQ(got.dtype, in.quantize ? ty : DataType::kFloat32) << what;
  const std::vector<double> sw = in.sw.values(), bias = in.bias.values(), v = got.values();
  ASSERT_EQ(v.size(), acc.size()) << what;
  for (size_t i = 0; i < acc.size(); ++i) {
    const int64_t m = channel(static_cast<int64_t>(i));
    const double want =
        epilogue(static_cast<int32_t>(acc[i]), static_cast<float>(in.sx.values()[0]),
                 static_cast<float>(sw[sw.size() == 1 ? 0 : m]), in.has_bias ? static_cast<float>(bias[m]) : 0.0f, e,
                 in.quantize ? &in.sy : nullptr, &in.zy, ty, zr ? &(*zr)[i] : nullptr);
    ASSERT_EQ(v[i], want) << what << " element " << i;
  }
}

const std::pair<DataType, DataType> kPairs[] = {{DataType::kInt8, DataType::kInt8},
                                                {DataType::kUInt8, DataType::kInt8},
                                                {DataType::kInt8, DataType::kUInt8},
                                                {DataType::kUInt8, DataType::kUInt8}};

QConvAttrs conv_attrs(const ConvCase& c, const Epi& e) {
  QConvAttrs qa;
  qa.group = c.group;
  qa.strides = c.strides;
  qa.dilations = c.dilations;
  qa.pads = c.pads;
  qa.activation = e.act;
  qa.act_alpha = e.a;
  qa.act_beta = e.b;
  return qa;
}

TEST(QConv, MatchesConvIntegerAndTheEpilogue) {
  std::mt19937 rng(21);
  cpu::ThreadPool pool(3);
  int cases = 0;
  for (const auto& [tx, tw] : kPairs)
    for (const ConvCase& c : kConvCases)
      for (int variant = 0; variant < 16; ++variant) {
        const DataType ty = variant & 1 ? DataType::kUInt8 : DataType::kInt8;
        const Epi& e = kEpis[variant % 4];
        const Inputs in = random_inputs(tx, tw, ty, c.x, c.w, c.w[0], variant, rng);
        const QConvAttrs qa = conv_attrs(c, e);
        const std::vector<Tensor> got = run(OpKind::kQConv, qa, in.list(), 1, cases++ % 2 ? &pool : nullptr);
        const std::vector<Tensor> acc =
            run(OpKind::kConvInteger, qa.conv(),
                {&in.x, &in.w, in.has_zx ? &in.zx : nullptr, in.has_zw ? &in.zw : nullptr}, 1);
        ASSERT_EQ(got[0].shape, acc[0].shape);
        const int64_t per = numel(acc[0].shape) / std::max<int64_t>(c.x[0] * c.w[0], 1);
        check(
            got[0], acc[0].values(), in, e, ty, [&](int64_t i) { return (i / per) % c.w[0]; },
            "QConv " + shape_string(c.x) + " * " + shape_string(c.w) + " variant " + std::to_string(variant));
      }
}

TEST(QMatMul, MatchesMatMulIntegerAndTheEpilogue) {
  std::mt19937 rng(22);
  cpu::ThreadPool pool(3);
  const std::vector<std::pair<Shape, int64_t>> shapes = {{{3, 5}, 4}, {{1, 1}, 1}, {{2, 3, 17}, 9}, {{64, 300}, 70},
                                                         {{0, 4}, 3}, {{4, 0}, 2}, {{5, 1000}, 40}};
  int cases = 0;
  for (const auto& [tx, tw] : kPairs)
    for (const auto& [xs, n] : shapes)
      for (int variant = 0; variant < 16; ++variant) {
        const DataType ty = variant & 1 ? DataType::kUInt8 : DataType::kInt8;
        const Epi& e = kEpis[variant % 4];
        const int64_t k = xs.back();
        const Inputs in = random_inputs(tx, tw, ty, xs, {n, k}, n, variant, rng);
        // MatMulInteger takes w as [K, N] with per-column zero points.
        std::vector<double> wt(static_cast<size_t>(n * k));
        const std::vector<double> wv = in.w.values();
        for (int64_t j = 0; j < n; ++j)
          for (int64_t p = 0; p < k; ++p) wt[static_cast<size_t>(p * n + j)] = wv[static_cast<size_t>(j * k + p)];
        const Tensor w_kn = make(tw, {k, n}, wt);
        QMatMulAttrs qa;
        qa.activation = e.act;
        qa.act_alpha = e.a;
        qa.act_beta = e.b;
        const std::vector<Tensor> got = run(OpKind::kQMatMul, qa, in.list(), 1, cases++ % 2 ? &pool : nullptr);
        const std::vector<Tensor> acc =
            run(OpKind::kMatMulInteger, NoAttrs{},
                {&in.x, &w_kn, in.has_zx ? &in.zx : nullptr, in.has_zw ? &in.zw : nullptr}, 1);
        ASSERT_EQ(got[0].shape, acc[0].shape);
        check(
            got[0], acc[0].values(), in, e, ty, [&](int64_t i) { return i % n; },
            "QMatMul " + shape_string(xs) + " n " + std::to_string(n) + " variant " + std::to_string(variant));
      }
}

// The residual z: int8 or uint8 (whatever x, w and y are), zero point absent or random, any z_scale.
struct Residual {
  Tensor z, scale, zero;
  bool has_zero;
  std::vector<float> real;  // z_scale * float(z - z_zero), element by element
};

Residual random_residual(DataType tz, const Shape& shape, bool has_zero, std::mt19937& rng) {
  Residual r{random_tensor(tz, shape, rng, qlo(tz), qhi(tz)),
             random_tensor(DataType::kFloat32, {}, rng, 0.01, 0.2),
             random_tensor(tz, {}, rng, qlo(tz), qhi(tz)),
             has_zero,
             {}};
  const float s = static_cast<float>(r.scale.values()[0]);
  const int32_t zz = has_zero ? static_cast<int32_t>(r.zero.values()[0]) : 0;
  for (double v : r.z.values()) r.real.push_back(s * static_cast<float>(static_cast<int32_t>(v) - zz));
  return r;
}

// Inputs with the residual after y's parameters (absent ones included: z is input 9).
std::vector<const Tensor*> with_residual(const Inputs& in, const Residual& r) {
  std::vector<const Tensor*> list = in.list();
  list.insert(list.end(), {&r.z, &r.scale, r.has_zero ? &r.zero : nullptr});
  return list;
}

TEST(QConv, ResidualMatchesConvIntegerAndTheEpilogue) {
  std::mt19937 rng(23);
  cpu::ThreadPool pool(3);
  int cases = 0;
  for (const auto& [tx, tw] : kPairs)
    for (const ConvCase& c : kConvCases)
      for (int variant = 0; variant < 16; ++variant) {
        const DataType ty = variant & 1 ? DataType::kUInt8 : DataType::kInt8;
        const DataType tz = (variant >> 1) & 1 ? DataType::kUInt8 : DataType::kInt8;
        const Epi& e = kEpis[(variant + cases) % 4];
        const Inputs in = random_inputs(tx, tw, ty, c.x, c.w, c.w[0], variant, rng);
        const QConvAttrs qa = conv_attrs(c, e);
        const std::vector<Tensor> acc =
            run(OpKind::kConvInteger, qa.conv(),
                {&in.x, &in.w, in.has_zx ? &in.zx : nullptr, in.has_zw ? &in.zw : nullptr}, 1);
        const Residual r = random_residual(tz, acc[0].shape, (variant >> 2) & 1, rng);
        const std::vector<Tensor> got = run(OpKind::kQConv, qa, with_residual(in, r), 1, cases++ % 2 ? &pool : nullptr);
        ASSERT_EQ(got[0].shape, acc[0].shape);
        const int64_t per = numel(acc[0].shape) / std::max<int64_t>(c.x[0] * c.w[0], 1);
        check(
            got[0], acc[0].values(), in, e, ty, [&](int64_t i) { return (i / per) % c.w[0]; },
            "QConv with z " + shape_string(c.x) + " * " + shape_string(c.w) + " variant " + std::to_string(variant),
            &r.real);
      }
}

// The residual against float64 arithmetic: the float output is the exact real sum to float32 rounding.
TEST(QConv, ResidualFloatOutputIsTheRealSum) {
  std::mt19937 rng(24);
  const ConvCase& c = kConvCases[4];
  const Inputs in = random_inputs(DataType::kUInt8, DataType::kInt8, DataType::kInt8, c.x, c.w, c.w[0], 7, rng);
  const QConvAttrs qa = conv_attrs(c, Epi{});
  const std::vector<Tensor> acc = run(OpKind::kConvInteger, qa.conv(), {&in.x, &in.w, &in.zx, &in.zw}, 1);
  const Residual r = random_residual(DataType::kInt8, acc[0].shape, true, rng);
  const std::vector<double> got = run(OpKind::kQConv, qa, with_residual(in, r), 1)[0].values();
  const std::vector<double> a = acc[0].values(), z = r.z.values(), sw = in.sw.values(), b = in.bias.values();
  const double sx = in.sx.values()[0], sz = r.scale.values()[0], zz = r.zero.values()[0];
  const int64_t per = numel(acc[0].shape) / (c.x[0] * c.w[0]);
  for (size_t i = 0; i < got.size(); ++i) {
    const size_t m = static_cast<size_t>((static_cast<int64_t>(i) / per) % c.w[0]);
    const double want = a[i] * sx * sw[m] + b[m] + sz * (z[i] - zz);
    ASSERT_NEAR(got[i], want, 1e-5 * (1 + std::fabs(want))) << i;
  }
}

// A float32 residual is added as it is: y = acc * sx * sw[m] + b[m] + z.
TEST(QConv, FloatResidualIsAddedAsItIs) {
  std::mt19937 rng(25);
  const ConvCase& c = kConvCases[4];
  const Inputs in = random_inputs(DataType::kInt8, DataType::kInt8, DataType::kInt8, c.x, c.w, c.w[0], 7, rng);
  const QConvAttrs qa = conv_attrs(c, Epi{});
  const std::vector<Tensor> acc = run(OpKind::kConvInteger, qa.conv(), {&in.x, &in.w, &in.zx, &in.zw}, 1);
  const Tensor z = random_tensor(DataType::kFloat32, acc[0].shape, rng, -3, 3);
  std::vector<const Tensor*> list = in.list();
  list.push_back(&z);
  const std::vector<double> got = run(OpKind::kQConv, qa, list, 1)[0].values();
  const std::vector<double> a = acc[0].values(), zv = z.values(), sw = in.sw.values(), b = in.bias.values();
  const double sx = in.sx.values()[0];
  const int64_t per = numel(acc[0].shape) / (c.x[0] * c.w[0]);
  for (size_t i = 0; i < got.size(); ++i) {
    const size_t m = static_cast<size_t>((static_cast<int64_t>(i) / per) % c.w[0]);
    const double want = a[i] * sx * sw[m] + b[m] + zv[i];
    ASSERT_NEAR(got[i], want, 1e-5 * (1 + std::fabs(want))) << i;
  }
}

TEST(NhwcQConv, ResidualEqualsQConvOnPermutedData) {
  std::mt19937 rng(25);
  for (const ConvCase& c : {kConvCases[1], kConvCases[5]}) {  // grouped, strided, dilated; depthwise
    for (int variant : {9, 14}) {
      const DataType tz = variant == 9 ? DataType::kUInt8 : DataType::kInt8;
      const Inputs in =
          random_inputs(DataType::kInt8, DataType::kUInt8, DataType::kInt8, c.x, c.w, c.w[0], variant, rng);
      const QConvAttrs qa = conv_attrs(c, kEpis[1]);
      const Shape y = run(OpKind::kQConv, qa, in.list(), 1)[0].shape;
      const Residual r = random_residual(tz, y, variant == 9, rng);
      const Tensor want = run(OpKind::kQConv, qa, with_residual(in, r), 1)[0];
      Inputs last = in;
      last.x = permute4(in.x, true);
      last.w = permute4(in.w, true);
      Residual rl = r;
      rl.z = permute4(r.z, true);
      const Tensor got = run(OpKind::kNhwcQConv, qa, with_residual(last, rl), 1)[0];
      ASSERT_EQ(got.dtype, want.dtype);
      EXPECT_EQ(permute4(got, false).values(), want.values()) << "variant " << variant;
    }
  }
}

// Sums beyond int32 wrap (modulo 2^32) as int32 accumulators do, then saturate.
TEST(QMatMul, AccumulatorWrapsLikeInt32) {
  const int64_t k = 140000;  // 140000 * 128 * 128 > 2^31
  const Tensor x = make(DataType::kInt8, {1, k}, std::vector<double>(k, -128));
  const Tensor w = make(DataType::kInt8, {1, k}, std::vector<double>(k, -128));
  const Tensor s = make(DataType::kFloat32, {}, {1});
  const std::vector<Tensor> y = run(OpKind::kQMatMul, QMatMulAttrs{}, {&x, &s, nullptr, &w, &s}, 1);
  const double wrapped = static_cast<double>(static_cast<int32_t>(static_cast<uint32_t>(k * 16384)));
  EXPECT_EQ(y[0].values()[0], static_cast<float>(wrapped));
}

std::string infer_error(OpKind kind, const Attrs& a, const std::vector<const Tensor*>& in) {
  std::vector<TensorView> iv;
  for (const Tensor* t : in) iv.push_back(t ? t->view() : absent_tensor());
  try {
    infer_shapes(kind, a, iv, 1);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(QConv, InferenceRejectsBadInputs) {
  const Tensor x = make(DataType::kInt8, {1, 2, 4, 4}, std::vector<double>(32, 1));
  const Tensor xf = make(DataType::kFloat32, {1, 2, 4, 4}, std::vector<double>(32, 1));
  const Tensor w = make(DataType::kInt8, {3, 2, 1, 1}, std::vector<double>(6, 1));
  const Tensor s = make(DataType::kFloat32, {}, {0.1}), s3 = make(DataType::kFloat32, {3}, {1, 1, 1});
  const Tensor s2 = make(DataType::kFloat32, {2}, {1, 1}), zi = make(DataType::kInt8, {}, {0});
  const Tensor zu = make(DataType::kUInt8, {}, {0}), b3 = make(DataType::kFloat32, {3}, {0, 0, 0});
  const Tensor b2 = make(DataType::kFloat32, {2}, {0, 0}), bi = make(DataType::kInt32, {3}, {0, 0, 0});
  const QConvAttrs a;
  EXPECT_EQ(infer_error(OpKind::kQConv, a, {&x, &s, &zi, &w, &s3, &zi, &b3, &s, &zu}), "");
  EXPECT_NE(infer_error(OpKind::kQConv, a, {&xf, &s, nullptr, &w, &s}).find("x and w must be int8 or uint8"),
            std::string::npos);
  EXPECT_NE(infer_error(OpKind::kQConv, a, {&x, &s, &zu, &w, &s}).find("x_zero_point must be int8"), std::string::npos);
  EXPECT_NE(infer_error(OpKind::kQConv, a, {&x, &s, nullptr, &w, &s2}).find("w_scale"), std::string::npos);
  EXPECT_NE(infer_error(OpKind::kQConv, a, {&x, &s, nullptr, &w, &s, nullptr, &b2}).find("bias must be [3]"),
            std::string::npos);
  EXPECT_NE(infer_error(OpKind::kQConv, a, {&x, &s, nullptr, &w, &s, nullptr, &bi}).find("bias must be float32"),
            std::string::npos);
  EXPECT_NE(infer_error(OpKind::kQConv, a, {&x, &s, nullptr, &w, &s, nullptr, nullptr, nullptr, &zi})
                .find("y_zero_point without y_scale"),
            std::string::npos);
  QConvAttrs clip;
  clip.activation = QActivation::kClip;
  clip.act_alpha = 1;
  clip.act_beta = 0;
  EXPECT_NE(infer_error(OpKind::kQConv, clip, {&x, &s, nullptr, &w, &s}).find("act_alpha <= act_beta"),
            std::string::npos);
  // The residual: y's shape [1, 3, 4, 4], int8/uint8 (z_scale required, z_zero of z's type) or
  // float32 (neither).
  const Tensor z = make(DataType::kUInt8, {1, 3, 4, 4}, std::vector<double>(48, 1));
  const Tensor zbad = make(DataType::kInt8, {1, 3, 4, 1}, std::vector<double>(12, 1));
  const Tensor zf = make(DataType::kFloat32, {1, 3, 4, 4}, std::vector<double>(48, 1));
  const std::vector<const Tensor*> base = {&x, &s, nullptr, &w, &s, nullptr, nullptr, &s, &zi};
  auto with = [&](std::vector<const Tensor*> extra) {
    std::vector<const Tensor*> in = base;
    in.insert(in.end(), extra.begin(), extra.end());
    return infer_error(OpKind::kQConv, a, in);
  };
  EXPECT_EQ(with({&z, &s, &zu}), "");
  EXPECT_EQ(with({&z, &s}), "");
  EXPECT_NE(with({&zbad, &s}).find("z [1,3,4,1] must have the output's shape [1,3,4,4]"), std::string::npos)
      << with({&zbad, &s});
  EXPECT_EQ(with({&zf}), "");  // a float32 residual, as it is
  EXPECT_NE(with({&zf, &s}).find("a float32 z takes no z_scale"), std::string::npos);
  const Tensor zi32 = make(DataType::kInt32, {1, 3, 4, 4}, std::vector<double>(48, 1));
  EXPECT_NE(with({&zi32, &s}).find("z must be int8, uint8 or float32"), std::string::npos);
  EXPECT_NE(with({&z}).find("z needs z_scale"), std::string::npos);
  EXPECT_NE(with({&z, &s, &zi}).find("z_zero_point must be uint8"), std::string::npos);
  EXPECT_NE(with({&z, &s3}).find("z_scale must be a scalar"), std::string::npos);
  EXPECT_NE(with({nullptr, &s}).find("z_scale or z_zero_point without z"), std::string::npos);
  const Tensor wk = make(DataType::kInt8, {3, 4}, std::vector<double>(12, 1));
  const Tensor xm = make(DataType::kInt8, {2, 5}, std::vector<double>(10, 1));
  EXPECT_NE(infer_error(OpKind::kQMatMul, QMatMulAttrs{}, {&xm, &s, nullptr, &wk, &s}).find("[N, K]"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln
