// Resolved geometry of Conv, ConvTranspose, the pools and Resize, shared by shape inference and the
// CPU and CUDA kernels so all derive output sizes and pads by one set of rules. Defined in
// core/infer/nn_geometry.cpp, resize_plan in core/infer/resize/resize.cpp.
// Every function validates its inputs and throws kiln::Error; the results are safe to index with.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/attrs.h"
#include "core/tensor.h"

namespace kiln::nn {

// A sliding window over n spatial axes. For Conv and the pools `in` is the input image and `out`
// the output grid; for ConvTranspose `in` is X's grid and `out` Y's image. Image position of grid
// position o and kernel tap j on axis i: o * strides[i] - pads[i] + j * dilations[i].
// ConvTranspose pads may be negative (output_shape larger than the full result).
struct WindowGeometry {
  std::vector<int64_t> in, out, kernel, strides, dilations;
  std::vector<int64_t> pads;  // [begin_0 .. begin_{n-1}, end_0 .. end_{n-1}]

  size_t rank() const { return in.size(); }
  static int64_t product(const std::vector<int64_t>& v) {
    int64_t p = 1;
    for (int64_t d : v) p *= d;
    return p;
  }
};

// X [N, C, in...], W [M, C/group, k...].
WindowGeometry conv_geometry(const ConvAttrs& attrs, std::span<const int64_t> x_shape,
                             std::span<const int64_t> w_shape);
// X [N, C, in...], W [C, M/group, k...].
WindowGeometry conv_transpose_geometry(const ConvAttrs& attrs, std::span<const int64_t> x_shape,
                                       std::span<const int64_t> w_shape);
// X [N, C, in...].
WindowGeometry pool_geometry(const PoolAttrs& attrs, std::span<const int64_t> x_shape);

// Resize with scales/sizes/roi resolved to one entry per axis of X.
struct ResizePlan {
  std::vector<int64_t> out_shape;
  std::vector<double> scales;     // the scale the coordinate transform divides by
  std::vector<double> roi;        // [start_0 .. start_{r-1}, end_0 .. end_{r-1}]
  std::vector<uint8_t> identity;  // axis left exactly as is (skipped, as the ONNX reference does)
};
// inputs: X, roi, scales, sizes (the last three optional; empty tensors count as omitted). The
// optional ones must carry data.
ResizePlan resize_plan(const ResizeAttrs& attrs, std::span<const TensorView> inputs);

}  // namespace kiln::nn
