// The small-channel stem convolution (small_c.cuh) on float16 mma.m16n8k16, and the choice
// between it and its wgmma form. The layout, the staging and the epilogue are
// small_c_kernel.cuh's.
//
// A persistent CTA of 4 warps keeps its weights in registers as B fragments (each warp: 32 output
// channels, every k step) and walks work items of 2 output rows of one image. A warp computes 16
// output pixels x 32 channels at a time (with 64 output channels, two warps read the same A
// fragments for their halves of the channels).
#include <atomic>

#include "runtime/cuda/conv/small_c_kernel.cuh"
#include "runtime/cuda/dependent_launch.cuh"

namespace kiln::gpu::nn {

namespace {

using namespace small_c;

constexpr int kRows = 2;  // output rows per work item (1 where 2 would leave SMs idle: mma_rows)
constexpr int kMaxSmem = 48 << 10;

template <int R, int S, int D, int NG, int A>
__global__ void __launch_bounds__(kThreads) small_c_kernel(Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800  // cp.async and float16 mma.m16n8k16
  using L = Layout<R, S, D>;
  constexpr int kWarpsPerGroup = 4 / NG;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int stage_len = staged_rows(p.rows, R) * p.row_len;
  __half* stages = reinterpret_cast<__half*>(smem_raw);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  const int buffers = stage_buffers(p.x_first_bytes);
  unsigned char* const tiles = reinterpret_cast<unsigned char*>(stages + buffers * stage_len);
  unsigned char* out_tile = tiles + warp * out_tile_bytes<4>();
  unsigned char* const raw = tiles + 4 * out_tile_bytes<4>();  // a channels-first X's rows
  const int cg = warp % NG, first_unit = warp / NG;

  // Zero the buffers once: the pad columns are never written again, out-of-image rows are
  // zero-filled by cp.async.
  zero_stages(stages, buffers * stage_len);

  // A dependent launch (small_c_conv): everything from global memory, the weights included (an
  // engine may compute them), is read after the kernel before this one has finished.
  wait_for_inputs();
  start_next_kernel();
  // A channels-first X's first rows are in flight while the weights below are read.
  const bool staged = stage_first_raw<R>(p, raw);

  // This warp's B fragments: weights of channels cg * 32 + nt * 8 + g at slots k, k + 1.
  uint32_t bf[L::kSteps][4][2];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int ks = 0; ks < L::kSteps; ++ks)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int n = cg * 32 + nt * 8 + g, k = ks * 16 + h * 8 + 2 * q;
        bf[ks][nt][h] = pack(L::weight(p.w, n, k), L::weight(p.w, n, k + 1));
      }
  uint32_t keep[L::kSegGroups];
  L::keep_masks(q, keep);
  const Quant quant = quant_of<A>(p);
  float bias[4][2];
  lane_bias(p, quant, cg * 32, q, bias);
  __syncthreads();

  walk_items<R>(p, stages, stage_len, raw, [&](const __half* stage, int64_t n_img, int oh0) {
    for (int u = first_unit; u < p.rows * p.m_tiles; u += kWarpsPerGroup) {
      const int qr = u / p.m_tiles, mt = u - qr * p.m_tiles, oh = oh0 + qr;
      if (oh >= p.OH) break;
      const __half* rows[R];
      L::row_starts(p, stage, qr, mt, g, q, rows);
      float acc[4][4] = {};
#pragma unroll
      for (int ks = 0; ks < L::kSteps; ++ks) {
        uint32_t af[4];
        L::a_fragment(rows, keep, ks, af);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) mma::mma_f16(acc[nt], af, bf[ks][nt][0], bf[ks][nt][1]);
      }
      store_tile<4, A>(p, quant, acc, bias, out_tile, n_img, oh, mt, cg * 32);
    }
  }, staged);
#endif
}
// The kernels: kernel size 3 or 7 (a dummy slot leading each row: odd left pads), 32 or 64 output
// channels, activation None, Relu, Clip or any other. kernel_index() picks one (-1: none fits).
using KernelFn = void (*)(Params);
template <int R, int NG>
constexpr KernelFn kFour[4] = {small_c_kernel<R, R, 1, NG, static_cast<int>(Activation::kNone)>,
                               small_c_kernel<R, R, 1, NG, static_cast<int>(Activation::kRelu)>,
                               small_c_kernel<R, R, 1, NG, static_cast<int>(Activation::kClip)>,
                               small_c_kernel<R, R, 1, NG, kGeneric>};
