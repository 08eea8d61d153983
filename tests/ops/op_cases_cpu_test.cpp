// Every op case (tests/ops/op_case.h) on the CPU: each run through shape inference and the CPU
// kernel with poisoned outputs, and where the run has float32 inputs, the float32 result against
// the same run with those inputs widened to float64 (the reference: the same values, computed with
// 29 more bits). The float32 result must be within the case's own tolerance of the float64 one
// rounded to float32, and never tighter than float32 arithmetic allows: 1e-5 relative plus 1e-5 of
// the largest input magnitude. Integer and bool outputs must be equal (quant ops: within one step,
// for the rounding of x / scale at a tie). Where the op refuses float64 scales or parameters, only
// the non-scalar inputs are widened, or X alone; a run none of whose forms the CPU kernel takes is
// reported and compared no further.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <limits>

#include "ops/op_case.h"

namespace kiln::optest {
namespace {

enum class Widen { kAll, kNonScalars, kFirst };

std::vector<HostTensor> run(OpKind kind, const OpRun& r, const Inputs& in) {
  return run_cpu(kind, r.attrs, in, infer_shapes(kind, r.attrs, infer_views(kind, in), r.n_out));
}

// The type's extreme finite values stand for themselves (an empty window's maximum is the lowest
// value of its type): float64's map to float32's rather than overflowing to infinities.
HostTensor convert(const HostTensor& t, DT to) {
  HostTensor out{to, t.shape, std::vector<uint8_t>(static_cast<size_t>(t.numel()) * dtype_size(to)), t.exists};
  const double top = std::numeric_limits<double>::max();
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = get(t, i);
    if (to == DT::kFloat32 && std::abs(v) == top) v = std::copysign(std::numeric_limits<float>::max(), v);
    set(out, i, v);
  }
  return out;
}

// The float32 run's output `got` against the float64 run's `ref`.
void expect_close(const OpCase& c, const OpRun& r, const HostTensor& got, const HostTensor& ref, double input_scale,
                  const std::string& what) {
  if (got.dtype == DT::kBool || !is_float(got.dtype)) {
    ASSERT_EQ(got.dtype, ref.dtype) << what;
    const double step = op_info(c.kind).family == OpFamily::kQuant ? 1 : 0;
    expect_match(got, ref, Tolerance{0, step}, what);
    return;
  }
  const HostTensor want = ref.dtype == got.dtype ? ref : convert(ref, got.dtype);
  Tolerance t = r.tol ? r.tol(want) : Tolerance{};
  t.rel = std::max(t.rel, 1e-5);
  t.abs = std::max(t.abs, 1e-5 * std::max(1.0, input_scale));
  expect_match(got, want, t, what);
}

class OpCasesCpu : public testing::TestWithParam<OpCase> {};

TEST_P(OpCasesCpu, Float32MatchesFloat64) {
  const OpCase& c = GetParam();
  rng().seed(static_cast<uint32_t>(std::hash<std::string>{}(c.name)));
  int compared = 0, without_float64 = 0;
  std::string why;
  for (DT dt : dtypes_of(c)) {
    SCOPED_TRACE(c.dtypes.empty() ? std::string("mixed types") : "dtype " + std::string(dtype_name(dt)));
    const OpRuns runs = c.runs(dt);
    ASSERT_FALSE(runs.empty()) << c.name << ": no runs";
    for (size_t i = 0; i < runs.size(); ++i) {
      const OpRun& r = runs[i];
      const std::string what = describe(c.kind, r.in) + " run " + std::to_string(i);
      std::vector<HostTensor> got;
      try {
        got = run(c.kind, r, r.in);
      } catch (const Error& e) {
        ADD_FAILURE() << what << ": " << e.what();
        continue;
      }
      // Widen every float32 input; where the op then refuses (a scale that must stay float32, a
      // type that must match an attribute), every float32 input but the scalars; then X alone.
      std::vector<HostTensor> ref;
      double scale = 0;
      bool widened = false;
      for (Widen w : {Widen::kAll, Widen::kNonScalars, Widen::kFirst}) {
        Inputs wide = r.in;
        scale = 0;
        bool any = false;
        for (size_t j = 0; j < wide.size(); ++j) {
          HostTensor& t = wide[j];
          if (!t.exists || t.dtype != DT::kFloat32) continue;
          if ((w == Widen::kNonScalars && t.numel() == 1) || (w == Widen::kFirst && j != 0)) continue;
          scale = std::max(scale, max_abs(t));
          t = convert(t, DT::kFloat64);
          any = true;
        }
        if (!any) continue;
        widened = true;
        try {
          ref = run(c.kind, r, wide);
          break;
        } catch (const Error& e) {
          why = e.what();
        }
      }
      if (!widened) continue;
      if (ref.empty()) {
        // Only a run whose X is float32 has float32 data; in the others the float32 inputs are
        // parameters the op takes in float32 only (scales, a CastLike target).
        if (!r.in.empty() && r.in[0].exists && r.in[0].dtype == DT::kFloat32) ++without_float64;
        continue;
      }
      ++compared;
      ASSERT_EQ(got.size(), ref.size()) << what;
      for (size_t k = 0; k < got.size(); ++k)
        expect_close(c, r, got[k], ref[k], scale, what + " output " + std::to_string(k));
    }
  }
  if (without_float64)
    std::cout << "[ float64  ] " << c.name << ": " << without_float64 << " float32 runs without a float64 form ("
              << why.substr(0, 120) << "), " << compared << " compared\n";
}

INSTANTIATE_TEST_SUITE_P(Ops, OpCasesCpu, testing::ValuesIn(op_cases()),
                         [](const testing::TestParamInfo<OpCase>& info) { return info.param.name; });

}  // namespace
}  // namespace kiln::optest
