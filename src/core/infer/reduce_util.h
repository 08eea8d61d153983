// Helpers of the reduce family shared by its shape inference (src/core/infer/reduce/) and its
// CPU kernels (src/runtime/cpu/ops/reduce*.cpp), so both sides agree on axes and equations.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "core/attrs.h"
#include "core/tensor.h"

namespace kiln {

// Which dimensions of `data` a Reduce* op reduces, given its optional axes input (int64 1-D
// constant). Axes absent or empty: all dimensions, or none when noop_with_empty_axes = 1.
// Throws kiln::Error on out-of-range or repeated axes.
std::vector<bool> reduce_axes_mask(const ReduceAttrs& attrs, const TensorView& data, const TensorView* axes);

// A parsed Einsum equation bound to concrete input shapes. Labels: 0..25 'a'..'z', 26..51
// 'A'..'Z', 52 + j the j-th of ell_rank broadcast ellipsis dimensions (right-aligned).
struct EinsumPlan {
  static constexpr int kEllipsisBase = 52;
  int ell_rank = 0;
  std::vector<std::vector<int>> in_labels;  // per input, one label per dimension
  std::vector<int> out_labels;              // one label per output dimension
  std::vector<int64_t> label_dims;          // size kEllipsisBase + ell_rank; -1 when unused
  std::vector<int64_t> out_shape;
};

// Parses and validates `equation` against the inputs' shapes; throws kiln::Error when it is
// malformed or does not fit the inputs.
EinsumPlan parse_einsum(std::string_view equation, std::span<const TensorView> inputs);

}  // namespace kiln
