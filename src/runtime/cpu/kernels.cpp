#include "runtime/cpu/kernels.h"

#include <array>
#include <string>

namespace kiln::cpu {

namespace {

struct KernelTable {
  std::array<CpuKernel, kOpCount> fns{};
  std::array<int, kOpCount> count{};
  KernelTable() {
    for (auto entries :
         {elementwise_kernels(), reduce_kernels(), nn_kernels(), tensor_kernels(), extra_kernels(), rnn_kernels()}) {
      for (const KernelEntry& e : entries) {
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
  return ok;
}

}  // namespace kiln::cpu
