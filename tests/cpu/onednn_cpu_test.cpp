// oneDNN's path for CPU float32 engines (runtime/cpu/onednn.h) against Kiln's own kernels, in one
// process: the same model built with the library (channels-last, NhwcConv and NHWC pools) and
// without it (channels-first, Kiln's kernels). A context's steps keep their primitives between
// runs: they must give the same outputs on new inputs, on another thread than the one that made
// them, and with another thread count. INT8 engines: the library's integer sums (on CPUs with
// VNNI, or AVX2 with even weights) and Kiln's epilogue against Kiln's kernels on the same
// channels-last engine. Skips where Kiln has no oneDNN. ctest runs it twice: as the CPU is, and
// with the library capped at AVX2 (onednn_cpu_avx2: a CPU without VNNI).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "build/build.h"
#include "int8_test_util.h"
#include "kiln/engine.h"
#include "onnx_model_util.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/onednn.h"
#include "runtime/cpu/thread_pool.h"

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
    GTEST_SKIP() << "no oneDNN, KILN_CPU_KERNELS=kiln, or a CPU without VNNI or AVX2: INT8 engines stay channels-first";
  cpu::onednn::set_int8_epilogue_in_library(false);  // the sums, then Kiln's epilogue
  struct Restore {
    ~Restore() { cpu::onednn::set_int8_epilogue_in_library(true); }
  } restore;
  TempDir dir;
  write_batches(dir.path() / "calib", 2, {2, 3, 17, 17}, -1.f, 1.f);
  graph::Graph g = net().import();
  build::BuildOptions o;
  o.target = "cpu";
  o.int8 = true;
  o.force_int8 = true;  // the INT8 engine, whether or not it is faster here
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

// NhwcQConv's kernel with its epilogue in the library (output scales, bias, sum and eltwise
// post-ops, zero points) against Kiln's exact epilogue on the library's sums, on random data:
// every activation, float32 / int8 / uint8 outputs, with and without a residual of y's type, for a
// 3x3 convolution, a strided depthwise one, a 1x1 one and a 3-channel stem. The library rounds in
// another order, so an output may move by one quantization step (or float32 rounding for float
// outputs), and only rarely: the library adds y's zero point before it rounds, so a value exactly
// half a step off (a clip bound can be one) rounds to the other side where the zero point is odd.
struct QConvCase {
  int64_t n, h, w, c, m, k, stride, group;
};

