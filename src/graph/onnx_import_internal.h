// Shared by the ONNX importer's files; not part of the graph library's interface.
#pragma once

#include <onnx/onnx_pb.h>

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace kiln::graph::detail {

// What an op-specific import step sees and may change.
struct ImportNode {
  const onnx::NodeProto& proto;
  int64_t opset;
  OpKind kind;
  Attrs attrs;                  // parsed generically from the ONNX attributes already
  std::vector<ValueId> inputs;  // kNoValue for "" inputs
  std::vector<ValueId> outputs;
  std::vector<std::string> consumed;  // ONNX attribute names the step handled itself
};

class Importer;

// Opset-specific rewrites: called after the generic attribute parse. May add constant inputs,
// change the op kind (Upsample -> Resize) or attributes. Throws kiln::Error for what cannot be
// imported.
using LegacyFn = std::function<void(Importer&, ImportNode&)>;

class Importer {
 public:
  Graph& g;
  std::string origin;
  explicit Importer(Graph& graph, std::string model_origin) : g(graph), origin(std::move(model_origin)) {}

  ValueId const_i64(const std::string& hint, const std::vector<int64_t>& v, bool scalar = false);
  ValueId const_f32(const std::string& hint, const std::vector<float>& v, bool scalar = false);
  const onnx::AttributeProto* attr(const onnx::NodeProto& n, const std::string& name) const;
};

// Op type -> rewrite for old opsets (or special semantics); see onnx_import_rules.cpp.
const std::map<std::string, LegacyFn>& import_rules();
// Op types that import as something else entirely (Constant is handled by the importer itself).
std::optional<OpKind> renamed_op(const std::string& op_type);

inline bool default_domain(const std::string& domain) { return domain.empty() || domain == "ai.onnx"; }

// Node n's attribute `name`, or null.
inline const onnx::AttributeProto* find_attr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

// Kiln's own function bodies (onnx_kiln_bodies.cpp, onnx_bodies_*.cpp), for op types ONNX defines without one, keyed
// by body_key: the op type, "domain::op type" outside the default domain. Each is built per node,
// at kKilnBodyOpset.
inline constexpr int64_t kKilnBodyOpset = 17;
using BodyBuilder = void (*)(const onnx::NodeProto&, int64_t opset, onnx::FunctionProto&);
struct KilnBody {
  BodyBuilder build;
  // A representative call in ONNX's text syntax, with the attributes the body requires: `kiln ops`
  // builds it to list the op types the body uses.
  const char* sample;
};
const std::map<std::string, KilnBody>& kiln_bodies();
std::string body_key(const std::string& domain, const std::string& op_type);

// A node as the importer reads it: the graph's own nodes, and the bodies of the ONNX functions
// they call (onnx_functions.cpp).
struct SourceNode {
  onnx::NodeProto proto;
  int64_t opset;            // the default-domain opset its attributes and inputs follow
  std::string name;         // for messages and the IR ("mvn/ReduceMean_2" inside a body)
  std::string in_function;  // the call it was expanded from ("MeanVarianceNormalization 'mvn'"), or ""
};

// The sequences of a model known at import (onnx_sequences.cpp): each sequence value is the list
// of its elements' tensor names, and the ops that read one are replaced by tensor ops.
class StaticSequences {
 public:
  // Whether lower() takes np: an op that makes a sequence, or reads one known here.
  bool handles(const onnx::NodeProto& np) const;
  // The nodes that replace sn (Constant, Identity, Split, Squeeze, Unsqueeze, Concat; none where
  // only the list changes), at sn's opset. Throws kiln::Error for what needs run-time values.
  std::vector<SourceNode> lower(const SourceNode& sn, const Graph& g);
  bool is_sequence(const std::string& name) const;
  // A sequence known from elsewhere (a graph input's elements), or its elements.
  void define(const std::string& name, std::vector<std::string> elements) { seqs_[name] = std::move(elements); }
  const std::vector<std::string>& elements(const std::string& name) const { return seqs_.at(name); }
  // Optionals (ONNX's optional type), known at import too: the name of the tensor or sequence one
  // holds, or "" for none. Optional makes one, OptionalHasElement becomes a constant and
  // OptionalGetElement an Identity (or the sequence itself).
  void define_optional(const std::string& name, const std::string& held) { optionals_[name] = held; }
  bool is_optional(const std::string& name) const { return optionals_.contains(name); }
  const std::string& optional_value(const std::string& name) const { return optionals_.at(name); }

 private:
  std::map<std::string, std::vector<std::string>> seqs_;  // "" for an element known only at run time
  std::map<std::string, std::string> optionals_;
  int counter_ = 0;
};

// The nodes that replace one source node at import (onnx_lowering.cpp): each at the source's opset
// and named after it, value names no graph value has, and Constant nodes ahead of the others,
// which may read them. References returned stay valid as nodes are added.
class Lowering {
 public:
  Lowering(const SourceNode& source, const Graph& g, int& counter) : sn_(source), g_(g), counter_(counter) {}
  // "<source>/<hint>_<k>", unused in g.
  std::string fresh(const std::string& hint);
  // A node op_type(inputs) -> outputs, named "<source>/<label>" (label: the op type by default).
  onnx::NodeProto& emit(const std::string& op_type, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs, const std::string& label = "");
  // A node op_type(inputs) with one output, a fresh name from `label`, and integer attributes;
  // returns the output's name.
  std::string op(const std::string& op_type, const std::vector<std::string>& inputs, const std::string& label,
                 std::initializer_list<std::pair<const char*, int64_t>> ints = {});
  // A Constant node of a 1-D int64 tensor of `values`, named from `hint`.
  std::string ints(const std::vector<int64_t>& values, const std::string& hint);
  // A node of its own (a copy of a body's node), kept in order with the emitted ones.
  onnx::NodeProto& add(SourceNode node);
  // A copy of a body's node bn named `name`: its inputs (and its subgraphs' captures) renamed by
  // `names`, its outputs fresh names under `scope`, which `names` records.
  onnx::NodeProto& copy_body_node(const onnx::NodeProto& bn, const std::string& name, const std::string& scope,
                                  std::map<std::string, std::string>& names);
  // A Constant node of t writing `name`, or a fresh name from `hint`; returns the name.
  std::string constant(const onnx::TensorProto& t, const std::string& name);
  std::string fresh_constant(const onnx::TensorProto& t, const std::string& hint) { return constant(t, fresh(hint)); }
  static void set_int(onnx::NodeProto& n, const char* name, int64_t v);
  // Squeeze/Unsqueeze's axes and Split's sizes: an input from opset 13 on, an attribute before.
  void ints_operand(onnx::NodeProto& n, const char* name, const std::vector<int64_t>& v);
  // The nodes made, constants first.
  std::vector<SourceNode> take();

 private:
  const SourceNode& sn_;
  const Graph& g_;
  int& counter_;
  std::deque<SourceNode> constants_, nodes_;
};

// Renames the outer values that the graphs of n's attributes (a nested If's branches, a Loop's
// body) read, where `names` renamed them (a lowering copying n); names a subgraph defines itself
// are left alone.
void rename_captures(onnx::NodeProto& n, const std::map<std::string, std::string>& names);

// The integer values of constant `name` (an initializer or an earlier Constant node), or none.
std::optional<std::vector<int64_t>> constant_ints(const Graph& g, const std::string& name);

// The value of one-element `name` where the import already knows it: a constant, or scalar
// arithmetic on constants (Cast, Add, Sub, Mul, Div, Ceil, Floor, Relu, Neg, Abs, Max, Min, Not,
// Identity), as ONNX's Range body computes a Loop's trip count from its inputs and a Loop body
// its If's condition (`not OptionalHasElement(x)`).
std::optional<double> scalar_at_import(const Graph& g, const std::string& name);

// A float32 or float64 tensor of v with dimensions dims (none: a scalar).
onnx::TensorProto float_tensor(const std::vector<double>& v, const std::vector<int64_t>& dims, DataType dtype);

// An int64 tensor of v: a scalar, or 1-D.
onnx::TensorProto int64_tensor(const std::vector<int64_t>& v, bool scalar);

// The nodes that replace a Scan node whose scan length is known from g's shapes: a copy of its body
// per step (onnx_scan.cpp). `counter` numbers the names it makes. Throws kiln::Error otherwise.
std::vector<SourceNode> unroll_scan(const SourceNode& sn, const Graph& g, int& counter);

// The nodes that replace a Det: Gaussian elimination with partial pivoting, unrolled over the
// columns of a matrix size known at import (onnx_det.cpp).
std::vector<SourceNode> lower_det(const SourceNode& sn, const Graph& g, int& counter);

// The nodes that replace a Unique: every pair of rows compared, NonZero of the first occurrences,
// TopK to sort them (onnx_unique.cpp); the input's shape must be known at import.
std::vector<SourceNode> lower_unique(const SourceNode& sn, const Graph& g, int& counter);

// The nodes that replace a Compress: NonZero of the condition, then Gather (onnx_compress.cpp).
std::vector<SourceNode> lower_compress(const SourceNode& sn, const Graph& g, int& counter);

// The nodes that replace a Loop whose trip count is a constant: a copy of its body per iteration,
// guarded by the condition where the Loop may stop earlier (onnx_loop.cpp). Throws kiln::Error
// otherwise.
std::vector<SourceNode> unroll_loop(const SourceNode& sn, const Graph& g, int& counter);

// If nodes lowered at import (onnx_if.cpp), by node name: the conditions each branch node lies
// under (the condition's value name, and whether it is the then branch), outermost first.
using IfBranches = std::map<std::string, std::vector<std::pair<std::string, bool>>>;
// The nodes that replace an If: both branches' nodes, then the If again without branches, reading
// the condition and the then and else branches' outputs (is_lowered_if), which the importer makes
// a SelectBranch. Files the branch nodes in `branches`.
std::vector<SourceNode> lower_if(const SourceNode& sn, const Graph& g, int& counter, IfBranches& branches);
bool is_lowered_if(const onnx::NodeProto& np);
// Marks n, an If without branches reading (condition, then values..., else values...), lowered.
void mark_lowered_if(onnx::NodeProto& n);

// The graph's nodes in order, each node that Kiln does not import natively (`native` says false)
// and that ONNX's schemas or the model's own functions define by a body replaced by that body,
// recursively. Throws kiln::Error for bodies nested too deep or grown too large.
std::vector<SourceNode> expand_functions(const onnx::ModelProto& model, int64_t opset,
                                         const std::function<bool(const onnx::NodeProto&)>& native);
// The op types of the default domain with a function body (Kiln's own, for some op types ONNX
// defines without one, and ONNX's schemas'), and the op types one of them uses at `opset` (empty
// where it has none).
std::vector<std::string> function_op_type_names();
std::vector<std::string> function_body_op_types(const std::string& op_type, int64_t opset);

}  // namespace kiln::graph::detail
