// The pool family's kernel table: the entries of window.cpp, global.cpp and nhwc.cpp in this
// folder, joined once.
#include <vector>

#include "runtime/cpu/pool/pool_internal.h"

namespace kiln::cpu {

std::span<const KernelEntry> pool_kernels() {
  static const std::vector<KernelEntry> all = [] {
    std::vector<KernelEntry> v;
    for (auto part : {pool::window_kernel_entries(), pool::global_kernel_entries(), pool::nhwc_kernel_entries()})
      v.insert(v.end(), part.begin(), part.end());
    return v;
  }();
  return all;
}

}  // namespace kiln::cpu
