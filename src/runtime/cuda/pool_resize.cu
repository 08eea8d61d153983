// Resize on the GPU, every mode, coordinate transformation, nearest mode, antialias, any rank up to
// 8, with the CPU kernel's results (runtime/cpu/ops/nn_resize.cpp, after onnx's op_resize.py).
//
// The host resolves the plan (output sizes, scales, roi) from the constant inputs' host copies. Per
// resized axis a setup kernel tabulates, in the workspace, what the CPU's plan_axis computes: the
// source index of each output position (nearest) or its taps' clamped indices and double weights
// (linear, cubic), and whether it extrapolates (tf_crop_and_resize). It uses the same double
// operations, uncontracted (__dmul_rn, ...), so every index and weight is the CPU's exactly.
// Axes the plan leaves as they are get no table.
//
// nearest: a gather, one thread per output element, any element type (raw bytes).
// linear/cubic: one thread per output element sums its taps in the CPU's order: the CPU makes one
// pass per resized axis, first axis first, rounding each pass to the compute type (float for
// float32/float16, double for float64 and integers), so the output is the nested sum
// sum_{t_last} w (... (sum_{t_first} w x)), each level rounded, and uncontracted: equal bits for
// float32. An output position that extrapolates on a resized axis takes the fill value at that
// level, which the later axes' passes then weigh as the CPU does.
// Interpolation takes float32, float16, float64, int8, uint8, int32 and int64 (the CPU also takes
// bfloat16, int16, uint16, uint32 and uint64); nearest takes every type.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/infer/nn_geometry.h"
#include "runtime/cuda/pool_internal.cuh"

