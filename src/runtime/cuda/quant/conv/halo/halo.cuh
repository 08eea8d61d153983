// Kiln's INT8 kernel for 3x3, stride-1 convolutions over channels-last tensors with 64 or 128
// input channels (ResNet's 3x3 layers), on Hopper's wgmma (halo_sm90a.cu has the kernel
// and the layout). The implicit GEMM (quant/conv/igemm/igemm.cuh) copies every input pixel nine times, once
// per tap, into its pipeline; this one copies a tile's input window once and reads the nine taps
// from it. NhwcQConv tactics 2200 + tile shape (runtime/cuda/quant/conv/nhwc.cu).
#pragma once

#include <cuda_runtime.h>

#include "runtime/cuda/quant/conv/igemm/igemm.cuh"

namespace kiln::gpu::quant::halo {

inline constexpr int kConfigs = 1;  // tile shapes: 128 pixels x 64 channels
inline constexpr int kBM = 128, kBN = 64;

// Rows of a tile's input window for rows of W pixels: kBM + 2 (W + 1) + 2, rounded up to 8.
inline constexpr int64_t window_rows(int64_t W) { return (kBM + 2 * (W + 1) + 2 + 7) / 8 * 8; }

// Bytes of shared memory one CTA takes for C input channels and rows of W pixels: the weights of
// its 64 channels, two input windows with their tiles' output pixels, the staged sums, and 1024 for
// the base's alignment.
inline constexpr int64_t shared_memory(int64_t C, int64_t W) {
  return 9 * C * kBN + 2 * (window_rows(W) * C + kBM * 8) + kBM * (kBN + 8) * 4 + 1024;
}

// Whether the kernel takes this convolution: 3x3, stride 1, dilation 1, pads of 1; C of 64 or 128,
// M a multiple of 64; x and w 16-byte aligned, y and z aligned to vectors of 8 elements; shared
// memory within the device's limit; sizes within 32-bit index arithmetic per image.
bool fits(const QConvNhwcArgs& a);

// How many tile shapes this GPU runs for this convolution: kConfigs where it fits and Kiln's sm_90a
// kernels run (compute capability 9.0), else 0.
int configs(const QConvNhwcArgs& a);

// Runs tile shape `config` (0 .. configs(a) - 1); rounds like the implicit GEMM.
void run(int config, const QConvNhwcArgs& a, cudaStream_t stream);

// The wgmma kernel (halo_sm90a.cu, built where KILN_HAVE_SM90A).
void run_wgmma(int config, const QConvNhwcArgs& a, cudaStream_t stream);

}  // namespace kiln::gpu::quant::halo
