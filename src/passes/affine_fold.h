// Folding a per-channel affine map into the node that computes its input, shared by fold-batchnorm
// and fold-scale-shift. With y = P(x) and z = y * scale[c] + shift[c] along P's output channel axis,
// P's weights and bias are rewritten so that P computes z itself:
//   Conv             W [M, C/g, k...] * scale per output channel m; B' = B * scale + shift
//   ConvTranspose    W [C, M/g, k...]: output channel (ci / (C/g)) * (M/g) + j scales W[ci, j]
//   Gemm             B' = B * scale by column n; C' = beta * C * scale + shift, beta 1
//   MatMul, constant 2-D B [K, N]: B' = B * scale by column; a non-zero shift turns a 2-D MatMul
//                    into Gemm(A, B', shift), and cannot be folded into a MatMul of more dims
// Arithmetic is in double; new constants are created (the old ones may be shared), named
// "<old>_<suffix>", and the old ones are dropped from the engine when unused.
#pragma once

#include <vector>

#include "passes/rewrite_util.h"

namespace kiln::passes {

// The channel axis of P's output, or -1 when P is not a node fold_affine_into can change.
int64_t output_channel_axis(const graph::Graph& g, const graph::Node& p);

// Makes node p write z = affine(y) into `z` (the consumer's output), where y is p's only output,
// and names it "p + consumer". scale and shift hold one value per output channel. Returns false,
// changing nothing, unless: y is float (see float_type) with a static shape, read by the consumer
// only and not a graph output; W (and the bias, when present) are constants of y's type.
bool fold_affine_into(graph::Graph& g, size_t p, const std::vector<double>& scale, const std::vector<double>& shift,
                      graph::ValueId z, const graph::Node& consumer, const GraphFacts& facts, const char* suffix);

}  // namespace kiln::passes
