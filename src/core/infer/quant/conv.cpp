// Shape inference of the quant family's integer and quantized convolutions: ConvInteger,
// QLinearConv, Kiln's INT8 kiln.QConv (internal, made by fuse-qdq; its checks shared with
// kiln.QMatMul are in quant_internal.h) and NhwcQConv, the channels-last kiln.QConv. Conv geometry
// is shared with Conv (core/infer/nn_geometry.h), so ConvInteger, QLinearConv and kiln.QConv size
// their outputs exactly as Conv.
#include <algorithm>
#include <string>

#include "core/infer/channels_last.h"
#include "core/infer/nn_geometry.h"
#include "core/infer/quant/quant_internal.h"

namespace kiln::quant_infer {

namespace {

std::vector<int64_t> conv_out_shape(const ConvAttrs& a, const TensorView& x, const TensorView& w) {
  nn::WindowGeometry g = nn::conv_geometry(a, x.shape, w.shape);
  std::vector<int64_t> out{x.shape[0], w.shape[0]};
  out.insert(out.end(), g.out.begin(), g.out.end());
  return out;
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

}  // namespace

// ---- integer / quantized convolutions ------------------------------------------------------

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

// ---- kiln.QConv / NhwcQConv ------------------------------------------------------------------

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

// Channels-last kiln.QConv: x, y and the residual z [N, spatial..., C], w [M, k..., C/group],
// inferred by kiln.QConv on the permuted shapes (core/infer/channels_last.cpp). With pool_mean, y
// is averaged over its spatial axes.
std::vector<OutputType> infer_nhwc_qconv(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t n) {
  const std::string op(op_name(kind));
  Attrs twin_attrs = attrs;
  int64_t pool_mean = 0;
  {
    auto& a = std::get<QConvAttrs>(twin_attrs);
    pool_mean = a.pool_mean;
    if (pool_mean != 0 && pool_mean != 1) throw Error(op + ": pool_mean must be 0 or 1");
    a.pool_mean = 0;
  }
  std::vector<OutputType> out = infer_channels_last(kind, OpKind::kQConv, twin_attrs, in,
                                                    std::vector<TensorView>(in.begin(), in.end()), false, n);
  if (pool_mean) {  // y averaged over its spatial axes: [N, 1, ..., 1, M]
    if (out[0].dtype != DataType::kFloat32)
      throw Error(op + ": pool_mean needs a float32 output (no y_scale), got " + std::string(dtype_name(out[0].dtype)));
    std::fill(out[0].shape.begin() + 1, out[0].shape.end() - 1, 1);
  }
  return out;
}

}  // namespace kiln::quant_infer
