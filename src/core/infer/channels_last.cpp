// Shape inference of the channels-last ops (NhwcConv, NhwcQConv, NhwcMaxPool, NhwcAveragePool;
// internal, made by the channels-last pass): data tensors are [N, spatial..., C] and the
// convolutions' weights are [M, k..., C/group]. Each is inferred by its channels-first twin (FusedConv, MaxPool,
// AveragePool) on the permuted shapes, and the output permuted back. The ops' own parts are in their families' files:
// conv/conv.cpp (NhwcConv), quant/conv.cpp (NhwcQConv), pool/nhwc.cpp (the pools).
#include "core/infer/channels_last.h"

#include <string>

#include "core/layout.h"

namespace kiln {

std::vector<OutputType> infer_channels_last(OpKind kind, OpKind twin, const Attrs& twin_attrs,
                                            std::span<const TensorView> in, std::vector<TensorView> views, bool x_first,
                                            size_t n) {
  const std::string op(op_name(kind));
  // Every permuted input (data tensors, NhwcConv's W and Z) keeps its shape here.
  std::vector<std::vector<int64_t>> shapes;
  auto permute_input = [&](size_t i) {
    if (i >= in.size() || !in[i].exists) return;
    if (in[i].rank() < 3) throw Error(op + ": input " + std::to_string(i) + " must have rank >= 3 ([N, ..., C])");
    shapes.push_back(channels_first_shape(in[i].shape));
  };
  shapes.reserve(3);
  const std::vector<size_t> permuted = nhwc_permuted_inputs(kind);
  for (size_t i : permuted)
    if (!(x_first && i == 0)) permute_input(i);
  size_t k = 0;
  for (size_t i : permuted)
    if (i < in.size() && in[i].exists && !(x_first && i == 0)) views[i].shape = shapes[k++];
  std::vector<OutputType> out = infer_shapes(twin, twin_attrs, views, n);
  for (OutputType& o : out) o.shape = channels_last_shape(o.shape);
  return out;
}

}  // namespace kiln
