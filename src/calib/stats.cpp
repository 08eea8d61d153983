// Calibration statistics and the amax methods (the math is in stats.h). Everything is computed in
// double; a histogram bin index is floor(|x| / width) in double, as tests/python/calib_stats_test.py
// computes it with numpy.
#include "calib/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kiln/types.h"

namespace kiln::calib {

namespace {

constexpr int kFirstCandidate = 128;  // fewer bins than INT8 levels cannot be a useful range
constexpr int kLevels = 128;          // |x| maps to 0..127

}  // namespace

float int8_scale(double amax) { return amax > 0 ? static_cast<float>(amax / 127.0) : 1.0f / 127.0f; }

std::string_view method_name(Method m) {
  switch (m) {
    case Method::kEntropy: return "entropy";
    case Method::kPercentile: return "percentile";
    case Method::kMinMax: return "minmax";
    case Method::kMse: return "mse";
  }
  return "?";
}

Method parse_method(std::string_view name) {
  for (Method m : {Method::kEntropy, Method::kPercentile, Method::kMinMax, Method::kMse})
    if (method_name(m) == name) return m;
  throw Error("--calib-method " + std::string(name) + ": expected entropy, percentile, minmax or mse");
}

BatchSummary BatchSummary::of(std::span<const float> x) {
  BatchSummary s;
  for (float f : x) {
    if (!std::isfinite(f)) {
      ++s.nonfinite;
      continue;
    }
    const double v = f;
    if (s.finite++ == 0) {
      s.min = s.max = v;
    } else {
      s.min = std::min(s.min, v);
      s.max = std::max(s.max, v);
    }
    s.absmax = std::max(s.absmax, std::fabs(v));
  }
  return s;
}

double TensorStats::add_summary(const BatchSummary& s) {
  nonfinite_ += s.nonfinite;
  if (s.finite == 0) return 0;
  if (count_ == 0) {
    min_ = s.min;
    max_ = s.max;
  } else {
    min_ = std::min(min_, s.min);
    max_ = std::max(max_, s.max);
  }
  count_ += s.finite;
  absmax_ = std::max(absmax_, s.absmax);
  if (s.absmax == 0) {  // zeros fall into bin 0 whatever the width
    hist_[0] += s.finite;
    return 0;
  }
  if (width_ == 0) width_ = s.absmax / (kBins - 1);
  while (s.absmax / width_ >= kBins) {  // merge pairs: the histogram at twice the width
    for (int i = 0; i < kBins / 2; ++i) hist_[i] = hist_[2 * i] + hist_[2 * i + 1];
    std::fill(hist_.begin() + kBins / 2, hist_.end(), 0);
    width_ *= 2;
  }
  return width_;
}

void TensorStats::add_histogram(std::span<const uint64_t> counts) {
  if (counts.size() != hist_.size())
    throw Error("calibration: a histogram of " + std::to_string(counts.size()) + " bins, expected " +
                std::to_string(kBins));
  for (size_t i = 0; i < counts.size(); ++i) hist_[i] += counts[i];
}

void TensorStats::count_bins(std::span<const float> x, double width, std::span<uint64_t> counts) {
  for (float f : x) {
    if (!std::isfinite(f)) continue;
    const double b = std::floor(std::fabs(static_cast<double>(f)) / width);
    ++counts[static_cast<size_t>(std::min(b, static_cast<double>(kBins - 1)))];
  }
}

void TensorStats::add(std::span<const float> x) {
  const double width = add_summary(BatchSummary::of(x));
  if (width == 0) return;
  std::vector<uint64_t> counts(kBins, 0);
  count_bins(x, width, counts);
  add_histogram(counts);
}

double TensorStats::amax(Method method, double percentile) const {
  double a = 0;
  switch (method) {
    case Method::kMinMax: return absmax_;
    case Method::kPercentile: a = amax_percentile(hist_, width_, percentile); break;
    case Method::kEntropy: a = amax_entropy(hist_, width_); break;
    case Method::kMse: a = amax_mse(hist_, width_); break;
  }
  return std::min(a, absmax_);
}

double amax_percentile(std::span<const uint64_t> hist, double width, double percentile) {
  if (!(percentile > 0 && percentile <= 100))
    throw Error("calibration percentile " + std::to_string(percentile) + " must be in (0, 100]");
  double total = 0;
  for (uint64_t c : hist) total += static_cast<double>(c);
  if (total == 0) return 0;
  const double target = percentile / 100 * total;
  double cum = 0;
  for (size_t i = 0; i < hist.size(); ++i) {
    cum += static_cast<double>(hist[i]);
    if (cum >= target) return static_cast<double>(i + 1) * width;
  }
  return static_cast<double>(hist.size()) * width;
}

double amax_entropy(std::span<const uint64_t> hist, double width) {
  const int n = static_cast<int>(hist.size());
  if (n <= kFirstCandidate) return static_cast<double>(n) * width;
  std::vector<double> bins(hist.begin(), hist.end());
  bins[0] = bins[1];
  std::vector<double> suffix(static_cast<size_t>(n) + 1, 0);  // suffix[i] = sum of bins[i..n)
  for (int i = n; i-- > 0;) suffix[i] = suffix[i + 1] + bins[i];

  double best = std::numeric_limits<double>::infinity();
  int best_i = n;
  std::vector<double> level_sum(kLevels), level_nonzero(kLevels);
  for (int i = kFirstCandidate; i <= n; ++i) {
    std::fill(level_sum.begin(), level_sum.end(), 0);
    std::fill(level_nonzero.begin(), level_nonzero.end(), 0);
    for (int j = 0; j < i; ++j) {
      if (bins[j] == 0) continue;
      const int l = j * kLevels / i;
      level_sum[l] += bins[j];
      level_nonzero[l] += 1;
    }
    const double p_total = suffix[0];  // P keeps every count (outliers folded into its last bin)
    const double q_total = suffix[0] - suffix[i];
    double kl = std::numeric_limits<double>::infinity();
    if (p_total > 0 && q_total > 0) {
      kl = 0;
      for (int j = 0; j < i && std::isfinite(kl); ++j) {
        const double p = (j == i - 1 ? bins[j] + suffix[i] : bins[j]) / p_total;
        if (p == 0) continue;
        const int l = j * kLevels / i;
        const double q = bins[j] == 0 ? 0 : level_sum[l] / level_nonzero[l] / q_total;
        kl = q == 0 ? std::numeric_limits<double>::infinity() : kl + p * std::log(p / q);
      }
    }
    if (kl <= best) {  // <=: the largest i wins ties
      best = kl;
      best_i = i;
    }
  }
  return static_cast<double>(best_i) * width;
}

double amax_mse(std::span<const uint64_t> hist, double width) {
  const int n = static_cast<int>(hist.size());
  if (n <= kFirstCandidate) return static_cast<double>(n) * width;
  double best = std::numeric_limits<double>::infinity();
  int best_i = n;
  for (int i = kFirstCandidate; i <= n; ++i) {
    const double s = static_cast<double>(i) * width / 127;
    double err = 0;
    for (int j = 0; j < n; ++j) {
      if (hist[j] == 0) continue;
      const double c = (j + 0.5) * width;
      const double q = s * std::min(std::nearbyint(c / s), 127.0);
      err += static_cast<double>(hist[j]) * (c - q) * (c - q);
    }
    if (err < best) {
      best = err;
      best_i = i;
    }
  }
  return static_cast<double>(best_i) * width;
}

}  // namespace kiln::calib
