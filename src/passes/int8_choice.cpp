// Timing an engine for the INT8-or-float choice of GPU builds (int8_choice.h).
#include "passes/int8_choice.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "kiln/engine.h"

namespace kiln::passes {

double median_run_ms(std::span<const uint8_t> engine, int runs) {
  const auto e = Engine::from_bytes(engine, "candidate engine");
  ContextOptions o;
  o.cuda_graph = true;
  auto ctx = e->create_context(o);
  // Zero inputs: the time of these networks does not depend on the values.
  std::vector<std::vector<uint8_t>> inputs;
  for (const TensorInfo& t : e->inputs()) {
    inputs.emplace_back(t.bytes(), 0);
    ctx->set_input(t.name, inputs.back().data(), inputs.back().size());
  }
  for (int i = 0; i < 3; ++i) ctx->run();
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    ctx->run();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

}  // namespace kiln::passes
