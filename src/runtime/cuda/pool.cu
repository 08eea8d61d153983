// Pooling, normalization, Resize and Depth/SpaceToDepth on the GPU: the family's table, joined from
// the pool_*.cu files (pool_internal.cuh says which op lives where).
#include <vector>

#include "runtime/cuda/pool_internal.cuh"

namespace kiln::gpu {

std::span<const GpuKernelEntry> pool_gpu_kernels() {
  static const std::vector<GpuKernelEntry> entries = [] {
    std::vector<GpuKernelEntry> all;
    for (auto part : {pool::window_entries(), pool::global_entries(), pool::norm_entries(), pool::resize_entries(),
                      pool::depth_entries(), pool::nhwc_entries()})
      all.insert(all.end(), part.begin(), part.end());
    return all;
  }();
  return entries;
}

}  // namespace kiln::gpu
