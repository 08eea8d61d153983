// Shape inference of the loss family: the training losses NegativeLogLikelihoodLoss and
// SoftmaxCrossEntropyLoss.
#include <string>

#include "core/shape_infer.h"

namespace kiln {

namespace {

std::string shp(std::span<const int64_t> s) { return shape_string({s.begin(), s.end()}); }
std::string dt(DataType t) { return std::string(dtype_name(t)); }

bool is_float(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 || t == DataType::kBFloat16;
}

// ---- losses ----------------------------------------------------------------------------------

// input/scores [N, C, d1..dk], target/labels [N, d1..dk] int32/int64, optional weight [C].
// Returns the loss type: the target's shape for reduction none, else a scalar.
OutputType infer_loss(const char* op, const LossAttrs& a, std::span<const TensorView> in) {
  const TensorView &x = in[0], &t = in[1];
  if (static_cast<size_t>(a.reduction) >= kEnumNames<LossReduction>.size())
    throw Error(std::string(op) + ": invalid reduction");
  if (!is_float(x.dtype)) throw Error(std::string(op) + " does not support element type " + dt(x.dtype));
  if (x.rank() < 2) throw Error(std::string(op) + ": input must be [N, C, d1..dk], got " + shp(x.shape));
  if (t.dtype != DataType::kInt32 && t.dtype != DataType::kInt64)
    throw Error(std::string(op) + ": target must be int32 or int64, got " + dt(t.dtype));
  bool match = t.rank() + 1 == x.rank() && t.shape[0] == x.shape[0];
  for (size_t i = 1; match && i < t.rank(); ++i) match = t.shape[i] == x.shape[i + 1];
  if (!match)
    throw Error(std::string(op) + ": target " + shp(t.shape) + " must be input " + shp(x.shape) +
                " without its class axis");
  if (in.size() > 2 && in[2].exists) {
    const TensorView& w = in[2];
    if (w.dtype != x.dtype) throw Error(std::string(op) + ": weight must have the input's element type");
    if (w.rank() != 1 || w.shape[0] != x.shape[1])
      throw Error(std::string(op) + ": weight must be [C] = [" + std::to_string(x.shape[1]) + "], got " + shp(w.shape));
  }
  OutputType o{x.dtype, {}};
  if (a.reduction == LossReduction::kNone) o.shape.assign(t.shape.begin(), t.shape.end());
  return o;
}

std::vector<OutputType> infer_nll(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  return {infer_loss("NegativeLogLikelihoodLoss", attrs_as<LossAttrs>(attrs), in)};
}

std::vector<OutputType> infer_sce(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t n) {
  std::vector<OutputType> out{infer_loss("SoftmaxCrossEntropyLoss", attrs_as<LossAttrs>(attrs), in)};
  if (n > 1) out.push_back(OutputType{in[0].dtype, {in[0].shape.begin(), in[0].shape.end()}});
  return out;
}

constexpr InferEntry kEntries[] = {
    {OpKind::kNegativeLogLikelihoodLoss, infer_nll},
    {OpKind::kSoftmaxCrossEntropyLoss, infer_sce},
};

}  // namespace

std::span<const InferEntry> loss_infer_entries() { return kEntries; }

}  // namespace kiln
