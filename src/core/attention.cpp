#include "core/attention.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/shape_infer.h"

namespace kiln {

namespace {

std::string shp(std::span<const int64_t> s) { return shape_string({s.begin(), s.end()}); }

// Strides of (batch, head, position, element): 4-D [b, h, s, d], 3-D [b, s, h * d].
std::array<int64_t, 4> strides(const AttentionShape& g, int64_t heads, int64_t len, int64_t size) {
  if (g.three_d) return {len * heads * size, size, heads * size, 1};
  return {heads * len * size, len * size, size, 1};
}

// The scale, softcap, causal flag and mask, once the geometry is known.
void finish(AttentionShape& g, const AttentionAttrs& a, std::span<const TensorView> in) {
  const auto bad = [](const std::string& m) { throw Error("Attention: " + m); };
  g.scale = std::isnan(a.scale) ? 1.0f / std::sqrt(static_cast<float>(g.head_size)) : a.scale;
  g.softcap = a.softcap;
  g.causal = a.is_causal == 1;
  const TensorView& q = in[0];
  if (in.size() > 3 && in[3].exists) {
    const TensorView& m = in[3];
    g.has_mask = true;
    g.mask_bool = m.dtype == DataType::kBool;
    if (!g.mask_bool && m.dtype != q.dtype)
      bad("the mask must be bool or Q's element type (" + std::string(dtype_name(q.dtype)) + "), got " +
          std::string(dtype_name(m.dtype)));
    if (m.rank() < 1 || m.rank() > 4) bad("the mask must have 1 to 4 dimensions, got " + shp(m.shape));
    std::array<int64_t, 4> full{g.batch, g.q_heads, g.q_len, g.kv_len};
    if (a.mask_period > 0) {
      if (m.rank() != 4 || m.shape[0] != a.mask_period || g.batch % a.mask_period != 0)
        bad("with mask_period " + std::to_string(a.mask_period) + " the mask must be 4-D with that many entries, " +
            "which divide the batch " + std::to_string(g.batch) + ", got " + shp(m.shape));
      full[0] = a.mask_period;
      g.mask_period = a.mask_period;
    }
    const std::optional<std::array<int64_t, 4>> strides = attention_mask_strides(m.shape, full);
    if (!strides)
      bad("the mask " + shp(m.shape) + " does not broadcast to [batch, q_heads, q_len, kv_len] " + shp(full));
    g.mask_stride = *strides;
  } else if (a.mask_period != 0) {
    bad("mask_period without a mask");
  }
}

// packed_qkv: input 0 [batch, len, (q_heads + 2 kv_heads) * head_size] holds Q, K and V.
AttentionShape packed_shape(const AttentionAttrs& a, std::span<const TensorView> in) {
  const auto bad = [](const std::string& m) { throw Error("Attention: " + m); };
  const TensorView& p = in[0];
  // The op keeps its three inputs: K and V name the packed tensor again (or are absent); only
  // input 0 is read.
  for (size_t i = 1; i < 3 && i < in.size(); ++i)
    if (in[i].exists && (!std::ranges::equal(in[i].shape, p.shape) || in[i].dtype != p.dtype))
      bad("with packed_qkv, input 0 holds Q, K and V; inputs 1 and 2 must be input 0 again");
  if (p.rank() != 3) bad("with packed_qkv, input 0 must be 3-D [batch, sequence, hidden], got " + shp(p.shape));
  if (a.q_num_heads < 1 || a.kv_num_heads < 1 || a.q_num_heads % a.kv_num_heads)
    bad("packed_qkv needs q_num_heads a multiple of kv_num_heads, both at least 1");
  const int64_t parts = a.q_num_heads + 2 * a.kv_num_heads;
  if (p.shape[2] < parts || p.shape[2] % parts)
    bad("the packed hidden size " + std::to_string(p.shape[2]) +
        " does not divide into q_num_heads + 2 kv_num_heads = " + std::to_string(parts) + " heads");
  AttentionShape g;
  g.three_d = g.packed = true;
  g.batch = p.shape[0];
  g.q_heads = a.q_num_heads;
  g.kv_heads = a.kv_num_heads;
  g.q_len = g.kv_len = p.shape[1];
  g.head_size = g.v_head_size = p.shape[2] / parts;
  const int64_t row = p.shape[2], d = g.head_size;
  g.q_stride = g.k_stride = g.v_stride = {g.q_len * row, d, row, 1};
  g.y_stride = strides(g, g.q_heads, g.q_len, d);
  g.k_offset = g.q_heads * d;
  g.v_offset = (g.q_heads + g.kv_heads) * d;
  finish(g, a, in);
  return g;
}

}  // namespace

std::optional<std::array<int64_t, 4>> attention_mask_strides(std::span<const int64_t> mask,
                                                             std::span<const int64_t, 4> scores) {
  if (mask.size() > 4) return std::nullopt;
  std::array<int64_t, 4> stride{};
  int64_t st = 1;
  for (size_t i = 0; i < mask.size(); ++i) {
    const size_t d = 3 - i;
    const int64_t n = mask[mask.size() - 1 - i];
    if (n != 1 && n != scores[d]) return std::nullopt;
    stride[d] = n == 1 ? 0 : st;
    st *= n;
  }
  return stride;
}

bool attention_packs(const AttentionAttrs& a, int64_t wq, int64_t wk, int64_t wv) {
  return a.q_num_heads >= 1 && a.kv_num_heads >= 1 && wk == wv && wq * a.kv_num_heads == wk * a.q_num_heads;
}

AttentionShape attention_shape(const AttentionAttrs& a, std::span<const TensorView> in) {
  const auto bad = [](const std::string& m) { throw Error("Attention: " + m); };
  if (in.empty()) bad("takes Q, K and V");
  const DataType t = in[0].dtype;
  if (t != DataType::kFloat32 && t != DataType::kFloat16 && t != DataType::kBFloat16 && t != DataType::kFloat64)
    bad("Q must be float32, float16, bfloat16 or float64, got " + std::string(dtype_name(t)));
  if (a.qk_matmul_output_mode != 0) bad("qk_matmul_output_mode other than 0 is not supported");
  if (a.is_causal != 0 && a.is_causal != 1) bad("is_causal must be 0 or 1");
  if (!(a.softcap >= 0.0f)) bad("softcap must be at least 0");
  if (a.packed_qkv != 0 && a.packed_qkv != 1) bad("packed_qkv must be 0 or 1");
  if (a.mask_period < 0) bad("mask_period must be at least 0");
  if (a.packed_qkv) return packed_shape(a, in);
  if (in.size() < 3 || !in[1].exists || !in[2].exists) bad("takes Q, K and V");
  const TensorView &q = in[0], &k = in[1], &v = in[2];
  if (k.dtype != q.dtype || v.dtype != q.dtype) bad("K and V must have Q's element type");
  AttentionShape g;
  if (q.rank() != k.rank() || q.rank() != v.rank() || (q.rank() != 3 && q.rank() != 4))
    bad("Q, K and V must all be 4-D [batch, heads, sequence, head size] or all 3-D [batch, sequence, hidden], got " +
        shp(q.shape) + ", " + shp(k.shape) + ", " + shp(v.shape));
  g.three_d = q.rank() == 3;
  g.batch = q.shape[0];
  if (k.shape[0] != g.batch || v.shape[0] != g.batch) bad("Q, K and V must have the same batch");
  if (g.three_d) {
    if (a.q_num_heads < 1 || a.kv_num_heads < 1) bad("3-D inputs need the attributes q_num_heads and kv_num_heads");
    g.q_heads = a.q_num_heads;
    g.kv_heads = a.kv_num_heads;
    g.q_len = q.shape[1];
    g.kv_len = k.shape[1];
    if (q.shape[2] % g.q_heads || k.shape[2] % g.kv_heads || v.shape[2] % g.kv_heads)
      bad("the hidden sizes " + shp(q.shape) + ", " + shp(k.shape) + ", " + shp(v.shape) +
          " do not divide into q_num_heads " + std::to_string(g.q_heads) + " and kv_num_heads " +
          std::to_string(g.kv_heads));
    g.head_size = q.shape[2] / g.q_heads;
    if (k.shape[2] / g.kv_heads != g.head_size) bad("Q's and K's head sizes differ");
    g.v_head_size = v.shape[2] / g.kv_heads;
    if (v.shape[1] != g.kv_len) bad("K and V must have the same sequence length");
  } else {
    g.q_heads = q.shape[1];
    g.kv_heads = k.shape[1];
    g.q_len = q.shape[2];
    g.kv_len = k.shape[2];
    g.head_size = q.shape[3];
    if (k.shape[3] != g.head_size) bad("Q's and K's head sizes differ: " + shp(q.shape) + " and " + shp(k.shape));
    if (v.shape[1] != g.kv_heads || v.shape[2] != g.kv_len)
      bad("V " + shp(v.shape) + " must have K's heads and sequence length " + shp(k.shape));
    g.v_head_size = v.shape[3];
  }
  if (g.kv_heads < 1 || g.q_heads % g.kv_heads)
    bad("the query heads (" + std::to_string(g.q_heads) + ") must be a multiple of the key/value heads (" +
        std::to_string(g.kv_heads) + ")");
  if (g.head_size < 1 || g.v_head_size < 1) bad("head sizes must be at least 1");
  g.q_stride = strides(g, g.q_heads, g.q_len, g.head_size);
  g.k_stride = strides(g, g.kv_heads, g.kv_len, g.head_size);
  g.v_stride = strides(g, g.kv_heads, g.kv_len, g.v_head_size);
  g.y_stride = strides(g, g.q_heads, g.q_len, g.v_head_size);
  finish(g, a, in);
  return g;
}

}  // namespace kiln
