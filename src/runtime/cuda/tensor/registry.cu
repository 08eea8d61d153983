// The tensor family's CUDA kernel table: the entries of view.cu, layout.cu, depth_space.cu,
// index.cu, gen.cu and select.cu, joined once.
#include <vector>

#include "runtime/cuda/tensor/tensor_internal.cuh"

namespace kiln::gpu {

std::span<const GpuKernelEntry> tensor_gpu_kernels() {
  static const std::vector<GpuKernelEntry> all = [] {
    std::vector<GpuKernelEntry> v;
    for (auto part : {tensor::view_entries(), tensor::layout_entries(), tensor::depth_space_entries(),
                      tensor::index_entries(), tensor::gen_entries(), tensor::select_entries()})
      v.insert(v.end(), part.begin(), part.end());
    return v;
  }();
  return all;
}

}  // namespace kiln::gpu
