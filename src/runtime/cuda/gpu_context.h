// GPU execution of an engine: what kiln::Context does for engines built for a GPU. Internal to the
// runtime; context.cpp forwards to it. In a build without CUDA, create() throws.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "kiln/engine.h"

namespace kiln::detail {
struct EngineImpl;
}

namespace kiln::gpu {

class GpuContext {
 public:
  // Checks the device (present, same architecture as the engine), uploads the weights if needed and
  // allocates everything the context will use. Throws kiln::Error.
  static std::unique_ptr<GpuContext> create(const detail::EngineImpl& e, const ContextOptions& options);
  virtual ~GpuContext() = default;

  // i: the index among the engine's inputs / outputs. `device`: p is device memory.
  virtual void bind_input(size_t i, const void* p, bool device) = 0;
  virtual void bind_output(size_t i, void* p, bool device) = 0;
  virtual void enqueue(CUstream_st* stream) = 0;
  virtual void run() = 0;  // enqueue on the context's own stream, wait, check()
  virtual void check() = 0;
  virtual const std::byte* host_output(size_t i) const = 0;  // null if bound to device memory
  virtual const void* device_output(size_t i) const = 0;     // where output i lies on the device
  virtual std::vector<StepTime> step_times() = 0;
  virtual bool whole_network() const = 0;  // the engine runs as one kernel (whole_net.h)
  virtual size_t side_steps() const = 0;   // steps on the side stream (runtime/side_steps.h)
};

}  // namespace kiln::gpu
