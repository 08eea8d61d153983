#include "serve/batching.h"

#include <algorithm>

namespace kiln::serve {

std::vector<size_t> pick_batch(std::span<const QueuedRequest> queue, int64_t max_rows,
                               std::span<const int64_t> buckets) {
  if (queue.empty()) return {};
  const std::string_view key = queue.front().key;
  int64_t cap = max_rows;
  if (!buckets.empty()) {
    int64_t queued = 0;
    for (size_t i = 0; i < queue.size() && queued < max_rows; ++i)
      if (queue[i].key == key) queued = std::min(max_rows, queued + queue[i].rows);
    for (int64_t b : buckets)
      if (b <= queued) cap = b;
    if (queue.front().rows > cap) {  // the oldest request alone runs in a larger bucket: fill that one
      auto b = std::lower_bound(buckets.begin(), buckets.end(), queue.front().rows);
      cap = b == buckets.end() ? max_rows : *b;
    }
  }
  std::vector<size_t> picked{0};
  int64_t rows = queue.front().rows;
  for (size_t i = 1; i < queue.size() && rows < cap; ++i)
    if (queue[i].key == key && rows + queue[i].rows <= cap) {
      picked.push_back(i);
      rows += queue[i].rows;
    }
  return picked;
}

}  // namespace kiln::serve
