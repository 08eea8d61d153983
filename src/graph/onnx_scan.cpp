// Scan with a length known at import, unrolled: each iteration a copy of the body, its inputs the
// previous iteration's state and a Gather of each scan input, its scan outputs Unsqueezed and
// Concatenated at the end. Opset 8's form (a batch axis first, no sequence_lens) unrolls over the
// batch as well. The copies are ordinary nodes that the importer reads next, so a body's own Scans,
// sequences and functions import as anywhere else.
#include <algorithm>
#include <map>

#include "graph/onnx_import_internal.h"
#include "kiln/types.h"

namespace kiln::graph::detail {

namespace {

// At most this many body nodes in all the copies of one Scan.
constexpr int64_t kMaxUnrolledNodes = 1 << 16;

std::vector<int64_t> ints_attr(const onnx::NodeProto& n, const std::string& name, size_t count) {
  const onnx::AttributeProto* a = find_attr(n, name);
  if (!a) return std::vector<int64_t>(count, 0);
  if (static_cast<size_t>(a->ints_size()) != count)
    throw Error("attribute '" + name + "' has " + std::to_string(a->ints_size()) + " values for " +
                std::to_string(count) + " tensors");
  return {a->ints().begin(), a->ints().end()};
}

}  // namespace

std::vector<SourceNode> unroll_scan(const SourceNode& sn, const Graph& g, int& counter) {
  const onnx::NodeProto& np = sn.proto;
  const onnx::AttributeProto* body_attr = find_attr(np, "body");
  if (!body_attr || !body_attr->has_g()) throw Error("needs attribute 'body' (a graph)");
  const onnx::GraphProto& body = body_attr->g();
  const onnx::AttributeProto* m_attr = find_attr(np, "num_scan_inputs");
  if (!m_attr) throw Error("needs attribute 'num_scan_inputs'");
  const bool batched = sn.opset < 9;  // opset 8: input 0 is sequence_lens, every tensor has a batch axis
  const int first = batched ? 1 : 0;
  if (batched && np.input_size() > 0 && !np.input(0).empty())
    throw Error("has sequence_lens, which makes each batch row's length depend on the data; export without it");
  const int64_t m = m_attr->i();
  const int64_t n_in = np.input_size() - first;
  const int64_t n = n_in - m;  // state variables
  if (m < 1 || n < 0) throw Error("has " + std::to_string(n_in) + " inputs for " + std::to_string(m) + " scan inputs");
  if (body.input_size() != n + m)
    throw Error("its body takes " + std::to_string(body.input_size()) + " inputs; the Scan gives " +
                std::to_string(n + m));
  const int64_t k = body.output_size() - n;  // scan outputs
  if (k < 0 || np.output_size() > n + k)
    throw Error("its body gives " + std::to_string(body.output_size()) + " outputs for " + std::to_string(n) +
                " state variables and the Scan's " + std::to_string(np.output_size()) + " outputs");
  const auto um = static_cast<size_t>(m), uk = static_cast<size_t>(k), un = static_cast<size_t>(n);
  const std::vector<int64_t> in_axes = batched ? std::vector<int64_t>(um, 1) : ints_attr(np, "scan_input_axes", um);
  const std::vector<int64_t> in_dirs = ints_attr(np, batched ? "directions" : "scan_input_directions", um);
  const std::vector<int64_t> out_axes = batched ? std::vector<int64_t>(uk, 0) : ints_attr(np, "scan_output_axes", uk);
  const std::vector<int64_t> out_dirs =
      batched ? std::vector<int64_t>(uk, 0) : ints_attr(np, "scan_output_directions", uk);

  // The static size of axis `axis` of input `name`, else an error naming what is missing.
  auto static_dim = [&](const std::string& name, int64_t axis, const char* what) {
    const ValueId id = g.find(name);
    if (id == kNoValue) throw Error("reads '" + name + "', which no earlier node, input or initializer defines");
    const Value& v = g.value(id);
    const auto r = static_cast<int64_t>(v.shape.size());
    if (!v.has_shape || axis < -r || axis >= r || v.shape[static_cast<size_t>(axis < 0 ? axis + r : axis)] < 0)
      throw Error("unrolls over " + std::string(what) + " of '" + name +
                  "', whose size is not known at import (export with static shapes)");
    return std::make_pair(v.shape[static_cast<size_t>(axis < 0 ? axis + r : axis)], axis < 0 ? axis + r : axis);
  };
  int64_t steps = -1, batch = 1;
  std::vector<int64_t> axes(um);
  for (size_t j = 0; j < um; ++j) {
    const std::string& x = np.input(static_cast<int>(first + n + static_cast<int64_t>(j)));
    const auto [len, axis] = static_dim(x, in_axes[j], "the scan axis");
    if (steps >= 0 && len != steps)
      throw Error("its scan inputs have lengths " + std::to_string(steps) + " and " + std::to_string(len));
    steps = len;
    axes[j] = axis;
    if (batched) batch = static_dim(x, 0, "the batch axis").first;
  }
  if (steps == 0 || batch == 0) throw Error("scans zero steps; ONNX gives its scan outputs no shape then");
  if (steps * batch * std::max(body.node_size(), 1) > kMaxUnrolledNodes)
    throw Error("unrolls to " + std::to_string(steps * batch) + " copies of a body of " +
                std::to_string(body.node_size()) + " nodes, more than Kiln's limit of " +
                std::to_string(kMaxUnrolledNodes) + " nodes");

  Lowering out(sn, g, counter);
  std::map<int64_t, std::string> indices;  // index -> its int64 scalar constant
  auto index = [&](int64_t i) {
    auto it = indices.find(i);
    if (it == indices.end()) it = indices.emplace(i, out.fresh_constant(int64_tensor({i}, true), "index")).first;
    return it->second;
  };
  auto gather = [&](const std::string& x, int64_t i, int64_t axis) {
    const std::string y = out.fresh("slice");
    Lowering::set_int(out.emit("Gather", {x, index(i)}, {y}, "gather"), "axis", axis);
    return y;
  };
  // Stacks `parts` along a new axis `axis`: Unsqueeze each, then Concat (into `into`).
  auto stack = [&](const std::vector<std::string>& parts, int64_t axis, const std::string& into) {
    std::vector<std::string> lifted;
    for (const std::string& p : parts) {
      lifted.push_back(out.fresh("lifted"));
      out.ints_operand(out.emit("Unsqueeze", {p}, {lifted.back()}, "unsqueeze"), "axes", {axis});
    }
    Lowering::set_int(out.emit("Concat", lifted, {into}, "concat"), "axis", axis);
  };

  // The body's initializers, once, as constants.
  std::map<std::string, std::string> body_constants;
  for (const onnx::TensorProto& t : body.initializer())
    body_constants[t.name()] = out.fresh_constant(t, "body_constant");

  // Per batch row (one where not batched): the states through the steps, and the scan outputs.
  std::vector<std::vector<std::string>> final_states(un), scanned(uk);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<std::string> states(un), rows(um);
    for (size_t i = 0; i < un; ++i) {
      const std::string& init = np.input(first + static_cast<int>(i));
      states[i] = batched ? gather(init, b, 0) : init;
    }
    for (size_t j = 0; j < um; ++j) {
      const std::string& x = np.input(static_cast<int>(first + n + static_cast<int64_t>(j)));
      rows[j] = batched ? gather(x, b, 0) : x;
    }
    std::vector<std::vector<std::string>> elements(uk);
    for (int64_t t = 0; t < steps; ++t) {
      std::map<std::string, std::string> names = body_constants;
      for (size_t i = 0; i < un; ++i) names[body.input(static_cast<int>(i)).name()] = states[i];
      for (size_t j = 0; j < um; ++j) {
        const int64_t at = in_dirs[j] == 0 ? t : steps - 1 - t;
        names[body.input(static_cast<int>(un + j)).name()] = gather(rows[j], at, batched ? 0 : axes[j]);
      }
      const std::string step = "step" + std::to_string(b * steps + t);
      for (const onnx::NodeProto& bn : body.node()) {
        out.copy_body_node(bn, sn.name + "/" + step + "/" + bn.name(), step, names);
      }
      auto result = [&](int i) {
        const std::string& o = body.output(i).name();
        const auto it = names.find(o);
        if (it != names.end()) return it->second;
        return o;  // an outer value, passed through
      };
      for (size_t i = 0; i < un; ++i) states[i] = result(static_cast<int>(i));
      for (size_t q = 0; q < uk; ++q) elements[q].push_back(result(static_cast<int>(un + q)));
    }
    for (size_t i = 0; i < un; ++i) final_states[i].push_back(states[i]);
    for (size_t q = 0; q < uk; ++q) {
      if (out_dirs[q] != 0) std::reverse(elements[q].begin(), elements[q].end());
      if (!batched) {
        scanned[q] = elements[q];
        continue;
      }
      const std::string row = out.fresh("scanned");
      stack(elements[q], 0, row);
      scanned[q].push_back(row);
    }
  }
  for (size_t i = 0; i < un && i < static_cast<size_t>(np.output_size()); ++i) {
    const std::string& y = np.output(static_cast<int>(i));
    if (y.empty()) continue;
    if (batched)
      stack(final_states[i], 0, y);
    else
      out.emit("Identity", {final_states[i][0]}, {y}, "state");
  }
  for (size_t q = 0; q < uk && un + q < static_cast<size_t>(np.output_size()); ++q) {
    const std::string& y = np.output(static_cast<int>(un + q));
    if (!y.empty()) stack(scanned[q], out_axes[q], y);
  }
  return out.take();
}

}  // namespace kiln::graph::detail
