// One layer's table of op implementations (shape inference, CPU kernels, CUDA kernels), joined from
// its op families' registries: each family lists the entries of its own ops
// (docs/decisions/54-op-families-and-build-stage.md). The table finds an op's entry and checks
// that every op is registered once, and by its own family (tests/cpu/op_coverage_test.cpp).
#pragma once

#include <array>
#include <span>
#include <string>

#include "core/op_kind.h"

namespace kiln {

// Entry: any struct with an `OpKind kind` member (InferEntry, cpu::KernelEntry, gpu::GpuKernelEntry).
template <class Entry>
class OpRegistry {
 public:
  // The families' entries, in OpFamily order.
  using Families = std::array<std::span<const Entry>, kOpFamilyCount>;

  explicit OpRegistry(const Families& families) {
    for (size_t f = 0; f < kOpFamilyCount; ++f)
      for (const Entry& e : families[f]) {
        const size_t k = static_cast<size_t>(e.kind);
        entry_[k] = &e;
        ++count_[k];
        const OpFamily own = op_info(e.kind).family;
        if (own != static_cast<OpFamily>(f))
          misplaced_ += std::string(op_name(e.kind)) + " (registered by the " +
                        std::string(family_name(static_cast<OpFamily>(f))) + " family, belongs to the " +
                        std::string(family_name(own)) + " family) ";
      }
  }

  // The op's entry; null if no family registers it.
  const Entry* find(OpKind kind) const { return entry_[static_cast<size_t>(kind)]; }

  // Every op registered at most once (exactly once if require_every_op), each by its own family;
  // otherwise false, with the ops at fault (and how often each is registered) appended to *problems.
  bool check(bool require_every_op, std::string* problems) const {
    bool ok = true;
    for (size_t i = 0; i < kOpCount; ++i)
      if (count_[i] > 1 || (require_every_op && count_[i] == 0)) {
        ok = false;
        if (problems) *problems += std::string(kOpTable[i].name) + "(" + std::to_string(count_[i]) + ") ";
      }
    if (!misplaced_.empty()) {
      ok = false;
      if (problems) *problems += misplaced_;
    }
    return ok;
  }

 private:
  std::array<const Entry*, kOpCount> entry_{};
  std::array<int, kOpCount> count_{};
  std::string misplaced_;
};

}  // namespace kiln
