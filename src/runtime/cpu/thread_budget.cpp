#include "runtime/cpu/thread_budget.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#endif

#include "kiln/engine.h"

namespace kiln::cpu {

int core_count() {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

ThreadBudget::ThreadBudget(int total) { set_total(total); }

ThreadBudget& ThreadBudget::process() {
  static ThreadBudget budget([] {
    const char* v = std::getenv("KILN_CPU_THREAD_BUDGET");
    return v ? std::atoi(v) : 0;
  }());
  return budget;
}

void ThreadBudget::set_total(int total) {
  std::lock_guard<std::mutex> lk(mu_);
  total_ = total > 0 ? total : core_count();
}

int ThreadBudget::total() const {
  std::lock_guard<std::mutex> lk(mu_);
  return total_;
}

int ThreadBudget::acquire(int want) {
  std::lock_guard<std::mutex> lk(mu_);
  ++runs_;
  const int share = total_ / runs_, free = total_ - in_use_;
  const int granted = std::max(1, std::min({want, share, free}));
  in_use_ += granted;
  peak_ = std::max(peak_, in_use_);
  return granted;
}

void ThreadBudget::release(int granted) {
  std::lock_guard<std::mutex> lk(mu_);
  --runs_;
  in_use_ -= granted;
}

int ThreadBudget::in_use() const {
  std::lock_guard<std::mutex> lk(mu_);
  return in_use_;
}

int ThreadBudget::peak() const {
  std::lock_guard<std::mutex> lk(mu_);
  return peak_;
}

void ThreadBudget::reset_peak() {
  std::lock_guard<std::mutex> lk(mu_);
  peak_ = in_use_;
}

}  // namespace kiln::cpu

namespace kiln {

void set_cpu_thread_budget(int threads) { cpu::ThreadBudget::process().set_total(threads); }
int cpu_thread_budget() { return cpu::ThreadBudget::process().total(); }

}  // namespace kiln
