// The quant family's ONNX integer ops (MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv,
// DynamicQuantizeLinear): shape inference + CPU kernels against integer / float64 references
// written here, on random inputs, several dtypes, with and without a thread pool; outputs are
// poisoned before the kernel runs. DynamicQuantizeLinear is also checked against the values of
// ONNX's backend test. kiln.QConv and kiln.QMatMul: ops_qfused_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/shape_infer.h"
#include "exact_op_util.h"
#include "op_test_util.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln {
namespace {

using namespace kiln::test;  // Shape, Tensor, make, numel, random_tensor, infer, tolerance, str

// ---- MatMulInteger / QLinearMatMul ----------------------------------------------------------

// A parameter tensor for per-row (of A, is_a) or per-column (of B) quantization: kind 0 scalar
// [], 1 [1], 2 1-D per row/column, 3 the operand's shape with the K axis 1.
Shape param_shape(int kind, const Shape& m, bool is_a) {
  const int64_t rows = m.size() == 1 ? 1 : is_a ? m[m.size() - 2] : m.back();
  if (kind == 0) return {};
  if (kind == 1) return {1};
  if (kind == 2 || m.size() < 2) return {rows};
  Shape s = m;
  s[is_a ? s.size() - 1 : s.size() - 2] = 1;
  return s;
}
double param_at(const std::vector<double>& p, const Shape& ps, int64_t batch, int64_t rows, int64_t i) {
  if (p.size() == 1) return p[0];
  if (ps.size() == 1) return p[i];
  return p[batch * rows + i];
}

// acc[batch][i][j] = sum_p (a - za(batch_a, i)) * (b - zb(batch_b, j)), numpy broadcasting of the
// batch axes done by hand; fn(out_index, batch_a, batch_b, i, j, acc) produces each output.
template <class Fn>
void matmul_ref(const Tensor& A, const Tensor& B, const Tensor* za, const Tensor* zb, Fn&& fn) {
  Shape as = A.shape, bs = B.shape;
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  const Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const Shape ob = broadcast_shapes(ab, bb);
  const std::vector<double> a = A.values(), b = B.values();
  const std::vector<double> vza = za ? za->values() : std::vector<double>{0},
                            vzb = zb ? zb->values() : std::vector<double>{0};
  const Shape sza = za ? za->shape : Shape{}, szb = zb ? zb->shape : Shape{};
  for (int64_t o = 0; o < numel(ob); ++o) {
    int64_t rem = o, ia = 0, ib = 0, ma = 1, mb = 1;
    for (size_t d = ob.size(); d-- > 0;) {
      const int64_t idx = rem % ob[d];
      rem /= ob[d];
      if (d + ab.size() >= ob.size()) {
        const int64_t da = ab[d + ab.size() - ob.size()];
        ia += (da == 1 ? 0 : idx) * ma;
        ma *= da;
      }
      if (d + bb.size() >= ob.size()) {
        const int64_t db = bb[d + bb.size() - ob.size()];
        ib += (db == 1 ? 0 : idx) * mb;
        mb *= db;
      }
    }
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < K; ++p)
          acc += (a[(ia * M + i) * K + p] - param_at(vza, sza, ia, M, i)) *
                 (b[(ib * K + p) * N + j] - param_at(vzb, szb, ib, N, j));
        fn((o * M + i) * N + j, ia, ib, i, j, acc);
      }
  }
}

const std::vector<std::pair<Shape, Shape>> kMatmulShapes = {
    {{3, 4}, {4, 5}},    {{4}, {4, 5}},    {{3, 4}, {4}},          {{2, 1, 3, 4}, {3, 4, 5}},
    {{2, 3, 0}, {0, 5}}, {{0, 4}, {4, 2}}, {{65, 130}, {130, 67}}, {{1, 7}, {2, 7, 3}}};
const std::vector<std::pair<DataType, DataType>> kQ8Pairs = {{DataType::kUInt8, DataType::kUInt8},
                                                             {DataType::kInt8, DataType::kUInt8},
                                                             {DataType::kUInt8, DataType::kInt8},
                                                             {DataType::kInt8, DataType::kInt8}};

double qlo(DataType t) { return t == DataType::kInt8 ? -128 : 0; }
double qhi(DataType t) { return t == DataType::kInt8 ? 127 : 255; }

