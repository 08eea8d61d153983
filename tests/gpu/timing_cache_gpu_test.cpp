// The timing cache's close calls (choose_tactics.cpp, close_calls.h): a verdict timed in one engine
// is reused by a rebuild of that engine, but not by another engine that shares the layer; a
// missing verdict is timed again; a cache of the older format is measured again; a
// damaged one is refused. The close call is made by editing the cache of a first build: the
// convolution gets a rival, which a small engine may not give it by itself. Skips without a GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../cpu/onnx_model_util.h"
#include "gpu_harness.h"
#include "kiln/engine.h"
#include "build/build.h"
#include "runtime/cuda/device.h"

namespace kiln {
namespace {

using nlohmann::json;

// x[1,8,16,16] -> Conv(16x8x3x3, pads 1) -> Relu -> GlobalAveragePool -> Flatten -> Gemm(classes x 16).
// Two values of `classes` share the convolution's layer, not the engine.
onnx::ModelProto net(int64_t classes) {
  test::OnnxModel m("net");
  m.init_rand("w", {16, 8, 3, 3}, -0.5f, 0.5f);
  m.init_rand("b", {16}, -0.5f, 0.5f);
  m.init_rand("w2", {classes, 16}, -0.5f, 0.5f);
  m.init_rand("b2", {classes}, -0.5f, 0.5f);
  m.input("x", {1, 8, 16, 16});
  m.output("y");
  test::attr_ints(m.node("Conv", "conv", {"x", "w", "b"}, {"c"}), "pads", {1, 1, 1, 1});
  m.node("Relu", "relu", {"c"}, {"r"});
  m.node("GlobalAveragePool", "pool", {"r"}, {"p"});
  m.node("Flatten", "flatten", {"p"}, {"f"});
  test::attr_int(m.node("Gemm", "gemm", {"f", "w2", "b2"}, {"y"}), "transB", 1);
  return m.m;
}

struct Built {
  std::shared_ptr<const Engine> engine;
  std::vector<std::string> log;

  bool has(const std::string& prefix) const {
    for (const std::string& l : log)
      if (l.rfind(prefix, 0) == 0) return true;
    return false;
  }
  std::string line(const std::string& prefix) const {
    for (const std::string& l : log)
      if (l.rfind(prefix, 0) == 0) return l;
    return "";
  }
  int conv_tactic() const {
    for (const StepInfo& s : engine->summary().steps)
      if (s.op.find("Conv") != std::string::npos) return s.tactic;
    return -100;
  }
};

Built build(int64_t classes, const std::filesystem::path& cache) {
  Built b;
  graph::Graph g = test::import_model(net(classes));
  build::BuildOptions o;
  o.target = gpu::gpu_target();
  o.timing_cache = cache.string();
  o.log = [&b](const std::string& s) { b.log.push_back(s); };
  b.engine = Engine::from_bytes(build::build_engine(g, o), "net");
  return b;
}

json read(const std::filesystem::path& p) {
  std::ifstream f(p);
  return json::parse(f);
}
void write(const std::filesystem::path& p, const json& j) { std::ofstream(p) << j.dump(1); }

// The tactics timed for the convolution in a build's -v log ("tactic for 'conv...' (...): T of
// T1:ms T2:failed ..."), those that ran.
std::vector<int> timed_conv_tactics(const Built& b) {
  std::vector<int> r;
  std::string l = b.line("tactic for 'conv");
  const size_t of = l.find(" of ");
  if (of == std::string::npos) return r;
  std::istringstream in(l.substr(of + 4));
  for (std::string item; in >> item;) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos || item.find("failed") != std::string::npos) continue;
    r.push_back(std::stoi(item.substr(0, colon)));
  }
  return r;
}

