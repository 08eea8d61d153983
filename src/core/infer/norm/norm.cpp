// Shape and type inference of the norm family: LayerNormalization, InstanceNormalization,
// BatchNormalization and LRN.
#include <cmath>
#include <string>

#include "core/shape_infer.h"

namespace kiln {

namespace {

std::string name_of(OpKind k) { return std::string(op_name(k)); }

bool is_float(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 || t == DataType::kBFloat16;
}

void require_float(OpKind k, DataType t, const char* what) {
  if (!is_float(t))
    throw Error(name_of(k) + ": " + what + " must be a float tensor (float32, float64, float16, bfloat16), got " +
                std::string(dtype_name(t)));
}

void require_epsilon(OpKind k, float eps) {
  if (!(eps >= 0.0f) || !std::isfinite(eps))
    throw Error(name_of(k) + ": epsilon must be a finite non-negative number, got " + std::to_string(eps));
}

std::vector<int64_t> shape_vec(const TensorView& v) { return {v.shape.begin(), v.shape.end()}; }

// True if `p` broadcasts (numpy, unidirectionally) to `target`.
bool broadcasts_to(std::span<const int64_t> p, std::span<const int64_t> target) {
  if (p.size() > target.size()) return false;
  size_t off = target.size() - p.size();
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != 1 && p[i] != target[off + i]) return false;
  return true;
}

std::vector<OutputType> infer_layer_norm(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs,
                                         size_t num_outputs) {
  const auto& a = attrs_as<LayerNormAttrs>(attrs);
  require_epsilon(kind, a.epsilon);
  const TensorView& x = inputs[0];
  require_float(kind, x.dtype, "X");
  int64_t r = static_cast<int64_t>(x.rank());
  if (r == 0) throw Error("LayerNormalization: X must have rank >= 1");
  int64_t axis = normalize_axis(a.axis, r);
  DataType stash = static_cast<DataType>(a.stash_type);
  if (a.stash_type < 0 || a.stash_type > 255 || !is_float(stash))
    throw Error("LayerNormalization: stash_type " + std::to_string(a.stash_type) +
                " is not a float element type (1 = float32)");
  std::span<const int64_t> norm_shape = x.shape.subspan(static_cast<size_t>(axis));
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (!inputs[i].exists) continue;
    const char* what = i == 1 ? "Scale" : "B";
    if (inputs[i].dtype != x.dtype)
      throw Error(std::string("LayerNormalization: ") + what + " must have X's element type " +
                  std::string(dtype_name(x.dtype)));
    if (!broadcasts_to(inputs[i].shape, norm_shape))
      throw Error(std::string("LayerNormalization: ") + what + " shape " + shape_string(shape_vec(inputs[i])) +
                  " does not broadcast to the normalized shape " +
                  shape_string({norm_shape.begin(), norm_shape.end()}));
  }
  std::vector<OutputType> out{OutputType{x.dtype, shape_vec(x)}};
  std::vector<int64_t> stat_shape = shape_vec(x);
  for (int64_t i = axis; i < r; ++i) stat_shape[i] = 1;
  for (size_t i = 1; i < num_outputs; ++i) out.push_back(OutputType{stash, stat_shape});
  return out;
}

// X [N, C, ...] with per-channel 1-D parameters of length C (inputs first..last).
void check_channel_params(OpKind kind, std::span<const TensorView> inputs, size_t min_rank, bool same_dtype) {
  const TensorView& x = inputs[0];
  require_float(kind, x.dtype, "X");
  if (x.rank() < min_rank)
    throw Error(name_of(kind) + ": X must have rank >= " + std::to_string(min_rank) + " ([N, C, ...]), got " +
                shape_string(shape_vec(x)));
  for (size_t i = 1; i < inputs.size(); ++i) {
    const TensorView& p = inputs[i];
    require_float(kind, p.dtype, "every parameter");
    if (same_dtype && p.dtype != x.dtype)
      throw Error(name_of(kind) + ": input " + std::to_string(i) + " must have X's element type " +
                  std::string(dtype_name(x.dtype)));
    if (p.rank() != 1 || p.shape[0] != x.shape[1])
      throw Error(name_of(kind) + ": input " + std::to_string(i) + " must have shape [C] = [" +
                  std::to_string(x.shape[1]) + "], got " + shape_string(shape_vec(p)));
  }
}

std::vector<OutputType> infer_instance_norm(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs,
                                            size_t) {
  require_epsilon(kind, attrs_as<EpsilonAttrs>(attrs).epsilon);
  check_channel_params(kind, inputs, 3, true);
  return {OutputType{inputs[0].dtype, shape_vec(inputs[0])}};
}

std::vector<OutputType> infer_batch_norm(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs,
                                         size_t num_outputs) {
  const auto& a = attrs_as<BatchNormAttrs>(attrs);
  if (a.training_mode != 0)
    throw Error(
        "BatchNormalization: training_mode = 1 (training-mode BatchNormalization) is not supported in an "
        "inference engine; export the model in eval mode");
  if (num_outputs != 1)
    throw Error("BatchNormalization: running_mean / running_var outputs exist only in training mode");
  require_epsilon(kind, a.epsilon);
  // ONNX lets scale/B (T1) and mean/var (T2) have float types other than X's.
  check_channel_params(kind, inputs, 2, false);
  return {OutputType{inputs[0].dtype, shape_vec(inputs[0])}};
}

std::vector<OutputType> infer_lrn(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs, size_t) {
  const auto& a = attrs_as<LrnAttrs>(attrs);
  if (a.size < 1) throw Error("LRN: size must be >= 1, got " + std::to_string(a.size));
  if (!std::isfinite(a.alpha) || !std::isfinite(a.beta) || !std::isfinite(a.bias))
    throw Error("LRN: alpha, beta and bias must be finite");
  check_channel_params(kind, inputs, 2, true);
  return {OutputType{inputs[0].dtype, shape_vec(inputs[0])}};
}

constexpr InferEntry kEntries[] = {
    {OpKind::kLayerNormalization, infer_layer_norm},
    {OpKind::kInstanceNormalization, infer_instance_norm},
    {OpKind::kBatchNormalization, infer_batch_norm},
    {OpKind::kLRN, infer_lrn},
};

}  // namespace

std::span<const InferEntry> norm_infer_entries() { return kEntries; }

}  // namespace kiln
