// CPU kernels of Softmax / LogSoftmax / Hardmax, which work along one axis (as cumsum.cpp's CumSum
// and topk.cpp's TopK do). The input is viewed as [outer, len, inner] around the axis; when
// inner > 1 a block of up to kBlock neighbouring lines is processed together so the input is read
// in contiguous rows.
#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "runtime/cpu/reduce/reduce_internal.h"

namespace kiln::cpu {

namespace {

using namespace reduce_detail;

constexpr int64_t kBlock = 256;

enum class SoftMode { kSoftmax, kLogSoftmax, kHardmax };

// Softmax is exp(x - max) / sum; subtracting the max keeps exp() <= 1, so nothing overflows, and
// the sum is accumulated in double. LogSoftmax is x - max - log(sum), never log(softmax).
// Hardmax marks the first maximum (a NaN counts as the maximum, as numpy's argmax does).
template <class T, SoftMode kMode>
void softmax_typed(const T* x, T* y, AxisSplit s, KernelEnv& env) {
  using C = ComputeType<T>;
  if (s.len == 0) return;
  auto greater = [](C v, C best) { return v > best || (v != v && best == best); };
  if (s.inner == 1) {
    parallel_for(env, s.outer, s.len * 8, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* xr = x + o * s.len;
        T* yr = y + o * s.len;
        C m = static_cast<C>(xr[0]);
        int64_t arg = 0;
        for (int64_t i = 1; i < s.len; ++i)
          if (C v = static_cast<C>(xr[i]); greater(v, m)) m = v, arg = i;
        if constexpr (kMode == SoftMode::kHardmax) {
          for (int64_t i = 0; i < s.len; ++i) yr[i] = static_cast<T>(C(i == arg ? 1 : 0));
        } else {
          // Four partial sums, so the adds do not serialize on one register.
          double sums[4] = {0.0, 0.0, 0.0, 0.0};
          for (int64_t i = 0; i < s.len; ++i) {
            C ex = std::exp(static_cast<C>(xr[i]) - m);
            sums[i & 3] += ex;
            if constexpr (kMode == SoftMode::kSoftmax && std::is_same_v<T, C>) yr[i] = ex;  // reused below
          }
          double sum = (sums[0] + sums[1]) + (sums[2] + sums[3]);
          if constexpr (kMode == SoftMode::kSoftmax) {
            C inv = static_cast<C>(1.0 / sum);
            for (int64_t i = 0; i < s.len; ++i) {
              if constexpr (std::is_same_v<T, C>)
                yr[i] = yr[i] * inv;
              else
                yr[i] = static_cast<T>(std::exp(static_cast<C>(xr[i]) - m) * inv);
            }
          } else {
            // (x - m) is exact when x is near m; folding m into the log term would round it away.
            C lse = static_cast<C>(std::log(sum));
            for (int64_t i = 0; i < s.len; ++i) yr[i] = static_cast<T>((static_cast<C>(xr[i]) - m) - lse);
          }
        }
      }
    });
    return;
  }
  const int64_t blocks = (s.inner + kBlock - 1) / kBlock;
  parallel_for(env, s.outer * blocks, s.len * kBlock * 8, [&](int64_t b, int64_t e) {
    std::array<C, kBlock> m;
    std::array<int64_t, kBlock> arg;
    std::array<double, kBlock> sum;
    for (int64_t t = b; t < e; ++t) {
      int64_t o = t / blocks, c0 = (t % blocks) * kBlock, n = std::min(kBlock, s.inner - c0);
      const T* xb = x + o * s.len * s.inner + c0;
      T* yb = y + o * s.len * s.inner + c0;
      for (int64_t j = 0; j < n; ++j) m[j] = static_cast<C>(xb[j]), arg[j] = 0, sum[j] = 0.0;
      for (int64_t i = 1; i < s.len; ++i)
        for (int64_t j = 0; j < n; ++j)
          if (C v = static_cast<C>(xb[i * s.inner + j]); greater(v, m[j])) m[j] = v, arg[j] = i;
      if constexpr (kMode == SoftMode::kHardmax) {
        for (int64_t i = 0; i < s.len; ++i)
          for (int64_t j = 0; j < n; ++j) yb[i * s.inner + j] = static_cast<T>(C(i == arg[j] ? 1 : 0));
      } else {
        for (int64_t i = 0; i < s.len; ++i)
          for (int64_t j = 0; j < n; ++j) sum[j] += std::exp(static_cast<C>(xb[i * s.inner + j]) - m[j]);
        for (int64_t j = 0; j < n; ++j) {
          if constexpr (kMode == SoftMode::kSoftmax)
            sum[j] = 1.0 / sum[j];
          else
            sum[j] = std::log(sum[j]);
        }
        for (int64_t i = 0; i < s.len; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            C v = static_cast<C>(xb[i * s.inner + j]);
            if constexpr (kMode == SoftMode::kSoftmax)
              yb[i * s.inner + j] = static_cast<T>(std::exp(v - m[j]) * static_cast<C>(sum[j]));
            else
              yb[i * s.inner + j] = static_cast<T>((v - m[j]) - static_cast<C>(sum[j]));
          }
        }
      }
    }
  });
}

}  // namespace

void softmax_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs,
                    std::span<const TensorView> outputs, KernelEnv& env) {
  const auto& a = attrs_as<SoftmaxAttrs>(attrs);
  const TensorView& x = inputs[0];
  int64_t axis = normalize_axis(a.axis, static_cast<int64_t>(x.rank()));
  AxisSplit s = split_at(x.shape, axis);
  if (a.coerce_2d) {  // [prod(dims < axis), prod(dims >= axis)], along the second dimension
    s.len *= s.inner;
    s.inner = 1;
  }
  dispatch_float(x.dtype, op_name(kind).data(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.as<const T>();
    T* yp = outputs[0].as<T>();
    if (kind == OpKind::kSoftmax)
      softmax_typed<T, SoftMode::kSoftmax>(xp, yp, s, env);
    else if (kind == OpKind::kLogSoftmax)
      softmax_typed<T, SoftMode::kLogSoftmax>(xp, yp, s, env);
    else
      softmax_typed<T, SoftMode::kHardmax>(xp, yp, s, env);
  });
}

namespace {

constexpr KernelEntry kEntries[] = {
    {OpKind::kSoftmax, softmax_kernel},
    {OpKind::kLogSoftmax, softmax_kernel},
    {OpKind::kHardmax, softmax_kernel},
};

}  // namespace

std::span<const KernelEntry> reduce_detail::softmax_kernel_entries() { return kEntries; }

}  // namespace kiln::cpu
