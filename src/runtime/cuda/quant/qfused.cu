// kiln.QConv and kiln.QMatMul on the GPU, bit-exact with the CPU kernels (runtime/cpu/quant/conv.cpp and matmul.cpp):
// the same exact integer sums and the shared epilogue of runtime/qfused_math.h (QConv's residual z
// included: Params::store reads z at the output's index, so both paths take it alike).
//
// Fast path, on tensor cores (WMMA int8 16x16x16, int32 accumulation): int8 weights with zero
// point 0 (or uint8 with 128), any int8/uint8 activations. uint8 values v are fed as v - 128 (a
// sign flip of the top bit) with their zero point moved by 128; the activation zero point is
// handled by padding with it and subtracting zero_point * (sum of the channel's weights) from the
// accumulator, which equals the sum of (x - zero_point) * w exactly (modulo 2^32, as the CPU's).
// Both ops are one implicit GEMM, out[m][p] = sum_k w[m][k] * b[k][p]:
//   QConv (NCHW, per group): m output channel, k = (input channel, kernel tap), p = (image, output
//   position); b gathered from x on the fly (im2col in shared memory), padding = zero point.
//   QMatMul: m output column, k the reduction axis, p the row of x: b[k][p] = x[p][k].
// Block tile 64 (m) x 64 (p), k in steps of 32; four warps of 32 x 32 (2 x 2 fragments). The
// accumulators go through shared memory to the epilogue, which writes coalesced along p (QConv:
// output positions) or m (QMatMul: output columns). Tile loads are 16-byte vectors where K, the
// layout and the pointers' alignment allow (weights with K % 16 == 0; QMatMul's x likewise; a
// 1x1 conv's x with O % 16 == 0), byte by byte otherwise.
// Other zero points take the generic path: one thread per output, exact integer sums.
// The quantization parameters are build-time constants (op_kind.h), read on the host to choose
// the path; per-channel arrays (w_scale, w_zero_point, bias) are read on the device.
#include <mma.h>

#include "core/infer/nn_geometry.h"
#include "runtime/cuda/quant/quant_internal.cuh"
#include "runtime/qfused_math.h"

namespace kiln::gpu::quant {

namespace {

constexpr int kBM = 64, kBN = 64, kBK = 32, kWarps = 4, kTileThreads = kWarps * 32;
constexpr int kCsLd = kBN + 4;  // int32 accumulator tile row stride (a multiple of 4, rows 32-byte aligned)

// Per output channel parameters, on the device; scalars by value.
struct Params {
  const float* w_scale = nullptr;
  bool w_scale_per_channel = false;
  const void* w_zero = nullptr;  // null: 0
  bool w_zero_u8 = false, w_zero_per_channel = false;
  const float* bias = nullptr;  // null: 0
  float x_scale = 1;
  int32_t x_zero = 0;
  qfused::Epilogue epi;
  int out = 0;              // 0 float32, 1 int8, 2 uint8
  const void* z = nullptr;  // QConv's residual, y's shape (null: none)
  int z_type = 0;           // 0 int8, 1 uint8, 2 float32

