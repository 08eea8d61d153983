// Shape inference of the resize family, Resize: output sizes from scales (floor(in * scale)) or sizes
// (adjusted by keep_aspect_ratio_policy), following onnx/reference/ops/op_resize.py. resize_plan
// (core/infer/nn_geometry.h) is shared with the CPU and CUDA kernels.
#include <cmath>
#include <string>

#include "core/infer/nn_geometry.h"
#include "core/shape_infer.h"

namespace kiln::nn {

namespace {

// Output dimensions beyond this are rejected (no real model gets near; keeps doubles exact).
constexpr double kMaxDim = 9007199254740992.0;  // 2^53

bool given(std::span<const TensorView> in, size_t i) { return in.size() > i && in[i].exists && in[i].numel() > 0; }

}  // namespace

ResizePlan resize_plan(const ResizeAttrs& a, std::span<const TensorView> in) {
  const TensorView& x = in[0];
  const int64_t r = static_cast<int64_t>(x.rank());
  for (int64_t d : x.shape)
    if (d < 0) throw Error("Resize: X has a negative dimension");
  if (a.antialias != 0 && a.antialias != 1) throw Error("Resize: antialias must be 0 or 1");
  if (a.exclude_outside != 0 && a.exclude_outside != 1) throw Error("Resize: exclude_outside must be 0 or 1");
  if (a.antialias && a.mode == ResizeMode::kNearest)
    throw Error("Resize: antialias is not supported with mode nearest");
  if (!std::isfinite(a.cubic_coeff_a)) throw Error("Resize: cubic_coeff_a must be finite");

  // The axes the scales/sizes/roi entries refer to.
  std::vector<int64_t> axes;
  if (a.axes.empty()) {
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  } else {
    std::vector<uint8_t> seen(static_cast<size_t>(r), 0);
    for (int64_t ax : a.axes) {
      int64_t n = normalize_axis(ax, r, "Resize axes entry");
      if (seen[n]) throw Error("Resize: axes has a repeated axis");
      seen[n] = 1;
      axes.push_back(n);
    }
  }
  const size_t na = axes.size();

  ResizePlan p;
  p.out_shape.assign(x.shape.begin(), x.shape.end());
  p.scales.assign(static_cast<size_t>(r), 1.0);
  p.roi.assign(2 * static_cast<size_t>(r), 0.0);
  for (int64_t i = 0; i < r; ++i) p.roi[r + i] = 1.0;
  p.identity.assign(static_cast<size_t>(r), 1);

  const bool has_scales = given(in, 2), has_sizes = given(in, 3);
  if (has_scales == has_sizes) throw Error("Resize needs exactly one of scales and sizes");
  if (has_scales) {
    const TensorView& s = in[2];
    if (s.dtype != DataType::kFloat32) throw Error("Resize: scales must be float32");
    if (s.rank() != 1 || static_cast<size_t>(s.numel()) != na)
      throw Error("Resize: scales must be 1-D with " + std::to_string(na) + " entries");
    if (!s.data) throw Error("Resize: scales must be a constant");
    for (size_t i = 0; i < na; ++i) {
      const double sc = s.as<const float>()[i];
      if (!(sc > 0) || !std::isfinite(sc)) throw Error("Resize: scales must be positive and finite");
      const int64_t ax = axes[i];
      const double o = std::floor(sc * static_cast<double>(x.shape[ax]));
      if (o >= kMaxDim) throw Error("Resize: output dimension is too large");
      p.scales[ax] = sc;
      p.out_shape[ax] = static_cast<int64_t>(o);
    }
  } else {
    const TensorView& s = in[3];
    if (s.dtype != DataType::kInt64) throw Error("Resize: sizes must be int64");
    if (s.rank() != 1 || static_cast<size_t>(s.numel()) != na)
      throw Error("Resize: sizes must be 1-D with " + std::to_string(na) + " entries");
    if (!s.data) throw Error("Resize: sizes must be a constant");
    const int64_t* sz = s.as<const int64_t>();
    for (size_t i = 0; i < na; ++i) {
      if (sz[i] < 0 || static_cast<double>(sz[i]) >= kMaxDim) throw Error("Resize: sizes entry out of range");
      if (x.shape[axes[i]] == 0 && sz[i] != 0) throw Error("Resize: cannot resize an empty axis to a non-empty one");
    }
    if (a.keep_aspect_ratio_policy == AspectRatioPolicy::kStretch) {
      for (size_t i = 0; i < na; ++i) {
        const int64_t ax = axes[i];
        p.out_shape[ax] = sz[i];
        p.scales[ax] = x.shape[ax] > 0 ? static_cast<double>(sz[i]) / static_cast<double>(x.shape[ax]) : 1.0;
      }
    } else {
      // One scale for all the axes: the smallest (not_larger) or largest (not_smaller) ratio, and
      // sizes round(scale * in) with halves rounded up.
      double scale = 0;
      bool first = true;
      for (size_t i = 0; i < na; ++i) {
        if (x.shape[axes[i]] == 0) continue;
        const double q = static_cast<double>(sz[i]) / static_cast<double>(x.shape[axes[i]]);
        if (first || (a.keep_aspect_ratio_policy == AspectRatioPolicy::kNotLarger ? q < scale : q > scale)) scale = q;
        first = false;
      }
      if (first) scale = 1.0;
      for (size_t i = 0; i < na; ++i) {
        const int64_t ax = axes[i];
        const double o = std::floor(scale * static_cast<double>(x.shape[ax]) + 0.5);
        if (o >= kMaxDim) throw Error("Resize: output dimension is too large");
        p.out_shape[ax] = static_cast<int64_t>(o);
        p.scales[ax] = scale;
      }
    }
  }
  if (given(in, 1)) {
    const TensorView& roi = in[1];
    if (roi.dtype != DataType::kFloat32 && roi.dtype != DataType::kFloat64 && roi.dtype != DataType::kFloat16 &&
        roi.dtype != DataType::kBFloat16)
      throw Error("Resize: roi must be a float tensor");
    if (roi.rank() != 1 || static_cast<size_t>(roi.numel()) != 2 * na)
      throw Error("Resize: roi must be 1-D with " + std::to_string(2 * na) + " entries");
    if (a.coordinate_transformation_mode == CoordinateTransform::kTfCropAndResize) {
      if (!roi.data) throw Error("Resize: roi must be a constant");
      std::vector<double> v = roi.to_double();
      for (double d : v)
        if (!std::isfinite(d)) throw Error("Resize: roi values must be finite");
      for (size_t i = 0; i < na; ++i) {
        p.roi[axes[i]] = v[i];
        p.roi[r + axes[i]] = v[na + i];
      }
    }
  }
  for (size_t i = 0; i < na; ++i) {
    const int64_t ax = axes[i];
    const bool roi_id = std::abs(p.roi[ax]) <= 1e-9 && std::abs(p.roi[r + ax] - 1.0) <= 1e-9;
    p.identity[ax] = std::abs(p.scales[ax] - 1.0) <= 1e-9 && p.out_shape[ax] == x.shape[ax] && roi_id;
  }
  return p;
}

namespace {

std::vector<OutputType> infer_resize(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const auto& a = attrs_as<ResizeAttrs>(attrs);
  if (a.mode != ResizeMode::kNearest && in[0].dtype == DataType::kBool)
    throw Error("Resize: linear and cubic modes need a numeric input, got bool");
  if (in[0].rank() == 0) throw Error("Resize: X must have rank >= 1");
  ResizePlan p = resize_plan(a, in);
  return {OutputType{in[0].dtype, p.out_shape}};
}

constexpr InferEntry kEntries[] = {
    {OpKind::kResize, infer_resize},
};

}  // namespace

}  // namespace kiln::nn

namespace kiln {

std::span<const InferEntry> resize_infer_entries() { return nn::kEntries; }

}  // namespace kiln
