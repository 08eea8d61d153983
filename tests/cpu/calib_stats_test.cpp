// Calibration statistics (calib/stats.h) on hand-computed cases: the histogram of |x| and how its
// bin width doubles, min/max, non-finite values, and the minmax, percentile, entropy and mse
// ranges where the answer can be worked out by hand. tests/python/calib_test.py checks the methods
// against an independent numpy implementation on random data through `kiln optimize`.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "calib/stats.h"
#include "kiln/types.h"

namespace kiln::calib {
namespace {

TEST(CalibStats, HistogramOfAbsoluteValues) {
  TensorStats s;
  // max |x| = 2047 gives a bin width of exactly 1: bin = floor(|x|).
  const std::vector<float> x = {0.0f, 0.5f, -1.5f, 2047.0f, 1000.25f, -3.0f};
  s.add(x);
  EXPECT_EQ(s.bin_width(), 1.0);
  EXPECT_EQ(s.count(), 6u);
  EXPECT_EQ(s.min(), -3.0);
  EXPECT_EQ(s.max(), 2047.0);
  EXPECT_EQ(s.absmax(), 2047.0);
  const std::vector<uint64_t>& h = s.histogram();
  EXPECT_EQ(h[0], 2u);
  EXPECT_EQ(h[1], 1u);
  EXPECT_EQ(h[3], 1u);
  EXPECT_EQ(h[1000], 1u);
  EXPECT_EQ(h[2047], 1u);
}

// A larger value later doubles the width, merging pairs of bins: the result is the histogram of
// all the data at the final width.
TEST(CalibStats, WidthDoublesForLargerValues) {
  TensorStats s;
  s.add(std::vector<float>{0.0f, 0.5f, -1.5f, 2047.0f, 1000.25f, -3.0f});
  s.add(std::vector<float>{-4000.0f, 5.0f});
  EXPECT_EQ(s.bin_width(), 2.0);
  const std::vector<uint64_t>& h = s.histogram();
  std::vector<uint64_t> want(TensorStats::kBins, 0);
  for (float v : {0.0f, 0.5f, -1.5f, 2047.0f, 1000.25f, -3.0f, -4000.0f, 5.0f})
    ++want[static_cast<size_t>(std::floor(std::fabs(v) / 2.0))];
  EXPECT_EQ(h, want);
  EXPECT_EQ(s.min(), -4000.0);
  s.add(std::vector<float>{16000.0f});  // two more doublings at once
  EXPECT_EQ(s.bin_width(), 8.0);
  EXPECT_EQ(s.histogram()[0], 5u);  // 0, 0.5, 1.5, 3, 5
  EXPECT_EQ(s.histogram()[2000], 1u);
}

TEST(CalibStats, ZerosAndNonFiniteValues) {
  TensorStats s;
  s.add(std::vector<float>{0.0f, -0.0f, std::numeric_limits<float>::quiet_NaN()});
  EXPECT_EQ(s.bin_width(), 0.0);
  EXPECT_EQ(s.histogram()[0], 2u);
  EXPECT_EQ(s.nonfinite(), 1u);
  for (Method m : {Method::kEntropy, Method::kPercentile, Method::kMinMax, Method::kMse}) EXPECT_EQ(s.amax(m), 0.0);
  EXPECT_FLOAT_EQ(int8_scale(0), 1.0f / 127);
  s.add(std::vector<float>{std::numeric_limits<float>::infinity(), 4094.0f});
  EXPECT_EQ(s.nonfinite(), 2u);
  EXPECT_EQ(s.bin_width(), 2.0);
  EXPECT_EQ(s.histogram()[0], 2u);  // the zeros seen before the width was known
  EXPECT_EQ(s.absmax(), 4094.0);
  EXPECT_FLOAT_EQ(int8_scale(4094), static_cast<float>(4094.0 / 127));
}

TEST(CalibStats, MinMaxIsTheLargestMagnitude) {
  TensorStats s;
  s.add(std::vector<float>{-7.5f, 2.0f, 3.25f});
  EXPECT_EQ(s.amax(Method::kMinMax), 7.5);
}

// 99 values in bin 0 and one in bin 2047 (width 1).
TEST(CalibStats, PercentileFindsTheCumulativeBin) {
  std::vector<float> x(99, 0.5f);
  x.push_back(2047.0f);
  TensorStats s;
  s.add(x);
  EXPECT_EQ(s.amax(Method::kPercentile, 99.0), 1.0);     // bin 0's upper edge holds 99%
  EXPECT_EQ(s.amax(Method::kPercentile, 99.5), 2047.0);  // needs the last bin; never past max|x|
  EXPECT_EQ(amax_percentile(s.histogram(), 1.0, 100.0), 2048.0);
  EXPECT_THROW(s.amax(Method::kPercentile, 0.0), Error);
  EXPECT_THROW(s.amax(Method::kPercentile, 100.5), Error);
}

// A flat histogram loses information under any clipping, and merging 16 equal bins per level
// loses none: KL is 0 only for the full range.
TEST(CalibStats, EntropyKeepsAFlatHistogramWhole) {
  const std::vector<uint64_t> flat(TensorStats::kBins, 10);
  EXPECT_EQ(amax_entropy(flat, 0.5), 2048 * 0.5);
}

// A lone far outlier: every range up to it has a small KL (only the outlier is clipped), while a
// range reaching it merges the bulk into few levels. Entropy clips it; minmax does not.
TEST(CalibStats, EntropyClipsALoneOutlier) {
  std::vector<uint64_t> h(TensorStats::kBins, 0);
  for (int i = 0; i < 200; ++i) h[static_cast<size_t>(i)] = 1000 - 4 * static_cast<uint64_t>(i);
  h[2047] = 1;
  const double a = amax_entropy(h, 1.0);
  EXPECT_GE(a, 128.0);
  EXPECT_LE(a, 256.0);
}

// All values at one bin centre c = 127.5 (bin 127, width 1): the chosen range rounds c at least
// as well as every other candidate range, and it is at least 128 bins (the smallest candidate).
TEST(CalibStats, MseRangeRepresentsASpikeWell) {
  std::vector<uint64_t> h(TensorStats::kBins, 0);
  h[127] = 100;
  const double a = amax_mse(h, 1.0);
  const double s = a / 127, c = 127.5;
  const double err = c - s * std::min(std::nearbyint(c / s), 127.0);
  // Any other candidate does no better.
  for (int i = 128; i <= TensorStats::kBins; ++i) {
    const double si = i / 127.0;
    const double ei = c - si * std::min(std::nearbyint(c / si), 127.0);
    EXPECT_LE(err * err, ei * ei + 1e-12) << i;
  }
  EXPECT_GE(a, 128.0);
}

TEST(CalibStats, MethodNames) {
  for (Method m : {Method::kEntropy, Method::kPercentile, Method::kMinMax, Method::kMse})
    EXPECT_EQ(parse_method(method_name(m)), m);
  try {
    parse_method("kl");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--calib-method kl: expected entropy, percentile, minmax or mse");
  }
}

}  // namespace
}  // namespace kiln::calib
