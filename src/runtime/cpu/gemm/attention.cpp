// Attention's CPU kernel (core/attention.h): for each query row, the scores against every key,
// softcap, mask and causal limit, a softmax and the weighted sum of the values. A row whose keys are
// all masked out gives zeros. float64 (the op cases' reference) loops row by row in double; the
// float types compute in float with the two products of each (batch, head) as sgemm calls (the
// half types widened first), the scores of one head at a time in a buffer.
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

template <class Acc, class T>
void attention_rows(const AttentionShape& g, const T* q, const T* k, const T* v, const void* mask, T* y, int64_t r0,
                    int64_t r1) {
  const int64_t group = g.q_heads / g.kv_heads;
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  std::vector<Acc> s(static_cast<size_t>(g.kv_len)), acc(static_cast<size_t>(g.v_head_size));
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t i = r % g.q_len, h = (r / g.q_len) % g.q_heads, b = r / (g.q_len * g.q_heads), kh = h / group;
    const T* qr = q + b * g.q_stride[0] + h * g.q_stride[1] + i * g.q_stride[2];
    Acc m = neg_inf;
    for (int64_t j = 0; j < g.kv_len; ++j) {
      const T* kr = k + b * g.k_stride[0] + kh * g.k_stride[1] + j * g.k_stride[2];
      Acc dot = 0;
      for (int64_t d = 0; d < g.head_size; ++d) dot += static_cast<Acc>(qr[d]) * static_cast<Acc>(kr[d]);
      Acc x = dot * static_cast<Acc>(g.scale);
      if (g.softcap > 0) x = static_cast<Acc>(g.softcap) * std::tanh(x / static_cast<Acc>(g.softcap));
      if (g.has_mask) {
        const int64_t at = b * g.mask_stride[0] + h * g.mask_stride[1] + i * g.mask_stride[2] + j * g.mask_stride[3];
        if (g.mask_bool)
          x = static_cast<const bool*>(mask)[at] ? x : neg_inf;
        else
          x += static_cast<Acc>(static_cast<const T*>(mask)[at]);
      }
      if (g.causal && j > i) x = neg_inf;
      s[static_cast<size_t>(j)] = x;
      m = std::max(m, x);
    }
    std::fill(acc.begin(), acc.end(), Acc(0));
    Acc sum = 0;
    if (m != neg_inf)
      for (int64_t j = 0; j < g.kv_len; ++j) {
        const Acc p = std::exp(s[static_cast<size_t>(j)] - m);
        if (p == 0) continue;
        sum += p;
        const T* vr = v + b * g.v_stride[0] + kh * g.v_stride[1] + j * g.v_stride[2];
        for (int64_t d = 0; d < g.v_head_size; ++d) acc[static_cast<size_t>(d)] += p * static_cast<Acc>(vr[d]);
      }
    T* yr = y + b * g.y_stride[0] + h * g.y_stride[1] + i * g.y_stride[2];
    for (int64_t d = 0; d < g.v_head_size; ++d)
      yr[d] = static_cast<T>(sum > 0 ? acc[static_cast<size_t>(d)] / sum : Acc(0));
  }
}

// Scores of query row i (n keys, already scaled) -> probabilities in place; false if all masked.
template <class M>
bool softmax_row(const AttentionShape& g, float* s, const M* mask, int64_t b, int64_t h, int64_t i) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float m = neg_inf;
  for (int64_t j = 0; j < g.kv_len; ++j) {
    float x = s[j];
    if (g.softcap > 0) x = g.softcap * std::tanh(x / g.softcap);
    if (mask) {
      const M mv = mask[b * g.mask_stride[0] + h * g.mask_stride[1] + i * g.mask_stride[2] + j * g.mask_stride[3]];
      if constexpr (std::is_same_v<M, bool>)
        x = mv ? x : neg_inf;
      else
        x += static_cast<float>(mv);
    }
    if (g.causal && j > i) x = neg_inf;
    s[j] = x;
    m = std::max(m, x);
  }
  if (m == neg_inf) {
    std::fill(s, s + g.kv_len, 0.0f);
    return false;
  }
  float sum = 0;
  for (int64_t j = 0; j < g.kv_len; ++j) sum += s[j] = std::exp(s[j] - m);
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < g.kv_len; ++j) s[j] *= inv;
  return true;
}

