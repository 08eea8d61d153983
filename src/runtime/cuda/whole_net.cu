// The whole-network kernel: an engine that whole_net_plan.h accepts runs as one launch, walking the
// layer table. Sample n is one thread block cluster (Hopper; one block elsewhere): the blocks of the
// cluster split each layer's outputs into contiguous shares and store every output they compute into
// the shared memory of all of them (distributed shared memory), so that each block holds the whole
// activation for the next layer; a cluster barrier separates the layers. The last layer writes the
// engine output to global memory, each block its share. Every block's dynamic shared memory holds:
//   [0, region)                 the activations: each layer reads its input at one end and writes
//                               its output at the other (the plan alternates the ends);
//   [scratch_off, +4 KiB)       partial sums of a dense layer whose W is [K, M] (split reduction);
//   [layer_off, +sizeof layer)  the block's copy of the layer it runs (read by every thread).
// Each block first copies the engine input into its low end. Weights are read through the read-only
// cache.
//
// Every layer computes in float and rounds once to its output type, with the CPU kernels' formulas:
// the activations of core/epilogue.h (NaN passes Relu and Clip), MaxPool's "a number replaces NaN,
// an empty window gives the lowest value", GlobalMaxPool's NaN propagation, GlobalAveragePool's sum
// in double, AveragePool's count (with or without the padding). Sums of products run in another
// order than the CPU's GEMM, so float32 results agree to rounding, not bit for bit.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "core/epilogue.h"
#include "runtime/cuda/dependent_launch.cuh"
#include "runtime/cuda/gpu_kernels.h"
#include "runtime/cuda/whole_net.h"

