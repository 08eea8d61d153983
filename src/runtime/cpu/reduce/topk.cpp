// CPU kernel of TopK, along one axis: the input is viewed as [outer, len, inner] around the axis,
// and every line is partially sorted.
#include <algorithm>
#include <numeric>
#include <vector>

#include "runtime/cpu/reduce/reduce_internal.h"

namespace kiln::cpu {

namespace {

using namespace reduce_detail;

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

namespace {

constexpr KernelEntry kEntries[] = {
    {OpKind::kTopK, topk_kernel},
};

}  // namespace

std::span<const KernelEntry> reduce_detail::topk_kernel_entries() { return kEntries; }

}  // namespace kiln::cpu
