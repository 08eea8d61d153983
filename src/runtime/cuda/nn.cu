// The nn family's CUDA kernel table (the GPU side of runtime/cpu/ops/nn*.cpp): Conv and
// ConvTranspose (nn_conv.cu, cuDNN), Gemm and MatMul (nn_gemm_ops.cu, cuBLASLt), joined once.
// The pools, Resize and the global pools of the CPU's nn family belong to the GPU pool family.
#include <vector>

#include "runtime/cuda/nn_internal.cuh"

namespace kiln::gpu {

std::span<const GpuKernelEntry> nn_gpu_kernels() {
  static const std::vector<GpuKernelEntry> all = [] {
    std::vector<GpuKernelEntry> v;
    for (auto part : {nn::conv_gpu_entries(), nn::gemm_gpu_entries()}) v.insert(v.end(), part.begin(), part.end());
    return v;
  }();
  return all;
}

}  // namespace kiln::gpu
