// The fused ops' GPU kernels beyond the op-case table (tests/ops/fused_cases.cpp, run against the
// CPU with every tactic by op_cases_gpu_test): where cuDNN can fuse Relu with a bias, its unfused
// form is offered as a tactic too. Skips without a GPU.
#include <algorithm>

#include "gpu_harness.h"

namespace kiln::gpu_test {
namespace {

// Relu with a bias: cuDNN's fused call runs with any algorithm, so each has an unfused twin
// (float32 and float16 only: cuDNN has no fused call for float64).
TEST(FusedGpuTactics, FusableConvolutionsOfferTheirUnfusedForm) {
  KILN_SKIP_WITHOUT_GPU();
  int n = 0;
  for (const OpCase& c : op_cases()) {
    if (c.kind != OpKind::kFusedConv || !c.tactics || c.name.rfind("FusedConv3x3", 0) != 0 ||
        c.name.find("Relu") == std::string::npos || c.name.find("NoBias") != std::string::npos)
      continue;
    rng().seed(static_cast<uint32_t>(std::hash<std::string>{}(c.name)));
    for (DT dt : c.dtypes) {
      if (dt != DT::kFloat32 && dt != DT::kFloat16) continue;
      for (const OpRun& r : c.runs(dt)) {
        ++n;
        const std::vector<int32_t> tactics = tactics_of(c.kind, r.attrs, r.in);
        const bool unfused = std::any_of(tactics.begin(), tactics.end(), [](int32_t t) { return t >= 200; });
        EXPECT_TRUE(unfused) << c.name << " " << dtype_name(dt)
                             << ": cuDNN could fuse, so its unfused form should be a tactic too";
      }
    }
  }
  EXPECT_GT(n, 0) << "no fusable Conv3x3 case in tests/ops/fused_cases.cpp";
}

}  // namespace
}  // namespace kiln::gpu_test
