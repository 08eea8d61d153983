// oneDNN's path for CPU float32 engines (runtime/cpu/onednn.h) against Kiln's own kernels, in one
// process: the same model built with the library (channels-last, NhwcConv and NHWC pools) and
// without it (channels-first, Kiln's kernels). A context's steps keep their primitives between
// runs: they must give the same outputs on new inputs, on another thread than the one that made
// them, and with another thread count. INT8 engines: the library's integer sums (on CPUs with
// VNNI) and Kiln's epilogue against Kiln's kernels on the same channels-last engine. Skips where
// Kiln has no oneDNN.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "build/build.h"
#include "int8_test_util.h"
#include "kiln/engine.h"
#include "onnx_model_util.h"
#include "runtime/cpu/onednn.h"

namespace kiln {
namespace {

using namespace kiln::test;

// x[2,3,17,17] -> Conv 3x3 s2 (+bias, Relu) -> MaxPool 3 s2 ceil_mode -> Conv 1x1 (+residual
// Add, Relu) -> depthwise Conv 3x3 (Clip) -> AveragePool 3 s2 ceil_mode count_include_pad (no
// pads) -> Flatten -> Gemm(5).
OnnxModel net() {
  OnnxModel m("onednn");
  m.input("x", {2, 3, 17, 17});
  m.init_rand("w1", {16, 3, 3, 3}, -0.3f, 0.3f);
  m.init_rand("b1", {16}, -0.1f, 0.1f);
  m.init_rand("w2", {16, 16, 1, 1}, -0.3f, 0.3f);
  m.init_rand("w3", {16, 1, 3, 3}, -0.3f, 0.3f);
  m.init_rand("fw", {5, 64}, -0.3f, 0.3f);
  auto* c1 = m.node("Conv", "c1", {"x", "w1", "b1"}, {"y1"});
  attr_ints(c1, "strides", {2, 2});
  attr_ints(c1, "pads", {1, 1, 1, 1});
  m.node("Relu", "r1", {"y1"}, {"a1"});
  auto* mp = m.node("MaxPool", "mp", {"a1"}, {"p1"});
  attr_ints(mp, "kernel_shape", {3, 3});
  attr_ints(mp, "strides", {2, 2});
  attr_int(mp, "ceil_mode", 1);
  m.node("Conv", "c2", {"p1", "w2"}, {"y2"});
  m.node("Add", "add", {"y2", "p1"}, {"s"});
  m.node("Relu", "r2", {"s"}, {"a2"});
  auto* c3 = m.node("Conv", "c3", {"a2", "w3"}, {"y3"});
  attr_int(c3, "group", 16);
  attr_ints(c3, "pads", {1, 1, 1, 1});
  m.init_f("lo", {}, {0.f});
  m.init_f("hi", {}, {0.5f});
  m.node("Clip", "clip", {"y3", "lo", "hi"}, {"a3"});
  auto* ap = m.node("AveragePool", "ap", {"a3"}, {"p2"});
  attr_ints(ap, "kernel_shape", {3, 3});
  attr_ints(ap, "strides", {2, 2});
  attr_int(ap, "ceil_mode", 1);
  attr_int(ap, "count_include_pad", 1);
  m.node("Flatten", "flat", {"p2"}, {"f"});
  attr_int(m.node("Gemm", "fc", {"f", "fw"}, {"y"}), "transB", 1);
  m.output("y");
  return m;
}

std::shared_ptr<const Engine> build(bool library) {
  cpu::onednn::set_enabled(library);
  graph::Graph g = net().import();
  build::BuildOptions o;
  o.target = "cpu";
  auto e = Engine::from_bytes(build::build_engine(g, o), library ? "onednn" : "kiln");
  cpu::onednn::set_enabled(true);
  return e;
}

std::vector<float> run(Context& ctx, const std::vector<float>& x) { return run_floats(ctx, "x", x, "y"); }

void expect_near(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], 1e-4f * (1 + std::fabs(b[i]))) << what << " [" << i << "]";
}

