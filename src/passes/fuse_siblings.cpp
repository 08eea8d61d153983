// fuse-siblings: nodes of one kind that read the same input with the same attributes and constant
// weights become one node over the concatenated weights, followed by a Split of its output, so that
// one kernel does the work of several (Inception's parallel 1x1 convolutions, attention's Q/K/V
// projections at batch 1):
//   Conv, FusedConv      group 1, constant weights and bias (or none; zeros stand in); weights and
//                        bias join along the output channels, the output splits on axis 1.
//   Gemm, FusedGemm      transA 0, constant 2-D B, C constant per column or scalar (or none), same
//                        alpha, beta, transB; B joins along its columns (rows interleave; with transB
//                        its rows follow each other), C along its columns; the output splits on axis 1.
//   MatMul, FusedMatMul  constant 2-D B (and FusedMatMul's per-column bias); B joins along its
//                        columns; the output splits on its last axis.
// The fused kinds (fuse-epilogue's) join only with siblings of the same epilogue: it is part of the
// attributes that siblings share, and an elementwise activation after a per-channel bias is the
// same function on every slice. A residual Z is added element by element: joining would need the
// siblings' Zs laid side by side in one tensor, a Concat that no model we know gets for free, so a
// sibling with a Z stays alone.
// It fires only where the Split is free, that is where eliminate-split (passes/view_rules.h) will make its
// outputs views of the fused output: the dims before the split axis multiply to 1 (batch 1 for a
// Conv, one row for a Gemm or MatMul) and every slice starts at a multiple of the target's view
// alignment (counted in float16 when --fp16 will convert the tensors). Elsewhere each slice is
// strided in the fused output, and the Split would read and write every output element once more:
// at batch 1 a launch saved is worth a few microseconds, an extra pass over the activations costs
// as much or more as soon as they are larger than a few kilobytes, and at larger batches the
// kernels are already efficient. So no Split that copies is ever made, and with eliminate-split
// switched off the pass does nothing. For the same reason 4-D convolutions stay apart where
// channels-last will run (GPU, --fp16): their channels are the innermost axis there.
// A sibling whose output eliminate-concat would write in place into a Concat (a channel Concat at
// batch 1: Inception's 1x1 branch) cannot lie in the fused output as well: the Concat would copy
// it, one step for the one saved, plus a pass over the slice. Such siblings join only each other,
// and only when they are consecutive inputs of that Concat, in its order: the fused output then
// lies in the Concat's output in turn, and every slice is still written in place.
// The Q, K and V projections of one 3-D Attention (fuse-attention's) join even where the Split
// would copy: the Attention reads the fused output in place (packed_qkv, core/attention.h), so no
// Split is made at all; BERT-base at batch 1 runs one [128, 768] x [768, 2304] GEMM a layer instead
// of three, and its Attention no copies.
// Guards: a sibling whose output is a graph output stays out of the group (the Split would copy
// it); different attributes (epilogues included), weight shapes beyond the joined axis or element
// types make different groups; a group of one does nothing.
// The families are a table: another node kind whose weights join the same way joins by adding a row.
#include <algorithm>
#include <map>

#include "core/attention.h"
#include "core/attrs_codec.h"
#include "passes/pass.h"
#include "passes/rewrite_util.h"
#include "passes/view_rules.h"

