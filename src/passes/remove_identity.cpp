// remove-identity: Identity, and Dropout in inference or with ratio 0 (its mask output unused), only
// copy.
// Consumers read the copied value instead. When the copy is a graph output, its producer writes
// the output directly instead, so the user-visible name survives; a copy of a graph input or a
// constant to a graph output stays (materialize-outputs needs one). See bypass (rewrite_util.h).
#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {

PassResult remove_identity(graph::Graph& g, const BuildOptions&) {
  PassResult r;
  r.changes = rewrite_until_done(g, [](graph::Graph& gr, size_t i, const GraphFacts& f, std::vector<char>& removed) {
    const graph::Node& n = gr.nodes[i];
    const bool mask_unused =
        n.outputs.size() < 2 || n.outputs[1] == graph::kNoValue || f.uses[static_cast<size_t>(n.outputs[1])] == 0;
    // A training_mode known only at run time stays: the kernel checks it (and the ratio).
    const bool mode_known =
        n.inputs.size() < 3 || n.inputs[2] == graph::kNoValue || gr.value(n.inputs[2]).is_constant();
    const bool is_copy = n.kind == OpKind::kIdentity || (n.kind == OpKind::kDropout && mask_unused && mode_known);
    if (!is_copy || n.outputs.empty() || n.outputs[0] == graph::kNoValue) return false;
    return bypass(gr, i, n.inputs[0], n.outputs[0], f, removed);
  });
  return r;
}

}  // namespace kiln::passes
