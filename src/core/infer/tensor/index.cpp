// Shape inference of the tensor family's index ops: Gather, GatherElements, GatherND,
// ScatterElements and ScatterND.
#include <algorithm>
#include <string>

#include "core/infer/tensor/tensor_internal.h"

namespace kiln {

namespace tensor_infer {

using namespace tensor_plan;

namespace {

void check_index_type(const TensorView& t, const char* op) {
  if (t.dtype != DataType::kInt32 && t.dtype != DataType::kInt64)
    throw Error(std::string(op) + ": indices must be int32 or int64, got " + std::string(dtype_name(t.dtype)));
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

void check_reduction(ScatterReduction red, DataType dt, const char* op) {
  if (static_cast<uint8_t>(red) > static_cast<uint8_t>(ScatterReduction::kMin))
    throw Error(std::string(op) + ": invalid reduction");
  if (red != ScatterReduction::kNone && dt == DataType::kBool)
    throw Error(std::string(op) + ": reductions do not apply to bool data");
}

}  // namespace

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

}  // namespace tensor_infer

}  // namespace kiln
