// The elementwise family's kernel table: the entries of unary.cpp, binary.cpp and misc.cpp in this
// folder, joined once.
#include <vector>

#include "runtime/cpu/elementwise/elementwise_internal.h"

namespace kiln::cpu {

std::span<const KernelEntry> elementwise_kernels() {
  static const std::vector<KernelEntry> all = [] {
    std::vector<KernelEntry> v;
    for (auto part : {ew::unary_kernel_entries(), ew::binary_kernel_entries(), ew::misc_kernel_entries()})
      v.insert(v.end(), part.begin(), part.end());
    return v;
  }();
  return all;
}

}  // namespace kiln::cpu