TEST(OnednnCpu, Int8EpilogueInLibraryWithinOneStep) {
  if (!cpu::onednn::int8_epilogue_in_library())
    GTEST_SKIP() << "no oneDNN, KILN_CPU_KERNELS=kiln, KILN_CPU_INT8_EPILOGUE=kiln, or a CPU without VNNI or AVX2";
  cpu::ThreadPool pool(2);
  std::mt19937 rng(5);
  int64_t checked = 0, differing = 0;
  const QConvCase cases[] = {{2, 9, 11, 24, 40, 3, 1, 1},
                             {1, 14, 14, 32, 32, 3, 2, 32},
                             {2, 7, 7, 64, 48, 1, 1, 1},
                             {1, 16, 16, 3, 16, 3, 2, 1}};
  for (const QConvCase& q : cases) {
    const int64_t pad = q.k / 2, oh = (q.h + 2 * pad - q.k) / q.stride + 1, ow = (q.w + 2 * pad - q.k) / q.stride + 1;
    const int64_t cg = q.c / q.group;
    const int64_t xs[] = {q.n, q.h, q.w, q.c}, ws[] = {q.m, q.k, q.k, cg}, ys[] = {q.n, oh, ow, q.m}, mm[] = {q.m};
    const int64_t ny = q.n * oh * ow * q.m;
    for (DataType xt : {DataType::kUInt8, DataType::kInt8}) {
      std::uniform_int_distribution<int> byte(0, 255);
      std::vector<uint8_t> x(static_cast<size_t>(q.n * q.h * q.w * q.c));
      for (uint8_t& v : x) v = static_cast<uint8_t>(byte(rng));
      // Without VNNI the library sums exactly only weights as the builder makes them there: even
      // ones for int8 x, |w| <= 64 for uint8 x (runtime/cpu/onednn.h, int8_weights_exact).
      std::vector<int8_t> w(static_cast<size_t>(q.m * q.k * q.k * cg));
      for (int8_t& v : w) v = static_cast<int8_t>(byte(rng) - 128);
      if (cpu::onednn::int8_even_weights())
        for (int8_t& v : w) v = static_cast<int8_t>(xt == DataType::kInt8 ? std::clamp(v / 2 * 2, -126, 126) : v / 2);
      std::uniform_real_distribution<float> u(0.5f, 1.5f), sb(-1.f, 1.f);
      std::vector<float> w_scale(static_cast<size_t>(q.m)), bias(static_cast<size_t>(q.m));
      for (float& v : w_scale) v = 2e-3f * u(rng);
      for (float& v : bias) v = sb(rng);
      float x_scale = 0.02f;
      uint8_t x_zero_u = xt == DataType::kUInt8 ? 120 : 0;
      int8_t x_zero_s = 0;
      for (int act = 0; act < 4; ++act)
        for (DataType yt : {DataType::kFloat32, DataType::kInt8, DataType::kUInt8})
          for (bool residual : {false, true}) {
            // y_scale: about the sums' spread, so that outputs use the range and some saturate.
            const float y_scale = 0.02f * std::sqrt(static_cast<float>(q.k * q.k * cg));
            const int32_t y_zero = yt == DataType::kUInt8 ? 100 : -3;
            std::vector<uint8_t> z(static_cast<size_t>(ny) * dtype_size(yt));
            if (yt == DataType::kFloat32)
              for (int64_t i = 0; i < ny; ++i) reinterpret_cast<float*>(z.data())[i] = sb(rng);
            else
              for (uint8_t& v : z) v = static_cast<uint8_t>(byte(rng));
            float z_scale = 0.03f, act_alpha = act == 2 ? -0.37f : 0.1f, act_beta = 1.3f;
            uint8_t y_zero_u = static_cast<uint8_t>(y_zero), z_zero_u = 90;
            int8_t y_zero_s = static_cast<int8_t>(y_zero), z_zero_s = -5;
            const bool q8 = yt != DataType::kFloat32;
            const DataType zt8 = yt == DataType::kUInt8 ? DataType::kUInt8 : DataType::kInt8;
            std::vector<TensorView> in(12);
            in[0] = {xt, xs, x.data(), true};
            in[1] = {DataType::kFloat32, {}, &x_scale, true};
            in[2] = xt == DataType::kUInt8 ? TensorView{DataType::kUInt8, {}, &x_zero_u, true}
                                           : TensorView{DataType::kInt8, {}, &x_zero_s, true};
            in[3] = {DataType::kInt8, ws, w.data(), true};
            in[4] = {DataType::kFloat32, mm, w_scale.data(), true};
            in[5] = {DataType::kInt8, {}, nullptr, false};
            in[6] = {DataType::kFloat32, mm, bias.data(), true};
            in[7] = q8 ? TensorView{DataType::kFloat32, {}, const_cast<float*>(&y_scale), true} : TensorView{};
            in[7].exists = q8;
            in[8] = q8 ? TensorView{zt8, {}, yt == DataType::kUInt8 ? static_cast<void*>(&y_zero_u) : &y_zero_s, true}
                       : TensorView{};
            in[8].exists = q8;
            in[9] = {yt, ys, z.data(), residual};
            in[10] = {DataType::kFloat32, {}, &z_scale, residual && q8};
            in[11] = {zt8, {}, yt == DataType::kUInt8 ? static_cast<void*>(&z_zero_u) : &z_zero_s, residual && q8};
            QConvAttrs a;
            a.kernel_shape = {q.k, q.k};
            a.strides = {q.stride, q.stride};
            a.pads = {pad, pad, pad, pad};
            a.dilations = {1, 1};
            a.group = q.group;
            a.activation = static_cast<QActivation>(act);
            a.act_alpha = act_alpha;
            a.act_beta = act_beta;
            const size_t bytes = static_cast<size_t>(ny) * dtype_size(yt);
            std::vector<uint8_t> fused(bytes), exact(bytes);
            auto run_kernel = [&](std::vector<uint8_t>& out, bool library) {
              cpu::onednn::set_int8_epilogue_in_library(library);
              const TensorView y{yt, ys, out.data(), true};
              std::shared_ptr<void> state;
              cpu::KernelEnv env{&pool, &state};
              cpu::cpu_kernel(OpKind::kNhwcQConv)(OpKind::kNhwcQConv, Attrs{a}, in, {&y, 1}, env);
              cpu::onednn::set_int8_epilogue_in_library(true);
            };
            const uint64_t before = cpu::onednn::qconv_fused_runs();
            run_kernel(fused, true);
            const std::string what = "case c" + std::to_string(q.c) + " m" + std::to_string(q.m) + " k" +
                                     std::to_string(q.k) + " g" + std::to_string(q.group) + " x " +
                                     std::string(dtype_name(xt)) + " act " + std::to_string(act) + " y " +
                                     std::string(dtype_name(yt)) + (residual ? " residual" : "");
            EXPECT_EQ(cpu::onednn::qconv_fused_runs() - before, 1u) << what << ": the library did not run it";
            run_kernel(exact, false);
            for (int64_t i = 0; i < ny; ++i) {
              double d = 0, tol = 1;
              if (yt == DataType::kFloat32) {
                const float f = reinterpret_cast<float*>(fused.data())[i],
                            e = reinterpret_cast<float*>(exact.data())[i];
                d = std::fabs(f - e);
                tol = 1e-5 * (1 + std::fabs(e));
              } else if (yt == DataType::kInt8) {
                d = std::abs(int{static_cast<int8_t>(fused[i])} - int{static_cast<int8_t>(exact[i])});
              } else {
                d = std::abs(int{fused[i]} - int{exact[i]});
              }
              ASSERT_LE(d, tol) << what << " [" << i << "]";
              differing += d > 0 && yt != DataType::kFloat32;
            }
            checked += yt != DataType::kFloat32 ? ny : 0;
          }
    }
  }
  EXPECT_LT(static_cast<double>(differing), 1e-3 * static_cast<double>(checked))
      << differing << " of " << checked << " quantized outputs one step off";
  std::printf("[ info ] %lld of %lld quantized outputs one step off Kiln's rounding\n",
              static_cast<long long>(differing), static_cast<long long>(checked));
}

