// The elementwise family's CUDA kernel table: the entries of unary.cu, binary.cu and misc.cu,
// joined once.
#include <vector>

#include "runtime/cuda/elementwise/elementwise_internal.cuh"

namespace kiln::gpu {

std::span<const GpuKernelEntry> elementwise_gpu_kernels() {
  static const std::vector<GpuKernelEntry> all = [] {
    std::vector<GpuKernelEntry> v;
    for (auto part : {ew::unary_gpu_entries(), ew::binary_gpu_entries(), ew::misc_gpu_entries()})
      v.insert(v.end(), part.begin(), part.end());
    return v;
  }();
  return all;
}

}  // namespace kiln::gpu
