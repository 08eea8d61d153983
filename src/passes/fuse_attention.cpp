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
// CPU targets only for now (see fuse_attention below).
// Position: after merge-transpose-reshape (the transposes around q, k and v are merged) and before
// the folds that rewrite Mul and Div by constants.
#include <array>
#include <cmath>
#include <optional>
#include <span>

#include "core/attention.h"
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

bool fuse_at(graph::Graph& g, size_t i, const GraphFacts& f, std::vector<char>& removed, Tally& tally) {
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
  if (const graph::Node* add = f.producer_of(g, s, OpKind::kAdd)) {
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
  if (where.x != graph::kNoValue && !causal && mask != graph::kNoValue) return false;  // two masks
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
  graph::Node& att = g.nodes[i];
  AttentionAttrs a;
  a.scale = static_cast<float>(scale);
  a.is_causal = causal ? 1 : 0;
  att.kind = OpKind::kAttention;
  att.attrs = a;
  att.inputs = {q, k, v};
  if (mask != graph::kNoValue) att.inputs.push_back(mask);
  att.outputs = {y};
  att.origin = origin;
  tally.add("Attention");
  return true;
}

}  // namespace

PassResult fuse_attention(graph::Graph& g, const BuildOptions& options) {
  Tally tally;
  PassResult r;
  // GPU targets keep the separate steps for now: even the tensor-core kernel (cuda/gemm/attention.cu,
  // float16, head sizes 64 and 128) makes BERT-base at batch 1 slower, 0.753 ms against 0.682 ms
  // (H200, CUDA graph; decision 59). The CPU's kernel is 1.3x faster than its steps.
  if (options.target != "cpu") {
    r.detail = "off for GPU targets (decision 59)";
    return r;
  }
  r.changes = rewrite_until_done(g, [&](graph::Graph& gr, size_t i, const GraphFacts& f, std::vector<char>& removed) {
    return fuse_at(gr, i, f, removed, tally);
  });
  r.detail = tally.str();
  return r;
}

}  // namespace kiln::passes
