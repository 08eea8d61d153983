#include "runtime/cuda/device_memory.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#if defined(KILN_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace kiln::gpu {

struct MemoryBudget {
  size_t limit = 0;  // 0: none
  std::string what;
  BudgetRef parent;
  std::atomic<size_t> used{0}, peak{0};
};

namespace {

thread_local BudgetRef t_budget;

// Charges `bytes` to b and every budget it lies in, none of them ever over its limit (a budget is
// charged only where the bytes fit, so a concurrent charge is never refused for another's brief
// overshoot); where one is full, gives back what it charged and returns that budget.
const MemoryBudget* charge(const BudgetRef& b, size_t bytes, size_t* over) {
  std::vector<MemoryBudget*> done;
  for (MemoryBudget* x = b.get(); x; x = x->parent.get()) {
    size_t used = x->used.load();
    while (x->limit == 0 || used + bytes <= x->limit)
      if (x->used.compare_exchange_weak(used, used + bytes)) break;
    if (x->limit != 0 && used + bytes > x->limit) {
      for (MemoryBudget* y : done) y->used.fetch_sub(bytes);
      *over = used + bytes;
      return x;
    }
    done.push_back(x);
  }
  // Peaks only for bytes that were charged everywhere.
  for (MemoryBudget* x : done)
    for (size_t now = x->used.load(), p = x->peak.load(); now > p && !x->peak.compare_exchange_weak(p, now);) {
    }
  return nullptr;
}

void give_back(const BudgetRef& b, size_t bytes) {
  for (MemoryBudget* x = b.get(); x; x = x->parent.get()) x->used.fetch_sub(bytes);
}

// Charges the thread's budget for `bytes` of `kind` ("GPU memory", "mapped host memory") or throws.
BudgetRef charge_thread(size_t bytes, std::string_view what, const char* kind) {
  const BudgetRef b = t_budget;
  size_t over = 0;
  if (const MemoryBudget* refused = charge(b, bytes, &over))
    throw MemoryLimitError("cannot allocate " + format_mib(bytes) + " of " + kind + " for " + std::string(what) +
                           ": it would make " + format_mib(over) + ", over the memory limit of " +
                           format_mib(refused->limit) + " (" + refused->what + ")");
  return b;
}

}  // namespace

BudgetRef new_budget(size_t limit, std::string what) {
  auto b = std::make_shared<MemoryBudget>();
  b->limit = limit;
  b->what = std::move(what);
  b->parent = t_budget;
  return b;
}

MemoryBudgetScope::MemoryBudgetScope(size_t limit, std::string what)
    : budget_(new_budget(limit, std::move(what))), saved_(t_budget) {
  t_budget = budget_;
}

MemoryBudgetScope::MemoryBudgetScope(BudgetRef budget) : budget_(std::move(budget)), saved_(t_budget) {
  t_budget = budget_;
}

MemoryBudgetScope::~MemoryBudgetScope() { t_budget = saved_; }

size_t MemoryBudgetScope::peak() const { return budget_->peak.load(); }

BudgetRef current_budget() { return t_budget; }
size_t budget_limit(const BudgetRef& b) {
  size_t limit = 0;
  for (const MemoryBudget* x = b.get(); x; x = x->parent.get())
    if (x->limit != 0 && (limit == 0 || x->limit < limit)) limit = x->limit;
  return limit;
}

std::string format_mib(size_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return s;
}

namespace {

// `bytes` (at least 1) charged to the thread's budget, then allocated by `alloc` (a CUDA call:
// cudaMalloc, cudaHostAlloc); on failure the charge is given back and the error names `kind`.
// Without CUDA the charge is given back and the error says so.
template <class Alloc>
void* charged_alloc(size_t bytes, std::string_view what, const char* kind, BudgetRef* charged, Alloc alloc) {
  const BudgetRef b = charge_thread(bytes, what, kind);
#if defined(KILN_HAVE_CUDA)
  void* p = nullptr;
  const cudaError_t err = alloc(&p);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    give_back(b, bytes);
    throw Error("cannot allocate " + format_mib(bytes) + " of " + kind + " for " + std::string(what) + ": " +
                cudaGetErrorString(err));
  }
  *charged = b;
  return p;
#else
  (void)alloc;
  give_back(b, bytes);
  throw Error(std::string("cannot allocate ") + kind + " for " + std::string(what) + ": Kiln was built without CUDA");
#endif
}

// Frees p (null: nothing) by `release` and gives its charge back.
template <class Release>
void charged_free(void* p, size_t bytes, const BudgetRef& charged, Release release) {
  if (!p) return;
  release(p);
  give_back(charged, std::max<size_t>(bytes, 1));
}

}  // namespace

#if defined(KILN_HAVE_CUDA)

void* device_malloc(size_t bytes, std::string_view what, BudgetRef* charged) {
  bytes = std::max<size_t>(bytes, 1);
  return charged_alloc(bytes, what, "GPU memory", charged, [&](void** p) { return cudaMalloc(p, bytes); });
}

void device_free(void* p, size_t bytes, const BudgetRef& charged) { charged_free(p, bytes, charged, cudaFree); }

void* mapped_host_malloc(size_t bytes, std::string_view what, BudgetRef* charged, void** device) {
  bytes = std::max<size_t>(bytes, 1);
  return charged_alloc(bytes, what, "mapped host memory", charged, [&](void** p) {
    cudaError_t err = cudaHostAlloc(p, bytes, cudaHostAllocMapped);
    if (err == cudaSuccess && (err = cudaHostGetDevicePointer(device, *p, 0)) != cudaSuccess) cudaFreeHost(*p);
    return err;
  });
}

void mapped_host_free(void* p, size_t bytes, const BudgetRef& charged) {
  charged_free(p, bytes, charged, cudaFreeHost);
}

#else  // nothing to allocate with

void* device_malloc(size_t bytes, std::string_view what, BudgetRef* charged) {
  return charged_alloc(std::max<size_t>(bytes, 1), what, "GPU memory", charged, nullptr);
}
void device_free(void* p, size_t bytes, const BudgetRef& charged) {
  charged_free(p, bytes, charged, [](void*) {});
}
void* mapped_host_malloc(size_t bytes, std::string_view what, BudgetRef* charged, void**) {
  return charged_alloc(std::max<size_t>(bytes, 1), what, "mapped host memory", charged, nullptr);
}
void mapped_host_free(void* p, size_t bytes, const BudgetRef& charged) {
  charged_free(p, bytes, charged, [](void*) {});
}

#endif

size_t device_bytes_in_use() {
#if defined(KILN_HAVE_CUDA)
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return total - free;
#else
  return 0;
#endif
}

size_t parse_bytes(const std::string& s, const std::string& option) {
  auto bad = [&] {
    return Error(option + " " + s + ": expected a size such as 2G, 1.5GiB, 512M or a number of bytes");
  };
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !std::isfinite(v) || v <= 0) throw bad();
  std::string unit(end);
  if (unit.size() == 3 && unit.substr(1) == "iB") unit = unit.substr(0, 1);
  if (unit.size() == 2 && (unit[1] == 'B' || unit[1] == 'b')) unit = unit.substr(0, 1);
  double scale = 1;
  if (unit.empty() || unit == "B")
    scale = 1;
  else if (unit == "k" || unit == "K")
    scale = 1024.0;
  else if (unit == "m" || unit == "M")
    scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "G")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "T")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else
    throw bad();
  const double bytes = v * scale;
  if (bytes < 1 || bytes > 1e18) throw bad();
  return static_cast<size_t>(bytes);
}

}  // namespace kiln::gpu