constexpr int kKernels = 16;
const KernelFn kKernel[kKernels] = {kFour<3, 1>[0], kFour<3, 1>[1], kFour<3, 1>[2], kFour<3, 1>[3],
                                    kFour<3, 2>[0], kFour<3, 2>[1], kFour<3, 2>[2], kFour<3, 2>[3],
                                    kFour<7, 1>[0], kFour<7, 1>[1], kFour<7, 1>[2], kFour<7, 1>[3],
                                    kFour<7, 2>[0], kFour<7, 2>[1], kFour<7, 2>[2], kFour<7, 2>[3]};
// Their launches, as programmatic dependent launches (dependent_launch.cuh), in the same order.
using LaunchFn = void (*)(unsigned blocks, int smem, cudaStream_t stream, const Params& p);
template <int R, int NG, int A>
void launch_one(unsigned blocks, int smem, cudaStream_t stream, const Params& p) {
  launch_dependent<small_c_kernel<R, R, 1, NG, A>>(dim3(blocks), kThreads, static_cast<size_t>(smem), stream, 1,
                                                          "NhwcConv", p);
}
template <int R, int NG>
constexpr LaunchFn kLaunchFour[4] = {launch_one<R, NG, static_cast<int>(Activation::kNone)>,
                                     launch_one<R, NG, static_cast<int>(Activation::kRelu)>,
                                     launch_one<R, NG, static_cast<int>(Activation::kClip)>,
                                     launch_one<R, NG, kGeneric>};
const LaunchFn kLaunch[kKernels] = {
    kLaunchFour<3, 1>[0], kLaunchFour<3, 1>[1], kLaunchFour<3, 1>[2], kLaunchFour<3, 1>[3],
    kLaunchFour<3, 2>[0], kLaunchFour<3, 2>[1], kLaunchFour<3, 2>[2], kLaunchFour<3, 2>[3],
    kLaunchFour<7, 1>[0], kLaunchFour<7, 1>[1], kLaunchFour<7, 1>[2], kLaunchFour<7, 1>[3],
    kLaunchFour<7, 2>[0], kLaunchFour<7, 2>[1], kLaunchFour<7, 2>[2], kLaunchFour<7, 2>[3]};
int kernel_index(int64_t k, int64_t pad_left, int64_t M, Activation a) {
  if ((k != 3 && k != 7) || (pad_left * kC) % 2 != 1 || (M != 32 && M != 64)) return -1;
  const int act = a == Activation::kNone ? 0 : a == Activation::kRelu ? 1 : a == Activation::kClip ? 2 : 3;
  return (k == 7 ? 8 : 0) + (M == 64 ? 4 : 0) + act;
}

// The staging buffers are sized for kRows; a channels-first X's raw buffer for the rows used.
int smem_bytes(const DirectConv& g, int rows) {
  const int R = static_cast<int>(g.kernel[0]);
  return stage_buffers(g.x_first_bytes) * staged_rows(kRows, R) * row_len(g) * static_cast<int>(sizeof(__half)) +
         kThreads / 32 * out_tile_bytes<4>() + raw_bytes(rows, R, static_cast<int>(g.in[1]), g.x_first_bytes);
}

// The CTAs of a persistent grid: those resident at once with the most shared memory a shape may
// take, asked once per device and kernel (run() is called on every step).
int resident_ctas(int which) {
  static std::atomic<int> known[mma::kMaxDevices][kKernels] = {};  // 0: not asked yet
  int device = 0;
  check_cuda(cudaGetDevice(&device), "NhwcConv");
  if (device < mma::kMaxDevices)
    if (const int v = known[device][which].load(std::memory_order_relaxed); v != 0) return v;
  int per_sm = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel[which], kThreads, kMaxSmem),
             "NhwcConv: the small-channel kernel's occupancy");
  const int v = std::max(1, per_sm) * std::max(1, mma::device_attribute<cudaDevAttrMultiProcessorCount>(device));
  if (device < mma::kMaxDevices) known[device][which].store(v, std::memory_order_relaxed);
  return v;
}

}  // namespace

int small_c::row_len(const DirectConv& g) {
  const int64_t d = (g.pads[1] * kC) % 2;
  const int64_t seg = seg_slots(static_cast<int>(g.kernel[1]), static_cast<int>(d));
  const int64_t m_tiles = (g.out[1] + 15) / 16;
  const int64_t last = kDataStart - g.pads[1] * kC - d + kStride * kC * (m_tiles * 16 - 1) + seg;
  const int64_t need = std::max<int64_t>(kDataStart + g.in[1] * kC, last);
  return static_cast<int>((need + 7) / 8 * 8);
}