  __device__ float alpha(int64_t m) const { return qfused::mul_rn(x_scale, w_scale[w_scale_per_channel ? m : 0]); }
  __device__ int32_t w_zero_at(int64_t m) const {
    if (!w_zero) return 0;
    const int64_t i = w_zero_per_channel ? m : 0;
    return w_zero_u8 ? int32_t{static_cast<const uint8_t*>(w_zero)[i]} : int32_t{static_cast<const int8_t*>(w_zero)[i]};
  }
  // Writes output element `at` of channel m from the exact accumulator.
  __device__ void store(void* y, int64_t at, int64_t m, uint32_t acc) const {
    float real = qfused::Epilogue::real(acc, alpha(m), bias ? bias[m] : 0.0f);
    if (z)
      real = z_type == 2 ? qfused::add_rn(real, static_cast<const float*>(z)[at])
                         : epi.plus_residual(real, z_type == 1 ? int32_t{static_cast<const uint8_t*>(z)[at]}
                                                               : int32_t{static_cast<const int8_t*>(z)[at]});
    const float v = epi.activate(real);
    if (out == 0)
      static_cast<float*>(y)[at] = v;
    else if (out == 1)
      static_cast<int8_t*>(y)[at] = static_cast<int8_t>(epi.quantized(v));
    else
      static_cast<uint8_t*>(y)[at] = static_cast<uint8_t>(epi.quantized(v));
  }
};

// Convolution geometry with the spatial axes right-aligned in 3 (missing leading axes are 1).
struct Geo {
  int64_t N = 0, C = 0, M = 0, G = 1, Cg = 0, Mg = 0;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1}, dil[3] = {1, 1, 1}, pad[3] = {0, 0, 0};
  int64_t I = 1, O = 1, Ks = 1;
};

Geo conv_geo(const QConvAttrs& a, const TensorView& X, const TensorView& W) {
  const kiln::nn::WindowGeometry g = kiln::nn::conv_geometry(a.conv(), X.shape, W.shape);
  const size_t r = g.rank();
  if (r < 1 || r > 3)
    throw Error("kiln.QConv: " + std::to_string(r) + " spatial axes; the CUDA backend supports 1 to 3");
  Geo o;
  for (size_t i = 0; i < r; ++i) {
    const size_t d = 3 - r + i;
    o.in[d] = g.in[i];
    o.out[d] = g.out[i];
    o.k[d] = g.kernel[i];
    o.stride[d] = g.strides[i];
    o.dil[d] = g.dilations[i];
    o.pad[d] = g.pads[i];
  }
  o.N = X.shape[0];
  o.C = X.shape[1];
  o.M = W.shape[0];
  o.G = a.group;
  o.Cg = o.C / o.G;
  o.Mg = o.M / o.G;
  for (int d = 0; d < 3; ++d) {
    o.I *= o.in[d];
    o.O *= o.out[d];
    o.Ks *= o.k[d];
  }
  return o;
}

// An int8/uint8 element as the tensor-core path feeds it: int8 as is, uint8 minus 128.
template <class T>
__device__ __forceinline__ int8_t as_s8(T v) {
  if constexpr (std::is_same_v<T, uint8_t>)
    return static_cast<int8_t>(v ^ 0x80u);
  else
    return v;
}

// 16 int8/uint8 values as the tensor-core path feeds them (uint8: every byte minus 128).
template <class T>
__device__ __forceinline__ int4 load16_s8(const T* p) {
  int4 v = *reinterpret_cast<const int4*>(p);
  if constexpr (std::is_same_v<T, uint8_t>) {
    v.x ^= 0x80808080;
    v.y ^= 0x80808080;
    v.z ^= 0x80808080;
    v.w ^= 0x80808080;
  }
  return v;
}

// Which tile loads may be 16-byte vectors (set by the host from K, alignment and the geometry).
enum VecLoads : int {
  kVecA = 1,  // weights: K % 16 == 0 and w 16-byte aligned
  kVecB = 2,  // QMatMul: K % 16 == 0 and x aligned; QConv: 1x1, stride 1, no padding, O % 16 == 0, x aligned
};

// ---- the tensor-core implicit GEMM ---------------------------------------------------------------
// kConv: b gathered from NCHW x as described at the top; else b[k][p] = x[p * K + k].
template <bool kConv, class TX, class TW>
__global__ void __launch_bounds__(kTileThreads)
    qgemm_wmma_kernel(const TX* x, const TW* w, void* y, Geo g, int64_t K, int64_t P, int64_t Mg, Params prm,
                      int32_t zx_s8, int vec) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 720
  using namespace nvcuda;
  // A tile: weights [2 halves of k][64 rows][16]; B tile, column-major per half: [2][64 cols][16].
  __shared__ __align__(32) int8_t as[2][kBM][16];
  __shared__ __align__(32) int8_t bs[2][kBN][16];
  __shared__ __align__(32) int32_t cs[kBM][kCsLd];
  __shared__ int64_t k_chan[kBK];  // conv: per k of the tile, the input channel's offset (-1: k >= K)
  __shared__ int32_t k_tap[kBK][3];
  __shared__ int32_t row_sum[kBM];
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32;
  const int64_t p0 = static_cast<int64_t>(blockIdx.x) * kBN, m0 = static_cast<int64_t>(blockIdx.y) * kBM;
  const int64_t group = blockIdx.z;
  const TW* wg = w + group * Mg * K;

