// The accuracy guard of quantize-int8 (--accuracy-budget, --validate): with a generous budget every
// layer stays INT8; with ranges clipped to uselessness (the 1st percentile) and a zero budget,
// layers fall back to float until the validation top-1 is the float engine's; the per-layer table
// names every layer; labels.npy, when present, is what top-1 is measured against.
#include "int8_test_util.h"

namespace kiln::build {
namespace {

using namespace kiln::test;

// x[4,3,8,8] -> Conv -> Relu -> Conv -> Flatten -> Gemm -> y [4, 5]
OnnxModel net() {
  OnnxModel m("guarded");
  m.input("x", {4, 3, 8, 8});
  m.output("y");
  m.init_rand("w1", {6, 3, 3, 3}, -0.5f, 0.5f);
  m.init_rand("w2", {4, 6, 1, 1});
  m.init_rand("w3", {5, 4 * 8 * 8}, -0.2f, 0.2f);
  attr_ints(m.node("Conv", "conv1", {"x", "w1"}, {"c1"}), "pads", {1, 1, 1, 1});
  m.node("Relu", "relu1", {"c1"}, {"r1"});
  m.node("Conv", "conv2", {"r1", "w2"}, {"c2"});
  m.node("Flatten", "flat", {"c2"}, {"f"});
  attr_int(m.node("Gemm", "fc", {"f", "w3"}, {"y"}), "transB", 1);
  return m;
}

struct Guarded {
  Built built;
  std::string table;
};

Guarded build_guarded(const TempDir& dir, double budget, calib::Method method, double percentile) {
  BuildOptions o;
  o.int8 = true;
  o.force_int8 = true;  // the INT8 engine, whether or not it is faster here
  o.calib.data = dir / "calib";
  o.calib.method = method;
  o.calib.percentile = percentile;
  o.calib.validate = dir / "val";
  o.calib.accuracy_budget = budget;
  Guarded g;
  o.calib.report = [&](const std::string& t) { g.table = t; };
  g.built = build_model(net(), o);
  return g;
}

void write_data(const TempDir& dir, bool labels) {
  write_batches(dir.path() / "calib", 2, {4, 3, 8, 8}, -1, 1, 3);
  write_batches(dir.path() / "val", 4, {4, 3, 8, 8}, -1, 1, 4);
  if (labels) {
    std::vector<int64_t> l(16);
    for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<int64_t>(i % 5);
    HostTensor t;
    t.dtype = DataType::kInt64;
    t.shape = {16};
    t.data.resize(l.size() * 8);
    std::memcpy(t.data.data(), l.data(), t.data.size());
    write_tensor_file(dir.path() / "val" / "labels.npy", t);
  }
}

TEST(AccuracyGuard, GenerousBudgetKeepsEveryLayer) {
  TempDir dir;
  write_data(dir, false);
  const Guarded g = build_guarded(dir, 100, calib::Method::kMinMax, 99.99);
  EXPECT_EQ(g.built.count("kiln.QConv"), 2);
  EXPECT_EQ(g.built.count("kiln.QMatMul"), 1);
  EXPECT_TRUE(has(g.table, "top-1 agreement with the float engine on 16 samples: float 100.00%")) << g.table;
  for (const char* layer : {"conv1", "conv2", "fc"}) EXPECT_TRUE(has(g.table, layer)) << g.table;
  EXPECT_TRUE(has(g.table, "result: 3 of 3 layers INT8")) << g.table;
  EXPECT_TRUE(has(g.built.details.at("quantize-int8"), "accuracy guard kept 3 of 3 layers"));
  // Within the budget with every layer in INT8: no layer measured alone (2 runs, not 2 + 3).
  EXPECT_TRUE(has(g.table, "no layer was measured alone")) << g.table;
}

// Ranges at the 1st percentile clip nearly everything: INT8 predictions are noise. With no budget
// the guard falls back until the float engine's answers are matched (at worst, every layer).
TEST(AccuracyGuard, ZeroBudgetFallsBackUntilMatched) {
  TempDir dir;
  write_data(dir, false);
  const Guarded g = build_guarded(dir, 0, calib::Method::kPercentile, 1.0);
  const int int8_steps = g.built.count("kiln.QConv") + g.built.count("kiln.QMatMul");
  EXPECT_LT(int8_steps, 3) << g.table;
  EXPECT_TRUE(has(g.table, "FP32")) << g.table;
  EXPECT_TRUE(has(g.table, "(drop 0.00)") || has(g.table, "(drop -")) << g.table;
  EXPECT_FALSE(has(g.table, "not measured")) << g.table;  // over the budget: every layer measured
}

TEST(AccuracyGuard, MeasuresAgainstLabels) {
  TempDir dir;
  write_data(dir, true);
  const Guarded g = build_guarded(dir, 100, calib::Method::kMinMax, 99.99);
  EXPECT_TRUE(has(g.table, "accuracy guard: top-1 on 16 samples")) << g.table;
}

TEST(AccuracyGuard, NeedsValidationData) {
  TempDir dir;
  write_data(dir, false);
  BuildOptions o;
  o.int8 = true;
  o.calib.data = dir / "calib";
  o.calib.accuracy_budget = 0.5;
  EXPECT_TRUE(has(build_error(net(), o), "--accuracy-budget needs labelled validation data: --validate DATA"));
}

}  // namespace
}  // namespace kiln::build
