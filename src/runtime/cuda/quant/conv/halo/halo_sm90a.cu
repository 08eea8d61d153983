// Kiln's 3x3 stride-1 INT8 convolution on wgmma (halo.cuh says what it takes).
//
// The padded view: each image's rows get one zero pixel at their end, W + 1 = Wp pixels, and each
// image one zero row before it, so that image n's pixel (h, w) lies at
//   v = n * (H + 1) * Wp + (h + 1) * Wp + w
// and the tap (ky, kx) of the output at v reads the view at v + (ky - 1) * Wp + (kx - 1): the zero
// column is the left pad of the next row as well as the right pad of its own, the zero row the
// bottom pad of one image and the top pad of the next. Over the view, the convolution is nine
// shifted matrix products with no bounds to check.
//
// A CTA (two warpgroups, 64 view positions each; two CTAs per SM for 64 channels up to W = 86)
// walks tiles of 128 consecutive positions by 64 output channels. Its channels' weights stay in
// shared memory (9 taps x C bytes per channel, in wgmma's K-major tiles with 64-byte swizzling,
// read through descriptors). For each tile a thread per row copies the window the nine taps read,
// 128 + 2 Wp + 2 positions of C bytes (padding as zeros), once, with cp.async while the previous
// tile computes; each warp then loads its 16 rows of A for a tap with ldmatrix from the window
// shifted by the tap's offset, and multiplies with A from registers (tap t loads while tap t - 1
// multiplies). The positions that are padding compute sums nobody stores (3% of the work at 56x56,
// 13% at 14x14). The int32 sums go to the shared epilogue (quant/conv/epilogue.cuh), which rounds like
// the implicit GEMM's.
//
// Why: the implicit GEMM copies each input pixel once per tap through its pipeline, with a barrier
// per 64-channel stage; on ResNet-50's 56x56 3x3 layers (64 channels, batch 256, an H100) it and
// cuDNN take 0.18-0.20 ms; this kernel 0.110-0.112 ms. What bounds it now: the epilogue and
// the window copies do not overlap the multiplies (each phase alone takes 40-50 us), and wgmma's
// n64 shape reads its B tile once per 32 k-bytes for only 64 channels.
#include <algorithm>
#include <mutex>
#include <string>

#include "kiln/types.h"
#include "runtime/cuda/dependent_launch.cuh"
#include "runtime/cuda/gpu_kernels.h"
#include "runtime/cuda/quant/conv/epilogue.cuh"
#include "runtime/cuda/quant/conv/halo/halo.cuh"
#include "runtime/cuda/wgmma.cuh"

