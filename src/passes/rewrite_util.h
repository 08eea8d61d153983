// Helpers shared by the rewrite passes: float constants read and written in double precision, the
// use/producer facts a match looks at, a driver that applies one rewrite until nothing matches, and
// the removal of a node whose output equals its input.
//
// Rewrites never erase nodes while they run: a removed node is marked and emptied (no inputs, no
// outputs), so node indices stay valid and facts recomputed from the graph ignore it; the driver
// erases the marked nodes at the end.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace kiln::passes {

bool float_type(DataType t);  // float32, float64 or float16: the types whose constants the folds rewrite

// A constant's elements as doubles; empty if the value is not a float constant (see float_type).
std::vector<double> read_doubles(const graph::Value& v);
// v's elements stored as t (one of float_type).
std::vector<uint8_t> write_as(DataType t, const std::vector<double>& v);
int64_t numel(const std::vector<int64_t>& shape);

// The name `kiln inspect` shows for a node: the ONNX node(s) it came from.
std::string origin_of(const graph::Node& n);
// Whether n's optional input i is given.
inline bool has_input(const graph::Node& n, size_t i) { return i < n.inputs.size() && n.inputs[i] != graph::kNoValue; }
// The origin of one node doing the work of two, first and second in data-flow order: "conv1 + bn1".
std::string joined_origin(const graph::Node& first, const graph::Node& second);

// One view per input slot of n (absent_tensor() for omitted optional inputs). The views point into
// g.values: do not add values while they are in use.
std::vector<TensorView> input_views(const graph::Graph& g, const graph::Node& n);

struct GraphFacts {
  std::vector<int> uses;      // readers of each value, a graph output counting as one
  std::vector<int> producer;  // index of the node writing each value, -1 for graph inputs and constants
  explicit GraphFacts(const graph::Graph& g) : uses(g.use_counts()), producer(g.producers()) {}
  // Exactly one node reads v and v is not a graph output: a rewrite may change or drop v.
  bool only_read_once(const graph::Graph& g, graph::ValueId v) const {
    return uses[static_cast<size_t>(v)] == 1 && !g.is_graph_output(v);
  }
  // The index of the one node reading v when only_read_once(v), else -1.
  int only_reader(const graph::Graph& g, graph::ValueId v) const;
  // The node producing v when it is of kind k, else nullptr.
  const graph::Node* producer_of(const graph::Graph& g, graph::ValueId v, OpKind k) const;
};

// The value of a numeric constant with one element (any rank).
bool scalar_constant(const graph::Value& v, double& out);

// Marks node i removed and disconnects it (see the file comment).
void remove_node(graph::Graph& g, size_t i, std::vector<char>& removed);

// A rewrite anchored at node i: changes the graph and returns true, or returns false having changed
// nothing. It may remove nodes (remove_node) and add values, but not add nodes.
using RewriteFn = std::function<bool(graph::Graph& g, size_t i, const GraphFacts& facts, std::vector<char>& removed)>;

// Offers every live node to `rewrite` until a whole sweep changes nothing; the facts are recomputed
// after each change. Erases the removed nodes. Returns the number of rewrites.
int rewrite_until_done(graph::Graph& g, const RewriteFn& rewrite);

// Node i's output `out` always equals its input `in` (same dtype, shape and elements): drops node i.
// Readers of `out` read `in`; when `out` is a graph output, `in`'s producer writes `out` instead so
// that the output keeps its name. Returns false, changing nothing, when that is impossible (`out` is
// a graph output and `in` a graph input, a constant, or a graph output as well).
bool bypass(graph::Graph& g, size_t i, graph::ValueId in, graph::ValueId out, const GraphFacts& facts,
            std::vector<char>& removed);

// Transpose's permutation for a given rank (an empty attribute reverses the axes).
std::vector<int64_t> resolved_perm(const TransposeAttrs& a, size_t rank);
// The permutation moves no axis longer than 1 past another: the elements stay in memory order, so
// when the output shape equals the input's, the Transpose is a copy.
bool perm_keeps_order(const std::vector<int64_t>& perm, const std::vector<int64_t>& in_shape);

// Counts rewrites by kind for PassResult::detail: "Reshape 2, Cast 1".
class Tally {
 public:
  void add(const std::string& label) { ++counts_[label]; }
  std::string str() const;

 private:
  std::map<std::string, int> counts_;
};

}  // namespace kiln::passes
