// Shape inference of the tensor family's index ops (Gather*, Scatter*) and generator ops (Shape,
// Size, ConstantOfShape, Range, EyeLike, OneHot, Trilu).
#include <algorithm>
#include <cmath>
#include <string>

#include "core/shape_infer.h"

namespace kiln {

namespace tensor_plan {

// Defined in tensor.cpp.
int64_t checked_numel(std::span<const int64_t> shape, const char* op);
std::vector<int64_t> const_ints(const TensorView& t, const char* op, const char* what);
bool has_input(std::span<const TensorView> in, size_t i);

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

// Shape's [start, end): negative values add rank, then both clamp to [0, rank].
void shape_bounds(int64_t start, int64_t end, int64_t rank, int64_t& s, int64_t& e) {
  auto norm = [rank](int64_t v) { return v < 0 ? std::max<int64_t>(v < -rank ? 0 : v + rank, 0) : std::min(v, rank); };
  s = norm(start);
  e = std::max(norm(end), s);
}

std::span<const InferEntry> index_infer_entries();

}  // namespace tensor_plan

namespace {

using namespace tensor_plan;
using Shape = std::vector<int64_t>;

Shape shape_of(const TensorView& t) { return Shape(t.shape.begin(), t.shape.end()); }
std::vector<OutputType> one(DataType dt, Shape s) { return {OutputType{dt, std::move(s)}}; }

void check_index_type(const TensorView& t, const char* op) {
  if (t.dtype != DataType::kInt32 && t.dtype != DataType::kInt64)
    throw Error(std::string(op) + ": indices must be int32 or int64, got " + std::string(dtype_name(t.dtype)));
}

std::vector<OutputType> infer_gather(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const TensorView &x = in[0], &ind = in[1];
  const int64_t r = static_cast<int64_t>(x.rank());
  if (r == 0) throw Error("Gather: data must have rank >= 1");
  check_index_type(ind, "Gather");
  const int64_t axis = normalize_axis(attrs_as<AxisAttrs>(attrs).axis, r, "Gather axis");
  Shape out(x.shape.begin(), x.shape.begin() + axis);
  out.insert(out.end(), ind.shape.begin(), ind.shape.end());
  out.insert(out.end(), x.shape.begin() + axis + 1, x.shape.end());
  checked_numel(out, "Gather");
  return one(x.dtype, out);
}

// GatherElements / ScatterElements: indices have the data's rank and, off the axis, no larger dims.
void check_elements_indices(const TensorView& x, const TensorView& ind, int64_t axis, const char* op) {
  check_index_type(ind, op);
  if (ind.rank() != x.rank())
    throw Error(std::string(op) + ": indices rank " + std::to_string(ind.rank()) + " differs from data rank " +
                std::to_string(x.rank()));
  for (size_t d = 0; d < x.rank(); ++d)
    if (static_cast<int64_t>(d) != axis && ind.shape[d] > x.shape[d])
      throw Error(std::string(op) + ": indices shape " + shape_string(shape_of(ind)) + " exceeds data shape " +
                  shape_string(shape_of(x)) + " outside the axis");
}

std::vector<OutputType> infer_gather_elements(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const TensorView &x = in[0], &ind = in[1];
  if (x.rank() == 0) throw Error("GatherElements: data must have rank >= 1");
  const int64_t axis =
      normalize_axis(attrs_as<AxisAttrs>(attrs).axis, static_cast<int64_t>(x.rank()), "GatherElements axis");
  check_elements_indices(x, ind, axis, "GatherElements");
  return one(x.dtype, shape_of(ind));
}

std::vector<OutputType> infer_gather_nd(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const TensorView &x = in[0], &ind = in[1];
  check_index_type(ind, "GatherND");
  const int64_t r = static_cast<int64_t>(x.rank()), q = static_cast<int64_t>(ind.rank());
  const int64_t b = attrs_as<GatherNDAttrs>(attrs).batch_dims;
  if (r < 1 || q < 1) throw Error("GatherND: data and indices must have rank >= 1");
  if (b < 0 || b >= std::min(r, q))
    throw Error("GatherND: batch_dims " + std::to_string(b) + " must be in [0, min(data rank, indices rank))");
  for (int64_t i = 0; i < b; ++i)
    if (x.shape[i] != ind.shape[i]) throw Error("GatherND: batch dims of data and indices differ");
  const int64_t m = ind.shape[q - 1];
  if (m < 1 || m > r - b)
    throw Error("GatherND: last indices dim " + std::to_string(m) + " must be in [1, " + std::to_string(r - b) + "]");
  Shape out(ind.shape.begin(), ind.shape.end() - 1);
  out.insert(out.end(), x.shape.begin() + b + m, x.shape.end());
  checked_numel(out, "GatherND");
  return one(x.dtype, out);
}

void check_reduction(ScatterReduction red, DataType dt, const char* op) {
  if (static_cast<uint8_t>(red) > static_cast<uint8_t>(ScatterReduction::kMin))
    throw Error(std::string(op) + ": invalid reduction");
  if (red != ScatterReduction::kNone && dt == DataType::kBool)
    throw Error(std::string(op) + ": reductions do not apply to bool data");
}

std::vector<OutputType> infer_scatter_elements(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const auto& a = attrs_as<ScatterAttrs>(attrs);
  const TensorView &x = in[0], &ind = in[1], &upd = in[2];
  if (x.rank() == 0) throw Error("ScatterElements: data must have rank >= 1");
  const int64_t axis = normalize_axis(a.axis, static_cast<int64_t>(x.rank()), "ScatterElements axis");
  check_elements_indices(x, ind, axis, "ScatterElements");
  if (upd.dtype != x.dtype) throw Error("ScatterElements: updates must have the data's element type");
  if (shape_of(upd) != shape_of(ind)) throw Error("ScatterElements: updates and indices shapes differ");
  check_reduction(a.reduction, x.dtype, "ScatterElements");
  return one(x.dtype, shape_of(x));
}

std::vector<OutputType> infer_scatter_nd(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const auto& a = attrs_as<ScatterAttrs>(attrs);
  const TensorView &x = in[0], &ind = in[1], &upd = in[2];
  check_index_type(ind, "ScatterND");
  const int64_t r = static_cast<int64_t>(x.rank()), q = static_cast<int64_t>(ind.rank());
  if (r < 1 || q < 1) throw Error("ScatterND: data and indices must have rank >= 1");
  const int64_t k = ind.shape[q - 1];
  if (k < 1 || k > r)
    throw Error("ScatterND: last indices dim " + std::to_string(k) + " must be in [1, " + std::to_string(r) + "]");
  Shape want(ind.shape.begin(), ind.shape.end() - 1);
  want.insert(want.end(), x.shape.begin() + k, x.shape.end());
  if (upd.dtype != x.dtype) throw Error("ScatterND: updates must have the data's element type");
  if (shape_of(upd) != want)
    throw Error("ScatterND: updates shape " + shape_string(shape_of(upd)) + " should be " + shape_string(want));
  check_reduction(a.reduction, x.dtype, "ScatterND");
  return one(x.dtype, shape_of(x));
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

constexpr InferEntry kIndexEntries[] = {
    {OpKind::kGather, infer_gather},
    {OpKind::kGatherElements, infer_gather_elements},
    {OpKind::kGatherND, infer_gather_nd},
    {OpKind::kScatterElements, infer_scatter_elements},
    {OpKind::kScatterND, infer_scatter_nd},
    {OpKind::kShape, infer_shape},
    {OpKind::kSize, infer_size},
    {OpKind::kConstantOfShape, infer_constant_of_shape},
    {OpKind::kRange, infer_range},
    {OpKind::kEyeLike, infer_eye_like},
    {OpKind::kOneHot, infer_one_hot},
    {OpKind::kTrilu, infer_trilu},
};

}  // namespace

std::span<const InferEntry> tensor_plan::index_infer_entries() { return kIndexEntries; }

}  // namespace kiln
