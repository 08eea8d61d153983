// fuse-attention's rewrites of packed projections and window masks (attention_heads.cpp), each a
// RewriteFn anchored at node i (rewrite_util.h), and the GPU rule the pass fuses by.
#pragma once

#include <vector>

#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {

// GPU targets fuse only where the tensor-core kernel runs (fuse_attention.cpp).
bool gpu_runs_fast(DataType t, int64_t d, int64_t dv, const BuildOptions& o);

// An Attention over heads taken out of nn.MultiheadAttention's packed projection ([s, b, 3E] of x
// transposed) reads the projection packed; its output projection runs over [b, s, E] rows.
bool multihead_export_at(graph::Graph& g, size_t i, const GraphFacts& f, std::vector<char>& removed, Tally& tally);
// The same for heads taken out of a batch-first packed projection [b, s, 3E] (Swin) and merged
// back by Transpose + Reshape.
bool batch_first_packed_at(graph::Graph& g, size_t i, const GraphFacts& f, std::vector<char>& removed, Tally& tally);
// Swin's shifted-window mask added through a 5-D view of the scores joins the position bias as
// one constant mask. gpu: the GPU target's options, null for the CPU.
bool window_mask_at(graph::Graph& g, size_t i, const GraphFacts& f, std::vector<char>& removed, Tally& tally,
                    const BuildOptions* gpu);

}  // namespace kiln::passes
