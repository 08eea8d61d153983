// Shared by the ONNX importer's files; not part of the graph library's interface.
#pragma once

#include <onnx/onnx_pb.h>

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

// Kiln's own function bodies (onnx_kiln_bodies.cpp), for op types ONNX defines without one, keyed
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

 private:
  std::map<std::string, std::vector<std::string>> seqs_;  // "" for an element known only at run time
  int counter_ = 0;
};

// The nodes that replace a Scan node whose scan length is known from g's shapes: a copy of its body
// per step (onnx_scan.cpp). `counter` numbers the names it makes. Throws kiln::Error otherwise.
std::vector<SourceNode> unroll_scan(const SourceNode& sn, const Graph& g, int& counter);

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
