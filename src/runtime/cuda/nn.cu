// The nn family's CUDA kernels (the GPU side of runtime/cpu/ops/nn*.cpp).
#include "runtime/cuda/gpu_kernels.h"

namespace kiln::gpu {

std::span<const GpuKernelEntry> nn_gpu_kernels() { return {}; }

}  // namespace kiln::gpu
