// The rnn family's CUDA kernels (the GPU side of runtime/cpu/ops/rnn*.cpp).
#include "runtime/cuda/gpu_kernels.h"

namespace kiln::gpu {

std::span<const GpuKernelEntry> rnn_gpu_kernels() { return {}; }

}  // namespace kiln::gpu
