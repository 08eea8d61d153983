// The whole-network plan (runtime/cuda/whole_net_plan.h), decided without a GPU: engines are built
// by the builder's passes as for a GPU target (channels-last included for float16) and written for
// sm_90 without timing tactics. Covered: the layer table of LeNet-5 in float32 and float16, every
// network of tests/cpu/small_nets.h eligible at batch 1, 3 and 8 with a consistent shared-memory
// layout (a layer's input and output never overlap, each layer reads where the previous one wrote),
// `kiln inspect`'s line (EngineSummary::whole_network), and one refusal per guard.
#include "runtime/cuda/whole_net_plan.h"

#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/epilogue.h"
#include "core/half.h"
#include "runtime/cuda/device.h"
#include "runtime/engine_impl.h"
#include "sm90_build.h"
#include "small_nets.h"

namespace kiln {
namespace {

using gpu::WholeNetPlan;
using gpu::WnLayer;
using gpu::WnOp;
using test::build_sm90;

constexpr size_t kSm90Smem = 232448;

WholeNetPlan plan_of(const std::vector<uint8_t>& engine, size_t smem = kSm90Smem) {
  auto e = detail::parse_engine(engine, "test");
  return gpu::plan_whole_network(*e, smem);
}

std::vector<WnOp> ops_of(const WholeNetPlan& p) {
  std::vector<WnOp> ops;
  for (const WnLayer& l : p.layers) ops.push_back(l.op);
  return ops;
}

size_t bytes_of(int32_t elems, DataType t) { return static_cast<size_t>(elems) * dtype_size(t); }

// Every layer reads what the previous one wrote, at the other end of the region, without overlap.
void check_layout(const WholeNetPlan& p) {
  ASSERT_FALSE(p.layers.empty());
  EXPECT_EQ(p.layers.front().in_off, 0u);
  EXPECT_EQ(static_cast<size_t>(p.in_bytes), bytes_of(p.layers.front().in_elems, p.layers.front().in_dtype));
  EXPECT_EQ(p.out_elems, p.layers.back().out_elems);
  EXPECT_GE(p.layer_off, p.scratch_off);
  EXPECT_GE(p.smem_bytes, p.layer_off + sizeof(WnLayer));
  for (size_t i = 0; i < p.layers.size(); ++i) {
    SCOPED_TRACE("layer " + std::to_string(i));
    const WnLayer& l = p.layers[i];
    const size_t in_end = l.in_off + bytes_of(l.in_elems, l.in_dtype);
    EXPECT_LE(in_end, p.scratch_off);
    EXPECT_EQ(l.in_off % 16, 0u);
    if (i + 1 == p.layers.size()) break;
    const WnLayer& next = p.layers[i + 1];
    const size_t out_end = l.out_off + bytes_of(l.out_elems, l.out_dtype);
    EXPECT_LE(out_end, p.scratch_off);
    EXPECT_EQ(l.out_off % 16, 0u);
    EXPECT_TRUE(in_end <= l.out_off || out_end <= l.in_off) << "input and output overlap";
    EXPECT_EQ(next.in_off, l.out_off);
    EXPECT_EQ(next.in_elems, l.out_elems);
    EXPECT_EQ(next.in_dtype, l.out_dtype);
  }
}

TEST(WholeNetPlan, LeNet5Float32) {
  const std::vector<uint8_t> engine = build_sm90(test::lenet5(1), false);
  const WholeNetPlan p = plan_of(engine);
  ASSERT_TRUE(p.eligible()) << p.refusal;
  EXPECT_EQ(ops_of(p), (std::vector<WnOp>{WnOp::kConv, WnOp::kPool, WnOp::kConv, WnOp::kPool, WnOp::kDense,
                                          WnOp::kDense, WnOp::kDense}));
  const WnLayer& c1 = p.layers[0];
  EXPECT_EQ(c1.act, Activation::kRelu);  // fused by fuse-epilogue
  EXPECT_FALSE(c1.nhwc);
  EXPECT_EQ(std::vector<int32_t>({c1.c, c1.h, c1.w, c1.m, c1.oh, c1.ow, c1.kh, c1.kw}),
            std::vector<int32_t>({1, 32, 32, 6, 28, 28, 5, 5}));
  EXPECT_GE(c1.w_tensor, 0);
  EXPECT_GE(c1.b_tensor, 0);
  const WnLayer& p2 = p.layers[3];
  EXPECT_EQ(p2.pool, gpu::WnPool::kMax);
  EXPECT_EQ(std::vector<int32_t>({p2.c, p2.h, p2.oh, p2.kh, p2.sh}), std::vector<int32_t>({16, 10, 5, 2, 2}));
  const WnLayer& fc1 = p.layers[4];
  EXPECT_TRUE(fc1.trans_b);
  EXPECT_EQ(fc1.c, 400);  // reads the pool's output through the Flatten view
  EXPECT_EQ(fc1.m, 120);
  EXPECT_EQ(fc1.act, Activation::kRelu);
  EXPECT_EQ(fc1.beta, 1.0f);
  EXPECT_EQ(fc1.bias_col, 1);
  EXPECT_EQ(fc1.bias_row, 0);
  EXPECT_EQ(p.layers[6].act, Activation::kNone);
  check_layout(p);
  // The largest pair: pool1's input 6x28x28 and output 6x14x14 floats; no dense scratch (all transB).
  EXPECT_EQ(p.scratch_off, (6u * 28 * 28 + 6 * 14 * 14) * 4);
  EXPECT_EQ(p.layer_off, p.scratch_off);
  EXPECT_EQ(p.describe().rfind("7 layers in one kernel, ", 0), 0u) << p.describe();
  EXPECT_EQ(Engine::from_bytes(engine)->summary().whole_network, p.describe());
}

TEST(WholeNetPlan, LeNet5Float16ChannelsLast) {
  const WholeNetPlan p = plan_of(build_sm90(test::lenet5(3), true));
  ASSERT_TRUE(p.eligible()) << p.refusal;
  EXPECT_EQ(p.batch, 3);
  // Cast in, NhwcConv/NhwcMaxPool, Transpose back, the Gemms, Cast out. The Transpose to
  // channels-last of a one-channel image moves no bytes: a view (view-reshapes).
  EXPECT_EQ(ops_of(p), (std::vector<WnOp>{WnOp::kUnary, WnOp::kConv, WnOp::kPool, WnOp::kConv, WnOp::kPool,
                                          WnOp::kTranspose, WnOp::kDense, WnOp::kDense, WnOp::kDense, WnOp::kUnary}));
  EXPECT_EQ(p.layers.front().in_dtype, DataType::kFloat32);
  EXPECT_EQ(p.layers.front().out_dtype, DataType::kFloat16);
  EXPECT_EQ(p.layers.back().in_dtype, DataType::kFloat16);
  EXPECT_EQ(p.layers.back().out_dtype, DataType::kFloat32);
  EXPECT_TRUE(p.layers[1].nhwc);
  EXPECT_TRUE(p.layers[2].nhwc);
  // [5, 5, 16] -> [16, 5, 5]: output axis i is input axis perm[i], padded to 4 axes.
  const WnLayer& t = p.layers[5];
  EXPECT_EQ(std::vector<int32_t>(t.dims, t.dims + 4), std::vector<int32_t>({1, 5, 5, 16}));
  EXPECT_EQ(std::vector<int32_t>(t.perm, t.perm + 4), std::vector<int32_t>({0, 3, 1, 2}));
  check_layout(p);
}

TEST(WholeNetPlan, SmallNetsAreEligible) {
  for (int64_t batch : {1, 3, 8})
    for (bool fp16 : {false, true})
      for (auto make : {test::lenet5, test::mlp, test::odd_cnn, test::odd_cnn2}) {
        const test::SmallNet m = make(batch);
        SCOPED_TRACE(m.m.graph().name() + " batch " + std::to_string(batch) + (fp16 ? " float16" : " float32"));
        const WholeNetPlan p = plan_of(build_sm90(m, fp16));
        ASSERT_TRUE(p.eligible()) << p.refusal;
        EXPECT_EQ(p.batch, batch);
        check_layout(p);
      }
}

TEST(WholeNetPlan, MlpTakesBothLayoutsOfW) {
  const WholeNetPlan p = plan_of(build_sm90(test::mlp(2), false));
  ASSERT_TRUE(p.eligible()) << p.refusal;
  ASSERT_EQ(ops_of(p), std::vector<WnOp>(4, WnOp::kDense));
  EXPECT_TRUE(p.layers[0].trans_b);
  const WnLayer& mm = p.layers[1];  // MatMul + Add + Sigmoid: FusedMatMul
  EXPECT_FALSE(mm.trans_b);
  EXPECT_EQ(mm.act, Activation::kSigmoid);
  EXPECT_EQ(mm.beta, 1.0f);
  const WnLayer& wide = p.layers[2];
  EXPECT_EQ(wide.m, 1100);
  EXPECT_EQ(wide.alpha, 0.5f);
  EXPECT_EQ(wide.beta, 2.0f);
  EXPECT_EQ(wide.act, Activation::kTanh);
  EXPECT_EQ(p.layers[3].bias_row, 0);  // C [1, 10]: one row for every sample
  EXPECT_EQ(p.layers[3].bias_col, 1);
  EXPECT_GT(p.layer_off, p.scratch_off);  // the split reduction's partial sums
}

// The layer table run on the CPU as the kernel walks it (whole_net.cu, one thread standing for the
// block): the same loops in float, every layer's output stored in its type in a byte array laid out
// as the block's shared memory. It checks the table (geometry, permutations, bias strides) and the
// layout against the CPU engine without a GPU; the GPU test checks the kernel itself.
class TableRunner {
 public:
  TableRunner(const WholeNetPlan& p, const detail::EngineImpl& e) : p_(p), e_(e) {}

