// Writes a verified, fully typed graph as an engine file (layout in runtime/engine_format.h).
#pragma once

#include <string>
#include <vector>

#include "build/build.h"
#include "build/view_plan.h"

namespace kiln::build {

// Writes p: its graph's nodes as the steps, its views as tensors with a base. tactics: per node, the
// GPU implementation chosen by timing (-1 or missing: the kernel's default).
std::vector<uint8_t> write_engine(const EngineProgram& p, const std::string& target,
                                  const std::vector<int32_t>& tactics, BuildReport* report);

}  // namespace kiln::build
