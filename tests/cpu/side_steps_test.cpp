// Side steps (runtime/side_steps.h): which steps a GPU context runs on its second stream. Covered:
// ResNet's bottleneck with a downsample (the downsample goes beside the block's first two layers),
// a chain (none), each guard (an engine output, no main step to overlap, a main step between fork
// and step that touches the same memory, bytes shared with a step in the window), a fork at the
// start, two side steps in one window, a step kept by its bytes (the decision made again after it),
// a side step nothing on the main stream reads, and an engine written for sm_90: the builder keeps
// the downsample's bytes apart from the steps beside it, which the check by bytes confirms
// independently.
#include "runtime/side_steps.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kiln/engine.h"
#include "runtime/engine_impl.h"
#include "sm90_build.h"
#include "small_nets.h"

namespace kiln {
namespace {

using detail::SideStep;
using detail::StepIo;
using detail::TensorPlace;

// n tensors, each its own root, none pinned, no bytes.
TensorPlace plain(size_t n) {
  TensorPlace p;
  for (size_t t = 0; t < n; ++t) p.root.push_back(static_cast<int32_t>(t));
  p.pinned.assign(n, false);
  return p;
}

// Tensors: 0 x (block input), 1 a, 2 b, 3 d, 4 y. Steps: 0 stem -> x; 1 conv1 x -> a; 2 conv2 a -> b;
// 3 downsample x -> d; 4 conv3 (b, d) -> y.
std::vector<StepIo> block_steps() { return {{{}, {0}}, {{0}, {1}}, {{1}, {2}}, {{0}, {3}}, {{2, 3}, {4}}}; }

TEST(SideSteps, DownsampleRunsBesideTheBlock) {
  std::vector<int> waits;
  const std::vector<SideStep> s = detail::find_side_steps(block_steps(), plain(5), &waits);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].step, 3);
  EXPECT_EQ(s[0].fork, 0);
  EXPECT_EQ(s[0].join, 4);
  EXPECT_EQ(waits, (std::vector<int>{-1, -1, -1, -1, 0}));
}

TEST(SideSteps, ChainHasNone) {
  const std::vector<StepIo> chain = {{{}, {0}}, {{0}, {1}}, {{1}, {2}}, {{2}, {3}}};
  std::vector<int> waits;
  EXPECT_TRUE(detail::find_side_steps(chain, plain(4), &waits).empty());
  EXPECT_EQ(waits, (std::vector<int>{-1, -1, -1, -1}));
}

TEST(SideSteps, EngineOutputStaysOnTheMainStream) {
  TensorPlace p = plain(5);
  p.pinned[3] = true;  // the downsample writes an engine output
  EXPECT_TRUE(detail::find_side_steps(block_steps(), p).empty());
  TensorPlace q = plain(6);
  q.pinned[5] = true;
  q.root[3] = 5;  // a view of an engine output (a slice of a concatenated output, written in place)
  EXPECT_TRUE(detail::find_side_steps(block_steps(), q).empty());
}

TEST(SideSteps, AStepKeptByItsBytesDecidesTheNextAgain) {
  // Two steps beside one block, 3 and 4, both reading x. When 3's output shares bytes with conv2's
  // input, 3 stays on the main stream and the decision is made again: 4 still goes to the side,
  // after the stem, and the conv that reads it waits for it as the first side step.
  const std::vector<StepIo> steps = {{{}, {0}}, {{0}, {1}}, {{1}, {2}}, {{0}, {3}}, {{0}, {4}}, {{2, 3, 4}, {5}}};
  TensorPlace p = plain(6);
  p.bytes = {{0, 64}, {64, 128}, {128, 192}, {192, 256}, {256, 320}, {320, 384}};
  std::vector<SideStep> s = detail::find_side_steps(steps, p);
  ASSERT_EQ(s.size(), 2u);  // apart: both move
  p.bytes[3] = {64, 128};   // 3 writes over conv1's output, which conv2 still reads
  std::vector<int> waits;
  s = detail::find_side_steps(steps, p, &waits);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].step, 4);
  EXPECT_EQ(s[0].fork, 0);
  EXPECT_EQ(s[0].join, 5);
  EXPECT_EQ(waits, (std::vector<int>{-1, -1, -1, -1, -1, 0}));
}

TEST(SideSteps, NeedsAMainStepToOverlap) {
  // The residual conv reads the previous step's output: nothing lies between fork and step.
  const std::vector<StepIo> steps = {{{}, {0}}, {{0}, {1}}, {{0, 1}, {2}}};
  EXPECT_TRUE(detail::find_side_steps(steps, plain(3)).empty());
}

TEST(SideSteps, SameMemoryBetweenForkAndStepMovesTheFork) {
  // Tensors 3 and 5 are views in root 5 (a concat buffer). Step 2 writes one slice, step 3 the
  // other: the write-after-write keeps step 3 after step 2, which leaves nothing to overlap.
  TensorPlace p = plain(6);
  p.root[3] = 5;
  p.root[2] = 5;
  const std::vector<StepIo> steps = {{{}, {0}}, {{0}, {1}}, {{1}, {2}}, {{0}, {3}}, {{5}, {4}}};
  EXPECT_TRUE(detail::find_side_steps(steps, p).empty());
  // A main step between that reads the buffer the side step would write (write after read).
  const std::vector<StepIo> war = {{{}, {0}}, {{0}, {1}}, {{1, 5}, {2}}, {{0}, {3}}, {{2, 3}, {4}}};
  TensorPlace q = plain(6);
  q.root[3] = 5;
  EXPECT_TRUE(detail::find_side_steps(war, q).empty());
}

