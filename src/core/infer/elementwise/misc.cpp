// Shape and type inference of the elementwise family's misc group: Clip, Cast, CastLike and Dropout.
// Identity, also of this group, is inferred as a unary op (infer_unary, elementwise/unary.cpp).
#include <string>

#include "core/infer/elementwise/elementwise_internal.h"

namespace kiln::elementwise_infer {

using namespace dtype_sets;

std::vector<OutputType> infer_dropout(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t n_out) {
  check_shapes(kind, in);
  check_dtype(kind, in[0], 0, kFloats);
  if (in.size() > 1 && in[1].exists) {
    check_dtype(kind, in[1], 1, kFloats);
    if (in[1].numel() != 1 || in[1].rank() > 1) throw Error("Dropout: ratio (input 1) must be a scalar");
  }
  if (in.size() > 2 && in[2].exists) {
    check_dtype(kind, in[2], 2, kBool);
    if (in[2].numel() != 1 || in[2].rank() > 1) throw Error("Dropout: training_mode (input 2) must be a scalar");
    // Training mode with ratio 0 drops nothing: the identity (PyTorch 1.13 exports Swin-T so).
    // Any other ratio draws a random mask, which an inference engine does not do.
    const bool training = in[2].data && *static_cast<const uint8_t*>(in[2].data) != 0;
    const bool ratio_known = in.size() > 1 && in[1].exists && in[1].data;
    const double ratio = ratio_known ? in[1].to_double()[0] : 0.5;
    if (training && (!ratio_known || ratio != 0.0))
      throw Error(
          "Dropout: training-mode Dropout with a ratio other than 0 draws a random mask, which an inference "
          "engine does not do (training_mode is true" +
          std::string(ratio_known ? ", ratio " + std::to_string(ratio) : ", ratio 0.5 or unknown") +
          "); export the model in eval mode");
  }
  std::vector<OutputType> out{OutputType{in[0].dtype, shape_vec(in[0])}};
  if (n_out > 1) out.push_back(OutputType{DataType::kBool, shape_vec(in[0])});
  return out;
}

// ---- Clip, Cast, CastLike ------------------------------------------------------------------
std::vector<OutputType> infer_clip(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t) {
  check_shapes(kind, in);
  check_dtype(kind, in[0], 0, kNumeric);
  for (size_t i = 1; i < in.size(); ++i) {
    if (!in[i].exists) continue;
    check_same_dtype(kind, in, 0, i);
    if (in[i].numel() != 1 || in[i].rank() > 1)
      throw Error("Clip: " + std::string(i == 1 ? "min" : "max") + " (input " + std::to_string(i) +
                  ") must be a scalar, got shape " + shape_string(shape_vec(in[i])));
  }
  return {OutputType{in[0].dtype, shape_vec(in[0])}};
}

std::vector<OutputType> infer_cast(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  check_shapes(kind, in);
  check_dtype(kind, in[0], 0, kAll);
  const DataType to = attrs_as<CastAttrs>(attrs).to;
  if (!in_set(to, kAll))
    throw Error(std::string(op_name(kind)) + ": unsupported target type " + std::string(dtype_name(to)) + " (code " +
                std::to_string(static_cast<unsigned>(to)) + ")");
  if (kind == OpKind::kCastLike && in[1].dtype != to)
    throw Error("CastLike: attribute 'to' (" + std::string(dtype_name(to)) + ") differs from input 1's type " +
                std::string(dtype_name(in[1].dtype)));
  return {OutputType{to, shape_vec(in[0])}};
}

}  // namespace kiln::elementwise_infer
