// Shape inference of the quant family's integer and quantized matrix products: MatMulInteger,
// QLinearMatMul and Kiln's INT8 kiln.QMatMul (internal, made by fuse-qdq; its checks shared with
// kiln.QConv are in quant_internal.h).
#include <string>

#include "core/infer/quant/quant_internal.h"

namespace kiln::quant_infer {

namespace {

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

}  // namespace

// ---- integer / quantized matrix products ---------------------------------------------------------

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

// ---- kiln.QMatMul ----------------------------------------------------------------------------

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

}  // namespace kiln::quant_infer
