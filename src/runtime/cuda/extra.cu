// The extra family's CUDA kernels (the GPU side of runtime/cpu/ops/extra*.cpp).
#include "runtime/cuda/gpu_kernels.h"

namespace kiln::gpu {

std::span<const GpuKernelEntry> extra_gpu_kernels() { return {}; }

}  // namespace kiln::gpu
