// Timing whole engines, for the builder's decisions that a layer timed alone cannot make: the
// INT8-or-float choice of GPU and CPU builds (`--int8` means "INT8 where a fast INT8 kernel
// exists", so the builder times the INT8 engine against the build without INT8 and keeps the faster
// one, unless BuildOptions::force_int8), and the close calls between tactics (choose_tactics.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace kiln::build {

// An engine ready to be timed on kiln bench's inputs (build/sample_inputs.h), after a few warm-up
// runs: a GPU engine in a CUDA graph on device buffers, timed with CUDA events (no host copies); a
// CPU engine by the wall time of Context::run().
class TimedEngine {
 public:
  explicit TimedEngine(std::span<const uint8_t> engine);
  ~TimedEngine();
  TimedEngine(const TimedEngine&) = delete;
  TimedEngine& operator=(const TimedEngine&) = delete;

  // The median time in ms of `runs` inferences.
  double median_ms(int runs);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The median of v (the upper one of an even count); v must not be empty.
double median(std::vector<double> v);

// The median time in ms of one inference of the engine (TimedEngine).
double median_run_ms(std::span<const uint8_t> engine, int runs = 20);

}  // namespace kiln::build
