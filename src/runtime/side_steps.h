// Side steps: steps that run on a second stream beside the main one.
//
// A GPU context runs an engine's steps in order on one stream. A step whose inputs were all ready a
// few steps before it (ResNet's downsample convolution reads its block's input, as the block's first
// layer does) can instead start on a second stream right after the last main-stream step it needs,
// and overlap the steps in between. At batch 1 a layer fills a fraction of the GPU, so the two run
// side by side; at large batch they share it.
//
// find_side_steps decides from the steps' reads and writes alone. Running a step beside others also
// needs their memory apart: the builder keeps a side step's tensors alive across its window in the
// memory plan (engine_writer.cpp), and a context passes the tensors' arena bytes, so that a step
// whose bytes meet those of a step it would overlap stays on the main stream. An engine planned
// without side steps thus runs in order, as before.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::detail {

struct EngineImpl;

struct StepIo {
  std::vector<int32_t> reads, writes;  // tensor ids of the activations and outputs it reads and writes
};

// Where tensors live, for the decision. root[t]: the tensor whose memory t lies in (itself unless a
// view); tensors that share a root are ordered as one. pinned[t]: only the main stream may write it
// (an engine output, which may lie in the caller's memory).
struct TensorPlace {
  std::vector<int32_t> root;
  std::vector<bool> pinned;
  // Optional: each tensor's bytes [lo, hi) in the arena (lo == hi: none). With them, a side step
  // is kept only if its bytes meet no bytes of a main-stream step it may overlap (read-read aside).
  std::vector<std::pair<uint64_t, uint64_t>> bytes;
};

struct SideStep {
  int step = 0;
  int fork = -1;  // the main-stream step after which it may start (-1: the start of the run); never
                  // before the previous side step's, since the side stream runs them in order
  int join = 0;   // the first main-stream step that waits for it (the number of steps: the end)
};

// The side steps, in step order (one side stream, so they run in that order too). A step goes to
// the side when the last main-stream step it depends on is at least two steps before it, with at
// least one main-stream step in between, and it writes no pinned tensor (nor a view of one). Each
// main-stream step waits for the side steps whose tensors it touches; main_waits[k] is the index
// in the result of the last one step k waits for (-1: none). A side step depends on the main steps
// before it that write what it reads, or read or write what it writes.
std::vector<SideStep> find_side_steps(const std::vector<StepIo>& steps, const TensorPlace& place,
                                      std::vector<int>* main_waits = nullptr);

// An engine's side steps, with its tensors' arena bytes (what a GPU context runs).
std::vector<SideStep> engine_side_steps(const EngineImpl& e, std::vector<int>* main_waits = nullptr);

}  // namespace kiln::detail
