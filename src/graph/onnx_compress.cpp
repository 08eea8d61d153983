// Compress, lowered at import to ops with data-dependent shapes (decision 56): the indices of the
// condition's true elements (NonZero, flattened), then a Gather of them along the axis, or of the
// flattened input without one. A condition shorter than the axis selects among its first
// elements, as ONNX allows; a longer one's indices fail Gather's bounds check at run time.
#include "graph/onnx_import_internal.h"
#include "kiln/types.h"

namespace kiln::graph::detail {

std::vector<SourceNode> lower_compress(const SourceNode& sn, const Graph& g, int& counter) {
  const onnx::NodeProto& np = sn.proto;
  if (np.input_size() != 2 || np.input(0).empty() || np.input(1).empty())
    throw Error("needs two inputs, the data and the condition");
  if (np.output_size() != 1) throw Error("has " + std::to_string(np.output_size()) + " outputs; Compress gives one");
  if (const ValueId c = g.find(np.input(1)); c != kNoValue && g.value(c).has_shape && g.value(c).shape.size() != 1)
    throw Error("has a condition of rank " + std::to_string(g.value(c).shape.size()) + "; Compress takes a 1-D one");
  Lowering out(sn, g, counter);
  const std::string flat = out.fresh_constant(int64_tensor({-1}, false), "flat");
  const std::string hits = out.fresh("hits"), indices = out.fresh("indices");
  out.emit("NonZero", {np.input(1)}, {hits}, "nonzero");
  out.emit("Reshape", {hits, flat}, {indices}, "indices");
  const onnx::AttributeProto* axis = find_attr(np, "axis");
  std::string data = np.input(0);
  if (!axis) {  // the input flattened
    data = out.fresh("flattened");
    out.emit("Reshape", {np.input(0), flat}, {data}, "flatten");
  }
  Lowering::set_int(out.emit("Gather", {data, indices}, {np.output(0)}, "gather"), "axis", axis ? axis->i() : 0);
  return out.take();
}

}  // namespace kiln::graph::detail
