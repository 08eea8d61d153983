// The dynamic batcher's choice of the next batch, apart from the queue's locking and waiting so
// that it can be tested alone.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace kiln::serve {

struct QueuedRequest {
  int64_t rows = 1;      // its batch
  std::string_view key;  // its non-batch dims: only equal keys share a batch
};

// The requests of the next batch: indices into `queue` (oldest first), in queue order. The oldest
// request always goes; after it, every request with its key, in order, while the rows stay within
// max_rows. With `buckets` (the engine's batch sizes, ascending) the batch also stays within the
// largest bucket the queued rows fill: a size between buckets would run padded to the next one
// (33 rows cost as much as 64), and what is left over starts the next batch; when the oldest
// request alone is larger than that bucket, up to the bucket it runs in.
std::vector<size_t> pick_batch(std::span<const QueuedRequest> queue, int64_t max_rows,
                               std::span<const int64_t> buckets);

}  // namespace kiln::serve
