// Read-only facts about a graph for passes that match patterns of nodes (fuse-epilogue): who reads
// and who writes each value, scalar constants, and whether a set of nodes can be replaced as a
// whole. Matching never mutates the graph; a pass collects its matches, marks their nodes claimed
// so that no two matches share a node, and rewrites afterwards.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "graph/graph.h"

namespace kiln::passes {

struct GraphIndex {
  explicit GraphIndex(const graph::Graph& graph);

  const graph::Graph& g;
  std::vector<std::vector<int>> readers;  // per value: the nodes reading it, once per input slot
  std::vector<int> producer;              // per value: the node writing it; -1 for inputs and constants
  std::vector<char> claimed;              // per node: part of a match already

  const graph::Node& node(int i) const { return g.nodes[static_cast<size_t>(i)]; }
  // The one node reading v (in one slot), unless v is also a graph output or that node is claimed; else -1.
  int sole_reader(graph::ValueId v) const;
  // The unclaimed node writing v if it is of `kind`, else -1.
  int producer_of_kind(graph::ValueId v, OpKind kind) const;
  // The value of a float constant with a single element (any rank).
  std::optional<double> scalar(graph::ValueId v) const;
};

// Whether `nodes` (fed by `in`, computing `out`) can be replaced by one node computing out from in:
// none is claimed, and `in` and every value they compute other than `out` are read only by them
// and are not graph outputs.
bool self_contained(const GraphIndex& ix, std::span<const int> nodes, graph::ValueId in, graph::ValueId out);

// v is within a relative distance tol of want.
bool near(double v, double want, double tol);

}  // namespace kiln::passes
