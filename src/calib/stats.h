// Calibration statistics of one tensor, and the methods that turn them into a clipping range amax
// (the INT8 scale is amax / 127, calib.h).
//
// The histogram is of |x| (INT8 activations are symmetric), 2048 bins starting at 0. Its bin width
// is set by the first batch with a non-zero value (width = max|x| / 2047, so that max lands inside
// the last bin) and doubles, merging pairs of bins, whenever a later batch holds a larger value:
// one pass over the data, and the result is exactly the histogram of all the data at the final
// width. Non-finite values (NaN, Inf) are counted apart and left out of every statistic.
//
// Methods, on the histogram H (counts per bin, width w):
//   minmax      amax = max|x|.
//   percentile  amax = upper edge of the first bin where the cumulative count reaches p% of all.
//   entropy     TensorRT's KL-divergence calibration (Migacz, "8-bit Inference with TensorRT",
//               GTC 2017), as NVIDIA's pytorch-quantization implements it: H[0] is set to H[1]
//               (the zeros of a ReLU output would dominate otherwise); for every i in [128, 2048],
//               P = H[0..i) with the counts beyond i added to P[i-1]; Q = H[0..i) merged into 128
//               levels (bin j goes to level floor(j * 128 / i)), each level's count spread evenly
//               over its non-empty bins; KL(P || Q) on the normalized distributions (infinite if Q
//               is 0 where P is not). amax = i * w of the smallest divergence (the largest i on ties).
//   mse         for every i in [128, 2048]: amax = i * w, s = amax / 127, error = sum over bins of
//               H[j] * (c_j - s * min(round(c_j / s), 127))^2 with c_j the bin's center; the
//               smallest error wins (the smallest i on ties).
// Results never exceed max|x|.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "calib/calib.h"

namespace kiln::calib {

// One batch's figures over its finite values: the first of add()'s two passes over the data.
struct BatchSummary {
  double min = 0, max = 0, absmax = 0;  // 0 when there is no finite value
  uint64_t finite = 0, nonfinite = 0;

  static BatchSummary of(std::span<const float> x);
};

class TensorStats {
 public:
  static constexpr int kBins = 2048;

  // Adds a batch: summary, then histogram, both on the CPU.
  void add(std::span<const float> x);

  // add() in two steps, for passes made elsewhere (the GPU: calib/stats_gpu.h). add_summary takes
  // the batch's summary and returns the bin width its histogram must be counted at (bin
  // floor(|x| / width) in double, capped at kBins - 1, finite values only), or 0 where none is
  // needed (no finite value, or all zeros); add_histogram then adds those counts.
  double add_summary(const BatchSummary& s);
  void add_histogram(std::span<const uint64_t> counts);
  // The histogram pass of add() over x at `width`, added to `counts` (kBins of them).
  static void count_bins(std::span<const float> x, double width, std::span<uint64_t> counts);

  double min() const { return min_; }  // of the finite values; 0 when there were none
  double max() const { return max_; }
  double absmax() const { return absmax_; }
  double bin_width() const { return width_; }  // 0 until a non-zero value was seen
  const std::vector<uint64_t>& histogram() const { return hist_; }
  uint64_t count() const { return count_; }          // finite values seen
  uint64_t nonfinite() const { return nonfinite_; }  // NaN and Inf values left out

  // The clipping range by `method` (percentile: p in (0, 100]).
  double amax(Method method, double percentile = 99.99) const;

 private:
  std::vector<uint64_t> hist_ = std::vector<uint64_t>(kBins, 0);
  double width_ = 0;
  double min_ = 0, max_ = 0, absmax_ = 0;
  uint64_t count_ = 0, nonfinite_ = 0;
};

// The methods on a bare histogram (bin width `width`); exposed for tests.
double amax_percentile(std::span<const uint64_t> hist, double width, double percentile);
double amax_entropy(std::span<const uint64_t> hist, double width);
double amax_mse(std::span<const uint64_t> hist, double width);

}  // namespace kiln::calib