  std::vector<float> run(const std::vector<float>& input) const {
    const WnLayer& last = p_.layers.back();
    std::vector<uint8_t> out(static_cast<size_t>(p_.batch) * bytes_of(last.out_elems, last.out_dtype));
    const auto* in = reinterpret_cast<const uint8_t*>(input.data());
    for (int64_t n = 0; n < p_.batch; ++n) {
      std::vector<uint8_t> smem(p_.smem_bytes, 0xFF);  // NaN wherever a layer reads what nobody wrote
      std::memcpy(smem.data(), in + n * p_.in_bytes, static_cast<size_t>(p_.in_bytes));
      for (size_t i = 0; i < p_.layers.size(); ++i) {
        const WnLayer& l = p_.layers[i];
        uint8_t* y =
            i + 1 == p_.layers.size() ? out.data() + n * bytes_of(l.out_elems, l.out_dtype) : smem.data() + l.out_off;
        layer(l, smem.data() + l.in_off, y, n);
      }
    }
    std::vector<float> r(out.size() / 4);
    std::memcpy(r.data(), out.data(), out.size());
    return r;
  }

 private:
  static float load(const uint8_t* p, int64_t i, DataType t) {
    uint16_t h;
    switch (t) {
      case DataType::kFloat16: std::memcpy(&h, p + 2 * i, 2); return Half::to_float(h);
      case DataType::kBFloat16: std::memcpy(&h, p + 2 * i, 2); return std::bit_cast<float>(uint32_t{h} << 16);
      default: {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        return f;
      }
    }
  }
  static void store(uint8_t* p, int64_t i, DataType t, float v) {
    const uint16_t h = t == DataType::kFloat16 ? Half::from_float(v) : BFloat16::from_float(v);
    if (t == DataType::kFloat32)
      std::memcpy(p + 4 * i, &v, 4);
    else
      std::memcpy(p + 2 * i, &h, 2);
  }
  float weight(int32_t id, int64_t i) const {
    const detail::TensorRec& t = e_.tensors[static_cast<size_t>(id)];
    return load(e_.weight_data(t), i, t.dtype);
  }
  static float act(const WnLayer& l, float v) { return epilogue::activate<float>(l.act, v, l.act_alpha, l.act_beta); }

