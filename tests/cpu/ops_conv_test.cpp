// The conv family (Conv, ConvTranspose): shape inference + CPU kernels against plain float64
// references written here, on random inputs, several dtypes, with and without a thread pool;
// ConvTranspose also against expected values produced by the ONNX reference implementation (onnx
// 1.23).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/shape_infer.h"
#include "nn_test_util.h"
#include "op_test_util.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln {
namespace {

using namespace kiln::test;      // Shape, Tensor, make, numel
using namespace kiln::test::nn;  // random_tensor, tolerance, forward_window, expect_infer_error

// ---- Conv --------------------------------------------------------------------------------

std::vector<double> conv_ref(const Tensor& X, const Tensor& W, const Tensor* B, int64_t group, const Win& w,
                             Shape* out_shape) {
  const Shape& xs = X.shape;
  const int64_t N = xs[0], C = xs[1], M = W.shape[0], cg = C / group, mg = M / group;
  const Shape in(xs.begin() + 2, xs.end());
  const size_t n = in.size();
  *out_shape = {N, M};
  out_shape->insert(out_shape->end(), w.out.begin(), w.out.end());
  const std::vector<double> x = X.values(), wt = W.values(), b = B ? B->values() : std::vector<double>();
  std::vector<double> y(static_cast<size_t>(numel(*out_shape)));
  const int64_t ks = numel(w.k);
  for (int64_t i = 0; i < numel(*out_shape); ++i) {
    Shape oi = unflatten(i, *out_shape);
    const int64_t img = oi[0], m = oi[1], grp = m / mg;
    double acc = B ? b[m] : 0.0;
    for (int64_t c = 0; c < cg; ++c)
      for (int64_t t = 0; t < ks; ++t) {
        Shape tap = unflatten(t, w.k), pos{img, grp * cg + c};
        bool inside = true;
        for (size_t a = 0; a < n; ++a) {
          int64_t p = oi[2 + a] * w.s[a] - w.pb[a] + tap[a] * w.d[a];
          inside &= p >= 0 && p < in[a];
          pos.push_back(p);
        }
        if (!inside) continue;
        Shape wi{m, c};
        wi.insert(wi.end(), tap.begin(), tap.end());
        acc += x[flatten(pos, xs)] * wt[flatten(wi, W.shape)];
      }
    y[i] = acc;
  }
  return y;
}

struct ConvCase {
  Shape x, w;
  int64_t group;
  Shape strides, dilations, pads;
  AutoPad auto_pad;
  bool bias;
};

const ConvCase kConvCases[] = {
    {{2, 3, 7}, {4, 3, 3}, 1, {2}, {1}, {1, 2}, AutoPad::kNotSet, true},  // 1-D
    {{1, 4, 9}, {6, 2, 2}, 2, {1}, {3}, {}, AutoPad::kSameLower, false},  // 1-D dilated groups
    {{2, 3, 6, 5}, {5, 3, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}, AutoPad::kNotSet, true},
    {{1, 6, 7, 8}, {6, 2, 3, 2}, 3, {2, 3}, {2, 1}, {0, 1, 2, 0}, AutoPad::kNotSet, true},
    {{1, 4, 5, 7}, {8, 4, 1, 1}, 1, {}, {}, {}, AutoPad::kNotSet, true},             // pointwise
    {{3, 8, 6, 6}, {8, 1, 3, 3}, 8, {1, 1}, {1, 1}, {}, AutoPad::kSameUpper, true},  // depthwise
    {{1, 2, 9, 7}, {3, 2, 4, 3}, 1, {3, 2}, {1, 2}, {}, AutoPad::kSameLower, false},
    {{1, 2, 8, 8}, {2, 2, 3, 3}, 1, {2, 2}, {2, 2}, {}, AutoPad::kValid, true},
    {{1, 2, 5, 4, 6}, {4, 1, 2, 3, 2}, 2, {1, 2, 1}, {1, 1, 2}, {1, 0, 1, 0, 1, 1}, AutoPad::kNotSet, true},  // 3-D
    {{0, 3, 5, 5}, {2, 3, 3, 3}, 1, {}, {}, {}, AutoPad::kNotSet, true},                      // empty batch
    {{2, 5, 23, 31}, {7, 5, 3, 3}, 1, {1, 2}, {1, 1}, {1, 1, 1, 1}, AutoPad::kNotSet, true},  // several tiles
};

TEST(NnConv, MatchesReference) {
  std::mt19937 rng(1);
  cpu::ThreadPool pool(3);
  for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16}) {
    for (const ConvCase& c : kConvCases) {
      Tensor x = random_tensor(dt, c.x, rng), w = random_tensor(dt, c.w, rng), b = random_tensor(dt, {c.w[0]}, rng);
      ConvAttrs a;
      a.group = c.group;
      a.strides = c.strides;
      a.dilations = c.dilations;
      a.pads = c.pads;
      a.auto_pad = c.auto_pad;
      if (c.x.size() == 4) a.kernel_shape = Shape(c.w.begin() + 2, c.w.end());
      const Shape in(c.x.begin() + 2, c.x.end()), k(c.w.begin() + 2, c.w.end());
      Win win = forward_window(in, k, c.strides, c.dilations, c.pads, c.auto_pad, false);
      Shape ys;
      std::vector<double> want = conv_ref(x, w, c.bias ? &b : nullptr, c.group, win, &ys);
      for (cpu::ThreadPool* p : {static_cast<cpu::ThreadPool*>(nullptr), &pool}) {
        auto y = run(OpKind::kConv, a, {&x, &w, c.bias ? &b : nullptr}, 1, p);
        ASSERT_EQ(y[0].shape, ys);
        ASSERT_EQ(y[0].dtype, dt);
        expect_near(y[0].values(), want, tolerance(dt),
                    "Conv " + shape_string(c.x) + " " + std::string(dtype_name(dt)));
      }
    }
  }
}