TEST(TimingCache, VerdictsBelongToTheEngineTheyWereTimedIn) {
  KILN_SKIP_WITHOUT_GPU();
  const auto cache = std::filesystem::temp_directory_path() / "kiln_timing_cache_gpu_test.json";
  std::filesystem::remove(cache);
  const Built first = build(10, cache);
  const std::vector<int> timed = timed_conv_tactics(first);
  ASSERT_GE(timed.size(), 2u) << first.line("tactic for 'conv");
  json j = read(cache);
  ASSERT_EQ(j.at("format"), 2);
  std::string key;
  for (const auto& [k, v] : j.at("layers").items())
    if (k.find("Conv") != std::string::npos) key = k;
  ASSERT_FALSE(key.empty()) << j.dump(1);
  const int alone = j["layers"][key]["tactic"].get<int>();
  const int rival = timed[0] == alone ? timed[1] : timed[0];

  // The convolution made a close call with one rival, the only one; no verdicts yet.
  for (auto& [k, v] : j["layers"].items()) v.erase("rivals");
  j["layers"][key]["rivals"] = json::array({json::array({rival, j["layers"][key]["ms"]})});
  j["engines"] = json::object();
  write(cache, j);
  const Built timed_a = build(10, cache);
  EXPECT_TRUE(timed_a.has("close call for 'conv")) << timed_a.line("choose-tactics");
  EXPECT_NE(timed_a.line("choose-tactics").find("0 decided before"), std::string::npos);
  j = read(cache);
  ASSERT_EQ(j["engines"].size(), 1u) << j["engines"].dump(1);
  const std::string engine_a = j["engines"].items().begin().key();
  ASSERT_TRUE(j["engines"][engine_a].contains(key));
  EXPECT_EQ(j["engines"][engine_a][key]["tactic"].get<int>(), timed_a.conv_tactic());

  // A rebuild of the same engine takes the verdict as it stands in the cache, without timing it.
  j["engines"][engine_a][key]["tactic"] = rival;
  write(cache, j);
  const Built again_a = build(10, cache);
  EXPECT_FALSE(again_a.has("close call for 'conv")) << again_a.line("close call");
  EXPECT_NE(again_a.line("choose-tactics").find("1 decided before"), std::string::npos)
      << again_a.line("choose-tactics");
  EXPECT_EQ(again_a.conv_tactic(), rival);

  // Another engine with the same convolution times the call in itself.
  const Built b = build(7, cache);
  EXPECT_TRUE(b.has("close call for 'conv")) << b.line("choose-tactics");
  EXPECT_NE(b.line("choose-tactics").find(" 0 decided before"), std::string::npos);
  j = read(cache);
  EXPECT_EQ(j["engines"].size(), 2u);
  EXPECT_EQ(j["engines"][engine_a][key]["tactic"].get<int>(), rival);  // left as it was
  std::filesystem::remove(cache);
}

TEST(TimingCache, OlderFormatIsMeasuredAgainAndDamageIsRefused) {
  KILN_SKIP_WITHOUT_GPU();
  const auto cache = std::filesystem::temp_directory_path() / "kiln_timing_cache_gpu_test_old.json";
  write(cache, json{{"format", 1}, {"entries", json::object({{"some key", {{"tactic", 3}, {"ms", 0.1}}}})}});
  const Built b = build(10, cache);
  EXPECT_TRUE(b.has(cache.string() + ": a timing cache of an older Kiln (format 1): measured again"));
  EXPECT_EQ(b.line("choose-tactics").find(" 0 nodes timed"), std::string::npos) << b.line("choose-tactics");
  EXPECT_EQ(read(cache).at("format"), 2);

  json j = read(cache);
  for (auto& [k, v] : j["layers"].items()) v["rivals"] = "none";
  write(cache, j);
  try {
    build(10, cache);
    ADD_FAILURE() << "a damaged timing cache was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a Kiln timing cache"), std::string::npos) << e.what();
  }
  std::filesystem::remove(cache);
}

// An empty file (a plain --int8 build makes its trial cache so) has no entries yet: every layer is
// timed, and the file is written as a cache.
TEST(TimingCache, EmptyFileIsACacheWithNoEntries) {
  KILN_SKIP_WITHOUT_GPU();
  const auto cache = std::filesystem::temp_directory_path() / "kiln_timing_cache_gpu_test_empty.json";
  std::ofstream(cache).close();
  const Built b = build(10, cache);
  EXPECT_EQ(b.line("choose-tactics").find(" 0 nodes timed"), std::string::npos) << b.line("choose-tactics");
  EXPECT_EQ(read(cache).at("format"), 2);
  std::filesystem::remove(cache);
}

}  // namespace
}  // namespace kiln
