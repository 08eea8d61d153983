// The CPU threads of the contexts that run at the same time, shared out of one budget per process
// (kiln::set_cpu_thread_budget; default: KILN_CPU_THREAD_BUDGET from the environment, else the
// cores this process may run on). A run of a CPU
// context asks for its thread count (ContextOptions::cpu_threads) and gets
//
//   min(asked, budget / runs going on now, budget - threads the other runs hold), at least 1,
//
// for that whole run: alone it gets what it asked for, up to the budget; beside others each gets
// an even share once the runs already going (which keep their threads until they end) have
// ended, so that the teams settle on holding no more threads than the budget. A run that starts
// while the others hold the whole budget gets its caller's thread only (one more than the budget
// until one of them ends), as do runs beyond the budget's count. Shares are even, not sized to what
// each run asks: a 1-thread run beside an 8-thread one on 8 still limits the latter to 4. Two contexts of 2 threads
// each on 2 cores ran MobileNetV2 INT8 15% slower than two of 1 (bench/RESULTS.md).
#pragma once

#include <mutex>

namespace kiln::cpu {

// The cores this process may run on (its CPU affinity), at least 1.
int core_count();

class ThreadBudget {
 public:
  explicit ThreadBudget(int total);

  // The process's budget, used by every CPU context.
  static ThreadBudget& process();

  // total <= 0: core_count(). Runs going on keep what they hold.
  void set_total(int total);
  int total() const;

  // Threads for a run that asks for `want` (at least 1); give them back with release().
  int acquire(int want);
  void release(int granted);

  // Threads held now, and the most held at once since the last reset_peak() (for tests).
  int in_use() const;
  int peak() const;
  void reset_peak();

 private:
  mutable std::mutex mu_;
  int total_ = 1;
  int runs_ = 0;
  int in_use_ = 0;
  int peak_ = 0;
};

// A run's share: acquired when made, released when destroyed.
class ThreadGrant {
 public:
  ThreadGrant(ThreadBudget& budget, int want) : budget_(budget), threads_(budget.acquire(want)) {}
  ~ThreadGrant() { budget_.release(threads_); }
  ThreadGrant(const ThreadGrant&) = delete;
  ThreadGrant& operator=(const ThreadGrant&) = delete;
  int threads() const { return threads_; }

 private:
  ThreadBudget& budget_;
  int threads_;
};

}  // namespace kiln::cpu
