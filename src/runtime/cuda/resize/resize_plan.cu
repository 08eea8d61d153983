// The Resize plan on the host and its tables on the device: see resize.cuh.
#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/cuda/resize/resize.cuh"

namespace kiln::gpu::resize {

using kiln::nn::ResizePlan;

namespace {

constexpr double kCoordLimit = 1e15;

size_t align16(size_t v) { return (v + 15) / 16 * 16; }

}  // namespace

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
  // Adjacent axes left as they are merge into one (their out == in): fewer axes for the kernels to
  // decode ([N, C, H, W] resized on H and W becomes [N * C, H, W]).
  int m = 0;
  for (int i = 0; i < r; ++i) {
    const Axis& ax = t.ax[i];
    if (m > 0 && !ax.table && !t.ax[m - 1].table) {
      Axis& prev = t.ax[m - 1];
      prev.in *= ax.in;
      prev.out *= ax.out;
      prev.in_stride = ax.in_stride;
      if (prev.out < (int64_t{1} << 31)) prev.div = FastDiv(static_cast<uint32_t>(std::max<int64_t>(prev.out, 1)));
    } else {
      t.ax[m++] = ax;
    }
  }
  t.rank = m;
  for (int i = 0; i < m; ++i) {
    if (!t.ax[i].table) continue;
    t.active[t.nactive] = i;
    t.act[t.nactive++] = t.ax[i];
  }
  *bytes = off;
  return t;
}

namespace {

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

}  // namespace

void launch_setup(const Tables& t, cudaStream_t stream) {
  resize_setup_kernel<<<ew::blocks_for(t.table_rows), kThreads, 0, stream>>>(t);
  check_launch("Resize");
}

}  // namespace kiln::gpu::resize