namespace kiln::gpu::pool {

namespace {

using kiln::nn::ResizePlan;

constexpr int kMaxAxes = ew::kMaxDims;
constexpr double kCoordLimit = 1e15;

struct Axis {
  int64_t in = 1, out = 1, in_stride = 1;
  int taps = 0, first = 0;  // linear/cubic: taps of output position o are x_int + first + t
  double scale = 1, roi0 = 0, roi1 = 1;
  bool table = false;      // resized: indexed through the tables below
  int32_t* idx = nullptr;  // [out * taps] (nearest: [out])
  double* w = nullptr;     // [out * taps] (linear/cubic)
  float* wf = nullptr;     // the same rounded to float: the float compute type's weights
  uint8_t* ex = nullptr;   // [out]: extrapolates
  FastDiv div;             // by out (the 32-bit index path)
};

struct Tables {
  int rank = 0;
  Axis ax[kMaxAxes];
  int nactive = 0;  // resized axes, in increasing order: their numbers and copies of their Axis
  int active[kMaxAxes] = {};
  Axis act[kMaxAxes];
  int64_t table_rows = 0;  // sum of `out` over the resized axes
  // Setup parameters.
  ResizeMode mode = ResizeMode::kNearest;
  CoordinateTransform ctm = CoordinateTransform::kHalfPixel;
  NearestMode nearest = NearestMode::kRoundPreferFloor;
  double cubic_a = -0.75;
  bool antialias = false, exclude_outside = false;
  bool extrapolates = false;  // tf_crop_and_resize: the ex tables can be set
};

size_t align16(size_t v) { return (v + 15) / 16 * 16; }

// Host: the plan from the constant inputs' host copies.
ResizePlan plan_of(const ResizeAttrs& a, std::span<const TensorView> in, const GpuEnv& env) {
  std::vector<TensorView> views(in.begin(), in.end());
  for (size_t i = 1; i < views.size(); ++i)
    if (views[i].exists) views[i].data = const_cast<void*>(env.host(i));
  return kiln::nn::resize_plan(a, views);
}

// Host: axis geometry and the workspace layout (tables at `base`, which may be null to measure).
Tables layout(const ResizeAttrs& a, const ResizePlan& p, const TensorView& X, uint8_t* base, size_t* bytes) {
  const int r = static_cast<int>(X.rank());
  if (r > kMaxAxes) throw Error("Resize: the CUDA backend resizes tensors of rank at most 8");
  Tables t;
  t.rank = r;
  t.mode = a.mode;
  t.ctm = a.coordinate_transformation_mode;
  t.nearest = a.nearest_mode;
  t.cubic_a = a.cubic_coeff_a;
  t.antialias = a.antialias == 1;
  t.exclude_outside = a.exclude_outside != 0;
  t.extrapolates = a.coordinate_transformation_mode == CoordinateTransform::kTfCropAndResize;
  size_t off = 0;
  int64_t stride = 1;
  for (int i = r - 1; i >= 0; --i) {
    Axis& ax = t.ax[i];
    ax.in = X.shape[i];
    ax.out = p.out_shape[i];
    ax.in_stride = stride;
    stride *= X.shape[i];
    ax.scale = p.scales[i];
    ax.roi0 = p.roi[i];
    ax.roi1 = p.roi[r + i];
    ax.table = !p.identity[i];
    if (ax.out < (int64_t{1} << 31)) ax.div = FastDiv(static_cast<uint32_t>(std::max<int64_t>(ax.out, 1)));
    if (!ax.table) continue;
    if (ax.in >= (int64_t{1} << 31)) throw Error("Resize: input axis too long for the CUDA backend");
    if (a.mode == ResizeMode::kNearest) {
      ax.taps = 1;
    } else {
      const double s = std::min(ax.scale, 1.0);
      int64_t first;
      if (a.mode == ResizeMode::kLinear)
        first = t.antialias ? static_cast<int64_t>(std::floor(-1 / s)) + 1 : 0;
      else
        first = t.antialias ? static_cast<int64_t>(std::floor(-2 / s)) + 1 : -1;
      if (first < -(int64_t{1} << 20)) throw Error("Resize: antialias kernel too wide for the CUDA backend");
      ax.first = static_cast<int>(first);
      ax.taps = static_cast<int>(2 - 2 * first);
    }
    const size_t cells = static_cast<size_t>(ax.out) * static_cast<size_t>(ax.taps);
    ax.idx = base ? reinterpret_cast<int32_t*>(base + off) : nullptr;
    off = align16(off + cells * sizeof(int32_t));
    if (a.mode != ResizeMode::kNearest) {
      ax.w = base ? reinterpret_cast<double*>(base + off) : nullptr;
      off = align16(off + cells * sizeof(double));
      ax.wf = base ? reinterpret_cast<float*>(base + off) : nullptr;
      off = align16(off + cells * sizeof(float));
    }
    ax.ex = base ? base + off : nullptr;
    off = align16(off + static_cast<size_t>(ax.out));
    t.table_rows += ax.out;
  }
  for (int i = 0; i < r; ++i) {
    if (!t.ax[i].table) continue;
    t.active[t.nactive] = i;
    t.act[t.nactive++] = t.ax[i];
  }
  *bytes = off;
  return t;
}

// ---- setup: the CPU's plan_axis, one thread per (resized axis, output position) -------------------
__device__ double source_coord(const Tables& t, const Axis& ax, double y, bool* extrap) {
  const double scale = ax.scale, r0 = ax.roi0, r1 = ax.roi1;
  const double ow = __dmul_rn(scale, static_cast<double>(ax.in));
  const double inm1 = static_cast<double>(ax.in - 1);
  double x = 0;
  *extrap = false;
  switch (t.ctm) {
    case CoordinateTransform::kAlignCorners: x = ow == 1 ? 0.0 : __ddiv_rn(__dmul_rn(y, inm1), __dsub_rn(ow, 1)); break;
    case CoordinateTransform::kAsymmetric: x = __ddiv_rn(y, scale); break;
    case CoordinateTransform::kTfCropAndResize:
      x = ow == 1 ? __ddiv_rn(__dmul_rn(__dsub_rn(r1, r0), inm1), 2)
                  : __ddiv_rn(__dmul_rn(__dmul_rn(y, __dsub_rn(r1, r0)), inm1), __dsub_rn(ow, 1));
      x = __dadd_rn(x, __dmul_rn(r0, inm1));
      *extrap = x < 0 || x > inm1;
      break;
    case CoordinateTransform::kPytorchHalfPixel:
      x = ow == 1 ? -0.5 : __dsub_rn(__ddiv_rn(__dadd_rn(y, 0.5), scale), 0.5);
      break;
    case CoordinateTransform::kHalfPixel: x = __dsub_rn(__ddiv_rn(__dadd_rn(y, 0.5), scale), 0.5); break;
    case CoordinateTransform::kHalfPixelSymmetric: {
      const double adjustment = __ddiv_rn(static_cast<double>(ax.out), ow);
      const double offset = __dmul_rn(__ddiv_rn(static_cast<double>(ax.in), 2), __dsub_rn(1, adjustment));
      x = __dsub_rn(__dadd_rn(offset, __ddiv_rn(__dadd_rn(y, 0.5), scale)), 0.5);
      break;
    }
  }
  return x < -kCoordLimit ? -kCoordLimit : kCoordLimit < x ? kCoordLimit : x;
}

__device__ double cubic_kernel(double x, double A) {  // Keys' cubic convolution kernel
  x = fabs(x);
  if (x <= 1)
    return __dadd_rn(__dmul_rn(__dmul_rn(__dsub_rn(__dmul_rn(__dadd_rn(A, 2), x), __dadd_rn(A, 3)), x), x), 1);
  if (x < 2)
    return __dsub_rn(
        __dmul_rn(__dadd_rn(__dmul_rn(__dsub_rn(__dmul_rn(A, x), __dmul_rn(5, A)), x), __dmul_rn(8, A)), x),
        __dmul_rn(4, A));
  return 0;
}

__device__ __forceinline__ int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : hi < v ? hi : v; }

__global__ void resize_setup_kernel(const __grid_constant__ Tables t) {
  for (int64_t g = ew::global_thread(); g < t.table_rows; g += ew::grid_threads()) {
    int k = 0;
    int64_t o = g;
    while (o >= t.act[k].out) o -= t.act[k++].out;
    const Axis& ax = t.act[k];
    bool ex = false;
    const double x = source_coord(t, ax, static_cast<double>(o), &ex);
    ax.ex[o] = ex;
    if (t.mode == ResizeMode::kNearest) {
      const double fl = floor(x), ratio = __dsub_rn(x, fl);
      double v = fl;
      if (ratio != 0) {
        switch (t.nearest) {
          case NearestMode::kRoundPreferFloor: v = ratio <= 0.5 ? fl : __dadd_rn(fl, 1); break;
          case NearestMode::kRoundPreferCeil: v = ratio < 0.5 ? fl : __dadd_rn(fl, 1); break;
          case NearestMode::kFloor: v = fl; break;
          case NearestMode::kCeil: v = __dadd_rn(fl, 1); break;
        }
      }
      ax.idx[o] = static_cast<int32_t>(clamp64(static_cast<int64_t>(v), 0, ax.in - 1));
      continue;
    }
    double fl = floor(x), ratio = __dsub_rn(x, fl);
    if (ratio == 0) {
      fl = __dsub_rn(fl, 1);
      ratio = 1;
    }
    const int64_t xi = static_cast<int64_t>(fl);
    const int taps = ax.taps;
    const double s = ax.scale < 1.0 ? ax.scale : 1.0;
    double* w = ax.w + o * taps;
    double sum = 0;
    for (int j = 0; j < taps; ++j) {
      const double d = __dsub_rn(static_cast<double>(ax.first + j), ratio);  // tap position minus x
      if (t.mode == ResizeMode::kLinear) {
        if (t.antialias) {
          const double v = __dsub_rn(1, fabs(__dmul_rn(d, s)));
          w[j] = v < 0 ? 0.0 : 1.0 < v ? 1.0 : v;
        } else {
          w[j] = j == 0 ? __dsub_rn(1, ratio) : ratio;
        }
      } else {
        w[j] = cubic_kernel(t.antialias ? __dmul_rn(d, s) : d, t.cubic_a);
      }
      sum = __dadd_rn(sum, w[j]);
    }
    if (t.antialias && sum != 0)
      for (int j = 0; j < taps; ++j) w[j] = __ddiv_rn(w[j], sum);
    if (t.exclude_outside) {
      double kept = 0;
      for (int j = 0; j < taps; ++j) {
        const int64_t src = xi + ax.first + j;
        if (src < 0 || src >= ax.in) w[j] = 0;
        kept = __dadd_rn(kept, w[j]);
      }
      if (kept == 0) kept = 1;
      for (int j = 0; j < taps; ++j) w[j] = __ddiv_rn(w[j], kept);
    }
    for (int j = 0; j < taps; ++j) {
      ax.idx[o * taps + j] = static_cast<int32_t>(clamp64(xi + ax.first + j, 0, ax.in - 1));
      ax.wf[o * taps + j] = static_cast<float>(w[j]);
    }
  }
}

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
      const int32_t* i0 = a0.idx + o[0] * a0.taps;
      const int64_t c0 = o[0] * a0.taps;
      r = 0;
      for (int j = 0; j < a0.taps; ++j)
        r = mul_add_nc(r, weight<C>(a0, c0 + j), to_c<T, C>(x[base + static_cast<int64_t>(i0[j]) * a0.in_stride]));
    } else if constexpr (L == 2) {
      const Axis &a0 = t.act[0], &a1 = t.act[1];
      const int32_t *i0 = a0.idx + o[0] * a0.taps, *i1 = a1.idx + o[1] * a1.taps;
      const int64_t c0 = o[0] * a0.taps, c1 = o[1] * a1.taps;
      r = 0;
      for (int j1 = 0; j1 < a1.taps; ++j1) {
        const T* row = x + base + static_cast<int64_t>(i1[j1]) * a1.in_stride;
        C acc = 0;
        for (int j0 = 0; j0 < a0.taps; ++j0)
          acc = mul_add_nc(acc, weight<C>(a0, c0 + j0), to_c<T, C>(row[static_cast<int64_t>(i0[j0]) * a0.in_stride]));
        r = mul_add_nc(r, weight<C>(a1, c1 + j1), acc);
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
    case DataType::kFloat64: return fn(Tag<double>{}, Tag<double>{});
    case DataType::kInt8: return fn(Tag<int8_t>{}, Tag<double>{});
    case DataType::kUInt8: return fn(Tag<uint8_t>{}, Tag<double>{});
    case DataType::kInt32: return fn(Tag<int32_t>{}, Tag<double>{});
    case DataType::kInt64: return fn(Tag<int64_t>{}, Tag<double>{});
    default: ew::throw_gpu_dtype(dt, "Resize");
  }
}

size_t resize_workspace(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView>,
                        GpuEnv& env) {
  const auto& a = std::get<ResizeAttrs>(attrs);
  size_t bytes = 0;
  layout(a, plan_of(a, in, env), in[0], nullptr, &bytes);
  return bytes;
}

void resize_gpu(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                GpuEnv& env) {
  const auto& a = std::get<ResizeAttrs>(attrs);
  const TensorView &X = in[0], &Y = out[0];
  const ResizePlan p = plan_of(a, in, env);
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
  const Tables t = layout(a, p, X, static_cast<uint8_t*>(env.workspace), &bytes);
  if (env.workspace_bytes < bytes) throw Error("Resize: the workspace is smaller than the entry asked for");
  resize_setup_kernel<<<ew::blocks_for(t.table_rows), kThreads, 0, env.stream>>>(t);
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

std::span<const GpuKernelEntry> resize_entries() { return kEntries; }

}  // namespace kiln::gpu::pool