namespace kiln::gpu {

namespace {

namespace coop = cooperative_groups;

constexpr int kThreads = kWholeNetThreads;
constexpr int kWarps = kThreads / 32;

// ---- elements: float in registers, the tensor's type in memory -------------------------------
template <class T>
__device__ __forceinline__ float to_f(T v) {
  if constexpr (std::is_same_v<T, __half>)
    return __half2float(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(v);
  else
    return v;
}
template <class T>
__device__ __forceinline__ T from_f(float v) {
  if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(v);
  else
    return v;
}
// A weight, through the read-only data cache.
template <class T>
__device__ __forceinline__ float ldw(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return __ldg(p);
  } else {
    const unsigned short bits = __ldg(reinterpret_cast<const unsigned short*>(p));
    if constexpr (std::is_same_v<T, __half>)
      return __half2float(__ushort_as_half(bits));
    else
      return __bfloat162float(__ushort_as_bfloat16(bits));
  }
}

// fn(T{}) with T the device type of a float DataType (the plan admits only these three).
template <class Fn>
__device__ __forceinline__ void with_type(DataType t, Fn&& fn) {
  if (t == DataType::kFloat16)
    fn(__half{});
  else if (t == DataType::kBFloat16)
    fn(__nv_bfloat16{});
  else
    fn(float{});
}

// The blocks of one sample's cluster: this block's rank and their number (1 without clusters).
struct Team {
  int rank = 0, size = 1;
  // This block's share [*lo, *hi) of n items: contiguous, the sizes differ by at most one.
  __device__ void share(int n, int* lo, int* hi) const {
    const int q = n / size, r = n % size;
    *lo = rank * q + min(rank, r);
    *hi = *lo + q + (rank < r ? 1 : 0);
  }
};

// Where a layer's outputs go: y in this block's shared memory, and with `spread` the same offset in
// every block of the cluster; or y in global memory (the last layer).
template <class T>
struct Out {
  T* y;
  bool spread;
  __device__ __forceinline__ void put(int i, T v) const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (spread) {
      const coop::cluster_group c = coop::this_cluster();
      for (unsigned r = 0; r < c.num_blocks(); ++r) *c.map_shared_rank(y + i, r) = v;
      return;
    }
#endif
    y[i] = v;
  }
};

__device__ __forceinline__ float activate(const WnLayer& l, float v) {
  return epilogue::activate<float>(l.act, v, l.act_alpha, l.act_beta);
}

// ---- layers: thread t of a block takes outputs lo + t, lo + t + kThreads, ... of its share -------

// The taps k in [0, K) of a window starting at `start` (stride d) that land in [0, in): [*lo, *hi).
__device__ __forceinline__ void inside_taps(int start, int in, int k, int d, int* lo, int* hi) {
  *lo = start < 0 ? (-start + d - 1) / d : 0;
  *hi = min(k, (in - start + d - 1) / d);  // <= 0 when the window starts past the end
}

// R output channels of one group at one position per thread: each input element loaded is used R
// times (the load, not the multiply, is what a direct convolution waits for). Channel-block major,
// so that the threads of a warp share the channels and read each weight as one broadcast.
template <class T, int R>
__device__ __forceinline__ void conv_layer(const WnLayer& l, const T* x, Out<T> y, const Team& team) {
  const int C = l.c, H = l.h, W = l.w, M = l.m, OW = l.ow, KH = l.kh, KW = l.kw, dh = l.dh, dw = l.dw;
  const int cg = C / l.groups, mg = M / l.groups, plane = l.oh * OW, wstride = cg * KH * KW;
  const bool nhwc = l.nhwc;
  const T* __restrict__ wt = static_cast<const T*>(l.weight);
  const T* __restrict__ bias = static_cast<const T*>(l.bias);
  int lo, hi;
  team.share(M / R * plane, &lo, &hi);
  for (int o = lo + threadIdx.x; o < hi; o += kThreads) {
    const int mb = o / plane, p = o - mb * plane, oy = p / OW, ox = p - oy * OW;
    const int m0 = mb * R, c0 = m0 / mg * cg, iy0 = oy * l.sh - l.ph, ix0 = ox * l.sw - l.pw;
    int ky0, ky1, kx0, kx1;
    inside_taps(iy0, H, KH, dh, &ky0, &ky1);
    inside_taps(ix0, W, KW, dw, &kx0, &kx1);
    const T* wm = wt + static_cast<size_t>(m0) * wstride;
    float acc[R] = {};
    if (!nhwc) {  // X [C, H, W], W [M, cg, KH, KW]
      for (int ci = 0; ci < cg; ++ci) {
        const T* xc = x + (c0 + ci) * H * W + ix0;
        const T* wc = wm + ci * KH * KW;
        for (int ky = ky0; ky < ky1; ++ky) {
          const T* xr = xc + (iy0 + ky * dh) * W;
          const T* wr = wc + ky * KW;
          for (int kx = kx0; kx < kx1; ++kx) {
            const float v = to_f(xr[kx * dw]);
#pragma unroll
            for (int r = 0; r < R; ++r) acc[r] += v * ldw(wr + r * wstride + kx);
          }
        }
      }
    } else {  // X [H, W, C], W [M, KH, KW, cg]
      for (int ky = ky0; ky < ky1; ++ky)
        for (int kx = kx0; kx < kx1; ++kx) {
          const T* xp = x + ((iy0 + ky * dh) * W + ix0 + kx * dw) * C + c0;
          const T* wp = wm + (ky * KW + kx) * cg;
          for (int ci = 0; ci < cg; ++ci) {
            const float v = to_f(xp[ci]);
#pragma unroll
            for (int r = 0; r < R; ++r) acc[r] += v * ldw(wp + r * wstride + ci);
          }
        }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int m = m0 + r;
      const float v = bias ? acc[r] + ldw(bias + m) : acc[r];
      y.put(nhwc ? p * M + m : m * plane + p, from_f<T>(activate(l, v)));
    }
  }
}

// Channels per thread for conv_layer: 2 where they divide a group and leave at least half the team's
// threads busy, else 1. (4 would save more loads, but needs more than the 64 registers a thread of
// a 1024-thread block has: it spilled.)
__device__ __forceinline__ int conv_block(const WnLayer& l, const Team& team) {
  const int mg = l.m / l.groups, outputs = l.m * l.oh * l.ow;
  return mg % 2 == 0 && outputs / 2 >= kThreads * team.size / 2 ? 2 : 1;
}

// Taps of a window inside the padded extent [-pad, in + pad_end) (AveragePool's count_include_pad).
__device__ __forceinline__ int padded_taps(int start, int in, int pad_end, int k, int d) {
  const int a = in + pad_end - start;
  const int q = a >= 0 ? (a + d - 1) / d : -((-a) / d);
  return max(0, min(k, q));
}

template <class T>
__device__ void pool_layer(const WnLayer& l, const T* x, Out<T> y, const Team& team) {
  const int C = l.c, H = l.h, W = l.w, OW = l.ow, KH = l.kh, KW = l.kw, plane = l.oh * OW;
  const bool nhwc = l.nhwc;
  auto at = [&](int c, int iy, int ix) { return nhwc ? (iy * W + ix) * C + c : (c * H + iy) * W + ix; };
  int lo, hi;
  team.share(C * plane, &lo, &hi);
  for (int o = lo + threadIdx.x; o < hi; o += kThreads) {
    const int c = nhwc ? o % C : o / plane, p = nhwc ? o / C : o % plane, oy = p / OW, ox = p - oy * OW;
    float r = 0.0f;
    if (l.pool == WnPool::kGlobalMax) {
      r = to_f(x[at(c, 0, 0)]);
      for (int i = 1; i < H * W && r == r; ++i) {
        const float v = to_f(x[at(c, i / W, i % W)]);
        if (v > r || v != v) r = v;
      }
    } else if (l.pool == WnPool::kGlobalAverage) {
      double s = 0;  // as the CPU kernel: a long plane summed in float drifts
      for (int i = 0; i < H * W; ++i) s += static_cast<double>(to_f(x[at(c, i / W, i % W)]));
      r = static_cast<float>(s / static_cast<double>(H * W));
    } else {
      const bool is_max = l.pool == WnPool::kMax;
      const int sy = oy * l.sh - l.ph, sx = ox * l.sw - l.pw;
      float best = -FLT_MAX, sum = 0.0f;
      int count = 0;
      for (int ky = 0; ky < KH; ++ky) {
        const int iy = sy + ky * l.dh;
        if (iy < 0 || iy >= H) continue;
        for (int kx = 0; kx < KW; ++kx) {
          const int ix = sx + kx * l.dw;
          if (ix < 0 || ix >= W) continue;
          const float v = to_f(x[at(c, iy, ix)]);
          // The first maximum wins; a number replaces NaN, never the other way round.
          if (is_max && (count == 0 || v > best || (best != best && v == v))) best = v;
          sum += v;
          ++count;
        }
      }
      if (is_max) {
        r = best;
      } else {
        const int div = l.count_include_pad
                            ? padded_taps(sy, H, l.ph_end, KH, l.dh) * padded_taps(sx, W, l.pw_end, KW, l.dw)
                            : count;
        r = div > 0 && count > 0 ? sum / static_cast<float>(div) : 0.0f;
      }
    }
    y.put(o, from_f<T>(r));
  }
}

// y[j] = act(alpha * sum_k x[k] W(k, j) + beta * bias(n, j)). `part`: kThreads floats of scratch.
template <class T>
__device__ void dense_layer(const WnLayer& l, const T* x, Out<T> y, int n, float* part, const Team& team) {
  const int K = l.c, M = l.m;
  const T* __restrict__ wt = static_cast<const T*>(l.weight);
  const T* __restrict__ bias = static_cast<const T*>(l.bias);
  auto finish = [&](int j, float acc) {
    float v = l.alpha * acc;
    if (bias) v += l.beta * ldw(bias + n * l.bias_row + j * l.bias_col);
    y.put(j, from_f<T>(activate(l, v)));
  };
  const int tid = threadIdx.x, lane = tid & 31;
  int lo, hi;
  team.share(M, &lo, &hi);
  if (l.trans_b) {  // W [M, K]: a warp per output, its lanes along the row (coalesced), then a shuffle sum
    for (int j = lo + (tid >> 5); j < hi; j += kWarps) {
      const T* wr = wt + static_cast<size_t>(j) * K;
      float acc = 0.0f;
      for (int k = lane; k < K; k += 32) acc += to_f(x[k]) * ldw(wr + k);
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
      if (lane == 0) finish(j, acc);
    }
    return;
  }
  // W [K, M]: consecutive threads take consecutive columns of the share (coalesced). With fewer
  // columns than threads, `slices` groups of threads split K and the partial sums meet in `part`.
  const int cols = hi - lo;
  if (cols == 0) return;  // the same for every thread of the block
  const int slices = cols >= kThreads ? 1 : min(32, kThreads / cols);
  if (slices == 1) {
    for (int j = lo + tid; j < hi; j += kThreads) {
      float acc = 0.0f;
      for (int k = 0; k < K; ++k) acc += to_f(x[k]) * ldw(wt + static_cast<size_t>(k) * M + j);
      finish(j, acc);
    }
    return;
  }
  if (tid < slices * cols) {
    const int c = tid % cols, s = tid / cols;
    float acc = 0.0f;
    for (int k = s; k < K; k += slices) acc += to_f(x[k]) * ldw(wt + static_cast<size_t>(k) * M + lo + c);
    part[s * cols + c] = acc;
  }
  __syncthreads();
  if (tid < cols) {
    float acc = 0.0f;
    for (int s = 0; s < slices; ++s) acc += part[s * cols + tid];
    finish(lo + tid, acc);
  }
}

template <class Ti, class To>
__device__ void unary_layer(const WnLayer& l, const Ti* x, Out<To> y, const Team& team) {
  int lo, hi;
  team.share(l.in_elems, &lo, &hi);
  for (int i = lo + threadIdx.x; i < hi; i += kThreads) y.put(i, from_f<To>(activate(l, to_f(x[i]))));
}

// The bits are moved as they are: B is an unsigned type of the element's size.
template <class B>
__device__ void transpose_layer(const WnLayer& l, const B* x, Out<B> y, const Team& team) {
  const int in_stride[4] = {l.dims[1] * l.dims[2] * l.dims[3], l.dims[2] * l.dims[3], l.dims[3], 1};
  int out_dims[4], stride[4];  // per output axis: its size, and the input stride it walks
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int a = l.perm[i];
    out_dims[i] = a == 0 ? l.dims[0] : a == 1 ? l.dims[1] : a == 2 ? l.dims[2] : l.dims[3];
    stride[i] = a == 0 ? in_stride[0] : a == 1 ? in_stride[1] : a == 2 ? in_stride[2] : 1;
  }
  int lo, hi;
  team.share(l.out_elems, &lo, &hi);
  for (int o = lo + threadIdx.x; o < hi; o += kThreads) {
    int rest = o, off = 0;
#pragma unroll
    for (int i = 3; i >= 0; --i) {
      off += rest % out_dims[i] * stride[i];
      rest /= out_dims[i];
    }
    y.put(o, x[off]);
  }
}

