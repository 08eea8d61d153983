#include "runtime/cpu/kernels.h"

#include <array>
#include <string>

namespace kiln::cpu {

namespace {

// Every family's registry, in OpFamily order.
struct FamilyKernels {
  OpFamily family;
  std::span<const KernelEntry> (*entries)();
};
constexpr FamilyKernels kFamilies[] = {
    {OpFamily::kElementwise, elementwise_kernels},
    {OpFamily::kReduce, reduce_kernels},
    {OpFamily::kNorm, norm_kernels},
    {OpFamily::kConv, conv_kernels},
    {OpFamily::kGemm, gemm_kernels},
    {OpFamily::kPool, pool_kernels},
    {OpFamily::kResize, resize_kernels},
    {OpFamily::kTensor, tensor_kernels},
    {OpFamily::kRnn, rnn_kernels},
    {OpFamily::kQuant, quant_kernels},
    {OpFamily::kLoss, loss_kernels},
};
constexpr bool families_in_order() {
  for (size_t i = 0; i < std::size(kFamilies); ++i)
    if (static_cast<size_t>(kFamilies[i].family) != i) return false;
  return std::size(kFamilies) == kOpFamilyCount;
}
static_assert(families_in_order(), "kFamilies lists every op family's CPU registry once, in OpFamily order");

struct KernelTable {
  std::array<CpuKernel, kOpCount> fns{};
  std::array<int, kOpCount> count{};
  KernelTable() {
    for (const FamilyKernels& f : kFamilies) {
      for (const KernelEntry& e : f.entries()) {
        fns[static_cast<size_t>(e.kind)] = e.fn;
        ++count[static_cast<size_t>(e.kind)];
      }
    }
  }
};

const KernelTable& table() {
  static const KernelTable t;
  return t;
}

}  // namespace

CpuKernel cpu_kernel(OpKind kind) { return table().fns[static_cast<size_t>(kind)]; }

bool kernel_table_complete(std::string* missing) {
  bool ok = true;
  for (size_t i = 0; i < kOpCount; ++i) {
    if (table().count[i] != 1) {
      ok = false;
      if (missing) *missing += std::string(kOpTable[i].name) + "(" + std::to_string(table().count[i]) + ") ";
    }
  }
  for (const FamilyKernels& f : kFamilies) {
    for (const KernelEntry& e : f.entries()) {
      const OpFamily own = op_info(e.kind).family;
      if (own == f.family) continue;
      ok = false;
      if (missing)
        *missing += std::string(op_name(e.kind)) + "(registered by family " + std::string(family_name(f.family)) +
                    ", belongs to family " + std::string(family_name(own)) + ") ";
    }
  }
  return ok;
}

}  // namespace kiln::cpu
