// Whether a graph treats the slices of its inputs along a ranged dimension (the batch)
// independently: every row of every output is computed from the same row of the inputs alone.
// Then a range engine may pad a request to its bucket with zero rows and slice the outputs, and
// the rows it returns equal the bucket's fixed engine's (docs/decisions/55-shape-ranges.md).
#pragma once

#include <map>
#include <string>

#include "graph/graph.h"

namespace kiln::build {

struct RowAxes {
  // Empty when the rows are independent; else why not, naming the first node that mixes rows or
  // whose rule Kiln does not know (an unknown op counts as mixing: the answer errs on the safe side).
  std::string why_not;
  // When independent: each graph output's axis of rows, -1 for an output the same for every row.
  std::map<graph::ValueId, int> outputs;
};

// `inputs`: for each graph input that carries the dimension, its axis. The graph's shapes must be
// static, at a size of the dimension above 1 (the builder analyses its largest bucket).
RowAxes row_axes(const graph::Graph& g, const std::map<graph::ValueId, int>& inputs);

}  // namespace kiln::build
