// Shape and type inference of the elementwise family's broadcasting binary and variadic ops:
// arithmetic (Add Sub Mul Div Mod Pow), PRelu, comparisons, logic, Max Min Mean Sum, Where and
// BitShift.
#include <string>

#include "core/infer/elementwise/elementwise_internal.h"

namespace kiln::elementwise_infer {

using namespace dtype_sets;

namespace {

// ---- broadcasting binary and variadic --------------------------------------------------------
std::vector<int64_t> broadcast_all(std::span<const TensorView> in) {
  std::vector<int64_t> s = shape_vec(in[0]);
  for (size_t i = 1; i < in.size(); ++i) s = broadcast_shapes(s, in[i].shape);
  return s;
}

std::string dt(DataType t) { return std::string(dtype_name(t)); }

}  // namespace

std::vector<OutputType> infer_arith(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  check_shapes(kind, in);
  check_dtype(kind, in[0], 0, kNumeric);
  check_same_dtype(kind, in, 0, 1);
  if (kind == OpKind::kMod) {
    const int64_t fmod = attrs_as<ModAttrs>(attrs).fmod;
    if (fmod != 0 && fmod != 1) throw Error("Mod: fmod must be 0 or 1, got " + std::to_string(fmod));
    if (fmod == 0 && in_set(in[0].dtype, kFloats)) throw Error("Mod: floating-point inputs require fmod=1 (ONNX)");
  }
  return {OutputType{in[0].dtype, broadcast_all(in)}};
}

std::vector<OutputType> infer_pow(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t) {
  check_shapes(kind, in);
  check_dtype(kind, in[0], 0, kNumeric);
  check_dtype(kind, in[1], 1, kNumeric);
  return {OutputType{in[0].dtype, broadcast_all(in)}};
}

std::vector<OutputType> infer_prelu(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t) {
  check_shapes(kind, in);
  check_dtype(kind, in[0], 0, kNumeric);
  check_same_dtype(kind, in, 0, 1);
  std::vector<int64_t> s = broadcast_all(in);
  if (s != shape_vec(in[0]))
    throw Error("PRelu: slope shape " + shape_string(shape_vec(in[1])) + " must broadcast to X's shape " +
                shape_string(shape_vec(in[0])));
  return {OutputType{in[0].dtype, std::move(s)}};
}

std::vector<OutputType> infer_compare(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t) {
  check_shapes(kind, in);
  check_dtype(kind, in[0], 0, kind == OpKind::kEqual ? kAll : kNumeric);
  check_same_dtype(kind, in, 0, 1);
  return {OutputType{DataType::kBool, broadcast_all(in)}};
}

std::vector<OutputType> infer_logic(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t) {
  check_shapes(kind, in);
  check_dtype(kind, in[0], 0, kBool);
  check_dtype(kind, in[1], 1, kBool);
  return {OutputType{DataType::kBool, broadcast_all(in)}};
}

std::vector<OutputType> infer_variadic(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t) {
  check_shapes(kind, in);
  const uint32_t set = (kind == OpKind::kMax || kind == OpKind::kMin) ? kNumeric : kFloats;
  check_dtype(kind, in[0], 0, set);
  for (size_t i = 1; i < in.size(); ++i) {
    if (!in[i].exists) throw Error(input_name(kind, i) + " is missing");
    check_same_dtype(kind, in, 0, i);
  }
  return {OutputType{in[0].dtype, broadcast_all(in)}};
}

std::vector<OutputType> infer_where(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t) {
  check_shapes(kind, in);
  check_dtype(kind, in[0], 0, kBool);
  check_dtype(kind, in[1], 1, kAll);
  check_same_dtype(kind, in, 1, 2);
  return {OutputType{in[1].dtype, broadcast_all(in)}};
}

// ---- BitShift --------------------------------------------------------------------------------

std::vector<OutputType> infer_bitshift(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const auto& a = attrs_as<BitShiftAttrs>(attrs);
  if (static_cast<size_t>(a.direction) >= kEnumNames<BitShiftDirection>.size())
    throw Error("BitShift: invalid direction");
  const DataType t = in[0].dtype;
  if (t != DataType::kUInt8 && t != DataType::kUInt16 && t != DataType::kUInt32 && t != DataType::kUInt64)
    throw Error("BitShift supports uint8/16/32/64, got " + dt(t));
  if (in[1].dtype != t) throw Error("BitShift: Y must have X's element type");
  return {OutputType{t, broadcast_shapes(in[0].shape, in[1].shape)}};
}

}  // namespace kiln::elementwise_infer
