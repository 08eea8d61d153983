// Kiln's graph IR: Nodes over Values. Every value has a dtype and (once shapes are inferred) a
// fixed shape; constant values hold their data. Op kinds and attributes are typed (core/op_kind.h,
// core/attrs.h); strings exist only at the ONNX boundary.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/attrs.h"
#include "core/op_kind.h"
#include "core/tensor.h"

namespace kiln::graph {

using ValueId = int32_t;
inline constexpr ValueId kNoValue = -1;  // an omitted optional input

struct Value {
  std::string name;
  DataType dtype = DataType::kFloat32;
  // Dimensions; -1 marks a dimension not known yet (a symbolic one, named in dim_params).
  std::vector<int64_t> shape;
  std::vector<std::string> dim_params;  // same length as shape when symbolic dims exist, "" otherwise
  bool has_shape = false;               // false: even the rank is unknown
  // Constant data (initializers and folded values): numel * dtype_size bytes. Null otherwise.
  std::shared_ptr<const std::vector<uint8_t>> data;

  bool is_constant() const { return data != nullptr; }
  bool shape_static() const;
  TensorView view() const;  // data may be null
};

struct Node {
  std::string name;
  OpKind kind = OpKind::kIdentity;
  Attrs attrs;
  std::vector<ValueId> inputs;  // kNoValue for an omitted optional input
  std::vector<ValueId> outputs;
  std::string origin;  // the ONNX node(s) it came from, e.g. "conv1 + bn1"
};

class Graph {
 public:
  std::string name;
  std::vector<Value> values;
  std::vector<Node> nodes;  // in topological order
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  // The nodes of ONNX If branches (graph/onnx_if.cpp), by node name: the conditions that take them,
  // outermost first, each with the value that runs the branch. infer-and-fold drops the nodes of
  // branches whose condition folds to the other value (without inferring them) and clears this;
  // the rest run whichever way the condition goes (decision 56).
  std::map<std::string, std::vector<std::pair<ValueId, bool>>> branches;

  ValueId add_value(Value v);
  ValueId add_constant(std::string name, DataType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  ValueId find(const std::string& name) const;  // kNoValue if absent
  Value& value(ValueId id) { return values.at(static_cast<size_t>(id)); }
  const Value& value(ValueId id) const { return values.at(static_cast<size_t>(id)); }
  // Gives a value a new name (must be unused).
  void rename(ValueId id, const std::string& name);
  // A fresh value name that starts with `base`.
  std::string unique_name(const std::string& base);
  bool is_graph_output(ValueId id) const;
  // Number of node inputs (plus graph outputs) that read each value.
  std::vector<int> use_counts() const;
  // Index of the node producing each value, -1 for graph inputs and constants.
  std::vector<int> producers() const;
  // Per value: whether its shape (or, for a shape's value, its value) is known only at run time
  // (decision 56): output 0 of a data-dependent op (OpTrait kDataDependent), every output of one
  // whose shapes follow values (kShapeFromData), and every output of a node that reads one.
  std::vector<bool> data_dependent() const;

 private:
  std::unordered_map<std::string, ValueId> by_name_;
  int64_t name_counter_ = 0;
};

// Checks the IR invariants: nodes in topological order, every value defined once, every node input
// defined before use, arities and attribute kinds as in the op table, constants sized to their
// shapes, and (when require_shapes) every value has a static shape. Throws kiln::Error listing every
// problem found, each naming the node or value.
void verify(const Graph& g, bool require_shapes);

}  // namespace kiln::graph
