// merge-transpose-reshape: two consecutive layout changes become one.
//   Transpose(p1) -> Transpose(p2)  becomes Transpose(p) with p[k] = p1[p2[k]];
//   a Reshape, Flatten, Squeeze or Unsqueeze read by another of these becomes one Reshape to the
//   last node's (static) output shape.
// Longer chains merge pair by pair. When the merged node hands its input on unchanged (the same
// shape, and for a Transpose no axis longer than 1 moved past another) it disappears as well, the
// graph-output rule of bypass (rewrite_util.h) applying. The merged node is named "t1 + t2".
// Guard: the intermediate value has another reader or is a graph output; both nodes then stay.
// Position: after remove-noop, which takes single no-op nodes out of the chains first, and before
// the folds that look through producer -> consumer pairs.
#include <cstring>

#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {

namespace {

bool reshape_like(OpKind k) { return has_trait(k, kReshapeLike); }

std::vector<uint8_t> int64_bytes(const std::vector<int64_t>& v) {
  std::vector<uint8_t> b(v.size() * 8);
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// `dd`: Graph::data_dependent() of the graph the pass started with (merges add only constants).
bool merge_at(graph::Graph& g, size_t i, const GraphFacts& facts, const std::vector<bool>& dd,
              std::vector<char>& removed, Tally& tally) {
  graph::Node& second = g.nodes[i];
  const bool transpose = second.kind == OpKind::kTranspose;
  if (!transpose && !reshape_like(second.kind)) return false;
  if (second.outputs.size() != 1 || second.outputs[0] == graph::kNoValue) return false;
  const graph::ValueId mid = second.inputs[0];
  const int p = facts.producer[static_cast<size_t>(mid)];
  if (p < 0) return false;
  const graph::Node& first = g.nodes[static_cast<size_t>(p)];
  if (transpose ? first.kind != OpKind::kTranspose : !reshape_like(first.kind)) return false;
  if (first.outputs.size() != 1 || !facts.only_read_once(g, mid)) return false;
  const graph::ValueId x = first.inputs[0], out = second.outputs[0];
  const std::vector<int64_t> x_shape = g.value(x).shape, out_shape = g.value(out).shape;
  if (!g.value(x).shape_static() || !g.value(out).shape_static()) return false;
  // The merged Reshape's target is the static shape, which a value of data-dependent shape has only
  // as its bound (decision 56). Transposes compose whatever the sizes.
  if (!transpose && static_cast<size_t>(x) < dd.size() && dd[static_cast<size_t>(x)]) return false;

  const std::string origin = joined_origin(first, second);
  bool copy = x_shape == out_shape;
  if (transpose) {
    const std::vector<int64_t> p1 = resolved_perm(std::get<TransposeAttrs>(first.attrs), x_shape.size());
    const std::vector<int64_t> p2 = resolved_perm(std::get<TransposeAttrs>(second.attrs), x_shape.size());
    std::vector<int64_t> perm(p2.size());
    for (size_t k = 0; k < p2.size(); ++k) perm[k] = p1[static_cast<size_t>(p2[k])];
    copy &= perm_keeps_order(perm, x_shape);
    second.attrs = TransposeAttrs{perm};
    second.inputs[0] = x;
  } else {
    ReshapeAttrs a;
    for (int64_t d : out_shape) a.allowzero |= d == 0;  // a 0 in the target must mean 0, not "copy"
    const graph::ValueId target = g.add_constant(g.unique_name(second.name + ".shape"), DataType::kInt64,
                                                 {static_cast<int64_t>(out_shape.size())}, int64_bytes(out_shape));
    graph::Node& n = g.nodes[i];
    n.kind = OpKind::kReshape;
    n.attrs = a;
    n.inputs = {x, target};
  }
  g.nodes[i].origin = origin;
  remove_node(g, static_cast<size_t>(p), removed);
  const std::string label = transpose ? "Transpose" : "Reshape";
  if (copy && bypass(g, i, x, out, facts, removed)) {
    tally.add(label + " cancelled");
  } else {
    tally.add(label);
  }
  return true;
}

}  // namespace

PassResult merge_transpose_reshape(graph::Graph& g, const BuildOptions&) {
  Tally tally;
  PassResult r;
  const std::vector<bool> dd = g.data_dependent();
  r.changes = rewrite_until_done(g, [&](graph::Graph& gr, size_t i, const GraphFacts& f, std::vector<char>& removed) {
    return merge_at(gr, i, f, dd, removed, tally);
  });
  r.detail = tally.str();
  return r;
}

}  // namespace kiln::passes
