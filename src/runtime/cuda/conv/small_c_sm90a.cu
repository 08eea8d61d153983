// The small-channel stem convolution on wgmma (small_c.cuh says what it takes; the layout, the
// staging and the epilogue are small_c_kernel.cuh's).
//
// The mma.sync form keeps each warp's weights in registers as B fragments, 32 output channels per
// warp: with 64 channels two warps load the same A fragments from the staged rows, one shared load
// per mma, and ResNet-50's stem ran at about a fifth of the tensor cores' float16 rate (0.34 ms at
// batch 256 on an H100). Here the weights of all N output channels sit in shared memory in wgmma's
// K-major layout with 64-byte swizzling, and each warp loads its 16 pixels' A fragments once and
// multiplies them by all N channels: wgmma m64nNk16 with A from registers, the warpgroup's four
// warps each supplying 16 pixels (any 16-pixel tiles of the work item: their rows need not be
// contiguous). A work item is 4 output rows where that fills every round of four tiles (ResNet's
// 112-pixel rows: 7 tiles a row), else 2. ResNet-50's stem at batch 256 on an H100: 0.216 ms with
// float16 output (mma.sync: 0.305), 0.221 ms with int8 output. (docs/decisions.md, "The stem on
// wgmma", has what else was tried.)
#include <algorithm>
#include <atomic>
#include <mutex>

#include "runtime/cuda/conv/small_c_kernel.cuh"
#include "runtime/cuda/wgmma.cuh"

namespace kiln::gpu::nn::small_c {

namespace {

// 64-byte rows of the weights (32 reduction slots each) for an R x R kernel.
template <int R>
constexpr int weight_subtiles() {
  return (Layout<R, R, 1>::kSteps + 1) / 2;
}

int shared_memory(const Params& p, int R) {
  const int subs = R == 7 ? weight_subtiles<7>() : weight_subtiles<3>();
  const int tiles = 4 * (p.M == 64 ? out_tile_bytes<8>() : out_tile_bytes<4>());
  return 1024 + subs * p.M * 64 + stage_buffers(p.x_first_bytes) * staged_rows(p.rows, R) * p.row_len * 2 + tiles +
         raw_bytes(p.rows, R, p.W, p.x_first_bytes);
}

template <int R, int N, int A>
__global__ void __launch_bounds__(kThreads) small_c_wgmma_kernel(Params p) {
#if defined(__CUDA_ARCH__)
  constexpr int D = 1;  // the odd left pads instantiated
  using L = Layout<R, R, D>;
  constexpr int NT = N / 8;
  constexpr int kSubs = weight_subtiles<R>();
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* const w_s = mma::aligned_smem<1024>(smem_raw);  // kSubs x [N][64 bytes], swizzled
  __half* const stages = reinterpret_cast<__half*>(w_s + kSubs * N * 64);
  const int stage_len = staged_rows(p.rows, R) * p.row_len;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  const int buffers = stage_buffers(p.x_first_bytes);
  unsigned char* const tiles = reinterpret_cast<unsigned char*>(stages + buffers * stage_len);
  unsigned char* const out_tile = tiles + warp * out_tile_bytes<NT>();
  unsigned char* const raw = tiles + 4 * out_tile_bytes<NT>();  // a channels-first X's rows

  // Zero the buffers once: the pad columns are never written again, out-of-image rows are
  // zero-filled by cp.async.
  zero_stages(stages, buffers * stage_len);
  // The weights: 16-byte chunks of 8 slots, channel n's row of sub-tile s.
  for (int i = threadIdx.x; i < kSubs * N * 4; i += kThreads) {
    const int s = i / (N * 4), n = (i / 4) % N, chunk = i % 4;
    uint32_t v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int k = s * 32 + chunk * 8 + 2 * j;
      v[j] = pack(L::weight(p.w, n, k), L::weight(p.w, n, k + 1));
    }
    *reinterpret_cast<uint4*>(w_s + s * N * 64 + mma::swizzled(n, chunk)) = make_uint4(v[0], v[1], v[2], v[3]);
  }
  uint32_t keep[L::kSegGroups];
  L::keep_masks(q, keep);
  const Quant quant = quant_of<A>(p);
  float bias[NT][2];
  lane_bias(p, quant, 0, q, bias);
  // The weights were written through the generic proxy; wgmma reads them through the async one.
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();

