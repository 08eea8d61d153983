// The quant family's kernel table: the entries of quantize.cpp, conv.cpp and matmul.cpp in this
// folder, joined once.
#include <vector>

#include "runtime/cpu/quant/quant_internal.h"

namespace kiln::cpu {

std::span<const KernelEntry> quant_kernels() {
  static const std::vector<KernelEntry> all = [] {
    std::vector<KernelEntry> v;
    for (auto part : {quant::quantize_kernel_entries(), quant::conv_kernel_entries(), quant::matmul_kernel_entries()})
      v.insert(v.end(), part.begin(), part.end());
    return v;
  }();
  return all;
}

}  // namespace kiln::cpu
