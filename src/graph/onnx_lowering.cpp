// Lowering: the nodes that replace one source node at import (StaticSequences, unroll_scan).
#include <cmath>
#include <cstring>
#include <iterator>
#include <map>
#include <optional>
#include <set>

#include "graph/onnx_import_internal.h"

namespace kiln::graph::detail {

// Renames the outer values that the graphs of n's attributes (a nested If's branches, a Loop's
// body) read, where they were renamed here; names a subgraph defines itself are left alone.
void rename_captures(onnx::NodeProto& n, const std::map<std::string, std::string>& names) {
  for (onnx::AttributeProto& a : *n.mutable_attribute()) {
    std::vector<onnx::GraphProto*> graphs;
    if (a.has_g()) graphs.push_back(a.mutable_g());
    for (onnx::GraphProto& sub : *a.mutable_graphs()) graphs.push_back(&sub);
    for (onnx::GraphProto* sub : graphs) {
      std::set<std::string> own;
      for (const onnx::ValueInfoProto& v : sub->input()) own.insert(v.name());
      for (const onnx::TensorProto& t : sub->initializer()) own.insert(t.name());
      for (const onnx::NodeProto& bn : sub->node())
        for (const std::string& o : bn.output()) own.insert(o);
      std::map<std::string, std::string> outer;
      for (const auto& [from, to] : names)
        if (!own.contains(from)) outer.emplace(from, to);
      for (onnx::NodeProto& bn : *sub->mutable_node()) {
        for (int i = 0; i < bn.input_size(); ++i)
          if (auto it = outer.find(bn.input(i)); it != outer.end()) bn.set_input(i, it->second);
        rename_captures(bn, outer);
      }
      for (onnx::ValueInfoProto& v : *sub->mutable_output())
        if (auto it = outer.find(v.name()); it != outer.end()) v.set_name(it->second);
    }
  }
}

std::string Lowering::fresh(const std::string& hint) {
  std::string name;
  do name = sn_.name + "/" + hint + "_" + std::to_string(counter_++);
  while (g_.find(name) != kNoValue);
  return name;
}

onnx::NodeProto& Lowering::add(SourceNode node) {
  std::deque<SourceNode>& to = node.proto.op_type() == "Constant" ? constants_ : nodes_;
  to.push_back(std::move(node));
  return to.back().proto;
}

onnx::NodeProto& Lowering::copy_body_node(const onnx::NodeProto& bn, const std::string& name, const std::string& scope,
                                          std::map<std::string, std::string>& names) {
  onnx::NodeProto& p = add(SourceNode{bn, sn_.opset, name, sn_.in_function});
  p.set_name(name);
  for (int i = 0; i < p.input_size(); ++i)
    if (auto it = names.find(p.input(i)); it != names.end()) p.set_input(i, it->second);
  rename_captures(p, names);  // a body's If reads this copy's values
  for (int i = 0; i < p.output_size(); ++i) {
    if (p.output(i).empty()) continue;
    const std::string renamed = fresh(scope + "/" + p.output(i));
    names[p.output(i)] = renamed;
    p.set_output(i, renamed);
  }
  return p;
}

onnx::NodeProto& Lowering::emit(const std::string& op_type, const std::vector<std::string>& inputs,
                                const std::vector<std::string>& outputs, const std::string& label) {
  const std::string name = sn_.name + "/" + (label.empty() ? op_type : label);
  SourceNode node{onnx::NodeProto{}, sn_.opset, name, sn_.in_function};
  node.proto.set_op_type(op_type);  // before add(), which files Constants by it
  node.proto.set_name(name);
  onnx::NodeProto& p = add(std::move(node));
  for (const std::string& i : inputs) p.add_input(i);
  for (const std::string& o : outputs) p.add_output(o);
  return p;
}

std::string Lowering::op(const std::string& op_type, const std::vector<std::string>& inputs, const std::string& label,
                         std::initializer_list<std::pair<const char*, int64_t>> ints) {
  const std::string y = fresh(label);
  onnx::NodeProto& n = emit(op_type, inputs, {y}, label);
  for (const auto& [name, value] : ints) set_int(n, name, value);
  return y;
}

std::string Lowering::ints(const std::vector<int64_t>& values, const std::string& hint) {
  return fresh_constant(int64_tensor(values, false), hint);
}

std::string Lowering::constant(const onnx::TensorProto& t, const std::string& name) {
  onnx::AttributeProto* a = emit("Constant", {}, {name}).add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto_AttributeType_TENSOR);
  *a->mutable_t() = t;
  return name;
}

void Lowering::set_int(onnx::NodeProto& n, const char* name, int64_t v) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_INT);
  a->set_i(v);
}

void Lowering::ints_operand(onnx::NodeProto& n, const char* name, const std::vector<int64_t>& v) {
  if (sn_.opset >= 13) {
    n.add_input(fresh_constant(int64_tensor(v, false), name));
    return;
  }
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_INTS);
  for (int64_t x : v) a->add_ints(x);
}

std::vector<SourceNode> Lowering::take() {
  std::vector<SourceNode> all(std::make_move_iterator(constants_.begin()), std::make_move_iterator(constants_.end()));
  all.insert(all.end(), std::make_move_iterator(nodes_.begin()), std::make_move_iterator(nodes_.end()));
  constants_.clear();
  nodes_.clear();
  return all;
}