TEST(MatMulInteger, MatchesReference) {
  std::mt19937 rng(11);
  cpu::ThreadPool pool(3);
  int cases = 0;
  for (const auto& [ta, tb] : kQ8Pairs)
    for (const auto& [as, bs] : kMatmulShapes)
      for (int zk = -1; zk < 4; ++zk) {  // -1: no zero points
        Tensor A = random_tensor(ta, as, rng, qlo(ta), qhi(ta)), B = random_tensor(tb, bs, rng, qlo(tb), qhi(tb));
        Tensor za = random_tensor(ta, param_shape(std::max(zk, 0), as, true), rng, qlo(ta), qhi(ta));
        Tensor zb = random_tensor(tb, param_shape(std::max(zk, 0), bs, false), rng, qlo(tb), qhi(tb));
        std::vector<const Tensor*> in{&A, &B};
        if (zk >= 0) in = {&A, &B, &za, zk == 2 ? nullptr : &zb};  // also an omitted a-only case
        std::vector<Tensor> out = run(OpKind::kMatMulInteger, NoAttrs{}, in, 1, cases % 2 ? &pool : nullptr);
        ASSERT_EQ(out[0].dtype, DataType::kInt32);
        std::vector<double> want(static_cast<size_t>(numel(out[0].shape)), -1e300);
        matmul_ref(A, B, zk >= 0 ? &za : nullptr, zk >= 0 && zk != 2 ? &zb : nullptr,
                   [&](int64_t o, int64_t, int64_t, int64_t, int64_t, double acc) { want[o] = acc; });
        expect_near(out[0].values(), want, 0,
                    "MatMulInteger " + str(as) + " x " + str(bs) + " zp " + std::to_string(zk));
        ++cases;
      }
}

TEST(QLinearMatMul, MatchesReference) {
  std::mt19937 rng(12);
  cpu::ThreadPool pool(3);
  int cases = 0;
  for (const auto& [ta, tb] : kQ8Pairs)
    for (DataType ty : {DataType::kUInt8, DataType::kInt8})
      for (const auto& [as, bs] : kMatmulShapes)
        for (int pk : {0, 1, 2, 3}) {
          Tensor A = random_tensor(ta, as, rng, qlo(ta), qhi(ta)), B = random_tensor(tb, bs, rng, qlo(tb), qhi(tb));
          const Shape pa = param_shape(pk, as, true), pb = param_shape(pk, bs, false);
          Tensor sa = random_tensor(DataType::kFloat32, pa, rng, 0.002, 0.05);
          Tensor za = random_tensor(ta, pa, rng, qlo(ta), qhi(ta));
          Tensor sb = random_tensor(pk == 3 ? DataType::kFloat16 : DataType::kFloat32, pb, rng, 0.002, 0.05);
          Tensor zb = random_tensor(tb, pb, rng, qlo(tb), qhi(tb));
          const int64_t rows = as.size() >= 2 ? as[as.size() - 2] : 1;
          const Shape py = pk == 2 ? Shape{rows} : Shape{};
          Tensor sy = random_tensor(DataType::kFloat32, py, rng, 0.05, 0.5);
          Tensor zy = random_tensor(ty, py, rng, qlo(ty), qhi(ty));
          std::vector<Tensor> out = run(OpKind::kQLinearMatMul, NoAttrs{}, {&A, &sa, &za, &B, &sb, &zb, &sy, &zy}, 1,
                                        cases % 2 ? &pool : nullptr);
          ASSERT_EQ(out[0].dtype, ty);
          const std::vector<double> vsa = sa.values(), vsb = sb.values(), vsy = sy.values(), vzy = zy.values();
          std::vector<double> want(static_cast<size_t>(numel(out[0].shape)), -1e300);
          matmul_ref(A, B, &za, &zb, [&](int64_t o, int64_t ia, int64_t ib, int64_t i, int64_t j, double acc) {
            const int64_t M = rows, N = bs.size() == 1 ? 1 : bs.back();
            // ONNX: multiplier a_scale * b_scale / y_scale in float32, then round half to even.
            const float m = static_cast<float>(param_at(vsa, pa, ia, M, i)) *
                            static_cast<float>(param_at(vsb, pb, ib, N, j)) /
                            static_cast<float>(vsy.size() == 1 ? vsy[0] : vsy[i]);
            const double v = std::nearbyint(acc * m + (vzy.size() == 1 ? vzy[0] : vzy[i]));
            want[o] = std::clamp(v, qlo(ty), qhi(ty));
          });
          expect_near(out[0].values(), want, 0,
                      "QLinearMatMul " + str(as) + " x " + str(bs) + " p " + std::to_string(pk));
          ++cases;
        }
}