  void layer(const WnLayer& l, const uint8_t* x, uint8_t* y, int64_t n) const {
    const DataType ti = l.in_dtype, to = l.out_dtype;
    const int plane = l.oh * l.ow;
    auto at = [&](int c, int iy, int ix) { return l.nhwc ? (iy * l.w + ix) * l.c + c : (c * l.h + iy) * l.w + ix; };
    switch (l.op) {
      case WnOp::kConv: {
        // whole_net.cu's conv_layer: R channels per item (conv_block), taps clipped to the image.
        const int cg = l.c / l.groups, mg = l.m / l.groups, wstride = cg * l.kh * l.kw;
        const int R = mg % 2 == 0 && l.m * plane / 2 >= gpu::kWholeNetThreads / 2 ? 2 : 1;
        auto taps = [](int start, int in, int k, int d, int* lo, int* hi) {
          *lo = start < 0 ? (-start + d - 1) / d : 0;
          *hi = std::min(k, (in - start + d - 1) / d);
        };
        for (int o = 0; o < l.m / R * plane; ++o) {
          const int mb = o / plane, q = o % plane, oy = q / l.ow, ox = q % l.ow;
          const int m0 = mb * R, c0 = m0 / mg * cg, iy0 = oy * l.sh - l.ph, ix0 = ox * l.sw - l.pw;
          int ky0, ky1, kx0, kx1;
          taps(iy0, l.h, l.kh, l.dh, &ky0, &ky1);
          taps(ix0, l.w, l.kw, l.dw, &kx0, &kx1);
          float acc[2] = {0, 0};
          for (int ci = 0; ci < cg; ++ci)
            for (int ky = ky0; ky < ky1; ++ky)
              for (int kx = kx0; kx < kx1; ++kx) {
                const int iy = iy0 + ky * l.dh, ix = ix0 + kx * l.dw;
                const float v = load(x, at(c0 + ci, iy, ix), ti);
                const int64_t wi = l.nhwc ? (ky * l.kw + kx) * cg + ci : (ci * l.kh + ky) * l.kw + kx;
                for (int r = 0; r < R; ++r) acc[r] += v * weight(l.w_tensor, int64_t{m0 + r} * wstride + wi);
              }
          for (int r = 0; r < R; ++r) {
            const int m = m0 + r;
            const float v = l.b_tensor >= 0 ? acc[r] + weight(l.b_tensor, m) : acc[r];
            store(y, l.nhwc ? q * l.m + m : m * plane + q, to, act(l, v));
          }
        }
        return;
      }
      case WnOp::kPool:
        for (int o = 0; o < l.c * plane; ++o) {
          const int c = l.nhwc ? o % l.c : o / plane, q = l.nhwc ? o / l.c : o % plane, oy = q / l.ow, ox = q % l.ow;
          float best = -FLT_MAX, sum = 0;
          int count = 0;
          double total = 0;
          for (int ky = 0; ky < l.kh; ++ky)
            for (int kx = 0; kx < l.kw; ++kx) {
              const int iy = oy * l.sh - l.ph + ky * l.dh, ix = ox * l.sw - l.pw + kx * l.dw;
              if (iy < 0 || iy >= l.h || ix < 0 || ix >= l.w) continue;
              const float v = load(x, at(c, iy, ix), ti);
              const bool global_max = l.pool == gpu::WnPool::kGlobalMax;
              if (count == 0 || v > best || (global_max ? v != v : best != best && v == v)) best = v;
              sum += v;
              total += v;
              ++count;
            }
          float r = best;
          if (l.pool == gpu::WnPool::kGlobalAverage) r = static_cast<float>(total / count);
          if (l.pool == gpu::WnPool::kAverage) {
            auto taps = [](int start, int in, int pad_end, int k, int d) {
              const int a = in + pad_end - start;
              return std::max(0, std::min(k, a >= 0 ? (a + d - 1) / d : -((-a) / d)));
            };
            const int div = l.count_include_pad ? taps(oy * l.sh - l.ph, l.h, l.ph_end, l.kh, l.dh) *
                                                      taps(ox * l.sw - l.pw, l.w, l.pw_end, l.kw, l.dw)
                                                : count;
            r = div > 0 && count > 0 ? sum / static_cast<float>(div) : 0.0f;
          }
          store(y, o, to, r);
        }
        return;
      case WnOp::kDense:
        for (int j = 0; j < l.m; ++j) {
          float acc = 0;
          for (int k = 0; k < l.c; ++k)
            acc += load(x, k, ti) * weight(l.w_tensor, l.trans_b ? int64_t{j} * l.c + k : int64_t{k} * l.m + j);
          float v = l.alpha * acc;
          if (l.b_tensor >= 0) v += l.beta * weight(l.b_tensor, n * l.bias_row + j * l.bias_col);
          store(y, j, to, act(l, v));
        }
        return;
      case WnOp::kUnary:
        for (int i = 0; i < l.in_elems; ++i) store(y, i, to, act(l, load(x, i, ti)));
        return;
      case WnOp::kTranspose: {
        const int in_stride[4] = {l.dims[1] * l.dims[2] * l.dims[3], l.dims[2] * l.dims[3], l.dims[3], 1};
        for (int o = 0; o < l.out_elems; ++o) {
          int rest = o, off = 0;
          for (int i = 3; i >= 0; --i) {
            off += rest % l.dims[l.perm[i]] * in_stride[l.perm[i]];
            rest /= l.dims[l.perm[i]];
          }
          store(y, o, to, load(x, off, ti));
        }
        return;
      }
    }
  }

