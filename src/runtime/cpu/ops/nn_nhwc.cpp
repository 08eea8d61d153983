// CPU kernels of the channels-last ops (NhwcConv, NhwcQConv, NhwcMaxPool, NhwcAveragePool). The channels-last
// pass makes them for GPU engines, where the layout pays; here they only keep such graphs runnable
// (and testable) everywhere: the data inputs are permuted to channels-first ([N, S..., C] ->
// [N, C, S...], the convolutions' W and Z too), the channels-first kernel runs, and its output is permuted
// back. Plainly correct, not fast. NhwcConv with y_scale quantizes FusedConv's output; with
// x_channels_first its X is already channels-first and is only cast to W's type. NhwcQConv with
// pool_mean averages its output over the spatial axes with ReduceMean's kernel.
#include <cstring>
#include <vector>

#include "core/layout.h"
#include "core/shape_infer.h"
#include "runtime/cpu/kernels.h"

namespace kiln::cpu::nn {

void fused_kernel(OpKind, const Attrs&, std::span<const TensorView>, std::span<const TensorView>, KernelEnv&);
void pool_kernel(OpKind, const Attrs&, std::span<const TensorView>, std::span<const TensorView>, KernelEnv&);
}  // namespace kiln::cpu::nn
namespace kiln::cpu::extra {
void qconv_kernel(OpKind, const Attrs&, std::span<const TensorView>, std::span<const TensorView>, KernelEnv&);
}  // namespace kiln::cpu::extra
namespace kiln::cpu::nn {

namespace {

// A tensor with its own storage, viewed with `shape`.
struct Owned {
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  TensorView view(DataType dt) { return TensorView{dt, shape, bytes.data(), true}; }
};

// Moves the channel axis: to_last [N, C, S] -> [N, S, C], else [N, S, C] -> [N, C, S] (S the
// spatial axes flattened; `from` has shape [n, a, b] with (a, b) = (C, S) or (S, C)).
void swap_inner(const uint8_t* from, uint8_t* to, int64_t n, int64_t a, int64_t b, size_t es) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < a; ++p)
      for (int64_t q = 0; q < b; ++q)
        std::memcpy(to + static_cast<size_t>((i * b + q) * a + p) * es,
                    from + static_cast<size_t>((i * a + p) * b + q) * es, es);
}

Owned to_first(const TensorView& t) {
  Owned o;
  const int64_t c = t.shape.back();
  o.shape = channels_first_shape(t.shape);
  o.bytes.resize(t.bytes());
  const int64_t s = t.shape[0] * c > 0 ? t.numel() / (t.shape[0] * c) : 0;
  swap_inner(static_cast<const uint8_t*>(t.data), o.bytes.data(), t.shape[0], s, c, dtype_size(t.dtype));
  return o;
}

void to_last(const TensorView& first, const TensorView& out) {
  const int64_t c = first.shape[1];
  const int64_t s = first.shape[0] * c > 0 ? first.numel() / (first.shape[0] * c) : 0;
  swap_inner(static_cast<const uint8_t*>(first.data), static_cast<uint8_t*>(out.data), first.shape[0], c, s,
             dtype_size(first.dtype));
}

}  // namespace

void nhwc_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                 KernelEnv& env) {
  if (kind == OpKind::kNhwcQConv && std::get<QConvAttrs>(attrs).pool_mean) {
    // The pair fuse-conv-pool joined: the convolution's float32 output, then ReduceMean over its
    // spatial axes (the CPU's own, so the results are those of the pair).
    Attrs plain = attrs;
    std::get<QConvAttrs>(plain).pool_mean = 0;
    Owned full;
    full.shape = infer_shapes(OpKind::kNhwcQConv, plain, in, 1)[0].shape;
    full.bytes.resize(static_cast<size_t>(full.view(DataType::kFloat32).bytes()));
    const TensorView fv = full.view(DataType::kFloat32);
    nhwc_kernel(kind, plain, in, {&fv, 1}, env);
    std::vector<int64_t> axes;
    for (int64_t a = 1; a + 1 < static_cast<int64_t>(full.shape.size()); ++a) axes.push_back(a);
    const int64_t n_axes = static_cast<int64_t>(axes.size());
    const TensorView mean_in[2] = {fv, TensorView{DataType::kInt64, {&n_axes, 1}, axes.data(), true}};
    return cpu_kernel(OpKind::kReduceMean)(OpKind::kReduceMean, ReduceAttrs{}, std::span<const TensorView>(mean_in),
                                           out, env);
  }
  std::vector<Owned> owned;
  owned.reserve(4);
  std::vector<TensorView> ins(in.begin(), in.end());
  Attrs conv_attrs = attrs;
  bool x_first = false;
  if (kind == OpKind::kNhwcConv) {
    auto& a = std::get<FusedConvAttrs>(conv_attrs);
    x_first = a.x_channels_first != 0;
    a.x_channels_first = 0;
  }
  if (x_first && in[0].dtype != in[1].dtype) {
    owned.push_back(Owned{{in[0].shape.begin(), in[0].shape.end()},
                          std::vector<uint8_t>(static_cast<size_t>(in[0].numel()) * dtype_size(in[1].dtype))});
    const TensorView xv = owned.back().view(in[1].dtype);
    CastAttrs cast;
    cast.to = in[1].dtype;
    cpu_kernel(OpKind::kCast)(OpKind::kCast, cast, std::span<const TensorView>(&in[0], 1), {&xv, 1}, env);
    ins[0] = xv;
  }
  for (size_t i : nhwc_permuted_inputs(kind)) {
    if (i >= in.size() || !in[i].exists || (x_first && i == 0)) continue;
    owned.push_back(to_first(in[i]));
    ins[i] = owned.back().view(in[i].dtype);
  }
  const TensorView& Y = out[0];
  Owned y;
  y.shape = channels_first_shape(Y.shape);
  y.bytes.resize(Y.bytes());
  const TensorView yv = y.view(Y.dtype);
  if (kind == OpKind::kNhwcConv && in.size() > 4 && in[4].exists) {
    // A quantized output: FusedConv's output in X's type, then QuantizeLinear.
    Owned f{y.shape, std::vector<uint8_t>(static_cast<size_t>(yv.numel()) * dtype_size(ins[0].dtype))};
    const TensorView fv = f.view(ins[0].dtype);
    fused_kernel(OpKind::kFusedConv, conv_attrs, std::span<const TensorView>(ins).first(4), {&fv, 1}, env);
    const TensorView q_in[3] = {fv, in[4], in[5]};
    cpu_kernel(OpKind::kQuantizeLinear)(OpKind::kQuantizeLinear, QuantizeAttrs{}, std::span<const TensorView>(q_in), {&yv, 1}, env);
  } else if (kind == OpKind::kNhwcConv)
    fused_kernel(OpKind::kFusedConv, conv_attrs, ins, {&yv, 1}, env);
  else if (kind == OpKind::kNhwcQConv)
    extra::qconv_kernel(OpKind::kQConv, attrs, ins, {&yv, 1}, env);
  else
    pool_kernel(kind == OpKind::kNhwcMaxPool ? OpKind::kMaxPool : OpKind::kAveragePool, attrs, ins, {&yv, 1}, env);
  to_last(yv, Y);
}

}  // namespace kiln::cpu::nn
