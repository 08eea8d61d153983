// Kiln's tensor-core INT8 implicit GEMM (igemm_kernel.cuh has the kernel): which
// convolutions it takes, and its mma.sync tile shapes; the wgmma ones are in
// igemm_sm90a.cu.
#include <algorithm>
#include <mutex>
#include <string>

#include "kiln/types.h"
#include "runtime/cuda/gpu_kernels.h"
#include "runtime/cuda/quant/conv/igemm/igemm_kernel.cuh"

namespace kiln::gpu::quant::igemm {

bool fits(const QConvNhwcArgs& a) {
  constexpr int64_t kMax = int64_t{1} << 30;
  if (!mma::device_supported()) return false;
  if (a.C % kBK != 0 || a.M % 8 != 0 || a.C <= 0 || a.M <= 0) return false;
  if (!operands_aligned(a)) return false;
  // Per-image sizes, the weights and the window arithmetic in 32 bits.
  return a.H * a.W * a.C < kMax && a.OH * a.OW * a.M < kMax && a.M * a.KH * a.KW * a.C < kMax &&
         a.KH * a.dh < (1 << 20) && a.KW * a.dw < (1 << 20) && a.sh < (1 << 20) && a.sw < (1 << 20) &&
         a.ph < (1 << 20) && a.pw < (1 << 20);
}

int configs(const QConvNhwcArgs& a) {
  if (!fits(a)) return 0;
  if (!mma::runs_sm90a()) return kSyncConfigs;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return kConfigs;
  const int64_t tiles = (a.N * a.OH * a.OW + 63) / 64 * ((a.M + 63) / 64);
  const bool few = tiles < 2 * int64_t{mma::device_attribute<cudaDevAttrMultiProcessorCount>(device)};
  return few ? kConfigs + kSplitConfigs : kConfigs;
}

bool pools(int config, const QConvNhwcArgs& a) {
  // The tile rows (output pixels) of each config: mma.sync 128x128, 128x64, 64x64; wgmma 128x64,
  // 128x128, 64x64, 64x128; the split ones 64.
  constexpr int kRows[kConfigs + kSplitConfigs] = {128, 128, 64, 128, 128, 64, 64, 64, 64, 64, 64, 64, 64};
  return a.pool_mean && !a.epi.quantize && config >= 0 && config < configs(a) && a.OH * a.OW <= kRows[config];
}

void run(int config, const QConvNhwcArgs& a, cudaStream_t stream) {
  if (config < 0 || config >= configs(a))
    throw Error("NhwcQConv: the tensor-core kernel does not take this convolution with tile shape " +
                std::to_string(config));
  Geometry g;
  g.H = static_cast<int>(a.H);
  g.W = static_cast<int>(a.W);
  g.C = static_cast<int>(a.C);
  g.M = static_cast<int>(a.M);
  g.OH = static_cast<int>(a.OH);
  g.OW = static_cast<int>(a.OW);
  g.KW = static_cast<int>(a.KW);
  g.sh = static_cast<int>(a.sh);
  g.sw = static_cast<int>(a.sw);
  g.ph = static_cast<int>(a.ph);
  g.pw = static_cast<int>(a.pw);
  g.dh = static_cast<int>(a.dh);
  g.dw = static_cast<int>(a.dw);
  g.c_tiles = static_cast<int>(a.C / kBK);
  g.k_tiles = static_cast<int>(a.KH * a.KW) * g.c_tiles;
  g.P = a.N * a.OH * a.OW;
  g.K = a.KH * a.KW * a.C;
#if KILN_HAVE_SM90A
  if (config >= kSyncConfigs) return run_wgmma(config - kSyncConfigs, a, g, stream);
#endif
  switch (config) {
    case 0: return launch<Tile<128, 128, 2, 4>>(a, g, stream);
    case 1: return launch<Tile<128, 64, 2, 2>>(a, g, stream);
    case 2: return launch<Tile<64, 64, 2, 2>>(a, g, stream);
    default: throw Error("NhwcQConv: no tensor-core tile shape " + std::to_string(config));
  }
}

}  // namespace kiln::gpu::quant::igemm
