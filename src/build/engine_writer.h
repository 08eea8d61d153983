// Writes a verified, fully typed graph as an engine file (layout in runtime/engine_format.h).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "build/build.h"
#include "build/view_plan.h"

namespace kiln::build {

// Writes p: its graph's nodes as the steps, its views as tensors with a base. tactics: per node, the
// GPU implementation chosen by timing (-1 or missing: the kernel's default).
std::vector<uint8_t> write_engine(const EngineProgram& p, const std::string& target,
                                  const std::vector<int32_t>& tactics, BuildReport* report);

// An engine file: the header, the table of contents `toc` (a finished fb::Engine flatbuffer) and
// the weight blob, laid out as runtime/engine_format.h says, with its checksum.
std::vector<uint8_t> engine_file(std::span<const uint8_t> toc, const std::vector<uint8_t>& weights);

}  // namespace kiln::build
