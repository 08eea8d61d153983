// Calibration statistics on the GPU (calib/stats_gpu.h) against TensorStats::add on the host, which
// tests/python/calib_stats_test.py checks against numpy: several tensors per batch, batches whose
// range grows (bins merged) or shrinks, NaN and Inf, all-zero, all-NaN and empty tensors, and a
// tensor long enough for every block of the launch. Everything must agree to the bit. Skips
// without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "calib/stats_gpu.h"
#include "kiln/types.h"
#include "gpu_harness.h"
#include "runtime/cuda/device.h"

namespace kiln::calib {
namespace {

struct DeviceCopy {
  float* p = nullptr;
  explicit DeviceCopy(const std::vector<float>& x) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(1, x.size()) * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceCopy() { cudaFree(p); }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
};

// ReLU-like values (half zeros) times `scale`, with some negative, NaN and Inf values.
std::vector<float> values(size_t n, float scale, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0, 1);
  std::uniform_int_distribution<int> pick(0, 999);
  std::vector<float> x(n);
  for (float& v : x) {
    const int k = pick(rng);
    const float f = normal(rng) * scale;
    v = k == 0    ? std::numeric_limits<float>::quiet_NaN()
        : k == 1  ? std::numeric_limits<float>::infinity()
        : k < 500 ? std::max(f, 0.0f)
                  : f;
  }
  return x;
}

void expect_same(const TensorStats& gpu, const TensorStats& cpu, const char* what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(gpu.count(), cpu.count());
  EXPECT_EQ(gpu.nonfinite(), cpu.nonfinite());
  EXPECT_EQ(gpu.min(), cpu.min());
  EXPECT_EQ(gpu.max(), cpu.max());
  EXPECT_EQ(gpu.absmax(), cpu.absmax());
  EXPECT_EQ(gpu.bin_width(), cpu.bin_width());
  EXPECT_EQ(gpu.histogram(), cpu.histogram());
  for (Method m : {Method::kEntropy, Method::kPercentile, Method::kMinMax, Method::kMse})
    EXPECT_EQ(gpu.amax(m), cpu.amax(m)) << method_name(m);
}

TEST(CalibStatsGpu, MatchesTheHostBatchByBatch) {
  KILN_SKIP_WITHOUT_GPU();
  const char* names[] = {"growing range", "shrinking range", "all zeros", "all NaN", "empty", "long"};
  constexpr size_t kTensors = 6;
  std::vector<TensorStats> gpu(kTensors), cpu(kTensors);
  for (unsigned batch = 0; batch < 4; ++batch) {
    std::vector<std::vector<float>> x(kTensors);
    x[0] = values(10000 + batch, 1.0f + 3.0f * static_cast<float>(batch), batch);  // merges bins
    x[1] = values(7777, 8.0f / static_cast<float>(batch + 1), 100 + batch);
    x[2].assign(5000, 0.0f);
    x[3].assign(300, std::numeric_limits<float>::quiet_NaN());
    x[5] = values(3'000'001, 2.5f, 200 + batch);
    std::vector<std::unique_ptr<DeviceCopy>> d;
    std::vector<DeviceFloats> views;
    std::vector<TensorStats*> stats;
    for (size_t t = 0; t < kTensors; ++t) {
      d.push_back(std::make_unique<DeviceCopy>(x[t]));
      views.push_back({d.back()->p, x[t].size()});
      stats.push_back(&gpu[t]);
      cpu[t].add(x[t]);
    }
    add_on_gpu(stats, views);
    for (size_t t = 0; t < kTensors; ++t) expect_same(gpu[t], cpu[t], names[t]);
  }
  EXPECT_GT(cpu[0].bin_width(), 0.0);
  EXPECT_EQ(cpu[2].histogram()[0], 20000u);
  EXPECT_EQ(cpu[3].nonfinite(), 1200u);
}

// Values on the edges of bins: |x| = k * width exactly, where floor(|x| / width) in double must
// give k on both sides, and the largest value, which lands in the last bin.
TEST(CalibStatsGpu, BinEdgesAgree) {
  KILN_SKIP_WITHOUT_GPU();
  std::vector<float> x;
  for (int k = 0; k < 2048; ++k) x.push_back(static_cast<float>(k) * 0.0625f), x.push_back(-x.back());
  x.push_back(2047.0f * 0.0625f + 0.01f);
  TensorStats gpu, cpu;
  cpu.add(x);
  DeviceCopy d(x);
  const DeviceFloats view{d.p, x.size()};
  TensorStats* s = &gpu;
  add_on_gpu({&s, 1}, {&view, 1});
  expect_same(gpu, cpu, "edges");
}

TEST(CalibStatsGpu, MismatchedListsAreAnError) {
  TensorStats s;
  TensorStats* p = &s;
  EXPECT_THROW(add_on_gpu({&p, 1}, {}), Error);
}

}  // namespace
}  // namespace kiln::calib
