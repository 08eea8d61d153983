// The tensor family's kernel table: the entries of view.cpp, layout.cpp, depth_space.cpp, index.cpp,
// gen.cpp and select.cpp in this folder, joined once.
#include <vector>

#include "runtime/cpu/tensor/tensor_internal.h"

namespace kiln::cpu {

std::span<const KernelEntry> tensor_kernels() {
  static const std::vector<KernelEntry> all = [] {
    std::vector<KernelEntry> v;
    for (auto part : {tensor_ops::view_kernel_entries(), tensor_ops::layout_kernel_entries(),
                      tensor_ops::depth_space_kernel_entries(), tensor_ops::index_kernel_entries(),
                      tensor_ops::gen_kernel_entries(), tensor_ops::select_kernel_entries()})
      v.insert(v.end(), part.begin(), part.end());
    return v;
  }();
  return all;
}

}  // namespace kiln::cpu
