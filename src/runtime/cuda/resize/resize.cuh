// Resize on the GPU (resize.cu, resize_plan.cu), every mode, coordinate transformation,
// nearest mode, antialias, any rank up to 8, with the CPU kernel's results
// (runtime/cpu/resize/resize.cpp, after onnx's op_resize.py).
//
// The host resolves the plan (output sizes, scales, roi) from the constant inputs' host copies. Per
// resized axis a setup kernel (resize_plan.cu) tabulates, in the workspace, what the CPU's
// plan_axis computes: the source index of each output position (nearest) or its taps' clamped
// indices and weights (linear, cubic: double, and float copies for the float compute type), and
// whether it extrapolates (tf_crop_and_resize). It uses the same double operations, uncontracted
// (__dmul_rn, ...), so every index and weight is the CPU's exactly. Axes the plan leaves as they
// are get no table.
#pragma once

#include <span>

#include "core/infer/nn_geometry.h"
#include "runtime/cuda/device_math.cuh"
#include "runtime/cuda/elementwise/elementwise_internal.cuh"

namespace kiln::gpu::resize {

using ew::Compute;
using ew::kThreads;
using ew::load;
using ew::store;

constexpr int kMaxAxes = ew::kMaxDims;

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
  int rank = 0;  // axes after merging the adjacent ones left as they are
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

// The plan from the constant inputs' host copies (env.host); throws if they are missing.
kiln::nn::ResizePlan plan_of(const ResizeAttrs& a, std::span<const TensorView> in, const GpuEnv& env);
// Axis geometry and the tables' layout in the workspace at `base` (null: only measure *bytes).
Tables layout(const ResizeAttrs& a, const kiln::nn::ResizePlan& p, const TensorView& X, uint8_t* base, size_t* bytes);
// Fills the tables (the workspace passed to layout) on `stream`.
void launch_setup(const Tables& t, cudaStream_t stream);

}  // namespace kiln::gpu::resize