  const WholeNetPlan& p_;
  const detail::EngineImpl& e_;
};

// The table of every small net, run by TableRunner, against the CPU engine (float32) on random inputs.
TEST(WholeNetPlan, TablesComputeWhatTheCpuEngineComputes) {
  for (bool fp16 : {false, true})
    for (auto make : {test::lenet5, test::mlp, test::odd_cnn, test::odd_cnn2}) {
      const test::SmallNet m = make(3);
      SCOPED_TRACE(m.m.graph().name() + (fp16 ? " float16" : " float32"));
      auto e = detail::parse_engine(build_sm90(m, fp16), "test");
      const WholeNetPlan p = gpu::plan_whole_network(*e, kSm90Smem);
      ASSERT_TRUE(p.eligible()) << p.refusal;
      graph::Graph g = m.import();
      const std::vector<uint8_t> cpu = build::build_engine(g, {});
      const TensorInfo in = Engine::from_bytes(cpu)->inputs()[0];
      const std::vector<float> x = test::random_vec(static_cast<size_t>(in.numel()), 7);
      const std::vector<float> want = test::run_engine(cpu, {{in.name, x}}, {"y"})["y"];
      const std::vector<float> got = TableRunner(p, *e).run(x);
      ASSERT_EQ(got.size(), want.size());
      float scale = 1;
      for (float v : want) scale = std::max(scale, std::fabs(v));
      for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], (fp16 ? 1e-2f : 1e-5f) * scale) << i;
    }
}

