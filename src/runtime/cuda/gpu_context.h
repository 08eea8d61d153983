// GPU execution of one plan of an engine (runtime/plan_runner.h): what kiln::Context does for
// engines built for a GPU. Internal to the runtime. In a build without CUDA, make_gpu_runner throws.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "kiln/engine.h"
#include "runtime/plan_runner.h"

namespace kiln::detail {
struct EngineImpl;
}

namespace kiln::gpu {

// A runner for plan `e`: checks the device (present, same architecture as the engine), uploads
// the weights if needed and allocates everything it will use. `shared`: what the plans of one
// context share (the activation arena of arena_bytes, at least e's, the streams, library handles
// and workspaces), made by its first plan and grown by the others. Throws kiln::Error.
std::unique_ptr<detail::PlanRunner> make_gpu_runner(const detail::EngineImpl& e, const ContextOptions& options,
                                                    std::shared_ptr<void>* shared, size_t arena_bytes);

}  // namespace kiln::gpu