// The integer values of constant `name` (an initializer or an earlier Constant node), or none.
std::optional<std::vector<int64_t>> constant_ints(const Graph& g, const std::string& name) {
  const ValueId id = g.find(name);
  if (id == kNoValue) return std::nullopt;
  const Value& v = g.value(id);
  if (!v.is_constant()) return std::nullopt;
  std::vector<int64_t> out;
  const std::vector<uint8_t>& bytes = *v.data;
  if (v.dtype == DataType::kInt64) {
    out.resize(bytes.size() / 8);
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * 8);
  } else if (v.dtype == DataType::kInt32) {
    std::vector<int32_t> w(bytes.size() / 4);
    if (!w.empty()) std::memcpy(w.data(), bytes.data(), w.size() * 4);
    out.assign(w.begin(), w.end());
  } else {
    return std::nullopt;
  }
  return out;
}

namespace {

struct Scalar {
  double value;
  bool integer;  // an integer or bool type: Div truncates, Cast to it truncates
};

std::optional<Scalar> scalar_value(const Graph& g, ValueId id, int depth) {
  if (id == kNoValue || depth > 32) return std::nullopt;
  const Value& v = g.value(id);
  if (v.is_constant()) {
    const std::vector<uint8_t>& b = *v.data;
    auto read = [&](auto zero) -> std::optional<Scalar> {
      using T = decltype(zero);
      if (b.size() != sizeof(T)) return std::nullopt;
      T x;
      std::memcpy(&x, b.data(), sizeof(T));
      return Scalar{static_cast<double>(x), std::is_integral_v<T>};
    };
    switch (v.dtype) {
      case DataType::kFloat32: return read(float{});
      case DataType::kFloat64: return read(double{});
      case DataType::kInt32: return read(int32_t{});
      case DataType::kInt64: return read(int64_t{});
      case DataType::kBool: return read(uint8_t{});
      default: return std::nullopt;
    }
  }
  const Node* producer = nullptr;
  for (const Node& n : g.nodes)
    for (ValueId o : n.outputs)
      if (o == id) producer = &n;
  if (!producer || producer->outputs.size() != 1) return std::nullopt;
  const Node& n = *producer;
  std::vector<Scalar> in;
  for (ValueId i : n.inputs) {
    std::optional<Scalar> s = scalar_value(g, i, depth + 1);
    if (!s) return std::nullopt;
    in.push_back(*s);
  }
  auto unary = [&](double (*f)(double)) -> std::optional<Scalar> {
    if (in.size() != 1) return std::nullopt;
    return Scalar{f(in[0].value), in[0].integer};
  };
  auto binary = [&](double value) -> std::optional<Scalar> { return Scalar{value, in[0].integer && in[1].integer}; };
  switch (n.kind) {
    case OpKind::kIdentity: return unary([](double x) { return x; });
    case OpKind::kNeg: return unary([](double x) { return -x; });
    case OpKind::kNot: return unary([](double x) { return x == 0 ? 1.0 : 0.0; });
    case OpKind::kAbs: return unary([](double x) { return std::fabs(x); });
    case OpKind::kCeil: return unary([](double x) { return std::ceil(x); });
    case OpKind::kFloor: return unary([](double x) { return std::floor(x); });
    case OpKind::kRelu: return unary([](double x) { return x > 0 ? x : 0.0; });
    case OpKind::kCast: {
      if (in.size() != 1) return std::nullopt;
      const DataType to = std::get<CastAttrs>(n.attrs).to;
      if (to == DataType::kBool) return Scalar{in[0].value != 0 ? 1.0 : 0.0, true};
      if (to == DataType::kInt32 || to == DataType::kInt64) return Scalar{std::trunc(in[0].value), true};
      if (to == DataType::kFloat32) return Scalar{static_cast<double>(static_cast<float>(in[0].value)), false};
      if (to == DataType::kFloat64) return Scalar{in[0].value, false};
      return std::nullopt;
    }
    default: break;
  }
  if (in.size() != 2) return std::nullopt;
  const double a = in[0].value, b = in[1].value;
  switch (n.kind) {
    case OpKind::kAdd: return binary(a + b);
    case OpKind::kSub: return binary(a - b);
    case OpKind::kMul: return binary(a * b);
    case OpKind::kDiv:
      if (b == 0) return std::nullopt;
      return binary(in[0].integer && in[1].integer ? std::trunc(a / b) : a / b);
    case OpKind::kMax: return binary(std::max(a, b));
    case OpKind::kMin: return binary(std::min(a, b));
    default: return std::nullopt;
  }
}

}  // namespace

std::optional<double> scalar_at_import(const Graph& g, const std::string& name) {
  const std::optional<Scalar> s = scalar_value(g, g.find(name), 0);
  if (!s) return std::nullopt;
  return s->value;
}

onnx::TensorProto float_tensor(const std::vector<double>& v, const std::vector<int64_t>& dims, DataType dtype) {
  onnx::TensorProto t;
  const bool f64 = dtype == DataType::kFloat64;
  t.set_data_type(f64 ? onnx::TensorProto_DataType_DOUBLE : onnx::TensorProto_DataType_FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  for (double x : v) {
    if (f64)
      t.add_double_data(x);
    else
      t.add_float_data(static_cast<float>(x));
  }
  return t;
}

onnx::TensorProto int64_tensor(const std::vector<int64_t>& v, bool scalar) {
  onnx::TensorProto t;
  t.set_data_type(onnx::TensorProto_DataType_INT64);
  if (!scalar) t.add_dims(static_cast<int64_t>(v.size()));
  for (int64_t x : v) t.add_int64_data(x);
  return t;
}

}  // namespace kiln::graph::detail
