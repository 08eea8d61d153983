// CPU kernels of DepthToSpace and SpaceToDepth: a strided copy of the input (layout.cpp's
// strided_copy) into the contiguous output.
#include <vector>

#include "core/shape_infer.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/tensor/tensor_internal.h"

namespace kiln::cpu::tensor_ops {

namespace {

using Dims = std::vector<int64_t>;

// DepthToSpace: output [N, C', H, b, W, b] is a permutation of the input split as
// DCR [N, b1, b2, C', H, W] or CRD [N, C', b1, b2, H, W]. SpaceToDepth: output [N, b1, b2, C, H', W']
// from input [N, C, H', b1, W', b2].
void k_depth_space(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                   KernelEnv& env) {
  const auto& a = attrs_as<DepthToSpaceAttrs>(attrs);
  const TensorView& x = in[0];
  const int64_t b = a.blocksize, n = x.shape[0], c = x.shape[1], h = x.shape[2], w = x.shape[3];
  const int64_t hw = h * w, chw = c * hw;
  Dims shape, strides;
  if (kind == OpKind::kDepthToSpace) {
    const int64_t cc = c / (b * b);
    shape = {n, cc, h, b, w, b};
    if (a.mode == DepthToSpaceMode::kDcr)  // input [N, b1, b2, C', H, W] strides
      strides = {chw, hw, w, b * cc * hw, 1, cc * hw};
    else  // input [N, C', b1, b2, H, W]
      strides = {chw, b * b * hw, w, b * hw, 1, hw};
  } else {
    const int64_t ho = h / b, wo = w / b;
    shape = {n, b, b, c, ho, wo};
    strides = {chw, w, 1, hw, b * w, b};
  }
  strided_copy(x.dtype, shape, strides, x.data, out[0].data, env);
}

constexpr KernelEntry kEntries[] = {
    {OpKind::kDepthToSpace, k_depth_space},
    {OpKind::kSpaceToDepth, k_depth_space},
};

}  // namespace

std::span<const KernelEntry> depth_space_kernel_entries() { return kEntries; }

}  // namespace kiln::cpu::tensor_ops
