// The rules by which the build's view planner (build/view_plan.h) makes a value a view of another
// one. A rewrite that relies on a view forming (fuse-siblings: a Split that costs nothing) asks
// these, so that the two agree.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/types.h"

namespace kiln::passes {

// The view planner's stages, each disabled by name like a pass (--disable-pass).
inline constexpr const char* kViewStages[] = {"view-reshapes", "eliminate-concat", "eliminate-split"};

// The byte alignment a view needs on `target`: the element size on the CPU; 16 bytes on a GPU, below
// which cuDNN convolutions and the vectorized kernels fall back to slower paths.
inline uint64_t view_alignment(const std::string& target, DataType dtype) {
  const uint64_t element = dtype_size(dtype);
  return target == "cpu" ? element : std::max<uint64_t>(16, element);
}

// True when a Concat (or Split) along `axis` of a tensor of this shape has contiguous slices: the
// dims before the axis multiply to 1.
inline bool contiguous_slices(const std::vector<int64_t>& shape, int64_t axis) {
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= shape[static_cast<size_t>(d)];
  return outer == 1;
}

}  // namespace kiln::passes
