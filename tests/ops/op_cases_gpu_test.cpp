// Every op case (tests/ops/op_case.h) on the GPU against the CPU kernel (the reference), through
// tests/gpu/gpu_harness.h: outputs poisoned, buffers between guard bytes, every run direct and (per
// the case's GpuModes) misaligned by one element and recorded by stream capture. Cases marked
// `tactics` then run with every tactic the kernel offers, and with an unknown one (an engine built
// on another device), which must fall back to the kernel's default. Skips without a GPU.
#include <algorithm>

#include "gpu/gpu_harness.h"

namespace kiln::gpu_test {
namespace {

std::string trace(const OpCase& c, DT dt) {
  return c.dtypes.empty() ? std::string("mixed types") : "dtype " + std::string(dtype_name(dt));
}

int64_t total_elements(const Inputs& in) {
  int64_t n = 0;
  for (const HostTensor& t : in) n += t.exists ? t.numel() : 0;
  return n;
}

class OpCasesGpu : public testing::TestWithParam<OpCase> {};

TEST_P(OpCasesGpu, MatchesCpu) {
  KILN_SKIP_WITHOUT_GPU();
  const OpCase& c = GetParam();
  rng().seed(static_cast<uint32_t>(std::hash<std::string>{}(c.name)));
  for (DT dt : dtypes_of(c)) {
    SCOPED_TRACE(trace(c, dt));
    const OpRuns runs = c.runs(dt);
    ASSERT_FALSE(runs.empty()) << c.name << ": no runs";
    if (c.modes == GpuModes::kEveryRun) {
      for (const OpRun& r : runs)
        for (GpuMode mode : {GpuMode::kDirect, GpuMode::kMisaligned, GpuMode::kCaptured}) check_run(c, r, mode);
      continue;
    }
    for (const OpRun& r : runs) check_run(c, r, GpuMode::kDirect);
    const OpRun& big = *std::max_element(runs.begin(), runs.end(), [](const OpRun& a, const OpRun& b) {
      return total_elements(a.in) < total_elements(b.in);
    });
    check_run(c, big, GpuMode::kMisaligned);
    check_run(c, big, GpuMode::kCaptured);
  }
}

class OpCasesGpuTactics : public testing::TestWithParam<OpCase> {};

TEST_P(OpCasesGpuTactics, EveryTacticMatchesCpu) {
  KILN_SKIP_WITHOUT_GPU();
  const OpCase& c = GetParam();
  rng().seed(static_cast<uint32_t>(std::hash<std::string>{}(c.name)));
  for (DT dt : dtypes_of(c)) {
    SCOPED_TRACE(trace(c, dt));
    for (const OpRun& r : c.runs(dt)) {
      const std::vector<int32_t> tactics = tactics_of(c.kind, r.attrs, r.in, r.n_out);
      // A bfloat16 convolution cuDNN has no algorithm for runs the direct kernel, which has none;
      // float32 attention has one kernel (the tensor-core ones take float16 and bfloat16).
      if (dt != DT::kBFloat16 && !(c.kind == OpKind::kAttention && dt == DT::kFloat32)) {
        EXPECT_FALSE(tactics.empty()) << c.name << ": no tactics";
      }
      for (int32_t t : tactics) check_run(c, r, GpuMode::kDirect, t);
      check_run(c, r, GpuMode::kDirect, 1000);
    }
  }
}

std::vector<OpCase> with_tactics() {
  std::vector<OpCase> v;
  for (const OpCase& c : op_cases())
    if (c.tactics) v.push_back(c);
  return v;
}

std::string case_name(const testing::TestParamInfo<OpCase>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Ops, OpCasesGpu, testing::ValuesIn(op_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Ops, OpCasesGpuTactics, testing::ValuesIn(with_tactics()), case_name);

}  // namespace
}  // namespace kiln::gpu_test
