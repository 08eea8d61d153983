// Which convolutions Kiln's 3x3 window kernel takes (halo.cuh); the kernel is
// halo_sm90a.cu.
#include <string>

#include "kiln/types.h"
#include "runtime/cuda/quant/conv/halo/halo.cuh"
#include "runtime/cuda/mma.cuh"

namespace kiln::gpu::quant::halo {

bool fits(const QConvNhwcArgs& a) {
  constexpr int64_t kMax = int64_t{1} << 30;
  if (a.KH != 3 || a.KW != 3 || a.sh != 1 || a.sw != 1 || a.dh != 1 || a.dw != 1 || a.ph != 1 || a.pw != 1)
    return false;
  if ((a.C != 64 && a.C != 128) || a.M <= 0 || a.M % kBN != 0 || a.N <= 0 || a.H <= 0 || a.W <= 0) return false;
  if (a.OH != a.H || a.OW != a.W || a.N >= kMax || (a.H + 1) * (a.W + 1) >= kMax / 4 || a.M * 9 * a.C >= kMax)
    return false;
  if (!igemm::operands_aligned(a)) return false;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  return shared_memory(a.C, a.W) <= mma::max_block_smem(device);
}

int configs(const QConvNhwcArgs& a) { return mma::runs_sm90a() && fits(a) ? kConfigs : 0; }

void run(int config, const QConvNhwcArgs& a, cudaStream_t stream) {
  if (config < 0 || config >= configs(a))
    throw Error("NhwcQConv: the 3x3 window kernel does not take this convolution with tile shape " +
                std::to_string(config));
#if KILN_HAVE_SM90A
  run_wgmma(config, a, stream);
#endif
}

}  // namespace kiln::gpu::quant::halo
