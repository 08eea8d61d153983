// NhwcMaxPool and NhwcAveragePool on the GPU: pooling over channels-last tensors X [N, S..., C] (1 to 3
// spatial axes), Y [N, O..., C]. One thread per output position and group of V channels (16 bytes
// where C and the pointers allow), so a warp reads consecutive channels of each tap. The window of
// output position o on an axis covers image positions o * stride - pad_begin + j * dilation; the
// taps inside the image, and for AveragePool's count_include_pad the taps inside the padded extent,
// are counted exactly as the CPU kernel counts them (runtime/cpu/pool/window.cpp), as is the
// maximum (the first wins; a number replaces NaN) and the value of a window with no input element.
// NhwcMaxPool also takes int8 and uint8 (the INT8 engines' MaxPool after a quantized stem), compared
// in their own type as the CPU does, so that an empty window gives the type's lowest value. With
// 16-byte vectors, 8-bit and float16 maxima are packed SIMD instructions.
#include <limits>
#include <type_traits>

#include "core/infer/nn_geometry.h"
#include "core/layout.h"
#include "runtime/cuda/dependent_launch.cuh"
#include "runtime/cuda/pool/pool_internal.cuh"
#include "runtime/cuda/mma.cuh"

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

template <class I>
__device__ __forceinline__ I ceil_div(I a, I b) {
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}
template <class I>
__device__ __forceinline__ I imin(I a, I b) {
  return a < b ? a : b;
}
template <class I>
__device__ __forceinline__ I imax(I a, I b) {
  return a < b ? b : a;
}

// Packed maxima, per 32-bit word: four 8-bit integers (__vmaxs4 / __vmaxu4) or two float16
// (__hmax2, which returns the number where one side is NaN, as the CPU's "a number replaces NaN"):
// one instruction per 4 or 2 channels instead of a compare and a select per channel, which left the
// int8 MaxPool after ResNet-50's stem compute-bound (84% of the SMs' issue rate, 14% of DRAM's).
// Integer maxima are exact; float16 ones may give +0 where the CPU keeps a -0 seen first (equal
// values) and a canonical NaN for a window of NaNs.
template <class T>
inline constexpr bool kPackedMax = std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t> || std::is_same_v<T, __half>;

template <class T>
__device__ __forceinline__ uint32_t packed_max(uint32_t a, uint32_t b) {
  if constexpr (std::is_same_v<T, int8_t>) {
    return __vmaxs4(a, b);
  } else if constexpr (std::is_same_v<T, uint8_t>) {
    return __vmaxu4(a, b);
  } else {
    __half2 x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    const __half2 m = __hmax2(x, y);
    uint32_t r;
    memcpy(&r, &m, 4);
    return r;
  }
}
// The packed maxima's start: the lowest 8-bit value (also an empty window's), or float16 NaNs
// (which the first tap replaces; an empty window takes the generic path's lowest value).
template <class T>
inline constexpr uint32_t kPackedStart = std::is_same_v<T, int8_t> ? 0x80808080u
                                                                   : (std::is_same_v<T, uint8_t> ? 0u : 0x7e007e00u);

