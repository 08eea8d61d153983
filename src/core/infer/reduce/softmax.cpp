// Shape inference of the reduce family's Softmax, LogSoftmax and Hardmax.
#include <string>

#include "core/infer/reduce/reduce_internal.h"

namespace kiln::reduce_infer {

std::vector<OutputType> infer_softmax(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs, size_t) {
  const auto& a = attrs_as<SoftmaxAttrs>(attrs);
  require_bool_attr(kind, "coerce_2d", a.coerce_2d);
  const TensorView& x = inputs[0];
  require_float(kind, x.dtype, "input");
  normalize_axis(a.axis, static_cast<int64_t>(x.rank()));
  return {OutputType{x.dtype, shape_vec(x)}};
}

}  // namespace kiln::reduce_infer
