// The channels-last ops' GPU kernels beyond the op-case table (tests/ops/nhwc_cases.cpp, run
// against the CPU with every tactic by op_cases_gpu_test): which tactics each case is offered (the
// 1x1 GEMM, the small-channel kernels 300 and 301), the small-channel kernels misaligned and under
// stream capture, and their quantized output. Skips without a GPU.
#include <algorithm>

#include "gpu_harness.h"

namespace kiln::gpu_test {
namespace {

using Inputs = std::vector<HostTensor>;

bool is_nhwc(OpKind k) { return k == OpKind::kNhwcConv || k == OpKind::kNhwcMaxPool || k == OpKind::kNhwcAveragePool; }

// The small-channel kernel's tactics on this device.
std::vector<int32_t> small_c_tactics() { return hopper() ? std::vector<int32_t>{300, 301} : std::vector<int32_t>{300}; }

// The tactics each case is offered; the small-channel-only cases with their other tactic (301).
TEST(NhwcGpuTactics, OfferedWhereTheKernelsApply) {
  KILN_SKIP_WITHOUT_GPU();
  for (const OpCase& c : op_cases()) {
    if (!is_nhwc(c.kind) || (!c.tactics && c.tactic < 0)) continue;
    rng().seed(static_cast<uint32_t>(std::hash<std::string>{}(c.name)));
    for (DT dt : c.dtypes) {
      SCOPED_TRACE(c.name + " " + std::string(dtype_name(dt)));
      for (const OpRun& r : c.runs(dt)) {
        const std::vector<int32_t> tactics = tactics_of(c.kind, r.attrs, r.in);
        EXPECT_FALSE(tactics.empty()) << "no tactics";
        // A 1x1 convolution with unit strides also runs as one GEMM (tactics from 100).
        if (c.name.rfind("NhwcConv1x1", 0) == 0 && c.name.find("Stride") == std::string::npos) {
          const bool gemm = std::any_of(tactics.begin(), tactics.end(), [](int32_t t) { return t >= 100 && t < 200; });
          EXPECT_TRUE(gemm) << "no GEMM tactic";
        }
        auto offered = [&](int32_t t) { return std::find(tactics.begin(), tactics.end(), t) != tactics.end(); };
        const bool small_c = c.name.rfind("NhwcSmallC", 0) == 0 && dt == DT::kFloat16;
        EXPECT_EQ(offered(300), small_c) << "tactic 300";
        // The wgmma form has no 48 KiB staging bound: it takes the wide row too.
        const bool wide = c.name == "NhwcNotSmallCWideRow";
        EXPECT_EQ(offered(301), hopper() && (small_c || wide)) << "tactic 301";
        if (c.tactic >= 0 && offered(301)) check_run(c, r, GpuMode::kDirect, 301);
      }
    }
  }
}

// The small-channel kernels under capture, and their fallback to the direct kernel with
// misaligned pointers.
TEST(NhwcGpuSmallC, CapturedAndMisaligned) {
  KILN_SKIP_WITHOUT_GPU();
  int n = 0;
  for (const OpCase& c : op_cases()) {
    if (c.kind != OpKind::kNhwcConv || c.name.rfind("NhwcSmallC", 0) != 0 ||
        std::find(c.dtypes.begin(), c.dtypes.end(), DT::kFloat16) == c.dtypes.end())
      continue;
    rng().seed(static_cast<uint32_t>(std::hash<std::string>{}(c.name)));
    for (const OpRun& r : c.runs(DT::kFloat16)) {
      ++n;
      for (GpuMode mode : {GpuMode::kMisaligned, GpuMode::kCaptured})
        for (int32_t t : small_c_tactics()) check_run(c, r, mode, t);
    }
  }
  EXPECT_GT(n, 0) << "no SmallC case in tests/ops/nhwc_cases.cpp";
}

// Tactics 300's and 301's quantized output is QuantizeLinear (round(y / s) + z, saturated; computed here on the
// host) of its float output y before the float16 rounding: so it equals the quantized float16
// output except where that rounding moved y across a half step, and then by one step, with the
// half step within half a float16 unit of y. The cases saturate part of the range.
TEST(NhwcGpuQuant, SmallCIsItsFloatOutputQuantized) {
  KILN_SKIP_WITHOUT_GPU();
  int n = 0;
  for (const OpCase& c : op_cases()) {
    if (c.kind != OpKind::kNhwcConv || c.name.rfind("NhwcSmallCQuant", 0) != 0) continue;
    SCOPED_TRACE(c.name);
    ++n;
    rng().seed(static_cast<uint32_t>(std::hash<std::string>{}(c.name)));
    const OpRun r = c.runs(DT::kFloat16).at(0);
    const Inputs& in = r.in;
    const Inputs float_in(in.begin(), in.begin() + 4);
    for (int32_t tactic : small_c_tactics()) {
      SCOPED_TRACE("tactic " + std::to_string(tactic));
      const GpuRunOptions run{tactic, kModeShift, 1};
      const std::vector<OutputType> ft = infer_shapes(c.kind, r.attrs, infer_views(c.kind, float_in), 1);
      const std::vector<OutputType> qt = infer_shapes(c.kind, r.attrs, infer_views(c.kind, in), 1);
      const HostTensor y = run_gpu(c.kind, r.attrs, float_in, ft, GpuMode::kDirect, run)[0];
      const HostTensor q = run_gpu(c.kind, r.attrs, in, qt, GpuMode::kDirect, run)[0];
      const double s = get(in[4], 0), z = get(in[5], 0);
      const double lo = q.dtype == DT::kInt8 ? -128 : 0, hi = q.dtype == DT::kInt8 ? 127 : 255;
      ASSERT_EQ(q.numel(), y.numel());
      int bad = 0, saturated = 0, moved = 0;
      for (int64_t i = 0; i < y.numel() && bad < 5; ++i) {
        const double u = get(y, i) / s, want = std::clamp(std::nearbyint(u) + z, lo, hi), got = get(q, i);
        saturated += want == lo || want == hi;
        if (got == want) continue;
        // The half step between got and want, and half a float16 unit of y (normal values), in steps.
        const double half_step = std::min(got, want) - z + 0.5;
        const double half_unit = std::ldexp(1.0, std::ilogb(std::max(std::abs(get(y, i)), 6.2e-5)) - 11) / s;
        ++moved;
        if (std::abs(got - want) != 1 || std::abs(u - half_step) > 1.01 * half_unit) {
          ++bad;
          ADD_FAILURE() << "element " << i << ": quantized " << got << ", float16 output " << get(y, i)
                        << " quantizes to " << want;
        }
      }
      EXPECT_GT(saturated, 0) << "the case does not reach the type's range";
      EXPECT_LT(moved, y.numel() / 20) << "too many values one step off";
      // The staged fallback quantizes the float16 output itself, so it moves nothing: some moved
      // values show that the kernel quantized in its epilogue.
      EXPECT_GT(moved, 0) << "the kernel did not quantize in its epilogue";
    }
  }
  EXPECT_GT(n, 0) << "no SmallCQuant case in tests/ops/nhwc_cases.cpp";
}

}  // namespace
}  // namespace kiln::gpu_test
