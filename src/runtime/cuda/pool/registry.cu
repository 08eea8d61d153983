// The pool family's CUDA kernel table: the entries of window.cu, global.cu and nhwc.cu, joined once.
#include <vector>

#include "runtime/cuda/pool/pool_internal.cuh"

namespace kiln::gpu {

std::span<const GpuKernelEntry> pool_gpu_kernels() {
  static const std::vector<GpuKernelEntry> entries = [] {
    std::vector<GpuKernelEntry> all;
    for (auto part : {pool::window_entries(), pool::global_entries(), pool::nhwc_entries()})
      all.insert(all.end(), part.begin(), part.end());
    return all;
  }();
  return entries;
}

}  // namespace kiln::gpu