namespace kiln::passes {

namespace {

using graph::kNoValue;
using graph::ValueId;

// Where eliminate-concat would write a node's output in place (file comment).
constexpr int kNoConcat = -1;   // read by no Concat it can lie in
constexpr int kManySlots = -2;  // read by two such Concats, or twice by one: it can follow no group

// A node that may join a group, as its family sees it.
struct Member {
  size_t node = 0;
  ValueId weights = kNoValue;  // constant
  ValueId bias = kNoValue;     // constant with `width` elements or one, or absent
  int64_t width = 0;           // its share of the split axis (output channels, columns)
  size_t weight_axis = 0;      // the weights' axis that the members' weights join along
  size_t split_axis = 0;       // the output's axis that the Split cuts
  int concat = kNoConcat;      // the Concat node its output lies in, or kNoConcat / kManySlots
  size_t slot = 0;             // its input index there
};

// One kind of node: its input 0 is the shared input, input 1 the weights, input 2 (if any) the bias.
struct Family {
  OpKind kind;
  // Fills m (but m.node and the Concat) and the part of the node its siblings must share; false if
  // it cannot join.
  bool (*admit)(const graph::Graph& g, const graph::Node& n, Member& m, std::string& key);
};

bool constant(const graph::Graph& g, ValueId v) { return v != kNoValue && g.value(v).is_constant(); }

bool pass_off(const BuildOptions& o, const char* name) {
  return std::find(o.disabled_passes.begin(), o.disabled_passes.end(), name) != o.disabled_passes.end();
}

// What siblings share besides their input: kind, attributes (a fused kind's epilogue included),
// element type and the weights' other dims.
std::string shared_key(const graph::Node& n, const graph::Value& w, size_t weight_axis) {
  std::string key(op_name(n.kind));
  key += ' ';
  key += dtype_name(w.dtype);
  for (uint8_t b : encode_attrs(n.attrs)) key.append(1, ' ').append(std::to_string(b));
  key += " |";
  for (size_t d = 0; d < w.shape.size(); ++d)
    if (d != weight_axis) key.append(1, ' ').append(std::to_string(w.shape[d]));
  return key;
}

// A bias of `width` elements, or one broadcast to them.
bool bias_fits(const graph::Graph& g, ValueId b, int64_t width) {
  if (b == kNoValue) return true;
  if (!constant(g, b) || g.value(b).shape.size() > 2) return false;
  const int64_t n = numel(g.value(b).shape);
  return n == 1 || (n == width && g.value(b).shape.back() == width);
}

ValueId bias_input(const graph::Node& n) { return n.inputs.size() > 2 ? n.inputs[2] : kNoValue; }

bool admit_conv(const graph::Graph& g, const graph::Node& n, Member& m, std::string& key) {
  const ConvAttrs& a = n.kind == OpKind::kFusedConv ? std::get<FusedConvAttrs>(n.attrs) : std::get<ConvAttrs>(n.attrs);
  if (a.group != 1 || !constant(g, n.inputs[1])) return false;
  const graph::Value& w = g.value(n.inputs[1]);
  if (w.shape.size() < 3) return false;
  m.weights = n.inputs[1];
  m.bias = bias_input(n);
  m.width = w.shape[0];
  m.weight_axis = 0;
  m.split_axis = 1;
  if (m.bias != kNoValue && (g.value(m.bias).shape.size() != 1 || !bias_fits(g, m.bias, m.width))) return false;
  key = shared_key(n, w, 0);
  return true;
}

bool admit_gemm(const graph::Graph& g, const graph::Node& n, Member& m, std::string& key) {
  const GemmAttrs& a = n.kind == OpKind::kFusedGemm ? std::get<FusedGemmAttrs>(n.attrs) : std::get<GemmAttrs>(n.attrs);
  if (a.transA != 0 || !constant(g, n.inputs[1]) || g.value(n.inputs[1]).shape.size() != 2) return false;
  const graph::Value& b = g.value(n.inputs[1]);
  m.weights = n.inputs[1];
  m.bias = bias_input(n);
  m.weight_axis = a.transB ? 0 : 1;
  m.width = b.shape[m.weight_axis];
  m.split_axis = 1;
  if (!bias_fits(g, m.bias, m.width)) return false;
  key = shared_key(n, b, m.weight_axis);
  return true;
}

// MatMul has no bias input; FusedMatMul's is [N] (shape inference checked it).
bool admit_matmul(const graph::Graph& g, const graph::Node& n, Member& m, std::string& key) {
  if (!constant(g, n.inputs[1]) || g.value(n.inputs[1]).shape.size() != 2) return false;
  const graph::Value& b = g.value(n.inputs[1]);
  const size_t rank = g.value(n.outputs[0]).shape.size();
  if (rank == 0) return false;
  m.weights = n.inputs[1];
  m.bias = bias_input(n);
  m.width = b.shape[1];
  m.weight_axis = 1;
  m.split_axis = rank - 1;
  if (!bias_fits(g, m.bias, m.width)) return false;
  key = shared_key(n, b, 1);
  return true;
}

constexpr Family kFamilies[] = {
    {OpKind::kConv, admit_conv},      {OpKind::kFusedConv, admit_conv}, {OpKind::kGemm, admit_gemm},
    {OpKind::kFusedGemm, admit_gemm}, {OpKind::kMatMul, admit_matmul},  {OpKind::kFusedMatMul, admit_matmul},
};

// Per value: the (Concat node, input index) pairs where eliminate-concat may write it in place,
// that is every input slot of a Concat whose slices are contiguous. Empty with the stage off.
std::vector<std::vector<std::pair<int, size_t>>> concat_slots(const graph::Graph& g, const BuildOptions& o) {
  std::vector<std::vector<std::pair<int, size_t>>> slots(g.values.size());
  if (pass_off(o, kViewStages[1])) return slots;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& n = g.nodes[i];
    if (n.kind != OpKind::kConcat || n.outputs.size() != 1 || n.outputs[0] == kNoValue) continue;
    const std::vector<int64_t>& shape = g.value(n.outputs[0]).shape;
    const auto rank = static_cast<int64_t>(shape.size());
    if (rank == 0 || !contiguous_slices(shape, normalize_axis(std::get<AxisAttrs>(n.attrs).axis, rank))) continue;
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if (n.inputs[k] != kNoValue) slots[static_cast<size_t>(n.inputs[k])].emplace_back(static_cast<int>(i), k);
  }
  return slots;
}

// The groups that may fuse among siblings sharing input and key (file comment): those that lie in
// no Concat, in node order; then per Concat each run of consecutive slots, in slot order.
std::vector<std::vector<Member>> split_by_concat(const std::vector<Member>& siblings) {
  std::vector<std::vector<Member>> groups(1);
  std::map<int, std::vector<Member>> by_concat;
  for (const Member& m : siblings) {
    if (m.concat == kNoConcat)
      groups[0].push_back(m);
    else if (m.concat != kManySlots)
      by_concat[m.concat].push_back(m);
  }
  for (auto& [concat, ms] : by_concat) {
    std::sort(ms.begin(), ms.end(), [](const Member& a, const Member& b) { return a.slot < b.slot; });
    for (size_t k = 0; k < ms.size(); ++k) {
      if (k == 0 || ms[k].slot != ms[k - 1].slot + 1) groups.emplace_back();
      groups.back().push_back(ms[k]);
    }
  }
  return groups;
}

// The constants laid side by side along `axis`: each is [outer, inner_i] around that axis.
std::vector<uint8_t> join_along(const graph::Graph& g, const std::vector<ValueId>& parts, size_t axis) {
  const std::vector<int64_t>& shape0 = g.value(parts[0]).shape;
  const int64_t outer = numel({shape0.begin(), shape0.begin() + static_cast<std::ptrdiff_t>(axis)});
  std::vector<uint8_t> out;
  for (int64_t o = 0; o < outer; ++o)
    for (ValueId v : parts) {
      const std::vector<uint8_t>& bytes = *g.value(v).data;
      const size_t inner = bytes.size() / static_cast<size_t>(outer);
      out.insert(out.end(), bytes.begin() + static_cast<std::ptrdiff_t>(o * inner),
                 bytes.begin() + static_cast<std::ptrdiff_t>((o + 1) * inner));
    }
  return out;
}

// The members' biases joined: each `width` elements (a one-element bias repeated, none as zeros).
std::vector<uint8_t> join_bias(const graph::Graph& g, const std::vector<Member>& ms, size_t element) {
  std::vector<uint8_t> out;
  for (const Member& m : ms) {
    if (m.bias == kNoValue) {
      out.resize(out.size() + static_cast<size_t>(m.width) * element, 0);
      continue;
    }
    const std::vector<uint8_t>& b = *g.value(m.bias).data;
    for (int64_t k = 0; k < m.width; ++k)
      out.insert(out.end(), b.begin() + static_cast<std::ptrdiff_t>(b.size() == element ? 0 : k * element),
                 b.begin() + static_cast<std::ptrdiff_t>(b.size() == element ? element : (k + 1) * element));
  }
  return out;
}

// Whether eliminate-split will make the Split of a fused output of this shape free (file comment).
bool split_is_free(const BuildOptions& o, OpKind kind, const std::vector<int64_t>& shape, size_t axis, DataType t,
                   const std::vector<Member>& ms) {
  if (!contiguous_slices(shape, static_cast<int64_t>(axis))) return false;
  const bool convolution = kind == OpKind::kConv || kind == OpKind::kFusedConv;
  if (convolution && shape.size() == 4 && o.fp16 && o.target != "cpu" && !pass_off(o, "channels-last")) return false;
  const DataType final_type = o.fp16 && t == DataType::kFloat32 ? DataType::kFloat16 : t;
  const uint64_t align = view_alignment(o.target, final_type);
  const uint64_t per_unit = static_cast<uint64_t>(numel(shape) / shape[axis]) * dtype_size(final_type);
  uint64_t at = 0;
  for (const Member& m : ms) {
    if (at % align != 0) return false;
    at += static_cast<uint64_t>(m.width) * per_unit;
  }
  return true;
}

std::string joined_origins(const graph::Graph& g, const std::vector<Member>& ms) {
  std::string s;
  for (const Member& m : ms) {
    if (!s.empty()) s += " & ";
    s += origin_of(g.nodes[m.node]);
  }
  return s;
}

// "FusedConv+Relu": what -v counts the siblings by.
std::string signature(const graph::Node& n) {
  std::string s(op_name(n.kind));
  const EpilogueAttrs* e = n.kind == OpKind::kFusedConv     ? &std::get<FusedConvAttrs>(n.attrs)
                           : n.kind == OpKind::kFusedGemm   ? &std::get<FusedGemmAttrs>(n.attrs)
                           : n.kind == OpKind::kFusedMatMul ? &std::get<EpilogueAttrs>(n.attrs)
                                                            : nullptr;
  if (e && e->activation != Activation::kNone)
    s += "+" + std::string(kEnumNames<Activation>[static_cast<size_t>(e->activation)]);
  return s;
}

// Where the group is exactly the Q, K and V projections of one 3-D Attention (each output read only
// there, the value head size equal to the key's): that Attention's index, with ms put in Q, K, V
// order; else -1. The fused output then holds Q, K and V side by side in each row and the Attention
// reads it in place (packed_qkv), so no Split is needed, free or not.
int packed_attention(const graph::Graph& g, const GraphFacts& facts, std::vector<Member>& ms) {
  if (ms.size() != 3) return -1;
  const int at = facts.only_reader(g, g.nodes[ms[0].node].outputs[0]);
  if (at < 0) return -1;
  const graph::Node& att = g.nodes[static_cast<size_t>(at)];
  if (att.kind != OpKind::kAttention || att.inputs.size() < 3 || std::get<AttentionAttrs>(att.attrs).packed_qkv ||
      g.value(att.inputs[0]).shape.size() != 3)
    return -1;
  std::vector<Member> ordered;
  for (size_t k = 0; k < 3; ++k)
    for (const Member& m : ms)
      if (g.nodes[m.node].outputs[0] == att.inputs[k] && facts.only_reader(g, att.inputs[k]) == at)
        ordered.push_back(m);
  if (ordered.size() != 3) return -1;
  if (!attention_packs(std::get<AttentionAttrs>(att.attrs), ordered[0].width, ordered[1].width, ordered[2].width))
    return -1;
  ms = std::move(ordered);
  return at;
}

// Replaces the group by a fused node and a Split; the members' outputs become the Split's, in the
// members' order. With `attention` (packed_attention's), no Split: that Attention reads the fused
// output packed.
std::vector<graph::Node> fuse(graph::Graph& g, const Family& f, const std::vector<Member>& ms, int attention) {
  const graph::Node& first = g.nodes[ms[0].node];
  const ValueId x = first.inputs[0];
  const graph::Value& y0 = g.value(first.outputs[0]);
  const graph::Value& w0 = g.value(ms[0].weights);
  const DataType t = w0.dtype;
  std::vector<int64_t> out_shape = y0.shape, w_shape = w0.shape;
  std::vector<ValueId> weights;
  int64_t total = 0;
  bool any_bias = false;
  for (const Member& m : ms) {
    weights.push_back(m.weights);
    total += m.width;
    any_bias |= m.bias != kNoValue;
  }
  out_shape[ms[0].split_axis] = total;
  w_shape[ms[0].weight_axis] = total;
  const std::string origin = joined_origins(g, ms);
  const std::string name = first.name + "_siblings", w_name = w0.name + "_siblings";
  const Attrs attrs = first.attrs;
  std::vector<uint8_t> w_bytes = join_along(g, weights, ms[0].weight_axis);
  std::vector<uint8_t> b_bytes = any_bias ? join_bias(g, ms, dtype_size(t)) : std::vector<uint8_t>{};
  std::vector<ValueId> outs;
  std::vector<uint8_t> sizes;
  for (const Member& m : ms) {
    outs.push_back(g.nodes[m.node].outputs[0]);
    const auto* p = reinterpret_cast<const uint8_t*>(&m.width);
    sizes.insert(sizes.end(), p, p + sizeof m.width);
  }
  const DataType out_type = y0.dtype;
  const std::string y_name = y0.name + "_siblings";

  std::vector<ValueId> ins = {x, g.add_constant(g.unique_name(w_name), t, w_shape, std::move(w_bytes))};
  if (any_bias) ins.push_back(g.add_constant(g.unique_name(w_name + "_bias"), t, {total}, std::move(b_bytes)));
  graph::Value fused;
  fused.name = g.unique_name(y_name);
  fused.dtype = out_type;
  fused.shape = out_shape;
  fused.has_shape = true;
  const ValueId fused_id = g.add_value(std::move(fused));
  if (attention >= 0) {
    graph::Node& att = g.nodes[static_cast<size_t>(attention)];
    att.inputs[0] = fused_id;
    att.inputs[1] = att.inputs[2] = fused_id;  // the op keeps its three inputs (core/attention.h)
    std::get<AttentionAttrs>(att.attrs).packed_qkv = 1;
    return {graph::Node{name, f.kind, attrs, ins, {fused_id}, origin}};
  }
  const ValueId sizes_id = g.add_constant(g.unique_name(name + "_sizes"), DataType::kInt64,
                                          {static_cast<int64_t>(ms.size())}, std::move(sizes));
  SplitAttrs split;
  split.axis = static_cast<int64_t>(ms[0].split_axis);
  return {graph::Node{name, f.kind, attrs, ins, {fused_id}, origin},
          graph::Node{name + "_split", OpKind::kSplit, split, {fused_id, sizes_id}, outs, origin}};
}

}  // namespace

