// The tensor family's CUDA kernels (the GPU side of runtime/cpu/ops/tensor*.cpp).
#include "runtime/cuda/gpu_kernels.h"

namespace kiln::gpu {

std::span<const GpuKernelEntry> tensor_gpu_kernels() { return {}; }

}  // namespace kiln::gpu
