// Writes a verified, fully typed graph as an engine file (layout in runtime/engine_format.h).
#pragma once

#include <string>
#include <vector>

#include "passes/build.h"

namespace kiln::passes {

// tactics: per node, the GPU implementation chosen by timing (-1 or missing: the kernel's default).
std::vector<uint8_t> write_engine(const graph::Graph& g, const std::string& target, const std::vector<int32_t>& tactics,
                                  BuildReport* report);

}  // namespace kiln::passes
