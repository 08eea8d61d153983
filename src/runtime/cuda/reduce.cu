// The reduce family's CUDA kernels (the GPU side of runtime/cpu/ops/reduce*.cpp).
#include "runtime/cuda/gpu_kernels.h"

namespace kiln::gpu {

std::span<const GpuKernelEntry> reduce_gpu_kernels() { return {}; }

}  // namespace kiln::gpu
