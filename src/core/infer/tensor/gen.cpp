// Shape inference of the tensor family's generator ops: ConstantOfShape, EyeLike, OneHot, Range
// and Trilu.
#include <cmath>
#include <string>

#include "core/infer/tensor/tensor_internal.h"

namespace kiln {

namespace tensor_plan {

// Element count of Range: max(ceil((limit - start) / delta), 0). Integers are widened to 128
// bits so that limit - start cannot overflow; floats are computed in double as numpy does.
int64_t range_count(std::span<const TensorView> in) {
  const DataType dt = in[0].dtype;
  for (int i = 0; i < 3; ++i) {
    if (in[i].dtype != dt) throw Error("Range: start, limit and delta must have the same element type");
    if (in[i].rank() > 1 || in[i].numel() != 1) throw Error("Range: start, limit and delta must be scalars");
    if (!in[i].data) throw Error("Range: start, limit and delta must be constants");
  }
  constexpr int64_t kMax = int64_t{1} << 56;
  return dispatch_numeric(dt, "Range", [&](auto tag) -> int64_t {
    using T = typename decltype(tag)::type;
    const T s = *in[0].as<const T>(), l = *in[1].as<const T>(), d = *in[2].as<const T>();
    if constexpr (kIsFloat<T>) {
      const double ds = static_cast<ComputeType<T>>(s), dl = static_cast<ComputeType<T>>(l),
                   dd = static_cast<ComputeType<T>>(d);
      if (dd == 0) throw Error("Range: delta is 0");
      if (!std::isfinite(ds) || !std::isfinite(dl) || !std::isfinite(dd))
        throw Error("Range: start, limit and delta must be finite");
      const double c = std::ceil((dl - ds) / dd);
      if (!(c <= static_cast<double>(kMax))) throw Error("Range: output too large");
      return c > 0 ? static_cast<int64_t>(c) : 0;
    } else {
      const __int128 ds = s, dl = l, dd = d;
      if (dd == 0) throw Error("Range: delta is 0");
      const __int128 diff = dl - ds;
      __int128 c = diff / dd;
      if (diff % dd != 0 && ((diff > 0) == (dd > 0))) ++c;  // ceil of the quotient
      if (c > kMax) throw Error("Range: output too large");
      return c > 0 ? static_cast<int64_t>(c) : 0;
    }
  });
}

// OneHot's depth (a numeric scalar constant) as an integer >= 1.
int64_t onehot_depth(const TensorView& t) {
  if (t.rank() > 1 || t.numel() != 1) throw Error("OneHot: depth must be a scalar");
  if (!t.data) throw Error("OneHot: depth must be a constant");
  if (t.dtype == DataType::kBool) throw Error("OneHot: depth must be numeric");
  const double v = std::trunc(t.to_double()[0]);
  if (!(v >= 1 && v <= static_cast<double>(int64_t{1} << 40)))
    throw Error("OneHot: depth must be a positive integer, got " + std::to_string(t.to_double()[0]));
  return static_cast<int64_t>(v);
}

}  // namespace tensor_plan

namespace tensor_infer {

using namespace tensor_plan;

std::vector<OutputType> infer_constant_of_shape(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const Scalar& v = attrs_as<ConstantOfShapeAttrs>(attrs).value;
  if (!dtype_valid(static_cast<uint32_t>(v.dtype))) throw Error("ConstantOfShape: invalid value type");
  if (in[0].rank() != 1) throw Error("ConstantOfShape: shape input must be 1-D");
  Shape out = const_ints(in[0], "ConstantOfShape", "shape");
  checked_numel(out, "ConstantOfShape");
  return one(v.dtype, out);
}

std::vector<OutputType> infer_range(OpKind, const Attrs&, std::span<const TensorView> in, size_t) {
  return one(in[0].dtype, {range_count(in)});
}

std::vector<OutputType> infer_eye_like(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const DataType dt = attrs_as<EyeLikeAttrs>(attrs).dtype;
  if (!dtype_valid(static_cast<uint32_t>(dt))) throw Error("EyeLike: invalid dtype");
  if (in[0].rank() != 2) throw Error("EyeLike: input must be 2-D, got " + shape_string(shape_of(in[0])));
  return one(dt, shape_of(in[0]));
}

std::vector<OutputType> infer_one_hot(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const TensorView &ind = in[0], &vals = in[2];
  if (ind.dtype == DataType::kBool) throw Error("OneHot: indices must be numeric");
  if (vals.rank() != 1 || vals.numel() != 2) throw Error("OneHot: values must be 1-D with 2 elements");
  const int64_t depth = onehot_depth(in[1]);
  const int64_t r = static_cast<int64_t>(ind.rank());
  int64_t axis = attrs_as<OneHotAttrs>(attrs).axis;
  if (axis < -(r + 1) || axis > r)
    throw Error("OneHot: axis " + std::to_string(axis) + " is out of range for output rank " + std::to_string(r + 1));
  if (axis < 0) axis += r + 1;
  Shape out = shape_of(ind);
  out.insert(out.begin() + axis, depth);
  checked_numel(out, "OneHot");
  return one(vals.dtype, out);
}

std::vector<OutputType> infer_trilu(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const int64_t upper = attrs_as<TriluAttrs>(attrs).upper;
  if (upper != 0 && upper != 1) throw Error("Trilu: upper must be 0 or 1");
  if (in[0].rank() < 2) throw Error("Trilu: input must have rank >= 2");
  if (has_input(in, 1)) {
    if (in[1].rank() > 1 || in[1].numel() != 1) throw Error("Trilu: k must be a scalar");
    const_ints(in[1], "Trilu", "k");
  }
  return one(in[0].dtype, shape_of(in[0]));
}

}  // namespace tensor_infer

}  // namespace kiln
