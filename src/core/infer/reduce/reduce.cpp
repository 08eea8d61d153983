// Shape and type inference of the reduce family: Reduce* here, with the axes rule its CPU and CUDA
// kernels share (reduce_axes_mask, core/infer/reduce_util.h), and the family's registry; ArgMax/ArgMin
// in arg.cpp, Softmax/LogSoftmax/Hardmax in softmax.cpp, CumSum in cumsum.cpp, TopK in topk.cpp,
// Einsum in einsum.cpp.
#include <string>

#include "core/infer/reduce/reduce_internal.h"
#include "core/infer/reduce_util.h"

namespace kiln {

namespace reduce_infer {

std::vector<OutputType> infer_reduce(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs, size_t) {
  const auto& a = attrs_as<ReduceAttrs>(attrs);
  require_bool_attr(kind, "keepdims", a.keepdims);
  require_bool_attr(kind, "noop_with_empty_axes", a.noop_with_empty_axes);
  const TensorView& x = inputs[0];
  check_reduce_dtype(kind, x.dtype, kind == OpKind::kReduceMax || kind == OpKind::kReduceMin);
  const TensorView* axes = inputs.size() > 1 && inputs[1].exists ? &inputs[1] : nullptr;
  std::vector<bool> mask = reduce_axes_mask(a, x, axes);
  OutputType out{x.dtype, {}};
  for (size_t i = 0; i < x.rank(); ++i) {
    if (!mask[i])
      out.shape.push_back(x.shape[i]);
    else if (a.keepdims)
      out.shape.push_back(1);
  }
  return {out};
}

}  // namespace reduce_infer

namespace {

using namespace reduce_infer;

constexpr InferEntry kEntries[] = {
    // reduce.cpp
    {OpKind::kReduceL1, infer_reduce},
    {OpKind::kReduceL2, infer_reduce},
    {OpKind::kReduceLogSum, infer_reduce},
    {OpKind::kReduceLogSumExp, infer_reduce},
    {OpKind::kReduceMax, infer_reduce},
    {OpKind::kReduceMean, infer_reduce},
    {OpKind::kReduceMin, infer_reduce},
    {OpKind::kReduceProd, infer_reduce},
    {OpKind::kReduceSum, infer_reduce},
    {OpKind::kReduceSumSquare, infer_reduce},
    // arg.cpp
    {OpKind::kArgMax, infer_arg_reduce},
    {OpKind::kArgMin, infer_arg_reduce},
    // softmax.cpp
    {OpKind::kSoftmax, infer_softmax},
    {OpKind::kLogSoftmax, infer_softmax},
    {OpKind::kHardmax, infer_softmax},
    // cumsum.cpp
    {OpKind::kCumSum, infer_cumsum},
    // topk.cpp
    {OpKind::kTopK, infer_topk},
    // einsum.cpp
    {OpKind::kEinsum, infer_einsum},
};

}  // namespace

std::vector<bool> reduce_axes_mask(const ReduceAttrs& attrs, const TensorView& data, const TensorView* axes) {
  int64_t rank = static_cast<int64_t>(data.rank());
  std::vector<bool> mask(static_cast<size_t>(rank), false);
  if (axes && axes->exists && axes->numel() > 0) {
    if (axes->dtype != DataType::kInt64 && axes->dtype != DataType::kInt32)
      throw Error("axes must be an int64 tensor, got " + std::string(dtype_name(axes->dtype)));
    if (axes->rank() != 1) throw Error("axes must be a 1-D tensor, got rank " + std::to_string(axes->rank()));
    if (!axes->data) throw Error("axes must be a constant");
    for (int64_t a : axes->to_int64()) {
      int64_t n = normalize_axis(a, rank, "reduction axis");
      if (mask[n]) throw Error("reduction axis " + std::to_string(a) + " is repeated");
      mask[n] = true;
    }
    return mask;
  }
  if (axes && axes->exists && axes->rank() != 1)
    throw Error("axes must be a 1-D tensor, got rank " + std::to_string(axes->rank()));
  if (!attrs.noop_with_empty_axes) mask.assign(mask.size(), true);
  return mask;
}

std::span<const InferEntry> reduce_infer_entries() { return kEntries; }

}  // namespace kiln