  const uint32_t weights = mma::smem_u32(w_s);
  const int units = p.rows * p.m_tiles;  // 16-pixel tiles of a work item
  walk_items<R>(p, stages, stage_len, raw, [&](const __half* stage, int64_t n_img, int oh0) {
    // Rounds of four tiles, one per warp; a warp past the last tile multiplies the round's first
    // again (wgmma takes the whole warpgroup) and stores nothing.
    for (int u0 = 0; u0 < units; u0 += 4) {
      const bool live = u0 + warp < units;
      const int u = live ? u0 + warp : u0;
      const int qr = u / p.m_tiles, mt = u - qr * p.m_tiles, oh = oh0 + qr;
      const __half* rows[R];
      L::row_starts(p, stage, qr, mt, g, q, rows);
      uint32_t af[L::kSteps][4];
#pragma unroll
      for (int ks = 0; ks < L::kSteps; ++ks) L::a_fragment(rows, keep, ks, af[ks]);
      float acc[NT][4] = {};
      mma::pin(acc);
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int ks = 0; ks < L::kSteps; ++ks) {
        const uint64_t b = mma::descriptor(weights + (ks / 2) * N * 64 + (ks & 1) * 32);
        if constexpr (N == 64)
          mma::wgmma_f16_m64n64_rs(&acc[0][0], af[ks], b, ks > 0);
        else
          mma::wgmma_f16_m64n32_rs(&acc[0][0], af[ks], b, ks > 0);
      }
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
      mma::pin(acc);
      if (live && oh < p.OH) store_tile<NT, A>(p, quant, acc, bias, out_tile, n_img, oh, mt, 0);
    }
  });
#endif
}

using KernelFn = void (*)(Params);

// The CTAs of a persistent grid for kernel `fn` with `smem` bytes of shared memory (the most any
// launch of it asks for is set once per device), remembered per device and kernel.
template <int R, int N, int A>
int resident_ctas(int smem) {
  constexpr KernelFn fn = small_c_wgmma_kernel<R, N, A>;
  static std::once_flag asked[mma::kMaxDevices];
  static std::atomic<int64_t> known[mma::kMaxDevices] = {};  // smem << 32 | ctas; 0: not asked
  int device = 0;
  check_cuda(cudaGetDevice(&device), "NhwcConv");
  auto ask = [device] {
    check_cuda(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    mma::device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(device)),
               "NhwcConv: asking for the small-channel wgmma kernel's shared memory");
  };
  if (device < mma::kMaxDevices) {
    std::call_once(asked[device], ask);
    const int64_t v = known[device].load(std::memory_order_relaxed);
    if (v != 0 && (v >> 32) == smem) return static_cast<int>(v & 0xffffffff);
  } else {
    ask();
  }
  int per_sm = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, kThreads, smem),
             "NhwcConv: the small-channel wgmma kernel's occupancy");
  const int ctas = std::max(1, per_sm) * std::max(1, mma::device_attribute<cudaDevAttrMultiProcessorCount>(device));
  if (device < mma::kMaxDevices) known[device].store(int64_t{smem} << 32 | ctas, std::memory_order_relaxed);
  return ctas;
}

template <int R, int N, int A>
void launch(const Params& p, cudaStream_t stream) {
  const int smem = shared_memory(p, R);
  const int64_t blocks = std::min<int64_t>(p.items, resident_ctas<R, N, A>(smem));
  small_c_wgmma_kernel<R, N, A><<<static_cast<unsigned>(blocks), kThreads, smem, stream>>>(p);
  check_launch("NhwcConv");
}

template <int R, int N>
void launch_act(const Params& p, Activation a, cudaStream_t stream) {
  switch (a) {
    case Activation::kNone: return launch<R, N, static_cast<int>(Activation::kNone)>(p, stream);
    case Activation::kRelu: return launch<R, N, static_cast<int>(Activation::kRelu)>(p, stream);
    case Activation::kClip: return launch<R, N, static_cast<int>(Activation::kClip)>(p, stream);
    default: return launch<R, N, kGeneric>(p, stream);
  }
}

}  // namespace

bool wgmma_fits(const Params& p, int R) {
  int device = 0;
  if (!mma::runs_sm90a() || cudaGetDevice(&device) != cudaSuccess) return false;
  return shared_memory(p, R) <= mma::device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(device);
}

void run_wgmma(const Params& p, int R, Activation a, cudaStream_t stream) {
  if (R == 7) return p.M == 64 ? launch_act<7, 64>(p, a, stream) : launch_act<7, 32>(p, a, stream);
  return p.M == 64 ? launch_act<3, 64>(p, a, stream) : launch_act<3, 32>(p, a, stream);
}

}  // namespace kiln::gpu::nn::small_c
