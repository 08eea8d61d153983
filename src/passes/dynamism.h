// For infer-and-fold (decision 56): which dimensions of a value of data-dependent shape vary from
// run to run, and which elements of a small value computed from such shapes are the same in every
// run. A value all of whose elements are the same in every run is a constant after all (a Squeeze
// guarded by `x.shape[1] == 1` on x [n, 1]), and folds. Rules per op; an op without one makes every
// output dimension vary and no element known, which is always safe.
#pragma once

#include <unordered_map>
#include <vector>

#include "core/shape_infer.h"
#include "graph/graph.h"

namespace kiln::passes {

class Dynamism {
 public:
  // dd: the pass's per-value flags of data-dependent shape or value (Graph::data_dependent()).
  Dynamism(const graph::Graph& g, const std::vector<bool>& dd) : g_(g), dd_(dd) {}

  // Per dimension of v: whether it varies between runs.
  std::vector<char> dims(graph::ValueId v) const;
  // Per element of v: whether it is the same in every run (a constant's all are).
  std::vector<char> known(graph::ValueId v) const;

  // After node n was inferred (ins: its input views, with the bound's values where there are;
  // types: its outputs'): records its outputs' varying dimensions and, for the outputs in `values`
  // (their values at the bound), their known elements. Returns the outputs whose every element is
  // known.
  std::vector<graph::ValueId> update(const graph::Node& n, const std::vector<TensorView>& ins,
                                     const std::vector<OutputType>& types,
                                     const std::unordered_map<graph::ValueId, std::vector<uint8_t>>& values);

 private:
  std::vector<char> out_dims(const graph::Node& n, const std::vector<TensorView>& ins, size_t k, size_t rank) const;
  std::vector<char> out_known(const graph::Node& n, const std::vector<TensorView>& ins, size_t k,
                              const std::vector<OutputType>& types) const;
  bool fully_known(graph::ValueId v) const;

  const graph::Graph& g_;
  const std::vector<bool>& dd_;
  std::unordered_map<graph::ValueId, std::vector<char>> dims_, known_;
};

}  // namespace kiln::passes
