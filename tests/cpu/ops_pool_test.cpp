// The pool family (AveragePool, MaxPool, GlobalAveragePool, GlobalMaxPool): shape inference + CPU
// kernels against plain float64 references written here, on random inputs, several dtypes, with and
// without a thread pool.
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

// ---- AveragePool / MaxPool ------------------------------------------------------------------

struct PoolCase {
  Shape x, k, s, d, pads;
  AutoPad auto_pad;
  int64_t ceil_mode, include_pad, storage_order;
};

const PoolCase kPoolCases[] = {
    {{2, 3, 9}, {3}, {2}, {}, {1, 1}, AutoPad::kNotSet, 0, 0, 0},
    {{1, 2, 7}, {2}, {3}, {2}, {1, 0}, AutoPad::kNotSet, 1, 1, 0},
    {{2, 2, 6, 7}, {3, 3}, {2, 2}, {}, {1, 1, 1, 1}, AutoPad::kNotSet, 0, 1, 1},
    {{1, 3, 5, 5}, {3, 2}, {2, 2}, {}, {1, 0, 1, 1}, AutoPad::kNotSet, 1, 0, 0},
    {{1, 3, 5, 5}, {3, 3}, {3, 3}, {}, {1, 1, 1, 1}, AutoPad::kNotSet, 1, 1, 1},  // last window on the pad
    {{1, 1, 8, 6}, {2, 3}, {1, 2}, {2, 2}, {1, 1, 0, 2}, AutoPad::kNotSet, 1, 1, 0},
    {{2, 2, 7, 8}, {3, 2}, {2, 3}, {}, {}, AutoPad::kSameUpper, 0, 1, 1},
    {{1, 2, 7, 8}, {3, 3}, {2, 2}, {2, 1}, {}, AutoPad::kSameLower, 0, 0, 0},
    {{1, 2, 7, 8}, {2, 3}, {2, 2}, {}, {}, AutoPad::kValid, 0, 0, 1},
    {{1, 2, 5, 4, 6}, {2, 3, 2}, {2, 1, 2}, {1, 1, 2}, {1, 1, 0, 0, 1, 1}, AutoPad::kNotSet, 1, 1, 1},  // 3-D
    {{0, 2, 5, 5}, {2, 2}, {}, {}, {}, AutoPad::kNotSet, 0, 0, 0},
};

// Reference pooling: every tap of every window, inside = in the image, padded = in the padded extent.
void pool_ref(const Tensor& X, const Win& w, bool include_pad, bool col_major, Shape* ys, std::vector<double>* avg,
              std::vector<double>* mx, std::vector<double>* idx) {
  const Shape& xs = X.shape;
  const Shape in(xs.begin() + 2, xs.end());
  const size_t n = in.size();
  *ys = {xs[0], xs[1]};
  ys->insert(ys->end(), w.out.begin(), w.out.end());
  const std::vector<double> x = X.values();
  const int64_t S = numel(in);
  for (int64_t i = 0; i < numel(*ys); ++i) {
    Shape oi = unflatten(i, *ys);
    double sum = 0, best = 0;
    int64_t inside = 0, padded = 0, arg = -1;
    for (int64_t t = 0; t < numel(w.k); ++t) {
      Shape tap = unflatten(t, w.k), pos;
      bool in_img = true, in_pad = true;
      for (size_t a = 0; a < n; ++a) {
        int64_t p = oi[2 + a] * w.s[a] - w.pb[a] + tap[a] * w.d[a];
        in_img &= p >= 0 && p < in[a];
        in_pad &= p < in[a] + w.pe[a];
        pos.push_back(p);
      }
      padded += in_pad;
      if (!in_img) continue;
      int64_t sp = 0;
      if (col_major) {
        int64_t mul = 1;
        for (size_t a = 0; a < n; ++a) {
          sp += pos[a] * mul;
          mul *= in[a];
        }
      } else {
        sp = flatten(pos, in);
      }
      const double v = x[(oi[0] * xs[1] + oi[1]) * S + flatten(pos, in)];
      sum += v;
      ++inside;
      if (arg < 0 || v > best) {
        best = v;
        arg = (oi[0] * xs[1] + oi[1]) * S + sp;
      }
    }
    avg->push_back(sum / double(include_pad ? padded : inside));
    mx->push_back(best);
    idx->push_back(double(arg));
  }
}