// float32 data (the half types widened): per (batch, head), S = scale Q Kt, softmax, Y = P V.
template <class M>
void attention_f32(const AttentionShape& g, const float* q, const float* k, const float* v, const M* mask, float* y,
                   ThreadPool* pool) {
  const int64_t heads = g.batch * g.q_heads, group = g.q_heads / g.kv_heads;
  auto head = [&](int64_t bh, std::vector<float>& s, ThreadPool* inner) {
    const int64_t b = bh / g.q_heads, h = bh % g.q_heads, kh = h / group;
    const float* qb = q + b * g.q_stride[0] + h * g.q_stride[1];
    const float* kb = k + b * g.k_stride[0] + kh * g.k_stride[1];
    const float* vb = v + b * g.v_stride[0] + kh * g.v_stride[1];
    float* yb = y + b * g.y_stride[0] + h * g.y_stride[1];
    s.resize(static_cast<size_t>(g.q_len * g.kv_len));
    sgemm(false, true, g.q_len, g.kv_len, g.head_size, g.scale, qb, g.q_stride[2], kb, g.k_stride[2], 0.0f, s.data(),
          g.kv_len, inner);
    for (int64_t i = 0; i < g.q_len; ++i) softmax_row(g, s.data() + i * g.kv_len, mask, b, h, i);
    sgemm(false, false, g.q_len, g.v_head_size, g.kv_len, 1.0f, s.data(), g.kv_len, vb, g.v_stride[2], 0.0f, yb,
          g.y_stride[2], inner);
  };
  const int threads = pool ? pool->size() : 1;
  if (threads > 1 && heads >= threads) {
    pool->parallel_for(heads, [&](int64_t h0, int64_t h1) {
      std::vector<float> s;
      for (int64_t bh = h0; bh < h1; ++bh) head(bh, s, nullptr);
    });
  } else {
    std::vector<float> s;
    for (int64_t bh = 0; bh < heads; ++bh) head(bh, s, pool);
  }
}

}  // namespace

void attention_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                      KernelEnv& env) {
  const AttentionShape g = attention_shape(std::get<AttentionAttrs>(attrs), in);
  const int64_t rows = g.batch * g.q_heads * g.q_len;
  const void* mask = g.has_mask ? in[3].data : nullptr;
  const int64_t work = g.kv_len * (g.head_size + g.v_head_size);
  dispatch_float(in[0].dtype, "Attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, double>) {
      auto run = [&](int64_t r0, int64_t r1) {
        attention_rows<double>(g, in[0].as<const T>(), in[1].as<const T>(), in[2].as<const T>(), mask, out[0].as<T>(),
                               r0, r1);
      };
      if (!env.pool || env.pool->size() == 1 || rows < 2 || rows * work < (1 << 15))
        run(0, rows);
      else
        env.pool->parallel_for(rows, run);
    } else {
      auto widen = [](const TensorView& t) -> std::vector<float> {
        if constexpr (std::is_same_v<T, float>) return {};
        std::vector<float> w(static_cast<size_t>(t.numel()));
        for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(t.as<const T>()[i]);
        return w;
      };
      const std::vector<float> qw = widen(in[0]), kw = widen(in[1]), vw = widen(in[2]);
      std::vector<float> yw(std::is_same_v<T, float> ? 0 : static_cast<size_t>(out[0].numel()));
      auto data = [](const std::vector<float>& w, const TensorView& t) {
        return w.empty() ? t.as<const float>() : w.data();
      };
      float* y = yw.empty() ? out[0].as<float>() : yw.data();
      if (!g.has_mask)
        attention_f32<float>(g, data(qw, in[0]), data(kw, in[1]), data(vw, in[2]), nullptr, y, env.pool);
      else if (g.mask_bool)
        attention_f32(g, data(qw, in[0]), data(kw, in[1]), data(vw, in[2]), in[3].as<const bool>(), y, env.pool);
      else
        attention_f32(g, data(qw, in[0]), data(kw, in[1]), data(vw, in[2]), in[3].as<const T>(), y, env.pool);
      for (size_t i = 0; i < yw.size(); ++i) out[0].as<T>()[i] = T(yw[i]);
    }
  });
}

}  // namespace kiln::cpu::gemm
