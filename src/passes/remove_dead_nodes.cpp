// remove-dead-nodes: drops nodes none of whose outputs reach a graph output.
#include "passes/pass.h"

namespace kiln::passes {

PassResult remove_dead_nodes(graph::Graph& g, const BuildOptions&) {
  PassResult r;
  std::vector<char> live(g.values.size(), 0);
  for (graph::ValueId o : g.outputs) live[static_cast<size_t>(o)] = 1;
  std::vector<char> keep(g.nodes.size(), 0);
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const graph::Node& n = g.nodes[i];
    for (graph::ValueId o : n.outputs)
      if (o != graph::kNoValue && live[static_cast<size_t>(o)]) keep[i] = 1;
    if (!keep[i]) continue;
    for (graph::ValueId in : n.inputs)
      if (in != graph::kNoValue) live[static_cast<size_t>(in)] = 1;
  }
  std::vector<graph::Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (keep[i]) {
      kept.push_back(std::move(g.nodes[i]));
    } else {
      ++r.changes;
    }
  }
  g.nodes = std::move(kept);
  return r;
}

}  // namespace kiln::passes
