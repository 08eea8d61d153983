// Kiln's tensor-core INT8 convolution over channels-last tensors: an implicit GEMM
//   Y[p, m] = sum_k A[p, k] * B[m, k],   p = (n, oh, ow), k = (kh, kw, c)
// where A is the im2col view of x (never materialized) and B is w as it lies ([M, KH, KW, C] is
// [M, K] with K contiguous). Both operands are K-contiguous, the layout mma.m16n8k32's int8 row.col
// form takes, so ldmatrix loads the fragments from shared memory without transposes.
//
// One CTA computes a BM x BN tile of Y. The reduction runs in stages of 64 channels of one
// kernel tap (hence C % 64 == 0): cp.async brings the A rows (zero-filled outside the image) and
// the B rows of the next stages into shared memory while the warps multiply the current one
// (kStages buffers). Tiles are XOR-swizzled by 16-byte chunk so that the 8 rows one ldmatrix phase
// reads fall in distinct banks. At the end the int32 sums go through shared memory to the
// epilogue (quant/conv/epilogue.cuh), which rounds like cuDNN's: in units of y's step, with fused
// multiply-adds (an IEEE division per value made it cost more than the convolution on the 56x56
// layers), so int8 outputs may differ from the CPU's by one step at rounding ties.
//
// Why not only cuDNN: its INT8 plans are about twice its FP16 ones on most of ResNet-50's layers,
// but not on the 56x56 layers with 64 channels, and its residual epilogue costs more than the
// residual's bytes; this kernel is one more candidate the builder times per layer.
//
// Split reduction (kSplit > 1, Hopper): where a layer has too few tiles to fill the GPU (batch 1),
// a cluster of kSplit CTAs computes one tile, each CTA a contiguous share of the reduction's
// stages. Each stages its sums in its own shared memory; after a cluster barrier CTA r adds up rows
// [r, r + 1) * BM / kSplit of all kSplit tiles through distributed shared memory and finishes
// those rows, so the epilogue is split too and the partial sums never leave the cluster.
//
// Pooled output (Geometry::pool_rows, NhwcQConv's pool_mean): a tile holds whole images (its
// first BM / pool_rows * pool_rows rows), finish() leaves the float values in shared memory and each
// image's rows are summed there, per channel, in a fixed order; with kSplit > 1 the CTAs of the
// cluster share the columns instead of the rows, so that no sum crosses CTAs.
//
// This header is the kernel itself (igemm.cuh says what it takes), for the files that
// instantiate its tile shapes: igemm.cu (mma.sync, as described above) and
// igemm_sm90a.cu (wgmma), through the tile's Mma policy.
#pragma once

#include <cooperative_groups.h>

#include <algorithm>
#include <mutex>
#include <string>

#include "kiln/types.h"
#include "runtime/cuda/dependent_launch.cuh"
#include "runtime/cuda/gpu_kernels.h"
#include "runtime/cuda/quant/conv/epilogue.cuh"
#include "runtime/cuda/quant/conv/igemm/igemm.cuh"
#include "runtime/cuda/mma.cuh"

