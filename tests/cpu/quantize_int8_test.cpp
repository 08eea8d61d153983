// Tests for the quantize-int8 pass (kiln optimize --int8): where it inserts Q/DQ nodes (run with
// fuse-qdq switched off, so the explicit Q/DQ graph is what the engine holds), one negative test
// per guard, the weights' symmetric per-channel quantization, the numbers against the float
// engine, and the calibration data / cache errors.
#include "build/quantize_int8.h"

#include <cmath>
#include <fstream>

#include "int8_test_util.h"

namespace kiln::build {
namespace {

using namespace kiln::test;

// x[2,3,8,8] -> Conv(4) -> Relu -> Flatten -> Gemm(transB) -> y ; a second Conv reads x too.
OnnxModel cnn() {
  OnnxModel m("cnn");
  m.input("x", {2, 3, 8, 8});
  m.output("y");
  m.output("z");
  m.init_rand("w1", {4, 3, 3, 3}, -0.5f, 0.5f);
  m.init_rand("b1", {4});
  m.init_rand("w2", {2, 3, 1, 1});
  m.init_rand("w3", {5, 4 * 8 * 8}, -0.1f, 0.1f);
  m.init_rand("b3", {5});
  attr_ints(m.node("Conv", "conv1", {"x", "w1", "b1"}, {"c1"}), "pads", {1, 1, 1, 1});
  m.node("Relu", "relu1", {"c1"}, {"r1"});
  m.node("Flatten", "flat", {"r1"}, {"f"});
  attr_int(m.node("Gemm", "fc", {"f", "w3", "b3"}, {"y"}), "transB", 1);
  m.node("Conv", "conv2", {"x", "w2"}, {"z"});
  return m;
}

BuildOptions int8_options(const TempDir& dir, bool fuse = false) {
  BuildOptions o;
  o.int8 = true;
  o.force_int8 = true;  // the INT8 engine, whether or not it is faster here
  o.calib.data = dir / "calib";
  write_batches(dir.path() / "calib", 3, {2, 3, 8, 8}, -1.f, 1.f);
  // Without fuse-qdq the test counts the Q/DQ form's ops, which fuse-epilogue would merge.
  if (!fuse) o.disabled_passes = {"fuse-qdq", "fuse-epilogue"};
  return o;
}

TEST(QuantizeInt8, InsertsQdqAroundConvAndGemm) {
  TempDir dir;
  const Built b = build_model(cnn(), int8_options(dir));
  // Activations x (shared by both convs) and f get one Q/DQ pair each; three weights get a DQ.
  EXPECT_EQ(b.count("QuantizeLinear"), 2);
  EXPECT_EQ(b.count("DequantizeLinear"), 5);
  EXPECT_EQ(b.count("Conv"), 2);
  EXPECT_EQ(b.count("Gemm"), 1);
  EXPECT_TRUE(has(b.details.at("quantize-int8"), "3 nodes quantized, 2 activation ranges calibrated (entropy)"))
      << b.details.at("quantize-int8");
}

TEST(QuantizeInt8, OffWithoutInt8) {
  TempDir dir;
  BuildOptions o = int8_options(dir);
  o.int8 = false;
  const Built b = build_model(cnn(), o);
  EXPECT_EQ(b.count("QuantizeLinear"), 0);
  EXPECT_EQ(b.details.at("quantize-int8"), "");
}

// Weights: int8 in [-127, 127], scale max|W[c]| / 127 per output channel, along the right axis.
TEST(QuantizeInt8, WeightsSymmetricPerOutputChannel) {
  TempDir dir;
  const OnnxModel m = cnn();
  const Built b = build_model(m, int8_options(dir));
  const graph::Graph orig = m.import();
  int checked = 0;
  for (const graph::Node& n : b.graph.nodes) {
    if (n.kind != OpKind::kDequantizeLinear || !b.graph.value(n.inputs[0]).is_constant()) continue;
    const graph::Value& q = b.graph.value(n.inputs[0]);
    const std::string wname = q.name.substr(0, 2);  // w1, w2, w3
    const std::vector<double> w = orig.value(orig.find(wname)).view().to_double();
    const std::vector<double> qv = q.view().to_double(), s = b.graph.value(n.inputs[1]).view().to_double();
    const int64_t axis = std::get<QuantizeAttrs>(n.attrs).axis;
    EXPECT_EQ(axis, 0) << wname;  // Conv [M, ...] and Gemm with transB [N, K]
    EXPECT_EQ(q.dtype, DataType::kInt8);
    const size_t per = w.size() / s.size();
    for (size_t c = 0; c < s.size(); ++c) {
      double amax = 0;
      for (size_t i = c * per; i < (c + 1) * per; ++i) amax = std::max(amax, std::fabs(w[i]));
      EXPECT_FLOAT_EQ(s[c], amax / 127) << wname << " channel " << c;
      for (size_t i = c * per; i < (c + 1) * per; ++i) {
        EXPECT_LE(std::fabs(qv[i]), 127);
        EXPECT_NEAR(qv[i] * s[c], w[i], s[c] / 2 * 1.0001) << wname << " " << i;
      }
    }
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}

// MatMul's weights [K, N] are quantized per column (axis 1).
TEST(QuantizeInt8, MatMulWeightsPerColumn) {
  TempDir dir;
  OnnxModel m("mm");
  m.input("x", {2, 3, 8, 8});
  m.output("y");
  m.init_rand("w", {8, 6});
  m.node("MatMul", "mm", {"x", "w"}, {"y"});
  const Built b = build_model(m, int8_options(dir));
  bool found = false;
  for (const graph::Node& n : b.graph.nodes)
    if (n.kind == OpKind::kDequantizeLinear && b.graph.value(n.inputs[0]).is_constant()) {
      EXPECT_EQ(std::get<QuantizeAttrs>(n.attrs).axis, 1);
      EXPECT_EQ(b.graph.value(n.inputs[1]).shape, std::vector<int64_t>{6});
      found = true;
    }
  EXPECT_TRUE(found);
}

// For a GPU target the pass leaves Gemm and MatMul in float (decision 62) and the Conv whose
// channels the INT8 convolutions cannot take, and says so. Run alone, with the ranges from the
// cache of a CPU build: no GPU needed.
TEST(QuantizeInt8, GpuTargetSaysWhatStaysFloat) {
  TempDir dir;
  BuildOptions o = int8_options(dir);
  o.calib.cache = dir / "cnn.calib";
  auto typed = [&o] {  // the model as the pass sees it in the pipeline: shapes inferred
    graph::Graph g = cnn().import();
    passes::bind_inputs(g, o);
    passes::infer_and_fold(g, o);
    return g;
  };
  graph::Graph cpu_graph = typed();
  const passes::PassResult cpu = quantize_int8(cpu_graph, o);
  EXPECT_EQ(cpu.changes, 3);
  EXPECT_FALSE(has(cpu.detail, "left in float")) << cpu.detail;
  o.target = "sm_90";
  o.calib.data.clear();
  graph::Graph g = typed();
  const passes::PassResult r = quantize_int8(g, o);
  EXPECT_EQ(r.changes, 0);  // conv1 and conv2 read 3 input channels; fc is a Gemm
  EXPECT_TRUE(has(r.detail, "1 Gemm/MatMul left in float: no INT8 GEMM is faster than float16 on this GPU"))
      << r.detail;
  EXPECT_TRUE(has(r.detail, "2 Conv left in float")) << r.detail;
  // With nothing left to quantize the accuracy guard does not run (it would build GPU engines), and
  // the report (printed by kiln optimize without -v) says why no layer is INT8.
  o.calib.accuracy_budget = 1.0;
  o.calib.validate = dir / "calib";
  std::string report;
  o.calib.report = [&report](const std::string& s) { report += s + "\n"; };
  graph::Graph g2 = typed();
  const passes::PassResult guarded = quantize_int8(g2, o);
  EXPECT_EQ(guarded.changes, 0);
  EXPECT_FALSE(has(guarded.detail, "accuracy guard")) << guarded.detail;
  EXPECT_TRUE(has(report, "INT8: no layer quantized on sm_90: 1 Gemm/MatMul left in float")) << report;
  EXPECT_TRUE(has(report, "the accuracy guard had no INT8 layer to check")) << report;
}

// Guards: an explicitly quantized model, B not constant, Gemm with transA, float16 activations.
TEST(QuantizeInt8, ModelWithQdqIsLeftAlone) {
  TempDir dir;
  OnnxModel m("qdq");
  m.input("x", {2, 3, 8, 8});
  m.output("y");
  init_floats(m, "s", {}, {0.1f});
  init_ints(m, "z", {}, {0}, onnx::TensorProto::INT8);
  m.init_rand("w", {2, 3, 1, 1});
  m.node("QuantizeLinear", "q", {"x", "s", "z"}, {"xq"});
  m.node("DequantizeLinear", "dq", {"xq", "s", "z"}, {"xd"});
  m.node("Conv", "conv", {"xd", "w"}, {"y"});
  const Built b = build_model(m, int8_options(dir));
  EXPECT_EQ(b.count("QuantizeLinear"), 1);
  EXPECT_TRUE(has(b.details.at("quantize-int8"), "carries Q/DQ nodes")) << b.details.at("quantize-int8");
}

TEST(QuantizeInt8, MatMulOfTwoActivationsStaysFloat) {
  TempDir dir;
  OnnxModel m("mm2");
  m.input("x", {2, 3, 8, 8});
  m.output("y");
  attr_ints(m.node("Transpose", "t", {"x"}, {"xt"}), "perm", {0, 1, 3, 2});
  m.node("MatMul", "mm", {"x", "xt"}, {"y"});
  const Built b = build_model(m, int8_options(dir));
  EXPECT_EQ(b.count("QuantizeLinear"), 0);
  EXPECT_TRUE(has(b.details.at("quantize-int8"), "no Conv, Gemm or MatMul")) << b.details.at("quantize-int8");
}

TEST(QuantizeInt8, GemmWithTransposedInputStaysFloat) {
  TempDir dir;
  OnnxModel m("gemm");
  m.input("x", {2, 3, 8, 8});
  m.output("y");
  m.init_rand("w", {2, 5});
  m.node("Flatten", "f", {"x"}, {"f"});                            // [2, 192]
  attr_int(m.node("Gemm", "fc", {"f", "w"}, {"y"}), "transA", 1);  // [192, 2] x [2, 5]
  const Built b = build_model(m, int8_options(dir));
  EXPECT_EQ(b.count("QuantizeLinear"), 0);
}

TEST(QuantizeInt8, Float16ActivationStaysFloat) {
  TempDir dir;
  OnnxModel m("h");
  m.input("x", {2, 3, 8, 8});
  m.output("y");
  m.init_rand("w", {2, 3, 1, 1});
  auto* cast = m.node("Cast", "c", {"x"}, {"xh"});
  attr_int(cast, "to", onnx::TensorProto::FLOAT16);
  m.node("Cast", "wc", {"w"}, {"wh"})->add_attribute()->CopyFrom(cast->attribute(0));
  m.node("Conv", "conv", {"xh", "wh"}, {"y"});
  const Built b = build_model(m, int8_options(dir));
  EXPECT_EQ(b.count("QuantizeLinear"), 0);
}

// The fake-quantized engine (Q/DQ, no INT8 kernels yet) stays close to the float one.
TEST(QuantizeInt8, NumbersCloseToFloat) {
  TempDir dir;
  const OnnxModel m = cnn();
  BuildOptions f;
  const Built q = build_model(m, int8_options(dir)), fl = build_model(m, f);
  const std::map<std::string, std::vector<float>> feed = {{"x", random_vec(2 * 3 * 8 * 8, 11)}};
  auto yq = run_engine(q.engine, feed, {"y", "z"}), yf = run_engine(fl.engine, feed, {"y", "z"});
  EXPECT_LT(rel_error(yq["y"], yf["y"]), 0.03);
  EXPECT_LT(rel_error(yq["z"], yf["z"]), 0.03);
}

// A CPU INT8 build times the INT8 engine against the float32 one and keeps the faster, as GPU
// builds do, and says so; the engine holds what the line says. A rebuild from the calibration
// cache alone times them too: the timed CPU engine once read its inputs from freed memory (a crash
// there, and float32 timings 10 times too long after a calibration). With force_int8, INT8 and no
// line.
TEST(QuantizeInt8, CpuBuildKeepsTheFasterEngineAndSaysSo) {
  TempDir dir;
  BuildOptions o = int8_options(dir, true);
  o.force_int8 = false;
  o.calib.cache = dir / "cache.json";
  auto int8_steps = [](const std::vector<uint8_t>& engine) {
    int n = 0;
    for (const StepInfo& s : Engine::from_bytes(engine)->summary().steps)
      n += s.op == "kiln.QConv" || s.op == "NhwcQConv" || s.op == "kiln.QMatMul";
    return n;
  };
  for (int build = 0; build < 2; ++build) {
    SCOPED_TRACE(build == 0 ? "calibrated" : "from the cache");
    BuildReport r;
    graph::Graph g = cnn().import();
    const std::vector<uint8_t> engine = build_engine(g, o, &r);
    const bool kept_int8 = has(r.precision_choice, "per run on this CPU: kept INT8");
    EXPECT_TRUE(kept_int8 || has(r.precision_choice, "per run on this CPU: kept float32")) << r.precision_choice;
    EXPECT_EQ(kept_int8, int8_steps(engine) > 0) << r.precision_choice;
    o.calib.data.clear();
  }
  o.force_int8 = true;
  BuildReport r;
  graph::Graph g = cnn().import();
  EXPECT_GT(int8_steps(build_engine(g, o, &r)), 0);
  EXPECT_EQ(r.precision_choice, "");
}

// ---- calibration data and cache --------------------------------------------------------------

TEST(QuantizeInt8, NeedsDataOrCache) {
  BuildOptions o;
  o.int8 = true;
  EXPECT_TRUE(has(build_error(cnn(), o), "--int8 needs calibration data: --calib DATA")) << build_error(cnn(), o);
}

TEST(QuantizeInt8, DataOfTheWrongShapeNamesTheFile) {
  TempDir dir;
  BuildOptions o;
  o.int8 = true;
  o.calib.data = dir / "bad";
  write_batches(dir.path() / "bad", 1, {2, 3, 8, 7}, 0, 1);
  const std::string e = build_error(cnn(), o);
  EXPECT_TRUE(has(e, "batch_000.npy: array of shape [2, 3, 8, 7] does not fit model input 'x'")) << e;
}

TEST(QuantizeInt8, CacheWrittenThenReusedWithoutData) {
  TempDir dir;
  BuildOptions o = int8_options(dir, true);
  o.calib.cache = dir / "cache.json";
  const Built first = build_model(cnn(), o);
  ASSERT_TRUE(std::filesystem::exists(o.calib.cache));
  EXPECT_TRUE(has(first.details.at("quantize-int8"), "cached in")) << first.details.at("quantize-int8");
  o.calib.data.clear();
  const Built again = build_model(cnn(), o);
  EXPECT_TRUE(has(again.details.at("quantize-int8"), "ranges from the calibration cache"));
  EXPECT_EQ(first.engine, again.engine);
}

TEST(QuantizeInt8, CacheOfAnotherModelOrMethodIsRefused) {
  TempDir dir;
  BuildOptions o = int8_options(dir, true);
  o.calib.cache = dir / "cache.json";
  build_model(cnn(), o);
  OnnxModel other = cnn();
  other.g()->mutable_initializer(0)->set_float_data(0, 0.125f);  // other weights: another model
  std::string e = build_error(other, o);
  EXPECT_TRUE(has(e, "cache.json: this calibration cache was made for another model")) << e;
  o.calib.method = calib::Method::kMinMax;
  e = build_error(cnn(), o);
  EXPECT_TRUE(has(e, "made with --calib-method entropy, not minmax")) << e;
}

// The batch size is not part of a cache's identity: one cache serves every --batch.
TEST(QuantizeInt8, CacheServesOtherBatchSizes) {
  TempDir dir;
  OnnxModel m("dyn");
  m.input("x", {-1, 3, 8, 8});
  auto* dim = m.g()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0);
  dim->set_dim_param("N");
  m.output("y");
  m.init_rand("w", {2, 3, 3, 3});
  m.node("Conv", "conv", {"x", "w"}, {"y"});
  BuildOptions o = int8_options(dir, true);
  o.batch = 2;
  o.calib.cache = dir / "cache.json";
  build_model(m, o);
  o.calib.data.clear();
  o.batch = 5;
  EXPECT_NO_THROW(build_model(m, o));
}

}  // namespace
}  // namespace kiln::build
