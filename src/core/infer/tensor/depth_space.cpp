// Shape inference of the tensor family's DepthToSpace and SpaceToDepth.
#include <string>

#include "core/infer/tensor/tensor_internal.h"

namespace kiln {

namespace tensor_infer {

using namespace tensor_plan;

std::vector<OutputType> infer_depth_space(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const auto& a = attrs_as<DepthToSpaceAttrs>(attrs);
  const char* op = kind == OpKind::kDepthToSpace ? "DepthToSpace" : "SpaceToDepth";
  const TensorView& x = in[0];
  if (x.rank() != 4) throw Error(std::string(op) + ": input must be 4-D, got " + shape_string(shape_of(x)));
  if (a.mode != DepthToSpaceMode::kDcr && a.mode != DepthToSpaceMode::kCrd)
    throw Error(std::string(op) + ": invalid mode");
  const int64_t b = a.blocksize;
  int64_t bb = 0;
  if (b < 1 || __builtin_mul_overflow(b, b, &bb))
    throw Error(std::string(op) + ": invalid blocksize " + std::to_string(b));
  const int64_t n = x.shape[0], c = x.shape[1], h = x.shape[2], w = x.shape[3];
  Shape out(4);
  if (kind == OpKind::kDepthToSpace) {
    if (c % bb != 0)
      throw Error("DepthToSpace: channels " + std::to_string(c) + " not divisible by blocksize^2 " +
                  std::to_string(bb));
    out = {n, c / bb, 0, 0};
    if (__builtin_mul_overflow(h, b, &out[2]) || __builtin_mul_overflow(w, b, &out[3]))
      throw Error("DepthToSpace: output too large");
  } else {
    if (h % b != 0 || w % b != 0)
      throw Error("SpaceToDepth: height and width " + std::to_string(h) + "x" + std::to_string(w) +
                  " not divisible by blocksize " + std::to_string(b));
    out = {n, 0, h / b, w / b};
    if (__builtin_mul_overflow(c, bb, &out[1])) throw Error("SpaceToDepth: output too large");
  }
  checked_numel(out, op);
  return one(x.dtype, out);
}

}  // namespace tensor_infer

}  // namespace kiln
