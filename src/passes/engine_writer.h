// Writes a verified, fully typed graph as an engine file (layout in runtime/engine_format.h).
#pragma once

#include <string>
#include <vector>

#include "passes/build.h"

namespace kiln::passes {

std::vector<uint8_t> write_engine(const graph::Graph& g, const std::string& target, BuildReport* report);

}  // namespace kiln::passes
