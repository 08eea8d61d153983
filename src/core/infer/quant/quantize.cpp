// Shape and type inference of the quant family's QuantizeLinear, DequantizeLinear and
// DynamicQuantizeLinear. Type sets follow the ONNX schemas (opset 21) restricted to Kiln's dtypes.
#include <string>

#include "core/infer/dtype_sets.h"
#include "core/infer/quant/quant_internal.h"

namespace kiln::quant_infer {

using namespace dtype_sets;

namespace {

// ---- QuantizeLinear / DequantizeLinear -------------------------------------------------------
// The scale (and zero point) layout: one value for the whole tensor (rank 0, or one element),
// per-axis (1-D, length x.shape[axis]), or blocked (same rank as x; ceil(x.shape[axis]/block_size)
// along axis, x's dims elsewhere).
void check_quant_params(OpKind kind, const QuantizeAttrs& a, const TensorView& x, const TensorView& scale) {
  if (a.block_size < 0) throw Error(std::string(op_name(kind)) + ": block_size must be >= 0");
  const bool per_tensor = scale.rank() == 0 || (scale.numel() == 1 && (scale.rank() == 1 || a.block_size > 0));
  if (per_tensor) return;
  const std::string name(op_name(kind));
  const int64_t axis = normalize_axis(a.axis, static_cast<int64_t>(x.rank()), (name + ": axis").c_str());
  if (a.block_size == 0) {
    if (scale.rank() != 1 || scale.shape[0] != x.shape[axis])
      throw Error(name + ": per-axis scale must be 1-D of length " + std::to_string(x.shape[axis]) + " (input dim " +
                  std::to_string(axis) + "), got shape " + shape_string(shape_vec(scale)));
    return;
  }
  if (scale.rank() != x.rank())
    throw Error(name + ": blocked scale must have x's rank " + std::to_string(x.rank()) + ", got shape " +
                shape_string(shape_vec(scale)));
  for (size_t d = 0; d < x.rank(); ++d) {
    const int64_t want = static_cast<int64_t>(d) == axis ? (x.shape[d] + a.block_size - 1) / a.block_size : x.shape[d];
    if (scale.shape[d] != want)
      throw Error(name + ": blocked scale shape " + shape_string(shape_vec(scale)) + " does not match x shape " +
                  shape_string(shape_vec(x)) + " with block_size " + std::to_string(a.block_size) + " on axis " +
                  std::to_string(axis));
  }
}

// The zero point has the scale's shape; a single value may be [] against [1] (onnxruntime's
// quantizer writes that; onnxruntime runs it).
void check_zero_point(OpKind kind, std::span<const TensorView> in) {
  if (in.size() < 3 || !in[2].exists) return;
  const bool single = in[1].numel() == 1 && in[2].numel() == 1 && in[1].rank() <= 1 && in[2].rank() <= 1;
  if (!single && shape_vec(in[2]) != shape_vec(in[1]))
    throw Error(std::string(op_name(kind)) + ": zero point shape " + shape_string(shape_vec(in[2])) +
                " differs from scale shape " + shape_string(shape_vec(in[1])));
}

}  // namespace

std::vector<OutputType> infer_quantize(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  check_shapes(kind, in);
  const uint32_t xs = kFloats & ~bit(DataType::kFloat64);
  check_dtype(kind, in[0], 0, xs | bit(DataType::kInt32));
  check_dtype(kind, in[1], 1, xs | bit(DataType::kInt32));
  check_quant_params(kind, attrs_as<QuantizeAttrs>(attrs), in[0], in[1]);
  DataType out = DataType::kUInt8;
  if (in.size() > 2 && in[2].exists) {
    check_dtype(kind, in[2], 2, kQuantized);
    check_zero_point(kind, in);
    out = in[2].dtype;
  }
  return {OutputType{out, shape_vec(in[0])}};
}

std::vector<OutputType> infer_dequantize(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  check_shapes(kind, in);
  check_dtype(kind, in[0], 0, kQuantized | bit(DataType::kInt32));
  check_dtype(kind, in[1], 1, kFloats & ~bit(DataType::kFloat64));
  check_quant_params(kind, attrs_as<QuantizeAttrs>(attrs), in[0], in[1]);
  if (in.size() > 2 && in[2].exists) {
    check_same_dtype(kind, in, 0, 2);
    check_zero_point(kind, in);
  }
  return {OutputType{in[1].dtype, shape_vec(in[0])}};
}

std::vector<OutputType> infer_dynamic_quantize(OpKind, const Attrs&, std::span<const TensorView> in, size_t) {
  if (in[0].dtype != DataType::kFloat32)
    throw Error("DynamicQuantizeLinear: x must be float32, got " + dt(in[0].dtype));
  return {OutputType{DataType::kUInt8, {in[0].shape.begin(), in[0].shape.end()}}, OutputType{DataType::kFloat32, {}},
          OutputType{DataType::kUInt8, {}}};
}

}  // namespace kiln::quant_infer