  // Conv: this thread's column p = p0 + tid % 64 (fixed for the block): its image and window origin.
  [[maybe_unused]] const int pc = tid % kBN;
  [[maybe_unused]] const int64_t p = p0 + pc;
  [[maybe_unused]] int64_t x_base = -1, oz = 0, oy = 0, ox = 0;
  if constexpr (kConv) {
    if (p < P) {
      const int64_t n = p / g.O, o = p % g.O;
      oz = (o / (g.out[1] * g.out[2])) * g.stride[0] - g.pad[0];
      oy = ((o / g.out[2]) % g.out[1]) * g.stride[1] - g.pad[1];
      ox = (o % g.out[2]) * g.stride[2] - g.pad[2];
      x_base = (n * g.C + group * g.Cg) * g.I;
    }
  }
  int32_t my_row_sum = 0;  // threads < 64: the weights' sum of row m0 + tid
  wmma::fragment<wmma::accumulator, 16, 16, 16, int> acc[2][2];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0);

  for (int64_t k0 = 0; k0 < K; k0 += kBK) {
    if constexpr (kConv) {
      if (tid < kBK) {
        const int64_t k = k0 + tid;
        k_chan[tid] = k < K ? (k / g.Ks) * g.I : -1;
        const int64_t t = k % g.Ks;
        k_tap[tid][0] = static_cast<int32_t>((t / (g.k[1] * g.k[2])) * g.dil[0]);
        k_tap[tid][1] = static_cast<int32_t>(((t / g.k[2]) % g.k[1]) * g.dil[1]);
        k_tap[tid][2] = static_cast<int32_t>((t % g.k[2]) * g.dil[2]);
      }
    }
    // A: 64 x 32 weights, k fastest: one 16-byte vector per thread, or 16 bytes one by one.
    if (vec & kVecA) {
      const int r = tid / 2, h = tid % 2;
      const int64_t m = m0 + r, k = k0 + 16 * h;  // K % 16 == 0: all 16 inside the row or none
      *reinterpret_cast<int4*>(&as[h][r][0]) = m < Mg && k < K ? load16_s8(wg + m * K + k) : make_int4(0, 0, 0, 0);
    } else {
      for (int e = tid; e < kBM * kBK; e += kTileThreads) {
        const int r = e / kBK, kk = e % kBK;
        const int64_t m = m0 + r, k = k0 + kk;
        as[kk / 16][r][kk % 16] = m < Mg && k < K ? as_s8(wg[m * K + k]) : int8_t{0};
      }
    }
    __syncthreads();  // k_chan / k_tap ready
    // B: 32 x 64 values.
    if constexpr (kConv) {
      if (vec & kVecB) {  // 1x1: b[k][p] = x[n][c = k][o], 16 consecutive o per thread (one image)
        const int kk = tid / 4, c0 = (tid % 4) * 16;
        const int64_t k = k0 + kk, pp = p0 + c0;
        int4 v = make_int4(0, 0, 0, 0);
        if (k < K && pp < P) v = load16_s8(x + ((pp / g.O) * g.C + group * g.Cg + k) * g.I + pp % g.O);
        const int8_t* b = reinterpret_cast<const int8_t*>(&v);
        for (int j = 0; j < 16; ++j) bs[kk / 16][c0 + j][kk % 16] = b[j];
      } else {
        for (int kk = tid / kBN; kk < kBK; kk += kTileThreads / kBN) {
          int8_t v = 0;
          const int64_t chan = k_chan[kk];
          if (x_base >= 0 && chan >= 0) {
            const int64_t iz = oz + k_tap[kk][0], iy = oy + k_tap[kk][1], ix = ox + k_tap[kk][2];
            v = iz >= 0 && iz < g.in[0] && iy >= 0 && iy < g.in[1] && ix >= 0 && ix < g.in[2]
                    ? as_s8(x[x_base + chan + (iz * g.in[1] + iy) * g.in[2] + ix])
                    : static_cast<int8_t>(zx_s8);
          }
          bs[kk / 16][pc][kk % 16] = v;
        }
      }
    } else if (vec & kVecB) {  // 16 consecutive k of one row of x per thread
      const int c = tid / 2, h = tid % 2;
      const int64_t k = k0 + 16 * h, pp = p0 + c;
      *reinterpret_cast<int4*>(&bs[h][c][0]) = k < K && pp < P ? load16_s8(x + pp * K + k) : make_int4(0, 0, 0, 0);
    } else {
      for (int e = tid; e < kBK * kBN; e += kTileThreads) {
        const int kk = e % kBK, c = e / kBK;  // k fastest: rows of x are contiguous along k
        const int64_t k = k0 + kk, pp = p0 + c;
        bs[kk / 16][c][kk % 16] = k < K && pp < P ? as_s8(x[pp * K + k]) : int8_t{0};
      }
    }
    if (zx_s8 != 0 && tid < kBM)
      for (int kk = 0; kk < kBK; ++kk) my_row_sum += as[kk / 16][tid][kk % 16];
    __syncthreads();
    const int wm = warp / 2, wn = warp % 2;
    for (int h = 0; h < 2; ++h) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, signed char, wmma::row_major> fa[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, signed char, wmma::col_major> fb[2];
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], &as[h][wm * 32 + i * 16][0], 16);
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], &bs[h][wn * 32 + j * 16][0], 16);
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
    __syncthreads();
  }
  const int wm = warp / 2, wn = warp % 2;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(&cs[wm * 32 + i * 16][wn * 32 + j * 16], acc[i][j], kCsLd, wmma::mem_row_major);
  if (tid < kBM) row_sum[tid] = my_row_sum;
  __syncthreads();
  for (int e = tid; e < kBM * kBN; e += kTileThreads) {
    // QConv: p fastest (output positions are contiguous); QMatMul: m fastest (output columns are).
    const int r = kConv ? e / kBN : e % kBM, c = kConv ? e % kBN : e / kBM;
    const int64_t m = m0 + r, pp = p0 + c;
    if (m >= Mg || pp >= P) continue;
    const uint32_t a =
        static_cast<uint32_t>(cs[r][c]) - static_cast<uint32_t>(zx_s8) * static_cast<uint32_t>(row_sum[r]);
    const int64_t mg = group * Mg + m;
    if constexpr (kConv)
      prm.store(y, ((pp / g.O) * g.M + mg) * g.O + pp % g.O, mg, a);
    else
      prm.store(y, pp * g.M + mg, mg, a);
  }
