// Shape inference of the tensor family's view ops: Reshape, Flatten, Squeeze, Unsqueeze, Shape and
// Size. Shape exposes its bounds (tensor_plan::shape_bounds) so the kernels clamp start and end as
// inference did.
#include <algorithm>
#include <string>

#include "core/infer/tensor/tensor_internal.h"

namespace kiln {

namespace tensor_plan {

// Shape's [start, end): negative values add rank, then both clamp to [0, rank].
void shape_bounds(int64_t start, int64_t end, int64_t rank, int64_t& s, int64_t& e) {
  auto norm = [rank](int64_t v) { return v < 0 ? std::max<int64_t>(v < -rank ? 0 : v + rank, 0) : std::min(v, rank); };
  s = norm(start);
  e = std::max(norm(end), s);
}

}  // namespace tensor_plan

namespace tensor_infer {

using namespace tensor_plan;

std::vector<OutputType> infer_reshape(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const auto& a = attrs_as<ReshapeAttrs>(attrs);
  if (a.allowzero != 0 && a.allowzero != 1) throw Error("Reshape: allowzero must be 0 or 1");
  if (in[1].rank() != 1) throw Error("Reshape: shape must be 1-D");
  std::vector<int64_t> req = const_ints(in[1], "Reshape", "shape");
  const TensorView& x = in[0];
  Shape out(req.size());
  int64_t minus = -1;
  bool has_zero = false;
  for (size_t i = 0; i < req.size(); ++i) {
    int64_t v = req[i];
    if (v == -1) {
      if (minus >= 0) throw Error("Reshape: shape has more than one -1");
      minus = static_cast<int64_t>(i);
      out[i] = 1;
      continue;
    }
    if (v < -1) throw Error("Reshape: invalid dimension " + std::to_string(v) + " in shape");
    if (v == 0) {
      has_zero = true;
      if (!a.allowzero) {
        if (i >= x.rank())
          throw Error("Reshape: 0 at position " + std::to_string(i) + " copies an input dim, but input " +
                      shape_string(shape_of(x)) + " has rank " + std::to_string(x.rank()));
        v = x.shape[i];
      }
    }
    out[i] = v;
  }
  if (a.allowzero && has_zero && minus >= 0) throw Error("Reshape: allowzero=1 with both 0 and -1 in shape");
  const int64_t n = x.numel();
  const int64_t known = checked_numel(out, "Reshape");
  if (minus >= 0) {
    if (known == 0) throw Error("Reshape: cannot infer the -1 dimension when the other dims multiply to 0");
    if (n % known != 0)
      throw Error("Reshape: cannot reshape " + shape_string(shape_of(x)) + " into " + shape_string(req));
    out[minus] = n / known;
  } else if (known != n) {
    throw Error("Reshape: cannot reshape " + shape_string(shape_of(x)) + " (" + std::to_string(n) + " elements) into " +
                shape_string(out));
  }
  return one(x.dtype, out);
}

std::vector<OutputType> infer_flatten(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const int64_t r = static_cast<int64_t>(in[0].rank());
  int64_t axis = attrs_as<AxisAttrs>(attrs).axis;
  if (axis < -r || axis > r)
    throw Error("Flatten: axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(r));
  if (axis < 0) axis += r;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < r; ++i) (i < axis ? outer : inner) *= in[0].shape[i];
  return one(in[0].dtype, {outer, inner});
}

std::vector<OutputType> infer_squeeze(OpKind, const Attrs&, std::span<const TensorView> in, size_t) {
  const TensorView& x = in[0];
  const int64_t r = static_cast<int64_t>(x.rank());
  std::vector<bool> drop(r, false);
  if (has_input(in, 1)) {
    for (int64_t a : unique_axes(const_ints(in[1], "Squeeze", "axes"), r, "Squeeze")) {
      if (x.shape[a] != 1)
        throw Error("Squeeze: cannot squeeze axis " + std::to_string(a) + " of size " + std::to_string(x.shape[a]));
      drop[a] = true;
    }
  } else {
    for (int64_t i = 0; i < r; ++i) drop[i] = x.shape[i] == 1;
  }
  Shape out;
  for (int64_t i = 0; i < r; ++i)
    if (!drop[i]) out.push_back(x.shape[i]);
  return one(x.dtype, out);
}

std::vector<OutputType> infer_unsqueeze(OpKind, const Attrs&, std::span<const TensorView> in, size_t) {
  const TensorView& x = in[0];
  std::vector<int64_t> axes = const_ints(in[1], "Unsqueeze", "axes");
  const int64_t r = static_cast<int64_t>(x.rank() + axes.size());
  std::vector<bool> ins(r, false);
  for (int64_t a : unique_axes(axes, r, "Unsqueeze")) ins[a] = true;
  Shape out(r);
  size_t j = 0;
  for (int64_t i = 0; i < r; ++i) out[i] = ins[i] ? 1 : x.shape[j++];
  return one(x.dtype, out);
}

std::vector<OutputType> infer_shape(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const auto& a = attrs_as<ShapeAttrs>(attrs);
  const int64_t r = static_cast<int64_t>(in[0].rank());
  int64_t s = 0, e = 0;
  shape_bounds(a.start, a.end, r, s, e);
  return one(DataType::kInt64, {e - s});
}

std::vector<OutputType> infer_size(OpKind, const Attrs&, std::span<const TensorView> in, size_t) {
  return one(DataType::kInt64, {});
}

}  // namespace tensor_infer

}  // namespace kiln