namespace kiln::gpu::quant::igemm {

// 32-bit copies of the geometry (fits() checked that they fit).
struct Geometry {
  int H, W, C, M, OH, OW, KW, sh, sw, ph, pw, dh, dw, c_tiles, k_tiles;
  int64_t P, K;  // output pixels, reduction length
  // The output pixels of a tile (BM, or the whole images that fit in BM where pool_rows > 0), and
  // the pixels of an image where y is their mean (pool_mean), else 0. launch() sets them.
  int tile_rows = 0, pool_rows = 0;
};

namespace {

using namespace mma;  // kBK: int8 values of the reduction per stage (one tap, 64 channels)
constexpr int kStages = 4;

template <int BM_, int BN_, int WARPS_M, int WARPS_N, class Mma_ = MmaSync>
struct Tile {
  using Mma = Mma_;
  static constexpr int BM = BM_, BN = BN_;
  static constexpr int kWarpsN = WARPS_N;
  static constexpr int kThreads = WARPS_M * WARPS_N * 32;
  static constexpr int kMinBlocks = kThreads >= 256 ? 2 : 3;  // CTAs per SM the registers must allow
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;  // one warp's tile
  static constexpr int MT = WM / 16, NT = WN / 8;             // its mma tiles
  static constexpr int kARows = BM * 4 / kThreads;            // 16-byte chunks a thread loads per stage
  static constexpr int kBRows = BN * 4 / kThreads;
  static constexpr int kStageBytes = (BM + BN) * kBK;
  static constexpr int kPad = Mma::kAlign > 128 ? Mma::kAlign : 0;  // to align the base beyond 128 bytes
  static constexpr int kSmem = std::max(kStages * kStageBytes, epilogue::Tile<BM, BN, kThreads>::kStagedBytes) + kPad;
  // Shared memory for k_tiles reduction stages: fewer pipeline buffers when there are fewer
  // stages than buffers (1x1 layers with 64 or 128 channels), so that more CTAs fit on an SM.
  static int smem(int k_tiles) {
    return std::max(std::min(kStages, k_tiles) * kStageBytes, epilogue::Tile<BM, BN, kThreads>::kStagedBytes) + kPad;
  }
  static_assert(WM % 16 == 0 && WN % 16 == 0 && kARows >= 1 && kBRows >= 1);
  static_assert((BM * 4) % kThreads == 0 && (BN * 4) % kThreads == 0);
};

// Sums the block rows [r0, r1) x columns [c0, c1) of the kSplit staged tiles of the cluster into
// this CTA's (after a cluster barrier: every CTA has staged its tile). c1 - c0: a multiple of 4.
template <int kSplit, int kThreads, int kStride>
__device__ void add_cluster_block(int32_t* staged, int r0, int r1, int c0, int c1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const int vecs = (c1 - c0) / 4;  // int4s per row
  for (int i = threadIdx.x; i < (r1 - r0) * vecs; i += kThreads) {
    const int off = (r0 + i / vecs) * kStride + c0 + (i % vecs) * 4;
    int4 sum = make_int4(0, 0, 0, 0);
#pragma unroll
    for (int q = 0; q < kSplit; ++q) {
      const int4 v = *reinterpret_cast<const int4*>(cluster.map_shared_rank(staged + off, q));
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    *reinterpret_cast<int4*>(staged + off) = sum;
  }
#endif
}

__device__ __forceinline__ void cluster_arrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

// pool_mean: y[n, m] = the mean of image n's g.pool_rows outputs, for the channels [c0, c1) of
// the tile, from the float values finish<true>() left in `staged` (the tile's images are rows
// [j, j + 1) * pool_rows). Called by every thread, after a barrier.
template <class T, int kStride>
__device__ void pool_tile(const QConvNhwcArgs& a, const Geometry& g, const int32_t* staged, int64_t p0, int m0,
                          int c0, int c1) {
  const int pr = g.pool_rows;
  const int64_t left = g.P - p0;  // pixels from this tile's first to the last
  const int images = static_cast<int>(left < g.tile_rows ? left : g.tile_rows) / pr;
  c1 = min(c1, g.M - m0);
  const int width = c1 - c0;
  const float* const f = reinterpret_cast<const float*>(staged);
  for (int i = threadIdx.x; i < images * width; i += T::kThreads) {
    const int j = i / width, c = c0 + i % width;
    // Four sums in flight, so that the loads do not wait for one chain of additions.
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    int r = j * pr;
    const int hi = r + pr;
    for (; r + 3 < hi; r += 4) {
      s0 += f[r * kStride + c];
      s1 += f[(r + 1) * kStride + c];
      s2 += f[(r + 2) * kStride + c];
      s3 += f[(r + 3) * kStride + c];
    }
    for (; r < hi; ++r) s0 += f[r * kStride + c];
    static_cast<float*>(a.y)[(p0 / pr + j) * g.M + m0 + c] = ((s0 + s1) + (s2 + s3)) / static_cast<float>(pr);
  }
}

template <class T, int kSplit = 1>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks) igemm_kernel(QConvNhwcArgs a, Geometry g) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800  // cp.async, ldmatrix and int8 mma.m16n8k32
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* const smem = aligned_smem<T::Mma::kAlign>(smem_raw);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / T::kWarpsN, warp_n = warp % T::kWarpsN;
  const int n_tiles = (g.M + T::BN - 1) / T::BN;
  // With kSplit > 1 the cluster's CTAs (consecutive blocks) share one tile: CTA `slice` reduces
  // stages [kt0, kt0 + k_count).
  const int tile = static_cast<int>(blockIdx.x) / kSplit, slice = static_cast<int>(blockIdx.x) % kSplit;
  const int kt0 = slice * g.k_tiles / kSplit, k_count = (slice + 1) * g.k_tiles / kSplit - kt0;
  const int64_t p0 = static_cast<int64_t>(tile / n_tiles) * g.tile_rows;
  const int m0 = (tile % n_tiles) * T::BN;
  const int chunk = tid & 3;  // the same 16-byte chunk of every row this thread loads