// I: the index type, int32_t where every index fits (64-bit division costs several times more, and
// the index arithmetic, not the memory traffic, bounded this kernel with int64_t indices). R: the
// spatial rank, a template argument so that the per-axis loops unroll and their arrays stay in
// registers (ResNet-50's float16 MaxPool went from 0.49 to 0.33 ms on an H200).
template <class T, int V, class I, int R>
__global__ void __launch_bounds__(kThreads)
    nhwc_pool_kernel(NhwcPool p, const T* __restrict__ x, T* __restrict__ y, I items) {
  using C = std::conditional_t<std::is_same_v<T, double>, double, std::conditional_t<ew::kIsFloatDev<T>, float, T>>;
  const I groups = static_cast<I>(p.channels / V), out_size = static_cast<I>(p.out_size);
  const I step = static_cast<I>(ew::grid_threads());
  for (I item = static_cast<I>(ew::global_thread()); item < items; item += step) {
    const I group = item % groups, pos = (item / groups) % out_size, img = item / (groups * out_size);
    // Per axis: the first inside tap's image index, the inside taps, the taps inside the padding.
    I first[R], count[R];
    int64_t padded = 1;  // may exceed 32 bits for a huge kernel over a tiny input
    I rest = pos;
    bool empty = false;
#pragma unroll
    for (int d = R - 1; d >= 0; --d) {
      const I od = static_cast<I>(p.out[d]);
      const I o = rest % od;
      rest /= od;
      const I s = o * static_cast<I>(p.strides[d]) - static_cast<I>(p.pad_begin[d]);
      const I dl = static_cast<I>(p.dilations[d]), k = static_cast<I>(p.kernel[d]), n = static_cast<I>(p.in[d]);
      const I jlo = s < 0 ? ceil_div<I>(-s, dl) : 0;
      const I jhi = imax<I>(jlo, imin<I>(k, ceil_div<I>(n - s, dl)));
      first[d] = s + jlo * dl;
      count[d] = jhi - jlo;
      empty |= count[d] == 0;
      padded *= static_cast<int64_t>(imax<I>(0, imin<I>(k, ceil_div<I>(n + static_cast<I>(p.pad_end[d]) - s, dl))));
    }
    constexpr bool kPacked = kPackedMax<T> && V * sizeof(T) == 16;
    uint4 packed = make_uint4(kPackedStart<T>, kPackedStart<T>, kPackedStart<T>, kPackedStart<T>);
    C acc[V];
    bool seen = false;
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = p.is_max ? std::numeric_limits<C>::lowest() : C(0);
    I taps = 0;
    if (!empty) {
      I j[R] = {};
      for (;;) {
        I off = 0;
#pragma unroll
        for (int d = 0; d < R; ++d)
          off = off * static_cast<I>(p.in[d]) + first[d] + j[d] * static_cast<I>(p.dilations[d]);
        const auto v = reinterpret_cast<const ew::Vec<T, V>*>(
            x + ((img * static_cast<I>(p.in_size) + off) * static_cast<I>(p.channels)))[group];
        if constexpr (kPacked) {
          if (p.is_max) {
            uint4 w;
            static_assert(sizeof(w) == sizeof(v));
            memcpy(&w, &v, sizeof(w));
            packed = make_uint4(packed_max<T>(packed.x, w.x), packed_max<T>(packed.y, w.y),
                                packed_max<T>(packed.z, w.z), packed_max<T>(packed.w, w.w));
          }
        }
#pragma unroll
        for (int k = 0; k < V && !(kPacked && p.is_max); ++k) {
          const C c = static_cast<C>(ew::load(v.v[k]));
          if (!p.is_max)
            acc[k] += c;
          else if (!seen || c > acc[k] || (acc[k] != acc[k] && c == c))
            acc[k] = c;
        }
        seen = true;
        ++taps;
        // The next tap: the last axis fastest (unrolled, so that j stays in registers).
        bool more = false;
#pragma unroll
        for (int d = R - 1; d >= 0; --d) {
          if (!more) {
            if (++j[d] < count[d])
              more = true;
            else
              j[d] = 0;
          }
        }
        if (!more) break;
      }
    }
    ew::Vec<T, V> r;
    if constexpr (kPacked) {
      if (p.is_max && taps > 0) {
        static_assert(sizeof(r) == sizeof(packed));
        memcpy(&r, &packed, sizeof(r));
        reinterpret_cast<ew::Vec<T, V>*>(y + (img * out_size + pos) * static_cast<I>(p.channels))[group] = r;
        continue;
      }
    }
    const int64_t div = p.include_pad ? padded : static_cast<int64_t>(taps);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      C v = acc[k];
      if (!p.is_max) v = div > 0 && taps > 0 ? v / static_cast<C>(div) : C(0);
      r.v[k] = ew::store<T>(v);
    }
    reinterpret_cast<ew::Vec<T, V>*>(y + (img * out_size + pos) * static_cast<I>(p.channels))[group] = r;
  }
}

// A 2-D K x K MaxPool on vectors of Words 32-bit words of a packed type (int8, uint8, float16) with
// 32-bit indices: ResNet's MaxPool after the stem. Its K * K taps are unrolled, so that their loads are in
// flight together; the general kernel's tap loop, whose trip counts are known only at run time,
// issued them one after another (int8, [256, 112, 112, 64], 3x3 / 2: 0.19 ms, twice the bytes' time).
// 16-byte vectors (Words 4) where they fill the GPU; narrower ones where they would not (ResNet-50 at
// batch 1: 12,544 16-byte outputs are 49 CTAs on 132 SMs), so that more threads share the taps.
// The same maxima: the packed start is the type's lowest value for 8-bit types, and a window with no
// tap inside the image gets the lowest value, as in nhwc_pool_kernel.
template <class T, int K, int Words>
__global__ void __launch_bounds__(kThreads)
    max_pool_2d_kernel(NhwcPool p, const void* __restrict__ xv, void* __restrict__ yv, int32_t items) {
  using Vec = std::conditional_t<Words == 4, uint4, std::conditional_t<Words == 2, uint2, uint32_t>>;
  constexpr int V = 4 * Words / sizeof(T);
  const Vec* __restrict__ x = static_cast<const Vec*>(xv);
  Vec* __restrict__ y = static_cast<Vec*>(yv);
  wait_for_inputs();  // a dependent launch (nhwc_pool)
  start_next_kernel();
  const int groups = static_cast<int>(p.channels / V);
  const int H = static_cast<int>(p.in[0]), W = static_cast<int>(p.in[1]);
  const int OH = static_cast<int>(p.out[0]), OW = static_cast<int>(p.out[1]);
  const int sh = static_cast<int>(p.strides[0]), sw = static_cast<int>(p.strides[1]);
  const int dh = static_cast<int>(p.dilations[0]), dw = static_cast<int>(p.dilations[1]);
  const int ph = static_cast<int>(p.pad_begin[0]), pw = static_cast<int>(p.pad_begin[1]);
  const int32_t step = static_cast<int32_t>(ew::grid_threads());
  for (int32_t item = static_cast<int32_t>(ew::global_thread()); item < items; item += step) {
    const int group = item % groups;
    int rest = item / groups;
    const int ow = rest % OW;
    rest /= OW;
    const int oh = rest % OH, img = rest / OH;
    const int h0 = oh * sh - ph, w0 = ow * sw - pw;
    uint32_t m[Words];
#pragma unroll
    for (int k = 0; k < Words; ++k) m[k] = kPackedStart<T>;
    bool any = false;
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int ih = h0 + i * dh;
#pragma unroll
      for (int j = 0; j < K; ++j) {
        const int iw = w0 + j * dw;
        if (ih >= 0 && ih < H && iw >= 0 && iw < W) {
          const Vec v = x[((img * H + ih) * W + iw) * groups + group];
          uint32_t w[Words];
          memcpy(w, &v, sizeof(v));
#pragma unroll
          for (int k = 0; k < Words; ++k) m[k] = packed_max<T>(m[k], w[k]);
          any = true;
        }
      }
    }
    if (!any) {  // the lowest value (float16: float's lowest, stored as -inf, as the general kernel does)
      using C = std::conditional_t<std::is_same_v<T, __half>, float, T>;
      T lo[V];
#pragma unroll
      for (int k = 0; k < V; ++k) lo[k] = ew::store<T>(std::numeric_limits<C>::lowest());
      memcpy(m, lo, sizeof(m));
    }
    Vec r;
    memcpy(&r, m, sizeof(r));
    y[item] = r;
  }
}

