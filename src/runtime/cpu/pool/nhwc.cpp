// NhwcAveragePool and NhwcMaxPool on the CPU: the channels-last pass makes them for GPU engines;
// here the input is permuted to channels-first (runtime/cpu/channels_last.h), AveragePool / MaxPool
// (window.cpp) runs, and its output is permuted back: plainly correct, not fast; float32 pools
// run in oneDNN where Kiln has it (runtime/cpu/onednn.h), as CPU engines' channels-last pools do.
#include <vector>

#include "core/layout.h"
#include "core/shape_infer.h"
#include "runtime/cpu/channels_last.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/onednn.h"
#include "runtime/cpu/pool/pool_internal.h"

namespace kiln::cpu::pool {

namespace {

void nhwc_pool_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                      KernelEnv& env) {
  if ((out.size() < 2 || !out[1].exists) && onednn::nhwc_pool(kind, std::get<PoolAttrs>(attrs), in[0], out[0], env))
    return;
  channels_last::run_channels_first(kind, in, out[0], [&](std::span<const TensorView> ins, const TensorView& y) {
    pool_kernel(kind == OpKind::kNhwcMaxPool ? OpKind::kMaxPool : OpKind::kAveragePool, attrs, ins, {&y, 1}, env);
  });
}

constexpr KernelEntry kEntries[] = {
    {OpKind::kNhwcAveragePool, nhwc_pool_kernel},
    {OpKind::kNhwcMaxPool, nhwc_pool_kernel},
};

}  // namespace

std::span<const KernelEntry> nhwc_kernel_entries() { return kEntries; }

}  // namespace kiln::cpu::pool
