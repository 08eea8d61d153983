// The rewrites of fuse-attention (fuse_attention.cpp) that read the heads away where exporters take
// them out of one packed projection through gathers and 5-D transposes, and Swin's window mask:
// nn.MultiheadAttention's export (multihead_export_at), a batch-first packed projection such as
// Swin's (batch_first_packed_at), the shifted-window mask added through a 5-D view of the scores
// (window_mask_at). The projection's thirds are recognised by where each element of q, k and v
// comes from (a view of the projection), not by how the exporter spells the chain.
#include "passes/attention_heads.h"

#include <array>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "core/attention.h"

namespace kiln::passes {

namespace {

// PyTorch's export of nn.MultiheadAttention (batch_first: ViT, nn.TransformerEncoderLayer) holds
//   xt = Transpose(x [b, s, E], 1 0 2)     P = MatMul(xt, W) [+ bias]      P [s, b, 3E]
//   q, k, v: Reshape [s, b, 3, E], Unsqueeze, Transpose, Squeeze, Gather(0 | 1 | 2), then
//            Reshape [s, b * h, d], Transpose [b * h, s, d], Reshape [b, h, s, d]
//   Attention(q, k, v) [b, h, s, d] -> Transpose(2 0 1 3) -> Reshape [s * b, E] -> Gemm(W_o) [s * b, N]
//            -> Reshape [s, b, N] -> Transpose(1 0 2) [b, s, N]
// Seven copies (the 5-D Transpose, the three Gathers, the three head Transposes) and the two around
// the projections. Rewritten: the projection reads x itself (P [b, s, 3E]), the Attention reads P in
// place (packed_qkv, 3-D) and writes [b, s, h * dv], which the output projection reads as
// [b * s, E] rows; its result is reshaped to [b, s, N]. The chain from P to q, k and v is checked
// by following where each element comes from (a strided view of P), not by its spelling.

// A view of a root tensor's contiguous elements, each axis a mixed-radix number of parts
// (extent, stride), outermost first: element (i0, i1, ...) is at offset plus, per axis, the sum of
// its digits times their strides. A reshape regroups the parts (splitting one where an axis ends
// inside it), so a reshape of a gathered slice, which copies in ONNX, is still a view here.
struct Part {
  int64_t extent, stride;
};
struct StridedView {
  std::vector<std::vector<Part>> axes;
  int64_t offset = 0;
};

// The view regrouped into axes of extents `to`, or nothing (an axis would end inside a part that
// does not divide).
std::optional<StridedView> reshaped(const StridedView& v, const std::vector<int64_t>& to) {
  std::vector<Part> flat;
  for (const std::vector<Part>& axis : v.axes)
    for (const Part& p : axis) {
      if (p.extent < 1) return std::nullopt;  // empty: nothing to read
      if (p.extent != 1) flat.push_back(p);
    }
  for (int64_t e : to)
    if (e < 1) return std::nullopt;
  StridedView out{std::vector<std::vector<Part>>(to.size()), v.offset};
  int64_t k = static_cast<int64_t>(flat.size()) - 1;
  for (size_t j = to.size(); j-- > 0;) {
    int64_t need = to[j];
    std::vector<Part>& axis = out.axes[j];
    while (need > 1) {
      if (k < 0) return std::nullopt;
      Part& p = flat[static_cast<size_t>(k)];
      if (p.extent <= need) {
        if (need % p.extent != 0) return std::nullopt;
        axis.insert(axis.begin(), p);
        need /= p.extent;
        --k;
      } else {
        if (p.extent % need != 0) return std::nullopt;
        axis.insert(axis.begin(), Part{need, p.stride});
        p = Part{p.extent / need, p.stride * need};
        need = 1;
      }
    }
  }
  if (k >= 0) return std::nullopt;
  return out;
}

// One axis's parts with neighbours that continue each other joined: (n1, n2 * s), (n2, s) is (n1 * n2, s).
std::vector<Part> joined(const std::vector<Part>& axis) {
  std::vector<Part> out;
  for (const Part& p : axis) {
    if (p.extent == 1) continue;
    if (!out.empty() && out.back().stride == p.extent * p.stride)
      out.back() = Part{out.back().extent * p.extent, p.stride};
    else
      out.push_back(p);
  }
  return out;
}

// v as a view of `root` through reshapes, Transposes and Gathers of one constant index, or nothing;
// adds the nodes on the way to `nodes`.
std::optional<StridedView> view_of(const graph::Graph& g, const GraphFacts& f, graph::ValueId v, graph::ValueId root,
                                   std::set<size_t>& nodes, int depth = 0) {
  const std::vector<int64_t>& shape = g.value(v).shape;
  if (v == root) {
    StridedView r;
    int64_t stride = 1;
    r.axes.resize(shape.size());
    for (size_t k = shape.size(); k-- > 0;) {
      r.axes[k] = {Part{shape[k], stride}};
      stride *= shape[k];
    }
    return r;
  }
  const int p = f.producer[static_cast<size_t>(v)];
  if (p < 0 || depth > 12) return std::nullopt;
  const graph::Node& n = g.nodes[static_cast<size_t>(p)];
  if (!has_trait(n.kind, kReshapeLike) && n.kind != OpKind::kTranspose && n.kind != OpKind::kGather)
    return std::nullopt;
  std::optional<StridedView> in = view_of(g, f, n.inputs[0], root, nodes, depth + 1);
  if (!in) return std::nullopt;
  std::optional<StridedView> out;
  if (has_trait(n.kind, kReshapeLike)) {
    out = reshaped(*in, shape);
  } else if (n.kind == OpKind::kTranspose) {
    out = StridedView{{}, in->offset};
    for (int64_t a : resolved_perm(std::get<TransposeAttrs>(n.attrs), in->axes.size()))
      out->axes.push_back(in->axes[static_cast<size_t>(a)]);
  } else {  // Gather of one constant index (0-D): the axis goes
    const graph::Value& index = g.value(n.inputs[1]);
    double at = 0;
    const int64_t rank = static_cast<int64_t>(in->axes.size());
    if (!index.is_constant() || !index.shape.empty() || !scalar_constant(index, at) || rank == 0) return std::nullopt;
    const size_t axis = static_cast<size_t>(normalize_axis(std::get<AxisAttrs>(n.attrs).axis, rank));
    const int64_t extent = g.value(n.inputs[0]).shape[axis];
    int64_t i = static_cast<int64_t>(at);
    if (i < 0) i += extent;
    if (i < 0 || i >= extent) return std::nullopt;
    out = *in;
    for (size_t k = out->axes[axis].size(); k-- > 0;) {
      const Part& part = out->axes[axis][k];
      out->offset += i % part.extent * part.stride;
      i /= part.extent;
    }
    out->axes.erase(out->axes.begin() + static_cast<std::ptrdiff_t>(axis));
  }
  if (!out || out->axes.size() != shape.size()) return std::nullopt;
  nodes.insert(static_cast<size_t>(p));
  return out;
}

// The node reading v when it is the only one and of kind k, else null.
const graph::Node* only_reader_of(const graph::Graph& g, const GraphFacts& f, graph::ValueId v, OpKind k, int& index) {
  index = f.only_reader(g, v);
  if (index < 0 || g.nodes[static_cast<size_t>(index)].kind != k) return nullptr;
  return &g.nodes[static_cast<size_t>(index)];
}

bool perm_is(const graph::Node& n, std::vector<int64_t> perm) {
  return resolved_perm(std::get<TransposeAttrs>(n.attrs), perm.size()) == perm;
}

// The nodes that take q, k and v of Attention `att` [b, heads, s, size] out of P, where each is a
// view of P at offset 0, wq and wq + wk with the strides `qk` (q and k) and `vw` (v) per axis, and
// every value on the way (P included) is read only there or by the Attention; else nothing.
std::optional<std::set<size_t>> packed_chain(const graph::Graph& g, const GraphFacts& f, const graph::Node& att,
                                             graph::ValueId P, const std::array<int64_t, 4>& qk,
                                             const std::array<int64_t, 4>& vw, int64_t wq, int64_t wk) {
  std::set<size_t> chain;
  const int64_t offsets[3] = {0, wq, wq + wk};
  for (size_t k = 0; k < 3; ++k) {
    std::optional<StridedView> view = view_of(g, f, att.inputs[k], P, chain);
    if (!view || view->offset != offsets[k]) return std::nullopt;
    const std::array<int64_t, 4>& want = k == 2 ? vw : qk;
    for (size_t ax = 0; ax < 4; ++ax) {
      const std::vector<Part> parts = joined(view->axes[ax]);
      if (!parts.empty() && (parts.size() != 1 || parts[0].stride != want[ax])) return std::nullopt;
    }
  }
  std::map<graph::ValueId, int> reads;
  for (size_t n : chain)
    for (graph::ValueId in : g.nodes[n].inputs) ++reads[in];
  for (size_t k = 0; k < 3; ++k) ++reads[att.inputs[k]];
  auto contained = [&](graph::ValueId v) {
    return !g.is_graph_output(v) && reads[v] == f.uses[static_cast<size_t>(v)];
  };
  if (!contained(P)) return std::nullopt;
  for (size_t n : chain)
    for (graph::ValueId out : g.nodes[n].outputs)
      if (!contained(out)) return std::nullopt;
  return chain;
}

// The extents of an Attention over 4-D q [b, h, s, d], k [b, hk, s, d], v [b, hk, s, dv] with
// one output, not packed yet; else nothing.
struct Heads {
  int64_t b, h, s, d, hk, dv;
};
std::optional<Heads> heads_of(const graph::Graph& g, const graph::Node& att) {
  if (att.kind != OpKind::kAttention || att.inputs.size() < 3 || att.outputs.size() != 1) return std::nullopt;
  const std::vector<int64_t>&qs = g.value(att.inputs[0]).shape, &ks = g.value(att.inputs[1]).shape,
        &vs = g.value(att.inputs[2]).shape;
  if (std::get<AttentionAttrs>(att.attrs).packed_qkv || qs.size() != 4 || ks.size() != 4 || vs.size() != 4 ||
      qs[2] != ks[2])
    return std::nullopt;
  return Heads{qs[0], qs[1], qs[2], qs[3], ks[1], vs[3]};
}

// The Attention's attributes reading one packed input C wide (3-D, the head counts set), where
// its three widths lie side by side in C; else nothing.
std::optional<AttentionAttrs> packed_attrs(const graph::Node& att, const Heads& x, int64_t C) {
  AttentionAttrs packed = std::get<AttentionAttrs>(att.attrs);
  packed.q_num_heads = x.h;
  packed.kv_num_heads = x.hk;
  packed.packed_qkv = 1;
  const int64_t wq = x.h * x.d, wk = x.hk * x.d, wv = x.hk * x.dv;
  if (C != wq + wk + wv || !attention_packs(packed, wq, wk, wv)) return std::nullopt;
  return packed;
}

// The value q's chain starts from: back through reshapes, Transposes and Gathers.
graph::ValueId root_of(const graph::Graph& g, const GraphFacts& f, graph::ValueId v) {
  for (int k = 0; k < 16; ++k) {
    const int p = f.producer[static_cast<size_t>(v)];
    if (p < 0) return v;
    const graph::Node& n = g.nodes[static_cast<size_t>(p)];
    if (!has_trait(n.kind, kReshapeLike) && n.kind != OpKind::kTranspose && n.kind != OpKind::kGather) return v;
    v = n.inputs[0];
  }
  return graph::kNoValue;
}

// Largest window mask window_mask_at makes (bytes): batch 1 and its like.
constexpr int64_t kMaxWindowMask = int64_t{32} << 20;

}  // namespace

bool multihead_export_at(graph::Graph& g, size_t i, const GraphFacts& f, std::vector<char>& removed, Tally& tally) {
  const graph::Node& att = g.nodes[i];
  const std::optional<Heads> heads = heads_of(g, att);
  if (!heads) return false;
  const int64_t b = heads->b, h = heads->h, s = heads->s, d = heads->d, hk = heads->hk, dv = heads->dv;
  // The packed projection: P = [Add(bias)] MatMul(Transpose(x, 1 0 2), W), P [s, b, C].
  graph::ValueId P = graph::kNoValue;
  {
    const graph::Node* q_chain = nullptr;
    for (int k = 0, p = f.producer[static_cast<size_t>(att.inputs[0])]; p >= 0 && k < 12; ++k) {
      q_chain = &g.nodes[static_cast<size_t>(p)];
      if (q_chain->kind == OpKind::kAdd || q_chain->kind == OpKind::kMatMul) {
        P = q_chain->outputs[0];
        break;
      }
      p = f.producer[static_cast<size_t>(q_chain->inputs[0])];
    }
  }
  if (P == graph::kNoValue) return false;
  const graph::Node* mm = f.producer_of(g, P, OpKind::kMatMul);
  if (!mm) {
    const graph::Node* add = f.producer_of(g, P, OpKind::kAdd);
    if (!add) return false;
    for (size_t k = 0; k < 2 && !mm; ++k)
      if (g.value(add->inputs[1 - k]).is_constant() && g.value(add->inputs[1 - k]).shape.size() == 1 &&
          f.only_read_once(g, add->inputs[k]))
        mm = f.producer_of(g, add->inputs[k], OpKind::kMatMul);
    if (!mm) return false;
  }
  const graph::ValueId M = mm->outputs[0], xt = mm->inputs[0];
  const graph::Node* tx = f.producer_of(g, xt, OpKind::kTranspose);
  const std::vector<int64_t>& ps = g.value(P).shape;
  if (!tx || !f.only_read_once(g, xt) || !perm_is(*tx, {1, 0, 2}) || g.value(mm->inputs[1]).shape.size() != 2 ||
      ps.size() != 3 || ps[0] != s || ps[1] != b)
    return false;
  const int64_t C = ps[2], wq = h * d, wk = hk * d;
  const std::optional<AttentionAttrs> packed = packed_attrs(att, *heads, C);
  if (!packed) return false;
  // q, k and v: views of P at offsets 0, wq and wq + wk, laid out [s, b, heads, size].
  std::optional<std::set<size_t>> found = packed_chain(g, f, att, P, {C, d, b * C, 1}, {C, dv, b * C, 1}, wq, wk);
  if (!found) return false;
  const std::set<size_t>& chain = *found;
  // The output: Transpose(2 0 1 3) -> Reshape [s * b, h * dv] -> Gemm | MatMul -> Reshape [s, b, N]
  // -> Transpose(1 0 2).
  int t6 = -1, r12 = -1, proj = -1, r13 = -1, t7 = -1;
  const graph::Node* n6 = only_reader_of(g, f, att.outputs[0], OpKind::kTranspose, t6);
  if (!n6 || !perm_is(*n6, {2, 0, 1, 3})) return false;
  const graph::Node* n12 = only_reader_of(g, f, n6->outputs[0], OpKind::kReshape, r12);
  if (!n12 || n12->inputs[0] != n6->outputs[0] || g.value(n12->outputs[0]).shape != std::vector<int64_t>{s * b, h * dv})
    return false;
  proj = f.only_reader(g, n12->outputs[0]);
  if (proj < 0) return false;
  const graph::Node& np = g.nodes[static_cast<size_t>(proj)];
  if ((np.kind != OpKind::kGemm && np.kind != OpKind::kMatMul) || np.inputs[0] != n12->outputs[0] ||
      (np.kind == OpKind::kGemm && std::get<GemmAttrs>(np.attrs).transA != 0))
    return false;
  const std::vector<int64_t>& zs = g.value(np.outputs[0]).shape;
  if (zs.size() != 2 || g.value(np.inputs[1]).shape.size() != 2) return false;
  const int64_t N = zs[1];
  // A Gemm becomes a MatMul over the 3-D rows (its B transposed once, its C an Add after it), so
  // that fuse-epilogue joins the bias and the residual Add as it does for BERT.
  const bool gemm = np.kind == OpKind::kGemm;
  graph::ValueId bias = graph::kNoValue;
  if (gemm) {
    const auto& ga = std::get<GemmAttrs>(np.attrs);
    if (ga.alpha != 1.0f || (ga.transB != 0 && !g.value(np.inputs[1]).is_constant())) return false;
    if (has_input(np, 2)) {
      bias = np.inputs[2];
      if (ga.beta != 1.0f || numel(g.value(bias).shape) != N || g.value(bias).shape.back() != N) return false;
    }
  }
  const graph::Node* n13 = only_reader_of(g, f, np.outputs[0], OpKind::kReshape, r13);
  if (!n13 || n13->inputs[0] != np.outputs[0] || g.value(n13->outputs[0]).shape != std::vector<int64_t>{s, b, N})
    return false;
  const graph::Node* n7 = only_reader_of(g, f, n13->outputs[0], OpKind::kTranspose, t7);
  if (!n7 || !perm_is(*n7, {1, 0, 2})) return false;

  // Rewrite. add_value / add_constant may reallocate g.values: take what is needed first.
  const graph::ValueId x = tx->inputs[0], y4 = att.outputs[0], t7_out = n7->outputs[0];
  const size_t tx_index = static_cast<size_t>(f.producer[static_cast<size_t>(xt)]);
  const size_t mm_index = static_cast<size_t>(f.producer[static_cast<size_t>(M)]);
  graph::Value y3v = g.value(y4);
  y3v.name = g.unique_name(y3v.name + "_3d");
  y3v.shape = {b, s, h * dv};
  y3v.dim_params.clear();
  const graph::ValueId y3 = g.add_value(std::move(y3v));
  graph::ValueId w_o = np.inputs[1];
  if (gemm && std::get<GemmAttrs>(np.attrs).transB != 0) {  // B [N, E] -> [E, N]
    const graph::Value& w = g.value(w_o);
    const size_t es = dtype_size(w.dtype), E = static_cast<size_t>(w.shape[1]), n_out = static_cast<size_t>(N);
    std::vector<uint8_t> t(w.data->size());
    for (size_t r = 0; r < n_out; ++r)
      for (size_t c = 0; c < E; ++c) std::memcpy(&t[(c * n_out + r) * es], &(*w.data)[(r * E + c) * es], es);
    const DataType wt = w.dtype;
    w_o = g.add_constant(g.unique_name(w.name + "_t"), wt, {static_cast<int64_t>(E), N}, std::move(t));
  }
  graph::ValueId z3 = t7_out;  // the product [b, s, N]; with a bias, the Add's input
  if (bias != graph::kNoValue) {
    graph::Value zv = g.value(t7_out);
    zv.name = g.unique_name(g.value(np.outputs[0]).name + "_rows");
    z3 = g.add_value(std::move(zv));
  }
  g.nodes[mm_index].inputs[0] = x;
  for (graph::ValueId v : {M, P}) {
    g.value(v).shape = {b, s, C};
    g.value(v).dim_params.clear();
  }
  graph::Node& n = g.nodes[i];
  n.attrs = *packed;
  n.inputs[0] = n.inputs[1] = n.inputs[2] = P;  // core/attention.h
  n.outputs = {y3};
  // The output projection over the rows of [b, s, h * dv] (in (b, s) order, as the residual's).
  graph::Node& o = g.nodes[static_cast<size_t>(proj)];
  o.kind = OpKind::kMatMul;
  o.attrs = NoAttrs{};
  o.inputs = {y3, w_o};
  o.outputs = {z3};
  if (bias != graph::kNoValue) {  // the Reshape's node becomes the bias Add (it follows the product)
    graph::Node& add = g.nodes[static_cast<size_t>(r13)];
    add.kind = OpKind::kAdd;
    add.attrs = NoAttrs{};
    add.inputs = {z3, bias};
    add.outputs = {t7_out};
  } else {
    remove_node(g, static_cast<size_t>(r13), removed);
  }
  remove_node(g, static_cast<size_t>(r12), removed);
  remove_node(g, tx_index, removed);
  for (size_t c : chain) remove_node(g, c, removed);
  remove_node(g, static_cast<size_t>(t6), removed);
  remove_node(g, static_cast<size_t>(t7), removed);  // its output is the projection's now
  tally.add("Attention packed (MultiheadAttention)");
  return true;
}

// Swin's (and other exporters') heads taken out of a batch-first packed projection P [b, s, C] by
// Reshape [b, s, 3, heads, size], Transpose(2 0 3 1 4) and Gathers, merged back by Transpose(0 2 1 3)
// and Reshape [b, s, heads * size]: the Attention reads P packed and writes the merged value.
bool batch_first_packed_at(graph::Graph& g, size_t i, const GraphFacts& f, std::vector<char>& removed, Tally& tally) {
  const graph::Node& att = g.nodes[i];
  const std::optional<Heads> heads = heads_of(g, att);
  if (!heads) return false;
  const int64_t b = heads->b, h = heads->h, s = heads->s, d = heads->d, hk = heads->hk, dv = heads->dv;
  const graph::ValueId P = root_of(g, f, att.inputs[0]);
  if (P == graph::kNoValue || P == att.inputs[0]) return false;
  const std::vector<int64_t>& ps = g.value(P).shape;
  if (ps.size() != 3 || ps[0] != b || ps[1] != s) return false;
  const int64_t C = ps[2], wq = h * d, wk = hk * d;
  const std::optional<AttentionAttrs> packed = packed_attrs(att, *heads, C);
  if (!packed) return false;
  std::optional<std::set<size_t>> chain = packed_chain(g, f, att, P, {s * C, d, C, 1}, {s * C, dv, C, 1}, wq, wk);
  if (!chain) return false;
  int tr = -1, rs = -1;
  const graph::Node* merge = only_reader_of(g, f, att.outputs[0], OpKind::kTranspose, tr);
  if (!merge || !perm_is(*merge, {0, 2, 1, 3})) return false;
  const graph::Node* flat = only_reader_of(g, f, merge->outputs[0], OpKind::kReshape, rs);
  if (!flat || flat->inputs[0] != merge->outputs[0] ||
      g.value(flat->outputs[0]).shape != std::vector<int64_t>{b, s, h * dv})
    return false;
  const graph::ValueId y3 = flat->outputs[0];
  graph::Node& n = g.nodes[i];
  n.attrs = *packed;
  n.inputs[0] = n.inputs[1] = n.inputs[2] = P;  // core/attention.h
  n.outputs = {y3};
  for (size_t c : *chain) remove_node(g, c, removed);
  remove_node(g, static_cast<size_t>(tr), removed);
  remove_node(g, static_cast<size_t>(rs), removed);
  tally.add("Attention packed (batch-first heads)");
  return true;
}

// Swin's shifted windows add their mask through a 5-D view of the scores:
//   s1 = Add(s0, bias)   s2 = Reshape(s1) [b, windows, heads, n, n]   s3 = Add(s2, m)   s4 = Reshape(s3) [b * windows,
//   heads, n, n]
// with bias and m constants. Where s4 has s1's shape, s4 = Add(s0, M) with M the two constants
// broadcast to [b * windows, heads, n, n] (at most kMaxWindowMask bytes: batch 1 and its
// like), which fuse_at then takes as the Attention's mask.

// gpu: the build options of a GPU target (the Attention must be one gpu_runs_fast takes), null for
// the CPU. Only where a Softmax reads the result: elsewhere no fusion follows and the constant
// would only grow.
bool window_mask_at(graph::Graph& g, size_t i, const GraphFacts& f, std::vector<char>& removed, Tally& tally,
                    const BuildOptions* gpu) {
  const graph::Node& r4 = g.nodes[i];
  if (r4.kind != OpKind::kReshape || !g.value(r4.outputs[0]).shape_static()) return false;
  const int reader = f.only_reader(g, r4.outputs[0]);
  if (reader < 0 || g.nodes[static_cast<size_t>(reader)].kind != OpKind::kSoftmax) return false;
  const graph::Node* add2 = f.producer_of(g, r4.inputs[0], OpKind::kAdd);
  if (!add2 || !f.only_read_once(g, r4.inputs[0])) return false;
  size_t mk = 0;
  const graph::Node* r5 = nullptr;
  for (size_t k = 0; k < 2 && !r5; ++k)
    if (g.value(add2->inputs[1 - k]).is_constant() && f.only_read_once(g, add2->inputs[k])) {
      r5 = f.producer_of(g, add2->inputs[k], OpKind::kReshape);
      mk = 1 - k;
    }
  if (!r5) return false;
  const graph::ValueId s1 = r5->inputs[0];
  const std::vector<int64_t>&x4 = g.value(s1).shape, &x5 = g.value(r5->outputs[0]).shape,
        &out = g.value(r4.outputs[0]).shape, &ms = g.value(add2->inputs[mk]).shape;
  if (x4.size() != 4 || out != x4 || x5.size() != 5 || x5[0] * x5[1] != x4[0] || x5[2] != x4[1] || x5[3] != x4[2] ||
      x5[4] != x4[3] || g.value(add2->outputs[0]).shape != x5 || ms.size() > 5)
    return false;
  const DataType t = g.value(s1).dtype;
  if (!float_type(t) || g.value(add2->inputs[mk]).dtype != t) return false;
  // s1 = Add(s0, bias) read only by r5: the bias joins M.
  const graph::Node* add1 = f.producer_of(g, s1, OpKind::kAdd);
  graph::ValueId s0 = s1, bias = graph::kNoValue;
  if (add1 && f.only_read_once(g, s1))
    for (size_t k = 0; k < 2 && bias == graph::kNoValue; ++k) {
      const graph::Value& c = g.value(add1->inputs[1 - k]);
      if (c.is_constant() && c.dtype == t && c.shape.size() <= 4 && g.value(add1->inputs[k]).shape == x4) {
        bias = add1->inputs[1 - k];
        s0 = add1->inputs[k];
      }
    }
  const std::vector<int64_t> bs = bias != graph::kNoValue ? g.value(bias).shape : std::vector<int64_t>{};
  // At batches over 1 the window mask repeats along the batch every x5[1] entries (an image's
  // windows) when neither it nor the bias varies with the image: the bias joins the 5-D mask, which
  // fuse_at then reads as a [windows, heads, n, n] mask with mask_period (periodic_mask), instead
  // of one mask as large as the scores (118 MB in Swin-T's first stage at batch 64).
  const bool periodic = x5[0] > 1 && (ms.size() < 5 || ms[0] == 1) && (bs.size() < 4 || bs[0] == 1);
  if (!periodic && numel(x4) * static_cast<int64_t>(dtype_size(t)) > kMaxWindowMask) return false;
  if (periodic && bias == graph::kNoValue) return false;  // nothing to fold: fuse_at reads the view as it is
  if (gpu) {  // the scores' MatMul gives the head size
    const graph::Node* qk = f.producer_of(g, s0, OpKind::kMatMul);
    const int64_t d = qk ? g.value(qk->inputs[0]).shape.back() : 0;
    if (!gpu_runs_fast(t, d, d, *gpu)) return false;
  }
  // M[b_, h, i, j] = bias[.., h, i, j] + m[b_ / windows, b_ % windows, h, i, j], each broadcast.
  const std::vector<double> mv = read_doubles(g.value(add2->inputs[mk]));
  const std::vector<double> bv = bias != graph::kNoValue ? read_doubles(g.value(bias)) : std::vector<double>{};
  auto at = [](const std::vector<int64_t>& shape, const std::vector<int64_t>& idx) {  // right-aligned broadcast
    int64_t off = 0;
    const size_t lead = idx.size() - shape.size();
    for (size_t k = 0; k < shape.size(); ++k) off = off * shape[k] + (shape[k] == 1 ? 0 : idx[lead + k]);
    return static_cast<size_t>(off);
  };
  if (periodic) {
    const std::vector<int64_t> m5{1, x5[1], x5[2], x5[3], x5[4]};
    std::vector<double> M(static_cast<size_t>(numel(m5)));
    size_t e = 0;
    for (int64_t w = 0; w < x5[1]; ++w)
      for (int64_t hh = 0; hh < x5[2]; ++hh)
        for (int64_t r = 0; r < x5[3]; ++r)
          for (int64_t c = 0; c < x5[4]; ++c, ++e) M[e] = mv[at(ms, {0, w, hh, r, c})] + bv[at(bs, {0, hh, r, c})];
    const size_t r5_index = static_cast<size_t>(f.producer[static_cast<size_t>(add2->inputs[1 - mk])]);
    const size_t add2_index = static_cast<size_t>(f.producer[static_cast<size_t>(r4.inputs[0])]);
    const size_t add1_index = static_cast<size_t>(f.producer[static_cast<size_t>(s1)]);
    const std::string name = g.unique_name(g.value(add2->inputs[mk]).name + "_windows");
    const graph::ValueId mask = g.add_constant(name, t, m5, write_as(t, M));
    g.nodes[r5_index].inputs[0] = s0;
    g.nodes[add2_index].inputs[mk] = mask;
    remove_node(g, add1_index, removed);
    tally.add("window mask along the batch");
    return true;
  }
  std::vector<double> M(static_cast<size_t>(numel(x4)));
  size_t e = 0;
  for (int64_t b_ = 0; b_ < x4[0]; ++b_)
    for (int64_t hh = 0; hh < x4[1]; ++hh)
      for (int64_t r = 0; r < x4[2]; ++r)
        for (int64_t c = 0; c < x4[3]; ++c, ++e) {
          double v = mv[at(ms, {b_ / x5[1], b_ % x5[1], hh, r, c})];
          if (bias != graph::kNoValue) v += bv[at(bs, {b_, hh, r, c})];
          M[e] = v;
        }
  std::vector<size_t> gone{static_cast<size_t>(f.producer[static_cast<size_t>(r4.inputs[0])]),
                           static_cast<size_t>(f.producer[static_cast<size_t>(add2->inputs[1 - mk])])};
  if (bias != graph::kNoValue) gone.push_back(static_cast<size_t>(f.producer[static_cast<size_t>(s1)]));
  const std::vector<int64_t> mask_shape = x4;
  const std::string name = g.unique_name(g.value(add2->inputs[mk]).name + "_windows");
  const graph::ValueId mask = g.add_constant(name, t, mask_shape, write_as(t, M));
  graph::Node& n = g.nodes[i];
  n.kind = OpKind::kAdd;
  n.attrs = NoAttrs{};
  n.inputs = {s0, mask};
  for (size_t k : gone) remove_node(g, k, removed);
  tally.add("window mask");
  return true;
}
}  // namespace kiln::passes