// The widest vector (words) whose threads fill every SM, else one word.
int max_pool_words(int64_t bytes, int sms) {
  for (int words : {4, 2})
    if (static_cast<int64_t>(ew::blocks_for(bytes / (4 * words))) >= sms) return words;
  return 1;
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
  const kiln::nn::WindowGeometry g = kiln::nn::pool_geometry(a, channels_first_shape(X.shape));
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
    const auto* x = static_cast<const T*>(X.data);
    auto* y = static_cast<T*>(Y.data);
    // 32-bit indices when every element index (and a grid-stride step past the end) fits.
    bool narrow = X.numel() < (int64_t{1} << 30) && Y.numel() < (int64_t{1} << 30);
    for (int d = 0; d < rank; ++d)  // window attributes small enough for 32-bit window arithmetic
      narrow = narrow && (p.kernel[d] - 1) * p.dilations[d] + 1 < (int64_t{1} << 24) &&
               p.pad_begin[d] < (int64_t{1} << 24) && p.pad_end[d] < (int64_t{1} << 24) &&
               p.strides[d] < (int64_t{1} << 24);
    const unsigned blocks = ew::blocks_for(items);
    if constexpr (kPackedMax<T>) {
      if (p.is_max && vec && narrow && rank == 2 && p.kernel[0] == 3 && p.kernel[1] == 3) {
        int device = 0;
        check_cuda(cudaGetDevice(&device), op);
        const int64_t bytes = Y.numel() * static_cast<int64_t>(sizeof(T));
        const int words = max_pool_words(bytes, mma::device_attribute<cudaDevAttrMultiProcessorCount>(device));
        auto launch_words = [&](auto words_tag) {
          constexpr int kWords = decltype(words_tag)::value;
          const int64_t vecs = bytes / (4 * kWords);
          launch_dependent<max_pool_2d_kernel<T, 3, kWords>>(dim3(ew::blocks_for(vecs)), kThreads, 0, env.stream,
                                                                    1, op, p, X.data, Y.data,
                                                                    static_cast<int32_t>(vecs));
        };
        if (words == 4)
          launch_words(std::integral_constant<int, 4>{});
        else if (words == 2)
          launch_words(std::integral_constant<int, 2>{});
        else
          launch_words(std::integral_constant<int, 1>{});
        return;
      }
    }
    auto go = [&](auto rank_tag) {
      constexpr int R = decltype(rank_tag)::value;
      if (vec && narrow)
        nhwc_pool_kernel<T, V, int32_t, R><<<blocks, kThreads, 0, env.stream>>>(p, x, y, static_cast<int32_t>(items));
      else if (vec)
        nhwc_pool_kernel<T, V, int64_t, R><<<blocks, kThreads, 0, env.stream>>>(p, x, y, items);
      else if (narrow)
        nhwc_pool_kernel<T, 1, int32_t, R><<<blocks, kThreads, 0, env.stream>>>(p, x, y, static_cast<int32_t>(items));
      else
        nhwc_pool_kernel<T, 1, int64_t, R><<<blocks, kThreads, 0, env.stream>>>(p, x, y, items);
    };
    if (rank == 1)
      go(std::integral_constant<int, 1>{});
    else if (rank == 2)
      go(std::integral_constant<int, 2>{});
    else
      go(std::integral_constant<int, 3>{});
  };
  if (p.is_max && X.dtype == DataType::kInt8)
    launch(Tag<int8_t>{});
  else if (p.is_max && X.dtype == DataType::kUInt8)
    launch(Tag<uint8_t>{});
  else
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