PassResult fuse_siblings(graph::Graph& g, const BuildOptions& o) {
  PassResult r;
  if (pass_off(o, kViewStages[2])) return r;  // its Splits would copy (file comment)
  const auto slots = concat_slots(g, o);
  // Siblings by (input, family, shared key), in node order; keys in order of their first node, so
  // that the result is deterministic.
  std::map<std::string, std::pair<const Family*, std::vector<Member>>> siblings;
  std::vector<std::string> order;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& n = g.nodes[i];
    for (const Family& f : kFamilies) {
      if (n.kind != f.kind || n.inputs.size() < 2 || n.outputs.size() != 1) continue;
      if (n.inputs[0] == kNoValue || constant(g, n.inputs[0]) || g.is_graph_output(n.outputs[0])) continue;
      if (n.inputs.size() > 3 && n.inputs[3] != kNoValue) continue;  // a residual Z (file comment)
      Member m;
      std::string key;
      if (!f.admit(g, n, m, key)) continue;
      m.node = i;
      const auto& in_concat = slots[static_cast<size_t>(n.outputs[0])];
      if (in_concat.size() == 1) {
        m.concat = in_concat[0].first;
        m.slot = in_concat[0].second;
      } else if (in_concat.size() > 1) {
        m.concat = kManySlots;
      }
      key = std::to_string(n.inputs[0]) + " " + key;
      auto [it, fresh] = siblings.try_emplace(key, &f, std::vector<Member>{});
      if (fresh) order.push_back(key);
      it->second.second.push_back(m);
    }
  }
  const GraphFacts facts(g);
  std::vector<char> removed(g.nodes.size(), 0);
  std::vector<std::vector<graph::Node>> emitted(g.nodes.size());
  std::map<std::string, std::pair<int, int>> joined;  // per signature: siblings joined, nodes made
  for (const std::string& key : order) {
    const auto& [family, all] = siblings[key];
    for (const std::vector<Member>& members : split_by_concat(all)) {
      if (members.size() < 2) continue;
      const graph::Value& y0 = g.value(g.nodes[members[0].node].outputs[0]);
      std::vector<int64_t> shape = y0.shape;
      int64_t total = 0;
      for (const Member& m : members) total += m.width;
      shape[members[0].split_axis] = total;
      std::vector<Member> ms = members;
      int attention = -1;
      if (!split_is_free(o, family->kind, shape, members[0].split_axis, y0.dtype, members) &&
          (attention = packed_attention(g, facts, ms)) < 0)
        continue;
      // Where the earliest member was: every member reads only the shared input and constants.
      size_t at = ms[0].node;
      for (const Member& m : ms) at = std::min(at, m.node);
      auto& [count, made] = joined[signature(g.nodes[ms[0].node]) + (attention >= 0 ? " (packed Q, K, V)" : "")];
      count += static_cast<int>(ms.size());
      ++made;
      emitted[at] = fuse(g, *family, ms, attention);
      for (const Member& m : ms) removed[m.node] = 1;
      ++r.changes;
    }
  }
  std::vector<graph::Node> nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (graph::Node& n : emitted[i]) nodes.push_back(std::move(n));
    if (!removed[i]) nodes.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(nodes);
  for (const auto& [sig, counts] : joined)
    r.detail += (r.detail.empty() ? "" : ", ") + sig + " " + std::to_string(counts.first) + " into " +
                std::to_string(counts.second);
  return r;
}

}  // namespace kiln::passes
