// Whether a range engine may pad its inputs along a ranged dimension with zeros and slice its
// outputs: the outputs' valid rows must not depend on the padding. True where every row is
// computed from the same row of the inputs alone (the batch of a CNN), and where rows meet only
// through attention whose padded keys an additive mask hides (a transformer's sequence with its
// padding mask). The rows then equal the bucket's fixed engine's bit for bit, and the exact
// shape's engine's within rounding (docs/decisions/55-shape-ranges.md).
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
// static, at a size of the dimension above 1 (the builder analyses its largest bucket). `smaller`:
// the same model bound and folded at a smaller size, to prove that constants which vary along the
// dimension (position embeddings, causal masks) are the same at every size: each smaller one is the
// larger's leading corner. Without it such constants count as mixing. `lo`: the range's smallest
// size (a Gather of positions below it reads valid rows at every size).
RowAxes row_axes(const graph::Graph& g, const std::map<graph::ValueId, int>& inputs,
                 const graph::Graph* smaller = nullptr, int64_t lo = 1);

}  // namespace kiln::build