// A ResNet-50 layer must take milliseconds; also spot-checks the big fast path against the reference.
TEST(NnConv, ResNetLayerIsFast) {
  std::mt19937 rng(2);
  cpu::ThreadPool pool(2);
  for (const auto& [xs, ws, pads] : {std::tuple{Shape{1, 64, 56, 56}, Shape{64, 64, 3, 3}, Shape{1, 1, 1, 1}},
                                     std::tuple{Shape{1, 256, 56, 56}, Shape{64, 256, 1, 1}, Shape{}}}) {
    Tensor x = random_tensor(DataType::kFloat32, xs, rng), w = random_tensor(DataType::kFloat32, ws, rng);
    ConvAttrs a;
    a.pads = pads;
    run(OpKind::kConv, a, {&x, &w}, 1, &pool);  // warm-up
    auto t0 = std::chrono::steady_clock::now();
    auto y = run(OpKind::kConv, a, {&x, &w}, 1, &pool);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(ms, 400.0) << "Conv " << shape_string(xs) << " took " << ms << " ms";
    // Check a few output positions directly.
    std::vector<double> xv = x.values(), wv = w.values(), yv = y[0].values();
    const int64_t K = ws[2], pad = pads.empty() ? 0 : 1, C = xs[1], H = xs[2];
    for (int64_t pos : {int64_t{0}, int64_t{57}, int64_t{3135}, int64_t{64 * 3136 - 1}, int64_t{17 * 3136 + 1000}}) {
      const int64_t m = pos / 3136, oh = pos % 3136 / 56, ow = pos % 56;
      double acc = 0;
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < K; ++i)
          for (int64_t j = 0; j < K; ++j) {
            int64_t ih = oh - pad + i, iw = ow - pad + j;
            if (ih >= 0 && ih < H && iw >= 0 && iw < H)
              acc += xv[(c * H + ih) * H + iw] * wv[((m * C + c) * K + i) * K + j];
          }
      EXPECT_NEAR(yv[pos], acc, 1e-3 * (1 + std::abs(acc)));
    }
  }
}

// ---- ConvTranspose -------------------------------------------------------------------------

