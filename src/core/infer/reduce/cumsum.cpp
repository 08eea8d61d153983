// Shape inference of the reduce family's CumSum.
#include <string>

#include "core/infer/reduce/reduce_internal.h"

namespace kiln::reduce_infer {

std::vector<OutputType> infer_cumsum(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs, size_t) {
  const auto& a = attrs_as<CumSumAttrs>(attrs);
  require_bool_attr(kind, "exclusive", a.exclusive);
  require_bool_attr(kind, "reverse", a.reverse);
  const TensorView& x = inputs[0];
  check_reduce_dtype(kind, x.dtype, false);
  const TensorView& ax = inputs[1];
  if (ax.rank() > 1 || ax.numel() != 1) throw Error("CumSum: axis must be a scalar or a 1-element tensor");
  int64_t axis = ax.to_int64()[0];
  normalize_axis(axis, static_cast<int64_t>(x.rank()));
  return {OutputType{x.dtype, shape_vec(x)}};
}

}  // namespace kiln::reduce_infer
