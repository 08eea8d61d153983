// Activation memory planning: tensors whose lifetimes do not overlap share bytes of one arena.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::build {

struct Lifetime {
  uint64_t bytes = 0;
  int first = 0;  // step that writes it
  int last = 0;   // last step that reads it (the number of steps for engine outputs)
};

struct MemoryPlan {
  std::vector<uint64_t> offsets;  // per lifetime, aligned to 64 bytes
  uint64_t arena_bytes = 0;
  uint64_t peak_live_bytes = 0;  // the lower bound any plan needs
};

// Greedy by size: the largest tensor first, each at the lowest offset that does not collide with a
// placed tensor whose lifetime overlaps. Deterministic (ties broken by index).
MemoryPlan plan_memory(const std::vector<Lifetime>& tensors);

}  // namespace kiln::build
