// libFuzzer target for the ONNX importer and the builder: any byte string given to
// import_onnx_bytes (with no base directory, so external data is not read) must import or throw
// kiln::Error; a graph that imports must build or throw kiln::Error; and an engine that
// build_engine wrote must load, since the builder and the loader check the same rules. Crashes,
// sanitizer reports, other exceptions and timeouts are bugs.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "graph/onnx_import.h"
#include "kiln/engine.h"
#include "build/build.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::graph::Graph g;
  try {
    g = kiln::graph::import_onnx_bytes(std::span<const uint8_t>(data, size), "fuzz.onnx", "");
  } catch (const kiln::Error&) {
    return 0;
  }
  std::vector<uint8_t> engine;
  try {
    engine = kiln::build::build_engine(g, kiln::build::BuildOptions{});
  } catch (const kiln::Error&) {
    return 0;
  }
  // The builder's output must pass the loader's checks; a kiln::Error here is a bug too.
  kiln::Engine::from_bytes(engine, "built.kiln");
  return 0;
}