#else
  __trap();  // the host takes this path only on compute capability 7.2 and later
#endif
}

// ---- the generic path: one thread per output -----------------------------------------------------
template <class TX, class TW>
__global__ void __launch_bounds__(ew::kThreads)
    qconv_generic_kernel(const TX* x, const TW* w, void* y, Geo g, Params prm) {
  const int64_t total = g.N * g.M * g.O;
  for (int64_t e = ew::global_thread(); e < total; e += ew::grid_threads()) {
    const int64_t o = e % g.O, nm = e / g.O, m = nm % g.M, n = nm / g.M, gi = m / g.Mg;
    const int64_t bz = (o / (g.out[1] * g.out[2])) * g.stride[0] - g.pad[0];
    const int64_t by = ((o / g.out[2]) % g.out[1]) * g.stride[1] - g.pad[1];
    const int64_t bx = (o % g.out[2]) * g.stride[2] - g.pad[2];
    const int32_t zw = prm.w_zero_at(m);
    uint32_t acc = 0;
    for (int64_t c = 0; c < g.Cg; ++c) {
      const TX* xc = x + (n * g.C + gi * g.Cg + c) * g.I;
      const TW* wc = w + (m * g.Cg + c) * g.Ks;
      for (int64_t kz = 0; kz < g.k[0]; ++kz) {
        const int64_t iz = bz + kz * g.dil[0];
        if (iz < 0 || iz >= g.in[0]) continue;
        for (int64_t ky = 0; ky < g.k[1]; ++ky) {
          const int64_t iy = by + ky * g.dil[1];
          if (iy < 0 || iy >= g.in[1]) continue;
          for (int64_t kx = 0; kx < g.k[2]; ++kx) {
            const int64_t ix = bx + kx * g.dil[2];
            if (ix < 0 || ix >= g.in[2]) continue;
            const int32_t wv = static_cast<int32_t>(wc[(kz * g.k[1] + ky) * g.k[2] + kx]) - zw;
            const int32_t xv = static_cast<int32_t>(xc[(iz * g.in[1] + iy) * g.in[2] + ix]) - prm.x_zero;
            acc += static_cast<uint32_t>(wv * xv);
          }
        }
      }
    }
    prm.store(y, e, m, acc);
  }
}

