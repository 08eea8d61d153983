// Views: values that live inside another activation's memory instead of having their own, so that
// the step that would copy them disappears. Three stages decide them after the passes, each switched
// off by name like a pass (--disable-pass):
//   view-reshapes     Reshape, Flatten, Squeeze, Unsqueeze, Identity, and a Transpose that keeps the
//                     order of the axes longer than 1: the output is the input's bytes under another
//                     shape; no step.
//   eliminate-concat  a Concat whose inputs are contiguous slices of its output (the dims before the
//                     axis multiply to 1: a channel concat at batch 1, any concat on axis 0): each
//                     input's producer writes straight into its slice.
//   eliminate-split   a Split whose outputs are contiguous slices of its input: they become views.
// The stages run on a copy of the optimized graph (which stays a plain dataflow graph that verify()
// accepts); the result, EngineProgram, is what the engine writer writes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "build/build.h"
#include "graph/graph.h"
#include "passes/view_rules.h"

namespace kiln::build {

using passes::contiguous_slices;
using passes::kViewStages;
using passes::view_alignment;

// What the engine runs: the graph's nodes less those whose outputs became views, plus at most one
// Identity step per eliminated Concat or Split for a slice that could not be a view, and where every
// value lives.
struct EngineProgram {
  graph::Graph graph;                // its nodes are the engine's steps, in order
  std::vector<graph::ValueId> root;  // per value: the value whose memory it lies in (itself: its own)
  std::vector<uint64_t> offset;      // per value: bytes from the start of its root
  std::vector<PassReport> stages;    // what each stage changed, in kViewStages order (disabled ones left out)
};

// Decides the views of g (fully typed, after the passes) for options.target, skipping the stages
// named in options.disabled_passes. Deterministic: one walk over the nodes in order.
EngineProgram plan_views(const graph::Graph& g, const BuildOptions& options);

}  // namespace kiln::build
