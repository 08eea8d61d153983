// Shared pieces of the GPU training backend's .cu files: element loads and stores through float,
// the float32/float16 dispatch, an elementwise launcher for device lambdas, and the deterministic
// reductions. A reduction never adds floats with atomics: each block sums a fixed chunk, writes its
// partial, and the block that finishes last (elected by an atomic counter, which decides only who
// adds, not the order) adds the partials in chunk order. The results depend on the shapes alone.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/cuda/shared.h"
#include "train/cpu_internal.h"
#include "train/cuda_backend.h"

namespace kiln::train::cuda_detail {

using cpu_detail::require;
using cpu_detail::require_same;
using cpu_detail::window_out;
using gpu::check_cuda;
using gpu::check_launch;

inline constexpr int kThreads = 256;

// One convolution shape's cuDNN descriptors and, once measured, its algorithms (cuda_conv.cu).
struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnMathType_t math = CUDNN_FMA_MATH;  // float32: FMA only (no TF32); float16: tensor cores
  bool fwd_found = false, data_found = false, filter_found = false;
  cudnnConvolutionFwdAlgo_t fwd_algo{};
  cudnnConvolutionBwdDataAlgo_t data_algo{};
  cudnnConvolutionBwdFilterAlgo_t filter_algo{};
  size_t fwd_ws = 0, data_ws = 0, filter_ws = 0;

  ConvPlan() = default;
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;
  ~ConvPlan() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

// The optimizer's view of a list of parameters, on the device (cuda_loss_optim.cu): one entry per
// parameter, then one chunk per block of the update kernel.
struct ParamEntry {
  float* w;
  const float* g;
  float* m;
  float* v;
  int64_t n;
  float decay;  // 1 where weight decay applies, else 0
};
struct ParamChunk {
  int32_t param;
  int32_t part;  // elements [part * kParamChunk, (part + 1) * kParamChunk) of the parameter
};
inline constexpr int64_t kParamChunk = 8192;
struct ParamTable {
  std::vector<uintptr_t> key;  // the pointers, sizes and decay flags it was built for
  void* device = nullptr;      // ParamEntry[params], then ParamChunk[chunks]
  int64_t params = 0, chunks = 0;
  const ParamEntry* entries() const { return static_cast<const ParamEntry*>(device); }
  const ParamChunk* chunk_list() const {
    return reinterpret_cast<const ParamChunk*>(static_cast<const ParamEntry*>(device) + params);
  }
};

__device__ __forceinline__ float ld(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ld(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void st(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }

// Calls fn(T{}) with T = float or __half for an activation dtype.
template <class Fn>
void dispatch_act(DataType t, const char* op, Fn&& fn) {
  switch (t) {
    case DataType::kFloat32: fn(float{}); return;
    case DataType::kFloat16: fn(__half{}); return;
    default:
      throw Error(std::string("train op ") + op + ": the GPU backend computes in float32 or float16, not " +
                  std::string(dtype_name(t)));
  }
}

inline void require_f32(const Tensor& t, const char* op, const char* what) {
  require(!t.defined() || t.dtype() == DataType::kFloat32, op,
          std::string(what) + " must be float32 on the GPU, got " + std::string(dtype_name(t.dtype())));
}

// Blocks of kThreads for a grid-stride loop over n items (at least one block).
inline unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 8192));
}

template <class F>
__global__ void each_kernel(int64_t n, F f) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    f(i);
}

// f(i) for i in [0, n) on the stream; f is a __device__ lambda.
template <class F>
void for_each(cudaStream_t stream, int64_t n, F f, const char* op) {
  if (n <= 0) return;
  each_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, f);
  check_launch(op);
}

// True in every thread of the block that arrives last among `blocks` blocks sharing `counter`;
// that block also resets the counter. Partials written by thread 0 before the call are visible to
// the last block (read them with __ldcg: L1 is not coherent across blocks).
__device__ __forceinline__ bool last_block(unsigned* counter, unsigned blocks) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(counter, 1u) == blocks - 1;
    if (last) *counter = 0;
  }
  __syncthreads();
  return last;
}

// Sum of v over the block (kThreads threads), in a fixed tree order; valid in thread 0.
template <class T>
__device__ __forceinline__ T block_sum(T v) {
  __shared__ T red[kThreads];
  red[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) red[threadIdx.x] += red[threadIdx.x + stride];
    __syncthreads();
  }
  T total = red[0];
  __syncthreads();  // red may be reused by the next call
  return total;
}

// Per-channel sums over [N, C, S] data (S = H * W, or 1 for [N, C]): K quantities per element, in
// double. Channel c's N * S elements are cut into `chunks` fixed ranges of `chunk` elements.
struct ChannelGrid {
  int64_t n = 0, c = 0, s = 1;
  int64_t chunks = 1, chunk = 1;
  __host__ __device__ int64_t count() const { return n * s; }  // elements per channel
};

inline ChannelGrid channel_grid(int64_t n, int64_t c, int64_t s) {
  ChannelGrid g{n, c, s};
  // About 4096 elements per block, and no more blocks than it takes to fill the GPU a few times.
  const int64_t per_channel = std::max<int64_t>(g.count(), 1);
  g.chunks = std::clamp<int64_t>((per_channel + 4095) / 4096, 1, std::max<int64_t>(1, 1024 / std::max<int64_t>(c, 1)));
  g.chunk = (per_channel + g.chunks - 1) / g.chunks;
  return g;
}

// load(i, ch, v) fills v[0..K) for element i (an index into x) of channel ch; finish(ch, sums) runs
// once per channel (one thread) with the channel's K totals.
template <int K, class Load, class Finish>
__global__ void channel_sums_kernel(ChannelGrid g, Load load, Finish finish, double* partial, unsigned* counters) {
  const int64_t ch = blockIdx.y, part = blockIdx.x;
  const int64_t begin = part * g.chunk, end = std::min(g.count(), begin + g.chunk);
  double acc[K] = {};
  for (int64_t k = begin + threadIdx.x; k < end; k += kThreads) {
    const int64_t n = k / g.s, i = (n * g.c + ch) * g.s + (k - n * g.s);
    double v[K];
    load(i, ch, v);
    for (int q = 0; q < K; ++q) acc[q] += v[q];
  }
  double* mine = partial + (ch * g.chunks + part) * K;
  for (int q = 0; q < K; ++q) {
    const double total = block_sum(acc[q]);
    if (threadIdx.x == 0) mine[q] = total;
  }
  if (!last_block(counters + ch, static_cast<unsigned>(g.chunks)) || threadIdx.x != 0) return;
  double sums[K] = {};
  for (int64_t p = 0; p < g.chunks; ++p)
    for (int q = 0; q < K; ++q) sums[q] += __ldcg(partial + (ch * g.chunks + p) * K + q);
  finish(ch, sums);
}

template <int K, class Load, class Finish>
void channel_sums(CudaBackend& be, const ChannelGrid& g, Load load, Finish finish, const char* op) {
  if (g.c <= 0) return;
  require(g.c <= 65535, op, "more than 65535 channels");
  auto* partial = static_cast<double*>(be.scratch(CudaBackend::Slot::kPartials, sizeof(double) * K * g.c * g.chunks));
  unsigned* counters = be.counters(g.c);
  channel_sums_kernel<K>
      <<<dim3(static_cast<unsigned>(g.chunks), static_cast<unsigned>(g.c)), kThreads, 0, be.stream()>>>(
          g, load, finish, partial, counters);
  check_launch(op);
}

}  // namespace kiln::train::cuda_detail
