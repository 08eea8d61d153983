// Shape inference of the reduce family's ArgMax and ArgMin.
#include <string>

#include "core/infer/reduce/reduce_internal.h"

namespace kiln::reduce_infer {

std::vector<OutputType> infer_arg_reduce(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs, size_t) {
  const auto& a = attrs_as<ArgReduceAttrs>(attrs);
  require_bool_attr(kind, "keepdims", a.keepdims);
  require_bool_attr(kind, "select_last_index", a.select_last_index);
  const TensorView& x = inputs[0];
  dispatch_numeric(x.dtype, op_name(kind).data(), [](auto) {});
  int64_t axis = normalize_axis(a.axis, static_cast<int64_t>(x.rank()));
  OutputType out{DataType::kInt64, {}};
  for (size_t i = 0; i < x.rank(); ++i) {
    if (static_cast<int64_t>(i) != axis)
      out.shape.push_back(x.shape[i]);
    else if (a.keepdims)
      out.shape.push_back(1);
  }
  if (x.shape[axis] == 0) {
    int64_t n = 1;
    for (int64_t d : out.shape) n *= d;
    if (n > 0) throw Error(name_of(kind) + ": cannot take the index of an extreme over an empty axis");
  }
  return {out};
}

}  // namespace kiln::reduce_infer
