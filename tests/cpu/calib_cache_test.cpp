// The calibration cache file (calib/cache.h): written and read back unchanged, human-readable,
// refused with a message when made for another graph, by another method, in another format
// version, or damaged; and the graph hash it keys on (weights count, activation shapes do not).
#include <fstream>

#include "calib/cache.h"
#include "int8_test_util.h"

namespace kiln::calib {
namespace {

using namespace kiln::test;

Cache sample_cache() {
  Cache c;
  c.model = "net";
  c.graph_hash = "0123456789abcdef";
  c.method = Method::kPercentile;
  c.samples = 512;
  c.tensors["input"] = {2.5, -1.25, 2.5};
  c.tensors["conv1.out"] = {0.1234567890123, 0, 0.2};
  return c;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::string read_error(const std::string& path) {
  try {
    read_cache(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CalibCache, RoundTrip) {
  TempDir dir;
  const Cache c = sample_cache();
  write_cache(dir / "c.json", c);
  const Cache r = read_cache(dir / "c.json");
  EXPECT_EQ(r.model, c.model);
  EXPECT_EQ(r.graph_hash, c.graph_hash);
  EXPECT_EQ(r.method, c.method);
  EXPECT_EQ(r.samples, c.samples);
  ASSERT_EQ(r.tensors.size(), 2u);
  EXPECT_EQ(r.tensors.at("conv1.out").amax, 0.1234567890123);  // doubles survive exactly
  EXPECT_EQ(r.tensors.at("input").min, -1.25);
  const std::string text = read_text(dir / "c.json");
  EXPECT_TRUE(has(text, "\"format\": \"kiln calibration cache\"")) << text;
  EXPECT_TRUE(has(text, "\"version\": 1")) << text;
  EXPECT_TRUE(has(text, "\"method\": \"percentile\"")) << text;
  EXPECT_TRUE(has(text, "\"scale\"")) << text;
  EXPECT_NO_THROW(check_cache(dir / "c.json", r, c.graph_hash, Method::kPercentile));
}

TEST(CalibCache, RefusedForAnotherGraphOrMethod) {
  TempDir dir;
  const Cache c = sample_cache();
  try {
    check_cache(dir / "c.json", c, "fedcba9876543210", Method::kPercentile);
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "c.json: this calibration cache was made for another model (model 'net'")) << e.what();
    EXPECT_TRUE(has(e.what(), "delete it or give another --calib-cache file")) << e.what();
  }
  try {
    check_cache(dir / "c.json", c, c.graph_hash, Method::kEntropy);
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "made with --calib-method percentile, not entropy")) << e.what();
  }
}

TEST(CalibCache, RefusedWhenDamagedOrOfAnotherVersion) {
  TempDir dir;
  write_cache(dir / "c.json", sample_cache());
  std::string text = read_text(dir / "c.json");
  auto write = [&](const std::string& s) { std::ofstream(dir / "bad.json") << s; };
  write(std::string(text).replace(text.find("\"version\": 1"), 12, "\"version\": 2"));
  EXPECT_TRUE(has(read_error(dir / "bad.json"), "calibration cache format version 2, this Kiln reads version 1"));
  write(text.substr(0, text.size() / 2));
  EXPECT_TRUE(has(read_error(dir / "bad.json"), "not a calibration cache (not JSON"));
  write("{\"hello\": 1}");
  EXPECT_TRUE(has(read_error(dir / "bad.json"), "not a Kiln calibration cache"));
  write(std::string(text).replace(text.find("\"graph_hash\""), 12, "\"graph_hush\""));
  EXPECT_TRUE(has(read_error(dir / "bad.json"), "field \"graph_hash\" is missing"));
  write(std::string(text).replace(text.find("\"amax\": 2.5"), 11, "\"amax\": -1"));
  EXPECT_TRUE(has(read_error(dir / "bad.json"), "tensor \"input\" has amax -1")) << read_error(dir / "bad.json");
  EXPECT_TRUE(has(read_error(dir / "none.json"), "cannot open the calibration cache"));
}

OnnxModel conv(float w0) {
  OnnxModel m("conv");
  m.input("x", {1, 3, 4, 4});
  m.output("y");
  m.init_rand("w", {2, 3, 1, 1});
  m.g()->mutable_initializer(0)->set_float_data(0, w0);
  m.node("Conv", "c", {"x", "w"}, {"y"});
  return m;
}

TEST(CalibCache, GraphHashFollowsWeightsNotActivationShapes) {
  const graph::Graph a = conv(0.5f).import(), b = conv(0.5f).import(), other = conv(0.25f).import();
  EXPECT_EQ(graph_hash(a), graph_hash(b));
  EXPECT_EQ(graph_hash(a).size(), 16u);
  EXPECT_NE(graph_hash(a), graph_hash(other));
  graph::Graph batched = conv(0.5f).import();
  batched.value(batched.inputs[0]).shape[0] = 8;
  EXPECT_EQ(graph_hash(a), graph_hash(batched));
}

}  // namespace
}  // namespace kiln::calib
