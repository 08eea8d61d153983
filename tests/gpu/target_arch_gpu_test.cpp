// Engines limited to another GPU's kernels (`kiln optimize --target-arch sm_87`, BuildOptions::
// kernel_arch; runtime/cuda/device.h): an INT8 network whose convolutions Kiln's own kernels take
// (the implicit GEMM, the streaming 1x1 and, on Hopper, the 3x3 window kernel) built for sm_87 on
// this GPU times and keeps none of the Hopper-only tactics (the wgmma tiles, the split tiles in
// clusters, the window kernel, the wgmma stem), records the limit, and computes what the CPU engine
// computes. On an H100/H200 the build without the limit times Hopper tactics, so the check can fail.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "../cpu/int8_test_util.h"
#include "../cpu/onnx_model_util.h"
#include "build/build.h"
#include "gpu_harness.h"
#include "kiln/engine.h"
#include "runtime/cuda/device.h"

namespace kiln {
namespace {

using namespace kiln::test;

// x[2,64,14,14] -> Conv 3x3 64->64 -> Relu -> Conv 1x1 64->128 -> Relu -> Conv 3x3 128->64 -> Relu
// -> GlobalAveragePool -> Flatten -> Gemm(10).
OnnxModel net() {
  OnnxModel m("target_arch_int8");
  m.input("x", {2, 64, 14, 14});
  auto conv = [&](const std::string& name, const std::string& x, const std::string& y, int64_t c, int64_t o,
                  int64_t k) {
    m.init_rand(name + ".w", {o, c, k, k}, -0.1f, 0.1f);
    m.init_rand(name + ".b", {o}, -0.1f, 0.1f);
    const int64_t p = k / 2;
    attr_ints(m.node("Conv", name, {x, name + ".w", name + ".b"}, {y + ".c"}), "pads", {p, p, p, p});
    m.node("Relu", name + ".relu", {y + ".c"}, {y});
  };
  conv("conv1", "x", "a", 64, 64, 3);
  conv("conv2", "a", "b", 64, 128, 1);
  conv("conv3", "b", "c", 128, 64, 3);
  m.node("GlobalAveragePool", "gap", {"c"}, {"g"});
  attr_int(m.node("Flatten", "flatten", {"g"}, {"f"}), "axis", 1);
  m.init_rand("fc.w", {10, 64});
  m.init_rand("fc.b", {10});
  attr_int(m.node("Gemm", "fc", {"f", "fc.w", "fc.b"}, {"y"}), "transB", 1);
  m.output("y");
  return m;
}

// Kiln's tactics that only compute capability 9.0 runs (runtime/cuda/quant/conv/nhwc.cu: the implicit GEMM's
// tiles from kSyncConfigs = 3 on, wgmma and split; the streaming kernel's from kSyncConfigs = 8 on; the 3x3
// window kernel; conv/conv_plan.cuh: the wgmma stem, alone and after a layout conversion).
bool hopper_only(int t) {
  return (t >= 2003 && t < 2100) || (t >= 2108 && t < 2200) || (t >= 2200 && t < 2300) || t == 301 || t == 303;
}

struct Built {
  std::shared_ptr<const Engine> engine;
  std::vector<int> timed;  // every tactic timed, from the -v log's "tactic for '...': T of T1:ms T2:ms ..."
};

Built build(const TempDir& dir, const std::string& target, int kernel_arch) {
  Built b;
  graph::Graph g = net().import();
  build::BuildOptions o;
  o.target = target;
  o.kernel_arch = kernel_arch;
  o.int8 = true;
  o.force_int8 = true;  // the INT8 engine, whether or not it is faster here
  o.calib.data = dir / "calib";
  o.log = [&b](const std::string& s) {
    if (s.rfind("tactic for '", 0) != 0) return;
    const size_t of = s.find(" of ");
    if (of == std::string::npos) return;
    std::istringstream in(s.substr(of + 4));
    for (std::string item; in >> item;)
      if (const size_t colon = item.find(':'); colon != std::string::npos)
        b.timed.push_back(std::stoi(item.substr(0, colon)));
  };
  b.engine = Engine::from_bytes(build::build_engine(g, o), "target_arch_int8");
  return b;
}

std::vector<float> run(const Engine& e, const std::vector<float>& x) {
  auto ctx = e.create_context(1);
  ctx->set_input("x", x.data(), x.size() * sizeof(float));
  ctx->run();
  const auto bytes = ctx->output("y");
  std::vector<float> y(bytes.size() / sizeof(float));
  std::memcpy(y.data(), bytes.data(), bytes.size());
  return y;
}

TEST(TargetArch, Sm87EngineUsesOnlyAmpereClassKernels) {
  KILN_SKIP_WITHOUT_GPU();
  TempDir dir;
  write_batches(dir.path() / "calib", 2, {2, 64, 14, 14}, 0.f, 1.f);
  const std::string here = gpu::gpu_target();
  const Built limited = build(dir, here, 87);
  EXPECT_EQ(limited.engine->summary().kernel_arch, 87);
  ASSERT_FALSE(limited.timed.empty()) << "the build timed no tactic (is -v's tactic line still written?)";
  for (int t : limited.timed) EXPECT_FALSE(hopper_only(t)) << "tactic " << t << " timed for sm_87";
  int steps = 0;
  for (const StepInfo& s : limited.engine->summary().steps) {
    EXPECT_FALSE(hopper_only(s.tactic)) << s.name << ": tactic " << s.tactic;
    steps += s.op == "NhwcQConv";
  }
  EXPECT_EQ(steps, 3) << "the convolutions were meant to run on Kiln's INT8 kernels";

  // The network in float on the CPU (the reference), on random inputs in the calibrated range.
  graph::Graph fg = net().import();
  const auto reference = Engine::from_bytes(build::build_engine(fg, build::BuildOptions{}), "float");
  std::vector<float> x = random_vec(2 * 64 * 14 * 14, 11);
  for (float& v : x) v = (v + 1) / 2;
  const std::vector<float> want = run(*reference, x), got = run(*limited.engine, x);
  EXPECT_LE(rel_error(got, want), 5e-2) << "INT8 on sm_87's kernels against float on the CPU";

  if (gpu_test::hopper() && gpu::kernel_arch_limit() == 0) {  // this GPU's own build times its Hopper tactics
    const Built own = build(dir, here, 0);
    EXPECT_EQ(own.engine->summary().kernel_arch, 0);
    bool any = false;
    for (int t : own.timed) any |= hopper_only(t);
    EXPECT_TRUE(any) << "no Hopper-only tactic timed on " << here << ": the check above proves nothing";
    EXPECT_LE(rel_error(got, run(*own.engine, x)), 1e-2) << "the same INT8 network on Hopper's kernels";
  }
}

}  // namespace
}  // namespace kiln
