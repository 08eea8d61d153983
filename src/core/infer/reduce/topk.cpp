// Shape inference of the reduce family's TopK.
#include <string>

#include "core/infer/reduce/reduce_internal.h"

namespace kiln::reduce_infer {

std::vector<OutputType> infer_topk(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs, size_t) {
  const auto& a = attrs_as<TopKAttrs>(attrs);
  require_bool_attr(kind, "largest", a.largest);
  require_bool_attr(kind, "sorted", a.sorted);
  const TensorView& x = inputs[0];
  dispatch_numeric(x.dtype, "TopK", [](auto) {});
  int64_t axis = normalize_axis(a.axis, static_cast<int64_t>(x.rank()));
  const TensorView& kv = inputs[1];
  if (kv.rank() > 1 || kv.numel() != 1) throw Error("TopK: K must be a 1-element tensor");
  int64_t k = kv.to_int64()[0];
  if (k < 0 || k > x.shape[axis])
    throw Error("TopK: K = " + std::to_string(k) + " is out of range for axis dimension " +
                std::to_string(x.shape[axis]));
  std::vector<int64_t> shape = shape_vec(x);
  shape[axis] = k;
  return {OutputType{x.dtype, shape}, OutputType{DataType::kInt64, shape}};
}

}  // namespace kiln::reduce_infer
