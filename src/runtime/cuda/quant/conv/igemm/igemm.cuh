// NhwcQConv's operands as the CUDA kernels read them, and Kiln's own tensor-core INT8 convolution
// (igemm.cu), an implicit GEMM over channels-last tensors that the builder times next to
// cuDNN's plans (runtime/cuda/quant/conv/nhwc.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/qfused_math.h"

namespace kiln::gpu::quant {

// x [N, H, W, C], w [M, KH, KW, C], y and z [N, OH, OW, M] (device pointers); w_scale has M values
// or one; bias (M values) and z may be null. epi.quantize: y is int8, else float32; z_float: z is
// float32 (added as it is), else int8 (times epi.z_scale). pool_mean (float32 y, tensor-core kernel
// only): y is [N, M], the mean of each image's OH * OW outputs.
struct QConvNhwcArgs {
  int64_t N, H, W, C, M, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw;
  const int8_t* x;
  const int8_t* w;
  void* y;
  const float* w_scale;
  bool w_scale_per_channel;
  const float* bias;
  float x_scale;
  const void* z;
  bool z_float;
  qfused::Epilogue epi;
  bool pool_mean = false;
};

namespace igemm {

// Tile shapes (output pixels x output channels) the builder chooses from: on mma.sync 128x128,
// 128x64, 64x64 (configs 0 .. 2); on wgmma 128x64, 128x128, 64x64, 64x128 (configs 3 .. 6: compute
// capability 9.0); and for layers with few tiles (batch 1), wgmma 64x64 and 64x128 tiles whose
// reduction is split over a cluster of 2, 4 or 8 CTAs (configs 7 .. 12).
inline constexpr int kSyncConfigs = 3;
inline constexpr int kConfigs = 7;
inline constexpr int kSplitConfigs = 6;

// Whether x and w are 16-byte aligned and y and z aligned to vectors of 8 elements, as the
// kernels that finish their tiles with the shared epilogue (quant/conv/epilogue.cuh) need.
inline bool operands_aligned(const QConvNhwcArgs& a) {
  auto aligned = [](const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; };
  const uintptr_t vec = a.epi.quantize ? 8 : 16;
  return aligned(a.x, 16) && aligned(a.w, 16) && aligned(a.y, vec) && (!a.z || aligned(a.z, a.z_float ? 16 : 8));
}

// Whether the kernels take this convolution: C a multiple of 64, M of 8, x and w 16-byte aligned,
// y and z aligned to vectors of 8 elements, sizes within 32-bit index arithmetic per image.
bool fits(const QConvNhwcArgs& a);

// How many tile shapes this GPU runs for this convolution (configs 0 .. configs(a) - 1): 0 where
// it does not fit, kSyncConfigs, kConfigs with the wgmma ones, or kConfigs + kSplitConfigs where
// 64x64 tiles would not give every SM two CTAs.
int configs(const QConvNhwcArgs& a);

// Whether tile shape `config` averages y over each image's pixels in its epilogue (a.pool_mean):
// where its tiles hold one image or more, OH * OW <= the tile's rows.
bool pools(int config, const QConvNhwcArgs& a);

// Runs tile shape `config` (0 .. configs(a) - 1). The epilogue rounds like cuDNN's (fused
// multiply-adds in units of y's step), so int8 outputs may differ from the CPU's by one step.
void run(int config, const QConvNhwcArgs& a, cudaStream_t stream);

}  // namespace igemm
}  // namespace kiln::gpu::quant
