// NhwcAveragePool and NhwcMaxPool on the CPU: the channels-last pass makes them for GPU engines;
// here the input is permuted to channels-first (runtime/cpu/channels_last.h), AveragePool / MaxPool
// (window.cpp) runs, and its output is permuted back. Plainly correct, not fast.
#include <vector>

#include "core/layout.h"
#include "core/shape_infer.h"
#include "runtime/cpu/channels_last.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/pool/pool_internal.h"

namespace kiln::cpu::pool {

namespace {

void nhwc_pool_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                      KernelEnv& env) {
  using channels_last::Owned;
  std::vector<Owned> owned;
  owned.reserve(4);
  std::vector<TensorView> ins(in.begin(), in.end());
  for (size_t i : nhwc_permuted_inputs(kind)) {
    if (i >= in.size() || !in[i].exists) continue;
    owned.push_back(channels_last::to_first(in[i]));
    ins[i] = owned.back().view(in[i].dtype);
  }
  const TensorView& Y = out[0];
  Owned y;
  y.shape = channels_first_shape(Y.shape);
  y.bytes.resize(Y.bytes());
  const TensorView yv = y.view(Y.dtype);
  pool_kernel(kind == OpKind::kNhwcMaxPool ? OpKind::kMaxPool : OpKind::kAveragePool, attrs, ins, {&yv, 1}, env);
  channels_last::to_last(yv, Y);
}

constexpr KernelEntry kEntries[] = {
    {OpKind::kNhwcAveragePool, nhwc_pool_kernel},
    {OpKind::kNhwcMaxPool, nhwc_pool_kernel},
};

}  // namespace

std::span<const KernelEntry> nhwc_kernel_entries() { return kEntries; }

}  // namespace kiln::cpu::pool
