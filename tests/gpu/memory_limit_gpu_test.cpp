// Device memory limits (runtime/cuda/device_memory.h): a build within --memory-limit
// (BuildOptions::memory_limit) reports a peak of Kiln's buffers within it, and one whose limit
// cannot hold the network's own buffers fails naming the limit; a context whose
// ContextOptions::memory_limit cannot hold its arena and weights is not made, and the error says
// what did not fit. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../cpu/onnx_model_util.h"
#include "build/build.h"
#include "gpu_harness.h"
#include "kiln/engine.h"
#include "runtime/cuda/device.h"

namespace kiln {
namespace {

using namespace kiln::test;

// x[8,32,56,56] -> Conv 3x3 32->64 -> Relu -> Conv 3x3 64->64 -> GlobalAveragePool -> Flatten ->
// Gemm(10): about 6 MiB of activations at batch 8.
OnnxModel net() {
  OnnxModel m("memory_limit");
  m.input("x", {8, 32, 56, 56});
  m.init_rand("w1", {64, 32, 3, 3}, -0.1f, 0.1f);
  m.init_rand("w2", {64, 64, 3, 3}, -0.1f, 0.1f);
  attr_ints(m.node("Conv", "conv1", {"x", "w1"}, {"c1"}), "pads", {1, 1, 1, 1});
  m.node("Relu", "relu", {"c1"}, {"r"});
  attr_ints(m.node("Conv", "conv2", {"r", "w2"}, {"c2"}), "pads", {1, 1, 1, 1});
  m.node("GlobalAveragePool", "gap", {"c2"}, {"g"});
  attr_int(m.node("Flatten", "flatten", {"g"}, {"f"}), "axis", 1);
  m.init_rand("fc.w", {10, 64});
  attr_int(m.node("Gemm", "fc", {"f", "fc.w"}, {"y"}), "transB", 1);
  m.output("y");
  return m;
}

std::string build_error(size_t limit, build::BuildReport* r) {
  graph::Graph g = net().import();
  build::BuildOptions o;
  o.target = gpu::gpu_target();
  o.fp16 = true;
  o.memory_limit = limit;
  try {
    build::build_engine(g, o, r);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MemoryLimit, BuildStaysWithinItsLimitOrSaysWhy) {
  KILN_SKIP_WITHOUT_GPU();
  build::BuildReport free_report;
  ASSERT_EQ(build_error(0, &free_report), "");
  EXPECT_GT(free_report.peak_device_bytes, size_t{6} << 20) << "the activations alone are 6 MiB";
  EXPECT_GT(free_report.peak_host_bytes, 0u);
  EXPECT_GT(free_report.device_bytes_at_start, 0u) << "the CUDA context";

  // Half the unlimited build's peak, but no less than the buffers the network needs (its input and
  // output, the arena of the engines timed: 16 MiB here): the build still succeeds, the tactics
  // whose workspaces do not fit left out, and its peak is lower than the unlimited build's.
  const size_t limit = std::max(size_t{16} << 20, free_report.peak_device_bytes / 2);
  build::BuildReport r;
  ASSERT_EQ(build_error(limit, &r), "");
  EXPECT_LT(r.peak_device_bytes, free_report.peak_device_bytes) << "the limit of " << limit << " bytes changed nothing";

  const std::string e = build_error(size_t{1} << 20, &r);  // 1 MiB: not even the input fits
  EXPECT_NE(e.find("over the memory limit of 1.0 MiB (--memory-limit)"), std::string::npos) << e;
}

TEST(MemoryLimit, ContextThatDoesNotFitIsNotMade) {
  KILN_SKIP_WITHOUT_GPU();
  graph::Graph g = net().import();
  build::BuildOptions o;
  o.target = gpu::gpu_target();
  const auto engine = Engine::from_bytes(build::build_engine(g, o), "memory_limit.kiln");
  ContextOptions small;
  small.memory_limit = size_t{1} << 20;
  try {
    engine->create_context(small);
    ADD_FAILURE() << "a context within 1 MiB";
  } catch (const Error& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find("over the memory limit of 1.0 MiB (ContextOptions::memory_limit)"), std::string::npos) << m;
  }
  ContextOptions enough;
  enough.memory_limit = size_t{256} << 20;
  auto ctx = engine->create_context(enough);
  std::vector<float> x(8 * 32 * 56 * 56, 0.5f);
  ctx->set_input("x", x.data(), x.size() * sizeof(float));
  EXPECT_NO_THROW(ctx->run());
}

}  // namespace
}  // namespace kiln