// Without VNNI (ctest onednn_cpu_avx2 caps the library at AVX2): weights whose pairs of products
// could pass 16 bits (odd ones for int8 x, |w| > 64 for uint8 x) are not given to the library, whose
// sums would saturate; Kiln's kernel runs them, and the channels-last pass leaves such a
// convolution to Kiln's channels-first kernels. Even weights (what the builder makes there) run in
// the library.
TEST(OnednnCpu, WeightsTheLibrarySumsExactlyWithoutVnni) {
  if (!cpu::onednn::int8_even_weights())
    GTEST_SKIP() << "a CPU with VNNI, or no oneDNN (ctest onednn_cpu_avx2 runs it)";
  const std::vector<int8_t> even{-126, 0, 2, 126}, odd{-126, 1}, small{-64, 63, 64};
  EXPECT_TRUE(cpu::onednn::int8_weights_exact(even, DataType::kInt8));
  EXPECT_FALSE(cpu::onednn::int8_weights_exact(odd, DataType::kInt8));
  EXPECT_TRUE(cpu::onednn::int8_weights_exact(small, DataType::kUInt8));
  EXPECT_FALSE(cpu::onednn::int8_weights_exact(even, DataType::kUInt8));
  // A 1x1 convolution whose every pair of products saturates int16 in the library's way:
  // x = 127 (255 after its shift by 128) times w = 127 twice is 64,770.
  const int64_t c = 8, m = 4, xs[] = {1, 2, 2, c}, ws[] = {m, 1, 1, c}, ys[] = {1, 2, 2, m};
  std::vector<int8_t> x(static_cast<size_t>(4 * c), 127), w(static_cast<size_t>(m * c), 127);
  for (bool even_w : {false, true}) {
    if (even_w) std::fill(w.begin(), w.end(), 126);
    ConvAttrs a;
    a.kernel_shape = {1, 1};
    a.strides = {1, 1};
    a.pads = {0, 0, 0, 0};
    a.dilations = {1, 1};
    const TensorView xv{DataType::kInt8, xs, x.data(), true}, wv{DataType::kInt8, ws, w.data(), true};
    std::shared_ptr<void> hold, state;
    cpu::ThreadPool pool(1);
    cpu::KernelEnv env{&pool, &state};
    const uint64_t before = cpu::onednn::qconv_sums_runs();
    const int32_t* sums = cpu::onednn::nhwc_qconv_sums(a, xv, 0, wv, ys, env, hold);
    if (!even_w) {
      EXPECT_EQ(sums, nullptr) << "odd weights must not reach the library's 16-bit pairs";
      continue;
    }
    ASSERT_NE(sums, nullptr) << "even weights run in the library";
    EXPECT_EQ(cpu::onednn::qconv_sums_runs() - before, 1u);
    for (int64_t i = 0; i < 4 * m; ++i) EXPECT_EQ(sums[i], 127 * 126 * c) << "sum " << i;
  }
}

}  // namespace
}  // namespace kiln