// One layer: its input x in this block's shared memory; its output y there too (spread to the
// cluster) unless `last`, when y is the engine output in global memory.
__device__ void run_layer(const WnLayer& l, const unsigned char* x, unsigned char* y, bool last, int n, float* part,
                          const Team& team) {
  const bool spread = !last && team.size > 1;
  switch (l.op) {
    case WnOp::kConv:
      with_type(l.in_dtype, [&](auto t) {
        using T = decltype(t);
        const T* xt = reinterpret_cast<const T*>(x);
        const Out<T> yt{reinterpret_cast<T*>(y), spread};
        if (conv_block(l, team) == 2)
          conv_layer<T, 2>(l, xt, yt, team);
        else
          conv_layer<T, 1>(l, xt, yt, team);
      });
      return;
    case WnOp::kPool:
      with_type(l.in_dtype, [&](auto t) {
        using T = decltype(t);
        pool_layer<T>(l, reinterpret_cast<const T*>(x), {reinterpret_cast<T*>(y), spread}, team);
      });
      return;
    case WnOp::kDense:
      with_type(l.in_dtype, [&](auto t) {
        using T = decltype(t);
        dense_layer<T>(l, reinterpret_cast<const T*>(x), {reinterpret_cast<T*>(y), spread}, n, part, team);
      });
      return;
    case WnOp::kUnary:
      with_type(l.in_dtype, [&](auto ti) {
        with_type(l.out_dtype, [&](auto to) {
          using Ti = decltype(ti);
          using To = decltype(to);
          unary_layer<Ti, To>(l, reinterpret_cast<const Ti*>(x), {reinterpret_cast<To*>(y), spread}, team);
        });
      });
      return;
    case WnOp::kTranspose:
      if (l.in_dtype == DataType::kFloat32)
        transpose_layer<uint32_t>(l, reinterpret_cast<const uint32_t*>(x), {reinterpret_cast<uint32_t*>(y), spread},
                                  team);
      else
        transpose_layer<uint16_t>(l, reinterpret_cast<const uint16_t*>(x), {reinterpret_cast<uint16_t*>(y), spread},
                                  team);
      return;
  }
}

