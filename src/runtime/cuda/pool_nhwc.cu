// NhwcMaxPool and NhwcAveragePool on the GPU: pooling over channels-last tensors X [N, S..., C] (1 to 3
// spatial axes), Y [N, O..., C]. One thread per output position and group of V channels (16 bytes
// where C and the pointers allow), so a warp reads consecutive channels of each tap. The window of
// output position o on an axis covers image positions o * stride - pad_begin + j * dilation; the
// taps inside the image, and for AveragePool's count_include_pad the taps inside the padded extent,
// are counted exactly as the CPU kernel counts them (runtime/cpu/ops/nn_pool.cpp), as is the
// maximum (the first wins; a number replaces NaN) and the value of a window with no input element.
#include <limits>

#include "core/infer/nn_geometry.h"
#include "runtime/cuda/pool_internal.cuh"

namespace kiln::gpu::pool {

namespace {

constexpr int kMaxRank = 3;

struct NhwcPool {
  int rank = 0;
  bool is_max = true, include_pad = false;
  int64_t channels = 0, in_size = 0, out_size = 0;  // in_size, out_size: spatial positions
  int64_t in[kMaxRank] = {}, out[kMaxRank] = {}, kernel[kMaxRank] = {}, strides[kMaxRank] = {};
  int64_t dilations[kMaxRank] = {}, pad_begin[kMaxRank] = {}, pad_end[kMaxRank] = {};
};

__device__ __forceinline__ int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
__device__ __forceinline__ int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ int64_t imax(int64_t a, int64_t b) { return a < b ? b : a; }

template <class T, int V>
__global__ void __launch_bounds__(kThreads)
    nhwc_pool_kernel(NhwcPool p, const T* __restrict__ x, T* __restrict__ y, int64_t items) {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int64_t groups = p.channels / V;
  const int64_t step = ew::grid_threads();
  for (int64_t item = ew::global_thread(); item < items; item += step) {
    const int64_t group = item % groups, pos = (item / groups) % p.out_size, img = item / (groups * p.out_size);
    // Per axis: the first inside tap's image index, the inside taps, the taps inside the padding.
    int64_t first[kMaxRank], count[kMaxRank], padded = 1;
    int64_t rest = pos;
    bool empty = false;
    for (int d = p.rank - 1; d >= 0; --d) {
      const int64_t o = rest % p.out[d];
      rest /= p.out[d];
      const int64_t s = o * p.strides[d] - p.pad_begin[d], dl = p.dilations[d], k = p.kernel[d];
      const int64_t jlo = s < 0 ? ceil_div(-s, dl) : 0;
      const int64_t jhi = imax(jlo, imin(k, ceil_div(p.in[d] - s, dl)));
      first[d] = s + jlo * dl;
      count[d] = jhi - jlo;
      empty |= count[d] == 0;
      padded *= imax(0, imin(k, ceil_div(p.in[d] + p.pad_end[d] - s, dl)));
    }
    C acc[V];
    bool seen = false;
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = p.is_max ? std::numeric_limits<C>::lowest() : C(0);
    int64_t taps = 0;
    if (!empty) {
      int64_t j[kMaxRank] = {0, 0, 0};
      for (;;) {
        int64_t off = 0;
        for (int d = 0; d < p.rank; ++d) off = off * p.in[d] + first[d] + j[d] * p.dilations[d];
        const auto v = reinterpret_cast<const ew::Vec<T, V>*>(x + ((img * p.in_size + off) * p.channels))[group];
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const C c = static_cast<C>(ew::load(v.v[k]));
          if (!p.is_max)
            acc[k] += c;
          else if (!seen || c > acc[k] || (acc[k] != acc[k] && c == c))
            acc[k] = c;
        }
        seen = true;
        ++taps;
        int d = p.rank - 1;
        for (; d >= 0; --d) {
          if (++j[d] < count[d]) break;
          j[d] = 0;
        }
        if (d < 0) break;
      }
    }
    ew::Vec<T, V> r;
    const int64_t div = p.include_pad ? padded : taps;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      C v = acc[k];
      if (!p.is_max) v = div > 0 && taps > 0 ? v / static_cast<C>(div) : C(0);
      r.v[k] = ew::store<T>(v);
    }
    reinterpret_cast<ew::Vec<T, V>*>(y + (img * p.out_size + pos) * p.channels)[group] = r;
  }
}

void nhwc_pool(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
               GpuEnv& env) {
  const char* op = op_name(kind).data();
  const auto& a = std::get<PoolAttrs>(attrs);
  const TensorView &X = in[0], &Y = out[0];
  if (Y.numel() == 0) return;
  const int rank = static_cast<int>(X.rank()) - 2;
  if (rank < 1 || rank > kMaxRank)
    throw Error(std::string(op) + ": the CUDA backend pools channels-last tensors over 1 to 3 spatial axes");
  std::vector<int64_t> first{X.shape[0], X.shape.back()};  // X as [N, C, S...] for the geometry
  first.insert(first.end(), X.shape.begin() + 1, X.shape.end() - 1);
  const kiln::nn::WindowGeometry g = kiln::nn::pool_geometry(a, first);
  NhwcPool p;
  p.rank = rank;
  p.is_max = kind == OpKind::kNhwcMaxPool;
  p.include_pad = a.count_include_pad == 1;
  p.channels = X.shape.back();
  p.in_size = p.out_size = 1;
  for (int d = 0; d < rank; ++d) {
    p.in[d] = g.in[static_cast<size_t>(d)];
    p.out[d] = g.out[static_cast<size_t>(d)];
    p.kernel[d] = g.kernel[static_cast<size_t>(d)];
    p.strides[d] = g.strides[static_cast<size_t>(d)];
    p.dilations[d] = g.dilations[static_cast<size_t>(d)];
    p.pad_begin[d] = g.pads[static_cast<size_t>(d)];
    p.pad_end[d] = g.pads[static_cast<size_t>(rank + d)];
    p.in_size *= p.in[d];
    p.out_size *= p.out[d];
  }
  auto launch = [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = ew::kVecBytes / sizeof(T);
    const bool vec =
        p.channels % V == 0 && ew::aligned_to(X.data, ew::kVecBytes) && ew::aligned_to(Y.data, ew::kVecBytes);
    const int64_t items = Y.numel() / (vec ? V : 1);
    if (vec)
      nhwc_pool_kernel<T, V><<<ew::blocks_for(items), kThreads, 0, env.stream>>>(p, static_cast<const T*>(X.data),
                                                                                 static_cast<T*>(Y.data), items);
    else
      nhwc_pool_kernel<T, 1><<<ew::blocks_for(items), kThreads, 0, env.stream>>>(p, static_cast<const T*>(X.data),
                                                                                 static_cast<T*>(Y.data), items);
  };
  ew::dispatch_ew_float(X.dtype, op, launch);
  check_launch(op);
}

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kNhwcAveragePool, nhwc_pool},
    {OpKind::kNhwcMaxPool, nhwc_pool},
};

}  // namespace

std::span<const GpuKernelEntry> nhwc_entries() { return kEntries; }

}  // namespace kiln::gpu::pool
