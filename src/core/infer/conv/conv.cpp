// Shape inference of the conv family: Conv and ConvTranspose, whose window geometry is in
// core/infer/nn_geometry.cpp; FusedConv, inferred as Conv with its epilogue checked (core/infer/fused.h);
// and NhwcConv, the channels-last FusedConv (core/infer/channels_last.cpp): its optional y_scale and
// y_zero_point make its output their 8-bit type, and with x_channels_first it takes X
// channels-first, in float32 or W's type: the twin sees it in W's type.
#include <string>

#include "core/infer/channels_last.h"
#include "core/infer/fused.h"
#include "core/infer/nn_geometry.h"
#include "core/shape_infer.h"

namespace kiln::nn {

namespace {

int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw Error(std::string(what) + " overflows int64");
  return r;
}

void check_float(const TensorView& t, const char* what) {
  switch (t.dtype) {
    case DataType::kFloat32:
    case DataType::kFloat64:
    case DataType::kFloat16:
    case DataType::kBFloat16: return;
    default: throw Error(std::string(what) + " must be a float type, got " + std::string(dtype_name(t.dtype)));
  }
}

std::vector<int64_t> nc_plus(std::span<const int64_t> x, int64_t channels, const std::vector<int64_t>& spatial) {
  std::vector<int64_t> s{x[0], channels};
  s.insert(s.end(), spatial.begin(), spatial.end());
  return s;
}

void check_bias(std::span<const TensorView> in, int64_t m, const char* op) {
  if (in.size() < 3 || !in[2].exists) return;
  if (in[2].dtype != in[0].dtype) throw Error(std::string(op) + ": bias B must have X's element type");
  if (in[2].rank() != 1 || in[2].shape[0] != m)
    throw Error(std::string(op) + ": bias B must have shape [" + std::to_string(m) + "], got " +
                shape_string({in[2].shape.begin(), in[2].shape.end()}));
}

std::vector<OutputType> infer_conv(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const auto& a = attrs_as<ConvAttrs>(attrs);
  check_float(in[0], "X");
  if (in[1].dtype != in[0].dtype) throw Error("W must have X's element type");
  if (kind == OpKind::kConv) {
    WindowGeometry g = conv_geometry(a, in[0].shape, in[1].shape);
    check_bias(in, in[1].shape[0], "Conv");
    return {OutputType{in[0].dtype, nc_plus(in[0].shape, in[1].shape[0], g.out)}};
  }
  WindowGeometry g = conv_transpose_geometry(a, in[0].shape, in[1].shape);
  const int64_t m = checked_mul(in[1].shape[1], a.group, "ConvTranspose channels");
  check_bias(in, m, "ConvTranspose");
  return {OutputType{in[0].dtype, nc_plus(in[0].shape, m, g.out)}};
}

std::vector<OutputType> infer_fused_conv(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const auto& a = attrs_as<FusedConvAttrs>(attrs);
  fused::check_epilogue(kind, a, fused::has_z(in));
  if (a.x_channels_first != 0) throw Error("FusedConv: x_channels_first is an attribute of NhwcConv only");
  std::vector<OutputType> out =
      infer_shapes(OpKind::kConv, Attrs{static_cast<const ConvAttrs&>(a)}, fused::leading(in, 3), 1);
  fused::check_output(kind, in, out);
  return out;
}

std::vector<OutputType> infer_nhwc_conv(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t n) {
  const std::string op(op_name(kind));
  std::vector<TensorView> views(in.begin(), in.end());
  Attrs twin_attrs = attrs;
  bool x_first = false;
  {
    auto& a = std::get<FusedConvAttrs>(twin_attrs);
    x_first = a.x_channels_first != 0;
    if (a.x_channels_first != 0 && a.x_channels_first != 1) throw Error(op + ": x_channels_first must be 0 or 1");
    a.x_channels_first = 0;
  }
  if (x_first) {
    if (in.size() < 2 || in[0].rank() < 3) throw Error(op + ": a channels-first X must have rank >= 3 ([N, C, ...])");
    const DataType x = in[0].dtype, w = in[1].dtype;
    if (x != w && x != DataType::kFloat32)
      throw Error(op + ": a channels-first X must be float32 or W's type " + std::string(dtype_name(w)) + ", got " +
                  std::string(dtype_name(x)));
    views[0].dtype = w;
  }
  // NhwcConv's y_scale and y_zero_point: FusedConv's output, quantized.
  const bool quantized = in.size() > 4 && in[4].exists;
  if (in.size() > 4) views.resize(4);
  const DataType x_type = views[0].dtype;
  std::vector<OutputType> out =
      infer_channels_last(kind, OpKind::kFusedConv, twin_attrs, in, std::move(views), x_first, n);
  if (quantized) {
    if (x_type != DataType::kFloat32 && x_type != DataType::kFloat16)
      throw Error(op + ": a quantized output needs X of float32 or float16, got " + std::string(dtype_name(x_type)));
    if (in[4].dtype != DataType::kFloat32 || in[4].numel() != 1 || in[4].rank() > 1)
      throw Error(op + ": y_scale (input 4) must be one float32 value");
    if (in.size() < 6 || !in[5].exists || (in[5].dtype != DataType::kInt8 && in[5].dtype != DataType::kUInt8) ||
        in[5].numel() != 1 || in[5].rank() > 1)
      throw Error(op + ": y_zero_point (input 5) must be one int8 or uint8 value when y_scale is given");
    out[0].dtype = in[5].dtype;
  } else if (in.size() > 5 && in[5].exists) {
    throw Error(op + ": y_zero_point (input 5) without y_scale (input 4)");
  }
  return out;
}

constexpr InferEntry kEntries[] = {
    {OpKind::kConv, infer_conv},
    {OpKind::kConvTranspose, infer_conv},
    {OpKind::kFusedConv, infer_fused_conv},
    {OpKind::kNhwcConv, infer_nhwc_conv},
};

}  // namespace

}  // namespace kiln::nn

namespace kiln {

std::span<const InferEntry> conv_infer_entries() { return nn::kEntries; }

}  // namespace kiln
