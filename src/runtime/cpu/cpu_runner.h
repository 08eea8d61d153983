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
struct StepRec;

// Whether step st of e runs on the calling thread alone whatever the context's thread count: a
// convolution or product of fewer than 2^18 multiply-adds, another op reading and writing fewer
// than 2^14 elements (static shapes only). Splitting such steps cost more than it saved: LeNet-5
// at batch 1 ran 24.6 us on 2 threads, 21.5 on 1.
bool runs_on_one_thread(const EngineImpl& e, const StepRec& st);

// `arena` (at least e.arena_bytes) and `pool` are the context's, shared by its plans. Throws
// kiln::Error naming the steps the CPU has no kernel for.
std::unique_ptr<PlanRunner> make_cpu_runner(const EngineImpl& e, std::byte* arena, cpu::ThreadPool* pool,
                                            const ContextOptions& options);

}  // namespace kiln::detail
