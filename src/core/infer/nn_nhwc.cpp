// Shape inference of the channels-last ops (NhwcConv, NhwcQConv, NhwcMaxPool, NhwcAveragePool;
// internal, made by the channels-last pass): data tensors are [N, spatial..., C] and the
// convolutions' weights are [M, k..., C/group]. Each is inferred by its channels-first twin (FusedConv, MaxPool, AveragePool) on the
// permuted shapes, and the output permuted back; NhwcConv's optional y_scale and y_zero_point
// make its output their 8-bit type. NhwcConv with x_channels_first takes X channels-first, in
// float32 or W's type: the twin sees it in W's type.
#include <algorithm>
#include <string>

#include "core/layout.h"
#include "core/shape_infer.h"

namespace kiln::nn {

std::vector<OutputType> infer_nhwc(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t n) {
  const std::string op(op_name(kind));
  // Every permuted input (data tensors, NhwcConv's W and Z) keeps its shape here.
  std::vector<std::vector<int64_t>> shapes;
  std::vector<TensorView> views(in.begin(), in.end());
  auto permute_input = [&](size_t i) {
    if (i >= in.size() || !in[i].exists) return;
    if (in[i].rank() < 3) throw Error(op + ": input " + std::to_string(i) + " must have rank >= 3 ([N, ..., C])");
    shapes.push_back(channels_first_shape(in[i].shape));
  };
  shapes.reserve(3);
  const OpKind twin = kind == OpKind::kNhwcConv      ? OpKind::kFusedConv
                      : kind == OpKind::kNhwcQConv   ? OpKind::kQConv
                      : kind == OpKind::kNhwcMaxPool ? OpKind::kMaxPool
                                                     : OpKind::kAveragePool;
  Attrs twin_attrs = attrs;
  bool x_first = false;
  if (kind == OpKind::kNhwcConv) {
    auto& a = std::get<FusedConvAttrs>(twin_attrs);
    x_first = a.x_channels_first != 0;
    if (a.x_channels_first != 0 && a.x_channels_first != 1) throw Error(op + ": x_channels_first must be 0 or 1");
    a.x_channels_first = 0;
  }
  int64_t pool_mean = 0;
  if (kind == OpKind::kNhwcQConv) {
    auto& a = std::get<QConvAttrs>(twin_attrs);
    pool_mean = a.pool_mean;
    if (pool_mean != 0 && pool_mean != 1) throw Error(op + ": pool_mean must be 0 or 1");
    a.pool_mean = 0;
  }
  if (x_first) {
    if (in.size() < 2 || in[0].rank() < 3) throw Error(op + ": a channels-first X must have rank >= 3 ([N, C, ...])");
    const DataType x = in[0].dtype, w = in[1].dtype;
    if (x != w && x != DataType::kFloat32)
      throw Error(op + ": a channels-first X must be float32 or W's type " + std::string(dtype_name(w)) + ", got " +
                  std::string(dtype_name(x)));
    views[0].dtype = w;
  }
  const std::vector<size_t> permuted = nhwc_permuted_inputs(kind);
  for (size_t i : permuted)
    if (!(x_first && i == 0)) permute_input(i);
  size_t k = 0;
  for (size_t i : permuted)
    if (i < in.size() && in[i].exists && !(x_first && i == 0)) views[i].shape = shapes[k++];
  // NhwcConv's y_scale and y_zero_point: FusedConv's output, quantized.
  const bool quantized = kind == OpKind::kNhwcConv && in.size() > 4 && in[4].exists;
  if (kind == OpKind::kNhwcConv && in.size() > 4) views.resize(4);
  std::vector<OutputType> out = infer_shapes(twin, twin_attrs, views, n);
  for (OutputType& o : out) o.shape = channels_last_shape(o.shape);
  if (pool_mean) {  // y averaged over its spatial axes: [N, 1, ..., 1, M]
    if (out[0].dtype != DataType::kFloat32)
      throw Error(op + ": pool_mean needs a float32 output (no y_scale), got " + std::string(dtype_name(out[0].dtype)));
    std::fill(out[0].shape.begin() + 1, out[0].shape.end() - 1, 1);
  }
  if (quantized) {
    if (views[0].dtype != DataType::kFloat32 && views[0].dtype != DataType::kFloat16)
      throw Error(op + ": a quantized output needs X of float32 or float16, got " + std::string(dtype_name(views[0].dtype)));
    if (in[4].dtype != DataType::kFloat32 || in[4].numel() != 1 || in[4].rank() > 1)
      throw Error(op + ": y_scale (input 4) must be one float32 value");
    if (in.size() < 6 || !in[5].exists || (in[5].dtype != DataType::kInt8 && in[5].dtype != DataType::kUInt8) ||
        in[5].numel() != 1 || in[5].rank() > 1)
      throw Error(op + ": y_zero_point (input 5) must be one int8 or uint8 value when y_scale is given");
    out[0].dtype = in[5].dtype;
  } else if (kind == OpKind::kNhwcConv && in.size() > 5 && in[5].exists) {
    throw Error(op + ": y_zero_point (input 5) without y_scale (input 4)");
  }
  return out;
}

}  // namespace kiln::nn