TEST(NnPool, MatchesReference) {
  std::mt19937 rng(4);
  cpu::ThreadPool pool(3);
  for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16, DataType::kInt8,
                      DataType::kUInt8}) {
    for (const PoolCase& c : kPoolCases) {
      // Integers: distinct-ish values in a wide range so ties are rare but tested.
      Tensor x = dt == DataType::kUInt8 ? random_tensor(dt, c.x, rng, 0, 255) : random_tensor(dt, c.x, rng, -128, 127);
      PoolAttrs a;
      a.kernel_shape = c.k;
      a.strides = c.s;
      a.dilations = c.d;
      a.pads = c.pads;
      a.auto_pad = c.auto_pad;
      a.ceil_mode = c.ceil_mode;
      a.count_include_pad = c.include_pad;
      a.storage_order = c.storage_order;
      const Shape in(c.x.begin() + 2, c.x.end());
      Win w = forward_window(in, c.k, c.s, c.d, c.pads, c.auto_pad, c.ceil_mode == 1);
      Shape ys;
      std::vector<double> avg, mx, idx;
      pool_ref(x, w, c.include_pad == 1, c.storage_order == 1, &ys, &avg, &mx, &idx);
      const std::string what = shape_string(c.x) + " " + std::string(dtype_name(dt));
      for (cpu::ThreadPool* p : {static_cast<cpu::ThreadPool*>(nullptr), &pool}) {
        auto y = run(OpKind::kMaxPool, a, {&x}, 2, p);
        ASSERT_EQ(y[0].shape, ys) << what;
        ASSERT_EQ(y[1].dtype, DataType::kInt64);
        expect_near(y[0].values(), mx, 0, "MaxPool " + what);
        expect_near(y[1].values(), idx, 0, "MaxPool indices " + what);
        auto y1 = run(OpKind::kMaxPool, a, {&x}, 1, p);
        expect_near(y1[0].values(), mx, 0, "MaxPool (one output) " + what);
        if (!is_float(dt)) continue;
        auto ya = run(OpKind::kAveragePool, a, {&x}, 1, p);
        expect_near(ya[0].values(), avg, tolerance(dt), "AveragePool " + what);
      }
    }
  }
}

// onnx test_maxpool_2d_ceil_output_size_reduce_by_one and test_averagepool_2d_ceil_last_window_starts_on_pad.
TEST(NnPool, OnnxCeilCases) {
  Tensor x = make(DataType::kFloat32, {1, 1, 2, 2}, {1, 2, 3, 4});
  PoolAttrs a;
  a.kernel_shape = {1, 1};
  a.strides = {2, 2};
  a.ceil_mode = 1;
  auto y = run(OpKind::kMaxPool, a, {&x}, 1);
  ASSERT_EQ(y[0].shape, (Shape{1, 1, 1, 1}));
  EXPECT_EQ(y[0].values()[0], 1.0);
  Tensor x2 = make(DataType::kFloat32, {1, 1, 2, 2}, {0.8580, 0.0786, 0.2692, 0.1537});
  PoolAttrs b;
  b.kernel_shape = {3, 3};
  b.strides = {3, 3};
  b.pads = {1, 1, 1, 1};
  b.ceil_mode = 1;
  b.count_include_pad = 1;
  y = run(OpKind::kAveragePool, b, {&x2}, 1);
  ASSERT_EQ(y[0].shape, (Shape{1, 1, 1, 1}));
  EXPECT_NEAR(y[0].values()[0], (0.8580 + 0.0786 + 0.2692 + 0.1537) / 9, 1e-6);
}

