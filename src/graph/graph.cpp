#include "graph/graph.h"

#include <set>
#include <sstream>

namespace kiln::graph {

bool Value::shape_static() const {
  if (!has_shape) return false;
  for (int64_t d : shape)
    if (d < 0) return false;
  return true;
}

TensorView Value::view() const {
  TensorView v;
  v.dtype = dtype;
  v.shape = shape;
  // A constant with no elements still has "data": kernels and shape inference tell constants
  // from runtime values by a non-null pointer.
  static uint8_t empty_constant;
  v.data = data ? (data->empty() ? &empty_constant : const_cast<uint8_t*>(data->data())) : nullptr;
  return v;
}

ValueId Graph::add_value(Value v) {
  if (v.name.empty() || by_name_.count(v.name)) v.name = unique_name(v.name.empty() ? "v" : v.name);
  auto id = static_cast<ValueId>(values.size());
  by_name_[v.name] = id;
  values.push_back(std::move(v));
  return id;
}

ValueId Graph::add_constant(std::string name, DataType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
  Value v;
  v.name = std::move(name);
  v.dtype = dtype;
  v.shape = std::move(shape);
  v.has_shape = true;
  v.data = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  return add_value(std::move(v));
}

ValueId Graph::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? kNoValue : it->second;
}

void Graph::rename(ValueId id, const std::string& name) {
  if (by_name_.count(name)) throw Error("value name '" + name + "' is taken");
  by_name_.erase(value(id).name);
  value(id).name = name;
  by_name_[name] = id;
}

std::string Graph::unique_name(const std::string& base) {
  std::string n;
  do {
    n = base + "__" + std::to_string(name_counter_++);
  } while (by_name_.count(n));
  return n;
}

bool Graph::is_graph_output(ValueId id) const {
  for (ValueId o : outputs)
    if (o == id) return true;
  return false;
}

std::vector<int> Graph::use_counts() const {
  std::vector<int> uses(values.size(), 0);
  for (const Node& n : nodes)
    for (ValueId v : n.inputs)
      if (v != kNoValue) ++uses[static_cast<size_t>(v)];
  for (ValueId o : outputs) ++uses[static_cast<size_t>(o)];
  return uses;
}

std::vector<bool> Graph::data_dependent() const {
  std::vector<bool> dd(values.size(), false);
  for (const Node& n : nodes) {
    bool reads = false;
    for (ValueId in : n.inputs) reads |= in != kNoValue && dd[static_cast<size_t>(in)];
    const bool source = has_trait(n.kind, kDataDependent), chosen = has_trait(n.kind, kShapeFromData);
    for (size_t k = 0; k < n.outputs.size(); ++k)
      if (n.outputs[k] != kNoValue && (reads || chosen || (source && k == 0)))
        dd[static_cast<size_t>(n.outputs[k])] = true;
  }
  return dd;
}

std::vector<int> Graph::producers() const {
  std::vector<int> prod(values.size(), -1);
  for (size_t i = 0; i < nodes.size(); ++i)
    for (ValueId v : nodes[i].outputs)
      if (v != kNoValue) prod[static_cast<size_t>(v)] = static_cast<int>(i);
  return prod;
}

void verify(const Graph& g, bool require_shapes) {
  std::vector<std::string> problems;
  auto value_ok = [&](ValueId id) { return id >= 0 && static_cast<size_t>(id) < g.values.size(); };
  std::vector<char> defined(g.values.size(), 0);
  for (ValueId in : g.inputs) {
    if (!value_ok(in)) {
      problems.push_back("graph input id " + std::to_string(in) + " does not exist");
      continue;
    }
    defined[static_cast<size_t>(in)] = 1;
  }
  for (size_t i = 0; i < g.values.size(); ++i) {
    const Value& v = g.values[i];
    if (!v.is_constant()) continue;
    defined[i] = 1;
    if (!v.shape_static()) {
      problems.push_back("constant '" + v.name + "' has no static shape");
    } else {
      TensorView view = v.view();
      if (view.bytes() != v.data->size())
        problems.push_back("constant '" + v.name + "' holds " + std::to_string(v.data->size()) + " bytes, its shape " +
                           shape_string(v.shape) + " of " + std::string(dtype_name(v.dtype)) + " needs " +
                           std::to_string(view.bytes()));
    }
  }
  for (const Node& n : g.nodes) {
    const OpInfo& info = op_info(n.kind);
    std::string where = "node '" + n.name + "' (" + std::string(info.name) + ")";
    int nin = static_cast<int>(n.inputs.size()), nout = static_cast<int>(n.outputs.size());
    if (nin < info.min_inputs || (info.max_inputs >= 0 && nin > info.max_inputs))
      problems.push_back(where + " has " + std::to_string(nin) + " inputs");
    if (nout < info.min_outputs || (info.max_outputs >= 0 && nout > info.max_outputs))
      problems.push_back(where + " has " + std::to_string(nout) + " outputs");
    if (n.attrs.index() != info.attrs_index) problems.push_back(where + " carries attributes of another op kind");
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      ValueId in = n.inputs[i];
      if (in == kNoValue) {
        if (static_cast<int>(i) < info.min_inputs)
          problems.push_back(where + " lacks required input " + std::to_string(i));
        continue;
      }
      if (!value_ok(in)) {
        problems.push_back(where + " input " + std::to_string(i) + " does not exist");
      } else if (!defined[static_cast<size_t>(in)]) {
        problems.push_back(where + " reads '" + g.values[static_cast<size_t>(in)].name +
                           "' before it is computed (not in topological order, or never produced)");
      }
    }
    for (ValueId out : n.outputs) {
      if (out == kNoValue) continue;  // an unused optional output
      if (!value_ok(out)) {
        problems.push_back(where + " output does not exist");
        continue;
      }
      if (defined[static_cast<size_t>(out)])
        problems.push_back(where + " writes '" + g.values[static_cast<size_t>(out)].name + "', defined already");
      defined[static_cast<size_t>(out)] = 1;
      if (require_shapes && !g.values[static_cast<size_t>(out)].shape_static())
        problems.push_back(where + " output '" + g.values[static_cast<size_t>(out)].name + "' has no static shape");
    }
  }
  for (ValueId out : g.outputs) {
    if (!value_ok(out)) {
      problems.push_back("graph output id " + std::to_string(out) + " does not exist");
    } else if (!defined[static_cast<size_t>(out)]) {
      problems.push_back("graph output '" + g.values[static_cast<size_t>(out)].name + "' is never computed");
    }
  }
  if (problems.empty()) return;
  std::ostringstream msg;
  msg << "graph '" << g.name << "' is not well formed (" << problems.size() << " problem"
      << (problems.size() > 1 ? "s" : "") << "):";
  for (const std::string& p : problems) msg << "\n  - " << p;
  throw Error(msg.str());
}

}  // namespace kiln::graph