struct ConvTCase {
  Shape x, w;
  int64_t group;
  Shape strides, dilations, pads, output_padding, output_shape;
  AutoPad auto_pad;
  bool bias;
};

const ConvTCase kConvTCases[] = {
    {{2, 3, 5}, {3, 2, 3}, 1, {2}, {1}, {1, 0}, {1}, {}, AutoPad::kNotSet, true},
    {{1, 4, 4, 3}, {4, 3, 3, 2}, 2, {2, 3}, {1, 2}, {0, 1, 1, 0}, {1, 0}, {}, AutoPad::kNotSet, true},
    {{1, 2, 3, 3}, {2, 2, 3, 3}, 1, {2, 2}, {}, {}, {}, {}, AutoPad::kSameUpper, false},
    {{1, 2, 3, 4}, {2, 1, 2, 3}, 1, {3, 2}, {}, {}, {}, {}, AutoPad::kSameLower, true},
    {{1, 1, 3, 3}, {1, 1, 2, 2}, 1, {3, 3}, {}, {}, {}, {}, AutoPad::kSameUpper, true},  // negative begin pad
    {{1, 1, 3, 3}, {1, 2, 3, 3}, 1, {3, 2}, {}, {}, {}, {10, 8}, AutoPad::kNotSet, true},
    {{1, 1, 3, 3}, {1, 2, 3, 3}, 1, {3, 2}, {}, {}, {}, {7, 6}, AutoPad::kNotSet, false},
    {{2, 2, 3, 2, 3}, {2, 2, 2, 2, 2}, 1, {2, 1, 2}, {1, 2, 1}, {1, 0, 0, 0, 1, 1}, {}, {}, AutoPad::kNotSet, true},
    {{3, 6, 4, 4}, {6, 1, 3, 3}, 6, {1, 1}, {1, 1}, {1, 1, 1, 1}, {}, {}, AutoPad::kNotSet, true},  // depthwise
    {{1, 3, 40, 40}, {3, 4, 4, 4}, 1, {2, 2}, {}, {1, 1, 1, 1}, {}, {}, AutoPad::kValid, true},
};

