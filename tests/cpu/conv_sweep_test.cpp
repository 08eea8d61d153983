// Conv and ConvTranspose on the CPU over the geometries ONNX allows, against the float64
// definition (conv_reference.h), with 1, 2 and 7 threads: large and asymmetric kernels, strides
// larger than the kernel, dilations, asymmetric and large pads, groups and depthwise, 1-D to 3-D,
// and shapes that make the kernel cut rows into several column tiles. scripts/fuzz.sh also runs
// this test under ASan and UBSan (tests/fuzz/CMakeLists.txt), where a write past a buffer is an
// error even when it does not crash.
//
// Why the earlier tests missed the im2col overrun (AlexNet's 11x11 / 4 pads 2 stem, DeepSpeech2's
// 41x11 / 2x2 pads 20x5, DeepLabV3's dilated depthwise layers crashed `kiln run`): it needs a
// column tile that ends inside a row's leading padding (before the first output position whose
// taps reach the image), which takes a row cut by a tile boundary within its first pad / stride
// positions. Tiles are cut by a cache budget or by the thread count; the earlier cases were small
// enough to be one tile, or cut rows where the padding reached no further than one position.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "conv_reference.h"
#include "op_test_util.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln {
namespace {

using namespace kiln::test;

struct Case {
  std::string name;
  ConvProblem p;
};

std::vector<double> random_values(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(n);
  for (double& x : v) x = u(rng);
  return v;
}

std::string describe(const ConvProblem& p) {
  std::ostringstream s;
  auto list = [&](const char* name, const std::vector<int64_t>& v) {
    s << " " << name << "[";
    for (size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
    s << "]";
  };
  s << "N" << p.batch << " C" << p.channels << " M" << p.out_channels << " G" << p.group;
  list("in", p.in);
  list("k", p.kernel);
  list("s", p.strides);
  list("d", p.dilations);
  list("pads", p.pads());
  return s.str();
}

// Runs Conv (or ConvTranspose) on p with 1, 2 and 7 threads in dtype dt and compares with the
// float64 definition: |y - ref| <= tol * (1 + |ref|) * sqrt(taps per output), every element.
void check(const std::string& name, const ConvProblem& p, bool transpose, DataType dt, std::mt19937& rng) {
  const int64_t ks = product(p.kernel);
  const std::vector<int64_t> xs = [&] {
    std::vector<int64_t> s{p.batch, p.channels};
    s.insert(s.end(), p.in.begin(), p.in.end());
    return s;
  }();
  std::vector<int64_t> ws = transpose ? std::vector<int64_t>{p.channels, p.out_channels / p.group}
                                      : std::vector<int64_t>{p.out_channels, p.channels / p.group};
  ws.insert(ws.end(), p.kernel.begin(), p.kernel.end());
  const Tensor x = make(dt, xs, random_values(static_cast<size_t>(product(xs)), rng));
  const Tensor w = make(dt, ws, random_values(static_cast<size_t>(product(ws)), rng));
  const Tensor b = make(dt, {p.out_channels}, random_values(static_cast<size_t>(p.out_channels), rng));
  // The reference sees the values the kernel sees (rounded to dt).
  const std::vector<double> xv = x.values(), wv = w.values(), bv = b.values();
  const std::vector<double> want =
      transpose ? conv_transpose_reference(p, xv, wv, &bv) : conv_reference(p, xv, wv, &bv);
  ConvAttrs a;
  a.group = p.group;
  a.kernel_shape = p.kernel;
  a.strides = p.strides;
  a.dilations = p.dilations;
  a.pads = p.pads();
  if (transpose && !p.output_padding.empty()) a.output_padding = p.output_padding;
  const int64_t taps = transpose ? ks * p.channels / p.group : ks * p.channels / p.group;
  const double tol =
      (dt == DataType::kFloat64 ? 1e-12 : 2e-6) * std::sqrt(static_cast<double>(std::max<int64_t>(1, taps)));
  cpu::ThreadPool two(2), seven(7);
  for (cpu::ThreadPool* pool : {static_cast<cpu::ThreadPool*>(nullptr), &two, &seven}) {
    const std::string what = name + " (" + describe(p) + ", " + std::string(dtype_name(dt)) + ", " +
                             std::to_string(pool ? pool->size() : 1) + " threads)";
    std::vector<Tensor> y = run(transpose ? OpKind::kConvTranspose : OpKind::kConv, a, {&x, &w, &b}, 1, pool);
    std::vector<int64_t> ys{p.batch, p.out_channels};
    const std::vector<int64_t> out = transpose ? p.transpose_out() : p.conv_out();
    ys.insert(ys.end(), out.begin(), out.end());
    ASSERT_EQ(y[0].shape, ys) << what;
    expect_near(y[0].values(), want, tol, what);
  }
}

// The layers that crashed `kiln run` (issue 36), with fewer channels, and the shapes that cut
// rows into many tiles.
std::vector<Case> named_cases() {
  auto conv2 = [](int64_t c, int64_t m, int64_t g, std::vector<int64_t> in, std::vector<int64_t> k,
                  std::vector<int64_t> s, std::vector<int64_t> d, std::vector<int64_t> pb, std::vector<int64_t> pe) {
    ConvProblem p;
    p.channels = c, p.out_channels = m, p.group = g;
    p.in = in, p.kernel = k, p.strides = s, p.dilations = d, p.pads_begin = pb, p.pads_end = pe;
    return p;
  };
  return {
      {"AlexNet stem 11x11/4 pads 2", conv2(3, 4, 1, {224, 224}, {11, 11}, {4, 4}, {1, 1}, {2, 2}, {2, 2})},
      {"DeepSpeech2 conv1 41x11/2x2 pads 20x5", conv2(1, 4, 1, {161, 120}, {41, 11}, {2, 2}, {1, 1}, {20, 5}, {20, 5})},
      {"DeepSpeech2 conv2 21x11/2x1 pads 10x5", conv2(4, 4, 1, {81, 60}, {21, 11}, {2, 1}, {1, 1}, {10, 5}, {10, 5})},
      {"DeepLabV3 depthwise 3x3 dilation 2", conv2(8, 8, 8, {28, 28}, {3, 3}, {1, 1}, {2, 2}, {2, 2}, {2, 2})},
      {"DeepLabV3 depthwise 5x5 dilation 4", conv2(6, 6, 6, {33, 33}, {5, 5}, {1, 1}, {4, 4}, {8, 8}, {8, 8})},
      {"ASPP 3x3 dilation 12 on 14x14", conv2(4, 3, 1, {14, 14}, {3, 3}, {1, 1}, {12, 12}, {12, 12}, {12, 12})},
      {"many tiles: 16 channels 11x11", conv2(16, 5, 1, {70, 70}, {11, 11}, {1, 1}, {1, 1}, {7, 3}, {2, 6})},
      {"stride larger than kernel", conv2(2, 3, 1, {40, 37}, {2, 3}, {5, 7}, {1, 1}, {3, 0}, {0, 4})},
      {"padding larger than the image", conv2(2, 2, 1, {5, 6}, {3, 3}, {2, 3}, {1, 1}, {9, 7}, {6, 11})},
  };
}

// Random geometries from a fixed seed: rank 1 to 3, kernels up to 41 (1-D), 11 (2-D) or 3 (3-D),
// strides to 5, dilations to 4, pads to the dilated kernel's extent and beyond, groups 1, 2 or
// depthwise, outputs up to a few thousand positions.
std::vector<Case> random_cases(int count, uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  std::vector<Case> cases;
  while (static_cast<int>(cases.size()) < count) {
    ConvProblem p;
    const int64_t rank = std::vector<int64_t>{1, 2, 2, 2, 2, 3}[static_cast<size_t>(pick(0, 5))];
    const int64_t kmax = rank == 1 ? 41 : rank == 2 ? 11 : 3, imax = rank == 1 ? 300 : rank == 2 ? 60 : 10;
    for (int64_t i = 0; i < rank; ++i) {
      p.kernel.push_back(pick(1, kmax));
      p.dilations.push_back(pick(0, 3) == 0 ? pick(2, 4) : 1);
      p.strides.push_back(pick(0, 2) == 0 ? pick(2, 5) : 1);
      const int64_t ext = (p.kernel.back() - 1) * p.dilations.back() + 1;
      p.pads_begin.push_back(pick(0, ext + 1));
      p.pads_end.push_back(pick(0, ext + 1));
      const int64_t need = std::max<int64_t>(1, ext - p.pads_begin.back() - p.pads_end.back());
      p.in.push_back(pick(need, std::max(need, imax)));
    }
    const int64_t g = std::vector<int64_t>{1, 1, 2, 0}[static_cast<size_t>(pick(0, 3))];
    const int64_t cg = g == 0 ? 1 : pick(1, 4), groups = g == 0 ? pick(2, 8) : g;
    p.group = groups;
    p.channels = groups * cg;
    p.out_channels = groups * (g == 0 ? 1 : pick(1, 3));
    p.batch = pick(1, 3);
    const std::vector<int64_t> out = p.conv_out();
    const int64_t positions = product(out);
    if (positions < 1 || std::any_of(out.begin(), out.end(), [](int64_t o) { return o < 1; })) continue;
    const int64_t work = p.batch * p.out_channels * positions * cg * product(p.kernel);
    if (positions > 6000 || work > 4'000'000) continue;
    cases.push_back({"random " + std::to_string(cases.size()), p});
  }
  return cases;
}

TEST(ConvSweep, NamedGeometriesMatchDefinition) {
  std::mt19937 rng(7);
  for (const Case& c : named_cases()) {
    ConvProblem p = c.p;
    check(c.name, p, false, DataType::kFloat32, rng);
    p.batch = 2;
    check(c.name + ", batch 2", p, false, DataType::kFloat64, rng);
  }
}

TEST(ConvSweep, RandomGeometriesMatchDefinition) {
  std::mt19937 rng(8);
  for (const Case& c : random_cases(400, 2026)) check(c.name, c.p, false, DataType::kFloat32, rng);
  for (const Case& c : random_cases(80, 11)) check(c.name, c.p, false, DataType::kFloat64, rng);
}

// ConvTranspose shares the kernel's column code (scattering instead of gathering).
TEST(ConvSweep, TransposeGeometriesMatchDefinition) {
  std::mt19937 rng(9);
  std::mt19937 gen(12);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen); };
  int made = 0;
  while (made < 100) {
    ConvProblem p;
    const int64_t rank = pick(1, 3) == 3 ? 3 : pick(1, 2);
    for (int64_t i = 0; i < rank; ++i) {
      p.kernel.push_back(pick(1, rank == 3 ? 3 : 7));
      p.dilations.push_back(pick(0, 3) == 0 ? 2 : 1);
      p.strides.push_back(pick(1, 4));
      p.in.push_back(pick(1, rank == 3 ? 6 : rank == 2 ? 20 : 60));
      const int64_t ext = (p.kernel.back() - 1) * p.dilations.back() + 1;
      p.pads_begin.push_back(pick(0, ext - 1));
      p.pads_end.push_back(pick(0, ext - 1));
      p.output_padding.push_back(pick(0, p.strides.back() - 1));
    }
    p.group = pick(1, 2);
    p.channels = p.group * pick(1, 3);
    p.out_channels = p.group * pick(1, 3);
    p.batch = pick(1, 2);
    const std::vector<int64_t> out = p.transpose_out();
    if (std::any_of(out.begin(), out.end(), [](int64_t o) { return o < 1; }) || product(out) > 8000) continue;
    check("transpose " + std::to_string(made++), p, true, DataType::kFloat32, rng);
  }
}

}  // namespace
}  // namespace kiln