TEST(MatMulInteger, InferenceRejectsBadInputs) {
  Tensor a = make(DataType::kUInt8, {2, 3}, std::vector<double>(6, 1));
  Tensor b = make(DataType::kInt8, {3, 4}, std::vector<double>(12, 1));
  Tensor b5 = make(DataType::kInt8, {5, 4}, std::vector<double>(20, 1));
  Tensor f = make(DataType::kFloat32, {3, 4}, std::vector<double>(12, 1));
  Tensor za_type = make(DataType::kInt8, {}, {0});
  Tensor za_len = make(DataType::kUInt8, {3}, {0, 0, 0});
  Tensor zb_len = make(DataType::kInt8, {3}, {0, 0, 0});
  Tensor zb_ok = make(DataType::kInt8, {4}, {0, 0, 0, 0});
  Tensor s = make(DataType::kFloat32, {}, {0.1});
  Tensor s_int = make(DataType::kInt32, {}, {1});
  Tensor zu = make(DataType::kUInt8, {}, {0});
  Tensor zi = make(DataType::kInt8, {}, {0});
  Tensor z16 = make(DataType::kInt16, {}, {0});
  EXPECT_NO_THROW(infer(OpKind::kMatMulInteger, NoAttrs{}, {&a, &b, nullptr, &zb_ok}, 1));
  EXPECT_THROW(infer(OpKind::kMatMulInteger, NoAttrs{}, {&a, &f}, 1), Error);
  EXPECT_THROW(infer(OpKind::kMatMulInteger, NoAttrs{}, {&a, &b5}, 1), Error);
  EXPECT_THROW(infer(OpKind::kMatMulInteger, NoAttrs{}, {&a, &b, &za_type}, 1), Error);
  EXPECT_THROW(infer(OpKind::kMatMulInteger, NoAttrs{}, {&a, &b, &za_len}, 1), Error);
  EXPECT_THROW(infer(OpKind::kMatMulInteger, NoAttrs{}, {&a, &b, nullptr, &zb_len}, 1), Error);
  EXPECT_NO_THROW(infer(OpKind::kQLinearMatMul, NoAttrs{}, {&a, &s, &zu, &b, &s, &zi, &s, &zi}, 1));
  EXPECT_THROW(infer(OpKind::kQLinearMatMul, NoAttrs{}, {&a, &s_int, &zu, &b, &s, &zi, &s, &zi}, 1), Error);
  EXPECT_THROW(infer(OpKind::kQLinearMatMul, NoAttrs{}, {&a, &s, &zi, &b, &s, &zi, &s, &zi}, 1), Error);
  EXPECT_THROW(infer(OpKind::kQLinearMatMul, NoAttrs{}, {&a, &s, &zu, &b, &s, &zi, &s, &z16}, 1), Error);
  EXPECT_THROW(infer(OpKind::kQLinearMatMul, NoAttrs{}, {&a, &s, &zu, &b5, &s, &zi, &s, &zi}, 1), Error);
}

// ---- ConvInteger / QLinearConv -------------------------------------------------------------

struct ConvCase {
  Shape x, w;
  int64_t group;
  Shape strides, dilations, pads;
  AutoPad auto_pad = AutoPad::kNotSet;
};

// Output spatial size and begin pads, computed per the ONNX formulas.
void conv_window(const ConvCase& c, Shape* out, Shape* pb) {
  const size_t n = c.x.size() - 2;
  out->assign(n, 0);
  pb->assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const int64_t s = c.strides.empty() ? 1 : c.strides[i], d = c.dilations.empty() ? 1 : c.dilations[i];
    const int64_t ek = (c.w[2 + i] - 1) * d + 1, in = c.x[2 + i];
    if (c.auto_pad == AutoPad::kSameUpper) {
      (*out)[i] = (in + s - 1) / s;
      (*pb)[i] = std::max<int64_t>(0, ((*out)[i] - 1) * s + ek - in) / 2;
    } else {
      const int64_t b = c.pads.empty() ? 0 : c.pads[i], e = c.pads.empty() ? 0 : c.pads[n + i];
      (*pb)[i] = b;
      (*out)[i] = (in + b + e - ek) / s + 1;
    }
  }
}

