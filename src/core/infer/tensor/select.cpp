// Shape inference of the tensor family's data-dependent ops (OpTrait kDataDependent): NonZero and
// NonMaxSuppression. Output 0 gets the largest shape a run can produce, which the memory plan
// reserves; output 1 is the extent slot, int64 [1], where a run writes the actual size of output
// 0's data-dependent axis (decision 56). And SelectBranch (an If's outputs, kShapeFromData): the
// chosen branch's shapes when the condition's value is known, else per dimension the larger.
#include <algorithm>
#include <string>

#include "core/infer/tensor/tensor_internal.h"

namespace kiln {

namespace tensor_infer {

using namespace tensor_plan;

namespace {

OutputType extent_slot() { return OutputType{DataType::kInt64, {1}}; }

// A scalar or one-element input of NonMaxSuppression (max_output_boxes_per_class, the thresholds).
void check_scalar(std::span<const TensorView> in, size_t i, DataType want, const char* what) {
  if (!has_input(in, i)) return;
  const TensorView& t = in[i];
  if (t.dtype != want)
    throw Error(std::string("NonMaxSuppression: ") + what + " must be " + std::string(dtype_name(want)) + ", got " +
                std::string(dtype_name(t.dtype)));
  if (t.numel() != 1 || t.rank() > 1)
    throw Error(std::string("NonMaxSuppression: ") + what + " must be a scalar, got shape " +
                shape_string(shape_of(t)));
}

}  // namespace

std::vector<OutputType> infer_nonzero(OpKind, const Attrs&, std::span<const TensorView> in, size_t) {
  const TensorView& x = in[0];
  // Every element may be nonzero; a scalar has one coordinate (0), as in onnxruntime.
  Shape out{std::max<int64_t>(1, static_cast<int64_t>(x.rank())), x.numel()};
  checked_numel(out, "NonZero");
  return {OutputType{DataType::kInt64, out}, extent_slot()};
}

std::vector<OutputType> infer_nms(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const TensorView &boxes = in[0], &scores = in[1];
  if (attrs_as<NmsAttrs>(attrs).center_point_box != 0 && attrs_as<NmsAttrs>(attrs).center_point_box != 1)
    throw Error("NonMaxSuppression: center_point_box must be 0 or 1");
  if (boxes.rank() != 3 || boxes.shape[2] != 4)
    throw Error("NonMaxSuppression: boxes must be [batch, boxes, 4], got " + shape_string(shape_of(boxes)));
  if (scores.rank() != 3 || scores.shape[0] != boxes.shape[0] || scores.shape[2] != boxes.shape[1])
    throw Error("NonMaxSuppression: scores must be [batch, classes, boxes] = [" + std::to_string(boxes.shape[0]) +
                ", classes, " + std::to_string(boxes.shape[1]) + "] for boxes " + shape_string(shape_of(boxes)) +
                ", got " + shape_string(shape_of(scores)));
  if (boxes.dtype != DataType::kFloat32 || scores.dtype != DataType::kFloat32)
    throw Error("NonMaxSuppression: boxes and scores must be float32");
  check_scalar(in, 2, DataType::kInt64, "max_output_boxes_per_class");
  check_scalar(in, 3, DataType::kFloat32, "iou_threshold");
  check_scalar(in, 4, DataType::kFloat32, "score_threshold");
  // Each (batch, class) selects at most min(max_output_boxes_per_class, boxes) boxes; a
  // max_output_boxes_per_class known only at run time bounds nothing.
  int64_t per_class = boxes.shape[1];
  if (has_input(in, 2) && in[2].data) per_class = std::clamp<int64_t>(in[2].to_int64().at(0), 0, per_class);
  int64_t rows = 0;
  if (__builtin_mul_overflow(scores.shape[0] * scores.shape[1], per_class, &rows))
    throw Error("NonMaxSuppression: the largest selection is too large");
  Shape out{rows, 3};
  checked_numel(out, "NonMaxSuppression");
  return {OutputType{DataType::kInt64, out}, extent_slot()};
}

std::vector<OutputType> infer_select_branch(OpKind, const Attrs&, std::span<const TensorView> in, size_t n_out) {
  const TensorView& cond = in[0];
  if (cond.dtype != DataType::kBool || cond.numel() != 1)
    throw Error("If: the condition must be a bool tensor of one element, got " + std::string(dtype_name(cond.dtype)) +
                shape_string(shape_of(cond)));
  if (in.size() != 1 + 2 * n_out)
    throw Error("If: " + std::to_string(in.size() - 1) + " branch outputs for " + std::to_string(n_out) +
                " outputs; each branch gives one per output");
  std::vector<OutputType> out;
  for (size_t i = 0; i < n_out; ++i) {
    const TensorView &a = in[1 + i], &b = in[1 + n_out + i];
    if (!a.exists || !b.exists) throw Error("If: output " + std::to_string(i) + " is missing from a branch");
    if (a.dtype != b.dtype)
      throw Error("If: output " + std::to_string(i) + " is " + std::string(dtype_name(a.dtype)) +
                  " in the then branch and " + std::string(dtype_name(b.dtype)) + " in the else branch");
    if (cond.data) {
      const TensorView& chosen = *static_cast<const bool*>(cond.data) ? a : b;
      out.push_back(OutputType{chosen.dtype, shape_of(chosen)});
      continue;
    }
    if (a.rank() != b.rank())
      throw Error("If: output " + std::to_string(i) + " has rank " + std::to_string(a.rank()) +
                  " in the then branch and " + std::to_string(b.rank()) +
                  " in the else branch; Kiln needs one rank when the condition is known only at run time");
    Shape s(a.rank());
    for (size_t d = 0; d < s.size(); ++d) s[d] = std::max(a.shape[d], b.shape[d]);
    checked_numel(s, "If");
    out.push_back(OutputType{a.dtype, s});
  }
  return out;
}

}  // namespace tensor_infer

}  // namespace kiln
