// The smallest service: load an engine, run it on zeros, print the outputs' sizes.
// Links kiln::runtime only (no protobuf, no ONNX).
//   run_engine model.kiln
#include <kiln/engine.h>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MODEL.kiln\n", argv[0]);
    return 2;
  }
  try {
    std::shared_ptr<const kiln::Engine> engine = kiln::Engine::load(argv[1]);
    std::unique_ptr<kiln::Context> ctx = engine->create_context();
    std::vector<std::vector<std::byte>> inputs;
    for (const kiln::TensorInfo& in : engine->inputs()) {
      inputs.emplace_back(in.bytes());
      ctx->set_input(in.name, inputs.back().data(), inputs.back().size());
    }
    ctx->run();
    for (const kiln::TensorInfo& out : engine->outputs())
      std::printf("%s: %s%s, %zu bytes\n", out.name.c_str(), std::string(kiln::dtype_name(out.dtype)).c_str(),
                  kiln::shape_string(out.shape).c_str(), ctx->output(out.name).size());
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