namespace {

// The shape conditions both forms share (small_c.cuh), their shared memory aside.
bool shape_fits(const DirectConv& g, DataType dt, bool has_z) {
  if (dt != DataType::kFloat16 || has_z || g.transpose || !g.channels_last || g.rank != 2 || g.G != 1) return false;
  if (g.C != kC || (g.M != 32 && g.M != 64)) return false;
  if (g.kernel[0] != g.kernel[1] || (g.kernel[0] != 3 && g.kernel[0] != 7)) return false;
  for (int i = 0; i < 2; ++i)
    if (g.strides[i] != kStride || g.dilations[i] != 1 || g.pads[i] < 0 || g.pads[i] >= g.kernel[i]) return false;
  if (g.pads[1] > 5 || kernel_index(g.kernel[1], g.pads[1], g.M, Activation::kNone) < 0) return false;
  if ((g.in[1] * kC) % 8 != 0 || g.out[0] <= 0 || g.out[1] <= 0 || g.in[0] >= (1 << 24) || g.in[1] >= (1 << 16))
    return false;
  if (g.x_first_bytes != 0 && g.x_first_bytes != 2 && g.x_first_bytes != 4) return false;
  if ((g.in[1] * g.x_first_bytes) % 16 != 0) return false;  // a channels-first X's rows: 16-byte chunks
  return g.batch * g.in[0] * g.in[1] * kC < (int64_t{1} << 40) && mma::device_supported();
}

// The wgmma form's output rows per work item: 4 where a row has an odd number of 16-pixel tiles
// (2 rows would leave the last round of four, one tile per warp, short), else 2.
int wgmma_rows(const DirectConv& g) {
  const int64_t m_tiles = (g.out[1] + 15) / 16;
  return m_tiles % 2 != 0 && g.out[0] >= 4 ? 4 : 2;
}

// The mma.sync form's output rows per work item: kRows, or 1 where work items of kRows would not
// give every SM one (ResNet-50's stem at batch 1: 56 items of 2 rows on 132 SMs). Staging
// buffers are sized for kRows.
int mma_rows(const DirectConv& g) {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "NhwcConv");
  const int64_t sms = mma::device_attribute<cudaDevAttrMultiProcessorCount>(device);
  return g.batch * ((g.out[0] + kRows - 1) / kRows) < sms ? 1 : kRows;
}

Params params_of(const DirectConv& g, int rows) {
  Params p{};
  p.H = static_cast<int>(g.in[0]);
  p.W = static_cast<int>(g.in[1]);
  p.OH = static_cast<int>(g.out[0]);
  p.OW = static_cast<int>(g.out[1]);
  p.pad_top = static_cast<int>(g.pads[0]);
  p.pad_left = static_cast<int>(g.pads[1]);
  p.M = static_cast<int>(g.M);
  p.rows = rows;
  p.row_len = row_len(g);
  p.chunks = static_cast<int>(g.in[1] * kC / 8);
  p.m_tiles = (p.OW + 15) / 16;
  p.row_groups = (p.OH + rows - 1) / rows;
  p.items = g.batch * p.row_groups;
  p.x_first_bytes = g.x_first_bytes;
  return p;
}

}  // namespace

bool small_c_conv_fits(const DirectConv& g, DataType dt, bool has_z) {
  return shape_fits(g, dt, has_z) && smem_bytes(g, mma_rows(g)) <= kMaxSmem;
}

bool small_c_wgmma_fits(const DirectConv& g, DataType dt, bool has_z) {
#if KILN_HAVE_SM90A
  return shape_fits(g, dt, has_z) && wgmma_fits(params_of(g, wgmma_rows(g)), static_cast<int>(g.kernel[0]));
#else
  return false;
#endif
}

void small_c_conv(const DirectConv& g, const EpilogueAttrs& e, const void* x, const void* w, const void* b, void* y,
                  const SmallCQuant* quant, bool wgmma, cudaStream_t stream) {
  Params p = params_of(g, wgmma ? wgmma_rows(g) : mma_rows(g));
  p.x = x;
  p.w = static_cast<const __half*>(w);
  p.b = static_cast<const __half*>(b);
  p.y = y;
  p.y_scale = quant ? quant->scale : nullptr;
  p.y_zero = quant ? quant->zero_point : nullptr;
  p.y_signed = quant && quant->type == DataType::kInt8;
  p.e = e;
#if KILN_HAVE_SM90A
  if (wgmma) return run_wgmma(p, static_cast<int>(g.kernel[0]), e.activation, stream);
#else
  if (wgmma) throw Error("NhwcConv: the small-channel wgmma kernel was not built (CUDA 12 and sm_90a)");
#endif
  const int which = kernel_index(g.kernel[1], g.pads[1], g.M, e.activation);
  const int64_t blocks = std::min<int64_t>(p.items, resident_ctas(which));
  kLaunch[which](static_cast<unsigned>(blocks), smem_bytes(g, p.rows), stream, p);
}

}  // namespace kiln::gpu::nn
