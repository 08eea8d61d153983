// kiln_export_tool IN.onnx OUT.onnx: imports a model and exports it again at opset 21, for the
// round-trip test (tests/python/export_roundtrip_test.py). Exit codes tell the test why it stopped:
// 2 when Kiln's importer rejects the model (skipped there), 1 when the export fails (a test failure).
#include <cstdio>
#include <exception>

#include "graph/onnx_export.h"
#include "graph/onnx_import.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: kiln_export_tool IN.onnx OUT.onnx\n");
    return 64;
  }
  kiln::graph::Graph g;
  try {
    g = kiln::graph::import_onnx(argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "import failed: %s\n", e.what());
    return 2;
  }
  try {
    kiln::graph::export_onnx(g, argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "export failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