  // The A rows (output pixels) this thread loads: image offset and the window's corner.
  int64_t a_img[T::kARows];
  int a_ih[T::kARows], a_iw[T::kARows];
  bool a_ok[T::kARows];
#pragma unroll
  for (int i = 0; i < T::kARows; ++i) {
    const int row = (tid + i * T::kThreads) >> 2;
    const int64_t p = p0 + row;
    a_ok[i] = row < g.tile_rows && p < g.P;
    const int64_t pp = a_ok[i] ? p : 0;
    const int64_t n = pp / (static_cast<int64_t>(g.OH) * g.OW);
    const int r = static_cast<int>(pp - n * g.OH * g.OW), oh = r / g.OW, ow = r % g.OW;
    a_img[i] = n * g.H * g.W * g.C;
    a_ih[i] = oh * g.sh - g.ph;
    a_iw[i] = ow * g.sw - g.pw;
  }
  const int8_t* b_row[T::kBRows];
  bool b_ok[T::kBRows];
#pragma unroll
  for (int i = 0; i < T::kBRows; ++i) {
    const int m = m0 + ((tid + i * T::kThreads) >> 2);
    b_ok[i] = m < g.M;
    b_row[i] = a.w + (b_ok[i] ? m : 0) * g.K + chunk * 16;
  }

  auto load_a = [&](int stage, int kt) {
    const uint32_t base = smem_u32(smem) + stage * T::kStageBytes;
    const int tap = kt / g.c_tiles, c0 = (kt - tap * g.c_tiles) * kBK;
    const int kh = tap / g.KW, kw = tap - kh * g.KW;
#pragma unroll
    for (int i = 0; i < T::kARows; ++i) {
      const int row = (tid + i * T::kThreads) >> 2;
      const int ih = a_ih[i] + kh * g.dh, iw = a_iw[i] + kw * g.dw;
      const bool ok = a_ok[i] && ih >= 0 && ih < g.H && iw >= 0 && iw < g.W;
      const int8_t* src = ok ? a.x + a_img[i] + (static_cast<int64_t>(ih) * g.W + iw) * g.C + c0 + chunk * 16 : a.x;
      cp_async16(base + swizzled(row, chunk), src, ok);
    }
  };
  auto load_b = [&](int stage, int kt) {
    const uint32_t base = smem_u32(smem) + stage * T::kStageBytes;
#pragma unroll
    for (int i = 0; i < T::kBRows; ++i) {
      const int row = (tid + i * T::kThreads) >> 2;
      cp_async16(base + T::BM * kBK + swizzled(row, chunk), b_ok[i] ? b_row[i] + static_cast<int64_t>(kt) * kBK : a.w,
                 b_ok[i]);
    }
  };

  int32_t acc[T::MT][T::NT][4];
#pragma unroll
  for (int i = 0; i < T::MT; ++i)
#pragma unroll
    for (int j = 0; j < T::NT; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[i][j][k] = 0;

  // Stages loaded ahead: with stages' multiplies still in flight after their iteration (wgmma), the
  // buffer refilled at iteration kt is the one stage kt - 1 - kInFlight read, which every warp has
  // finished (it waited for it before the barrier). The weights of those stages first, while the
  // previous kernel may still be writing x; they join the first stage's copy group.
  constexpr int kAhead = kStages - 1 - T::Mma::kInFlight;
#pragma unroll
  for (int s = 0; s < kAhead; ++s)
    if (s < k_count) load_b(s, kt0 + s);
  wait_for_inputs();
  start_next_kernel();  // only now: one kernel ahead at most (dependent_launch.cuh)
#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    if (s < k_count) load_a(s, kt0 + s);
    cp_async_commit();
  }
  for (int kt = 0; kt < k_count; ++kt) {
    cp_async_wait<kAhead - 1>();
    T::Mma::operands_landed();
    __syncthreads();  // stage kt has landed, and every warp is done with the stage refilled next
    const int next = kt + kAhead;
    if (next < k_count) {
      load_a(next % kStages, kt0 + next);
      load_b(next % kStages, kt0 + next);
    }
    cp_async_commit();
    const uint32_t a_tile = smem_u32(smem) + (kt % kStages) * T::kStageBytes, b_tile = a_tile + T::BM * kBK;
    T::Mma::begin(acc);
#pragma unroll
    for (int ks = 0; ks < 2; ++ks)  // two k32 steps per stage
      T::Mma::template step<T>(acc, a_tile, b_tile, warp_m, warp_n, ks, lane, kt == 0 && ks == 0);
    T::Mma::end(acc);
    T::Mma::template wait<T::Mma::kInFlight>(acc);
  }
  T::Mma::template wait<0>(acc);
  cp_async_wait<0>();
  __syncthreads();  // the pipeline's buffers become the staging tile