// The NaN rules of the pools, in the table as in the CPU kernels.
TEST(WholeNetPlan, TablesKeepTheCpuNanRules) {
  for (bool fp16 : {false, true}) {
    SCOPED_TRACE(fp16 ? "float16" : "float32");
    const test::SmallNet m = test::nan_pools(2);
    auto e = detail::parse_engine(build_sm90(m, fp16), "test");
    const WholeNetPlan p = gpu::plan_whole_network(*e, kSm90Smem);
    ASSERT_TRUE(p.eligible()) << p.refusal;
    graph::Graph g = m.import();
    const std::vector<float> x = test::nan_pools_input(2, 3);
    const std::vector<float> want = test::run_engine(build::build_engine(g, {}), {{"x", x}}, {"y"})["y"];
    const std::vector<float> got = TableRunner(p, *e).run(x);
    ASSERT_EQ(got.size(), 8u);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(std::isnan(want[i]), i == 1) << i;  // the test's premise
      EXPECT_EQ(std::isnan(got[i]), std::isnan(want[i])) << i;
      if (!std::isnan(want[i])) {
        EXPECT_NEAR(got[i], want[i], fp16 ? 1e-2f : 0.0f) << i;
      }
    }
  }
}

void expect_refused(const WholeNetPlan& p, const std::string& why) {
  EXPECT_FALSE(p.eligible());
  EXPECT_NE(p.refusal.find(why), std::string::npos) << p.refusal;
  EXPECT_TRUE(p.layers.empty());
  EXPECT_EQ(p.describe(), "not used: " + p.refusal);
}

