// The tensor-core INT8 implicit GEMM (igemm_kernel.cuh) on Hopper's wgmma
// (wgmma.cuh): the mma.sync tiles reach about 370 TOPS on compute-bound layers, where cuDNN's
// Hopper kernels reach 900 to 1,300. One stage's multiplies stay in flight while the next one's
// are issued, and the kernel loads two stages ahead instead of three (Wgmma::kInFlight). Compiled
// for sm_90a only (CMakeLists.txt), and offered on compute capability 9.0 only (igemm.cu).
// Their shared memory (at most 70 KB per CTA) fits every such GPU. Configs 4 .. 9 split the
// reduction of 64-pixel tiles over clusters (igemm_kernel.cuh).
#include <string>

#include "runtime/cuda/quant/conv/igemm/igemm_kernel.cuh"
#include "runtime/cuda/wgmma.cuh"

namespace kiln::gpu::quant::igemm {

namespace {

// A warpgroup per 64 pixels, all of the tile's channels per instruction.
template <int BM, int BN>
using WTile = Tile<BM, BN, BM / 16, 1, mma::Wgmma>;

// Every operand tile starts on a 512-byte boundary of the 1024-aligned base: the stages ((BM + BN)
// x 64 bytes), their B tiles (after BM x 64) and each warpgroup's A rows (64 x 64).
template <class T>
constexpr bool aligned_tiles() {
  return T::kStageBytes % 512 == 0 && (T::BM * kBK) % 512 == 0;
}

using WTile0 = WTile<128, 64>;
using WTile1 = WTile<128, 128>;
using WTile2 = WTile<64, 64>;
using WTile3 = WTile<64, 128>;
static_assert(aligned_tiles<WTile0>() && aligned_tiles<WTile1>() && aligned_tiles<WTile2>() &&
              aligned_tiles<WTile3>());

}  // namespace

void run_wgmma(int config, const QConvNhwcArgs& a, const Geometry& g, cudaStream_t stream) {
  switch (config) {
    case 0: return launch<WTile0>(a, g, stream);
    case 1: return launch<WTile1>(a, g, stream);
    case 2: return launch<WTile2>(a, g, stream);
    case 3: return launch<WTile3>(a, g, stream);
    case 4: return launch<WTile2, 2>(a, g, stream);
    case 5: return launch<WTile2, 4>(a, g, stream);
    case 6: return launch<WTile2, 8>(a, g, stream);
    case 7: return launch<WTile3, 2>(a, g, stream);
    case 8: return launch<WTile3, 4>(a, g, stream);
    case 9: return launch<WTile3, 8>(a, g, stream);
    default: throw Error("NhwcQConv: no wgmma tensor-core tile shape " + std::to_string(config));
  }
}

}  // namespace kiln::gpu::quant::igemm
