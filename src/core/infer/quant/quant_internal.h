// Helpers shared by the quant family's groups (quantize.cpp, conv.cpp, matmul.cpp), among them the
// checks of Kiln's INT8 kiln.QConv and kiln.QMatMul, and the groups' shape inference functions,
// which registry.cpp lists.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "core/shape_infer.h"

namespace kiln::quant_infer {

inline std::string shp(std::span<const int64_t> s) { return shape_string({s.begin(), s.end()}); }
inline std::string dt(DataType t) { return std::string(dtype_name(t)); }

inline bool is_q8(DataType t) { return t == DataType::kInt8 || t == DataType::kUInt8; }

inline bool all_ones(std::span<const int64_t> s) {
  for (int64_t d : s)
    if (d != 1) return false;
  return true;
}

inline void check_zero_point(const TensorView& zp, DataType want, const char* op, const char* what) {
  if (zp.dtype != want) throw Error(std::string(op) + ": " + what + " must be " + dt(want) + ", got " + dt(zp.dtype));
}

inline void check_scale(const TensorView& s, const char* op, const char* what, bool float32_only) {
  const bool ok =
      float32_only ? s.dtype == DataType::kFloat32
                   : (s.dtype == DataType::kFloat32 || s.dtype == DataType::kFloat16 || s.dtype == DataType::kBFloat16);
  if (!ok) throw Error(std::string(op) + ": " + what + " must be a float tensor, got " + dt(s.dtype));
}

// Per output channel parameter: one value or [M].
inline void check_channel_param(const TensorView& p, int64_t m, const char* op, const char* what) {
  if (all_ones(p.shape)) return;
  if (p.rank() == 1 && p.shape[0] == m) return;
  throw Error(std::string(op) + ": " + what + " " + shp(p.shape) + " must be a scalar or 1-D per output channel [" +
              std::to_string(m) + "]");
}
inline void check_single(const TensorView& p, const char* op, const char* what) {
  if (!all_ones(p.shape)) throw Error(std::string(op) + ": " + what + " must be a scalar, got " + shp(p.shape));
}

// ---- kiln.QConv / kiln.QMatMul (internal, made by fuse-qdq) ----------------------------------
// Inputs: x, x_scale, [x_zero_point], w, w_scale, [w_zero_point], [bias], [y_scale], [y_zero_point].
// x and w int8 or uint8, zero points of their type; float32 scales; x's and y's parameters one
// value, w's one value or one per output channel (m of them); bias float32 [m]. With y_scale the
// output is quantized to y_zero_point's type (int8 without one); without it, the output is float32.
// kiln.QConv's optional residual [z], [z_scale], [z_zero_point] (inputs 9 to 11): z int8 or uint8
// of y's shape (of any of the two types, whatever y's is), z_scale a float32 scalar, z_zero_point a
// scalar of z's type (absent: 0); or z float32 of y's shape, without z_scale and z_zero_point.

inline bool present(std::span<const TensorView> in, size_t i) { return i < in.size() && in[i].exists; }

// w and w_scale (inputs 3 and 4) are required; the op table cannot say so past the optional input 2.
inline void check_present_weights(const char* op, std::span<const TensorView> in) {
  if (!present(in, 3) || !present(in, 4))
    throw Error(std::string(op) + ": w and w_scale (inputs 3 and 4) are required");
}

inline DataType check_qfused(const char* op, std::span<const TensorView> in, int64_t m, QActivation act, float lo,
                             float hi) {
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

// quantize.cpp
std::vector<OutputType> infer_quantize(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_dequantize(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_dynamic_quantize(OpKind, const Attrs&, std::span<const TensorView> in, size_t);
// conv.cpp
std::vector<OutputType> infer_conv_integer(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_qlinear_conv(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_qconv(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_nhwc_qconv(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t n);
// matmul.cpp
std::vector<OutputType> infer_matmul_integer(OpKind, const Attrs&, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_qlinear_matmul(OpKind, const Attrs&, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_qmatmul(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t);

}  // namespace kiln::quant_infer
