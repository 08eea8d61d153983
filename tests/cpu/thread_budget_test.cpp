// The process's CPU thread budget (runtime/cpu/thread_budget.h): how runs that overlap share it,
// and that a pool's team bounds the threads its parallel_for uses.
#include "runtime/cpu/thread_budget.h"

#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <thread>

#include "runtime/cpu/thread_pool.h"

namespace kiln::cpu {
namespace {

TEST(ThreadBudget, ARunAloneGetsWhatItAsks) {
  ThreadBudget b(8);
  const int a = b.acquire(3);
  EXPECT_EQ(a, 3);
  b.release(a);
  const int all = b.acquire(8), more = b.acquire(100);
  EXPECT_EQ(all, 8);
  EXPECT_EQ(more, 1);  // the budget is held: the second run has its caller's thread only
  b.release(all);
  b.release(more);
  EXPECT_EQ(b.in_use(), 0);
}

TEST(ThreadBudget, OverlappingRunsSettleOnEvenShares) {
  ThreadBudget b(8);
  int first = b.acquire(8), second = b.acquire(8);
  EXPECT_EQ(first + second, 9);
  // Each run's next acquire, while the other holds its share: both settle on 4.
  for (int round = 0; round < 3; ++round) {
    b.release(first);
    first = b.acquire(8);
    b.release(second);
    second = b.acquire(8);
  }
  EXPECT_EQ(first, 4);
  EXPECT_EQ(second, 4);
  // A third run gets its caller's thread while the budget is held, then each run a third of it.
  int third = b.acquire(8);
  EXPECT_EQ(third, 1);
  for (int* run : {&first, &second, &third}) {
    b.release(*run);
    *run = b.acquire(8);
  }
  EXPECT_EQ(first, 2);
  EXPECT_EQ(second, 2);
  EXPECT_EQ(third, 2);
  b.release(first);
  b.release(second);
  b.release(third);
  EXPECT_EQ(b.in_use(), 0);
}

TEST(ThreadBudget, MoreRunsThanThreadsGetOneEach) {
  ThreadBudget b(2);
  int held[4];
  for (int& h : held) h = b.acquire(2);
  EXPECT_EQ(held[0], 2);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(held[i], 1);
  for (int h : held) b.release(h);
  EXPECT_EQ(b.peak(), 5);
}

TEST(ThreadBudget, DefaultIsTheCores) {
  ThreadBudget b(0);
  EXPECT_EQ(b.total(), core_count());
  EXPECT_GE(core_count(), 1);
}

// The distinct threads that ran parts of a parallel_for over many small items.
std::set<std::thread::id> threads_used(ThreadPool& pool) {
  std::mutex mu;
  std::set<std::thread::id> ids;
  pool.parallel_for(4096, [&](int64_t b, int64_t e) {
    volatile double sink = 0;
    for (int64_t i = b; i < e; ++i)
      for (int j = 0; j < 2000; ++j) sink = sink + 1.0;  // long enough that every member takes a chunk
    std::lock_guard<std::mutex> lk(mu);
    ids.insert(std::this_thread::get_id());
  });
  return ids;
}

TEST(ThreadPool, TeamBoundsTheThreadsUsed) {
  ThreadPool pool(4);
  EXPECT_EQ(pool.team(), 4);
  pool.set_team(2);
  EXPECT_EQ(pool.team(), 2);
  for (int i = 0; i < 5; ++i) EXPECT_LE(threads_used(pool).size(), 2u);
  pool.set_team(1);
  EXPECT_EQ(threads_used(pool), std::set<std::thread::id>{std::this_thread::get_id()});
  pool.set_team(99);
  EXPECT_EQ(pool.team(), 4);
  pool.set_team(0);
  EXPECT_EQ(pool.team(), 1);
}

}  // namespace
}  // namespace kiln::cpu
