// Resize on the CPU, following onnx/reference/ops/op_resize.py.
// Each axis maps output index y to a source coordinate x (coordinate_transformation_mode), then:
// nearest picks one source index (a pure gather, exact for every type); linear and cubic weigh
// `taps` neighbours source[x_int + first + t] (indices clamped to the edge), applied one axis at a
// time (the interpolation is separable). Antialias widens the kernel by 1/scale when downsampling.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/infer/nn_geometry.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln::cpu::resize {

namespace {

using kiln::nn::ResizePlan;

// Source coordinates are clamped to this before converting to an integer (indices are clamped to
// the input anyway; this only keeps the conversion defined).
constexpr double kCoordLimit = 1e15;

struct AxisPlan {
  int64_t taps = 0;
  std::vector<int64_t> idx;     // [out * taps], clamped into [0, in); nearest: [out]
  std::vector<double> w;        // [out * taps]
  std::vector<uint8_t> extrap;  // [out]: tf_crop_and_resize source outside the input
};

// Source coordinate of output index y on one axis (op_resize.py _compute_x_ori).
double source_coord(const ResizeAttrs& a, double y, double scale, int64_t in, int64_t out, double r0, double r1,
                    bool* extrap) {
  const double ow = scale * static_cast<double>(in);  // the reference divides by this, not by `out`
  const double inm1 = static_cast<double>(in - 1);
  double x = 0;
  *extrap = false;
  switch (a.coordinate_transformation_mode) {
    case CoordinateTransform::kAlignCorners: x = ow == 1 ? 0.0 : y * inm1 / (ow - 1); break;
    case CoordinateTransform::kAsymmetric: x = y / scale; break;
    case CoordinateTransform::kTfCropAndResize:
      x = ow == 1 ? (r1 - r0) * inm1 / 2 : y * (r1 - r0) * inm1 / (ow - 1);
      x += r0 * inm1;
      *extrap = x < 0 || x > inm1;
      break;
    case CoordinateTransform::kPytorchHalfPixel: x = ow == 1 ? -0.5 : (y + 0.5) / scale - 0.5; break;
    case CoordinateTransform::kHalfPixel: x = (y + 0.5) / scale - 0.5; break;
    case CoordinateTransform::kHalfPixelSymmetric: {
      const double adjustment = static_cast<double>(out) / ow;
      const double offset = static_cast<double>(in) / 2 * (1 - adjustment);
      x = offset + (y + 0.5) / scale - 0.5;
      break;
    }
  }
  return std::clamp(x, -kCoordLimit, kCoordLimit);
}

double cubic_kernel(double x, double A) {  // Keys' cubic convolution kernel
  x = std::abs(x);
  if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
  if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
  return 0;
}

AxisPlan plan_axis(const ResizeAttrs& a, const ResizePlan& p, size_t axis, int64_t in) {
  const int64_t out = p.out_shape[axis];
  const double scale = p.scales[axis];
  const size_t r = p.scales.size();
  AxisPlan ap;
  ap.extrap.assign(static_cast<size_t>(out), 0);
  if (a.mode == ResizeMode::kNearest) {
    ap.taps = 1;
    ap.idx.resize(static_cast<size_t>(out));
    for (int64_t o = 0; o < out; ++o) {
      bool ex;
      const double x = source_coord(a, static_cast<double>(o), scale, in, out, p.roi[axis], p.roi[r + axis], &ex);
      const double fl = std::floor(x), ratio = x - fl;
      double v = fl;
      if (ratio != 0) {
        switch (a.nearest_mode) {
          case NearestMode::kRoundPreferFloor: v = ratio <= 0.5 ? fl : fl + 1; break;
          case NearestMode::kRoundPreferCeil: v = ratio < 0.5 ? fl : fl + 1; break;
          case NearestMode::kFloor: v = fl; break;
          case NearestMode::kCeil: v = fl + 1; break;
        }
      }
      ap.idx[o] = p.identity[axis] ? o : std::clamp<int64_t>(static_cast<int64_t>(v), 0, in - 1);
      ap.extrap[o] = ex;
    }
    return ap;
  }
  // Linear/cubic: tap t of output o is x_int + first + t with weight f(first + t - ratio), where
  // ratio is in (0, 1] (an integral x counts as ratio 1 of the pixel to its left).
  const double A = a.cubic_coeff_a;
  const bool aa = a.antialias == 1;
  const double s = std::min(scale, 1.0);
  int64_t first;
  if (a.mode == ResizeMode::kLinear)
    first = aa ? static_cast<int64_t>(std::floor(-1 / s)) + 1 : 0;
  else
    first = aa ? static_cast<int64_t>(std::floor(-2 / s)) + 1 : -1;
  ap.taps = 2 - 2 * first;
  const int64_t taps = ap.taps;
  ap.idx.resize(static_cast<size_t>(out * taps));
  ap.w.resize(static_cast<size_t>(out * taps));
  for (int64_t o = 0; o < out; ++o) {
    bool ex;
    const double x = source_coord(a, static_cast<double>(o), scale, in, out, p.roi[axis], p.roi[r + axis], &ex);
    ap.extrap[o] = ex;
    double fl = std::floor(x), ratio = x - fl;
    if (ratio == 0) {
      fl -= 1;
      ratio = 1;
    }
    const int64_t xi = static_cast<int64_t>(fl);
    double* w = &ap.w[o * taps];
    double sum = 0;
    for (int64_t t = 0; t < taps; ++t) {
      const double d = static_cast<double>(first + t) - ratio;  // tap position minus x
      if (a.mode == ResizeMode::kLinear)
        w[t] = aa ? std::clamp(1 - std::abs(d * s), 0.0, 1.0) : (t == 0 ? 1 - ratio : ratio);
      else
        w[t] = cubic_kernel(aa ? d * s : d, A);
      sum += w[t];
    }
    if (aa && sum != 0)
      for (int64_t t = 0; t < taps; ++t) w[t] /= sum;
    if (a.exclude_outside) {
      double kept = 0;
      for (int64_t t = 0; t < taps; ++t) {
        const int64_t src = xi + first + t;
        if (src < 0 || src >= in) w[t] = 0;
        kept += w[t];
      }
      if (kept == 0) kept = 1;
      for (int64_t t = 0; t < taps; ++t) w[t] /= kept;
    }
    for (int64_t t = 0; t < taps; ++t) ap.idx[o * taps + t] = std::clamp<int64_t>(xi + first + t, 0, in - 1);
  }
  return ap;
}

void run_parallel(ThreadPool* pool, int64_t n, int64_t work, const std::function<void(int64_t, int64_t)>& fn) {
  if (pool && pool->team() > 1 && n > 1 && n * work >= (1 << 15))
    pool->parallel_for(n, fn);
  else
    fn(0, n);
}

// Float/double -> T, rounding half to even and saturating for integers (op_resize's saturate_cast).
template <class T>
T from_double(double v) {
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

template <class T>
void resize_nearest(const ResizeAttrs& a, const ResizePlan& p, const std::vector<AxisPlan>& axes, const TensorView& X,
                    const TensorView& Y, ThreadPool* pool) {
  const size_t r = X.rank();
  const std::vector<int64_t> is = strides_of(X.shape);
  const T fill = from_double<T>(a.extrapolation_value);
  const T* x = X.as<const T>();
  T* y = Y.as<T>();
  const int64_t last = p.out_shape[r - 1];
  const int64_t rows = last > 0 ? Y.numel() / last : 0;
  run_parallel(pool, rows, last, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      int64_t rem = q, base = 0;
      bool ex = false;
      for (size_t i = r - 1; i-- > 0;) {
        const int64_t o = rem % p.out_shape[i];
        rem /= p.out_shape[i];
        base += axes[i].idx[o] * is[i];
        ex |= axes[i].extrap[o] != 0;
      }
      T* yr = y + q * last;
      const AxisPlan& la = axes[r - 1];
      for (int64_t o = 0; o < last; ++o) yr[o] = (ex || la.extrap[o]) ? fill : x[base + la.idx[o]];
    }
  });
}

