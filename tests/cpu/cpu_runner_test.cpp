// Which CPU steps run on one thread whatever the context's thread count (runtime/cpu/cpu_runner.h):
// LeNet-5's first layers at batch 1 do, the same layers at batch 64 do not; and an engine whose
// steps run that way computes at 1 and 3 threads what it computes at 2.
#include "runtime/cpu/cpu_runner.h"

#include <gtest/gtest.h>

#include <thread>

#include "build/build.h"
#include "int8_test_util.h"
#include "runtime/cpu/thread_budget.h"
#include "runtime/engine_impl.h"

namespace kiln::detail {
namespace {

using namespace kiln::test;

// x [n, 1, 28, 28] -> Conv 6x5x5 (pads 2) -> Relu -> MaxPool 2x2 -> Flatten -> Gemm to 10.
OnnxModel lenet_head(int64_t n) {
  OnnxModel m("lenet_head");
  m.input("x", {n, 1, 28, 28});
  m.output("y");
  m.init_rand("w1", {6, 1, 5, 5}, -0.4f, 0.4f);
  m.init_rand("b1", {6});
  m.init_rand("w2", {10, 6 * 14 * 14}, -0.1f, 0.1f);
  m.init_rand("b2", {10});
  attr_ints(m.node("Conv", "conv", {"x", "w1", "b1"}, {"c"}), "pads", {2, 2, 2, 2});
  m.node("Relu", "relu", {"c"}, {"r"});
  auto* p = m.node("MaxPool", "pool", {"r"}, {"p"});
  attr_ints(p, "kernel_shape", {2, 2});
  attr_ints(p, "strides", {2, 2});
  m.node("Flatten", "flat", {"p"}, {"f"});
  attr_int(m.node("Gemm", "fc", {"f", "w2", "b2"}, {"y"}), "transB", 1);
  return m;
}

std::vector<uint8_t> build(int64_t n) {
  graph::Graph g = lenet_head(n).import();
  return build::build_engine(g, {});
}

// The steps that run on one thread, by op name (the conv's name depends on the layout).
std::map<std::string, bool> one_thread(const std::vector<uint8_t>& engine) {
  const std::shared_ptr<EngineImpl> e = parse_engine(engine, "test");
  std::map<std::string, bool> out;
  for (const StepRec& st : e->steps) out[st.name] = runs_on_one_thread(*e, st);
  return out;
}

TEST(CpuRunner, SmallStepsRunOnOneThread) {
  // Batch 1: the convolution 117,600 multiply-adds, the pool 5,880 elements, the product 11,760.
  for (const auto& [name, one] : one_thread(build(1))) EXPECT_TRUE(one) << name;
  // Batch 64: 7.5 million multiply-adds, 376,320 elements, 752,640 multiply-adds.
  int parallel = 0;
  for (const auto& [name, one] : one_thread(build(64))) parallel += !one;
  EXPECT_GE(parallel, 3);
}

// Sets the process's CPU thread budget for a test, then back to the default.
struct BudgetScope {
  explicit BudgetScope(int threads) : before(cpu_thread_budget()) { set_cpu_thread_budget(threads); }
  ~BudgetScope() { set_cpu_thread_budget(before); }
  int before;
};

TEST(CpuRunner, SameOutputsAtEveryThreadCount) {
  const BudgetScope budget(3);  // 3 threads even on 2 cores
  for (int64_t n : {1, 64}) {
    const auto e = Engine::from_bytes(build(n));
    const std::vector<float> x = random_vec(static_cast<size_t>(n * 28 * 28), 3);
    std::vector<std::vector<std::byte>> ys;
    for (int threads : {1, 2, 3}) {
      auto ctx = e->create_context(threads);
      ctx->set_input("x", x.data(), x.size() * sizeof(float));
      ctx->run();
      const auto y = ctx->output("y");
      ys.emplace_back(y.begin(), y.end());
    }
    EXPECT_EQ(ys[0], ys[1]) << "batch " << n;
    EXPECT_EQ(ys[0], ys[2]) << "batch " << n;
  }
}

// Two contexts of 2 threads each running at once within a budget of 2: they share it (at most one
// thread more than the budget, while a run holds it all and the other has its caller's thread) and
// compute what a context alone computes (bit for bit with Kiln's kernels, which ctest selects:
// oneDNN's float32 steps may round differently at another thread count).
TEST(CpuRunner, ContextsRunningAtOnceShareTheThreadBudget) {
  const BudgetScope budget(2);
  const auto e = Engine::from_bytes(build(64));
  const std::vector<float> x = random_vec(size_t{64} * 28 * 28, 4);
  auto alone = e->create_context(2);
  alone->set_input("x", x.data(), x.size() * sizeof(float));
  alone->run();
  const auto want = alone->output("y");
  const std::vector<std::byte> expected(want.begin(), want.end());
  cpu::ThreadBudget& b = cpu::ThreadBudget::process();
  b.reset_peak();
  std::vector<std::vector<std::byte>> got(2);
  std::vector<std::thread> runs;
  for (int i = 0; i < 2; ++i)
    runs.emplace_back([&, i] {
      auto ctx = e->create_context(2);
      ctx->set_input("x", x.data(), x.size() * sizeof(float));
      for (int r = 0; r < 20; ++r) {
        ctx->run();
        const auto y = ctx->output("y");
        got[static_cast<size_t>(i)].assign(y.begin(), y.end());
        if (got[static_cast<size_t>(i)] != expected) return;
      }
    });
  for (std::thread& t : runs) t.join();
  EXPECT_EQ(got[0], expected);
  EXPECT_EQ(got[1], expected);
  EXPECT_GE(b.peak(), 2);  // the runs took their threads from the budget
  EXPECT_LE(b.peak(), 3);
  EXPECT_EQ(b.in_use(), 0);
}

}  // namespace
}  // namespace kiln::detail
