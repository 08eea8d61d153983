// Close calls between tactics, decided in the whole engine.
//
// choose_tactics.cpp times each layer alone, its launches back to back in a CUDA graph. In the
// engine the layer follows another kernel, with its inputs where that kernel left them, and two
// tactics that tie alone can differ there: ResNet-50's three 64 -> 256 convolutions of layer1 at
// batch 1 timed 3.2 us alone with tactics 2101 and 2113, yet the engine with 2101 ran 6 us longer
// (bench/RESULTS.md, session 21), and which of the two a build took changed from build to build.
// So where another tactic comes within kClose of the fastest alone, the builder times the engine
// with it against the engine as chosen, and keeps the faster. What differs in the engine is mostly
// the start and end of a kernel (the overlap of dependent launches, the caches the kernel before
// left), a large share of a layer of a few microseconds and less of a long one, so a long layer
// (over kShortLayerMs alone) is a close call only where a rival comes within kCloseLong: the ties
// of ResNet-50's six 256 -> 1024 layers at batch 256 (tiles 2111 and 2112: 0.0667 and 0.0670 ms
// alone) took 0.082 and 0.073 ms in the engine (bench/RESULTS.md, session 24), while a 10% margin
// there made calls of most layers and added 9 s to a 47 s build.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::build {

// A tactic within this fraction of the fastest, timed alone, is a rival.
constexpr double kClose = 0.10;
// Layers timed alone at more than this (ms) are long: a rival must come within kCloseLong.
constexpr double kShortLayerMs = 0.02;
constexpr double kCloseLong = 0.01;

struct CloseCall {
  std::string key;            // the timing-cache key its nodes share (one tactic for all of them)
  std::vector<size_t> nodes;  // the nodes of the graph with that key
  int32_t chosen = -1;        // the fastest alone, then the one the engine timing keeps
  double chosen_ms = 0;       // chosen's time alone, per launch
  std::vector<std::pair<int32_t, double>> rivals;  // (tactic, ms alone) within kClose, fastest first
  std::string verdict;        // what the engine timing found, for -v and the timing cache
  bool decided = false;       // every rival was timed in the engine (not: budget spent, a failure)
};

// The close call of one timing-cache key whose candidates were timed alone (`timed`: tactic, ms per
// launch), `best` the fastest at best_ms: the other candidates within kClose of it, or kCloseLong
// for a long layer, at most two, the fastest first. No rivals where none came close (or best < 0).
CloseCall close_call(const std::string& key, int32_t best, double best_ms,
                     std::vector<std::pair<int32_t, double>> timed);

// Writes the engine of the graph with one tactic per node.
using EngineWriter = std::function<std::vector<uint8_t>(const std::vector<int32_t>&)>;

// Decides the calls, the most layer time first: for each rival, the engine with it against the engine
// as chosen so far (`tactics`), timed in alternating rounds (for a short layer again in new
// contexts, up to three pairs, while the difference is under 1%), keeping the rival where its
// engine is faster by more than 0.3% on average. Updates `tactics` and each call's chosen, verdict
// and decided. Calls left when budget_s has passed, and calls of long layers once they have taken
// long_budget_s, keep the choice made alone. An engine that cannot be built or run leaves the
// choice as it was (the verdict says why); if the engine as chosen then cannot be made again,
// the calls left keep their choices made alone.
void decide_in_engine(std::vector<CloseCall>& calls, std::vector<int32_t>& tactics, const EngineWriter& write,
                      double budget_s, double long_budget_s);

}  // namespace kiln::build