TEST(NnConvTranspose, MatchesReference) {
  std::mt19937 rng(3);
  cpu::ThreadPool pool(3);
  for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16}) {
    for (const ConvTCase& c : kConvTCases) {
      const size_t n = c.x.size() - 2;
      const int64_t N = c.x[0], C = c.x[1], mg = c.w[1], M = mg * c.group, cg = C / c.group;
      Tensor x = random_tensor(dt, c.x, rng), w = random_tensor(dt, c.w, rng), b = random_tensor(dt, {M}, rng);
      ConvAttrs a;
      a.group = c.group;
      a.strides = c.strides;
      a.dilations = c.dilations;
      a.pads = c.pads;
      a.output_padding = c.output_padding;
      a.output_shape = c.output_shape;
      a.auto_pad = c.auto_pad;
      // ONNX: full = s*(in-1) + output_padding + (k-1)*d + 1; with output_shape or SAME_*, the pads
      // are total = full - out split with the odd part at the end for SAME_UPPER, else the start.
      Shape s = c.strides.empty() ? Shape(n, 1) : c.strides, d = c.dilations.empty() ? Shape(n, 1) : c.dilations;
      Shape pb(n, 0), out(n);
      for (size_t i = 0; i < n; ++i) {
        const int64_t op = c.output_padding.empty() ? 0 : c.output_padding[i];
        const int64_t full = s[i] * (c.x[2 + i] - 1) + op + (c.w[2 + i] - 1) * d[i] + 1;
        if (!c.output_shape.empty() || c.auto_pad == AutoPad::kSameUpper || c.auto_pad == AutoPad::kSameLower) {
          out[i] = c.output_shape.empty() ? c.x[2 + i] * s[i] : c.output_shape[i];
          const int64_t total = full - out[i];
          const int64_t fl = total >= 0 ? total / 2 : -((-total + 1) / 2);
          pb[i] = c.auto_pad == AutoPad::kSameUpper ? fl : total - fl;
        } else {
          const bool explicit_pads = c.auto_pad == AutoPad::kNotSet && !c.pads.empty();
          pb[i] = explicit_pads ? c.pads[i] : 0;
          out[i] = full - pb[i] - (explicit_pads ? c.pads[n + i] : 0);
        }
      }
      Shape ys{N, M};
      ys.insert(ys.end(), out.begin(), out.end());
      std::vector<double> xv = x.values(), wv = w.values(), bv = b.values(), want(numel(ys));
      for (int64_t i = 0; i < numel(ys); ++i) want[i] = c.bias ? bv[unflatten(i, ys)[1]] : 0.0;
      const Shape xin(c.x.begin() + 2, c.x.end()), k(c.w.begin() + 2, c.w.end());
      for (int64_t i = 0; i < numel(c.x); ++i) {
        Shape xi = unflatten(i, c.x);
        const int64_t grp = xi[1] / cg;
        for (int64_t m = 0; m < mg; ++m)
          for (int64_t t = 0; t < numel(k); ++t) {
            Shape tap = unflatten(t, k), yi{xi[0], grp * mg + m};
            bool inside = true;
            for (size_t q = 0; q < n; ++q) {
              int64_t p = xi[2 + q] * s[q] - pb[q] + tap[q] * d[q];
              inside &= p >= 0 && p < out[q];
              yi.push_back(p);
            }
            Shape wi{xi[1], m};
            wi.insert(wi.end(), tap.begin(), tap.end());
            if (inside) want[flatten(yi, ys)] += xv[i] * wv[flatten(wi, c.w)];
          }
      }
      for (cpu::ThreadPool* p : {static_cast<cpu::ThreadPool*>(nullptr), &pool}) {
        auto y = run(OpKind::kConvTranspose, a, {&x, &w, c.bias ? &b : nullptr}, 1, p);
        ASSERT_EQ(y[0].shape, ys) << shape_string(c.x);
        expect_near(y[0].values(), want, tolerance(dt), "ConvTranspose " + shape_string(c.x));
      }
    }
  }
}

// onnx test_convtranspose_autopad_same and test_convtranspose_output_shape (first rows).
TEST(NnConvTranspose, OnnxCases) {
  Tensor x = make(DataType::kFloat32, {1, 1, 3, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8});
  Tensor w = make(DataType::kFloat32, {1, 2, 3, 3}, std::vector<double>(18, 1.0));
  ConvAttrs a;
  a.auto_pad = AutoPad::kSameUpper;
  a.strides = {2, 2};
  auto y = run(OpKind::kConvTranspose, a, {&x, &w}, 1);
  ASSERT_EQ(y[0].shape, (Shape{1, 2, 6, 6}));
  std::vector<double> v = y[0].values();
  expect_near(std::vector<double>(v.begin(), v.begin() + 12), {0, 0, 1, 1, 3, 2, 0, 0, 1, 1, 3, 2}, 0, "same_upper");
  expect_near(std::vector<double>(v.begin() + 24, v.begin() + 36), {9, 9, 20, 11, 24, 13, 6, 6, 13, 7, 15, 8}, 0,
              "same_upper");
  ConvAttrs b;
  b.strides = {3, 2};
  b.output_shape = {10, 8};
  y = run(OpKind::kConvTranspose, b, {&x, &w}, 1);
  ASSERT_EQ(y[0].shape, (Shape{1, 2, 10, 8}));
  v = y[0].values();
  expect_near(std::vector<double>(v.begin() + 24, v.begin() + 32), {3, 3, 7, 4, 9, 5, 5, 0}, 0, "output_shape");
  expect_near(std::vector<double>(v.begin() + 72, v.begin() + 80), std::vector<double>(8, 0.0), 0, "output_shape");
}

// ---- inference errors ----------------------------------------------------------------------

