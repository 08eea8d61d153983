// fuse-attention: scaled dot-product attention as exporters spell it out,
//   s = MatMul(q, kt)      [s = Div(s, c) | Mul(s, c)]     [s = Add(s, mask)]
//   p = Softmax(s, axis = -1)                               y = MatMul(p, v)
// with q [batch, heads, q_len, head_size], kt [batch, kv_heads, head_size, kv_len] and v
// [batch, kv_heads, kv_len, v_head_size], becomes y = Attention(q, k, v[, mask]) (ONNX opset 23,
// core/attention.h) with scale 1/c or c. PyTorch's export of scaled_dot_product_attention scales q
// and kt by sqrt(scale) each: a Mul of q or kt by a constant scalar read only there joins the scale.
// k is kt with its last two axes swapped: the Transpose that made kt gets the composed permutation
// (and goes when that is the identity), else the first MatMul's node becomes that Transpose.
// The scores and probabilities never reach memory, and a causal or padding mask is read per tile.
// GPT-2's masked_fill(s, cond, -inf) is a Where over a constant condition once the shapes are bound:
// the causal triangle becomes is_causal, another pattern a bool mask.
// Guards (nothing changes): rank other than 4; types other than float32, float16 and bfloat16, or
// differing; a Softmax over another axis; a scale or q/kt factor that is not a constant scalar, or
// zero; a mask that does not broadcast to the scores' shape without enlarging them; any value inside
// the pattern read elsewhere or a graph output. The node is named after the nodes it replaces.
// Then the 3-D form (to_3d_at): where q, k and v are heads split from 3-D projections by
// Reshape + Transpose and y is merged back the same way, the Attention reads and writes the 3-D
// tensors and the four Transposes go; where those are the three outputs of one Split of a packed
// projection (GPT-2), the Attention reads the projection in place (packed_qkv) and the Split goes
// (packed_from_split_at). fuse-siblings packs three separate projections (BERT) the same way.
// nn.MultiheadAttention's export (one packed projection, the heads gathered out of it) gets the
// same form, as do Swin's batch-first heads; Swin's shifted-window mask, added through a 5-D view of
// the scores, joins the relative position bias as one constant mask first (attention_heads.cpp),
// or at batches over 1 the bias joins the 5-D mask, read here as a mask that repeats along the
// batch (periodic_mask: Kiln's mask_period).
// GPU targets fuse only where the tensor-core kernel will run (gpu_runs_fast).
// Position: after merge-transpose-reshape (the transposes around q, k and v are merged) and before
// the folds that rewrite Mul and Div by constants.
#include <array>
#include <cmath>
#include <optional>
#include <span>

#include "core/attention.h"
#include "passes/attention_heads.h"
#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {

