// remove-identity: Identity, and Dropout in inference (its mask output unused), only copy.
// Consumers read the copied value instead. When the copy is a graph output, its producer writes
// the output directly instead, so the user-visible name survives; a copy of a graph input or a
// constant to a graph output stays (materialize-outputs needs one).
#include "passes/pass.h"

namespace kiln::passes {

namespace {

void replace_uses(graph::Graph& g, graph::ValueId from, graph::ValueId to) {
  for (graph::Node& n : g.nodes)
    for (graph::ValueId& v : n.inputs)
      if (v == from) v = to;
}

}  // namespace

PassResult remove_identity(graph::Graph& g, const BuildOptions&) {
  PassResult r;
  std::vector<int> uses = g.use_counts();
  std::vector<int> producer = g.producers();
  std::vector<char> removed(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    graph::Node& n = g.nodes[i];
    bool is_copy = n.kind == OpKind::kIdentity ||
                   (n.kind == OpKind::kDropout && (n.outputs.size() < 2 || n.outputs[1] == graph::kNoValue ||
                                                   uses[static_cast<size_t>(n.outputs[1])] == 0));
    if (!is_copy || n.outputs.empty() || n.outputs[0] == graph::kNoValue) continue;
    graph::ValueId in = n.inputs[0], out = n.outputs[0];
    if (!g.is_graph_output(out)) {
      replace_uses(g, out, in);
    } else {
      int p = producer[static_cast<size_t>(in)];
      if (p < 0 || removed[static_cast<size_t>(p)] || g.is_graph_output(in)) continue;
      // The producer writes `out` itself; every reader of `in` reads `out`.
      for (graph::ValueId& v : g.nodes[static_cast<size_t>(p)].outputs)
        if (v == in) v = out;
      replace_uses(g, in, out);
      producer[static_cast<size_t>(out)] = p;
    }
    removed[i] = 1;
    ++r.changes;
  }
  std::vector<graph::Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!removed[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  return r;
}

}  // namespace kiln::passes
