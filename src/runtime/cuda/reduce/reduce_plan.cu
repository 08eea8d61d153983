// The host planning of the reduce family's reduction engine (reduce_internal.cuh): the shape of a
// reduction and the thread groups that run it. The family's table is in reduce.cu.
#include <array>

#include "runtime/cuda/reduce/reduce_internal.cuh"

namespace kiln::gpu {

namespace red {

RedShape plan_reduction(std::span<const int64_t> shape, const std::vector<bool>& mask, const char* op) {
  RedShape p;
  p.out_count = 1;
  p.red_count = 1;
  for (size_t i = 0; i < shape.size(); ++i) (mask[i] ? p.red_count : p.out_count) *= shape[i];
  if (p.out_count == 0 || p.red_count == 0) return p;  // simple; inner = 1
  // Runs: size-1 dims dropped, neighbours of the same kind merged (a run is contiguous inside).
  struct Run {
    int64_t size, stride;
    bool reduced;
  };
  std::vector<Run> runs;
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1) {
      if (!runs.empty() && runs.back().reduced == mask[i])
        runs.back().size *= shape[i];
      else
        runs.push_back({shape[i], stride, mask[i]});
    }
    stride *= shape[i];
  }
  std::reverse(runs.begin(), runs.end());  // outermost first
  int reduced_runs = 0;
  for (const Run& r : runs) reduced_runs += r.reduced;
  p.inner_reduced = runs.empty() || runs.back().reduced;
  if (reduced_runs <= 1) {
    p.simple = true;
    p.inner = !runs.empty() && !runs.back().reduced && reduced_runs == 1 ? runs.back().size : 1;
    if (reduced_runs == 0) p.inner = 1;  // nothing reduced: every output reads one element
    return p;
  }
  p.simple = false;
  for (const Run& r : runs) {
    int& n = r.reduced ? p.nr : p.nk;
    if (n == kMaxRuns)
      throw Error(std::string(op) + ": the reduced axes form more than " + std::to_string(kMaxRuns) +
                  " separate groups; the CUDA backend supports at most that many");
    (r.reduced ? p.rsize : p.ksize)[n] = r.size;
    (r.reduced ? p.rstride : p.kstride)[n] = r.stride;
    ++n;
  }
  return p;
}

RedShape plan_axis(const AxisSplit& s) {
  RedShape p;
  p.out_count = s.outer * s.inner;
  p.red_count = s.len;
  p.inner = s.inner;
  p.inner_reduced = s.inner == 1;
  return p;
}

// Enough resident threads to keep the memory system busy on any current GPU (an H100 holds 270K).
constexpr int64_t kWantThreads = 256 * 1024;

GroupChoice choose_groups(const RedShape& s) {
  GroupChoice c;
  const int64_t r = s.red_count;
  // Contiguous reduced elements: a group per output, sized so that each thread adds a few of them
  // (short rows: 8 threads, so that 4 outputs share a warp); a block when the rows are long and
  // the outputs too few to fill the GPU with warps.
  if (!s.inner_reduced || r <= 4)
    c.g = 1;
  else if (r <= 64)
    c.g = 8;
  else if ((r >= 4096 && s.out_count * 32 < kWantThreads / 2) || (r >= 512 && s.out_count * 32 < kWantThreads / 8))
    c.g = kBlock;
  else
    c.g = 32;
  const int64_t threads = s.out_count * c.g;
  // Split only when the GPU would otherwise idle and every thread still gets a long stretch.
  if (threads < kWantThreads / 4 && r / c.g >= 64)
    c.slices =
        std::max<int64_t>(1, std::min({ceil_div(kWantThreads, threads), r / (int64_t{32} * c.g), int64_t{2048}}));
  return c;
}

}  // namespace red

}  // namespace kiln::gpu
