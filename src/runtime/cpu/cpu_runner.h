// CPU execution of one plan of an engine (runtime/plan_runner.h). It resolves every step's tensor
// views once; a run only patches the caller-bound input/output pointers (and the plan's views,
// which follow their base: a view of an output lies in the caller's buffer when it is bound) and
// calls the kernels in order.
#pragma once

#include <cstddef>
#include <memory>

#include "runtime/plan_runner.h"

namespace kiln::cpu {
class ThreadPool;
}

namespace kiln::detail {

struct EngineImpl;

// `arena` (at least e.arena_bytes) and `pool` are the context's, shared by its plans. Throws
// kiln::Error naming the steps the CPU has no kernel for.
std::unique_ptr<PlanRunner> make_cpu_runner(const EngineImpl& e, std::byte* arena, cpu::ThreadPool* pool,
                                            const ContextOptions& options);

}  // namespace kiln::detail
