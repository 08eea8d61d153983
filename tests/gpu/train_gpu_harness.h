// Shared pieces of the GPU training tests (train_*_gpu_test.cpp): host values in and out of
// either backend (float32, float16 through kiln::Half, float64), and the comparison every test
// uses, max |got - want| / max |want| (plus a floor for outputs that are all near zero).
// Without a GPU every test skips (KILN_SKIP_WITHOUT_GPU from gpu_harness.h).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/half.h"
#include "gpu_harness.h"
#include "train/backend.h"
#include "train/random.h"

namespace kiln::train::gpu_test {

// Uniform values in [lo, hi) from (seed, index): the same on every run.
inline std::vector<float> random_values(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * static_cast<float>(uniform_open(seed, i));
  return v;
}

// A tensor of dtype (float32, float16 or float64) holding `values`; alloc_batch when batch.
inline Tensor put(Backend& be, Shape shape, const std::vector<float>& values, DataType dtype = DataType::kFloat32,
                  bool batch = false) {
  Tensor t = batch ? be.alloc_batch(dtype, shape) : be.alloc(dtype, shape);
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel());
  if (dtype == DataType::kFloat16) {
    std::vector<uint16_t> h(values.size());
    for (size_t i = 0; i < h.size(); ++i) h[i] = Half::from_float(values[i]);
    be.upload(h.data(), t);
  } else if (dtype == DataType::kFloat64) {
    std::vector<double> d(values.begin(), values.end());
    be.upload(d.data(), t);
  } else {
    be.upload(values.data(), t);
  }
  return t;
}

inline Tensor put_labels(Backend& be, const std::vector<int32_t>& labels, bool batch = false) {
  Shape shape = {static_cast<int64_t>(labels.size())};
  Tensor t = batch ? be.alloc_batch(DataType::kInt32, shape) : be.alloc(DataType::kInt32, shape);
  be.upload(labels.data(), t);
  return t;
}

// An output tensor filled with NaN, so that elements an op leaves unwritten show.
inline Tensor poisoned(Backend& be, Shape shape, DataType dtype = DataType::kFloat32, bool batch = false) {
  Tensor t = batch ? be.alloc_batch(dtype, shape) : be.alloc(dtype, shape);
  be.fill(t, std::nan(""));
  return t;
}

inline std::vector<float> get(Backend& be, const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == DataType::kFloat16) {
    std::vector<uint16_t> h(out.size());
    be.download(t, h.data());
    for (size_t i = 0; i < h.size(); ++i) out[i] = Half::to_float(h[i]);
  } else if (t.dtype() == DataType::kFloat64) {
    std::vector<double> d(out.size());
    be.download(t, d.data());
    for (size_t i = 0; i < d.size(); ++i) out[i] = static_cast<float>(d[i]);
  } else {
    be.download(t, out.data());
  }
  return out;
}

// max |got - want| / (max |want| + floor); infinite on a size mismatch or a NaN in got.
inline double rel_error(const std::vector<float>& got, const std::vector<float>& want, double floor = 1e-6) {
  if (got.size() != want.size()) return INFINITY;
  double err = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) return INFINITY;
    if (std::isnan(got[i])) continue;
    err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  return err / (scale + floor);
}

#define EXPECT_CLOSE(got, want, tol) EXPECT_LE(::kiln::train::gpu_test::rel_error((got), (want)), (tol))

}  // namespace kiln::train::gpu_test
