// Shape inference of the extra family: the training losses NegativeLogLikelihoodLoss and
// SoftmaxCrossEntropyLoss, BitShift, and the integer / quantized ops MatMulInteger, ConvInteger,
// QLinearMatMul, QLinearConv and DynamicQuantizeLinear, and Kiln's INT8 kiln.QConv and
// kiln.QMatMul. Conv geometry is shared with Conv (core/infer/nn_geometry.h), so ConvInteger,
// QLinearConv and kiln.QConv size their outputs exactly as Conv.
#include <string>

#include "core/infer/nn_geometry.h"
#include "core/shape_infer.h"

namespace kiln {

namespace extra {

namespace {

std::string shp(std::span<const int64_t> s) { return shape_string({s.begin(), s.end()}); }
std::string dt(DataType t) { return std::string(dtype_name(t)); }

bool is_float(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 || t == DataType::kBFloat16;
}
bool is_q8(DataType t) { return t == DataType::kInt8 || t == DataType::kUInt8; }

bool all_ones(std::span<const int64_t> s) {
  for (int64_t d : s)
    if (d != 1) return false;
  return true;
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

// ---- integer / quantized matrix products ---------------------------------------------------------

// A per-row parameter of A (zero point or scale): one value, [M], or A's shape with K replaced
// by 1 ([..., M, 1]). For B (per column): one value, [N], or B's shape with K replaced by 1.
void check_row_param(const TensorView& p, const TensorView& m, bool is_a, const char* op, const char* what) {
  if (all_ones(p.shape)) return;
  const int64_t rows = m.rank() == 1 ? 1 : (is_a ? m.shape[m.rank() - 2] : m.shape[m.rank() - 1]);
  if (p.rank() == 1 && p.shape[0] == rows) return;
  if (p.rank() == m.rank() && m.rank() >= 2) {
    std::vector<int64_t> want(m.shape.begin(), m.shape.end());
    want[is_a ? want.size() - 1 : want.size() - 2] = 1;
    if (std::vector<int64_t>(p.shape.begin(), p.shape.end()) == want) return;
  }
  throw Error(std::string(op) + ": " + what + " " + shp(p.shape) + " must be a scalar, 1-D per " +
              (is_a ? "row" : "column") + " [" + std::to_string(rows) + "], or " + (is_a ? "A" : "B") +
              "'s shape with the K axis 1");
}

// numpy MatMul shape of A and B.
std::vector<int64_t> matmul_shape(const TensorView& A, const TensorView& B, const char* op) {
  if (A.rank() < 1 || B.rank() < 1) throw Error(std::string(op) + ": operands must have rank >= 1");
  const int64_t ka = A.shape[A.rank() - 1];
  const int64_t kb = B.rank() == 1 ? B.shape[0] : B.shape[B.rank() - 2];
  if (ka != kb)
    throw Error(std::string(op) + ": inner dimensions of " + shp(A.shape) + " and " + shp(B.shape) + " differ");
  std::span<const int64_t> ab = A.rank() > 2 ? A.shape.first(A.rank() - 2) : std::span<const int64_t>();
  std::span<const int64_t> bb = B.rank() > 2 ? B.shape.first(B.rank() - 2) : std::span<const int64_t>();
  std::vector<int64_t> out = broadcast_shapes(ab, bb);
  if (A.rank() >= 2) out.push_back(A.shape[A.rank() - 2]);
  if (B.rank() >= 2) out.push_back(B.shape[B.rank() - 1]);
  return out;
}

void check_zero_point(const TensorView& zp, DataType want, const char* op, const char* what) {
  if (zp.dtype != want) throw Error(std::string(op) + ": " + what + " must be " + dt(want) + ", got " + dt(zp.dtype));
}

void check_scale(const TensorView& s, const char* op, const char* what, bool float32_only) {
  const bool ok =
      float32_only ? s.dtype == DataType::kFloat32
                   : (s.dtype == DataType::kFloat32 || s.dtype == DataType::kFloat16 || s.dtype == DataType::kBFloat16);
  if (!ok) throw Error(std::string(op) + ": " + what + " must be a float tensor, got " + dt(s.dtype));
}

std::vector<OutputType> infer_matmul_integer(OpKind, const Attrs&, std::span<const TensorView> in, size_t) {
  const char* op = "MatMulInteger";
  const TensorView &A = in[0], &B = in[1];
  if (!is_q8(A.dtype) || !is_q8(B.dtype))
    throw Error(std::string(op) + ": A and B must be int8 or uint8, got " + dt(A.dtype) + " and " + dt(B.dtype));
  std::vector<int64_t> out = matmul_shape(A, B, op);
  if (in.size() > 2 && in[2].exists) {
    check_zero_point(in[2], A.dtype, op, "a_zero_point");
    check_row_param(in[2], A, true, op, "a_zero_point");
  }
  if (in.size() > 3 && in[3].exists) {
    check_zero_point(in[3], B.dtype, op, "b_zero_point");
    check_row_param(in[3], B, false, op, "b_zero_point");
  }
  return {OutputType{DataType::kInt32, out}};
}

std::vector<OutputType> infer_qlinear_matmul(OpKind, const Attrs&, std::span<const TensorView> in, size_t) {
  const char* op = "QLinearMatMul";
  const TensorView &A = in[0], &B = in[3];
  if (!is_q8(A.dtype) || !is_q8(B.dtype))
    throw Error(std::string(op) + ": a and b must be int8 or uint8, got " + dt(A.dtype) + " and " + dt(B.dtype));
  std::vector<int64_t> out = matmul_shape(A, B, op);
  check_scale(in[1], op, "a_scale", false);
  check_scale(in[4], op, "b_scale", false);
  check_scale(in[6], op, "y_scale", false);
  check_zero_point(in[2], A.dtype, op, "a_zero_point");
  check_zero_point(in[5], B.dtype, op, "b_zero_point");
  if (!is_q8(in[7].dtype))
    throw Error(std::string(op) + ": y_zero_point must be int8 or uint8, got " + dt(in[7].dtype));
  check_row_param(in[1], A, true, op, "a_scale");
  check_row_param(in[2], A, true, op, "a_zero_point");
  check_row_param(in[4], B, false, op, "b_scale");
  check_row_param(in[5], B, false, op, "b_zero_point");
  // y's parameters: one value or one per row of the output.
  const int64_t rows = A.rank() >= 2 ? A.shape[A.rank() - 2] : 1;
  for (int i : {6, 7})
    if (!all_ones(in[i].shape) && !(in[i].rank() == 1 && in[i].shape[0] == rows))
      throw Error(std::string(op) + ": " + (i == 6 ? "y_scale " : "y_zero_point ") + shp(in[i].shape) +
                  " must be a scalar or 1-D per row [" + std::to_string(rows) + "]");
  return {OutputType{in[7].dtype, out}};
}

// ---- integer / quantized convolutions ------------------------------------------------------

// Per output channel parameter: one value or [M].
void check_channel_param(const TensorView& p, int64_t m, const char* op, const char* what) {
  if (all_ones(p.shape)) return;
  if (p.rank() == 1 && p.shape[0] == m) return;
  throw Error(std::string(op) + ": " + what + " " + shp(p.shape) + " must be a scalar or 1-D per output channel [" +
              std::to_string(m) + "]");
}
void check_single(const TensorView& p, const char* op, const char* what) {
  if (!all_ones(p.shape)) throw Error(std::string(op) + ": " + what + " must be a scalar, got " + shp(p.shape));
}

std::vector<int64_t> conv_out_shape(const ConvAttrs& a, const TensorView& x, const TensorView& w) {
  nn::WindowGeometry g = nn::conv_geometry(a, x.shape, w.shape);
  std::vector<int64_t> out{x.shape[0], w.shape[0]};
  out.insert(out.end(), g.out.begin(), g.out.end());
  return out;
}

std::vector<OutputType> infer_conv_integer(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const char* op = "ConvInteger";
  const TensorView &x = in[0], &w = in[1];
  if (!is_q8(x.dtype) || !is_q8(w.dtype))
    throw Error(std::string(op) + ": x and w must be int8 or uint8, got " + dt(x.dtype) + " and " + dt(w.dtype));
  std::vector<int64_t> out = conv_out_shape(attrs_as<ConvAttrs>(attrs), x, w);
  if (in.size() > 2 && in[2].exists) {
    check_zero_point(in[2], x.dtype, op, "x_zero_point");
    check_single(in[2], op, "x_zero_point");
  }
  if (in.size() > 3 && in[3].exists) {
    check_zero_point(in[3], w.dtype, op, "w_zero_point");
    check_channel_param(in[3], w.shape[0], op, "w_zero_point");
  }
  return {OutputType{DataType::kInt32, out}};
}

std::vector<OutputType> infer_qlinear_conv(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const char* op = "QLinearConv";
  const TensorView &x = in[0], &w = in[3];
  if (!is_q8(x.dtype) || !is_q8(w.dtype))
    throw Error(std::string(op) + ": x and w must be int8 or uint8, got " + dt(x.dtype) + " and " + dt(w.dtype));
  std::vector<int64_t> out = conv_out_shape(attrs_as<ConvAttrs>(attrs), x, w);
  check_scale(in[1], op, "x_scale", true);
  check_scale(in[4], op, "w_scale", true);
  check_scale(in[6], op, "y_scale", true);
  check_zero_point(in[2], x.dtype, op, "x_zero_point");
  check_zero_point(in[5], w.dtype, op, "w_zero_point");
  if (!is_q8(in[7].dtype))
    throw Error(std::string(op) + ": y_zero_point must be int8 or uint8, got " + dt(in[7].dtype));
  check_single(in[1], op, "x_scale");
  check_single(in[2], op, "x_zero_point");
  check_channel_param(in[4], w.shape[0], op, "w_scale");
  check_channel_param(in[5], w.shape[0], op, "w_zero_point");
  check_single(in[6], op, "y_scale");
  check_single(in[7], op, "y_zero_point");
  if (in.size() > 8 && in[8].exists) {
    const TensorView& b = in[8];
    if (b.dtype != DataType::kInt32) throw Error(std::string(op) + ": B must be int32, got " + dt(b.dtype));
    if (b.rank() != 1 || b.shape[0] != w.shape[0])
      throw Error(std::string(op) + ": B must be [M] = [" + std::to_string(w.shape[0]) + "], got " + shp(b.shape));
  }
  return {OutputType{in[7].dtype, out}};
}

std::vector<OutputType> infer_dynamic_quantize(OpKind, const Attrs&, std::span<const TensorView> in, size_t) {
  if (in[0].dtype != DataType::kFloat32)
    throw Error("DynamicQuantizeLinear: x must be float32, got " + dt(in[0].dtype));
  return {OutputType{DataType::kUInt8, {in[0].shape.begin(), in[0].shape.end()}}, OutputType{DataType::kFloat32, {}},
          OutputType{DataType::kUInt8, {}}};
}

// ---- kiln.QConv / kiln.QMatMul (internal, made by fuse-qdq) ----------------------------------
// Inputs: x, x_scale, [x_zero_point], w, w_scale, [w_zero_point], [bias], [y_scale], [y_zero_point].
// x and w int8 or uint8, zero points of their type; float32 scales; x's and y's parameters one
// value, w's one value or one per output channel (m of them); bias float32 [m]. With y_scale the
// output is quantized to y_zero_point's type (int8 without one); without it, the output is float32.
// kiln.QConv's optional residual [z], [z_scale], [z_zero_point] (inputs 9 to 11): z int8 or uint8
// of y's shape (of any of the two types, whatever y's is), z_scale a float32 scalar, z_zero_point a
// scalar of z's type (absent: 0); or z float32 of y's shape, without z_scale and z_zero_point.

bool present(std::span<const TensorView> in, size_t i) { return i < in.size() && in[i].exists; }

// w and w_scale (inputs 3 and 4) are required; the op table cannot say so past the optional input 2.
void check_present_weights(const char* op, std::span<const TensorView> in) {
  if (!present(in, 3) || !present(in, 4))
    throw Error(std::string(op) + ": w and w_scale (inputs 3 and 4) are required");
}

DataType check_qfused(const char* op, std::span<const TensorView> in, int64_t m, QActivation act, float lo, float hi) {
  const TensorView &x = in[0], &w = in[3];
  if (!is_q8(x.dtype) || !is_q8(w.dtype))
    throw Error(std::string(op) + ": x and w must be int8 or uint8, got " + dt(x.dtype) + " and " + dt(w.dtype));
  if (static_cast<size_t>(act) >= kEnumNames<QActivation>.size()) throw Error(std::string(op) + ": invalid activation");
  if (act == QActivation::kClip && !(lo <= hi))
    throw Error(std::string(op) + ": clip activation needs act_alpha <= act_beta (min <= max)");
  check_scale(in[1], op, "x_scale", true);
  check_single(in[1], op, "x_scale");
  if (present(in, 2)) {
    check_zero_point(in[2], x.dtype, op, "x_zero_point");
    check_single(in[2], op, "x_zero_point");
  }
  check_scale(in[4], op, "w_scale", true);
  check_channel_param(in[4], m, op, "w_scale");
  if (present(in, 5)) {
    check_zero_point(in[5], w.dtype, op, "w_zero_point");
    check_channel_param(in[5], m, op, "w_zero_point");
  }
  if (present(in, 6)) {
    if (in[6].dtype != DataType::kFloat32)
      throw Error(std::string(op) + ": bias must be float32, got " + dt(in[6].dtype));
    if (in[6].rank() != 1 || in[6].shape[0] != m)
      throw Error(std::string(op) + ": bias must be [" + std::to_string(m) + "], got " + shp(in[6].shape));
  }
  if (present(in, 8) && !present(in, 7)) throw Error(std::string(op) + ": y_zero_point without y_scale");
  if (!present(in, 7)) return DataType::kFloat32;
  check_scale(in[7], op, "y_scale", true);
  check_single(in[7], op, "y_scale");
  if (!present(in, 8)) return DataType::kInt8;
  if (!is_q8(in[8].dtype))
    throw Error(std::string(op) + ": y_zero_point must be int8 or uint8, got " + dt(in[8].dtype));
  check_single(in[8], op, "y_zero_point");
  return in[8].dtype;
}

void check_residual(const char* op, std::span<const TensorView> in, const std::vector<int64_t>& y_shape) {
  if (!present(in, 9)) {
    if (present(in, 10) || present(in, 11)) throw Error(std::string(op) + ": z_scale or z_zero_point without z");
    return;
  }
  const TensorView& z = in[9];
  if (!is_q8(z.dtype) && z.dtype != DataType::kFloat32)
    throw Error(std::string(op) + ": z must be int8, uint8 or float32, got " + dt(z.dtype));
  if (std::vector<int64_t>(z.shape.begin(), z.shape.end()) != y_shape)
    throw Error(std::string(op) + ": z " + shp(z.shape) + " must have the output's shape " + shp(y_shape));
  if (z.dtype == DataType::kFloat32) {
    if (present(in, 10) || present(in, 11))
      throw Error(std::string(op) + ": a float32 z takes no z_scale or z_zero_point");
    return;
  }
  if (!present(in, 10)) throw Error(std::string(op) + ": z needs z_scale (input 10)");
  check_scale(in[10], op, "z_scale", true);
  check_single(in[10], op, "z_scale");
  if (present(in, 11)) {
    check_zero_point(in[11], z.dtype, op, "z_zero_point");
    check_single(in[11], op, "z_zero_point");
  }
}

std::vector<OutputType> infer_qconv(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const char* op = "kiln.QConv";
  const auto& a = attrs_as<QConvAttrs>(attrs);
  if (a.pool_mean != 0) throw Error(std::string(op) + ": pool_mean is for NhwcQConv only");
  check_present_weights(op, in);
  const DataType y = check_qfused(op, in, in[3].rank() > 0 ? in[3].shape[0] : 0, a.activation, a.act_alpha, a.act_beta);
  std::vector<int64_t> shape = conv_out_shape(a.conv(), in[0], in[3]);
  check_residual(op, in, shape);
  return {OutputType{y, std::move(shape)}};
}

// x [..., rows, K] times w [N, K] transposed: y [..., rows, N].
std::vector<OutputType> infer_qmatmul(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const char* op = "kiln.QMatMul";
  const auto& a = attrs_as<QMatMulAttrs>(attrs);
  check_present_weights(op, in);
  const TensorView &x = in[0], &w = in[3];
  if (x.rank() < 2 || w.rank() != 2 || x.shape[x.rank() - 1] != w.shape[1])
    throw Error(std::string(op) + ": x [..., rows, K] and w [N, K] expected, got " + shp(x.shape) + " and " +
                shp(w.shape));
  const DataType y = check_qfused(op, in, w.shape[0], a.activation, a.act_alpha, a.act_beta);
  std::vector<int64_t> out(x.shape.begin(), x.shape.end());
  out.back() = w.shape[0];
  return {OutputType{y, out}};
}

constexpr InferEntry kEntries[] = {
    {OpKind::kBitShift, infer_bitshift},
    {OpKind::kConvInteger, infer_conv_integer},
    {OpKind::kDynamicQuantizeLinear, infer_dynamic_quantize},
    {OpKind::kMatMulInteger, infer_matmul_integer},
    {OpKind::kNegativeLogLikelihoodLoss, infer_nll},
    {OpKind::kQLinearConv, infer_qlinear_conv},
    {OpKind::kQLinearMatMul, infer_qlinear_matmul},
    {OpKind::kSoftmaxCrossEntropyLoss, infer_sce},
    {OpKind::kQConv, infer_qconv},
    {OpKind::kQMatMul, infer_qmatmul},
};

}  // namespace
}  // namespace extra

std::span<const InferEntry> extra_infer_entries() { return extra::kEntries; }

}  // namespace kiln
