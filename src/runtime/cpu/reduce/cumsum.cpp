// CPU kernel of CumSum, along one axis: the input is viewed as [outer, len, inner] around the axis,
// and a block of up to kBlock neighbouring lines is summed together so the input is read in
// contiguous rows.
#include <algorithm>
#include <array>
#include <type_traits>

#include "runtime/cpu/reduce/reduce_internal.h"

namespace kiln::cpu {

namespace {

using namespace reduce_detail;

constexpr int64_t kBlock = 256;

}  // namespace

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

namespace {

constexpr KernelEntry kEntries[] = {
    {OpKind::kCumSum, cumsum_kernel},
};

}  // namespace

std::span<const KernelEntry> reduce_detail::cumsum_kernel_entries() { return kEntries; }

}  // namespace kiln::cpu
