// Kiln's own device memory, counted and limited: a build's (`kiln optimize --memory-limit 2G`,
// BuildOptions::memory_limit) and a context's (ContextOptions::memory_limit). Every allocation of
// the builder (DeviceBuffer) and of a context (gpu_context.cpp) goes through device_malloc, which
// charges it to the thread's budget and to every budget that one was opened inside, and refuses
// it, naming what it was for and the limit, where one would go over: a tactic whose workspace does
// not fit is then not timed, a context that does not fit is not made. The CUDA context and the
// libraries' handles are not counted (they are the same whatever the model; bench/RESULTS.md has
// their size on the H200). A Jetson's GPU shares the board's memory, hence the limit.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "kiln/types.h"

namespace kiln::gpu {

// What device_malloc throws where an allocation would pass a budget's limit (the builder leaves
// such a tactic out rather than call it failed).
class MemoryLimitError : public Error {
 public:
  using Error::Error;
};

struct MemoryBudget;
using BudgetRef = std::shared_ptr<MemoryBudget>;

// Opens a budget of `limit` bytes (0: none, the bytes are only counted) inside the thread's current
// one and makes it the thread's while the scope lives; or makes `budget` (another thread's) the
// thread's. `what` names the limit in errors ("--memory-limit").
class MemoryBudgetScope {
 public:
  MemoryBudgetScope(size_t limit, std::string what);
  explicit MemoryBudgetScope(BudgetRef budget);
  ~MemoryBudgetScope();
  MemoryBudgetScope(const MemoryBudgetScope&) = delete;
  MemoryBudgetScope& operator=(const MemoryBudgetScope&) = delete;

  size_t peak() const;  // the most bytes held at once under it (nested budgets' included)

 private:
  BudgetRef budget_, saved_;
};

// The thread's budget (null where none was opened).
BudgetRef current_budget();

// A budget of `limit` bytes (0: none) inside the thread's current one, for a scope to make current
// where it is used (a context's, made when the context is).
BudgetRef new_budget(size_t limit, std::string what);

// The tightest limit on a budget's allocations (its own or one it lies in); 0: none.
size_t budget_limit(const BudgetRef& b);

// `bytes` (at least 1) of device memory charged to the thread's budget, which *charged receives
// (device_free gives it back). Throws kiln::Error "cannot allocate N MiB of GPU memory for WHAT: ..."
// with CUDA's reason, or MemoryLimitError with the limit it would exceed.
void* device_malloc(size_t bytes, std::string_view what, BudgetRef* charged);
void device_free(void* p, size_t bytes, const BudgetRef& charged);

// `bytes` of pinned host memory that kernels read and write in place (cudaHostAllocMapped), its
// device address in *device, charged to the thread's budget like device memory: on a GPU that
// shares the CPU's memory (a Jetson) it is the same memory. Throws as device_malloc does.
void* mapped_host_malloc(size_t bytes, std::string_view what, BudgetRef* charged, void** device);
void mapped_host_free(void* p, size_t bytes, const BudgetRef& charged);

// "12.3 MiB": how Kiln's memory messages give sizes.
std::string format_mib(size_t bytes);

// What the GPU has in use now (cudaMemGetInfo: total less free; 0 without one).
size_t device_bytes_in_use();

// "2G", "1.5GiB", "512M", "64k", "1000000" -> bytes (powers of 1024); throws kiln::Error naming
// `option` for anything else.
size_t parse_bytes(const std::string& s, const std::string& option);

}  // namespace kiln::gpu