namespace kiln::gpu::quant::halo {

namespace {

using namespace mma;
constexpr int kThreads = 256;  // two warpgroups
constexpr int kTaps = 9;
// Register sets of A fragments: tap t loads while tap t - 1 multiplies (three measured the same on
// an H100; loading all nine taps ahead to overlap the epilogue, one CTA per SM, was slower).
constexpr int kRing = 2;
using Epi = epilogue::Tile<kBM, kBN, kThreads>;

struct Params {
  int N, H, W, M;
  int Wp;         // W + 1: a row of the padded view
  int img;        // (H + 1) * Wp: an image of the view, its zero row first
  int rows;       // a window's rows (window_rows(W))
  int64_t tiles;  // kBM-position tiles of the view, from its first output position Wp
};

// The pixel of x (and y) at view position n * img + l, or -1 where it is padding or outside the
// batch (l may lie in a neighbouring image).
__device__ __forceinline__ int64_t pixel_at(const Params& p, int n, int l) {
  while (l < 0) l += p.img, --n;
  while (l >= p.img) l -= p.img, ++n;
  const int r = l / p.Wp, w = l - r * p.Wp;
  if (n < 0 || n >= p.N || r == 0 || w == p.W) return -1;
  return (static_cast<int64_t>(n) * p.H + (r - 1)) * p.W + w;
}

// Tile t's first view position, as image n and offset l.
__device__ __forceinline__ void tile_start(const Params& p, int64_t t, int& n, int& l) {
  const int64_t v0 = p.Wp + t * kBM;
  n = static_cast<int>(v0 / p.img);
  l = static_cast<int>(v0 - static_cast<int64_t>(n) * p.img);
}

template <int C>
__global__ void __launch_bounds__(kThreads, C == 64 ? 2 : 1) halo_kernel(QConvNhwcArgs a, Params p) {
#if defined(__CUDA_ARCH__)
  constexpr int kSlabs = C / 64;  // [rows][64]-byte tiles per window or per tap's weights
  constexpr int kSteps = C / 32;  // k32 steps per tap
  constexpr int kWeightBytes = kTaps * C * kBN;
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* const smem = aligned_smem<1024>(smem_raw);
  const uint32_t weights = smem_u32(smem), windows = weights + kWeightBytes;
  const int window_bytes = kSlabs * p.rows * kBK;
  int32_t* const staged = reinterpret_cast<int32_t*>(smem + kWeightBytes + 2 * window_bytes);
  // Two tiles' output pixels: the one computing, the one loading.
  int64_t* const out_pixels = reinterpret_cast<int64_t*>(smem + kWeightBytes + 2 * window_bytes + Epi::kStagedBytes);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int m0 = blockIdx.y * kBN;

  // The weights of channels m0 .. m0 + 63: tap t's slab s is a [64][64] tile at (t kSlabs + s) 4096.
  for (int i = tid; i < kBN * kTaps * kSlabs * 4; i += kThreads) {
    const int chunk = i & 3, s = (i >> 2) % kSlabs, tap = (i >> 2) / kSlabs % kTaps, row = (i >> 2) / kSlabs / kTaps;
    cp_async16(weights + (tap * kSlabs + s) * (kBN * kBK) + swizzled(row, chunk),
               a.w + (static_cast<int64_t>(m0 + row) * kTaps + tap) * C + s * kBK + chunk * 16, true);
  }
  // The k-th tile's (t's) window into buffer k % 2: view positions v0 - Wp - 1 .., zeros where
  // padding, a thread per row; and the pixels of its outputs (the window's rows Wp + 1 .., the
  // middle tap's) into slot k % 2.
  auto fill = [&](int64_t t, int k) {
    int n0, l0;
    tile_start(p, t, n0, l0);
    l0 -= p.Wp + 1;
    const uint32_t base = windows + (k & 1) * window_bytes;
    for (int row = tid; row < p.rows; row += kThreads) {
      const int64_t px = pixel_at(p, n0, l0 + row);
      const int8_t* src = px >= 0 ? a.x + px * C : a.x;
#pragma unroll
      for (int s = 0; s < kSlabs; ++s)
#pragma unroll
        for (int chunk = 0; chunk < 4; ++chunk)
          cp_async16(base + s * p.rows * kBK + swizzled(row, chunk), src + s * kBK + chunk * 16, px >= 0);
      const int r = row - (p.Wp + 1);
      if (r >= 0 && r < kBM) out_pixels[(k & 1) * kBM + r] = px;
    }
  };
  wait_for_inputs();  // the weights' copies above overlap the previous kernel's end
  start_next_kernel();  // only now: one kernel ahead at most (dependent_launch.cuh)
  if (blockIdx.x < p.tiles) fill(blockIdx.x, 0);
  cp_async_commit();

  const Epi epi(a, p.M, m0);
  auto finish = [&](int k) { epi.finish(a, p.M, staged, [&](int r) { return out_pixels[(k & 1) * kBM + r]; }); };
  // This lane's ldmatrix row of its warp's 16 (warpgroup w / 4, rows 16 (w % 4) ..) in a tile.
  const int a_row = (warp >> 2) * 64 + (warp & 3) * 16 + (lane & 15);
  int k = 0;  // tiles this CTA has started
  for (int64_t t = blockIdx.x; t < p.tiles; t += gridDim.x, ++k) {
    cp_async_wait<0>();
    Wgmma::operands_landed();
    // Tile k's window (and the weights) landed; every warp is done with tile k - 1's window and
    // output pixels, the buffers refilled next, and with its staged sums.
    __syncthreads();
    if (t + gridDim.x < p.tiles) fill(t + gridDim.x, k + 1);
    cp_async_commit();

    // Each tap's A fragments into one of kRing register sets, then its multiplies as one group,
    // while the next taps' fragments load.
    const uint32_t window = windows + (k & 1) * window_bytes;
    int32_t acc[1][8][4];
    uint32_t af[kRing][kSteps][4];
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int tap = 0; tap < kTaps; ++tap) {
      const int row = a_row + (tap / 3) * p.Wp + tap % 3;
      // The multiplies of tap - kRing, which read this tap's registers, are done.
      if (tap >= kRing) asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kRing - 1) : "memory");
#pragma unroll
      for (int ks = 0; ks < kSteps; ++ks)
        ldmatrix_x4(window + (ks / 2) * p.rows * kBK + swizzled(row, (ks & 1) * 2 + (lane >> 4)), af[tap % kRing][ks]);
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int ks = 0; ks < kSteps; ++ks)
        wgmma_m64n64_rs(&acc[0][0][0], af[tap % kRing][ks],
                        descriptor(weights + (tap * kSlabs + ks / 2) * (kBN * kBK) + (ks & 1) * 32),
                        tap > 0 || ks > 0);
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    }
    Wgmma::wait<0>(acc);
    Epi::stage(staged, acc, warp * 16, 0, lane);
    __syncthreads();
    finish(k);
  }
  cp_async_wait<0>();
