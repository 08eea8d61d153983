#include "build/memory_plan.h"

#include <algorithm>
#include <numeric>

#include "runtime/engine_format.h"

namespace kiln::build {

MemoryPlan plan_memory(const std::vector<Lifetime>& t) {
  MemoryPlan plan;
  plan.offsets.assign(t.size(), 0);
  std::vector<size_t> order(t.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return t[a].bytes > t[b].bytes; });
  std::vector<size_t> placed;
  for (size_t i : order) {
    uint64_t size = format::align_up(t[i].bytes, format::kTensorAlign);
    // Intervals [offset, offset+size) of placed tensors alive at the same time, sorted by offset.
    std::vector<std::pair<uint64_t, uint64_t>> busy;
    for (size_t j : placed)
      if (t[j].first <= t[i].last && t[i].first <= t[j].last)
        busy.emplace_back(plan.offsets[j], plan.offsets[j] + format::align_up(t[j].bytes, format::kTensorAlign));
    std::sort(busy.begin(), busy.end());
    uint64_t offset = 0;
    for (auto [lo, hi] : busy) {
      if (offset + size <= lo) break;
      offset = std::max(offset, hi);
    }
    plan.offsets[i] = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + size);
    placed.push_back(i);
  }
  int steps = 0;
  for (const Lifetime& l : t) steps = std::max(steps, l.last + 1);
  for (int s = 0; s < steps; ++s) {
    uint64_t live = 0;
    for (const Lifetime& l : t)
      if (l.first <= s && s <= l.last) live += format::align_up(l.bytes, format::kTensorAlign);
    plan.peak_live_bytes = std::max(plan.peak_live_bytes, live);
  }
  return plan;
}

}  // namespace kiln::build
