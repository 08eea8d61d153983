#include "runtime/side_steps.h"

#include <algorithm>

#include "runtime/engine_impl.h"

namespace kiln::detail {

namespace {

struct Decision {
  std::vector<SideStep> sides;
  std::vector<int> waits;
};

// One walk over the steps; `keep_main` steps may not move.
Decision decide(const std::vector<StepIo>& steps, const TensorPlace& place, const std::vector<bool>& keep_main) {
  const int n = static_cast<int>(steps.size());
  const size_t roots = place.root.size();
  auto root = [&](int32_t t) { return static_cast<size_t>(place.root[static_cast<size_t>(t)]); };
  // Per root: the last main-stream step that wrote / read it; the last side step (index into
  // `sides`) that wrote / read it.
  std::vector<int> main_w(roots, -1), main_r(roots, -1), side_w(roots, -1), side_r(roots, -1);
  std::vector<int> mains_through(static_cast<size_t>(n), 0);  // main steps among 0..k
  Decision d;
  d.waits.assign(static_cast<size_t>(n), -1);
  int joined = -1;  // sides[0..joined] have their join
  int side_fork = -1;  // the last side step's fork: the side stream starts nothing before it
  for (int k = 0; k < n; ++k) {
    const StepIo& s = steps[static_cast<size_t>(k)];
    int fork = side_fork;
    bool pinned = false;
    for (int32_t t : s.reads) fork = std::max(fork, main_w[root(t)]);
    for (int32_t t : s.writes) {
      fork = std::max({fork, main_w[root(t)], main_r[root(t)]});
      pinned = pinned || place.pinned[static_cast<size_t>(t)] || place.pinned[root(t)];  // or a view of one
    }
    const int mains_before = k > 0 ? mains_through[static_cast<size_t>(k - 1)] : 0;
    const int mains_between = mains_before - (fork >= 0 ? mains_through[static_cast<size_t>(fork)] : 0);
    const bool side = !keep_main[static_cast<size_t>(k)] && !pinned && !s.writes.empty() && fork < k - 1 &&
                      mains_between > 0;
    if (side) {
      const int idx = static_cast<int>(d.sides.size());
      d.sides.push_back({k, fork, n});
      side_fork = fork;
      for (int32_t t : s.reads) side_r[root(t)] = idx;
      for (int32_t t : s.writes) side_w[root(t)] = idx;
      mains_through[static_cast<size_t>(k)] = mains_before;
      continue;
    }
    int wait = -1;
    for (int32_t t : s.reads) wait = std::max(wait, side_w[root(t)]);
    for (int32_t t : s.writes) wait = std::max({wait, side_w[root(t)], side_r[root(t)]});
    if (wait > joined) {
      for (int i = joined + 1; i <= wait; ++i) d.sides[static_cast<size_t>(i)].join = k;
      joined = wait;
      d.waits[static_cast<size_t>(k)] = wait;
    }
    for (int32_t t : s.reads) main_r[root(t)] = k;
    for (int32_t t : s.writes) main_w[root(t)] = k;
    mains_through[static_cast<size_t>(k)] = mains_before + 1;
  }
  return d;
}

bool overlap(const std::pair<uint64_t, uint64_t>& a, const std::pair<uint64_t, uint64_t>& b) {
  return a.first < a.second && b.first < b.second && a.first < b.second && b.first < a.second;
}

// True when side step `s` shares bytes with a main-stream step it may run beside (both reading aside).
bool meets_main(const SideStep& s, const std::vector<bool>& is_side, const std::vector<StepIo>& steps,
                const TensorPlace& place) {
  auto bytes = [&](int32_t t) { return place.bytes[static_cast<size_t>(t)]; };
  const StepIo& side = steps[static_cast<size_t>(s.step)];
  for (int m = s.fork + 1; m < s.join; ++m) {
    if (is_side[static_cast<size_t>(m)]) continue;
    const StepIo& main = steps[static_cast<size_t>(m)];
    for (int32_t w : side.writes) {
      for (int32_t t : main.reads)
        if (overlap(bytes(w), bytes(t))) return true;
      for (int32_t t : main.writes)
        if (overlap(bytes(w), bytes(t))) return true;
    }
    for (int32_t r : side.reads)
      for (int32_t t : main.writes)
        if (overlap(bytes(r), bytes(t))) return true;
  }
  return false;
}

}  // namespace

std::vector<SideStep> find_side_steps(const std::vector<StepIo>& steps, const TensorPlace& place,
                                      std::vector<int>* main_waits) {
  std::vector<bool> keep_main(steps.size(), false);
  for (;;) {
    Decision d = decide(steps, place, keep_main);
    int bad = -1;
    std::vector<bool> is_side(steps.size(), false);
    for (const SideStep& x : d.sides) is_side[static_cast<size_t>(x.step)] = true;
    if (!place.bytes.empty())
      for (const SideStep& s : d.sides)
        if (meets_main(s, is_side, steps, place)) {
          bad = s.step;
          break;
        }
    if (bad < 0) {
      if (main_waits) *main_waits = std::move(d.waits);
      return std::move(d.sides);
    }
    keep_main[static_cast<size_t>(bad)] = true;  // and decide again: the steps after it may change
  }
}

std::vector<SideStep> engine_side_steps(const EngineImpl& e, std::vector<int>* main_waits) {
  TensorPlace place;
  const size_t nt = e.tensors.size();
  place.root.resize(nt);
  place.pinned.resize(nt);
  place.bytes.resize(nt);
  for (size_t t = 0; t < nt; ++t) {
    const TensorRec& r = e.tensors[t];
    place.root[t] = r.base >= 0 ? r.base : static_cast<int32_t>(t);
    place.pinned[t] = r.kind == TensorKind::kOutput;
    if (r.kind == TensorKind::kActivation || r.kind == TensorKind::kOutput) {
      const uint64_t lo = r.base >= 0 ? e.tensors[static_cast<size_t>(r.base)].offset + r.offset : r.offset;
      place.bytes[t] = {lo, lo + r.bytes};
    }
  }
  auto activation = [&](int32_t t) {
    if (t < 0) return false;
    const TensorKind k = e.tensors[static_cast<size_t>(t)].kind;
    return k == TensorKind::kActivation || k == TensorKind::kOutput;
  };
  std::vector<StepIo> io;
  for (const StepRec& s : e.steps) {
    StepIo x;
    for (int32_t t : s.inputs)
      if (activation(t)) x.reads.push_back(t);
    for (int32_t t : s.outputs)
      if (activation(t)) x.writes.push_back(t);
    io.push_back(std::move(x));
  }
  return find_side_steps(io, place, main_waits);
}

}  // namespace kiln::detail
