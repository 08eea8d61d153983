// CPU kernels of Softmax / LogSoftmax / Hardmax, CumSum and TopK: ops that work along one axis.
// Every one views its input as [outer, len, inner] around the axis; when inner > 1 a block of up to
// kBlock neighbouring lines is processed together so the input is read in contiguous rows.
#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "runtime/cpu/ops/reduce_common.h"

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

// ---- TopK ----------------------------------------------------------------------------------
// Order: by value (NaN above every number, as numpy sorts), equal values by lower index first.
template <class C, bool kLargest>
bool topk_before(C vi, C vj, int64_t i, int64_t j) {
  bool ni = vi != vi, nj = vj != vj;
  if (ni || nj) {
    if (ni && nj) return i < j;
    return kLargest ? ni : nj;
  }
  if (vi != vj) return kLargest ? vi > vj : vi < vj;
  return i < j;
}

template <class T, bool kLargest>
void topk_typed(const T* x, T* vals, int64_t* idx, AxisSplit s, int64_t k, KernelEnv& env) {
  using C = ComputeType<T>;
  if (k == 0) return;
  parallel_for(env, s.outer * s.inner, s.len * 4, [&](int64_t b, int64_t e) {
    std::vector<C> v(static_cast<size_t>(s.len));
    std::vector<int64_t> order(static_cast<size_t>(s.len));
    for (int64_t line = b; line < e; ++line) {
      int64_t o = line / s.inner, in = line % s.inner;
      const T* xl = x + o * s.len * s.inner + in;
      for (int64_t i = 0; i < s.len; ++i) v[i] = static_cast<C>(xl[i * s.inner]);
      std::iota(order.begin(), order.end(), int64_t{0});
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int64_t i, int64_t j) { return topk_before<C, kLargest>(v[i], v[j], i, j); });
      int64_t base = o * k * s.inner + in;
      for (int64_t r = 0; r < k; ++r) {
        vals[base + r * s.inner] = xl[order[r] * s.inner];
        idx[base + r * s.inner] = order[r];
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

// Running sums in double (floats) or modulo 2^64 (integers, i.e. the type's wrapping arithmetic).
void cumsum_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs,
                   std::span<const TensorView> outputs, KernelEnv& env) {
  const auto& a = attrs_as<CumSumAttrs>(attrs);
  const TensorView& x = inputs[0];
  AxisSplit s = split_at(x.shape, normalize_axis(inputs[1].to_int64()[0], static_cast<int64_t>(x.rank())));
  dispatch_numeric(x.dtype, "CumSum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = std::conditional_t<kIsFloat<T>, double, uint64_t>;
    const T* xp = x.as<const T>();
    T* yp = outputs[0].as<T>();
    const int64_t blocks = (s.inner + kBlock - 1) / kBlock;
    const bool exclusive = a.exclusive != 0, reverse = a.reverse != 0;
    parallel_for(env, s.outer * blocks, s.len * std::min(kBlock, s.inner), [&](int64_t b, int64_t e) {
      std::array<Acc, kBlock> acc;
      for (int64_t t = b; t < e; ++t) {
        int64_t o = t / blocks, c0 = (t % blocks) * kBlock, n = std::min(kBlock, s.inner - c0);
        std::fill_n(acc.begin(), n, Acc{0});
        for (int64_t step = 0; step < s.len; ++step) {
          int64_t i = reverse ? s.len - 1 - step : step;
          int64_t off = (o * s.len + i) * s.inner + c0;
          for (int64_t j = 0; j < n; ++j) {
            Acc v;
            if constexpr (kIsFloat<T>)
              v = to_double(xp[off + j]);
            else
              v = static_cast<uint64_t>(
                  static_cast<std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>(xp[off + j]));
            if (!exclusive) acc[j] += v;
            if constexpr (kIsFloat<T>)
              yp[off + j] = from_double<T>(acc[j]);
            else
              yp[off + j] = static_cast<T>(acc[j]);
            if (exclusive) acc[j] += v;
          }
        }
      }
    });
  });
}

void topk_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs,
                 std::span<const TensorView> outputs, KernelEnv& env) {
  const auto& a = attrs_as<TopKAttrs>(attrs);
  const TensorView& x = inputs[0];
  AxisSplit s = split_at(x.shape, normalize_axis(a.axis, static_cast<int64_t>(x.rank())));
  int64_t k = inputs[1].to_int64()[0];
  if (k < 0 || k > s.len) throw Error("TopK: K is out of range");
  dispatch_numeric(x.dtype, "TopK", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.as<const T>();
    T* vp = outputs[0].as<T>();
    int64_t* ip = outputs[1].as<int64_t>();
    if (a.largest)
      topk_typed<T, true>(xp, vp, ip, s, k, env);
    else
      topk_typed<T, false>(xp, vp, ip, s, k, env);
  });
}

}  // namespace kiln::cpu