// Every block of the team has finished the layer (and its stores into the others have landed).
__device__ __forceinline__ void team_sync(const Team& team) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (team.size > 1) {
    coop::this_cluster().sync();
    return;
  }
#endif
  __syncthreads();
}

// One sample's input into the low end of the shared region, 16 bytes at a time where aligned.
__device__ void copy_in(unsigned char* dst, const unsigned char* src, int bytes) {
  const auto a = reinterpret_cast<uintptr_t>(src) | static_cast<uintptr_t>(bytes);
  if (a % 16 == 0) {
    for (int i = threadIdx.x; i < bytes / 16; i += kThreads)
      reinterpret_cast<uint4*>(dst)[i] = __ldg(reinterpret_cast<const uint4*>(src) + i);
  } else if (a % 4 == 0) {
    for (int i = threadIdx.x; i < bytes / 4; i += kThreads)
      reinterpret_cast<uint32_t*>(dst)[i] = __ldg(reinterpret_cast<const uint32_t*>(src) + i);
  } else {
    for (int i = threadIdx.x; i < bytes; i += kThreads) dst[i] = src[i];
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    whole_net_kernel(const WnLayer* __restrict__ table, int layers, const unsigned char* __restrict__ input,
                     int in_bytes, unsigned char* __restrict__ output, uint32_t scratch_off, uint32_t layer_off) {
  extern __shared__ __align__(16) unsigned char smem[];
  Team team;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const coop::cluster_group cluster = coop::this_cluster();
  team.rank = static_cast<int>(cluster.block_rank());
  team.size = static_cast<int>(cluster.num_blocks());
#endif
  const int n = static_cast<int>(blockIdx.x) / team.size;
  copy_in(smem, input + static_cast<size_t>(n) * in_bytes, in_bytes);
  // Also: every block of the cluster has started, before any stores into its shared memory.
  team_sync(team);
  WnLayer& l = *reinterpret_cast<WnLayer*>(smem + layer_off);
  float* part = reinterpret_cast<float*>(smem + scratch_off);
  constexpr int kWords = sizeof(WnLayer) / sizeof(uint32_t);
  static_assert(sizeof(WnLayer) % sizeof(uint32_t) == 0 && kWords <= kThreads);
  for (int i = 0; i < layers; ++i) {
    if (threadIdx.x < kWords)
      reinterpret_cast<uint32_t*>(&l)[threadIdx.x] = reinterpret_cast<const uint32_t*>(table + i)[threadIdx.x];
    __syncthreads();  // the layer is staged
    const bool last = i + 1 == layers;
    const size_t out_sample = static_cast<size_t>(l.out_elems) * (l.out_dtype == DataType::kFloat32 ? 4 : 2);
    unsigned char* y = last ? output + n * out_sample : smem + l.out_off;
    run_layer(l, smem + l.in_off, y, last, n, part, team);
    // The layer's output is complete in every block, and every thread is done with the layer before
    // the next one overwrites it. (The last layer stores nothing into shared memory, so a block may
    // leave while the others finish.)
    if (!last) team_sync(team);
  }
}

// The launch's shape: plan.batch clusters of `cluster` blocks.
cudaLaunchConfig_t launch_config(const WholeNetPlan& plan, int cluster, cudaLaunchAttribute* attr,
                                 cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(plan.batch * cluster));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = plan.smem_bytes;
  cfg.stream = stream;
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = static_cast<unsigned>(cluster);
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = cluster > 1 ? 1 : 0;
  return cfg;
}

}  // namespace