TEST(NnPool, GlobalPools) {
  std::mt19937 rng(5);
  cpu::ThreadPool pool(2);
  for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16}) {
    for (const Shape& xs :
         {Shape{2, 3, 4, 5}, Shape{1, 2, 7}, Shape{2, 1, 2, 3, 2}, Shape{0, 3, 4, 4}, Shape{1, 4, 60, 70}}) {
      Tensor x = random_tensor(dt, xs, rng);
      std::vector<double> xv = x.values(), mean, mx;
      const int64_t planes = xs[0] * xs[1], S = planes ? numel(xs) / planes : 0;
      for (int64_t p = 0; p < planes; ++p) {
        double s = 0, m = -INFINITY;
        for (int64_t i = 0; i < S; ++i) {
          s += xv[p * S + i];
          m = std::max(m, xv[p * S + i]);
        }
        mean.push_back(s / double(S));
        mx.push_back(m);
      }
      Shape ys(xs.size(), 1);
      ys[0] = xs[0];
      ys[1] = xs[1];
      auto ya = run(OpKind::kGlobalAveragePool, NoAttrs{}, {&x}, 1, &pool);
      auto ym = run(OpKind::kGlobalMaxPool, NoAttrs{}, {&x}, 1);
      ASSERT_EQ(ya[0].shape, ys);
      ASSERT_EQ(ym[0].shape, ys);
      expect_near(ya[0].values(), mean, tolerance(dt), "GlobalAveragePool " + shape_string(xs));
      expect_near(ym[0].values(), mx, 0, "GlobalMaxPool " + shape_string(xs));
    }
  }
}

// ---- inference errors ----------------------------------------------------------------------

TEST(PoolInfer, RejectsBadInput) {
  Tensor x4 = shaped({1, 4, 5, 5}), x2 = shaped({4, 5}), xi = shaped({1, 4, 5, 5}, DataType::kInt32);
  auto pool = [](auto f) {
    PoolAttrs a;
    a.kernel_shape = {2, 2};
    f(a);
    return Attrs{a};
  };
  auto pnop = [](PoolAttrs&) {};
  expect_infer_error(OpKind::kMaxPool, pool([](PoolAttrs& a) { a.kernel_shape.clear(); }), {&x4}, 1, "no kernel");
  expect_infer_error(OpKind::kMaxPool, pool([](PoolAttrs& a) { a.kernel_shape = {2}; }), {&x4}, 1, "kernel rank");
  expect_infer_error(OpKind::kMaxPool, pool([](PoolAttrs& a) { a.pads = {2, 0, 0, 0}; }), {&x4}, 1, "pad >= kernel");
  expect_infer_error(OpKind::kMaxPool, pool([](PoolAttrs& a) { a.ceil_mode = 2; }), {&x4}, 1, "ceil_mode");
  expect_infer_error(OpKind::kMaxPool, pool([](PoolAttrs& a) { a.storage_order = 3; }), {&x4}, 1, "storage_order");
  expect_infer_error(OpKind::kMaxPool, pool([](PoolAttrs& a) { a.kernel_shape = {6, 2}; }), {&x4}, 1, "kernel > input");
  expect_infer_error(OpKind::kMaxPool, pool(pnop), {&xi}, 1, "int32 MaxPool");
  Tensor x8 = shaped({1, 1, 4, 4}, DataType::kInt8);
  expect_infer_error(OpKind::kAveragePool, pool(pnop), {&x8}, 1, "int8 AveragePool");
  expect_infer_error(OpKind::kAveragePool, pool(pnop), {&x4}, 2, "AveragePool outputs");
  expect_infer_error(OpKind::kMaxPool, pool(pnop), {&x2}, 1, "pool rank");
  expect_infer_error(OpKind::kGlobalAveragePool, NoAttrs{}, {&x2}, 1, "global rank");
  expect_infer_error(OpKind::kGlobalMaxPool, NoAttrs{}, {&xi}, 1, "global int");
  Tensor empty_plane = shaped({1, 2, 0, 3});
  expect_infer_error(OpKind::kGlobalAveragePool, NoAttrs{}, {&empty_plane}, 1, "global empty");
}

}  // namespace
}  // namespace kiln
