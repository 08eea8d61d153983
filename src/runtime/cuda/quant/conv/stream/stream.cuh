// Kiln's streaming INT8 1x1 convolution over channels-last tensors (stream.cu): for the
// memory-bound pointwise layers with few input channels (ResNet's 64 -> 256 expansions with an int8
// residual), which the tensor-core implicit GEMM (quant/conv/igemm/igemm.cu) and cuDNN run at a fraction of the
// memory bandwidth. One more candidate the builder times per layer (runtime/cuda/quant/conv/nhwc.cu).
#pragma once

#include <cuda_runtime.h>

#include "runtime/cuda/quant/conv/igemm/igemm.cuh"

namespace kiln::gpu::quant::stream {

// Tile shapes (output pixels x output channels) the builder chooses from: on mma.sync 128x128,
// 64x128, 64x256, 128x96, 64x144, 64x96, 128x32, 128x64 (configs 0 .. 7); on wgmma 128x128, 128x64,
// 64x256, 128x256, 64x128, 64x64 (configs 8 .. 13: compute capability 9.0, C of 64 to 512).
inline constexpr int kSyncConfigs = 8;
inline constexpr int kConfigs = 14;

// Whether the kernel takes this convolution: 1x1, any stride (P < 2^31 where strided), no padding;
// C of 16, 24 or 32 (MobileNet's expansions, rows padded to 64 bytes in shared memory) or a
// multiple of 32 from 64 to 512 (above 256 the epilogue converts on the conversion unit, exact to
// 1024 channels; wider rows left one tile shape that fits an H100, and it did not pay:
// docs/decisions.md), M a multiple of 16; no activation, ReLU or Clip; an int8 y, and an int8
// residual or none; x, w, y and z 16-byte aligned; sm_80 and later. Which tile shapes fit the GPU's
// shared memory is runs()'s question.
bool fits(const QConvNhwcArgs& a);

// The shared memory per CTA tile shape `config` needs with C input channels (16 to 512) and the
// shortest pipeline (132 KB for the 64 x 256 tiles and C = 256; with C = 512 the 128 x 128,
// 128 x 256 and 64 x 256 tiles exceed an H100's 227 KB), or INT_MAX for a config not built here.
int shared_memory(int config, int C);

// How many tile shapes there are for this convolution (configs 0 .. configs(a) - 1): 0 where it
// does not fit, kSyncConfigs, or kConfigs with the wgmma ones.
int configs(const QConvNhwcArgs& a);

// Whether this GPU runs tile shape `config` for this convolution: it is one of configs(a) and its
// shared memory fits (the tactics offered are the configs it runs).
bool runs(int config, const QConvNhwcArgs& a);

// Runs tile shape `config` (where runs()). The epilogue is the tensor-core kernel's (fused
// multiply-adds in units of y's step), so int8 outputs may differ from the CPU's by one step.
void run(int config, const QConvNhwcArgs& a, cudaStream_t stream);

}  // namespace kiln::gpu::quant::stream
