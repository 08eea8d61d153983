// The Conv family's own kernels (declared in nn_internal.cuh):
// - direct Conv / ConvTranspose (channels first, and Conv channels last): one thread per output
//   element sums its taps in the accumulation type (float for float32 and the half types, double
//   for float64). Slow next to cuDNN, but it needs no workspace and no alignment, and takes any spatial
//   rank up to 8 and 64-bit sizes: it runs only where cuDNN cannot (see conv.cu);
// - the window copy (padding / cropping around cuDNN) and the bias fill (no input channels). The
//   bias add after cuDNN or cuBLASLt is the epilogue kernel (nn_epilogue.cu).
#include "runtime/cuda/elementwise/elementwise_internal.cuh"
#include "runtime/cuda/nn_internal.cuh"

namespace kiln::gpu::nn {

namespace {

template <class T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T>
__global__ void direct_conv_kernel(DirectConv g, const T* __restrict__ x, const T* __restrict__ w,
                                   const T* __restrict__ b, T* __restrict__ y, int64_t n) {
  int64_t in_size = 1, out_size = 1, taps = 1;
  for (int d = 0; d < g.rank; ++d) {
    in_size *= g.in[d];
    out_size *= g.out[d];
    taps *= g.kernel[d];
  }
  const int64_t cg = g.C / g.G, mg = g.M / g.G;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t pos[kMaxDirectRank];
    // Channels first: i = ((img * M + m) * out_size + position); channels last: (img * out_size +
    // position) * M + m.
    int64_t rest = g.channels_last ? i / g.M : i;
    for (int d = g.rank - 1; d >= 0; --d) {
      pos[d] = rest % g.out[d];
      rest /= g.out[d];
    }
    const int64_t m = g.channels_last ? i % g.M : rest % g.M, img = g.channels_last ? rest : rest / g.M;
    const int64_t grp = m / mg;
    Acc<T> acc = 0;
    for (int64_t c = 0; c < cg; ++c) {
      const int64_t ch = grp * cg + c;
      // Element (ch, off) of image img: xc[off * x_step]; weight of (m, c, tap t): wc[t * w_step].
      const T* xc = g.channels_last ? x + img * in_size * g.C + ch : x + (img * g.C + ch) * in_size;
      const int64_t x_step = g.channels_last ? g.C : 1, w_step = g.channels_last ? cg : 1;
      // Conv: W [M, cg, taps] (channels last: [M, taps, cg]); ConvTranspose: W [C, mg, taps].
      const T* wc = g.transpose ? w + (ch * mg + m % mg) * taps
                                : (g.channels_last ? w + m * taps * cg + c : w + (m * cg + c) * taps);
      for (int64_t t = 0; t < taps; ++t) {
        int64_t tr = t, off = 0, stride = 1;
        bool inside = true;
        for (int d = g.rank - 1; d >= 0; --d) {
          const int64_t k = tr % g.kernel[d];
          tr /= g.kernel[d];
          int64_t p;
          if (!g.transpose) {
            p = pos[d] * g.strides[d] - g.pads[d] + k * g.dilations[d];
          } else {  // X position q with q * stride - pad + k * dilation == pos
            const int64_t q = pos[d] + g.pads[d] - k * g.dilations[d];
            p = q >= 0 && q % g.strides[d] == 0 ? q / g.strides[d] : -1;
          }
          inside &= p >= 0 && p < g.in[d];
          off += p * stride;
          stride *= g.in[d];
        }
        if (inside)
          acc += static_cast<Acc<T>>(ew::load(xc[off * x_step])) * static_cast<Acc<T>>(ew::load(wc[t * w_step]));
      }
    }
    if (b) acc += static_cast<Acc<T>>(ew::load(b[m]));
    y[i] = ew::store<T>(acc);
  }
}

// ---- window copy, bias fill -------------------------------------------------------------
template <class E>
__global__ void window_copy_kernel(const E* __restrict__ src, E* __restrict__ dst, int64_t n, Window w) {
  const int64_t step = ew::grid_threads();
  for (int64_t i = ew::global_thread(); i < n; i += step) {
    int64_t rest = i, off = 0, stride = 1;
    bool inside = true;
    for (int d = w.rank - 1; d >= 0; --d) {
      const int64_t o = rest % w.dst[d];
      rest /= w.dst[d];
      const int64_t s = o - w.pre[d];
      inside &= s >= 0 && s < w.src[d];
      off += s * stride;
      stride *= w.src[d];
    }
    dst[i] = inside ? src[rest * stride + off] : E(0);
  }
}

template <class E>
__global__ void bias_fill_kernel(const E* __restrict__ bias, E* __restrict__ y, int64_t n, int64_t plane,
                                 int64_t channels) {
  const int64_t step = ew::grid_threads();
  for (int64_t i = ew::global_thread(); i < n; i += step) y[i] = bias ? bias[(i / plane) % channels] : E(0);
}

template <class Fn>
void dispatch_bits(size_t elem, Fn&& fn) {
  if (elem == 2) return fn(uint16_t{});
  if (elem == 4) return fn(uint32_t{});
  return fn(uint64_t{});
}

}  // namespace

void window_copy(const void* src, void* dst, const Window& w, size_t elem, cudaStream_t stream, const char* op) {
  const int64_t n = w.dst_numel();
  if (n == 0) return;
  dispatch_bits(elem, [&](auto tag) {
    using E = decltype(tag);
    window_copy_kernel<E>
        <<<ew::blocks_for(n), ew::kThreads, 0, stream>>>(static_cast<const E*>(src), static_cast<E*>(dst), n, w);
  });
  check_launch(op);
}

void bias_fill(const void* bias, void* y, int64_t n, int64_t plane, int64_t channels, size_t elem, cudaStream_t stream,
               const char* op) {
  if (n == 0) return;
  dispatch_bits(elem, [&](auto tag) {
    using E = decltype(tag);
    bias_fill_kernel<E><<<ew::blocks_for(n), ew::kThreads, 0, stream>>>(static_cast<const E*>(bias), static_cast<E*>(y),
                                                                        n, plane, channels);
  });
  check_launch(op);
}

void direct_conv(const DirectConv& g, DataType dt, const void* x, const void* w, const void* b, void* y,
                 cudaStream_t stream, const char* op) {
  int64_t n = g.batch * g.M;
  for (int d = 0; d < g.rank; ++d) n *= g.out[d];
  if (n == 0) return;
  auto launch = [&](auto tag) {
    using T = typename decltype(tag)::type;
    direct_conv_kernel<T><<<ew::blocks_for(n), ew::kThreads, 0, stream>>>(
        g, static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b), static_cast<T*>(y), n);
  };
  ew::dispatch_ew_float(dt, op, launch);
  check_launch(op);
}

}  // namespace kiln::gpu::nn
