#include "passes/pattern.h"

#include <algorithm>
#include <cmath>

#include "passes/rewrite_util.h"

namespace kiln::passes {

GraphIndex::GraphIndex(const graph::Graph& graph)
    : g(graph), readers(graph.values.size()), producer(graph.producers()), claimed(graph.nodes.size(), 0) {
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (graph::ValueId v : g.nodes[i].inputs)
      if (v != graph::kNoValue) readers[static_cast<size_t>(v)].push_back(static_cast<int>(i));
}

int GraphIndex::sole_reader(graph::ValueId v) const {
  const std::vector<int>& r = readers[static_cast<size_t>(v)];
  if (r.size() != 1 || g.is_graph_output(v) || claimed[static_cast<size_t>(r[0])]) return -1;
  return r[0];
}

int GraphIndex::producer_of_kind(graph::ValueId v, OpKind kind) const {
  const int p = producer[static_cast<size_t>(v)];
  if (p < 0 || claimed[static_cast<size_t>(p)] || node(p).kind != kind) return -1;
  return p;
}

std::optional<double> GraphIndex::scalar(graph::ValueId v) const {
  if (v == graph::kNoValue) return std::nullopt;
  const std::vector<double> d = read_doubles(g.value(v));
  if (d.size() != 1) return std::nullopt;
  return d[0];
}

bool self_contained(const GraphIndex& ix, std::span<const int> nodes, graph::ValueId in, graph::ValueId out) {
  auto inside = [&](int n) { return std::find(nodes.begin(), nodes.end(), n) != nodes.end(); };
  auto read_inside_only = [&](graph::ValueId v) {
    if (ix.g.is_graph_output(v)) return false;
    const std::vector<int>& r = ix.readers[static_cast<size_t>(v)];
    return std::all_of(r.begin(), r.end(), inside);
  };
  if (!read_inside_only(in)) return false;
  for (int n : nodes) {
    if (ix.claimed[static_cast<size_t>(n)]) return false;
    for (graph::ValueId v : ix.node(n).outputs)
      if (v != graph::kNoValue && v != out && !read_inside_only(v)) return false;
  }
  return true;
}

bool near(double v, double want, double tol) { return std::abs(v - want) <= tol * std::abs(want); }

}  // namespace kiln::passes