  // The epilogue (quant/conv/epilogue.cuh): the channels' scales are read while the sums go through
  // shared memory.
  using Epi = epilogue::Tile<T::BM, T::BN, T::kThreads>;
  const Epi epi(a, g.M, m0);
  int32_t* staged = reinterpret_cast<int32_t*>(smem);
  Epi::stage(staged, acc, warp_m * T::WM, warp_n * T::WN, lane);
  // The rows and columns this CTA finishes: with kSplit > 1 a share of the rows, or for a pooled
  // output (whose sums over an image's rows are best made in one CTA) a share of the columns.
  const bool pooled = g.pool_rows > 0;
  int r0 = 0, r1 = T::BM, c0 = 0, c1 = T::BN;
  if constexpr (kSplit > 1) {
    static_assert(T::BM % kSplit == 0 && T::BN % (8 * kSplit) == 0);
    cluster_arrive();
    cluster_wait();  // every CTA of the cluster has staged its sums
    if (pooled) {
      c0 = slice * (T::BN / kSplit);
      c1 = c0 + T::BN / kSplit;
    } else {
      r0 = slice * (T::BM / kSplit);
      r1 = r0 + T::BM / kSplit;
    }
    add_cluster_block<kSplit, T::kThreads, Epi::kAccStride>(staged, r0, r1, c0, c1);
    cluster_arrive();  // done reading the others' tiles (waited for before leaving)
  }
  __syncthreads();
  // finish() gives each thread 8 channels from column (tid % (BN / 8)) * 8 of several rows.
  const int col = (static_cast<int>(threadIdx.x) % (T::BN / 8)) * 8;
  const bool my_cols = col >= c0 && col < c1;
  auto pixel_of = [&](int row) {
    return my_cols && row >= r0 && row < r1 && row < g.tile_rows && p0 + row < g.P ? p0 + row : int64_t{-1};
  };
  if (!pooled) {
    epi.finish(a, g.M, staged, pixel_of);
  } else {
    epi.template finish<true>(a, g.M, staged, pixel_of);
    __syncthreads();
    pool_tile<T, Epi::kAccStride>(a, g, staged, p0, m0, c0, c1);
  }
  if constexpr (kSplit > 1) {
    __syncwarp();   // the warp reconverged after finish()'s branches, for the aligned barrier
    cluster_wait();  // no CTA leaves while another may read its tile
  }
#endif
}

template <class T, int kSplit = 1>
void launch(const QConvNhwcArgs& a, Geometry g, cudaStream_t stream) {
  g.tile_rows = T::BM;
  g.pool_rows = 0;
  if (a.pool_mean) {
    const int pixels = g.OH * g.OW;
    if (a.epi.quantize || pixels > T::BM)
      throw Error("NhwcQConv: this tile shape cannot average the convolution's outputs (" + std::to_string(pixels) +
                  " pixels per image)");
    g.pool_rows = pixels;
    g.tile_rows = T::BM / pixels * pixels;  // whole images
  }
  const int64_t blocks = (g.P + g.tile_rows - 1) / g.tile_rows * ((g.M + T::BN - 1) / T::BN) * kSplit;
  if (blocks >= int64_t{1} << 31)
    throw Error("NhwcQConv: the convolution has too many output pixels for the tensor-core kernel");
  // Above 48 KiB of shared memory a kernel must ask for it, once per device (before any capture:
  // the builder and the engine's first run launch it uncaptured); after that a launch costs one
  // atomic load here, no lock.
  static std::once_flag asked[kMaxDevices];
  int device = 0;
  check_cuda(cudaGetDevice(&device), "NhwcQConv");
  auto ask = [] {
    check_cuda(cudaFuncSetAttribute(igemm_kernel<T, kSplit>, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmem),
               "NhwcQConv: asking for the tensor-core kernel's shared memory");
  };
  if (device < kMaxDevices)
    std::call_once(asked[device], ask);
  else
    ask();
  const int k_tiles = (g.k_tiles + kSplit - 1) / kSplit;  // the most stages one CTA reduces
  launch_dependent<igemm_kernel<T, kSplit>>(dim3(static_cast<unsigned>(blocks)), T::kThreads,
                                            static_cast<size_t>(T::smem(k_tiles)), stream, kSplit,
                                            "NhwcQConv: launching the tensor-core kernel", a, g);
}

}  // namespace

// The wgmma tile shapes (igemm_sm90a.cu, built where KILN_HAVE_SM90A): config 0 ..
// kConfigs - kSyncConfigs - 1, on compute capability 9.0 (configs() and run() in igemm.cu
// check).
void run_wgmma(int config, const QConvNhwcArgs& a, const Geometry& g, cudaStream_t stream);

}  // namespace kiln::gpu::quant::igemm
