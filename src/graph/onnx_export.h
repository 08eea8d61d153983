// Graph -> ONNX. Writes a ModelProto at opset 21 of the default domain (the one form per op that
// the importer normalizes to), so that an imported model can be handed back to ONNX tooling, e.g.
// after Kiln's graph passes. Attributes are written generically from each struct's kFields; only
// those an op defines and that differ from its ONNX default (or that ONNX requires) are written.
// Kiln-internal attributes never reach the file: legacy 2-D Softmax/LogSoftmax/Hardmax become an
// equivalent Flatten / op / Reshape subgraph. Value names are preserved.
#pragma once

#include <filesystem>
#include <string>

#include "graph/graph.h"

namespace kiln::graph {

inline constexpr int64_t kExportOpset = 21;
inline constexpr int64_t kExportIrVersion = 10;

// Writes g to `path`; throws kiln::Error when g cannot be expressed in ONNX or the file cannot be
// written.
void export_onnx(const Graph& g, const std::filesystem::path& path);
// The serialized ModelProto.
std::string export_onnx_bytes(const Graph& g);

}  // namespace kiln::graph
