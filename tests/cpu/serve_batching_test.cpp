// The dynamic batcher's choice of a batch (src/serve/batching.h).
#include <gtest/gtest.h>

#include <vector>

#include "serve/batching.h"

namespace kiln::serve {
namespace {

const std::vector<int64_t> kBuckets{1, 2, 4, 8, 16, 32, 64};

std::vector<QueuedRequest> ones(int n, std::string_view key = "3,224,224;") {
  return std::vector<QueuedRequest>(static_cast<size_t>(n), QueuedRequest{1, key});
}

TEST(ServeBatching, EmptyQueueGivesNothing) { EXPECT_TRUE(pick_batch({}, 64, kBuckets).empty()); }

TEST(ServeBatching, StopsAtTheLargestBucketTheQueueFills) {
  EXPECT_EQ(pick_batch(ones(33), 64, kBuckets).size(), 32u);
  EXPECT_EQ(pick_batch(ones(63), 64, kBuckets).size(), 32u);
  EXPECT_EQ(pick_batch(ones(64), 64, kBuckets).size(), 64u);
  EXPECT_EQ(pick_batch(ones(200), 64, kBuckets).size(), 64u);
  EXPECT_EQ(pick_batch(ones(5), 64, kBuckets).size(), 4u);
  EXPECT_EQ(pick_batch(ones(1), 64, kBuckets).size(), 1u);
}

TEST(ServeBatching, WithoutBucketsTakesUpToTheMaximum) {
  EXPECT_EQ(pick_batch(ones(33), 64, {}).size(), 33u);
  EXPECT_EQ(pick_batch(ones(200), 64, {}).size(), 64u);
}

TEST(ServeBatching, OnlyRequestsOfTheOldestOnesKey) {
  std::vector<QueuedRequest> q = ones(3, "a");
  q.insert(q.begin() + 1, QueuedRequest{1, "b"});
  const std::vector<size_t> picked = pick_batch(q, 64, {});
  EXPECT_EQ(picked, (std::vector<size_t>{0, 2, 3}));
}

TEST(ServeBatching, RequestsOfManyRowsStayWhole) {
  // 24 + 24 rows fill 32 only once: the second request waits rather than being split.
  const std::vector<QueuedRequest> q{{24, "k"}, {24, "k"}, {8, "k"}};
  EXPECT_EQ(pick_batch(q, 64, kBuckets), (std::vector<size_t>{0, 2}));
  EXPECT_EQ(pick_batch(q, 64, {}), (std::vector<size_t>{0, 1, 2}));
}

TEST(ServeBatching, TheOldestRequestAlwaysGoes) {
  // 40 rows queued fill the bucket 32; the oldest request's 40 rows still run (padded to 64).
  const std::vector<QueuedRequest> q{{40, "k"}, {1, "k"}};
  EXPECT_EQ(pick_batch(q, 64, kBuckets), (std::vector<size_t>{0, 1}));
  // A range starting at 4: fewer queued rows than the smallest bucket all go (padded to it).
  EXPECT_EQ(pick_batch(ones(3), 64, std::vector<int64_t>{4, 8, 16}).size(), 3u);
}

}  // namespace
}  // namespace kiln::serve