TEST(SideSteps, SharedBytesKeepTheStepOnTheMainStream) {
  TensorPlace p = plain(5);
  p.bytes = {{0, 64}, {64, 128}, {128, 192}, {192, 256}, {256, 320}};
  std::vector<SideStep> s = detail::find_side_steps(block_steps(), p);
  ASSERT_EQ(s.size(), 1u);  // apart: it moves
  p.bytes[3] = {100, 164};  // the downsample's output over conv1's and conv2's: it would clobber them
  EXPECT_TRUE(detail::find_side_steps(block_steps(), p).empty());
  p.bytes[3] = {192, 256};
  p.bytes[2] = {0, 64};  // conv2 writes over x while the downsample may still read it
  EXPECT_TRUE(detail::find_side_steps(block_steps(), p).empty());
  p.bytes[2] = {128, 192};
  p.bytes[4] = {0, 64};  // the join may write over x: the side step has finished reading it
  EXPECT_EQ(detail::find_side_steps(block_steps(), p).size(), 1u);
}

TEST(SideSteps, ForkAtTheStart) {
  // Step 2 reads nothing the steps write (an engine input, which is not listed): it may start first.
  const std::vector<StepIo> steps = {{{}, {0}}, {{0}, {1}}, {{}, {2}}, {{1, 2}, {3}}};
  const std::vector<SideStep> s = detail::find_side_steps(steps, plain(4));
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].step, 2);
  EXPECT_EQ(s[0].fork, -1);
  EXPECT_EQ(s[0].join, 3);
}

TEST(SideSteps, TwoInOneWindowAndOneNobodyWaitsFor) {
  // Steps 3 and 4 both read x; step 5 reads both; step 6 (side) is read by step 7, also on the side.
  const std::vector<StepIo> steps = {{{}, {0}},     {{0}, {1}},    {{1}, {2}},    {{0}, {3}},
                                     {{0}, {4}},    {{2, 3, 4}, {5}}, {{0}, {6}},  {{6}, {7}}};
  std::vector<int> waits;
  const std::vector<SideStep> s = detail::find_side_steps(steps, plain(8), &waits);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].step, 3);
  EXPECT_EQ(s[1].step, 4);
  EXPECT_EQ(s[0].join, 5);
  EXPECT_EQ(s[1].join, 5);
  EXPECT_EQ(waits[5], 1);  // the later of the two: the side stream runs them in order
  EXPECT_EQ(s[2].step, 6);
  EXPECT_EQ(s[3].step, 7);  // its input comes from the side stream, which orders them
  EXPECT_EQ(s[3].fork, 0);  // it cannot start before step 6, which waits for step 0
  EXPECT_EQ(s[2].join, 8);  // no main step waits: the run's end joins them
  EXPECT_EQ(s[3].join, 8);
}

TEST(SideSteps, BuilderKeepsTheDownsampleApart) {
  for (auto [fp16, stride] : {std::pair{false, 1}, std::pair{true, 1}, std::pair{false, 2}, std::pair{true, 2}}) {
    SCOPED_TRACE(std::string(fp16 ? "float16" : "float32") + ", stride " + std::to_string(stride));
    auto e = detail::parse_engine(test::build_sm90(test::bottleneck(1, 16, 8, stride), fp16), "test");
    std::vector<int> waits;
    const std::vector<SideStep> s = detail::engine_side_steps(*e, &waits);
    ASSERT_EQ(s.size(), 1u);
    const detail::StepRec& side = e->steps[static_cast<size_t>(s[0].step)];
    EXPECT_EQ(side.name, "downsample");
    EXPECT_EQ(e->steps[static_cast<size_t>(s[0].join)].name.find("conv3"), 0u) << e->steps[s[0].join].name;
    EXPECT_LT(s[0].fork + 1, s[0].step);
    // Independently of find_side_steps: the side step's bytes meet no bytes of a step in its window.
    auto span = [&](int32_t t) {
      const detail::TensorRec& r = e->tensors[static_cast<size_t>(t)];
      const uint64_t lo = r.base >= 0 ? e->tensors[static_cast<size_t>(r.base)].offset + r.offset : r.offset;
      return std::pair<uint64_t, uint64_t>{lo, lo + r.bytes};
    };
    auto arena = [&](int32_t t) {
      return t >= 0 && (e->tensors[static_cast<size_t>(t)].kind == detail::TensorKind::kActivation ||
                        e->tensors[static_cast<size_t>(t)].kind == detail::TensorKind::kOutput);
    };
    std::vector<int32_t> mine;
    for (int32_t t : side.inputs)
      if (arena(t)) mine.push_back(t);
    for (int32_t t : side.outputs) mine.push_back(t);
    ASSERT_FALSE(mine.empty());
    for (int m = s[0].fork + 1; m < s[0].join; ++m) {
      if (m == s[0].step) continue;
      const detail::StepRec& st = e->steps[static_cast<size_t>(m)];
      std::vector<int32_t> theirs = st.outputs;
      for (int32_t t : st.inputs)
        if (arena(t) && std::find(side.inputs.begin(), side.inputs.end(), t) == side.inputs.end())
          theirs.push_back(t);
      for (int32_t a : mine)
        for (int32_t b : theirs) {
          if (!arena(b)) continue;
          const auto x = span(a), y = span(b);
          EXPECT_TRUE(x.second <= y.first || y.second <= x.first)
              << e->tensors[static_cast<size_t>(a)].name << " and " << e->tensors[static_cast<size_t>(b)].name;
        }
    }
    // kiln inspect's view of it.
    const EngineSummary sum = Engine::from_bytes(test::build_sm90(test::bottleneck(1, 16, 8, stride), fp16), "test")->summary();
    int marked = 0;
    for (const StepInfo& st : sum.steps) marked += st.side_after >= -1;
    EXPECT_EQ(marked, 1);
  }
}

}  // namespace
}  // namespace kiln