template <class TX, class TW>
__global__ void __launch_bounds__(ew::kThreads)
    qmatmul_generic_kernel(const TX* x, const TW* w, void* y, int64_t rows, int64_t K, int64_t N, Params prm) {
  for (int64_t e = ew::global_thread(); e < rows * N; e += ew::grid_threads()) {
    const int64_t j = e % N, r = e / N;
    const int32_t zw = prm.w_zero_at(j);
    uint32_t acc = 0;
    for (int64_t k = 0; k < K; ++k)
      acc += static_cast<uint32_t>((static_cast<int32_t>(x[r * K + k]) - prm.x_zero) *
                                   (static_cast<int32_t>(w[j * K + k]) - zw));
    prm.store(y, e, j, acc);
  }
}

// ---- host side -----------------------------------------------------------------------------------

int32_t host_q8(const TensorView& t, const void* host, size_t i) {
  return t.dtype == DataType::kInt8 ? int32_t{static_cast<const int8_t*>(host)[i]}
                                    : int32_t{static_cast<const uint8_t*>(host)[i]};
}

// The parameters, and whether the weights suit the tensor-core path (int8 with zero point 0 or
// uint8 with 128 everywhere).
Params params(std::span<const TensorView> in, std::span<const TensorView> out, QActivation act, float act_alpha,
              float act_beta, const GpuEnv& env, const char* op, bool* tensor_cores) {
  Params p;
  p.x_scale = host_float(env, 1, op);
  p.x_zero = present(in, 2) ? host_q8(in[2], host_param(env, 2, op), 0) : 0;
  p.w_scale = static_cast<const float*>(in[4].data);
  p.w_scale_per_channel = in[4].numel() != 1;
  const int32_t tc_zero = in[3].dtype == DataType::kUInt8 ? 128 : 0;
  *tensor_cores = true;
  if (present(in, 5)) {
    p.w_zero = in[5].data;
    p.w_zero_u8 = in[5].dtype == DataType::kUInt8;
    p.w_zero_per_channel = in[5].numel() != 1;
    const void* hz = host_param(env, 5, op);
    for (int64_t i = 0; i < in[5].numel(); ++i)
      *tensor_cores = *tensor_cores && host_q8(in[5], hz, static_cast<size_t>(i)) == tc_zero;
  } else {
    *tensor_cores = tc_zero == 0;
  }
  p.bias = present(in, 6) ? static_cast<const float*>(in[6].data) : nullptr;
  p.epi.act = static_cast<int>(act);
  p.epi.act_alpha = act_alpha;
  p.epi.act_beta = act_beta;
  p.epi.quantize = present(in, 7);
  if (p.epi.quantize) {
    p.epi.y_scale = host_float(env, 7, op);
    p.epi.y_zero = present(in, 8) ? static_cast<float>(host_q8(in[8], host_param(env, 8, op), 0)) : 0.0f;
    const bool u8 = out[0].dtype == DataType::kUInt8;
    p.epi.qmin = u8 ? 0.0f : -128.0f;
    p.epi.qmax = u8 ? 255.0f : 127.0f;
    p.out = u8 ? 2 : 1;
  }
  if (present(in, 9)) {
    p.z = in[9].data;
    p.z_type = in[9].dtype == DataType::kFloat32 ? 2 : in[9].dtype == DataType::kUInt8 ? 1 : 0;
    if (p.z_type != 2) {
      p.epi.z_scale = *static_cast<const float*>(host_param(env, 10, op));
      p.epi.z_zero = present(in, 11) ? host_q8(in[11], host_param(env, 11, op), 0) : 0;
    }
  }
  return p;
}

// Tensor cores for int8: compute capability 7.2 or later (the current device, asked once).
bool device_has_int8_mma() {
  static const bool ok = [] {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    return major * 10 + minor >= 72;
  }();
  return ok;
}

template <class Fn>
void dispatch_q8(DataType t, const char* op, Fn&& fn) {
  if (t == DataType::kUInt8)
    fn(Tag<uint8_t>{});
  else if (t == DataType::kInt8)
    fn(Tag<int8_t>{});
  else
    ew::throw_gpu_dtype(t, op);
}

