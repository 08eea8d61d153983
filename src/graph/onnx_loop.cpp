// Loop with a trip count known at import and a condition that stays true, unrolled: each
// iteration a copy of the body, its iteration number a constant, its carried values the previous
// iteration's, its scan outputs Unsqueezed and Concatenated at the end (decision 56). A trip count
// known only at run time, or a condition the body computes, would need steps that run under a
// condition, which Kiln does not have: refused, naming what to export instead.
#include <map>

#include "graph/onnx_import_internal.h"
#include "kiln/types.h"

namespace kiln::graph::detail {

namespace {

constexpr int64_t kMaxUnrolledNodes = 1 << 16;  // body nodes in all the copies of one Loop

onnx::TensorProto bool_true() {
  onnx::TensorProto t;
  t.set_data_type(onnx::TensorProto_DataType_BOOL);
  t.add_int32_data(1);
  return t;
}

// Whether the body's condition output is its condition input passed on (directly, through
// Identity nodes) or a constant true.
bool condition_stays_true(const onnx::GraphProto& body) {
  std::string c = body.output(0).name();
  const std::string& in = body.input(1).name();
  for (int guard = 0; guard <= body.node_size(); ++guard) {
    if (c == in) return true;
    const onnx::NodeProto* from = nullptr;
    for (const onnx::NodeProto& n : body.node())
      for (const std::string& o : n.output())
        if (o == c) from = &n;
    if (!from) return false;
    if (from->op_type() == "Identity" && from->input_size() == 1) {
      c = from->input(0);
      continue;
    }
    if (from->op_type() == "Constant" && from->attribute_size() == 1 && from->attribute(0).has_t()) {
      const onnx::TensorProto& t = from->attribute(0).t();
      return t.data_type() == onnx::TensorProto_DataType_BOOL &&
             ((t.int32_data_size() == 1 && t.int32_data(0) != 0) || (t.raw_data().size() == 1 && t.raw_data()[0] != 0));
    }
    return false;
  }
  return false;
}

}  // namespace

std::vector<SourceNode> unroll_loop(const SourceNode& sn, const Graph& g, int& counter) {
  const onnx::NodeProto& np = sn.proto;
  const onnx::AttributeProto* body_attr = find_attr(np, "body");
  if (!body_attr || !body_attr->has_g()) throw Error("needs attribute 'body' (a graph)");
  const onnx::GraphProto& body = body_attr->g();
  const int n = np.input_size() - 2;  // carried values
  if (n < 0) throw Error("needs inputs M and cond (either may be empty)");
  if (body.input_size() != n + 2)
    throw Error("its body takes " + std::to_string(body.input_size()) + " inputs for " + std::to_string(n) +
                " carried values (it takes the iteration number, the condition, then those)");
  const int k = body.output_size() - 1 - n;  // scan outputs
  if (k < 0 || np.output_size() > n + k)
    throw Error("its body gives " + std::to_string(body.output_size()) + " outputs for the condition, " +
                std::to_string(n) + " carried values and the Loop's " + std::to_string(np.output_size()) + " outputs");

  const std::string how =
      "; Kiln unrolls a Loop whose trip count is a constant of the model and whose condition stays true "
      "(decision 56)";
  if (np.input(0).empty()) throw Error("has no trip count, so it runs until its condition says so" + how);
  const std::optional<std::vector<int64_t>> trips = constant_ints(g, np.input(0));
  if (!trips || trips->size() != 1) throw Error("takes its trip count '" + np.input(0) + "' at run time" + how);
  const int64_t m = trips->front();
  if (m < 0) throw Error("has a negative trip count " + std::to_string(m));
  if (!np.input(1).empty()) {
    const ValueId c = g.find(np.input(1));
    const bool known_true = c != kNoValue && g.value(c).is_constant() && !g.value(c).data->empty() &&
                            g.value(c).dtype == DataType::kBool && (*g.value(c).data)[0] != 0;
    if (!known_true) throw Error("takes its condition '" + np.input(1) + "' at run time" + how);
  }
  if (!condition_stays_true(body)) throw Error("has a body that computes its condition, so it may stop early" + how);
  if (m == 0 && k > 0) throw Error("runs zero iterations; ONNX gives its scan outputs no shape then");
  if (m > kMaxUnrolledNodes / std::max(body.node_size(), 1))
    throw Error("unrolls to " + std::to_string(m) + " copies of a body of " + std::to_string(body.node_size()) +
                " nodes, more than Kiln's limit of " + std::to_string(kMaxUnrolledNodes) + " nodes");

  Lowering out(sn, g, counter);
  std::map<std::string, std::string> body_constants;
  for (const onnx::TensorProto& t : body.initializer())
    body_constants[t.name()] = out.fresh_constant(t, "body_constant");
  // The iteration number as the body declares it: a scalar, or one element.
  const onnx::ValueInfoProto& iter = body.input(0);
  const bool iter_scalar =
      !(iter.type().tensor_type().has_shape() && iter.type().tensor_type().shape().dim_size() == 1);
  const std::string cond_true = out.fresh_constant(bool_true(), "condition");

  std::vector<std::string> states;
  for (int i = 0; i < n; ++i) states.push_back(np.input(2 + i));
  std::vector<std::vector<std::string>> scanned(static_cast<size_t>(k));
  for (int64_t t = 0; t < m; ++t) {
    std::map<std::string, std::string> names = body_constants;
    names[iter.name()] = out.fresh_constant(int64_tensor({t}, iter_scalar), "iteration");
    names[body.input(1).name()] = cond_true;
    for (int i = 0; i < n; ++i) names[body.input(2 + i).name()] = states[static_cast<size_t>(i)];
    const std::string step = "iteration" + std::to_string(t);
    for (const onnx::NodeProto& bn : body.node()) {
      out.copy_body_node(bn, sn.name + "/" + step + "/" + bn.name(), step, names);
    }
    auto result = [&](int i) {
      const std::string& o = body.output(i).name();
      const auto it = names.find(o);
      return it != names.end() ? it->second : o;  // else an outer value, passed through
    };
    for (int i = 0; i < n; ++i) states[static_cast<size_t>(i)] = result(1 + i);
    for (int q = 0; q < k; ++q) scanned[static_cast<size_t>(q)].push_back(result(1 + n + q));
  }
  for (int i = 0; i < n && i < np.output_size(); ++i)
    if (!np.output(i).empty()) out.emit("Identity", {states[static_cast<size_t>(i)]}, {np.output(i)}, "final");
  for (int q = 0; q < k && n + q < np.output_size(); ++q) {
    const std::string& y = np.output(n + q);
    if (y.empty()) continue;
    std::vector<std::string> lifted;
    for (const std::string& part : scanned[static_cast<size_t>(q)]) {
      lifted.push_back(out.fresh("lifted"));
      out.ints_operand(out.emit("Unsqueeze", {part}, {lifted.back()}, "unsqueeze"), "axes", {0});
    }
    Lowering::set_int(out.emit("Concat", lifted, {y}, "concat"), "axis", 0);
  }
  return out.take();
}

}  // namespace kiln::graph::detail
