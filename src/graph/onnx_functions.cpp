// ONNX functions: op types defined as a body of other ops, either by ONNX's own schemas
// (MeanVarianceNormalization, HannWindow, ...) or by the model (ModelProto.functions, which
// exporters use for their own composite ops). A node of such a type that Kiln does not import
// natively is replaced by its body, the way the ONNX spec defines its meaning; a native kernel,
// where one exists, is always preferred.
#include <google/protobuf/unknown_field_set.h>
#include <onnx/defs/parser.h>
#include <onnx/defs/schema.h>

#include <algorithm>
#include <deque>
#include <map>
#include <set>

#include "graph/onnx_import.h"
#include "graph/onnx_import_internal.h"

namespace kiln::graph::detail {

namespace {

constexpr int kMaxDepth = 8;              // functions calling functions
constexpr size_t kMaxNodes = 1u << 20;  // nodes visited while expanding: what a small file may grow to
constexpr size_t kMaxBytes = size_t{256} << 20;  // and the bytes of the nodes it becomes

struct Body {
  const onnx::FunctionProto* proto = nullptr;
  const onnx::OpSchema* schema = nullptr;  // for the attributes' defaults; null for model functions
  int64_t opset = 0;                       // the default-domain opset its nodes follow
};

// A model function's attribute defaults: FunctionProto.attribute_proto (IR 9, field 11), which
// Debian's libonnx 1.12 predates, so it is read from the unknown fields.
std::map<std::string, onnx::AttributeProto> function_defaults(const onnx::FunctionProto& f) {
  std::map<std::string, onnx::AttributeProto> out;
  const google::protobuf::UnknownFieldSet& unknown = f.GetReflection()->GetUnknownFields(f);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const google::protobuf::UnknownField& u = unknown.field(i);
    if (u.number() != 11 || u.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) continue;
    onnx::AttributeProto a;
    if (a.ParseFromString(u.length_delimited()) && !a.name().empty()) out[a.name()] = a;
  }
  return out;
}

int64_t body_opset(const onnx::FunctionProto& f, int64_t fallback) {
  for (const auto& o : f.opset_import())
    if (default_domain(o.domain())) return o.version();
  return fallback;
}

// A schema function of the default domain, at the version `opset` selects (context-dependent
// bodies, which need the input types, are not used).
Body schema_body(const std::string& op_type, int64_t opset) {
  const onnx::OpSchema* s = onnx::OpSchemaRegistry::Schema(op_type, static_cast<int>(opset), "");
  if (s == nullptr || !s->HasFunction() || s->GetFunction() == nullptr) return {};
  return {s->GetFunction(), s, body_opset(*s->GetFunction(), opset)};
}

class Expander {
 public:
  Expander(const onnx::ModelProto& m, int64_t opset, const std::function<bool(const onnx::NodeProto&)>& native)
      : opset_(opset), native_(native) {
    for (const auto& f : m.functions()) local_[{f.domain(), f.name()}] = &f;
    // Every name the graph uses: a fresh name must not pick up a declared type or a dangling reader.
    const onnx::GraphProto& g = m.graph();
    for (const auto& t : g.initializer()) taken_.insert(t.name());
    for (const auto& v : g.input()) taken_.insert(v.name());
    for (const auto& v : g.output()) taken_.insert(v.name());
    for (const auto& v : g.value_info()) taken_.insert(v.name());
    for (const auto& n : g.node()) {
      for (const auto& i : n.input()) taken_.insert(i);
      for (const auto& o : n.output()) taken_.insert(o);
    }
  }

  void add(const onnx::NodeProto& np, int64_t opset, const std::string& name, const std::string& in_function,
           int depth, std::vector<SourceNode>& out) {
    if (++visited_ > kMaxNodes)
      throw Error("the model expands to more than " + std::to_string(kMaxNodes) + " nodes through its functions");
    if (!native_(np)) {
      Body body;
      try {
        body = find(np, opset);
      } catch (const std::exception& e) {  // kiln::Error for bad attributes; a body that does not parse
        throw Error("node " + quoted(name) + " (" + np.op_type() + "): " + e.what());
      }
      if (body.proto != nullptr) {
        if (depth >= kMaxDepth)
          throw Error("node " + quoted(name) + " (" + np.op_type() + "): functions nest more than " +
                      std::to_string(kMaxDepth) + " deep (does a function call itself?)");
        expand(np, body, name, depth, out);
        return;
      }
    }
    bytes_ += np.ByteSizeLong();
    if (bytes_ > kMaxBytes)
      throw Error("the model expands to more than " + std::to_string(kMaxBytes >> 20) +
                  " MiB of nodes through its functions");
    out.push_back({np, opset, name, in_function});
  }

 private:
  static std::string quoted(const std::string& s) { return "'" + s + "'"; }

  Body find(const onnx::NodeProto& np, int64_t opset) {
    auto it = local_.find({np.domain(), np.op_type()});
    if (it != local_.end()) {
      const int64_t v = body_opset(*it->second, opset);
      if (v < kMinOpset || v > kMaxOpset)
        throw Error("its function imports opset " + std::to_string(v) + " of the default domain; Kiln reads " +
                    std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset));
      return {it->second, nullptr, v};
    }
    if (np.op_type().empty()) return {};
    if (auto k = kiln_bodies().find(body_key(np.domain(), np.op_type())); k != kiln_bodies().end()) {
      onnx::FunctionProto& f = built_.emplace_back();
      k->second.build(np, opset, f);
      return {&f, nullptr, kKilnBodyOpset};
    }
    return default_domain(np.domain()) ? schema_body(np.op_type(), opset) : Body{};
  }

