// CPU kernels of the tensor family's view ops: Reshape, Flatten, Squeeze and Unsqueeze (the input's
// bytes under the output's shape), Shape and Size.
#include <cstring>

#include "core/shape_infer.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/tensor/tensor_internal.h"

namespace kiln {
namespace tensor_plan {
// Defined in the tensor family's shape inference (core/infer/tensor/view.cpp).
void shape_bounds(int64_t start, int64_t end, int64_t rank, int64_t& s, int64_t& e);
}  // namespace tensor_plan

namespace cpu::tensor_ops {

namespace {

void copy_whole(const TensorView& in, const TensorView& out) {
  if (in.data != out.data && out.bytes() > 0) std::memcpy(out.data, in.data, out.bytes());
}

// Reshape, Flatten, Squeeze, Unsqueeze: same bytes, new shape.
void k_view(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, KernelEnv&) {
  copy_whole(in[0], out[0]);
}

void shape(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out, KernelEnv&) {
  const auto& a = attrs_as<ShapeAttrs>(attrs);
  int64_t s = 0, e = 0;
  tensor_plan::shape_bounds(a.start, a.end, static_cast<int64_t>(in[0].rank()), s, e);
  for (int64_t i = s; i < e; ++i) out[0].as<int64_t>()[i - s] = in[0].shape[i];
}

void size(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, KernelEnv&) {
  *out[0].as<int64_t>() = in[0].numel();
}

constexpr KernelEntry kEntries[] = {
    {OpKind::kReshape, k_view},
    {OpKind::kFlatten, k_view},
    {OpKind::kSqueeze, k_view},
    {OpKind::kUnsqueeze, k_view},
    {OpKind::kShape, shape},
    {OpKind::kSize, size},
};

}  // namespace

std::span<const KernelEntry> view_kernel_entries() { return kEntries; }

}  // namespace cpu::tensor_ops
}  // namespace kiln
