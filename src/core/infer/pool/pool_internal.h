// The shape inference functions of the pool family's groups (window.cpp, global.cpp, nhwc.cpp),
// which registry.cpp lists.
#pragma once

#include <span>
#include <vector>

#include "core/shape_infer.h"

namespace kiln::nn {

// window.cpp: AveragePool, MaxPool
std::vector<OutputType> infer_pool(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t num_outputs);
// global.cpp: GlobalAveragePool, GlobalMaxPool
std::vector<OutputType> infer_global_pool(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t);
// nhwc.cpp: NhwcAveragePool, NhwcMaxPool
std::vector<OutputType> infer_nhwc_pool(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t n);

}  // namespace kiln::nn