// Integer conv (zero points subtracted, padding contributes 0), one double per output element.
std::vector<double> conv_ref(const ConvCase& c, const Tensor& X, const Tensor& W, double zx,
                             const std::vector<double>& zw, Shape* out_shape) {
  Shape os, pb;
  conv_window(c, &os, &pb);
  const int64_t N = c.x[0], C = c.x[1], M = c.w[0], cg = C / c.group, mg = M / c.group;
  *out_shape = {N, M};
  out_shape->insert(out_shape->end(), os.begin(), os.end());
  const std::vector<double> x = X.values(), w = W.values();
  const Shape ks(c.w.begin() + 2, c.w.end());
  const size_t n = ks.size();
  std::vector<double> y(static_cast<size_t>(numel(*out_shape)));
  for (int64_t e = 0; e < numel(*out_shape); ++e) {
    Shape oi(out_shape->size());
    for (int64_t r = e, d = static_cast<int64_t>(oi.size()) - 1; d >= 0; --d)
      oi[d] = r % (*out_shape)[d], r /= (*out_shape)[d];
    const int64_t img = oi[0], m = oi[1], g = m / mg;
    double acc = 0;
    for (int64_t ci = 0; ci < cg; ++ci)
      for (int64_t t = 0; t < numel(ks); ++t) {
        int64_t xoff = img * C + g * cg + ci, woff = m * cg + ci, rem = t;
        Shape tap(n);
        for (size_t d = n; d-- > 0;) tap[d] = rem % ks[d], rem /= ks[d];
        bool inside = true;
        for (size_t d = 0; d < n; ++d) {
          const int64_t s = c.strides.empty() ? 1 : c.strides[d], dl = c.dilations.empty() ? 1 : c.dilations[d];
          const int64_t p = oi[2 + d] * s - pb[d] + tap[d] * dl;
          inside &= p >= 0 && p < c.x[2 + d];
          xoff = xoff * c.x[2 + d] + p;
          woff = woff * ks[d] + tap[d];
        }
        if (inside) acc += (x[xoff] - zx) * (w[woff] - (zw.size() == 1 ? zw[0] : zw[m]));
      }
    y[e] = acc;
  }
  return y;
}