// Launches the tensor-core kernel over `groups` GEMMs of mg x p with reduction k.
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// vec: VecLoads the data allows for B (A's is derived here).
template <bool kConv>
void launch_wmma(const TensorView& X, const TensorView& W, void* y, const Geo& g, int64_t k, int64_t p, int64_t mg,
                 int64_t groups, const Params& prm, int vec, GpuEnv& env, const char* op) {
  if (k % 16 == 0 && aligned16(W.data)) vec |= kVecA;
  const int64_t bx = (p + kBN - 1) / kBN, by = (mg + kBM - 1) / kBM;
  if (bx > 0x7fffffff || by > 65535 || groups > 65535)
    throw Error(std::string(op) + ": too large for the CUDA backend's grid");
  const int32_t zx = X.dtype == DataType::kUInt8 ? prm.x_zero - 128 : prm.x_zero;
  dispatch_q8(X.dtype, op, [&](auto tx) {
    dispatch_q8(W.dtype, op, [&](auto tw) {
      using TX = typename decltype(tx)::type;
      using TW = typename decltype(tw)::type;
      qgemm_wmma_kernel<kConv, TX, TW>
          <<<dim3(static_cast<unsigned>(bx), static_cast<unsigned>(by), static_cast<unsigned>(groups)), kTileThreads, 0,
             env.stream>>>(static_cast<const TX*>(X.data), static_cast<const TW*>(W.data), y, g, k, p, mg, prm, zx,
                           vec);
      check_launch(op);
    });
  });
}

}  // namespace

void qconv_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                  GpuEnv& env) {
  const char* op = "kiln.QConv";
  const auto& a = std::get<QConvAttrs>(attrs);
  const Geo g = conv_geo(a, in[0], in[3]);
  bool tc = false;
  const Params prm = params(in, out, a.activation, a.act_alpha, a.act_beta, env, op, &tc);
  if (g.N * g.M * g.O == 0) return;
  if (tc && device_has_int8_mma()) {
    bool pointwise = g.Ks == 1;
    for (int d = 0; d < 3; ++d) pointwise = pointwise && g.stride[d] == 1 && g.pad[d] == 0 && g.in[d] == g.out[d];
    const int vec = pointwise && g.O % 16 == 0 && aligned16(in[0].data) ? kVecB : 0;
    launch_wmma<true>(in[0], in[3], out[0].data, g, g.Cg * g.Ks, g.N * g.O, g.Mg, g.G, prm, vec, env, op);
    return;
  }
  dispatch_q8(in[0].dtype, op, [&](auto tx) {
    dispatch_q8(in[3].dtype, op, [&](auto tw) {
      using TX = typename decltype(tx)::type;
      using TW = typename decltype(tw)::type;
      qconv_generic_kernel<TX, TW><<<ew::blocks_for(g.N * g.M * g.O), ew::kThreads, 0, env.stream>>>(
          static_cast<const TX*>(in[0].data), static_cast<const TW*>(in[3].data), out[0].data, g, prm);
      check_launch(op);
    });
  });
}

void qmatmul_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                    GpuEnv& env) {
  const char* op = "kiln.QMatMul";
  const auto& a = std::get<QMatMulAttrs>(attrs);
  const int64_t N = in[3].shape[0], K = in[3].shape[1];
  const int64_t rows = N > 0 ? out[0].numel() / N : 0;
  bool tc = false;
  const Params prm = params(in, out, a.activation, a.act_alpha, a.act_beta, env, op, &tc);
  if (rows == 0 || N == 0) return;
  Geo g;  // only M (the output's row length) is used
  g.M = N;
  if (tc && device_has_int8_mma()) {
    const int vec = K % 16 == 0 && aligned16(in[0].data) ? kVecB : 0;
    launch_wmma<false>(in[0], in[3], out[0].data, g, K, rows, N, 1, prm, vec, env, op);
    return;
  }
  dispatch_q8(in[0].dtype, op, [&](auto tx) {
    dispatch_q8(in[3].dtype, op, [&](auto tw) {
      using TX = typename decltype(tx)::type;
      using TW = typename decltype(tw)::type;
      qmatmul_generic_kernel<TX, TW><<<ew::blocks_for(rows * N), ew::kThreads, 0, env.stream>>>(
          static_cast<const TX*>(in[0].data), static_cast<const TW*>(in[3].data), out[0].data, rows, K, N, prm);
      check_launch(op);
    });
  });
}

}  // namespace kiln::gpu::quant
