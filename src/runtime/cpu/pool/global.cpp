// GlobalAveragePool and GlobalMaxPool on the CPU: one value per (n, c) plane, parallel over the planes.
#include <cmath>
#include <functional>

#include "runtime/cpu/kernels.h"
#include "runtime/cpu/pool/pool_internal.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln::cpu::pool {

namespace {

void parallel(ThreadPool* pool, int64_t n, int64_t work_per_item, const std::function<void(int64_t, int64_t)>& fn) {
  // Below ~32k operations waking the workers costs more than it saves.
  if (!pool || pool->team() == 1 || n < 2 || n * work_per_item < (1 << 15)) {
    fn(0, n);
  } else {
    pool->parallel_for(n, fn);
  }
}

// ---- GlobalAveragePool / GlobalMaxPool ------------------------------------------------------

void global_pool_kernel(OpKind kind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                        KernelEnv& env) {
  const TensorView &X = in[0], &Y = out[0];
  const int64_t planes = X.shape[0] * X.shape[1];
  const int64_t size = planes > 0 ? X.numel() / planes : 0;
  const bool avg = kind == OpKind::kGlobalAveragePool;
  dispatch_float(X.dtype, op_name(kind).data(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = ComputeType<T>;
    const T* x = X.as<const T>();
    T* y = Y.as<T>();
    parallel(env.pool, planes, size, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const T* xp = x + p * size;
        if (avg) {
          double s = 0;  // double: a long plane summed in float drifts
          for (int64_t i = 0; i < size; ++i) s += static_cast<double>(static_cast<C>(xp[i]));
          y[p] = static_cast<T>(static_cast<C>(s / static_cast<double>(size)));
        } else {
          C best = static_cast<C>(xp[0]);
          for (int64_t i = 1; i < size; ++i) {
            const C v = static_cast<C>(xp[i]);
            if (v > best || std::isnan(v)) best = v;  // NaN propagates, as numpy's max does
            if (std::isnan(best)) break;
          }
          y[p] = static_cast<T>(best);
        }
      }
    });
  });
}

constexpr KernelEntry kEntries[] = {
    {OpKind::kGlobalAveragePool, global_pool_kernel},
    {OpKind::kGlobalMaxPool, global_pool_kernel},
};

}  // namespace

std::span<const KernelEntry> global_kernel_entries() { return kEntries; }

}  // namespace kiln::cpu::pool
