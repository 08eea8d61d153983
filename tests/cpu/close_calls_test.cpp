// decide_in_engine (build/close_calls.h): the builder's close calls between tactics, decided by
// timing whole engines. On the GPU the engines differ in one step's tactic; here the writer stands in
// for the builder with CPU engines whose times differ a hundredfold (a 4x8 by 8x3 MatMul against
// three 384-square ones), so that the decision is certain and the test checks the bookkeeping: the
// faster engine's tactic is kept on every node of the call, a slower rival is not, an engine that
// cannot be written leaves the choice, and calls past the budget keep the choice made alone.
#include <gtest/gtest.h>

#include "kiln/types.h"
#include "onnx_model_util.h"
#include "build/build.h"
#include "build/close_calls.h"

namespace kiln::build {
namespace {

using namespace kiln::test;

constexpr int32_t kSlow = 1, kFast = 2, kBroken = 3;

std::vector<uint8_t> engine_of(bool slow) {
  OnnxModel m(slow ? "slow" : "fast");
  const int64_t n = slow ? 384 : 8;
  m.input("a", {slow ? n : 4, n});
  m.init_rand("w", {n, n});
  const std::vector<std::string> y = {"a", "y0", "y1", "y2"};
  const size_t layers = slow ? 3 : 1;
  for (size_t k = 0; k < layers; ++k) m.node("MatMul", y[k + 1], {y[k], "w"}, {y[k + 1]});
  m.output(y[layers]);
  graph::Graph g = m.import();
  return build_engine(g, BuildOptions{});
}

// The engine of a tactic vector: slow or fast by the tactic of node 1 (the call's nodes are 1 and 3).
struct Writer {
  std::vector<uint8_t> slow = engine_of(true), fast = engine_of(false);
  std::vector<std::vector<int32_t>> written;
  EngineWriter fn() {
    return [this](const std::vector<int32_t>& t) {
      written.push_back(t);
      if (t[1] == kBroken) throw Error("no such tactic");
      return t[1] == kSlow ? slow : fast;
    };
  }
};

CloseCall call(int32_t chosen, std::vector<std::pair<int32_t, double>> rivals) {
  return CloseCall{"k", {1, 3}, chosen, 0.005, std::move(rivals), ""};
}

TEST(CloseCalls, KeepsTheRivalWhoseEngineIsFaster) {
  Writer w;
  std::vector<CloseCall> calls = {call(kSlow, {{kFast, 0.0051}})};
  std::vector<int32_t> tactics = {-1, kSlow, 7, kSlow};
  decide_in_engine(calls, tactics, w.fn(), 60, 60);
  EXPECT_EQ(tactics, (std::vector<int32_t>{-1, kFast, 7, kFast}));
  EXPECT_EQ(calls[0].chosen, kFast);
  EXPECT_DOUBLE_EQ(calls[0].chosen_ms, 0.0051);
  EXPECT_NE(calls[0].verdict.find("took 2"), std::string::npos) << calls[0].verdict;
  EXPECT_TRUE(calls[0].decided);
  ASSERT_EQ(w.written.size(), 2u);  // the engine as chosen, then the rival's
  EXPECT_EQ(w.written[1], tactics);
}

TEST(CloseCalls, KeepsTheChoiceWhenTheRivalsEngineIsSlower) {
  Writer w;
  std::vector<CloseCall> calls = {call(kFast, {{kSlow, 0.0052}})};
  std::vector<int32_t> tactics = {-1, kFast, 7, kFast};
  decide_in_engine(calls, tactics, w.fn(), 60, 60);
  EXPECT_EQ(tactics, (std::vector<int32_t>{-1, kFast, 7, kFast}));
  EXPECT_EQ(calls[0].chosen, kFast);
  EXPECT_EQ(calls[0].verdict.find("took"), std::string::npos) << calls[0].verdict;
  EXPECT_NE(calls[0].verdict.find("with 1"), std::string::npos) << calls[0].verdict;
  EXPECT_TRUE(calls[0].decided);
}

TEST(CloseCalls, ARivalThatCannotBeWrittenLeavesTheChoiceAndTheNextIsTried) {
  Writer w;
  std::vector<CloseCall> calls = {call(kSlow, {{kBroken, 0.005}, {kFast, 0.0052}})};
  std::vector<int32_t> tactics = {-1, kSlow, 7, kSlow};
  decide_in_engine(calls, tactics, w.fn(), 60, 60);
  EXPECT_NE(calls[0].verdict.find("3: failed in the engine (no such tactic)"), std::string::npos) << calls[0].verdict;
  EXPECT_EQ(tactics[1], kFast);
  EXPECT_EQ(tactics[3], kFast);
  EXPECT_FALSE(calls[0].decided);  // a rival was not compared (-v says so; the cache keeps the choice)
}

// A call whose only rival cannot be written, then one whose rival is faster (decided second: less
// layer time).
std::vector<CloseCall> broken_then_fast() {
  std::vector<CloseCall> calls = {call(kSlow, {{kBroken, 0.005}}), call(kSlow, {{kFast, 0.0051}})};
  calls[1].chosen_ms = 0.001;
  return calls;
}

// After a rival fails, the engine as chosen is made again for the next comparison; if that fails
// too, the calls left keep their choices and say why.
TEST(CloseCalls, AFailureRemakesTheEngineAsChosenOrStops) {
  Writer w;
  std::vector<CloseCall> calls = broken_then_fast();
  std::vector<int32_t> tactics = {-1, kSlow, kSlow, kSlow};
  decide_in_engine(calls, tactics, w.fn(), 60, 60);
  ASSERT_EQ(w.written.size(), 4u);  // as chosen, the broken rival, as chosen again, the fast rival
  EXPECT_EQ(w.written[2], w.written[0]);
  EXPECT_EQ(tactics, (std::vector<int32_t>{-1, kFast, kSlow, kFast}));
  EXPECT_FALSE(calls[0].decided);
  EXPECT_TRUE(calls[1].decided);

  Writer broken;  // the engine as chosen cannot be made a second time
  int made = 0;
  EngineWriter once = [&](const std::vector<int32_t>& t) {
    if (t[1] == kBroken || (t == std::vector<int32_t>{-1, kSlow, kSlow, kSlow} && made++ > 0))
      throw Error("no such tactic");
    return broken.fast;
  };
  std::vector<CloseCall> calls2 = broken_then_fast();
  tactics = {-1, kSlow, kSlow, kSlow};
  decide_in_engine(calls2, tactics, once, 60, 60);
  EXPECT_EQ(tactics, (std::vector<int32_t>{-1, kSlow, kSlow, kSlow}));
  EXPECT_NE(calls2[0].verdict.find("failed too"), std::string::npos) << calls2[0].verdict;
  EXPECT_EQ(calls2[1].verdict, "not timed in the engine (the engine as chosen failed)");
  EXPECT_FALSE(calls2[1].decided);
}

TEST(CloseCalls, CallsPastTheBudgetKeepTheChoiceMadeAlone) {
  Writer w;
  std::vector<CloseCall> calls = {call(kSlow, {{kFast, 0.0051}})};
  std::vector<int32_t> tactics = {-1, kSlow, 7, kSlow};
  decide_in_engine(calls, tactics, w.fn(), 0, 0);
  EXPECT_EQ(tactics[1], kSlow);
  EXPECT_NE(calls[0].verdict.find("not timed in the engine"), std::string::npos) << calls[0].verdict;
  EXPECT_FALSE(calls[0].decided);
}

TEST(CloseCalls, AnEngineAsChosenThatCannotBeWrittenDecidesNothing) {
  Writer w;
  std::vector<CloseCall> calls = {call(kBroken, {{kFast, 0.0051}})};
  std::vector<int32_t> tactics = {-1, kBroken, 7, kBroken};
  decide_in_engine(calls, tactics, w.fn(), 60, 60);
  EXPECT_EQ(tactics[1], kBroken);
  EXPECT_NE(calls[0].verdict.find("not timed in the engine: no such tactic"), std::string::npos) << calls[0].verdict;
  EXPECT_FALSE(calls[0].decided);
}

// A long layer (over kShortLayerMs alone) is decided on one pair of engines, even where they
// differ by less than the 1% that makes a short layer's call time further pairs: here the rival's
// engine is the engine as chosen (kTwin writes the fast one too). The bound is what is checked: two
// identical CPU engines may also time more than 1% apart by chance, which would stop a short
// layer's call after one pair as well.
TEST(CloseCalls, ALongLayerIsDecidedOnOnePairOfEngines) {
  constexpr int32_t kTwin = 4;
  Writer w;
  std::vector<CloseCall> calls = {call(kFast, {{kTwin, 0.0502}})};
  calls[0].chosen_ms = 0.05;
  std::vector<int32_t> tactics = {-1, kFast, 7, kFast};
  decide_in_engine(calls, tactics, w.fn(), 60, 60);
  EXPECT_EQ(w.written.size(), 2u);  // the engine as chosen and the rival's, once
  EXPECT_EQ(calls[0].verdict.find("pairs of contexts"), std::string::npos) << calls[0].verdict;
  EXPECT_TRUE(calls[0].decided);
}

// Calls of long layers stop at their own budget; a short layer's call is still timed after them.
TEST(CloseCalls, LongLayersStopAtTheirBudget) {
  Writer w;
  std::vector<CloseCall> calls = {call(kSlow, {{kFast, 0.0051}}), call(kSlow, {{kFast, 0.051}})};
  calls[1].key = "long";
  calls[1].chosen_ms = 0.05;
  std::vector<int32_t> tactics = {-1, kSlow, 7, kSlow};
  decide_in_engine(calls, tactics, w.fn(), 60, 0);
  ASSERT_EQ(calls[0].key, "long");  // the most layer time first
  EXPECT_NE(calls[0].verdict.find("for long layers were spent"), std::string::npos) << calls[0].verdict;
  EXPECT_FALSE(calls[0].decided);
  EXPECT_TRUE(calls[1].decided);
  EXPECT_EQ(tactics, (std::vector<int32_t>{-1, kFast, 7, kFast}));
}

// Which candidates timed alone are rivals: within kClose of the fastest for a short layer, within
// kCloseLong for a long one, at most two, the fastest first.
TEST(CloseCalls, RivalsOfAShortLayerComeWithinTenPercent) {
  const double best = 0.010;
  const CloseCall c = close_call("k", 7, best, {{5, best * 1.12}, {7, best}, {6, best * 1.08}, {8, best * 1.02}});
  EXPECT_EQ(c.key, "k");
  EXPECT_EQ(c.chosen, 7);
  EXPECT_DOUBLE_EQ(c.chosen_ms, best);
  ASSERT_EQ(c.rivals.size(), 2u);
  EXPECT_EQ(c.rivals[0].first, 8);
  EXPECT_EQ(c.rivals[1].first, 6);
}

TEST(CloseCalls, RivalsOfALongLayerComeWithinOnePercent) {
  const double best = 0.0667;  // ResNet-50's 256 -> 1024 layers at batch 256
  const CloseCall c = close_call("k", 2111, best, {{2111, best}, {2112, 0.0670}, {2108, best * 1.05}});
  ASSERT_EQ(c.rivals.size(), 1u);
  EXPECT_EQ(c.rivals[0].first, 2112);
  EXPECT_TRUE(close_call("k", 1, best, {{1, best}, {2, best * 1.02}}).rivals.empty());
}

TEST(CloseCalls, NoRivalsWithoutAFastest) {
  EXPECT_TRUE(close_call("k", -1, 1e30, {}).rivals.empty());
  EXPECT_TRUE(close_call("k", 1, 0.01, {{1, 0.01}}).rivals.empty());
}

}  // namespace
}  // namespace kiln::build