namespace {

bool attention_type(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat16 || t == DataType::kBFloat16;
}

// v = Mul(x, c) (either order) with c a constant scalar and v read only by its one reader: x and c.
bool scaled_by_constant(const graph::Graph& g, const GraphFacts& f, graph::ValueId v, graph::ValueId& x, double& c,
                        int& node) {
  const graph::Node* mul = f.producer_of(g, v, OpKind::kMul);
  if (!mul || !f.only_read_once(g, v)) return false;
  for (size_t s = 0; s < 2; ++s)
    if (scalar_constant(g.value(mul->inputs[1 - s]), c) && g.value(mul->inputs[s]).shape == g.value(v).shape) {
      x = mul->inputs[s];
      node = f.producer[static_cast<size_t>(v)];
      return true;
    }
  return false;
}

// s = Where(cond, fill, x) (masked_fill) with cond a constant bool that broadcasts to x's shape
// [b, h, sq, skv] without enlarging it and fill a constant scalar of at most -10000: x with the
// positions where cond holds masked out. `keep` (true: attends, right-aligned to x's shape) and
// whether it is exactly the causal triangle (key j <= query i). Refused when a query row keeps no
// key: masked_fill then averages every value, Attention gives zeros.
struct WhereMask {
  graph::ValueId x = graph::kNoValue;
  std::vector<int64_t> shape;
  std::vector<uint8_t> keep;
  bool causal = false;
};
bool where_mask(const graph::Graph& g, const GraphFacts& f, graph::ValueId s, WhereMask& w) {
  const graph::Node* where = f.producer_of(g, s, OpKind::kWhere);
  if (!where) return false;
  const graph::Value& cond = g.value(where->inputs[0]);
  double fill = 0;
  const std::vector<int64_t>& xs = g.value(s).shape;
  if (!cond.is_constant() || cond.dtype != DataType::kBool || !scalar_constant(g.value(where->inputs[1]), fill) ||
      !(fill <= -10000.0) || g.value(where->inputs[2]).shape != xs || xs.size() != 4)
    return false;
  const std::optional<std::array<int64_t, 4>> strides =
      attention_mask_strides(cond.shape, std::span<const int64_t, 4>(xs));
  if (!strides) return false;
  const std::array<int64_t, 4>& stride = *strides;
  const std::vector<uint8_t>& c = *cond.data;
  w.causal = true;
  // Over the batches and heads the condition varies along (one of each where it broadcasts).
  for (int64_t a = 0; a < (stride[0] ? xs[0] : 1); ++a)
    for (int64_t b = 0; b < (stride[1] ? xs[1] : 1); ++b)
      for (int64_t i = 0; i < xs[2]; ++i) {
        bool any = false;
        for (int64_t j = 0; j < xs[3]; ++j) {
          const bool keep = c[static_cast<size_t>(a * stride[0] + b * stride[1] + i * stride[2] + j * stride[3])] == 0;
          any = any || keep;
          w.causal = w.causal && keep == (j <= i);
        }
        if (!any) return false;
      }
  w.x = where->inputs[2];
  w.shape = cond.shape;
  w.keep.resize(c.size());
  for (size_t k = 0; k < c.size(); ++k) w.keep[k] = c[k] == 0;
  return true;
}

// s = Reshape(Add(Reshape(x) [B, P, h, q, kv], m5)) with x's shape [B * P, h, q, kv] and m5 a
// constant that does not vary along B (Swin's shifted-window mask at batches over 1, the position
// bias folded in by window_mask_at): x, m5, m5's shape as a 4-D mask [P or 1, ...] and its period
// (P where the mask varies along P and B > 1, else 0: it broadcasts). Appends the three nodes to
// `nodes`.
bool periodic_mask(const graph::Graph& g, const GraphFacts& f, graph::ValueId s, graph::ValueId& x,
                   graph::ValueId& m5_value, std::vector<int64_t>& m4, int64_t& period, std::vector<size_t>& nodes) {
  const graph::Node* r4 = f.producer_of(g, s, OpKind::kReshape);
  if (!r4 || !f.only_read_once(g, r4->inputs[0])) return false;
  const graph::Node* add = f.producer_of(g, r4->inputs[0], OpKind::kAdd);
  if (!add) return false;
  const std::vector<int64_t>& x4 = g.value(s).shape;
  const std::vector<int64_t>& x5 = g.value(r4->inputs[0]).shape;
  if (x4.size() != 4 || x5.size() != 5 || x5[0] * x5[1] != x4[0] || x5[2] != x4[1] || x5[3] != x4[2] || x5[4] != x4[3])
    return false;
  for (size_t k = 0; k < 2; ++k) {
    const graph::Value& m = g.value(add->inputs[1 - k]);
    const graph::Node* r5 = f.producer_of(g, add->inputs[k], OpKind::kReshape);
    if (!r5 || !m.is_constant() || m.dtype != g.value(s).dtype || !f.only_read_once(g, add->inputs[k]) ||
        g.value(add->inputs[k]).shape != x5 || g.value(r5->inputs[0]).shape != x4 || m.shape.size() > 5)
      continue;
    // m right-aligned against x5: 1 or x5's along every axis, 1 along the batch B.
    std::vector<int64_t> m5(5 - m.shape.size(), 1);
    m5.insert(m5.end(), m.shape.begin(), m.shape.end());
    bool fits = m5[0] == 1;
    for (size_t d = 1; d < 5; ++d) fits = fits && (m5[d] == 1 || m5[d] == x5[d]);
    if (!fits) continue;
    m4.assign(m5.begin() + 1, m5.end());
    period = m4[0] > 1 && x5[0] > 1 ? m4[0] : 0;
    x = r5->inputs[0];
    m5_value = add->inputs[1 - k];
    for (graph::ValueId v : {s, r4->inputs[0], add->inputs[k]})
      nodes.insert(nodes.begin(), static_cast<size_t>(f.producer[static_cast<size_t>(v)]));
    return true;
  }
  return false;
}

// gpu: the build options of a GPU target (gpu_runs_fast decides), null for the CPU.
bool fuse_at(graph::Graph& g, size_t i, const GraphFacts& f, std::vector<char>& removed, Tally& tally,
             const BuildOptions* gpu) {
  const graph::Node& pv = g.nodes[i];
  if (pv.kind != OpKind::kMatMul) return false;
  const graph::ValueId p = pv.inputs[0], v = pv.inputs[1], y = pv.outputs[0];
  const graph::Node* softmax = f.producer_of(g, p, OpKind::kSoftmax);
  if (!softmax || !f.only_read_once(g, p)) return false;
  const graph::Value &pval = g.value(p), &vval = g.value(v);
  if (pval.shape.size() != 4 || vval.shape.size() != 4 || !pval.shape_static() || !vval.shape_static()) return false;
  const auto& sa = std::get<SoftmaxAttrs>(softmax->attrs);
  if (sa.axis != -1 && sa.axis != 3) return false;
  const DataType t = pval.dtype;
  if (!attention_type(t) || vval.dtype != t || g.value(y).dtype != t) return false;
  std::vector<size_t> nodes{static_cast<size_t>(f.producer[static_cast<size_t>(p)]), i};

  // Backwards from the Softmax: optional Add of a mask, optional Div/Mul by a constant, the MatMul.
  graph::ValueId s = softmax->inputs[0];
  if (!f.only_read_once(g, s)) return false;
  graph::ValueId mask = graph::kNoValue;
  const std::vector<int64_t> scores_shape = g.value(s).shape;
  // A masked_fill by a constant condition: the causal flag, or a bool mask.
  WhereMask where;
  bool causal = false;
  if (where_mask(g, f, s, where)) {
    nodes.insert(nodes.begin(), static_cast<size_t>(f.producer[static_cast<size_t>(s)]));
    s = where.x;
    if (!f.only_read_once(g, s)) return false;
    causal = where.causal;
  }
  int64_t mask_period = 0;
  graph::ValueId mask5 = graph::kNoValue;  // the mask of a 5-D view (periodic_mask), made 4-D at the end
  std::vector<int64_t> mask4_shape;
  if (graph::ValueId x = graph::kNoValue; periodic_mask(g, f, s, x, mask5, mask4_shape, mask_period, nodes)) {
    s = x;
    if (!f.only_read_once(g, s)) return false;
  } else if (const graph::Node* add = f.producer_of(g, s, OpKind::kAdd)) {
    for (size_t k = 0; k < 2 && mask == graph::kNoValue; ++k) {
      // The scores come from the product or its scaling; the other operand is the mask.
      const int inner = f.producer[static_cast<size_t>(add->inputs[k])];
      const OpKind ik = inner >= 0 ? g.nodes[static_cast<size_t>(inner)].kind : OpKind::kIdentity;
      if (ik != OpKind::kMatMul && ik != OpKind::kDiv && ik != OpKind::kMul) continue;
      const graph::Value& m = g.value(add->inputs[1 - k]);
      if (g.value(add->inputs[k]).shape != scores_shape || m.dtype != t ||
          !attention_mask_strides(m.shape, std::span<const int64_t, 4>(scores_shape)))
        continue;
      mask = add->inputs[1 - k];
      nodes.insert(nodes.begin(), static_cast<size_t>(f.producer[static_cast<size_t>(s)]));
      s = add->inputs[k];
      if (!f.only_read_once(g, s)) return false;
    }
  }
  if (where.x != graph::kNoValue && !causal && (mask != graph::kNoValue || mask5 != graph::kNoValue))
    return false;  // two masks
  double scale = 1.0;
  for (OpKind kind : {OpKind::kDiv, OpKind::kMul}) {
    const graph::Node* n = f.producer_of(g, s, kind);
    if (!n) continue;
    double c = 0;
    size_t x = 0;
    if (scalar_constant(g.value(n->inputs[1]), c))
      x = 0;
    else if (kind == OpKind::kMul && scalar_constant(g.value(n->inputs[0]), c))
      x = 1;
    else
      continue;
    if (c == 0 || !std::isfinite(c) || g.value(n->inputs[x]).shape != scores_shape) continue;
    scale = kind == OpKind::kDiv ? 1.0 / c : c;
    nodes.insert(nodes.begin(), static_cast<size_t>(f.producer[static_cast<size_t>(s)]));
    s = n->inputs[x];
    if (!f.only_read_once(g, s)) return false;
    break;
  }
  const graph::Node* qk = f.producer_of(g, s, OpKind::kMatMul);
  if (!qk) return false;
  const size_t qk_index = static_cast<size_t>(f.producer[static_cast<size_t>(s)]);
  nodes.insert(nodes.begin(), qk_index);
  graph::ValueId q = qk->inputs[0], kt = qk->inputs[1];
  // q and kt each scaled by a constant (PyTorch's scaled_dot_product_attention).
  for (graph::ValueId* side : {&q, &kt}) {
    graph::ValueId x = graph::kNoValue;
    double c = 0;
    int node = -1;
    if (scaled_by_constant(g, f, *side, x, c, node) && c != 0 && std::isfinite(c)) {
      scale *= c;
      *side = x;
      nodes.insert(nodes.begin(), static_cast<size_t>(node));
    }
  }
  const graph::Value &qv = g.value(q), &ktv = g.value(kt);
  if (qv.shape.size() != 4 || ktv.shape.size() != 4 || qv.dtype != t || ktv.dtype != t || !qv.shape_static() ||
      !ktv.shape_static())
    return false;
  // q [b, h, sq, d] . kt [b, hk, d, skv]; v [b, hk, skv, dv]; p [b, h, sq, skv].
  const int64_t b = qv.shape[0], h = qv.shape[1], sq = qv.shape[2], d = qv.shape[3];
  const int64_t hk = ktv.shape[1], skv = ktv.shape[3];
  if (ktv.shape[0] != b || ktv.shape[2] != d || vval.shape[0] != b || vval.shape[1] != hk || vval.shape[2] != skv ||
      hk < 1 || scores_shape != std::vector<int64_t>{b, h, sq, skv})
    return false;
  // The MatMuls broadcast one key/value head to every query head; Attention reads it as one group.
  if (hk != h && hk != 1) return false;
  if (gpu && !gpu_runs_fast(t, d, vval.shape[3], *gpu)) return false;

  // k: kt with its last two axes swapped.
  std::vector<int64_t> k_shape{b, hk, skv, d};
  graph::ValueId k = graph::kNoValue;
  const graph::Node* tr = f.producer_of(g, kt, OpKind::kTranspose);
  std::string origin;
  for (size_t n : nodes) origin += (origin.empty() ? "" : " + ") + origin_of(g.nodes[n]);
  auto new_keys = [&] {
    graph::Value kv;
    kv.name = g.unique_name(g.value(kt).name + "_keys");
    kv.dtype = t;
    kv.shape = k_shape;
    kv.has_shape = true;
    return g.add_value(std::move(kv));
  };
  if (tr && f.only_read_once(g, kt)) {
    const size_t tr_index = static_cast<size_t>(f.producer[static_cast<size_t>(kt)]);
    const std::vector<int64_t> perm = resolved_perm(std::get<TransposeAttrs>(tr->attrs), 4);
    const std::vector<int64_t> composed{perm[0], perm[1], perm[3], perm[2]};
    const graph::ValueId x = tr->inputs[0];
    if (composed == std::vector<int64_t>{0, 1, 2, 3}) {
      k = x;
      remove_node(g, tr_index, removed);
    } else {
      k = new_keys();
      graph::Node& tn = g.nodes[tr_index];
      tn.attrs = TransposeAttrs{composed};
      tn.outputs = {k};
    }
    remove_node(g, qk_index, removed);
  } else {
    // The first MatMul's node becomes the Transpose (it comes after kt and before the Attention).
    k = new_keys();
    graph::Node& tn = g.nodes[qk_index];
    tn.kind = OpKind::kTranspose;
    tn.attrs = TransposeAttrs{{0, 1, 3, 2}};
    tn.inputs = {kt};
    tn.outputs = {k};
  }
  for (size_t n : nodes)
    if (n != i && n != qk_index) remove_node(g, n, removed);
  if (where.x != graph::kNoValue && !causal)
    mask = g.add_constant(g.unique_name(g.nodes[i].name + "_keep"), DataType::kBool, where.shape, where.keep);
  if (mask5 != graph::kNoValue)  // the same bytes without the leading 1
    mask = g.add_constant(g.unique_name(g.value(mask5).name + "_4d"), t, mask4_shape, *g.value(mask5).data);
  graph::Node& att = g.nodes[i];
  AttentionAttrs a;
  a.scale = static_cast<float>(scale);
  a.is_causal = causal ? 1 : 0;
  a.mask_period = mask_period;
  att.kind = OpKind::kAttention;
  att.attrs = a;
  att.inputs = {q, k, v};
  if (mask != graph::kNoValue) att.inputs.push_back(mask);
  att.outputs = {y};
  att.origin = origin;
  tally.add("Attention");
  return true;
}

// x3 [b, s, heads * d] when v4 = Transpose(Reshape(x3) [b, s, heads, d], perm 0 2 1 3), the head
// split of a projection's output as exporters write it, each step read only there; appends the two
// nodes to `nodes`.
bool split_heads_of(const graph::Graph& g, const GraphFacts& f, graph::ValueId v4, graph::ValueId& x3,
                    std::vector<size_t>& nodes) {
  const graph::Node* tr = f.producer_of(g, v4, OpKind::kTranspose);
  if (!tr || !f.only_read_once(g, v4) ||
      resolved_perm(std::get<TransposeAttrs>(tr->attrs), 4) != std::vector<int64_t>{0, 2, 1, 3})
    return false;
  const graph::ValueId x4 = tr->inputs[0];
  const graph::Node* rs = f.producer_of(g, x4, OpKind::kReshape);
  if (!rs || !f.only_read_once(g, x4)) return false;
  const std::vector<int64_t>&s4 = g.value(x4).shape, &s3 = g.value(rs->inputs[0]).shape;
  if (s4.size() != 4 || s3 != std::vector<int64_t>{s4[0], s4[1], s4[2] * s4[3]}) return false;
  x3 = rs->inputs[0];
  nodes.push_back(static_cast<size_t>(f.producer[static_cast<size_t>(v4)]));
  nodes.push_back(static_cast<size_t>(f.producer[static_cast<size_t>(x4)]));
  return true;
}

// An Attention over 4-D heads that exporters split from 3-D projections and merge back
// (Transpose(Reshape(x)) in, Reshape(Transpose(y)) out) reads and writes the 3-D tensors instead
// (ONNX's 3-D form, q_num_heads / kv_num_heads): the four Transposes, each a copy, go.
bool to_3d_at(graph::Graph& g, size_t i, const GraphFacts& f, std::vector<char>& removed, Tally& tally) {
  const graph::Node& att = g.nodes[i];
  if (att.kind != OpKind::kAttention || att.inputs.size() < 3 || att.outputs.size() != 1) return false;
  const auto& a = std::get<AttentionAttrs>(att.attrs);
  if (a.packed_qkv || g.value(att.inputs[0]).shape.size() != 4) return false;
  std::vector<size_t> nodes;
  graph::ValueId x3[3];
  for (size_t k = 0; k < 3; ++k)
    if (!split_heads_of(g, f, att.inputs[k], x3[k], nodes)) return false;
  // The output: y [b, h, s, dv] -> Transpose(0 2 1 3) -> Reshape [b, s, h * dv].
  const graph::ValueId y = att.outputs[0];
  const int tr_i = f.only_reader(g, y);
  if (tr_i < 0) return false;
  const graph::Node& tr = g.nodes[static_cast<size_t>(tr_i)];
  if (tr.kind != OpKind::kTranspose ||
      resolved_perm(std::get<TransposeAttrs>(tr.attrs), 4) != std::vector<int64_t>{0, 2, 1, 3})
    return false;
  const int rs_i = f.only_reader(g, tr.outputs[0]);
  if (rs_i < 0 || g.nodes[static_cast<size_t>(rs_i)].kind != OpKind::kReshape ||
      g.nodes[static_cast<size_t>(rs_i)].inputs[0] != tr.outputs[0])
    return false;
  const graph::ValueId y3 = g.nodes[static_cast<size_t>(rs_i)].outputs[0];
  const std::vector<int64_t>& ys = g.value(y).shape;
  if (g.value(y3).shape != std::vector<int64_t>{ys[0], ys[2], ys[1] * ys[3]}) return false;
  nodes.push_back(static_cast<size_t>(tr_i));
  nodes.push_back(static_cast<size_t>(rs_i));
  graph::Node& n = g.nodes[i];
  auto& na = std::get<AttentionAttrs>(n.attrs);
  na.q_num_heads = g.value(n.inputs[0]).shape[1];
  na.kv_num_heads = g.value(n.inputs[1]).shape[1];
  for (size_t k = 0; k < 3; ++k) n.inputs[k] = x3[k];
  n.outputs = {y3};
  for (size_t r : nodes) remove_node(g, r, removed);
  tally.add("Attention 3-D");
  return true;
}

// A 3-D Attention whose Q, K and V are the three outputs of one Split of P along its last axis (a
// packed projection, GPT-2's c_attn), each read only there, reads P in place (packed_qkv) and the
// Split, a copy of P, goes.
bool packed_from_split_at(graph::Graph& g, size_t i, const GraphFacts& f, std::vector<char>& removed, Tally& tally) {
  const graph::Node& att = g.nodes[i];
  if (att.kind != OpKind::kAttention || att.inputs.size() < 3) return false;
  const auto& a = std::get<AttentionAttrs>(att.attrs);
  if (a.packed_qkv || g.value(att.inputs[0]).shape.size() != 3) return false;
  const graph::Node* split = f.producer_of(g, att.inputs[0], OpKind::kSplit);
  if (!split || split->outputs.size() != 3 || g.value(split->inputs[0]).shape.size() != 3 ||
      normalize_axis(std::get<SplitAttrs>(split->attrs).axis, 3) != 2)
    return false;
  for (size_t k = 0; k < 3; ++k)
    if (att.inputs[k] != split->outputs[k] || !f.only_read_once(g, att.inputs[k])) return false;
  if (!attention_packs(a, g.value(att.inputs[0]).shape[2], g.value(att.inputs[1]).shape[2],
                       g.value(att.inputs[2]).shape[2]))
    return false;
  const size_t split_index = static_cast<size_t>(f.producer[static_cast<size_t>(att.inputs[0])]);
  graph::Node& n = g.nodes[i];
  n.inputs[0] = n.inputs[1] = n.inputs[2] = g.nodes[split_index].inputs[0];  // core/attention.h
  std::get<AttentionAttrs>(n.attrs).packed_qkv = 1;
  remove_node(g, split_index, removed);
  tally.add("Attention packed");
  return true;
}

}  // namespace

