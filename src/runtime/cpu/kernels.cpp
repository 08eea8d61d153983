#include "runtime/cpu/kernels.h"

#include <string>

#include "core/op_registry.h"

namespace kiln::cpu {

namespace {

const OpRegistry<KernelEntry>& table() {
  static const OpRegistry<KernelEntry> t({elementwise_kernels(), reduce_kernels(), norm_kernels(), conv_kernels(),
                                          gemm_kernels(), pool_kernels(), resize_kernels(), tensor_kernels(),
                                          rnn_kernels(), quant_kernels(), loss_kernels()});
  return t;
}

}  // namespace

CpuKernel cpu_kernel(OpKind kind) {
  const KernelEntry* e = table().find(kind);
  return e ? e->fn : nullptr;
}

bool kernel_table_complete(std::string* missing) { return table().check(true, missing); }

}  // namespace kiln::cpu
