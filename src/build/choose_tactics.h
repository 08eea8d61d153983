// GPU kernel choice by timing on the device ("tactics"), with an optional timing cache file.
#pragma once

#include <cstdint>
#include <vector>

#include "build/build.h"
#include "build/close_calls.h"

namespace kiln::build {

// Per node of g (final, fully typed): the fastest tactic of its GPU kernel on this GPU, or -1 (one
// implementation, or a CPU target). Reads and updates options.timing_cache when set. Where `write`
// is given, close calls between the tactics timed alone are decided by timing engines it writes
// (close_calls.h); the cache then holds the engine's choice.
std::vector<int32_t> choose_tactics(const graph::Graph& g, const BuildOptions& options,
                                    const EngineWriter& write = {});

}  // namespace kiln::build
