// ONNX -> Graph. Opsets 7 to 21 of the default domain (older ones where their semantics are
// covered). Older forms are rewritten to the newest (attributes that became inputs become constant
// inputs), so the rest of Kiln sees one form per op. Every problem is collected, and one
// kiln::Error names each unsupported op type with the nodes that use it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>

#include "graph/graph.h"

namespace kiln::graph {

inline constexpr int64_t kMinOpset = 6;
inline constexpr int64_t kMaxOpset = 21;

// Reads a model file; external data files are looked up next to it.
Graph import_onnx(const std::filesystem::path& path);
// Parses a model held in memory. `origin` names it in messages; external data is resolved against
// base_dir (empty: external data is refused).
Graph import_onnx_bytes(std::span<const uint8_t> bytes, const std::string& origin,
                        const std::filesystem::path& base_dir);

}  // namespace kiln::graph
