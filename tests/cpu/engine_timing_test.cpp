// The engine timing behind the GPU builder's INT8-or-float choice (build/engine_timing.h). The
// choice itself needs a GPU; the timing runs any engine, so it is checked here on CPU engines: it
// must bind every input itself (an engine refuses to run with an input unset) and return a time.
// The data it (and the per-layer tactic timing, and kiln bench) runs on: sample_values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "onnx_model_util.h"
#include "build/build.h"
#include "build/engine_timing.h"
#include "build/sample_inputs.h"

namespace kiln::build {
namespace {

using namespace kiln::test;

TEST(EngineTiming, TimesAnEngineWithTwoInputs) {
  OnnxModel m("two_inputs");
  m.input("a", {4, 8});
  m.input("b", {8, 3});
  m.node("MatMul", "mm", {"a", "b"}, {"y"});
  m.output("y");
  graph::Graph g = m.import();
  const std::vector<uint8_t> engine = build_engine(g, BuildOptions{});
  const double ms = median_run_ms(engine, 5);
  EXPECT_GT(ms, 0.0);
  EXPECT_LT(ms, 1000.0);
  TimedEngine timed(engine);
  for (int round = 0; round < 3; ++round) {
    const double r = timed.median_ms(3);
    EXPECT_GT(r, 0.0);
    EXPECT_LT(r, 1000.0);
  }
}

TEST(EngineTiming, RefusesBytesThatAreNotAnEngine) {
  const std::vector<uint8_t> junk(64, 7);
  EXPECT_THROW(TimedEngine{junk}, Error);
}

// Floats in [-1, 1] and int8 over its range, spread (not zeros: GPUs run faster on zeros),
// the same for the same seed; integer types that may be indices stay zero.
TEST(EngineTiming, SampleValuesAreSpreadAndDeterministic) {
  constexpr size_t n = 4096;
  const std::vector<uint8_t> f = sample_values(DataType::kFloat32, n);
  ASSERT_EQ(f.size(), n * 4);
  EXPECT_EQ(f, sample_values(DataType::kFloat32, n));
  EXPECT_NE(f, sample_values(DataType::kFloat32, n, 7));
  const float* v = reinterpret_cast<const float*>(f.data());
  float lo = 1, hi = -1;
  for (size_t i = 0; i < n; ++i) lo = std::min(lo, v[i]), hi = std::max(hi, v[i]);
  EXPECT_GE(lo, -1.0f);
  EXPECT_LT(lo, -0.9f);
  EXPECT_LE(hi, 1.0f);
  EXPECT_GT(hi, 0.9f);
  const std::vector<uint8_t> h = sample_values(DataType::kFloat16, n);
  float hmax = 0;
  for (size_t i = 0; i < n; ++i) {
    Half x;
    std::memcpy(&x.bits, h.data() + 2 * i, 2);
    ASSERT_LE(std::abs(static_cast<float>(x)), 1.0f);
    hmax = std::max(hmax, std::abs(static_cast<float>(x)));
  }
  EXPECT_GT(hmax, 0.9f);
  const std::vector<uint8_t> q = sample_values(DataType::kInt8, n);
  EXPECT_EQ(*std::min_element(q.begin(), q.end()), 0);
  EXPECT_EQ(*std::max_element(q.begin(), q.end()), 255);
  const std::vector<uint8_t> idx = sample_values(DataType::kInt64, n);
  ASSERT_EQ(idx.size(), n * 8);
  EXPECT_TRUE(std::all_of(idx.begin(), idx.end(), [](uint8_t b) { return b == 0; }));
}

}  // namespace
}  // namespace kiln::build
