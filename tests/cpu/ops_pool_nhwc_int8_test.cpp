// NhwcMaxPool on 8-bit integers (runtime/cpu/pool/nhwc.cpp: Kiln's row-wise channels-last loop)
// against MaxPool on the same tensor channels-first (window.cpp, the reference loop), exactly, on
// random geometries: kernel, stride, dilation, pads, ceil_mode (windows reaching past the input),
// any channel count, 1 and 3 threads. An output of width 0 writes nothing.
#include <gtest/gtest.h>

#include <random>

#include "op_test_util.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln::test {
namespace {

TEST(NhwcMaxPoolInt8, MatchesTheChannelsFirstReference) {
  std::mt19937 rng(42);
  cpu::ThreadPool pool(3);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int cases = 0;
  for (DataType dt : {DataType::kInt8, DataType::kUInt8})
    for (int trial = 0; trial < 150; ++trial) {
      PoolAttrs a;
      const int64_t kh = pick(1, 3), kw = pick(1, 3);
      a.kernel_shape = {kh, kw};
      a.strides = {pick(1, 3), pick(1, 3)};
      a.dilations = {pick(1, 2), pick(1, 2)};
      a.pads = {pick(0, static_cast<int>(kh) - 1), pick(0, static_cast<int>(kw) - 1), pick(0, static_cast<int>(kh) - 1),
                pick(0, static_cast<int>(kw) - 1)};
      a.ceil_mode = pick(0, 1);
      const int64_t n = pick(1, 2), c = std::vector<int64_t>{1, 3, 6, 16, 33}[static_cast<size_t>(pick(0, 4))];
      const int64_t h = pick(5, 12), w = pick(5, 12);  // at least the dilated kernel (5)
      std::vector<double> v(static_cast<size_t>(n * h * w * c));
      for (double& x : v) x = dt == DataType::kInt8 ? pick(-128, 127) : pick(0, 255);
      const Tensor nhwc = make(dt, {n, h, w, c}, v), nchw = permute4(nhwc, false);
      const std::string what = "case " + std::to_string(cases);
      const std::vector<Tensor> want = run(OpKind::kMaxPool, a, {&nchw}, 1);
      const std::vector<Tensor> got = run(OpKind::kNhwcMaxPool, a, {&nhwc}, 1, cases++ % 2 ? &pool : nullptr);
      const Shape& ws = want[0].shape;
      ASSERT_EQ(got[0].shape, (Shape{ws[0], ws[2], ws[3], ws[1]})) << what;
      EXPECT_EQ(got[0].values(), permute4(want[0], true).values()) << what;
    }
}

// auto_pad SAME_UPPER with stride 2 over a width of 0: no output column, nothing to write.
TEST(NhwcMaxPoolInt8, EmptyOutputWritesNothing) {
  PoolAttrs a;
  a.kernel_shape = {2, 2};
  a.strides = {2, 2};
  a.auto_pad = AutoPad::kSameUpper;
  const Tensor x = make(DataType::kInt8, {1, 4, 0, 3}, {});
  const std::vector<Tensor> y = run(OpKind::kNhwcMaxPool, a, {&x}, 1);
  EXPECT_EQ(y[0].shape, (Shape{1, 2, 0, 3}));
}

}  // namespace
}  // namespace kiln::test