size_t whole_net_max_smem(int device) {
  int bytes = 0;
  check_cuda(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
             "reading the GPU's shared memory size");
  return static_cast<size_t>(bytes);
}

// Clusters of 8 blocks (the portable maximum; 16 measured the same on LeNet-5 at batch 1 and took
// twice as long at batch 8 on an H100), or fewer where 8 do not fit; 1 before Hopper, and where the
// kernel runs code compiled for an older GPU (which has no cluster code in it).
int WholeNet::cluster_size(int device) const {
  if (!runs_sm90_code<whole_net_kernel>(device)) return 1;
  for (int s = 8; s > 1; s /= 2) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = launch_config(plan_, s, &attr, nullptr);
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, whole_net_kernel, &cfg) == cudaSuccess && clusters > 0) return s;
    (void)cudaGetLastError();  // not a sticky error: forget it
  }
  return 1;
}

WholeNet::WholeNet(WholeNetPlan plan, const std::vector<void*>& data) : plan_(std::move(plan)) {
  for (WnLayer& l : plan_.layers) {
    if (l.w_tensor >= 0) l.weight = data[static_cast<size_t>(l.w_tensor)];
    if (l.b_tensor >= 0) l.bias = data[static_cast<size_t>(l.b_tensor)];
  }
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  // Every context asks for the device's maximum, so that contexts of different engines never lower
  // each other's limit (the attribute belongs to the kernel, not to a launch).
  check_cuda(cudaFuncSetAttribute(whole_net_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(whole_net_max_smem(device))),
             "allowing the whole-network kernel its shared memory");
  cluster_ = cluster_size(device);
  const size_t bytes = plan_.layers.size() * sizeof(WnLayer);
  table_ = static_cast<WnLayer*>(device_malloc(bytes, "the whole-network layer table", &table_budget_));
  table_bytes_ = bytes;
  const cudaError_t err = cudaMemcpy(table_, plan_.layers.data(), bytes, cudaMemcpyHostToDevice);
  if (err != cudaSuccess) {
    device_free(table_, table_bytes_, table_budget_);
    check_cuda(err, "uploading the whole-network layer table");
  }
}

WholeNet::~WholeNet() { device_free(table_, table_bytes_, table_budget_); }

void WholeNet::launch(const void* input, void* output, cudaStream_t stream) const {
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = launch_config(plan_, cluster_, &attr, stream);
  const cudaError_t err = cudaLaunchKernelEx(
      &cfg, whole_net_kernel, static_cast<const WnLayer*>(table_), static_cast<int>(plan_.layers.size()),
      static_cast<const unsigned char*>(input), plan_.in_bytes, static_cast<unsigned char*>(output),
      plan_.scratch_off, plan_.layer_off);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // so that a later check_launch does not report it again
    check_cuda(err, "launching the whole-network kernel");
  }
}

}  // namespace kiln::gpu
