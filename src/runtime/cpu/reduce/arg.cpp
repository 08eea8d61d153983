// CPU kernels of ArgMax and ArgMin.
#include <algorithm>
#include <array>

#include "runtime/cpu/reduce/reduce_internal.h"

namespace kiln::cpu {

namespace {

using namespace reduce_detail;

// ---- ArgMax / ArgMin -------------------------------------------------------------------------
// numpy semantics for NaN: a NaN is the extreme (the first one, or the last with select_last_index).
template <bool kMax, bool kLast, class C>
bool better(C v, C best) {
  bool vn = v != v, bn = best != best;
  if (bn) return kLast && vn;
  if (vn) return true;
  if constexpr (kLast)
    return kMax ? v >= best : v <= best;
  else
    return kMax ? v > best : v < best;
}

template <class T, bool kMax, bool kLast>
void arg_extreme(const T* x, int64_t* y, AxisSplit s, KernelEnv& env) {
  using C = ComputeType<T>;
  if (s.len == 0) return;  // inference made the output empty
  if (s.inner == 1) {
    parallel_for(env, s.outer, s.len, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* row = x + o * s.len;
        C best = static_cast<C>(row[0]);
        int64_t bi = 0;
        for (int64_t i = 1; i < s.len; ++i) {
          C v = static_cast<C>(row[i]);
          if (better<kMax, kLast>(v, best)) best = v, bi = i;
        }
        y[o] = bi;
      }
    });
    return;
  }
  constexpr int64_t kBlock = 256;
  const int64_t blocks = (s.inner + kBlock - 1) / kBlock;
  parallel_for(env, s.outer * blocks, s.len * kBlock, [&](int64_t b, int64_t e) {
    std::array<C, kBlock> best;
    for (int64_t t = b; t < e; ++t) {
      int64_t o = t / blocks, c0 = (t % blocks) * kBlock, len = std::min(kBlock, s.inner - c0);
      const T* base = x + o * s.len * s.inner + c0;
      int64_t* yo = y + o * s.inner + c0;
      for (int64_t j = 0; j < len; ++j) best[j] = static_cast<C>(base[j]), yo[j] = 0;
      for (int64_t i = 1; i < s.len; ++i) {
        const T* row = base + i * s.inner;
        for (int64_t j = 0; j < len; ++j) {
          C v = static_cast<C>(row[j]);
          if (better<kMax, kLast>(v, best[j])) best[j] = v, yo[j] = i;
        }
      }
    }
  });
}

void arg_reduce_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs,
                       std::span<const TensorView> outputs, KernelEnv& env) {
  const auto& a = attrs_as<ArgReduceAttrs>(attrs);
  const TensorView& x = inputs[0];
  AxisSplit s = split_at(x.shape, normalize_axis(a.axis, static_cast<int64_t>(x.rank())));
  int64_t* y = outputs[0].as<int64_t>();
  bool is_max = kind == OpKind::kArgMax;
  dispatch_numeric(x.dtype, op_name(kind).data(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.as<const T>();
    if (is_max) {
      a.select_last_index ? arg_extreme<T, true, true>(xp, y, s, env) : arg_extreme<T, true, false>(xp, y, s, env);
    } else {
      a.select_last_index ? arg_extreme<T, false, true>(xp, y, s, env) : arg_extreme<T, false, false>(xp, y, s, env);
    }
  });
}

constexpr KernelEntry kEntries[] = {
    {OpKind::kArgMax, arg_reduce_kernel},
    {OpKind::kArgMin, arg_reduce_kernel},
};

}  // namespace

std::span<const KernelEntry> reduce_detail::arg_kernel_entries() { return kEntries; }

}  // namespace kiln::cpu