TEST(WholeNetPlan, RefusesAnOpItHasNoLayerFor) {
  expect_refused(plan_of(build_sm90(test::softmax_mlp(1), false)), "(Softmax): no whole-network layer");
}

TEST(WholeNetPlan, RefusesActivationsBeyondSharedMemory) {
  expect_refused(plan_of(build_sm90(test::big_cnn(1), false)), "shared memory");
  // LeNet-5 needs about 23 KiB; on a GPU that offered 16 KiB it would not fit.
  expect_refused(plan_of(build_sm90(test::lenet5(1), false), 16 * 1024), "more than the 16.0 KiB");
}

TEST(WholeNetPlan, RefusesBatchesAbove8) { expect_refused(plan_of(build_sm90(test::lenet5(9), false)), "batch 9"); }

TEST(WholeNetPlan, RefusesTwoOutputs) {
  test::SmallNet m = test::softmax_mlp(1);
  m.output("a1");
  expect_refused(plan_of(build_sm90(m, false)), "more than one input or output");
}

TEST(WholeNetPlan, RefusesAResidual) {
  test::SmallNet m("residual");
  m.input("x", {1, 4, 6, 6});
  m.output("y");
  test::attr_ints(m.conv("conv", "x", "c", 4, 4, {3, 3}), "pads", {1, 1, 1, 1});
  m.node("Add", "add", {"c", "x"}, {"s"});
  m.node("Relu", "relu", {"s"}, {"y"});
  expect_refused(plan_of(build_sm90(m, false)), "(FusedConv): its input 3 is not a constant");
}

TEST(WholeNetPlan, RefusesTransposedA) {
  test::SmallNet m("trans_a");
  m.input("x", {3, 3});
  m.output("y");
  m.weight("w", {3, 5}, 3);
  test::attr_int(m.node("Gemm", "gemm", {"x", "w"}, {"y"}), "transA", 1);
  expect_refused(plan_of(build_sm90(m, false)), "transA");
}

// A float16 engine's classifier that reads a float32 pooling (to-fp16's float16 weights under a
// float32 product): the layers take one type, so the plan refuses it.
TEST(WholeNetPlan, RefusesFloat16WeightsUnderAFloat32Product) {
  test::SmallNet m("head");
  m.input("x", {1, 16, 4, 4});
  m.output("y");
  m.weight("w", {10, 16}, 3);
  m.node("GlobalAveragePool", "pool", {"x"}, {"p"});
  m.node("Flatten", "flat", {"p"}, {"f"});
  test::attr_int(m.node("Gemm", "gemm", {"f", "w"}, {"y"}), "transB", 1);
  expect_refused(plan_of(build_sm90(m, true)), "(FusedGemm): its constants have another type");
}

TEST(WholeNetPlan, SharedMemoryOfTargets) {
  EXPECT_EQ(gpu::max_block_smem_of(gpu::parse_arch("sm_90")), kSm90Smem);
  EXPECT_EQ(gpu::max_block_smem_of(gpu::parse_arch("sm_80")), 166912u);
  EXPECT_EQ(gpu::max_block_smem_of(gpu::parse_arch("sm_1")), 48u * 1024);
}

TEST(WholeNetPlan, CpuEnginesSayNothing) {
  graph::Graph g = test::lenet5(1).import();
  EXPECT_TRUE(Engine::from_bytes(build::build_engine(g, {}))->summary().whole_network.empty());
}

}  // namespace
}  // namespace kiln
