// Kiln's depthwise INT8 convolution over channels-last tensors (depthwise.cu): the kernel
// NhwcQConv runs where group = C = M (MobileNetV2's 3x3 layers), since cuDNN's INT8 graphs and the
// tensor-core kernel take one group only (runtime/cuda/quant/conv/nhwc.cu).
#pragma once

#include <cuda_runtime.h>

#include "runtime/cuda/quant/conv/igemm/igemm.cuh"

namespace kiln::gpu::quant::depthwise {

// y = NhwcQConv(x, w) for a depthwise convolution: a.C == a.M channels, w [C, KH, KW, 1]; any
// kernel size, strides, pads and dilations, every operand QConvNhwcArgs allows. Exact int32 sums;
// a float32 y is bit for bit what the CPU computes, an int8 y may differ by one step at rounding
// ties (its epilogue works in units of y's step, as the tensor-core kernel's). Throws kiln::Error
// where the sizes exceed the kernel's 32-bit pixel indices (2^30 output pixels) or grid.
void run(const QConvNhwcArgs& a, cudaStream_t stream);

}  // namespace kiln::gpu::quant::depthwise
