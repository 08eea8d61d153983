// NhwcAveragePool and NhwcMaxPool on the CPU: the channels-last pass makes them for GPU engines;
// here the input is permuted to channels-first (runtime/cpu/channels_last.h), AveragePool / MaxPool
// (window.cpp) runs, and its output is permuted back: plainly correct, not fast; float32 pools
// run in oneDNN where Kiln has it (runtime/cpu/onednn.h), as CPU engines' channels-last pools do,
// and 8-bit MaxPool (INT8 engines) in oneDNN or in this file's channels-last loop.
#include <algorithm>
#include <array>
#include <limits>
#include <vector>

#include "core/infer/nn_geometry.h"
#include "core/layout.h"
#include "core/shape_infer.h"
#include "runtime/cpu/channels_last.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/onednn.h"
#include "runtime/cpu/pool/pool_internal.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln::cpu::pool {

namespace {

// MaxPool on channels-last 8-bit integers, in place (the maximum is exact in any order): each output
// position takes the maximum over the window's taps inside the input, one channel vector at a time.
// What INT8 engines' pools run where oneDNN does not take them (a build without it, a CPU where its
// implementation would be the reference one), without permuting to channels-first and back.
template <class T>
void nhwc_max_q8(const PoolAttrs& a, const TensorView& x, const TensorView& y, KernelEnv& env) {
  const int64_t n = x.shape[0], c = x.shape[3];
  const nn::WindowGeometry g = nn::pool_geometry(a, std::array<int64_t, 4>{n, c, x.shape[1], x.shape[2]});
  const int64_t ih = g.in[0], iw = g.in[1], oh = g.out[0], ow = g.out[1];
  const T* px = x.as<const T>();
  T* py = y.as<T>();
  const auto rows = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / oh, i = r % oh;
      for (int64_t j = 0; j < ow; ++j) {
        T* out = py + ((b * oh + i) * ow + j) * c;
        std::fill(out, out + c, std::numeric_limits<T>::lowest());
        for (int64_t ki = 0; ki < g.kernel[0]; ++ki) {
          const int64_t h = i * g.strides[0] - g.pads[0] + ki * g.dilations[0];
          if (h < 0 || h >= ih) continue;
          for (int64_t kj = 0; kj < g.kernel[1]; ++kj) {
            const int64_t w = j * g.strides[1] - g.pads[1] + kj * g.dilations[1];
            if (w < 0 || w >= iw) continue;
            const T* in = px + ((b * ih + h) * iw + w) * c;
            for (int64_t k = 0; k < c; ++k) out[k] = std::max(out[k], in[k]);
          }
        }
      }
    }
  };
  if (env.pool && env.pool->size() > 1 && n * oh > 1)
    env.pool->parallel_for(n * oh, rows);
  else
    rows(0, n * oh);
}

void nhwc_pool_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                      KernelEnv& env) {
  const bool indices = out.size() > 1 && out[1].exists;
  if (!indices && onednn::nhwc_pool(kind, std::get<PoolAttrs>(attrs), in[0], out[0], env)) return;
  const DataType dt = in[0].dtype;
  if (!indices && kind == OpKind::kNhwcMaxPool && in[0].rank() == 4 &&
      std::get<PoolAttrs>(attrs).kernel_shape.size() == 2) {
    if (dt == DataType::kInt8) return nhwc_max_q8<int8_t>(std::get<PoolAttrs>(attrs), in[0], out[0], env);
    if (dt == DataType::kUInt8) return nhwc_max_q8<uint8_t>(std::get<PoolAttrs>(attrs), in[0], out[0], env);
  }
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
