// The builder: Graph -> optimized Graph (the rewrites of src/passes, then the build stages here) ->
// engine file bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "build/options.h"
#include "graph/graph.h"

namespace kiln::build {

struct PassReport {
  std::string name;
  int changes = 0;
  std::string detail;
};

struct BuildReport {
  size_t nodes_in = 0;
  size_t nodes_out = 0;  // after the passes
  size_t steps = 0;      // in the engine: nodes_out less the nodes whose outputs became views (view_plan.h)
  std::vector<PassReport> passes;
  size_t engine_bytes = 0;
  size_t weight_bytes = 0;
  size_t arena_bytes = 0;
  size_t activation_bytes = 0;   // sum of all activation sizes (no sharing)
  size_t peak_live_bytes = 0;    // the most bytes live at once: the lower bound of any arena
  std::string precision_choice;  // INT8 builds: the timed INT8-or-float decision, for the user
  // Range engines: how many plans, and a line per range (its buckets, whether rows are padded).
  // The fields above are the largest bucket's, except engine_bytes and weight_bytes (the file's).
  size_t plans = 1;
  std::vector<std::string> ranges;
  // GPU builds: the most device memory Kiln's buffers held at once (test buffers, workspaces, the
  // engines timed; the CUDA context and library handles not counted: device_memory.h), and what the
  // GPU had in use when the build began (those, and any other process's). The process's peak
  // resident host memory, whatever the target.
  size_t peak_device_bytes = 0, device_bytes_at_start = 0, peak_host_bytes = 0;
};

// Runs the pass pipeline on g (in place), then writes the engine.
std::vector<uint8_t> build_engine(graph::Graph& g, const BuildOptions& options, BuildReport* report = nullptr);

}  // namespace kiln::build
