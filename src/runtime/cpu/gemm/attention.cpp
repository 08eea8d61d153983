// Attention's CPU kernel (core/attention.h): for each query row, the scores against every key,
// softcap, mask and causal limit, a softmax and the weighted sum of the values. A row whose keys are
// all masked out gives zeros. Per (batch, head) the two products are gemm_t calls (sgemm, or the
// float64 product for float64, the op cases' reference), the scores of one head at a time in a
// buffer; the half types are widened to float first.
#include "core/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "runtime/cpu/gemm.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln::cpu::gemm {

namespace {

// Scores of query row i (kv_len products q.k) -> probabilities in place: scale, softcap, mask,
// causal limit, softmax; a row with every key masked becomes zeros. Each stage is its own loop over
// the row (the scaling and the mask vectorize), with the same operations per element in the same
// order as one loop would do them.
template <class F, class M>
void softmax_row(const AttentionShape& g, F* __restrict s, const M* mask, int64_t b, int64_t h, int64_t i) {
  const F neg_inf = -std::numeric_limits<F>::infinity();
  const int64_t n = g.kv_len;
  const F scale = static_cast<F>(g.scale);
  for (int64_t j = 0; j < n; ++j) s[j] *= scale;
  if (g.softcap > 0) {
    const F cap = static_cast<F>(g.softcap);
    for (int64_t j = 0; j < n; ++j) s[j] = cap * std::tanh(s[j] / cap);
  }
  if (mask) {
    const M* __restrict row = mask + g.mask_batch(b) * g.mask_stride[0] + h * g.mask_stride[1] + i * g.mask_stride[2];
    const int64_t step = g.mask_stride[3];
    if constexpr (std::is_same_v<M, bool>) {
      for (int64_t j = 0; j < n; ++j) s[j] = row[j * step] ? s[j] : neg_inf;
    } else if (step == 1) {
      for (int64_t j = 0; j < n; ++j) s[j] += static_cast<F>(row[j]);
    } else {
      for (int64_t j = 0; j < n; ++j) s[j] += static_cast<F>(row[j * step]);
    }
  }
  if (g.causal)
    for (int64_t j = i + 1; j < n; ++j) s[j] = neg_inf;
  F m = neg_inf;
  for (int64_t j = 0; j < n; ++j) m = std::max(m, s[j]);
  if (m == neg_inf) {
    std::fill(s, s + n, F(0));
    return;
  }
  F sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += s[j] = std::exp(s[j] - m);
  const F inv = F(1) / sum;
  for (int64_t j = 0; j < n; ++j) s[j] *= inv;
}

// Per (batch, head): S = Q Kt, softmax, Y = P V, in F (float, or double for float64).
template <class F, class M>
void attention_heads(const AttentionShape& g, const F* q, const F* k, const F* v, const M* mask, F* y,
                     ThreadPool* pool) {
  const int64_t heads = g.batch * g.q_heads, group = g.q_heads / g.kv_heads;
  auto head = [&](int64_t bh, std::vector<F>& s, ThreadPool* inner) {
    const int64_t b = bh / g.q_heads, h = bh % g.q_heads, kh = h / group;
    const F* qb = q + b * g.q_stride[0] + h * g.q_stride[1];
    const F* kb = k + b * g.k_stride[0] + kh * g.k_stride[1];
    const F* vb = v + b * g.v_stride[0] + kh * g.v_stride[1];
    F* yb = y + b * g.y_stride[0] + h * g.y_stride[1];
    s.resize(static_cast<size_t>(g.q_len * g.kv_len));
    gemm_t<F>(false, true, g.q_len, g.kv_len, g.head_size, qb, g.q_stride[2], kb, g.k_stride[2], s.data(), g.kv_len,
              inner);
    for (int64_t i = 0; i < g.q_len; ++i) softmax_row(g, s.data() + i * g.kv_len, mask, b, h, i);
    gemm_t<F>(false, false, g.q_len, g.v_head_size, g.kv_len, s.data(), g.kv_len, vb, g.v_stride[2], yb, g.y_stride[2],
              inner);
  };
  const int threads = pool ? pool->team() : 1;
  if (threads > 1 && heads >= threads) {
    pool->parallel_for(heads, [&](int64_t h0, int64_t h1) {
      std::vector<F> s;
      for (int64_t bh = h0; bh < h1; ++bh) head(bh, s, nullptr);
    });
  } else {
    std::vector<F> s;
    for (int64_t bh = 0; bh < heads; ++bh) head(bh, s, pool);
  }
}

}  // namespace

void attention_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                      KernelEnv& env) {
  const AttentionShape g = attention_shape(std::get<AttentionAttrs>(attrs), in);
  dispatch_float(in[0].dtype, "Attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using F = std::conditional_t<std::is_same_v<T, double>, double, float>;
    constexpr bool widened = !std::is_same_v<T, F>;
    auto widen = [](const TensorView& t) {
      std::vector<F> w;
      if constexpr (widened) {
        w.resize(static_cast<size_t>(t.numel()));
        for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<F>(t.as<const T>()[i]);
      }
      return w;
    };
    // Packed: Q, K and V are all read from input 0 (widened once).
    const std::vector<F> qw = widen(in[0]), kw = g.packed ? std::vector<F>{} : widen(in[1]),
                         vw = g.packed ? std::vector<F>{} : widen(in[2]);
    std::vector<F> yw(widened ? static_cast<size_t>(out[0].numel()) : 0);
    auto data = [&](size_t i) {
      const std::vector<F>& w = i == 0 ? qw : i == 1 ? kw : vw;
      return widened ? w.data() : in[i].as<const F>();
    };
    const F *q = data(0) + g.q_offset, *k = data(g.k_input()) + g.k_offset, *v = data(g.v_input()) + g.v_offset;
    F* y = widened ? yw.data() : out[0].as<F>();
    if (!g.has_mask)
      attention_heads<F, F>(g, q, k, v, nullptr, y, env.pool);
    else if (g.mask_bool)
      attention_heads(g, q, k, v, in[3].as<const bool>(), y, env.pool);
    else
      attention_heads(g, q, k, v, in[3].as<const T>(), y, env.pool);
    for (size_t i = 0; i < yw.size(); ++i) out[0].as<T>()[i] = T(yw[i]);
  });
}

}  // namespace kiln::cpu::gemm