TEST(OnednnCpu, MatchesKilnsKernelsAcrossRunsThreadsAndThreadCounts) {
  if (!cpu::onednn::available()) GTEST_SKIP() << "Kiln was built without oneDNN (or KILN_CPU_KERNELS=kiln)";
  const auto lib = build(true), own = build(false);
  int nhwc = 0;
  for (const StepInfo& s : lib->summary().steps)
    nhwc += s.op == "NhwcConv" || s.op == "NhwcMaxPool" || s.op == "NhwcAveragePool";
  EXPECT_EQ(nhwc, 5) << "three convolutions and two pools channels-last";
  for (const StepInfo& s : own->summary().steps) EXPECT_NE(s.op.rfind("Nhwc", 0), 0u) << s.op;

  auto reference = own->create_context(1);
  ContextOptions two;
  two.cpu_threads = 2;
  auto ctx = lib->create_context(two);
  for (uint32_t seed : {1u, 2u, 3u}) {  // the primitives made by the first run serve the next
    const std::vector<float> x = random_vec(2 * 3 * 17 * 17, seed);
    expect_near(run(*ctx, x), run(*reference, x), "run " + std::to_string(seed));
  }
  // Another thread than the one that made the primitives.
  const std::vector<float> x = random_vec(2 * 3 * 17 * 17, 9);
  std::vector<float> y;
  std::thread([&] { y = run(*ctx, x); }).join();
  expect_near(y, run(*reference, x), "another thread");
  // Another thread count: a context of one thread.
  auto one = lib->create_context(1);
  expect_near(run(*one, x), run(*reference, x), "one thread");
}

// The same network built --int8 (calibrated on random batches): its convolutions become NhwcQConv
// (int8 or uint8 activations as quantize-int8 chose them; the grouped one too), int8 MaxPool
// NhwcMaxPool. Run with the library and without it (every channels-last op then runs Kiln's
// kernels on permuted tensors), on several inputs and thread counts: the integer sums are exact,
// so the outputs agree but for the float pools' order of sums.
TEST(OnednnCpu, Int8SumsMatchKilnsKernels) {
  if (!cpu::onednn::int8_sums_available())
    GTEST_SKIP() << "no oneDNN, KILN_CPU_KERNELS=kiln, or a CPU without VNNI: INT8 engines stay channels-first";
  TempDir dir;
  write_batches(dir.path() / "calib", 2, {2, 3, 17, 17}, -1.f, 1.f);
  graph::Graph g = net().import();
  build::BuildOptions o;
  o.target = "cpu";
  o.int8 = true;
  o.calib.data = dir / "calib";
  const auto e = Engine::from_bytes(build::build_engine(g, o), "int8");
  int qconv = 0;
  for (const StepInfo& s : e->summary().steps) qconv += s.op == "NhwcQConv";
  EXPECT_EQ(qconv, 3) << "the three convolutions channels-last";
  ContextOptions two;
  two.cpu_threads = 2;
  auto lib = e->create_context(two), one = e->create_context(1);
  for (uint32_t seed : {1u, 2u}) {
    const std::vector<float> x = random_vec(2 * 3 * 17 * 17, seed);
    const uint64_t before = cpu::onednn::qconv_sums_runs();
    const std::vector<float> with = run(*lib, x), with_one = run(*one, x);
    EXPECT_EQ(cpu::onednn::qconv_sums_runs() - before, 6u) << "the library's sums, three a run";
    cpu::onednn::set_enabled(false);
    auto own = e->create_context(1);
    const std::vector<float> without = run(*own, x);
    cpu::onednn::set_enabled(true);
    expect_near(with, without, "run " + std::to_string(seed));
    expect_near(with_one, without, "one thread, run " + std::to_string(seed));
  }
}

}  // namespace
}  // namespace kiln