TEST(ConvInfer, RejectsBadInput) {
  Tensor x4 = shaped({1, 4, 5, 5}), w = shaped({6, 4, 3, 3}), w_g2 = shaped({6, 2, 3, 3}), x2 = shaped({4, 5});
  Tensor xi = shaped({1, 4, 5, 5}, DataType::kInt32), wd = shaped({6, 4, 3, 3}, DataType::kFloat64);
  Tensor b_bad = shaped({5}), w3 = shaped({6, 4, 3}), tiny = shaped({1, 4, 2, 2});
  auto conv = [](auto f) {
    ConvAttrs a;
    f(a);
    return Attrs{a};
  };
  auto nop = [](ConvAttrs&) {};
  expect_infer_error(OpKind::kConv, conv(nop), {&x2, &w}, 1, "X rank 2");
  expect_infer_error(OpKind::kConv, conv(nop), {&x4, &w3}, 1, "W rank");
  expect_infer_error(OpKind::kConv, conv(nop), {&x4, &w_g2}, 1, "channels");
  expect_infer_error(OpKind::kConv, conv([](ConvAttrs& a) { a.group = 3; }), {&x4, &w}, 1, "group");
  expect_infer_error(OpKind::kConv, conv([](ConvAttrs& a) { a.group = 0; }), {&x4, &w}, 1, "group 0");
  expect_infer_error(OpKind::kConv, conv([](ConvAttrs& a) { a.kernel_shape = {3, 2}; }), {&x4, &w}, 1, "kernel_shape");
  expect_infer_error(OpKind::kConv, conv([](ConvAttrs& a) { a.strides = {1, 0}; }), {&x4, &w}, 1, "stride 0");
  expect_infer_error(OpKind::kConv, conv([](ConvAttrs& a) { a.strides = {1}; }), {&x4, &w}, 1, "strides length");
  expect_infer_error(OpKind::kConv, conv([](ConvAttrs& a) { a.pads = {0, -1, 0, 0}; }), {&x4, &w}, 1, "negative pad");
  expect_infer_error(OpKind::kConv, conv([](ConvAttrs& a) { a.pads = {1, 1}; }), {&x4, &w}, 1, "pads length");
  expect_infer_error(OpKind::kConv, conv([](ConvAttrs& a) { a.dilations = {1, 1, 1}; }), {&x4, &w}, 1, "dilations");
  expect_infer_error(OpKind::kConv, conv(nop), {&tiny, &w}, 1, "input smaller than kernel");
  expect_infer_error(OpKind::kConv, conv([](ConvAttrs& a) { a.auto_pad = AutoPad::kValid; }), {&tiny, &w}, 1, "VALID");
  expect_infer_error(OpKind::kConv, conv(nop), {&x4, &w, &b_bad}, 1, "bias shape");
  expect_infer_error(OpKind::kConv, conv(nop), {&xi, &w}, 1, "int X");
  expect_infer_error(OpKind::kConv, conv(nop), {&x4, &wd}, 1, "W dtype");
  expect_infer_error(OpKind::kConv, conv([](ConvAttrs& a) {
                       a.output_padding = {1, 1};
                     }),
                     {&x4, &w}, 1, "Conv output_padding");
  Tensor wt = shaped({4, 2, 3, 3}), wt_bad = shaped({3, 2, 3, 3});
  expect_infer_error(OpKind::kConvTranspose, conv(nop), {&x4, &wt_bad}, 1, "ConvTranspose W[0]");
  expect_infer_error(OpKind::kConvTranspose, conv([](ConvAttrs& a) {
                       a.pads = {9, 9, 9, 9};
                     }),
                     {&x4, &wt}, 1, "pads > out");
  expect_infer_error(OpKind::kConvTranspose, conv([](ConvAttrs& a) {
                       a.output_padding = {-1, 0};
                     }),
                     {&x4, &wt}, 1, "out pad");
  expect_infer_error(OpKind::kConvTranspose, conv([](ConvAttrs& a) { a.output_shape = {5}; }), {&x4, &wt}, 1,
                     "output_shape");
  expect_infer_error(OpKind::kConvTranspose, conv([](ConvAttrs& a) { a.group = 3; }), {&x4, &wt}, 1, "CT group");
}

}  // namespace
}  // namespace kiln
