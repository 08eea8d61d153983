// libFuzzer target for the engine loader: any byte string given to Engine::from_bytes must either
// load or throw kiln::Error. An engine that loads must run (on zero-filled inputs) or throw
// kiln::Error: the loader promises that every recorded shape is what its op computes, so kernels
// never read or write out of bounds. Crashes, sanitizer reports, other exceptions and timeouts are
// bugs.
//
// Each input is tried twice: as given (header and checksum checks), and with its checksum fixed up,
// so that mutations reach the table-of-contents verifier and the semantic checks behind it instead
// of all stopping at the checksum.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "kiln/engine.h"
#include "runtime/engine_format.h"

namespace {

// Engines that would need more memory than this to run are loaded and checked, but not run: the
// format allows arenas of terabytes (activation memory is not stored in the file), and running one
// only measures the machine.
constexpr size_t kRunLimitBytes = size_t{64} << 20;

void load_and_run(std::span<const uint8_t> bytes) {
  std::shared_ptr<const kiln::Engine> engine;
  try {
    engine = kiln::Engine::from_bytes(bytes, "fuzz.kiln");
  } catch (const kiln::Error&) {
    return;  // rejecting a bad file is the expected outcome
  }
  kiln::EngineSummary s = engine->summary();
  size_t need = s.arena_bytes;  // a context's arena holds the largest plan's
  for (const kiln::BucketInfo& b : s.buckets) need = std::max(need, b.arena_bytes);
  for (const kiln::TensorInfo& t : engine->inputs()) need += t.bytes();
  if (need > kRunLimitBytes) return;
  try {
    std::unique_ptr<kiln::Context> ctx = engine->create_context(1);
    std::vector<std::vector<uint8_t>> inputs;
    for (const kiln::TensorInfo& t : engine->inputs()) {
      inputs.emplace_back(t.bytes(), 0);
      ctx->set_input(t.name, inputs.back().data(), inputs.back().size());
    }
    ctx->run();
    // Every output gives its run's bytes: the engine's shape, or less where it depends on the data.
    for (const kiln::TensorInfo& t : engine->outputs()) {
      const size_t bytes = ctx->output(t.name).size();
      if (bytes != kiln::TensorInfo{t.name, t.dtype, ctx->output_shape(t.name)}.bytes() || bytes > t.bytes())
        __builtin_trap();
    }
    // A range engine also runs at the bottom of its first range: its smallest plan, padded or not.
    if (!engine->ranges().empty()) {
      const kiln::ShapeRangeInfo& r = engine->ranges()[0];
      const auto& [name, axis] = r.inputs[0];
      std::vector<int64_t> dims = ctx->input_shape(name);
      dims[static_cast<size_t>(axis)] = r.pad_rows ? r.lo : r.buckets[0];
      ctx->set_input_shape(name, dims);
      for (size_t i = 0; i < engine->inputs().size(); ++i) {
        const kiln::TensorInfo& t = engine->inputs()[i];
        const kiln::TensorInfo now{t.name, t.dtype, ctx->input_shape(t.name)};
        ctx->set_input(t.name, inputs[i].data(), now.bytes());  // no larger than at the top
      }
      ctx->run();
      for (const kiln::TensorInfo& t : engine->outputs())
        if (ctx->output(t.name).size() != kiln::TensorInfo{t.name, t.dtype, ctx->output_shape(t.name)}.bytes())
          __builtin_trap();
    }
  } catch (const kiln::Error&) {
    // e.g. a Gather index out of range, or a kernel the CPU backend lacks
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  load_and_run({data, size});
  constexpr size_t kHeader = sizeof(kiln::format::EngineHeader);
  if (size < kHeader) return 0;
  std::vector<uint8_t> fixed(data, data + size);
  uint64_t sum = kiln::format::checksum(fixed);  // ignores the checksum field itself
  std::memcpy(fixed.data() + offsetof(kiln::format::EngineHeader, checksum), &sum, sizeof sum);
  if (std::memcmp(fixed.data(), data, kHeader) != 0) load_and_run(fixed);
  return 0;
}
