// One plan of an engine, ready to run on one device: the CPU (cpu/cpu_runner.h) or a GPU
// (cuda/gpu_context.h). kiln::Context holds one per plan (a range engine has one per bucket, all
// sharing one activation arena) and forwards to the plan its current shapes run on. Internal to
// the runtime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/engine.h"

namespace kiln::detail {

class PlanRunner {
 public:
  virtual ~PlanRunner() = default;

  // i: the index among the engine's inputs / outputs. `device`: p is device memory (GPU only).
  virtual void bind_input(size_t i, const void* p, bool device) = 0;
  virtual void bind_output(size_t i, void* p, bool device) = 0;
  // The shapes of the caller's inputs and outputs from now on: the plan's own, or smaller on axes
  // whose rows are independent (a range engine between buckets). The runner then pads the inputs
  // with zeros to the plan's shapes and gives the outputs' leading corner at these shapes. May
  // allocate; run and enqueue do not.
  virtual void set_io_shapes(const std::vector<std::vector<int64_t>>& in,
                             const std::vector<std::vector<int64_t>>& out) = 0;
  virtual void enqueue(CUstream_st* stream) = 0;  // CPU: runs
  virtual void run() = 0;                         // GPU: enqueue on the context's own stream, wait, check()
  virtual void check() = 0;
  // An output at its set shape after a run: the bound host buffer, or the runner's own; null if
  // bound to device memory.
  virtual const std::byte* host_output(size_t i) const = 0;
  virtual const void* device_output(size_t i) const = 0;  // GPU: where output i lies on the device
  // An output of data-dependent shape (decision 56): its shape in the last run (on a GPU, once the
  // stream has finished it); null for the others, whose shape is the one set.
  virtual const std::vector<int64_t>* run_output_shape(size_t i) const = 0;
  virtual std::vector<StepTime> step_times() = 0;
  virtual bool whole_network() const { return false; }  // GPU: the engine runs as one kernel
  virtual size_t side_steps() const { return 0; }       // GPU: steps on the side stream
  virtual bool mapped_io() const { return false; }      // GPU: host inputs/outputs used in place
};

}  // namespace kiln::detail
