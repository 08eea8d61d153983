// The streaming INT8 1x1 kernel (stream_kernel.cuh) on Hopper's warpgroup tensor-core
// instructions: wgmma.mma_async reads both operands from shared memory, where mma.sync needs every
// fragment loaded into registers with ldmatrix first. On ResNet-50's 1x1 layers with 256 input
// channels the mma.sync tiles issue about 280 TOPS of int8 products; H100's tensor cores do about
// 1,980 through wgmma. Compiled for sm_90a only (CMakeLists.txt), and offered on compute
// capability 9.0 only (stream.cu).
//
// The multiply is wgmma.cuh's policy; the kernel's operand tiles are already in wgmma's
// layout, and the epilogue is the same.
#include <climits>
#include <iterator>

#include "runtime/cuda/quant/conv/stream/stream_kernel.cuh"
#include "runtime/cuda/wgmma.cuh"

namespace kiln::gpu::quant::stream {

namespace {

// Channel tiles of 64, 128 and 256 (wgmma's N); a warpgroup per 64 pixels.
template <int BM, int BN, int MIN_BLOCKS>
using WTile = Tile<BM, BN, BM / 16, 1, MIN_BLOCKS, mma::Wgmma>;
using WTile0 = WTile<128, 128, 2>;
using WTile1 = WTile<128, 64, 2>;
using WTile2 = WTile<64, 256, 2>;
using WTile3 = WTile<128, 256, 1>;
// 64-pixel tiles leave room for two CTAs per SM with C = 256 (128-pixel ones take one), so that
// one CTA's epilogue overlaps the other's multiplies.
using WTile4 = WTile<64, 128, 2>;
using WTile5 = WTile<64, 64, 3>;

// Every operand sub-tile starts on a 512-byte boundary of the 1024-aligned base: the weights'
// (BN x 64 bytes each), the constants after them (8 BN bytes), and each buffer's x sub-tiles (BM x
// 64) and warpgroup rows (64 x 64), whose buffers are BM (64 s + BN + 16) bytes.
template <class T>
constexpr bool aligned_tiles() {
  return (T::BN * kBK) % 512 == 0 && (8 * T::BN) % 512 == 0 && (T::BM * kBK) % 512 == 0 &&
         (T::BM * T::kZStride) % 512 == 0;
}
static_assert(aligned_tiles<WTile0>() && aligned_tiles<WTile1>() && aligned_tiles<WTile2>() &&
              aligned_tiles<WTile3>() && aligned_tiles<WTile4>() && aligned_tiles<WTile5>());

}  // namespace

int wgmma_shared_memory(int config, int C) {
  const int row_bytes = row_bytes_of(C);
  const int bytes[] = {WTile0::smem(row_bytes, 2), WTile1::smem(row_bytes, 2), WTile2::smem(row_bytes, 2),
                       WTile3::smem(row_bytes, 2), WTile4::smem(row_bytes, 2), WTile5::smem(row_bytes, 2)};
  return config >= 0 && config < static_cast<int>(std::size(bytes)) ? bytes[config] : INT_MAX;
}

void run_wgmma(int config, const QConvNhwcArgs& a, cudaStream_t stream) {
  switch (config) {
    case 0: return launch_with<WTile0, 0>(a, stream);
    case 1: return launch_with<WTile1, 0>(a, stream);
    case 2: return launch_with<WTile2, 0>(a, stream);
    case 3: return launch_with<WTile3, 0>(a, stream);
    case 4: return launch_with<WTile4, 0>(a, stream);
    case 5: return launch_with<WTile5, 0>(a, stream);
    default: throw Error("NhwcQConv: no wgmma streaming tile shape " + std::to_string(config));
  }
}

}  // namespace kiln::gpu::quant::stream