// One separable pass over `axis`: src [outer, in, inner] -> dst [outer, out, inner].
template <class C>
void interpolate_axis(const C* src, C* dst, int64_t outer, int64_t in, int64_t out, int64_t inner, const AxisPlan& ap,
                      C fill, ThreadPool* pool) {
  const int64_t taps = ap.taps;
  run_parallel(pool, outer * out, inner * taps, [&](int64_t r0, int64_t r1) {
    for (int64_t rr = r0; rr < r1; ++rr) {
      const int64_t oi = rr / out, o = rr % out;
      const C* s = src + oi * in * inner;
      C* d = dst + rr * inner;
      if (ap.extrap[o]) {
        std::fill(d, d + inner, fill);
        continue;
      }
      const int64_t* idx = &ap.idx[o * taps];
      const double* w = &ap.w[o * taps];
      if (inner == 1) {
        C acc = 0;
        for (int64_t t = 0; t < taps; ++t) acc += static_cast<C>(w[t]) * s[idx[t]];
        d[0] = acc;
      } else {
        std::fill(d, d + inner, C(0));
        for (int64_t t = 0; t < taps; ++t) {
          const C wt = static_cast<C>(w[t]);
          const C* st = s + idx[t] * inner;
          for (int64_t i = 0; i < inner; ++i) d[i] += wt * st[i];
        }
      }
    }
  });
}

