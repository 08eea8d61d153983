// The one coverage test of the op table (src/core/op_kind.h): every op kind has shape inference and
// a CPU kernel, each registered once and by its own family (OpInfo::family names the folder it
// lives in: core/infer/<family>/, runtime/cpu/<family>/), and import and export agree on its name.
// The GPU side of the same check is GpuCoverage in tests/gpu/ops_gpu_test.cpp.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/op_kind.h"
#include "core/shape_infer.h"
#include "runtime/cpu/kernels.h"

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

TEST(OpCoverage, EveryFamilyHasOpsAndEveryOpAName) {
  std::set<OpFamily> used;
  std::set<std::string_view> names;
  for (const OpInfo& info : kOpTable) {
    used.insert(info.family);
    EXPECT_TRUE(names.insert(info.name).second) << "two ops named " << info.name;
    if (!is_internal_op(info.kind)) EXPECT_EQ(op_kind_from_name(info.name), info.kind) << info.name;
  }
  EXPECT_EQ(used.size(), kOpFamilyCount) << "a family without ops: drop it from OpFamily";
}

// The traits the passes ask for are consistent with the families: per-element and broadcasting
// ops are elementwise (or a quantization, which is per-element per tensor), and no op is both.
TEST(OpCoverage, TraitsAgreeWithFamilies) {
  for (const OpInfo& info : kOpTable) {
    const bool per_element = has_trait(info.kind, kPerElement), broadcast = has_trait(info.kind, kBroadcast);
    EXPECT_FALSE(per_element && broadcast) << info.name;
    if (per_element || broadcast)
      EXPECT_TRUE(info.family == OpFamily::kElementwise || info.family == OpFamily::kQuant) << info.name;
    if (has_trait(info.kind, kReshapeLike)) EXPECT_EQ(info.family, OpFamily::kTensor) << info.name;
  }
}

}  // namespace
}  // namespace kiln
