// Resize on the GPU: the kernels that apply the tables of resize_plan.cu (resize.cuh says
// how those are made), and the op's entry.
//
// nearest: a gather, one thread per output element, any element type (raw bytes).
// linear/cubic: one thread per output element sums its taps in the CPU's order: the CPU makes one
// pass per resized axis, first axis first, rounding each pass to the compute type (float for
// float32 and the half types, double for float64 and integers), so the output is the nested sum
// sum_{t_last} w (... (sum_{t_first} w x)), each level rounded, and uncontracted: equal bits for
// float32. An output position that extrapolates on a resized axis takes the fill value at that
// level, which the later axes' passes then weigh as the CPU does.
// Interpolation takes every numeric type, nearest every type, as on the CPU.
#include <cmath>
#include <cstring>
#include <string>

#include "runtime/cuda/resize/resize.cuh"

namespace kiln::gpu {

namespace resize {

namespace {

using kiln::nn::ResizePlan;

// ---- nearest -----------------------------------------------------------------------------------
template <class T, class I>
__global__ void __launch_bounds__(kThreads)
    resize_nearest_kernel(const T* __restrict__ x, T* __restrict__ y, I n, const __grid_constant__ Tables t, T fill) {
  const I step = static_cast<I>(ew::grid_threads());
  for (I i = static_cast<I>(ew::global_thread()); i < n; i += step) {
    I rem = i;
    int64_t off = 0;
    bool ex = false;
#pragma unroll
    for (int d = kMaxAxes - 1; d >= 0; --d) {
      if (d >= t.rank) continue;
      const Axis& ax = t.ax[d];
      const I dim = static_cast<I>(ax.out);
      I q;
      if constexpr (sizeof(I) == 4)
        q = ax.div.div(rem);
      else
        q = rem / dim;
      const I o = rem - q * dim;
      rem = q;
      if (ax.table) {
        off += static_cast<int64_t>(ax.idx[o]) * ax.in_stride;
        if (t.extrapolates) ex |= ax.ex[o] != 0;
      } else {
        off += static_cast<int64_t>(o) * ax.in_stride;
      }
    }
    y[i] = ex ? fill : x[off];
  }
}

// ---- linear / cubic ----------------------------------------------------------------------------
template <class T, class C>
__device__ __forceinline__ C to_c(T v) {
  return static_cast<C>(load(v));
}

// The CPU's from_double: floats convert (half types through float), integers round half to even
// and saturate, NaN -> 0.
template <class T, class C>
__device__ __forceinline__ T from_c(C v) {
  if constexpr (std::is_integral_v<T>) {
    if (v != v) return T(0);
    v = rint(v);
    if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  } else {
    return store<T>(v);
  }
}

// Decodes output element i: o[k] = its position on active (resized) axis k, and the returned input
// offset of the axes left as they are. L: the number of active axes, 0 for "up to kMaxAxes".
template <int L, class I>
__device__ __forceinline__ int64_t decode(const Tables& t, I i, I* o) {
  constexpr int kK = L > 0 ? L : kMaxAxes;
  int64_t base = 0;
#pragma unroll
  for (int d = kMaxAxes - 1; d >= 0; --d) {
    if (d >= t.rank) continue;
    const Axis& ax = t.ax[d];
    const I dim = static_cast<I>(ax.out);
    I q;
    if constexpr (sizeof(I) == 4)
      q = ax.div.div(i);
    else
      q = i / dim;
    const I od = i - q * dim;
    i = q;
    if (ax.table) {
#pragma unroll
      for (int k = 0; k < kK; ++k)
        if (k < t.nactive && t.active[k] == d) o[k] = od;
    } else {
      base += static_cast<int64_t>(od) * ax.in_stride;
    }
  }
  return base;
}

// Weight `cell` of an axis in the compute type: float tables for float (the CPU's static_cast<C>).
template <class C>
__device__ __forceinline__ C weight(const Axis& ax, int64_t cell) {
  if constexpr (std::is_same_v<C, float>)
    return ax.wf[cell];
  else
    return ax.w[cell];
}

// sum_j w[j] * src[idx[j] * stride] over the taps of output position o on one axis. Up to
// kGroup taps (linear 2, cubic 4) run as one group, whose loads are issued together.
constexpr int kGroup = 4;

template <class T, class C>
__device__ __forceinline__ C level_sum(const Axis& ax, int64_t o, const T* src) {
  const int32_t* idx = ax.idx + o * ax.taps;
  const int64_t cell = o * ax.taps;
  C acc = 0;
  for (int j = 0; j < ax.taps; j += kGroup) {
    C v[kGroup];
#pragma unroll
    for (int u = 0; u < kGroup; ++u)
      if (j + u < ax.taps) v[u] = to_c<T, C>(src[static_cast<int64_t>(idx[j + u]) * ax.in_stride]);
#pragma unroll
    for (int u = 0; u < kGroup; ++u)
      if (j + u < ax.taps) acc = mul_add_nc(acc, weight<C>(ax, cell + j + u), v[u]);
  }
  return acc;
}

// The value at active level h is the fill; each later level k weighs it: sum_t w_k[t] * v.
template <class C>
__device__ C extrapolated(const Tables& t, const int64_t* o, int h, C fill) {
  C v = fill;
  for (int k = h + 1; k < t.nactive; ++k) {
    const Axis& ax = t.act[k];
    C acc = 0;
    for (int j = 0; j < ax.taps; ++j) acc = mul_add_nc(acc, weight<C>(ax, o[k] * ax.taps + j), v);
    v = acc;
  }
  return v;
}

// L = 1 or 2 resized axes (the usual spatial resize): plain loops in registers; L = 0: any number,
// an odometer over the taps with one partial sum per level.
template <class T, class C, int L, class I>
__global__ void __launch_bounds__(kThreads)
    resize_interp_kernel(const T* __restrict__ x, T* __restrict__ y, I n, const __grid_constant__ Tables t, C fill) {
  const I step = static_cast<I>(ew::grid_threads());
  for (I i = static_cast<I>(ew::global_thread()); i < n; i += step) {
    I oi[L > 0 ? L : kMaxAxes];
    const int64_t base = decode<L>(t, i, oi);
    C r;
    if constexpr (L > 0) {
      // Extrapolating on the last axis gives the fill; on the first (L = 2), the fill weighed by
      // the last axis' pass. Static indices keep everything in registers.
      const int64_t o0 = oi[0];
      int64_t o1 = 0;
      if constexpr (L == 2) o1 = oi[1];
      if (t.extrapolates && t.act[L - 1].ex[L == 2 ? o1 : o0]) {
        y[i] = from_c<T, C>(fill);
        continue;
      }
      if (L == 2 && t.extrapolates && t.act[0].ex[o0]) {
        const Axis& a1 = t.act[1];
        r = 0;
        for (int j = 0; j < a1.taps; ++j) r = mul_add_nc(r, weight<C>(a1, o1 * a1.taps + j), fill);
        y[i] = from_c<T, C>(r);
        continue;
      }
    }
    int64_t o[L > 0 ? L : kMaxAxes];
    int h = -1;
#pragma unroll
    for (int k = 0; k < (L > 0 ? L : kMaxAxes); ++k) {
      if (L == 0 && k >= t.nactive) break;
      o[k] = oi[k];
      if (L == 0 && t.extrapolates && t.act[k].ex[o[k]]) h = k;
    }
    if (h >= 0) {
      r = extrapolated<C>(t, o, h, fill);
    } else if constexpr (L == 1) {
      const Axis& a0 = t.act[0];
      r = level_sum<T, C>(a0, o[0], x + base);
    } else if constexpr (L == 2) {
      const Axis &a0 = t.act[0], &a1 = t.act[1];
      const int32_t* i1 = a1.idx + o[1] * a1.taps;
      const int64_t c1 = o[1] * a1.taps;
      r = 0;
      for (int j1 = 0; j1 < a1.taps; j1 += kGroup) {
        C v[kGroup];
#pragma unroll
        for (int u = 0; u < kGroup; ++u)
          if (j1 + u < a1.taps)
            v[u] = level_sum<T, C>(a0, o[0], x + base + static_cast<int64_t>(i1[j1 + u]) * a1.in_stride);
#pragma unroll
        for (int u = 0; u < kGroup; ++u)
          if (j1 + u < a1.taps) r = mul_add_nc(r, weight<C>(a1, c1 + j1 + u), v[u]);
      }
    } else {
      const int levels = t.nactive;
      C acc[kMaxAxes];
      int tap[kMaxAxes];
      for (int k = 0; k < levels; ++k) acc[k] = 0, tap[k] = 0;
      for (;;) {
        int64_t off = base;
        for (int k = 0; k < levels; ++k) {
          const Axis& ax = t.act[k];
          off += static_cast<int64_t>(ax.idx[o[k] * ax.taps + tap[k]]) * ax.in_stride;
        }
        const Axis& a0 = t.act[0];
        acc[0] = mul_add_nc(acc[0], weight<C>(a0, o[0] * a0.taps + tap[0]), to_c<T, C>(x[off]));
        int k = 0;
        while (++tap[k] == t.act[k].taps) {  // level k is complete: weigh it into level k + 1
          tap[k] = 0;
          if (k + 1 == levels) break;
          const Axis& up = t.act[k + 1];
          acc[k + 1] = mul_add_nc(acc[k + 1], weight<C>(up, o[k + 1] * up.taps + tap[k + 1]), acc[k]);
          acc[k] = 0;
          ++k;
        }
        if (k + 1 == levels && tap[k] == 0) break;
      }
      r = acc[levels - 1];
    }
    y[i] = from_c<T, C>(r);
  }
}

// ---- host ----------------------------------------------------------------------------------------
// The fill value as T (the CPU's from_double of extrapolation_value), raw bits for nearest.
template <class T>
T fill_of(double v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else if constexpr (std::is_integral_v<T>) {
    if (std::isnan(v)) return 0;
    v = std::nearbyint(v);
    if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  } else {
    return T(static_cast<ComputeType<T>>(v));
  }
}

template <class T, class C, int L>
void launch_interp(const T* x, T* y, int64_t n, const Tables& t, C fill, cudaStream_t s) {
  if (L > 0 && n < (int64_t{1} << 31))
    resize_interp_kernel<T, C, L, uint32_t>
        <<<ew::blocks_for(n), kThreads, 0, s>>>(x, y, static_cast<uint32_t>(n), t, fill);
  else
    resize_interp_kernel<T, C, L, uint64_t>
        <<<ew::blocks_for(n), kThreads, 0, s>>>(x, y, static_cast<uint64_t>(n), t, fill);
}

// GPU element type and compute type of an interpolating Resize.
template <class Fn>
void dispatch_interp(DataType dt, Fn&& fn) {
  switch (dt) {
    case DataType::kFloat32: return fn(Tag<float>{}, Tag<float>{});
    case DataType::kFloat16: return fn(Tag<__half>{}, Tag<float>{});
    case DataType::kBFloat16: return fn(Tag<__nv_bfloat16>{}, Tag<float>{});
    case DataType::kFloat64: return fn(Tag<double>{}, Tag<double>{});
    case DataType::kInt8: return fn(Tag<int8_t>{}, Tag<double>{});
    case DataType::kUInt8: return fn(Tag<uint8_t>{}, Tag<double>{});
    case DataType::kInt16: return fn(Tag<int16_t>{}, Tag<double>{});
    case DataType::kUInt16: return fn(Tag<uint16_t>{}, Tag<double>{});
    case DataType::kInt32: return fn(Tag<int32_t>{}, Tag<double>{});
    case DataType::kUInt32: return fn(Tag<uint32_t>{}, Tag<double>{});
    case DataType::kInt64: return fn(Tag<int64_t>{}, Tag<double>{});
    case DataType::kUInt64: return fn(Tag<uint64_t>{}, Tag<double>{});
    default: ew::throw_gpu_dtype(dt, "Resize");
  }
}

size_t resize_workspace(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView>,
                        GpuEnv& env) {
  const auto& a = std::get<ResizeAttrs>(attrs);
  size_t bytes = 0;
  resize::layout(a, resize::plan_of(a, in, env), in[0], nullptr, &bytes);
  return bytes;
}

void resize_gpu(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                GpuEnv& env) {
  const auto& a = std::get<ResizeAttrs>(attrs);
  const TensorView &X = in[0], &Y = out[0];
  const ResizePlan p = resize::plan_of(a, in, env);
  if (a.mode != ResizeMode::kNearest) dispatch_interp(X.dtype, [](auto, auto) {});  // throws for other types
  const int64_t n = Y.numel();
  if (n == 0) return;
  bool all_identity = true;
  for (uint8_t id : p.identity) all_identity &= id != 0;
  if (all_identity) {
    check_cuda(cudaMemcpyAsync(Y.data, X.data, X.bytes(), cudaMemcpyDeviceToDevice, env.stream), "Resize");
    return;
  }
  size_t bytes = 0;
  const Tables t = resize::layout(a, p, X, static_cast<uint8_t*>(env.workspace), &bytes);
  if (env.workspace_bytes < bytes) throw Error("Resize: the workspace is smaller than the entry asked for");
  resize::launch_setup(t, env.stream);
  if (a.mode == ResizeMode::kNearest) {
    dispatch_all(X.dtype, "Resize", [&](auto tag) {
      using H = typename decltype(tag)::type;  // host type: the fill value's conversion
      const H fill_h = fill_of<H>(a.extrapolation_value);
      using B = std::conditional_t<
          sizeof(H) == 1, uint8_t,
          std::conditional_t<sizeof(H) == 2, uint16_t, std::conditional_t<sizeof(H) == 4, uint32_t, uint64_t>>>;
      B fill;
      std::memcpy(&fill, &fill_h, sizeof(B));
      const auto* x = static_cast<const B*>(X.data);
      auto* y = static_cast<B*>(Y.data);
      if (n < (int64_t{1} << 31))
        resize_nearest_kernel<B, uint32_t>
            <<<ew::blocks_for(n), kThreads, 0, env.stream>>>(x, y, static_cast<uint32_t>(n), t, fill);
      else
        resize_nearest_kernel<B, uint64_t>
            <<<ew::blocks_for(n), kThreads, 0, env.stream>>>(x, y, static_cast<uint64_t>(n), t, fill);
    });
  } else {
    dispatch_interp(X.dtype, [&](auto tag, auto ctag) {
      using T = typename decltype(tag)::type;
      using C = typename decltype(ctag)::type;
      const auto* x = static_cast<const T*>(X.data);
      auto* y = static_cast<T*>(Y.data);
      const C fill = static_cast<C>(a.extrapolation_value);
      if (t.nactive == 1)
        launch_interp<T, C, 1>(x, y, n, t, fill, env.stream);
      else if (t.nactive == 2)
        launch_interp<T, C, 2>(x, y, n, t, fill, env.stream);
      else
        launch_interp<T, C, 0>(x, y, n, t, fill, env.stream);
    });
  }
  check_launch("Resize");
}

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kResize, resize_gpu, resize_workspace},
};

}  // namespace

}  // namespace resize

// The resize family's table.
std::span<const GpuKernelEntry> resize_gpu_kernels() { return resize::kEntries; }

}  // namespace kiln::gpu
