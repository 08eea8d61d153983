// If, lowered at import: the nodes of both branches, renamed and inline, then the If itself again
// without its branches, reading the condition and both branches' outputs: the importer makes that
// a SelectBranch, which gives the outputs of the branch the condition takes. Each branch node is
// filed under its conditions (outermost first), so that infer-and-fold drops the branch a folded
// condition does not take without inferring it; with a condition known only at run time, both
// branches run and SelectBranch picks (decision 56). A branch's own Ifs, Scans and sequences are
// lowered as the importer reaches them, like any node.
#include <map>

#include "graph/onnx_import_internal.h"
#include "kiln/types.h"

namespace kiln::graph::detail {

// The lowered If carries this attribute, which no ONNX If has.
constexpr const char* kLoweredMark = "kiln_lowered";

bool is_lowered_if(const onnx::NodeProto& np) {
  return default_domain(np.domain()) && np.op_type() == "If" && find_attr(np, kLoweredMark);
}

void mark_lowered_if(onnx::NodeProto& n) { Lowering::set_int(n, kLoweredMark, 1); }

std::vector<SourceNode> lower_if(const SourceNode& sn, const Graph& g, int& counter, IfBranches& branches) {
  const onnx::NodeProto& np = sn.proto;
  const onnx::AttributeProto* then_attr = find_attr(np, "then_branch");
  const onnx::AttributeProto* else_attr = find_attr(np, "else_branch");
  if (!then_attr || !then_attr->has_g() || !else_attr || !else_attr->has_g())
    throw Error("needs attributes 'then_branch' and 'else_branch' (graphs)");
  if (np.input_size() != 1 || np.input(0).empty()) throw Error("needs one input, the condition");
  const int n_out = np.output_size();
  if (n_out == 0) throw Error("has no outputs");
  const std::string& cond = np.input(0);
  std::vector<std::pair<std::string, bool>> outer;  // the conditions this If already lies under
  if (auto it = branches.find(sn.name); it != branches.end()) outer = it->second;

  Lowering out(sn, g, counter);
  if (const std::optional<double> known = scalar_at_import(g, cond)) {
    // Known at import (a constant, a frozen input, Not of one): the branch it takes, its outputs
    // renamed the If's (by Identity, which also passes a sequence on).
    const bool then = *known != 0;
    const onnx::GraphProto& body = (then ? then_attr : else_attr)->g();
    const char* side = then ? "then" : "else";
    if (body.output_size() != n_out)
      throw Error(std::string("its ") + side + " branch gives " + std::to_string(body.output_size()) +
                  " outputs for the If's " + std::to_string(n_out));
    std::map<std::string, std::string> names;
    for (const onnx::TensorProto& t : body.initializer())
      names[t.name()] = out.fresh_constant(t, std::string(side) + "_constant");
    for (const onnx::NodeProto& bn : body.node()) {
      std::string name = sn.name + "/" + side + "/" + (bn.name().empty() ? bn.op_type() : bn.name());
      for (int k = 1; branches.contains(name); ++k) name += "_" + std::to_string(k);
      out.copy_body_node(bn, name, side, names);
      if (!outer.empty()) branches[name] = outer;
    }
    for (int i = 0; i < n_out; ++i) {
      const auto it = names.find(body.output(i).name());
      const onnx::NodeProto& pass = out.emit("Identity", {it != names.end() ? it->second : body.output(i).name()},
                                             {np.output(i)}, std::string(side) + "_output");
      if (!outer.empty()) branches[pass.name()] = outer;
    }
    return out.take();
  }
  onnx::NodeProto select = np;  // the If again, reading both branches' outputs
  select.clear_attribute();
  mark_lowered_if(select);
  select.clear_input();
  select.add_input(cond);
  std::vector<std::string> results[2];
  for (int b = 0; b < 2; ++b) {
    const bool then = b == 0;
    const onnx::GraphProto& body = (then ? then_attr : else_attr)->g();
    const char* side = then ? "then" : "else";
    if (body.input_size() != 0) throw Error(std::string("its ") + side + " branch takes inputs; a branch takes none");
    if (body.output_size() != n_out)
      throw Error(std::string("its ") + side + " branch gives " + std::to_string(body.output_size()) +
                  " outputs for the If's " + std::to_string(n_out));
    std::map<std::string, std::string> names;  // the branch's value names -> the graph's
    for (const onnx::TensorProto& t : body.initializer())
      names[t.name()] = out.fresh_constant(t, std::string(side) + "_constant");
    std::vector<std::pair<std::string, bool>> under = outer;
    under.emplace_back(cond, then);
    for (const onnx::NodeProto& bn : body.node()) {
      std::string name = sn.name + "/" + side + "/" + (bn.name().empty() ? bn.op_type() : bn.name());
      // Unique among all branch nodes: `branches` finds each node's conditions by its name.
      for (int k = 1; branches.contains(name); ++k) name += "_" + std::to_string(k);
      out.copy_body_node(bn, name, side, names);
      branches[name] = under;
    }
    for (const onnx::ValueInfoProto& v : body.output()) {
      auto it = names.find(v.name());
      results[b].push_back(it != names.end() ? it->second : v.name());  // else an outer value
    }
  }
  for (int b = 0; b < 2; ++b)
    for (const std::string& r : results[b]) select.add_input(r);
  SourceNode node{select, sn.opset, sn.name, sn.in_function};
  std::vector<SourceNode> nodes = out.take();
  nodes.push_back(std::move(node));
  if (!outer.empty()) branches[sn.name] = outer;
  return nodes;
}

}  // namespace kiln::graph::detail
