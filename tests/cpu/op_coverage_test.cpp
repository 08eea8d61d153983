// The one coverage test of the op table (src/core/op_kind.h): every op kind has shape inference, a
// CPU kernel and (in a CUDA build) a GPU kernel, each registered once and by its own family
// (OpInfo::family names the folder it lives in: core/infer/<family>/, runtime/cpu/<family>/,
// runtime/cuda/<family>/); every op has cases in the op-case table (tests/ops), which drives the
// CPU and GPU op checks; import and export agree on its name. No GPU needed: the tables are static.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <set>
#include <string>

#include "core/op_kind.h"
#include "core/shape_infer.h"
#include "ops/op_case.h"
#include "runtime/cpu/kernels.h"
#ifdef KILN_HAVE_CUDA
#include "runtime/cuda/gpu_kernels.h"
#endif

namespace kiln {
namespace {

TEST(OpCoverage, EveryOpHasShapeInferenceInItsFamily) {
  std::string missing;
  EXPECT_TRUE(infer_table_complete(&missing)) << missing;
}

TEST(OpCoverage, EveryOpHasACpuKernelInItsFamily) {
  std::string missing;
  EXPECT_TRUE(cpu::kernel_table_complete(&missing)) << missing;
  for (const OpInfo& info : kOpTable) EXPECT_NE(cpu::cpu_kernel(info.kind), nullptr) << info.name;
}

#ifdef KILN_HAVE_CUDA
TEST(OpCoverage, EveryOpHasAGpuKernelInItsFamily) {
  std::string problems;
  EXPECT_TRUE(gpu::gpu_kernel_table_valid(&problems)) << problems;
  std::string missing;
  int n = 0;
  for (const OpInfo& info : kOpTable)
    if (!gpu::gpu_kernel(info.kind)) missing += (n++ % 12 == 0 ? "\n  " : " ") + std::string(info.name);
  std::cout << "[ GPU ops  ] " << kOpCount - n << " of " << kOpCount << " ops have a GPU kernel\n";
  EXPECT_EQ(n, 0) << "ops without a GPU kernel:" << missing;
}
#endif

// Every op has cases in tests/ops/<family>_cases.cpp: the CPU check (float32 against float64) and
// the GPU check (against the CPU) run them.
TEST(OpCoverage, EveryOpHasCases) {
  const std::vector<optest::OpCase>& cases = optest::op_cases();
  for (const OpInfo& info : kOpTable) {
    const bool has =
        std::any_of(cases.begin(), cases.end(), [&](const optest::OpCase& c) { return c.kind == info.kind; });
    EXPECT_TRUE(has) << info.name << " has no case in tests/ops (add one to tests/ops/<family>_cases.cpp)";
  }
}

TEST(OpCoverage, EveryFamilyHasOpsAndEveryOpAName) {
  std::set<OpFamily> used;
  std::set<std::string_view> names;
  for (const OpInfo& info : kOpTable) {
    used.insert(info.family);
    EXPECT_TRUE(names.insert(info.name).second) << "two ops named " << info.name;
    if (!is_internal_op(info.kind)) {
      EXPECT_EQ(op_kind_from_name(info.name), info.kind) << info.name;
    }
  }
  EXPECT_EQ(used.size(), kOpFamilyCount) << "a family without ops: drop it from OpFamily";
}

// The traits the passes ask for are consistent with the families: per-element and broadcasting
// ops are elementwise (or a quantization, which is per-element per tensor), and no op is both.
TEST(OpCoverage, TraitsAgreeWithFamilies) {
  for (const OpInfo& info : kOpTable) {
    const bool per_element = has_trait(info.kind, kPerElement), broadcast = has_trait(info.kind, kBroadcast);
    EXPECT_FALSE(per_element && broadcast) << info.name;
    if (per_element || broadcast) {
      EXPECT_TRUE(info.family == OpFamily::kElementwise || info.family == OpFamily::kQuant) << info.name;
    }
    if (has_trait(info.kind, kReshapeLike)) {
      EXPECT_EQ(info.family, OpFamily::kTensor) << info.name;
    }
  }
}

}  // namespace
}  // namespace kiln
