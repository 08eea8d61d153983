// Loop with a trip count known at import, unrolled (decision 56): each iteration a copy of the
// body, its iteration number a constant, its carried values the previous iteration's, its scan
// outputs Unsqueezed and Concatenated at the end. Where the Loop may stop earlier (a condition the
// body computes, or one given at run time), every iteration runs under a guard: `active`, the
// condition so far, picks the iteration's carried values or the previous ones (a lowered If, so a
// SelectBranch), and the scan outputs keep the active iterations' rows (Compress, so their length
// is data-dependent, bounded by the trip count). A trip count known only at run time bounds
// nothing: refused, naming what to export instead.
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
      "; Kiln unrolls a Loop up to a trip count that is a constant of the model, its condition guarding "
      "each iteration (decision 56)";
  if (np.input(0).empty()) throw Error("has no trip count, so nothing bounds its iterations" + how);
  const std::optional<double> trips = scalar_at_import(g, np.input(0));
  if (!trips) throw Error("takes its trip count '" + np.input(0) + "' at run time" + how);
  if (*trips < 0) throw Error("has a negative trip count " + std::to_string(static_cast<int64_t>(*trips)));
  int64_t m = *trips >= 9.2e18 ? INT64_MAX : static_cast<int64_t>(*trips);  // PyTorch's while loops: INT64_MAX
  std::string entry;  // the condition on entry where it is not known at import
  if (!np.input(1).empty()) {
    const std::optional<double> known = scalar_at_import(g, np.input(1));
    if (!known)
      entry = np.input(1);
    else if (*known == 0)
      m = 0;  // never entered
  }
  const bool computes = !condition_stays_true(body);  // the body may end the Loop
  const bool guarded = computes || !entry.empty();
  if (m == 0 && k > 0) throw Error("runs zero iterations; ONNX gives its scan outputs no shape then");
  if (m > kMaxUnrolledNodes / std::max(body.node_size(), 1))
    throw Error("unrolls to " + std::to_string(m) + " copies of a body of " + std::to_string(body.node_size()) +
                " nodes, more than Kiln's limit of " + std::to_string(kMaxUnrolledNodes) + " nodes" +
                (computes ? "; export it with a smaller trip count bounding its iterations" : ""));

  Lowering out(sn, g, counter);
  std::map<std::string, std::string> body_constants;
  for (const onnx::TensorProto& t : body.initializer())
    body_constants[t.name()] = out.fresh_constant(t, "body_constant");
  // The iteration number as the body declares it: a scalar, or one element.
  const onnx::ValueInfoProto& iter = body.input(0);
  const bool iter_scalar =
      !(iter.type().tensor_type().has_shape() && iter.type().tensor_type().shape().dim_size() == 1);
  const std::string cond_true = out.fresh_constant(bool_true(), "condition");
  std::string as_scalar, as_row;  // Reshape's shapes [] and [1]
  auto reshape = [&](const std::string& x, std::string& shape, bool scalar, const std::string& label) {
    if (shape.empty())
      shape = out.fresh_constant(int64_tensor(scalar ? std::vector<int64_t>{} : std::vector<int64_t>{1}, false),
                                 scalar ? "scalar" : "row");
    const std::string y = out.fresh(label);
    out.emit("Reshape", {x, shape}, {y}, label);
    return y;
  };
  std::string active = entry.empty() ? cond_true : reshape(entry, as_scalar, true, "entry");

  std::vector<std::string> states;
  for (int i = 0; i < n; ++i) states.push_back(np.input(2 + i));
  std::vector<std::vector<std::string>> scanned(static_cast<size_t>(k));
  std::vector<std::string> ran;  // per iteration, whether it ran: [1]
  for (int64_t t = 0; t < m; ++t) {
    std::map<std::string, std::string> names = body_constants;
    names[iter.name()] = out.fresh_constant(int64_tensor({t}, iter_scalar), "iteration");
    names[body.input(1).name()] = cond_true;  // whenever the iteration counts, the condition holds
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
    if (!guarded) {
      for (int i = 0; i < n; ++i) states[static_cast<size_t>(i)] = result(1 + i);
    } else {
      ran.push_back(reshape(active, as_row, false, step + "/ran"));
      if (n > 0) {  // this iteration's carried values if it ran, else the ones before it
        std::vector<std::string> inputs{active}, picked;
        for (int i = 0; i < n; ++i) inputs.push_back(result(1 + i));
        for (int i = 0; i < n; ++i) {
          inputs.push_back(states[static_cast<size_t>(i)]);
          picked.push_back(out.fresh(step + "/carried"));
        }
        mark_lowered_if(out.emit("If", inputs, picked, step + "/guard"));
        states = picked;
      }
      if (computes && t + 1 < m) {
        const std::string next = out.fresh(step + "/active");
        out.emit("And", {active, reshape(result(0), as_scalar, true, step + "/condition")}, {next}, step + "/active");
        active = next;
      }
    }
    for (int q = 0; q < k; ++q) scanned[static_cast<size_t>(q)].push_back(result(1 + n + q));
  }
  for (int i = 0; i < n && i < np.output_size(); ++i)
    if (!np.output(i).empty()) out.emit("Identity", {states[static_cast<size_t>(i)]}, {np.output(i)}, "final");
  std::string mask;  // the iterations that ran
  if (guarded && k > 0) {
    mask = out.fresh("ran");
    Lowering::set_int(out.emit("Concat", ran, {mask}, "ran"), "axis", 0);
  }
  for (int q = 0; q < k && n + q < np.output_size(); ++q) {
    const std::string& y = np.output(n + q);
    if (y.empty()) continue;
    std::vector<std::string> lifted;
    for (const std::string& part : scanned[static_cast<size_t>(q)]) {
      lifted.push_back(out.fresh("lifted"));
      out.ints_operand(out.emit("Unsqueeze", {part}, {lifted.back()}, "unsqueeze"), "axes", {0});
    }
    const std::string all = guarded ? out.fresh("every_iteration") : y;
    Lowering::set_int(out.emit("Concat", lifted, {all}, "concat"), "axis", 0);
    if (guarded) Lowering::set_int(out.emit("Compress", {all, mask}, {y}, "ran_rows"), "axis", 0);
  }
  return out.take();
}

}  // namespace kiln::graph::detail
