// Helpers for the tests of one rewrite pass: build a model's engine with the pass on and off,
// read the engine's steps, and check that both engines compute the same outputs on random inputs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "build/build.h"
#include "onnx_model_util.h"
#include "passes/pass.h"

namespace kiln::test {

using PassModel = OnnxModel;  // the pass tests' name for it

struct Built {
  std::vector<uint8_t> engine;
  build::BuildReport report;
  int changes = -1;  // reported by the pass under test; -1 when it was disabled
  std::string detail;
};

// also_off: passes (or view stages) switched off in both builds. fuse-epilogue is off too unless it
// is the pass under test: these tests count the ops a pass leaves, which it would merge afterwards.
inline Built build_with(const OnnxModel& m, const std::string& pass, bool enabled,
                        const std::vector<std::string>& also_off = {}) {
  graph::Graph g = m.import();
  build::BuildOptions o;
  o.disabled_passes = also_off;
  if (pass != "fuse-epilogue" && std::find(also_off.begin(), also_off.end(), "fuse-epilogue") == also_off.end())
    o.disabled_passes.push_back("fuse-epilogue");
  if (!enabled) o.disabled_passes.push_back(pass);
  Built b;
  b.engine = build::build_engine(g, o, &b.report);
  for (const build::PassReport& p : b.report.passes)
    if (p.name == pass) {
      b.changes = p.changes;
      b.detail = p.detail;
    }
  return b;
}

inline std::vector<std::string> step_ops(const std::vector<uint8_t>& engine) {
  std::vector<std::string> ops;
  for (const StepInfo& s : Engine::from_bytes(engine)->summary().steps) ops.push_back(s.op);
  return ops;
}
inline std::vector<std::string> step_names(const std::vector<uint8_t>& engine) {
  std::vector<std::string> names;
  for (const StepInfo& s : Engine::from_bytes(engine)->summary().steps) names.push_back(s.name);
  return names;
}
inline int count_of(const std::vector<std::string>& v, const std::string& s) {
  return static_cast<int>(std::count(v.begin(), v.end(), s));
}

// |a - b| <= tol * max(|b_i|, max|b|) everywhere: relative to the output's scale, since single
// elements near zero carry the rounding of the larger terms that cancelled. Equal infinities and
// NaN against NaN match.
inline void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  float scale = 0.f;
  for (float x : b)
    if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))) continue;
    EXPECT_LE(std::fabs(a[i] - b[i]), tol * std::max(std::fabs(b[i]), scale)) << i << ": " << a[i] << " vs " << b[i];
  }
}

// Builds m with and without `pass`, expects `changes` rewrites from it, and runs both engines on the
// same random values for every (float) model input; the named outputs must agree. Returns the
// engine built with the pass.
inline Built check_pass(const OnnxModel& m, const std::string& pass, int changes,
                        const std::vector<std::string>& outputs, float tol = 1e-5f,
                        const std::vector<std::string>& also_off = {}) {
  Built on = build_with(m, pass, true, also_off), off = build_with(m, pass, false, also_off);
  EXPECT_EQ(on.changes, changes) << on.detail;
  EXPECT_EQ(off.changes, -1);
  std::map<std::string, std::vector<float>> feed;
  uint32_t seed = 11;
  for (const auto& in : m.m.graph().input()) {
    size_t n = 1;
    for (const auto& d : in.type().tensor_type().shape().dim()) n *= static_cast<size_t>(d.dim_value());
    feed[in.name()] = random_vec(n, seed++);
  }
  auto y_on = run_engine(on.engine, feed, outputs), y_off = run_engine(off.engine, feed, outputs);
  for (const std::string& o : outputs) {
    SCOPED_TRACE(o);
    expect_close(y_on[o], y_off[o], tol);
  }
  return on;
}

// The graph after binding and inference, for calling one pass directly.
inline graph::Graph inferred(const OnnxModel& m) {
  graph::Graph g = m.import();
  build::BuildOptions o;
  passes::bind_inputs(g, o);
  passes::infer_and_fold(g, o);
  return g;
}

}  // namespace kiln::test
