// Kiln runtime API: load an engine file, check it, run it.
//
//   auto engine = kiln::Engine::load("model.kiln");          // throws kiln::Error if damaged/foreign
//   auto ctx = engine->create_context();                      // one per thread
//   ctx->set_input("input", image.data(), image.size() * sizeof(float));
//   ctx->run();
//   std::span<const std::byte> logits = ctx->output("logits");
//
// An Engine is immutable after load and may be shared by any number of threads. A Context holds the
// activation memory of one inference at a time; use one Context per thread.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/types.h"

namespace kiln {

namespace detail {
struct EngineImpl;
}

class Context;

// What `kiln inspect` shows about one step of an engine.
struct StepInfo {
  std::string op;                   // ONNX op type, e.g. "Conv"
  std::string name;                 // node name(s) it came from
  std::string attrs;                // attributes that differ from their defaults
  std::vector<std::string> inputs;  // tensor names ("" for an omitted optional input)
  std::vector<std::string> outputs;
};

struct EngineSummary {
  uint32_t format_version = 0;
  std::string producer;  // the Kiln that built it, e.g. "kiln 0.1.0"
  std::string target;    // "cpu" or a GPU architecture such as "sm_90"
  std::string model_name;
  size_t weight_bytes = 0;      // constant data
  size_t arena_bytes = 0;       // activation memory of one Context (planned: tensors share memory)
  size_t activation_bytes = 0;  // sum of all activation sizes, without sharing
  size_t file_bytes = 0;
  std::vector<StepInfo> steps;
};

class Engine : public std::enable_shared_from_this<Engine> {
 public:
  // Reads and verifies an engine file: magic, format version, checksum, table of contents, and that
  // every step's recorded shapes are what its op computes. Throws kiln::Error saying what is wrong.
  static std::shared_ptr<const Engine> load(const std::filesystem::path& path);
  // Same, from bytes in memory (copied). `origin` names the engine in error messages.
  static std::shared_ptr<const Engine> from_bytes(std::span<const uint8_t> bytes, std::string_view origin = "engine");

  const std::vector<TensorInfo>& inputs() const;
  const std::vector<TensorInfo>& outputs() const;
  EngineSummary summary() const;

  // A context to run the engine; `threads` CPU threads (0: all cores).
  std::unique_ptr<Context> create_context(int threads = 0) const;

  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

 private:
  explicit Engine(std::shared_ptr<detail::EngineImpl> impl);
  std::shared_ptr<detail::EngineImpl> impl_;
  friend class Context;
};

class Context {
 public:
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Binds an input to caller memory (not copied; it must stay valid until run() returns). `bytes`
  // must equal the input's size; a wrong name or size throws kiln::Error naming the input and what
  // was expected.
  void set_input(std::string_view name, const void* data, size_t bytes);
  // Optionally binds an output to caller memory; otherwise output() returns the context's own.
  void set_output(std::string_view name, void* data, size_t bytes);
  // Runs the engine synchronously. Throws kiln::Error if an input is unbound or a kernel fails
  // (e.g. a Gather index out of range), naming the step.
  void run();
  // An output's bytes after run(): the bound buffer if set_output was used.
  std::span<const std::byte> output(std::string_view name) const;

  const Engine& engine() const { return *engine_; }

 private:
  friend class Engine;
  struct State;
  Context(std::shared_ptr<const Engine> engine, int threads);
  std::shared_ptr<const Engine> engine_;
  std::unique_ptr<State> state_;
};

// The format version this runtime reads and writes; the Kiln version string.
uint32_t engine_format_version();
std::string_view kiln_version();

}  // namespace kiln