// GPU targets: only where the tensor-core kernel will run (float16 or bfloat16, or float32 that
// --fp16 converts; head sizes 32, 64 or 128): elsewhere the portable kernel is slower than the steps
// (decision 59).
bool gpu_runs_fast(DataType t, int64_t d, int64_t dv, const BuildOptions& o) {
  if (!(t == DataType::kFloat16 || t == DataType::kBFloat16 || (t == DataType::kFloat32 && o.fp16))) return false;
  return d == dv && (d == 32 || d == 64 || d == 128);
}

PassResult fuse_attention(graph::Graph& g, const BuildOptions& options) {
  Tally tally;
  PassResult r;
  const bool gpu = options.target != "cpu";
  r.changes = rewrite_until_done(g, [&](graph::Graph& gr, size_t i, const GraphFacts& f, std::vector<char>& removed) {
    if (gr.nodes[i].kind == OpKind::kAttention)
      return to_3d_at(gr, i, f, removed, tally) || packed_from_split_at(gr, i, f, removed, tally) ||
             multihead_export_at(gr, i, f, removed, tally) || batch_first_packed_at(gr, i, f, removed, tally);
    if (gr.nodes[i].kind == OpKind::kReshape) return window_mask_at(gr, i, f, removed, tally, gpu ? &options : nullptr);
    return fuse_at(gr, i, f, removed, tally, gpu ? &options : nullptr);
  });
  r.detail = tally.str();
  return r;
}

}  // namespace kiln::passes
