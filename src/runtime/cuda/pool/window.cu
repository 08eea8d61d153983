// MaxPool (with its optional Indices output) and AveragePool on the GPU, 1 to 3 spatial axes. One
// thread per output element walks its window in the CPU kernel's order (runtime/cpu/pool/window.cpp:
// only the taps inside the image, first axis outermost), so maxima, their indices and the float sums
// are the CPU's bit for bit. Fewer spatial axes are padded to three with leading axes of size 1
// (kernel 1, stride 1, no pads), which change neither the offsets nor the column-major indices.
// pool2d_kernel is the fast path of the usual case; pool_kernel the general one.
// MaxPool takes every float type, int8 and uint8; AveragePool every float type (the CPU's types).
// The arithmetic is in the compute type (float for the half types, double for float64), as on
// the CPU.
#include <string>

#include "core/infer/nn_geometry.h"
#include "runtime/cuda/pool/pool_internal.cuh"

namespace kiln::gpu::pool {

namespace {

constexpr int kAxes = 3;

struct Geo {
  int in[kAxes], out[kAxes], k[kAxes], s[kAxes], d[kAxes], pb[kAxes], pe[kAxes];
  int64_t in_size, out_size;        // elements per plane
  FastDiv plane_div, w_div, h_div;  // by out_size, out[2], out[1]: the 32-bit index path
};

// The CPU's ceil_div (b > 0; a may be negative); dilation 1, the usual case, divides by nothing.
__device__ __forceinline__ int ceil_div(int a, int b) {
  if (b == 1) return a;
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

// I: the output index type (uint32_t below 2^31 elements). Plane offsets are 64-bit either way.
template <class T, bool kMax, class I>
__global__ void __launch_bounds__(kThreads)
    pool_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t* __restrict__ indices, I total, Geo g,
                bool include_pad, bool col_major) {
  using C = Compute<T>;
  const I step = static_cast<I>(ew::grid_threads());
  for (I q = static_cast<I>(ew::global_thread()); q < total; q += step) {
    I plane;
    int o[kAxes];
    if constexpr (sizeof(I) == 4) {  // multiply-high divisions
      plane = g.plane_div.div(q);
      const uint32_t r = q - plane * static_cast<uint32_t>(g.out_size), t = g.w_div.div(r);
      o[2] = static_cast<int>(r - t * g.out[2]);
      o[0] = static_cast<int>(g.h_div.div(t));
      o[1] = static_cast<int>(t) - o[0] * g.out[1];
    } else {
      plane = q / static_cast<I>(g.out_size);
      int r = static_cast<int>(q - plane * static_cast<I>(g.out_size));
      o[2] = r % g.out[2];
      r /= g.out[2];
      o[1] = r % g.out[1];
      o[0] = r / g.out[1];
    }
    int first[kAxes], cnt[kAxes], inside = 1, padded = 1;
#pragma unroll
    for (int i = 0; i < kAxes; ++i) {
      const int start = o[i] * g.s[i] - g.pb[i];
      const int jlo = start < 0 ? ceil_div(-start, g.d[i]) : 0;
      const int jhi = max(jlo, min(g.k[i], ceil_div(g.in[i] - start, g.d[i])));
      first[i] = start + jlo * g.d[i];
      cnt[i] = jhi - jlo;
      inside *= cnt[i];
      if (!kMax && include_pad) padded *= max(0, min(g.k[i], ceil_div(g.in[i] + g.pe[i] - start, g.d[i])));
    }
    const T* xp = x + static_cast<int64_t>(plane) * g.in_size;
    const int row = g.in[2], slab = g.in[1] * g.in[2];
    if constexpr (kMax) {
      // A window with no input element gives the lowest value (and index 0), as on the CPU.
      C best = std::numeric_limits<C>::lowest();
      int arg = -1;
      for (int j0 = 0; j0 < cnt[0]; ++j0) {
        const int off0 = (first[0] + j0 * g.d[0]) * slab;
        for (int j1 = 0; j1 < cnt[1]; ++j1) {
          const int off1 = off0 + (first[1] + j1 * g.d[1]) * row + first[2];
          for (int j2 = 0; j2 < cnt[2]; ++j2) {
            const int off = off1 + j2 * g.d[2];
            const C v = load(xp[off]);
            // The first maximum wins; a number replaces NaN, never the other way round.
            if (arg < 0 || v > best || (best != best && v == v)) {
              best = v;
              arg = off;
            }
          }
        }
      }
      y[q] = store<T>(best);
      if (indices) {
        int64_t idx = arg < 0 ? 0 : arg;
        if (col_major && arg >= 0) {  // spatial position with the first axis fastest
          const int p2 = arg % g.in[2], p1 = arg / g.in[2] % g.in[1], p0 = arg / slab;
          idx = p0 + static_cast<int64_t>(p1) * g.in[0] + static_cast<int64_t>(p2) * g.in[0] * g.in[1];
        }
        indices[q] = static_cast<int64_t>(plane) * g.in_size + idx;
      }
    } else {
      C sum = 0;
      for (int j0 = 0; j0 < cnt[0]; ++j0) {
        const int off0 = (first[0] + j0 * g.d[0]) * slab;
        for (int j1 = 0; j1 < cnt[1]; ++j1) {
          const int off1 = off0 + (first[1] + j1 * g.d[1]) * row + first[2];
          for (int j2 = 0; j2 < cnt[2]; ++j2) sum += load(xp[off1 + j2 * g.d[2]]);
        }
      }
      const int div = include_pad ? padded : inside;
      y[q] = store<T>(div > 0 && inside > 0 ? sum / static_cast<C>(div) : C(0));
    }
  }
}

// The common case, one or two spatial axes without dilation (axis 0 of Geo is then the size-1
// filler): the window is a rectangle [h0, h1) x [w0, w1) of the image, and the kernel does about a
// third of the general one's integer work. Without Indices the maximum starts from NaN, so that the
// first tap always replaces it, and takes v whenever v > best or best is NaN: the CPU's value (a
// NaN only if every tap is NaN), without tracking where it came from.
template <class T, bool kMax, bool kIdx>
__global__ void __launch_bounds__(kThreads)
    pool2d_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t* __restrict__ indices, uint32_t total, Geo g,
                  bool include_pad, bool col_major) {
  using C = Compute<T>;
  const uint32_t step = static_cast<uint32_t>(ew::grid_threads());
  const int ih = g.in[1], iw = g.in[2];
  for (uint32_t q = static_cast<uint32_t>(ew::global_thread()); q < total; q += step) {
    const uint32_t plane = g.plane_div.div(q);
    const uint32_t r = q - plane * static_cast<uint32_t>(g.out_size);
    const int oh = static_cast<int>(g.w_div.div(r)), ow = static_cast<int>(r) - oh * g.out[2];
    const int hs = oh * g.s[1] - g.pb[1], ws = ow * g.s[2] - g.pb[2];
    const int h0 = max(hs, 0), h1 = min(hs + g.k[1], ih), w0 = max(ws, 0), w1 = min(ws + g.k[2], iw);
    const T* xp = x + static_cast<int64_t>(plane) * g.in_size;
    if constexpr (kMax) {
      C best;
      [[maybe_unused]] int arg = -1;
      if constexpr (kIdx || std::is_integral_v<C>)
        best = std::numeric_limits<C>::lowest();
      else
        best = NAN;
      for (int h = h0; h < h1; ++h) {
        const T* rp = xp + h * iw;
        for (int w = w0; w < w1; ++w) {
          const C v = load(rp[w]);
          if constexpr (kIdx) {
            if (arg < 0 || v > best || (best != best && v == v)) {
              best = v;
              arg = h * iw + w;
            }
          } else if (v > best || best != best) {
            best = v;
          }
        }
      }
      if (h0 >= h1 || w0 >= w1) best = std::numeric_limits<C>::lowest();  // no tap: as on the CPU
      y[q] = store<T>(best);
      if constexpr (kIdx) {
        int64_t idx = arg < 0 ? 0 : arg;
        if (col_major && arg >= 0) idx = arg / iw + static_cast<int64_t>(arg % iw) * ih;
        indices[q] = static_cast<int64_t>(plane) * g.in_size + idx;
      }
    } else {
      C sum = 0;
      for (int h = h0; h < h1; ++h) {
        const T* rp = xp + h * iw;
        for (int w = w0; w < w1; ++w) sum += load(rp[w]);
      }
      const int inside = max(h1 - h0, 0) * max(w1 - w0, 0);
      const int div =
          include_pad ? max(0, min(g.k[1], ih + g.pe[1] - hs)) * max(0, min(g.k[2], iw + g.pe[2] - ws)) : inside;
      y[q] = store<T>(div > 0 && inside > 0 ? sum / static_cast<C>(div) : C(0));
    }
  }
}

void pool_gpu(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
              GpuEnv& env) {
  const auto& a = std::get<PoolAttrs>(attrs);
  const TensorView &X = in[0], &Y = out[0];
  const bool is_max = kind == OpKind::kMaxPool;
  const char* name = is_max ? "MaxPool" : "AveragePool";
  const kiln::nn::WindowGeometry wg = kiln::nn::pool_geometry(a, X.shape);
  const size_t n = wg.rank();
  if (n > static_cast<size_t>(kAxes))
    throw Error(std::string(name) + ": the CUDA backend pools over at most 3 spatial axes, got " + std::to_string(n));
  Geo g;
  for (int i = 0; i < kAxes; ++i) g.in[i] = g.out[i] = g.k[i] = g.s[i] = g.d[i] = 1, g.pb[i] = g.pe[i] = 0;
  // Every position, tap offset and window end must fit an int (the kernel's plane arithmetic).
  constexpr int64_t kLimit = int64_t{1} << 30;
  auto fits = [&](int64_t v) {
    if (v < -kLimit || v > kLimit) throw Error(std::string(name) + ": spatial sizes too large for the CUDA backend");
    return static_cast<int>(v);
  };
  for (size_t i = 0; i < n; ++i) {
    const size_t j = kAxes - n + i;
    g.in[j] = fits(wg.in[i]);
    g.out[j] = fits(wg.out[i]);
    g.k[j] = fits(wg.kernel[i]);
    g.s[j] = fits(wg.strides[i]);
    g.d[j] = fits(wg.dilations[i]);
    g.pb[j] = fits(wg.pads[i]);
    g.pe[j] = fits(wg.pads[n + i]);
    fits(wg.out[i] * wg.strides[i] + wg.in[i] + wg.pads[n + i] + wg.kernel[i] * wg.dilations[i]);
  }
  g.in_size = kiln::nn::WindowGeometry::product(wg.in);
  g.out_size = kiln::nn::WindowGeometry::product(wg.out);
  fits(g.in_size);
  const int64_t total = Y.numel();
  if (total == 0) return;
  if (total < (int64_t{1} << 31)) {  // the 32-bit path
    g.plane_div = FastDiv(static_cast<uint32_t>(g.out_size));
    g.w_div = FastDiv(static_cast<uint32_t>(g.out[2]));
    g.h_div = FastDiv(static_cast<uint32_t>(g.out[1]));
  }
  int64_t* indices = out.size() > 1 && out[1].exists && out[1].data ? out[1].as<int64_t>() : nullptr;
  const bool include_pad = a.count_include_pad == 1, col_major = a.storage_order == 1;
  bool fast2d = n <= 2 && total < (int64_t{1} << 31);
  for (size_t i = 0; i < n; ++i) fast2d &= wg.dilations[i] == 1;
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto* xp = static_cast<const T*>(X.data);
    auto* yp = static_cast<T*>(Y.data);
    const unsigned blocks = ew::blocks_for(total);
    auto go = [&](auto max_tag) {
      constexpr bool kMax = decltype(max_tag)::value;
      if (fast2d && (!kMax || !indices))
        pool2d_kernel<T, kMax, false><<<blocks, kThreads, 0, env.stream>>>(
            xp, yp, nullptr, static_cast<uint32_t>(total), g, include_pad, col_major);
      else if (fast2d)
        pool2d_kernel<T, kMax, true><<<blocks, kThreads, 0, env.stream>>>(xp, yp, indices, static_cast<uint32_t>(total),
                                                                          g, include_pad, col_major);
      else if (total < (int64_t{1} << 31))
        pool_kernel<T, kMax, uint32_t><<<blocks, kThreads, 0, env.stream>>>(
            xp, yp, indices, static_cast<uint32_t>(total), g, include_pad, col_major);
      else
        pool_kernel<T, kMax, uint64_t><<<blocks, kThreads, 0, env.stream>>>(
            xp, yp, indices, static_cast<uint64_t>(total), g, include_pad, col_major);
    };
    if (is_max)
      go(std::true_type{});
    else if constexpr (!std::is_integral_v<T>)
      go(std::false_type{});
    check_launch(name);
  };
  if (is_max && X.dtype == DataType::kInt8)
    run(Tag<int8_t>{});
  else if (is_max && X.dtype == DataType::kUInt8)
    run(Tag<uint8_t>{});
  else
    ew::dispatch_ew_float(X.dtype, name, run);
}

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kMaxPool, pool_gpu},
    {OpKind::kAveragePool, pool_gpu},
};

}  // namespace

std::span<const GpuKernelEntry> window_entries() { return kEntries; }

}  // namespace kiln::gpu::pool
