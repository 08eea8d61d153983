// A small fork-join thread pool for the CPU backend. The calling thread always takes part in the
// work, so a pool of size N owns N - 1 worker threads. Work is handed out in contiguous chunks that
// threads claim from a shared atomic counter, which balances uneven per-index cost without a queue.
// Idle workers spin briefly (~50 us) before sleeping, so back-to-back calls skip the futex wake.
// In a build with oneDNN the pool owns no threads: its work runs on the calling thread's OpenMP
// team, the library's threads (one set of threads for both; thread_pool.cpp).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::cpu {

class ThreadPool {
 public:
  // threads <= 0 means one per core this process may run on (thread_budget.h: core_count).
  explicit ThreadPool(int threads);
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Number of threads the pool was made with, including the caller of parallel_for.
  int size() const { return size_; }
  // The threads that run parallel_for's work now, at most size() (runtime/cpu/thread_budget.h:
  // a context's run sets its share). Not while a parallel_for is running.
  int team() const { return team_; }
  void set_team(int threads);

  // Runs fn(begin, end) over disjoint ranges covering [0, n), split across the pool's threads and
  // the calling thread; returns when all are done. The first exception thrown by fn is rethrown
  // here (other chunks still run). Safe to call from one thread at a time per pool. n == 1, a
  // 1-thread pool, and calls made from inside fn (on any pool) run fn(0, n) inline on the calling
  // thread, with no synchronisation.
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  void worker_loop(int index);
  // Claims and runs chunks of the current job until none are left.
  void run_chunks();

  int size_ = 1;
  int team_ = 1;
  std::vector<std::thread> workers_;

  std::mutex mu_;
  std::condition_variable work_cv_;  // workers wait here for a new generation or stop
  std::condition_variable done_cv_;  // the caller waits here for active_ to drop to zero
  bool stop_ = false;
  // Bumped (under mu_) for every job; read without the lock only while spinning.
  std::atomic<uint64_t> generation_{0};

  // The current job. Written under mu_ while no worker is registered in active_; a worker only
  // reads it after registering under mu_ while job_open_ is set, so it never sees a stale job.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 1;
  int64_t num_chunks_ = 0;
  bool job_open_ = false;
  int job_team_ = 1;  // the team of the current job: workers 1 .. job_team_ - 1 take part
  std::atomic<int64_t> next_chunk_{0};
  // Workers registered on the job. Incremented only under mu_ while job_open_; read lock-free by
  // the caller's spin-wait.
  std::atomic<int> active_{0};
  std::exception_ptr error_;  // guarded by mu_
};

}  // namespace kiln::cpu