#endif
}

template <int C>
void launch(const QConvNhwcArgs& a, cudaStream_t stream) {
  Params p;
  p.N = static_cast<int>(a.N);
  p.H = static_cast<int>(a.H);
  p.W = static_cast<int>(a.W);
  p.M = static_cast<int>(a.M);
  p.Wp = p.W + 1;
  p.img = (p.H + 1) * p.Wp;
  p.rows = static_cast<int>(window_rows(a.W));
  p.tiles = (static_cast<int64_t>(p.N) * p.img - p.Wp + kBM - 1) / kBM;
  const int smem = static_cast<int>(shared_memory(C, a.W));
  // The opt-in shared memory, asked for once per device (before any capture: the builder and the
  // engine's first run launch uncaptured).
  static std::once_flag asked[kMaxDevices];
  int device = 0;
  check_cuda(cudaGetDevice(&device), "NhwcQConv");
  auto ask = [device] {
    check_cuda(cudaFuncSetAttribute(halo_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(device)),
               "NhwcQConv: asking for the 3x3 window kernel's shared memory");
  };
  if (device < kMaxDevices)
    std::call_once(asked[device], ask);
  else
    ask();
  // A persistent grid: one wave of CTAs in all, shared among the channel tiles.
  int per_sm = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, halo_kernel<C>, kThreads, smem),
             "NhwcQConv: the 3x3 window kernel's occupancy");
  const int m_tiles = p.M / kBN;
  const int64_t wave = std::max<int64_t>(1, int64_t{std::max(per_sm, 1)} *
                                                device_attribute<cudaDevAttrMultiProcessorCount>(device) / m_tiles);
  const dim3 grid(static_cast<unsigned>(std::min(p.tiles, wave)), static_cast<unsigned>(m_tiles));
  launch_dependent<halo_kernel<C>>(grid, kThreads, static_cast<size_t>(smem), stream, 1,
                                   "NhwcQConv: launching the 3x3 window kernel", a, p);
}

}  // namespace

void run_wgmma(int config, const QConvNhwcArgs& a, cudaStream_t stream) {
  if (config != 0) throw Error("NhwcQConv: no 3x3 window tile shape " + std::to_string(config));
  if (a.C == 64) return launch<64>(a, stream);
  return launch<128>(a, stream);
}

}  // namespace kiln::gpu::quant::halo