const std::vector<ConvCase> kConvCases = {
    {{1, 3, 5, 5}, {4, 3, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},
    {{2, 4, 7, 6}, {6, 2, 3, 2}, 2, {2, 1}, {1, 2}, {1, 0, 0, 1}},
    {{1, 2, 9}, {3, 2, 3}, 1, {2}, {}, {}},
    {{1, 3, 4, 4, 4}, {2, 3, 2, 2, 2}, 1, {}, {}, {0, 1, 0, 1, 0, 0}},
    {{1, 2, 5, 6}, {2, 2, 3, 3}, 1, {2, 2}, {}, {}, AutoPad::kSameUpper},
    {{2, 8, 20, 20}, {16, 8, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},
    {{0, 2, 3, 3}, {2, 2, 1, 1}, 1, {}, {}, {}},
};

ConvAttrs conv_attrs(const ConvCase& c) {
  ConvAttrs a;
  a.group = c.group;
  a.strides = c.strides;
  a.dilations = c.dilations;
  a.pads = c.pads;
  a.auto_pad = c.auto_pad;
  return a;
}

TEST(ConvInteger, MatchesReference) {
  std::mt19937 rng(13);
  cpu::ThreadPool pool(3);
  int cases = 0;
  for (const auto& [tx, tw] : kQ8Pairs)
    for (const ConvCase& c : kConvCases)
      for (int zk = 0; zk < 4; ++zk) {  // 0 none, 1 x only, 2 x + scalar w, 3 x + per-channel w
        Tensor X = random_tensor(tx, c.x, rng, qlo(tx), qhi(tx)), W = random_tensor(tw, c.w, rng, qlo(tw), qhi(tw));
        Tensor zx = random_tensor(tx, {}, rng, qlo(tx), qhi(tx));
        Tensor zw = random_tensor(tw, zk == 3 ? Shape{c.w[0]} : Shape{1}, rng, qlo(tw), qhi(tw));
        std::vector<const Tensor*> in{&X, &W};
        if (zk >= 1) in.push_back(&zx);
        if (zk >= 2) in.push_back(&zw);
        std::vector<Tensor> out = run(OpKind::kConvInteger, conv_attrs(c), in, 1, cases % 2 ? &pool : nullptr);
        Shape os;
        std::vector<double> want =
            conv_ref(c, X, W, zk >= 1 ? zx.values()[0] : 0, zk >= 2 ? zw.values() : std::vector<double>{0}, &os);
        ASSERT_EQ(out[0].shape, os) << str(c.x);
        ASSERT_EQ(out[0].dtype, DataType::kInt32);
        expect_near(out[0].values(), want, 0,
                    "ConvInteger " + str(c.x) + " x " + str(c.w) + " zp " + std::to_string(zk));
        ++cases;
      }
}

TEST(QLinearConv, MatchesReference) {
  std::mt19937 rng(14);
  cpu::ThreadPool pool(3);
  int cases = 0;
  for (const auto& [tx, tw] : kQ8Pairs)
    for (DataType ty : {DataType::kUInt8, DataType::kInt8})
      for (const ConvCase& c : kConvCases)
        for (int variant = 0; variant < 2; ++variant) {  // 1: per-channel w params and a bias
          const int64_t M = c.w[0];
          Tensor X = random_tensor(tx, c.x, rng, qlo(tx), qhi(tx)), W = random_tensor(tw, c.w, rng, qlo(tw), qhi(tw));
          Tensor sx = random_tensor(DataType::kFloat32, {}, rng, 0.005, 0.05);
          Tensor zx = random_tensor(tx, {1}, rng, qlo(tx), qhi(tx));
          const Shape pw = variant ? Shape{M} : Shape{};
          Tensor sw = random_tensor(DataType::kFloat32, pw, rng, 0.005, 0.05);
          Tensor zw = random_tensor(tw, pw, rng, qlo(tw), qhi(tw));
          Tensor sy = random_tensor(DataType::kFloat32, {}, rng, 0.2, 2);
          Tensor zy = random_tensor(ty, {}, rng, qlo(ty), qhi(ty));
          Tensor bias = random_tensor(DataType::kInt32, {M}, rng, -5000, 5000);
          std::vector<const Tensor*> in{&X, &sx, &zx, &W, &sw, &zw, &sy, &zy};
          if (variant) in.push_back(&bias);
          std::vector<Tensor> out = run(OpKind::kQLinearConv, conv_attrs(c), in, 1, cases % 2 ? &pool : nullptr);
          Shape os;
          std::vector<double> want = conv_ref(c, X, W, zx.values()[0], zw.values(), &os);
          ASSERT_EQ(out[0].shape, os);
          ASSERT_EQ(out[0].dtype, ty);
          const std::vector<double> vsw = sw.values(), vb = bias.values();
          const int64_t per = numel(os) / std::max<int64_t>(os[0] * M, 1);
          for (size_t e = 0; e < want.size(); ++e) {
            const int64_t m = (static_cast<int64_t>(e) / per) % M;
            const float mult = static_cast<float>(sx.values()[0]) *
                               static_cast<float>(vsw.size() == 1 ? vsw[0] : vsw[m]) /
                               static_cast<float>(sy.values()[0]);
            want[e] =
                std::clamp(std::nearbyint((want[e] + (variant ? vb[m] : 0)) * mult + zy.values()[0]), qlo(ty), qhi(ty));
          }
          expect_near(out[0].values(), want, 0, "QLinearConv " + str(c.x) + " v" + std::to_string(variant));
          ++cases;
        }
}

TEST(ConvInteger, InferenceRejectsBadInputs) {
  ConvAttrs a;
  Tensor x = make(DataType::kUInt8, {1, 2, 4, 4}, std::vector<double>(32, 1));
  Tensor w = make(DataType::kUInt8, {3, 2, 2, 2}, std::vector<double>(24, 1));
  Tensor w_bad = make(DataType::kUInt8, {3, 3, 2, 2}, std::vector<double>(36, 1));
  Tensor xf = make(DataType::kFloat32, {1, 2, 4, 4}, std::vector<double>(32, 1));
  Tensor zx2 = make(DataType::kUInt8, {2}, {0, 0});
  Tensor zw4 = make(DataType::kUInt8, {4}, {0, 0, 0, 0});
  Tensor zw3 = make(DataType::kUInt8, {3}, {0, 0, 0});
  Tensor zi = make(DataType::kInt8, {}, {0});
  Tensor zu = make(DataType::kUInt8, {}, {0});
  Tensor s = make(DataType::kFloat32, {}, {0.1});
  Tensor s3 = make(DataType::kFloat32, {3}, {0.1, 0.1, 0.1});
  Tensor s16 = make(DataType::kFloat16, {}, {0.1});
  Tensor b_bad = make(DataType::kInt32, {2}, {0, 0});
  Tensor b_type = make(DataType::kInt64, {3}, {0, 0, 0});
  EXPECT_NO_THROW(infer(OpKind::kConvInteger, a, {&x, &w, &zu, &zw3}, 1));
  EXPECT_THROW(infer(OpKind::kConvInteger, a, {&x, &w_bad}, 1), Error);
  EXPECT_THROW(infer(OpKind::kConvInteger, a, {&xf, &w}, 1), Error);
  EXPECT_THROW(infer(OpKind::kConvInteger, a, {&x, &w, &zx2}, 1), Error);
  EXPECT_THROW(infer(OpKind::kConvInteger, a, {&x, &w, &zi}, 1), Error);
  EXPECT_THROW(infer(OpKind::kConvInteger, a, {&x, &w, &zu, &zw4}, 1), Error);
  ConvAttrs bad_group = a;
  bad_group.group = 0;
  EXPECT_THROW(infer(OpKind::kConvInteger, bad_group, {&x, &w}, 1), Error);
  EXPECT_NO_THROW(infer(OpKind::kQLinearConv, a, {&x, &s, &zu, &w, &s3, &zw3, &s, &zi}, 1));
  EXPECT_THROW(infer(OpKind::kQLinearConv, a, {&x, &s3, &zu, &w, &s, &zu, &s, &zi}, 1), Error);
  EXPECT_THROW(infer(OpKind::kQLinearConv, a, {&x, &s16, &zu, &w, &s, &zu, &s, &zi}, 1), Error);
  EXPECT_THROW(infer(OpKind::kQLinearConv, a, {&x, &s, &zu, &w, &s, &zu, &s, &zi, &b_bad}, 1), Error);
  EXPECT_THROW(infer(OpKind::kQLinearConv, a, {&x, &s, &zu, &w, &s, &zu, &s, &zi, &b_type}, 1), Error);
  EXPECT_THROW(infer(OpKind::kQLinearConv, a, {&x, &s, &zu, &w, &s, &zu, &s, &s}, 1), Error);
}

// ---- DynamicQuantizeLinear -----------------------------------------------------------------

TEST(DynamicQuantizeLinear, OnnxCaseAndReference) {
  // test_dynamicquantizelinear of the ONNX backend tests.
  Tensor x = make(DataType::kFloat32, {6}, {0, 2, -3, -2.5, 1.34, 0.5});
  std::vector<Tensor> out = run(OpKind::kDynamicQuantizeLinear, NoAttrs{}, {&x}, 3);
  EXPECT_EQ(out[0].values(), (std::vector<double>{153, 255, 0, 26, 221, 179}));
  EXPECT_FLOAT_EQ(static_cast<float>(out[1].values()[0]), 0.0196078438f);
  EXPECT_EQ(out[2].values()[0], 153);
  ASSERT_TRUE(out[1].shape.empty() && out[2].shape.empty());

  std::mt19937 rng(15);
  cpu::ThreadPool pool(3);
  for (auto [shape, lo, hi] : std::vector<std::tuple<Shape, double, double>>{
           {{3, 4}, -2, 5}, {{100000}, -1, 1}, {{7}, 0.5, 9}, {{2, 3}, -9, -1}, {{4}, 0, 0}, {{0, 3}, 0, 1}}) {
    Tensor v = random_tensor(DataType::kFloat32, shape, rng, lo, hi);
    std::vector<Tensor> o = run(OpKind::kDynamicQuantizeLinear, NoAttrs{}, {&v}, 3, &pool);
    const std::vector<double> xv = v.values();
    float mn = 0, mx = 0;
    for (double e : xv) mn = std::min(mn, float(e)), mx = std::max(mx, float(e));
    const float scale = (mx == mn ? 1.0f : mx - mn) / 255.0f;
    const float zp = std::nearbyint(std::clamp(0.0f - mn / scale, 0.0f, 255.0f));
    std::vector<double> want;
    for (double e : xv) want.push_back(std::clamp(std::nearbyint(float(e) / scale) + zp, 0.0f, 255.0f));
    expect_near(o[0].values(), want, 0, "DynamicQuantizeLinear " + str(shape));
    EXPECT_EQ(float(o[1].values()[0]), scale);
    EXPECT_EQ(o[2].values()[0], zp);
  }
  Tensor d = make(DataType::kFloat64, {2}, {1, 2});
  EXPECT_THROW(infer(OpKind::kDynamicQuantizeLinear, NoAttrs{}, {&d}, 3), Error);
  EXPECT_THROW(infer(OpKind::kDynamicQuantizeLinear, NoAttrs{}, {&x}, 2), Error);
}

}  // namespace
}  // namespace kiln