  std::string fresh(const std::string& hint) {
    std::string n = hint;
    int& k = next_suffix_[hint];  // continues where the last search for this hint stopped
    while (taken_.contains(n)) n = hint + "_" + std::to_string(++k);
    taken_.insert(n);
    return n;
  }

  void expand(const onnx::NodeProto& call, const Body& body, const std::string& name, int depth,
              std::vector<SourceNode>& out) {
    const onnx::FunctionProto& f = *body.proto;
    const std::string what = call.op_type() + " " + quoted(name);
    if (call.input_size() > f.input_size() || call.output_size() > f.output_size())
      throw Error("node " + quoted(name) + " (" + call.op_type() + ") has " + std::to_string(call.input_size()) +
                  " inputs and " + std::to_string(call.output_size()) + " outputs; its function takes " +
                  std::to_string(f.input_size()) + " and gives " + std::to_string(f.output_size()));
    // Formal names -> names in the graph: the call's inputs and outputs (an omitted optional input
    // stays omitted), and a fresh name for every value the body makes for itself.
    std::map<std::string, std::string> names;
    for (int i = 0; i < f.input_size(); ++i) names[f.input(i)] = i < call.input_size() ? call.input(i) : "";
    for (int i = 0; i < f.output_size(); ++i)
      if (i < call.output_size() && !call.output(i).empty()) names[f.output(i)] = call.output(i);
    auto rename = [&](const std::string& formal) -> std::string {
      if (formal.empty()) return "";
      auto it = names.find(formal);
      if (it != names.end()) return it->second;
      return names[formal] = fresh(name + "/" + formal);
    };
    std::map<std::string, const onnx::AttributeProto*> given;
    for (const auto& a : call.attribute()) given[a.name()] = &a;
    const std::map<std::string, onnx::AttributeProto> defaults = function_defaults(f);

    for (int k = 0; k < f.node_size(); ++k) {
      const onnx::NodeProto& bn = f.node(k);
      onnx::NodeProto n;
      n.set_op_type(bn.op_type());
      n.set_domain(bn.domain());
      for (const auto& in : bn.input()) n.add_input(rename(in));
      for (const auto& o : bn.output()) n.add_output(rename(o));
      for (const auto& a : bn.attribute()) {
        if (a.ref_attr_name().empty()) {
          *n.add_attribute() = a;
          continue;
        }
        // An attribute that refers to the call's: the call's value, else the schema's default, else
        // left out (the body op's own default applies).
        const onnx::AttributeProto* v = nullptr;
        if (auto it = given.find(a.ref_attr_name()); it != given.end()) v = it->second;
        if (v == nullptr && body.schema == nullptr) {
          auto d = defaults.find(a.ref_attr_name());
          if (d != defaults.end()) v = &d->second;
        }
        if (v == nullptr && body.schema != nullptr) {
          auto d = body.schema->attributes().find(a.ref_attr_name());
          if (d != body.schema->attributes().end() && d->second.default_value.has_name()) v = &d->second.default_value;
        }
        if (v == nullptr) continue;
        onnx::AttributeProto* c = n.add_attribute();
        *c = *v;
        c->set_name(a.name());
      }
      const std::string inner = name + "/" + (bn.name().empty() ? bn.op_type() + "_" + std::to_string(k) : bn.name());
      n.set_name(inner);
      add(n, body.opset, inner, what, depth + 1, out);
    }
  }

  int64_t opset_;
  const std::function<bool(const onnx::NodeProto&)>& native_;
  std::map<std::pair<std::string, std::string>, const onnx::FunctionProto*> local_;
  std::set<std::string> taken_;
  std::map<std::string, int> next_suffix_;
  std::deque<onnx::FunctionProto> built_;  // Kiln's bodies, built per node
  size_t visited_ = 0, bytes_ = 0;
};

}  // namespace

std::vector<SourceNode> expand_functions(const onnx::ModelProto& model, int64_t opset,
                                         const std::function<bool(const onnx::NodeProto&)>& native) {
  Expander ex(model, opset, native);
  std::vector<SourceNode> out;
  const onnx::GraphProto& gp = model.graph();
  out.reserve(gp.node_size());
  for (int i = 0; i < gp.node_size(); ++i) {
    const onnx::NodeProto& np = gp.node(i);
    ex.add(np, opset, np.name().empty() ? np.op_type() + "_" + std::to_string(i) : np.name(), "", 0, out);
  }
  return out;
}

std::vector<std::string> function_body_op_types(const std::string& op_type, int64_t opset) {
  Body body = schema_body(op_type, opset);
  onnx::FunctionProto built;
  if (auto k = kiln_bodies().find(op_type); k != kiln_bodies().end()) {
    onnx::NodeProto sample;
    onnx::OnnxParser parser(k->second.sample);
    if (!parser.Parse(sample).IsOK()) throw Error("the sample call of " + op_type + " does not parse");
    k->second.build(sample, opset, built);
    body.proto = &built;
  }
  std::vector<std::string> ops;
  if (body.proto == nullptr) return ops;
  for (const auto& n : body.proto->node()) {
    const std::string key = default_domain(n.domain()) ? n.op_type() : n.domain() + "::" + n.op_type();
    if (std::find(ops.begin(), ops.end(), key) == ops.end()) ops.push_back(key);
  }
  return ops;
}

std::vector<std::string> function_op_type_names() {
  std::vector<std::string> ops;
  for (const auto& [type, body] : kiln_bodies()) ops.push_back(type);
  for (const onnx::OpSchema& s : onnx::OpSchemaRegistry::get_all_schemas())
    if (default_domain(s.domain()) && s.HasFunction()) ops.push_back(s.Name());
  return ops;
}

}  // namespace kiln::graph::detail
