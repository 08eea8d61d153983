// The streaming INT8 1x1 kernel's mma.sync tile shapes (stream_kernel.cuh has the kernel),
// which convolutions it takes, and the tile shape a tactic runs; the wgmma ones are in
// stream_sm90a.cu.
#include <climits>
#include <string>

#include "kiln/types.h"
#include "runtime/cuda/gpu_kernels.h"
#include "runtime/cuda/quant/conv/stream/stream_kernel.cuh"

namespace kiln::gpu::quant::stream {

namespace {

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

using Tile0 = Tile<128, 128, 2, 4, 2>;
using Tile1 = Tile<64, 128, 2, 4, 3>;
using Tile2 = Tile<64, 256, 2, 4, 2>;
// Channel tiles of 96, 144, 32 and 64 for M = 96 or 144 (MobileNet's 16 -> 96 and 24 -> 144
// expansions), 32 (its 192 -> 32 projections), 64 and their multiples: with 128 or 256 channels per
// tile they computed and finished a tile of which 25% to 75% were past M, and the epilogue's cost
// follows the computed outputs.
using Tile3 = Tile<128, 96, 4, 2, 2>;
using Tile4 = Tile<64, 144, 2, 3, 2>;
using Tile5 = Tile<64, 96, 2, 2, 3>;
using Tile6 = Tile<128, 32, 4, 1, 3>;
using Tile7 = Tile<128, 64, 4, 2, 2>;

}  // namespace

bool fits(const QConvNhwcArgs& a) {
  if (!mma::device_supported()) return false;
  if (a.KH != 1 || a.KW != 1 || a.sh < 1 || a.sw < 1 || a.ph != 0 || a.pw != 0) return false;
  if (a.OH != (a.H - 1) / a.sh + 1 || a.OW != (a.W - 1) / a.sw + 1) return false;
  // Strided layers find each pixel's input row by 32-bit division.
  if ((a.sh != 1 || a.sw != 1) && a.N * a.OH * a.OW >= (int64_t{1} << 31)) return false;
  const bool narrow = a.C == 16 || a.C == 24 || a.C == 32;
  if ((!narrow && (a.C % 32 != 0 || a.C < 64 || a.C > kMaxC)) || a.M % 16 != 0 || a.M <= 0 || a.M >= (1 << 30))
    return false;
  if (!a.epi.quantize || (a.z && a.z_float) || (a.epi.act != 0 && a.epi.act != 1 && a.epi.act != 2)) return false;
  return aligned(a.x) && aligned(a.w) && aligned(a.y) && (!a.z || aligned(a.z));
}

int shared_memory(int config, int C) {
  const int row_bytes = row_bytes_of(C);
  if (config >= kSyncConfigs) {
#if KILN_HAVE_SM90A
    return wgmma_shared_memory(config - kSyncConfigs, C);
#else
    return INT_MAX;
#endif
  }
  const int bytes[kSyncConfigs] = {Tile0::smem(row_bytes, 2), Tile1::smem(row_bytes, 2), Tile2::smem(row_bytes, 2),
                                   Tile3::smem(row_bytes, 2), Tile4::smem(row_bytes, 2), Tile5::smem(row_bytes, 2),
                                   Tile6::smem(row_bytes, 2), Tile7::smem(row_bytes, 2)};
  return config >= 0 ? bytes[config] : INT_MAX;
}

int configs(const QConvNhwcArgs& a) {
  if (!fits(a)) return 0;
  // wgmma: sm_90a code (no other GPU runs it), C whose rows fill whole 64-byte sub-tiles or halves
  // of them.
#if KILN_HAVE_SM90A
  if (mma::runs_sm90a() && a.C >= 64) return kConfigs;
#endif
  return kSyncConfigs;
}

bool runs(int config, const QConvNhwcArgs& a) {
  int device = 0;
  return config >= 0 && config < configs(a) && cudaGetDevice(&device) == cudaSuccess &&
         shared_memory(config, static_cast<int>(a.C)) <=
             max_block_smem(device);
}

void run(int config, const QConvNhwcArgs& a, cudaStream_t stream) {
  if (!runs(config, a))
    throw Error("NhwcQConv: the streaming kernel does not take this convolution with tile shape " +
                std::to_string(config));
#if KILN_HAVE_SM90A
  if (config >= kSyncConfigs) return run_wgmma(config - kSyncConfigs, a, stream);
#endif
  switch (config) {
    case 0: return launch<Tile0>(a, stream);
    case 1: return launch<Tile1>(a, stream);
    case 2: return launch<Tile2>(a, stream);
    case 3: return launch<Tile3>(a, stream);
    case 4: return launch<Tile4>(a, stream);
    case 5: return launch<Tile5>(a, stream);
    case 6: return launch<Tile6>(a, stream);
    case 7: return launch<Tile7>(a, stream);
    default: throw Error("NhwcQConv: no streaming tile shape " + std::to_string(config));
  }
}

}  // namespace kiln::gpu::quant::stream
