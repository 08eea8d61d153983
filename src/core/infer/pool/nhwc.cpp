// Shape inference of the pool family's channels-last pools, NhwcAveragePool and NhwcMaxPool
// (internal, made by the channels-last pass): X is [N, spatial..., C]; each is inferred by its
// channels-first twin (AveragePool, MaxPool) on the permuted shape, and the output permuted back
// (core/infer/channels_last.cpp).
#include "core/infer/channels_last.h"
#include "core/infer/pool/pool_internal.h"

namespace kiln::nn {

std::vector<OutputType> infer_nhwc_pool(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t n) {
  const OpKind twin = kind == OpKind::kNhwcMaxPool ? OpKind::kMaxPool : OpKind::kAveragePool;
  return infer_channels_last(kind, twin, attrs, in, std::vector<TensorView>(in.begin(), in.end()), false, n);
}

}  // namespace kiln::nn
