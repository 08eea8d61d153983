// materialize-outputs: an engine output must be written by a step. A graph output that is a
// constant (a fully folded model) gets an Identity step that copies the constant into it, keeping
// the output's name.
#include "passes/pass.h"

namespace kiln::passes {

PassResult materialize_outputs(graph::Graph& g, const BuildOptions&) {
  PassResult r;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    graph::ValueId out = g.outputs[i];
    for (size_t j = 0; j < i; ++j)
      if (g.outputs[j] == out) throw Error("graph output '" + g.value(out).name + "' is listed twice");
    for (graph::ValueId in : g.inputs)
      if (in == out)
        throw Error("graph output '" + g.value(out).name +
                    "' is also a graph input; an engine needs an op between them");
    if (!g.value(out).is_constant()) continue;
    std::string name = g.value(out).name;
    g.rename(out, g.unique_name(name + "_const"));
    graph::Value copy;
    copy.name = name;
    copy.dtype = g.value(out).dtype;
    copy.shape = g.value(out).shape;
    copy.has_shape = true;
    graph::ValueId id = g.add_value(std::move(copy));
    g.nodes.push_back(graph::Node{name + "_copy", OpKind::kIdentity, NoAttrs{}, {out}, {id}, name});
    g.outputs[i] = id;
    ++r.changes;
  }
  return r;
}

}  // namespace kiln::passes