template <class T>
void resize_interpolate(const ResizeAttrs& a, const ResizePlan& p, const std::vector<AxisPlan>& axes,
                        const TensorView& X, const TensorView& Y, ThreadPool* pool) {
  // float for float32 and the half types; double for float64 and integers, as the reference.
  using C = std::conditional_t<std::is_same_v<T, float> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>,
                               float, double>;
  const size_t r = X.rank();
  std::vector<int64_t> shape(X.shape.begin(), X.shape.end());
  std::vector<C> cur(static_cast<size_t>(X.numel())), next;
  const T* x = X.as<const T>();
  for (size_t i = 0; i < cur.size(); ++i) cur[i] = static_cast<C>(static_cast<ComputeType<T>>(x[i]));
  for (size_t ax = 0; ax < r; ++ax) {
    if (p.identity[ax]) continue;
    int64_t outer = 1, inner = 1;
    for (size_t i = 0; i < ax; ++i) outer *= shape[i];
    for (size_t i = ax + 1; i < r; ++i) inner *= shape[i];
    const int64_t in = shape[ax], out = p.out_shape[ax];
    next.assign(static_cast<size_t>(outer * out * inner), C(0));
    if (in > 0)
      interpolate_axis<C>(cur.data(), next.data(), outer, in, out, inner, axes[ax],
                          static_cast<C>(a.extrapolation_value), pool);
    cur.swap(next);
    shape[ax] = out;
  }
  T* y = Y.as<T>();
  for (size_t i = 0; i < cur.size(); ++i) y[i] = from_double<T>(static_cast<double>(cur[i]));
}

}  // namespace

void resize_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                   KernelEnv& env) {
  const auto& a = std::get<ResizeAttrs>(attrs);
  const TensorView &X = in[0], &Y = out[0];
  const ResizePlan p = kiln::nn::resize_plan(a, in);
  if (Y.numel() == 0) return;
  bool all_identity = true;
  for (uint8_t id : p.identity) all_identity &= id != 0;
  if (all_identity) {
    std::memcpy(Y.data, X.data, X.bytes());
    return;
  }
  std::vector<AxisPlan> axes(X.rank());
  for (size_t i = 0; i < X.rank(); ++i) {
    if (a.mode == ResizeMode::kNearest || !p.identity[i]) axes[i] = plan_axis(a, p, i, X.shape[i]);
  }
  if (a.mode == ResizeMode::kNearest) {
    dispatch_all(X.dtype, "Resize", [&](auto tag) {
      using T = typename decltype(tag)::type;
      resize_nearest<T>(a, p, axes, X, Y, env.pool);
    });
  } else {
    dispatch_numeric(X.dtype, "Resize", [&](auto tag) {
      using T = typename decltype(tag)::type;
      resize_interpolate<T>(a, p, axes, X, Y, env.pool);
    });
  }
}

namespace {

constexpr KernelEntry kEntries[] = {
    {OpKind::kResize, resize_kernel},
};

}  // namespace

}  // namespace kiln::cpu::resize

namespace kiln::cpu {

std::span<const KernelEntry> resize_kernels() { return resize::kEntries; }

}  // namespace kiln::cpu
