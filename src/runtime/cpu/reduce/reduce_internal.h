// Shared pieces of the reduce family's CPU kernels (the files in this folder); the norm family's
// kernels (norm/norm.cpp) use its axis helpers too.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <type_traits>

#include "core/shape_infer.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln::cpu::reduce_detail {

// Converts a double result to T. Integers: truncation toward zero, saturating at T's range, NaN -> 0
// (a plain out-of-range float->int cast would be undefined behaviour).
template <class T>
inline T from_double(double v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v != 0.0;
  } else if constexpr (kIsFloat<T>) {
    return static_cast<T>(static_cast<ComputeType<T>>(v));
  } else {
    if (std::isnan(v)) return T{0};
    // 2^digits is exact in double; every value below it and >= lowest converts safely.
    constexpr double kHi = static_cast<double>(std::numeric_limits<T>::max() / 2 + 1) * 2.0;
    constexpr double kLo = static_cast<double>(std::numeric_limits<T>::lowest());
    if (v >= kHi) return std::numeric_limits<T>::max();
    if (v <= kLo) return std::numeric_limits<T>::lowest();
    return static_cast<T>(v);
  }
}

template <class T>
inline double to_double(T v) {
  return static_cast<double>(static_cast<ComputeType<T>>(v));
}

template <class T>
inline bool is_nan(T v) {
  if constexpr (kIsFloat<T>)
    return std::isnan(static_cast<ComputeType<T>>(v));
  else
    return false;
}

// Runs fn(begin, end) over [0, n): on the pool when there is one and the work (n * cost_per_item,
// roughly in element operations) is large enough to pay for the fork, else inline.
inline void parallel_for(KernelEnv& env, int64_t n, int64_t cost_per_item,
                         const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  constexpr int64_t kMinParallelWork = 1 << 15;
  if (!env.pool || env.pool->team() <= 1 || n == 1 || n * std::max<int64_t>(cost_per_item, 1) < kMinParallelWork) {
    fn(0, n);
    return;
  }
  env.pool->parallel_for(n, fn);
}

// [outer, axis, inner] view of a shape around one axis.
struct AxisSplit {
  int64_t outer = 1, len = 1, inner = 1;
};
inline AxisSplit split_at(std::span<const int64_t> shape, int64_t axis) {
  AxisSplit s;
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    if (i < axis)
      s.outer *= shape[i];
    else if (i == axis)
      s.len = shape[i];
    else
      s.inner *= shape[i];
  }
  return s;
}

// Each file's kernels, joined by reduce_kernels() (reduce.cpp).
std::span<const KernelEntry> arg_kernel_entries();      // arg.cpp
std::span<const KernelEntry> softmax_kernel_entries();  // softmax.cpp
std::span<const KernelEntry> cumsum_kernel_entries();   // cumsum.cpp
std::span<const KernelEntry> topk_kernel_entries();     // topk.cpp
std::span<const KernelEntry> einsum_kernel_entries();   // einsum.cpp

}  // namespace kiln::cpu::reduce_detail
