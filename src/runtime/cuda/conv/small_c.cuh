// Kiln's tensor-core kernel for channels-last float16 convolutions with three input channels and a
// stride of 2: the stems of image networks (ResNet's 7x7, MobileNet's and EfficientNet's 3x3),
// which cuDNN runs at a small fraction of the tensor cores' rate (ResNet-50's stem: 0.59 ms of a
// 6.0 ms INT8 engine at batch 256 on an H100). NhwcConv tactics kSmallCTactic (mma.sync) and
// kSmallCWgmmaTactic (wgmma, compute capability 9.0; conv_plan.cu).
#pragma once

#include <cuda_runtime.h>

#include "core/attrs.h"
#include "runtime/cuda/nn_internal.cuh"

namespace kiln::gpu::nn {

// Whether the kernel takes this NhwcConv: float16, 3 input channels, one group, a 3x3 or 7x7
// kernel with stride 2 and dilation 1 on both axes, an odd left pad of at most 5, 32 or 64 output
// channels, no residual, an input row of a whole number of 16-byte chunks, and a staging buffer
// within 48 KiB (input rows up to about 376 pixels for 7x7, 704 for 3x3; less for a channels-first
// float32 X, whose raw rows are staged too); sm_80 and later.
bool small_c_conv_fits(const DirectConv& g, DataType dt, bool has_z);
// The same shapes for the wgmma form (small_c_sm90a.cu), on compute capability 9.0
// where it was built, with its shared memory within the device's opt-in limit (the 48 KiB bound
// does not apply).
bool small_c_wgmma_fits(const DirectConv& g, DataType dt, bool has_z);

// A quantized output (NhwcConv's y_scale and y_zero_point, device pointers to one value each): Y is
// QuantizeLinear of the float output (before float16 rounding, multiplied by the scale's
// reciprocal), int8 or uint8 as `type`.
struct SmallCQuant {
  const float* scale;
  const void* zero_point;
  DataType type;
};

// Y = epilogue(conv(X, W) + B) for a convolution small_c_conv_fits (or with `wgmma`,
// small_c_wgmma_fits) accepts, quantized if `quant` is not null; B may be null. X, W and Y must be
// 16-byte aligned. Where g.x_first_bytes is set, X is channels-first (float32 or float16), and
// its rows of W * x_first_bytes bytes (a multiple of 16, which the fits functions check) are
// converted to float16 channels-last as they are staged.
void small_c_conv(const DirectConv& g, const EpilogueAttrs& e, const void* x, const void* w, const void* b, void* y,
                  const SmallCQuant* quant, bool wgmma, cudaStream_t stream);

}  // namespace kiln::gpu::nn
