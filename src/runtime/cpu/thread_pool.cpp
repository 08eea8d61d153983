#include "runtime/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "runtime/cpu/thread_budget.h"

#if defined(KILN_HAVE_ONEDNN)
#include <omp.h>
#endif

namespace kiln::cpu {

namespace {

// How many chunks each thread gets on average. More than one lets fast threads take work from
// slow ones (a core shared with another process, uneven per-index cost) at a small claim cost.
constexpr int64_t kChunksPerThread = 4;
// How long a thread spins before blocking on a condition variable. A futex sleep/wake round trip
// costs tens of microseconds, comparable to a small GEMM, so back-to-back parallel_for calls (one
// per layer) are much cheaper while idle workers are still spinning; beyond this, burning the
// core would slow down whatever else runs on it.
constexpr auto kSpinTime = std::chrono::microseconds(50);

// Set while a thread executes pool work, so nested parallel_for calls run inline instead of
// waiting on workers that are busy running the outer call (which would deadlock).
thread_local bool t_in_parallel = false;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until done() holds or kSpinTime has passed; returns done().
template <class Pred>
bool spin_wait(Pred done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  for (uint32_t i = 1;; ++i) {
    if (done()) return true;
    if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) return false;
    cpu_relax();
  }
}

class InParallelScope {
 public:
  InParallelScope() : prev_(t_in_parallel) { t_in_parallel = true; }
  ~InParallelScope() { t_in_parallel = prev_; }

 private:
  bool prev_;
};

}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = core_count();
  size_ = team_ = std::max(threads, 1);
#if !defined(KILN_HAVE_ONEDNN)
  workers_.reserve(size_ - 1);
  for (int i = 1; i < size_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
#endif
}

void ThreadPool::set_team(int threads) { team_ = std::clamp(threads, 1, size_); }

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_release);  // also ends any spin
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

#if defined(KILN_HAVE_ONEDNN)

// With oneDNN, whose threads are OpenMP's, the pool's work runs on the calling thread's OpenMP team
// too: one set of threads for Kiln's kernels and the library's, instead of two sets that spin while
// the other works (on 2 cores the library's idle threads spun through Kiln's next step). The chunks
// are claimed from a shared counter as below.
void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn) {
  if (n <= 0) return;
  if (team_ == 1 || n == 1 || t_in_parallel || omp_in_parallel()) {
    fn(0, n);
    return;
  }
  const int64_t want = std::min<int64_t>(n, team_ * kChunksPerThread);
  const int64_t chunk = (n + want - 1) / want, chunks = (n + chunk - 1) / chunk;
  std::atomic<int64_t> next{0};
  std::mutex mu;
  std::exception_ptr error;
#pragma omp parallel num_threads(team_)
  {
    InParallelScope scope;
    for (;;) {
      const int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= chunks) break;
      try {
        fn(c * chunk, std::min(n, (c + 1) * chunk));
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu);
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

// The worker threads' side, unused here: the pool owns no threads.
void ThreadPool::run_chunks() {}
void ThreadPool::worker_loop(int) {}

#else

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn) {
  if (n <= 0) return;
  if (team_ == 1 || n == 1 || t_in_parallel) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    // No worker is registered here: the previous call waited for active_ == 0 and closed the job.
    const int64_t want = std::min<int64_t>(n, team_ * kChunksPerThread);
    job_team_ = team_;
    fn_ = &fn;
    n_ = n;
    chunk_ = (n + want - 1) / want;
    num_chunks_ = (n + chunk_ - 1) / chunk_;
    next_chunk_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    job_open_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  work_cv_.notify_all();
  {
    InParallelScope scope;
    run_chunks();
  }
  // Every chunk is claimed now; the ones still running belong to registered workers, so the job
  // is finished once active_ reaches zero. Spin first (workers usually finish together with us).
  spin_wait([this] { return active_.load(std::memory_order_acquire) == 0; });
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [this] { return active_.load(std::memory_order_acquire) == 0; });
    job_open_ = false;  // late wakers must not register on a job whose fn is about to die
    fn_ = nullptr;
    error = std::exchange(error_, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

void ThreadPool::run_chunks() {
  for (;;) {
    const int64_t c = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (c >= num_chunks_) return;
    const int64_t begin = c * chunk_;
    const int64_t end = std::min(n_, begin + chunk_);
    try {
      (*fn_)(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

void ThreadPool::worker_loop(int index) {
  t_in_parallel = true;
  uint64_t seen = 0;
  bool spin = true;  // off after a job whose team left this worker out: it waits asleep
  for (;;) {
    if (spin) spin_wait([&] { return generation_.load(std::memory_order_acquire) != seen; });
    std::unique_lock<std::mutex> lk(mu_);
    work_cv_.wait(lk, [&] { return stop_ || generation_.load(std::memory_order_relaxed) != seen; });
    if (stop_) return;
    seen = generation_.load(std::memory_order_relaxed);
    if (!job_open_) continue;  // woke after that job was already finished and closed
    spin = index < job_team_;
    if (!spin) continue;  // not in this job's team
    active_.fetch_add(1, std::memory_order_relaxed);
    lk.unlock();
    run_chunks();
    lk.lock();
    // acq_rel: publishes this worker's writes (fn's results) to the caller's acquire load.
    if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) done_cv_.notify_all();
  }
}

#endif

}  // namespace kiln::cpu
