// RNN, GRU and LSTM on the GPU beyond the op-case table (tests/ops/rnn_cases.cpp, run against the
// CPU by op_cases_gpu_test): random configurations with every option on and off, larger ones
// (several GEMM tiles, longer sequences), the persistent kernel's shapes, omitted optional outputs,
// sequence_lens outside [0, seq] as a device error, and a type the kernel does not take; each with
// every tactic offered (persistent and step-wise). Skips without a GPU.
#include <algorithm>
#include <cmath>

#include "gpu_harness.h"
#include "ops/rnn_case_util.h"

namespace kiln::gpu_test {
namespace {

using Inputs = std::vector<HostTensor>;

std::string describe(const RnnConfig& c, DT dt, GpuMode m) {
  return std::string(op_name(c.kind)) + " " + std::string(dtype_name(dt)) +
         " dir=" + std::string(kEnumNames<RnnDirection>[static_cast<size_t>(c.dir)]) + " S=" + std::to_string(c.S) +
         " B=" + std::to_string(c.B) + " I=" + std::to_string(c.I) + " H=" + std::to_string(c.H) +
         (c.bias ? " bias" : "") + (c.h0 ? " h0" : "") + (c.c0 ? " c0" : "") + (c.peep ? " P" : "") +
         (c.lens ? " lens" : "") + (c.layout1 ? " layout1" : "") + (c.lbr ? " lbr" : "") +
         (c.input_forget ? " input_forget" : "") + (c.clip > 0 ? " clip=" + std::to_string(c.clip) : "") +
         (c.acts.empty() ? "" : " custom-acts") + " n_out=" + std::to_string(c.n_out) + " " + mode_name(m);
}

std::vector<OutputType> infer(const RnnConfig& c, const Inputs& ins) {
  std::vector<TensorView> iv;
  for (const HostTensor& t : ins) iv.push_back(t.view(nullptr));
  return infer_shapes(c.kind, Attrs{attrs_of(c)}, iv, outputs_of(c));
}

void compare(const RnnConfig& c, DT dt, GpuMode m, const std::vector<HostTensor>& got,
             const std::vector<HostTensor>& want, const std::vector<bool>& absent_out = {}) {
  const std::string what = describe(c, dt, m);
  for (size_t k = 0; k < want.size(); ++k) {
    if (k < absent_out.size() && absent_out[k]) continue;
    expect_match(got[k], want[k], rnn_tolerance(dt), what + " output " + std::to_string(k));
  }
}

// Every tactic the kernel offers for these inputs (the persistent kernel's and the step-wise
// one), or its one default.
std::vector<int32_t> tactics_or_default(const RnnConfig& c, const Inputs& ins) {
  std::vector<int32_t> t = tactics_of(c.kind, Attrs{attrs_of(c)}, ins, outputs_of(c));
  if (t.empty()) t.push_back(-1);
  return t;
}

void check(const RnnConfig& c, DT dt, GpuMode m = GpuMode::kDirect) {
  const Inputs ins = make_inputs(c, dt);
  const RnnAttrs a = attrs_of(c);
  const std::vector<OutputType> types = infer(c, ins);
  const std::vector<HostTensor> want = run_cpu(c.kind, Attrs{a}, ins, types);
  for (int32_t tactic : tactics_or_default(c, ins)) {
    std::vector<HostTensor> got;
    const std::string what = describe(c, dt, m) + " tactic " + std::to_string(tactic);
    try {
      got = run_gpu(c.kind, Attrs{a}, ins, types, m, GpuRunOptions{tactic});
    } catch (const Error& e) {
      ADD_FAILURE() << what << ": GPU kernel threw: " << e.what();
      return;
    }
    for (size_t k = 0; k < want.size(); ++k)
      expect_match(got[k], want[k], rnn_tolerance(dt), what + " output " + std::to_string(k));
  }
}

class GpuRnn : public testing::Test {
 protected:
  void SetUp() override {
    rng().seed(
        static_cast<uint32_t>(std::hash<std::string>{}(testing::UnitTest::GetInstance()->current_test_info()->name())));
  }
};

// Every option on and off, over random shapes (odd sizes included), dtypes and directions.
TEST_F(GpuRnn, RandomConfigurations) {
  KILN_SKIP_WITHOUT_GPU();
  std::mt19937 g(7);
  auto coin = [&] { return std::uniform_int_distribution<int>(0, 1)(g) == 1; };
  auto pick = [&](std::vector<int64_t> v) { return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(g)]; };
  for (int iter = 0; iter < 108; ++iter) {
    RnnConfig c;
    c.kind = kRnnKinds[iter % 3];
    c.dir = kRnnDirs[(iter / 3) % 3];
    const DT dt = kRnnDtypes[(iter / 9) % 3];
    c.S = pick({1, 2, 5, 8});
    c.B = pick({1, 3, 4});
    c.I = pick({1, 3, 7, 16});
    c.H = pick({1, 2, 5, 8, 17});
    c.bias = coin();
    c.h0 = coin();
    c.c0 = coin();
    c.peep = coin();
    c.lens = coin();
    c.layout1 = coin();
    c.lbr = c.kind == OpKind::kGRU && coin();
    c.input_forget = c.kind == OpKind::kLSTM && iter % 4 == 2;
    c.clip = iter % 5 == 0 ? 0.4f : 0.0f;
    c.set_hidden = iter % 7 != 0;
    c.scale = 1.5;
    check(c, dt, iter % 4 == 1 ? GpuMode::kMisaligned : iter % 4 == 3 ? GpuMode::kCaptured : GpuMode::kDirect);
    if (HasFailure()) return;
  }
}

// Larger: several GEMM tiles in every direction, more steps.
TEST_F(GpuRnn, Larger) {
  KILN_SKIP_WITHOUT_GPU();
  for (OpKind k : kRnnKinds)
    for (DT dt : kRnnDtypes)
      for (bool lbr : {false, true}) {
        if (lbr && k != OpKind::kGRU) continue;
        RnnConfig c;
        c.kind = k;
        c.dir = RnnDirection::kBidirectional;
        c.S = 9, c.B = 37, c.I = 45, c.H = 40;
        c.bias = c.h0 = c.c0 = c.peep = c.lens = true;
        c.lbr = lbr;
        c.scale = 0.3;
        check(c, dt);
        c.S = 40, c.B = 3, c.I = 20, c.H = 33, c.layout1 = true;  // a longer sequence
        check(c, dt, GpuMode::kCaptured);
      }
}

// The persistent kernel's shapes: hidden sizes that span every SM (a DeepSpeech2 layer: GRU 512,
// bidirectional; a GRU of 1000 units, several units a block), up to the largest batch it takes
// (16), long sequences with sequence_lens, GRU with and without linear_before_reset; captured, as
// engines run it. Each is checked with every tactic, and the persistent ones must be on offer (the
// 1000-unit GRU's weights only where a block may have Hopper's 227 KiB of shared memory, not
// sm_87's 163 KiB: KILN_TARGET_ARCH=sm_87); a larger batch and float64 leave only the step-wise
// kernels.
TEST_F(GpuRnn, PersistentShapes) {
  KILN_SKIP_WITHOUT_GPU();
  struct Shape {
    OpKind kind;
    RnnDirection dir;
    int64_t S, B, I, H;
  };
  const Shape shapes[] = {{OpKind::kGRU, RnnDirection::kBidirectional, 60, 1, 96, 512},
                          {OpKind::kLSTM, RnnDirection::kForward, 33, 8, 40, 256},
                          {OpKind::kRNN, RnnDirection::kReverse, 50, 5, 16, 300},
                          {OpKind::kGRU, RnnDirection::kBidirectional, 20, 3, 24, 1000},
                          {OpKind::kLSTM, RnnDirection::kBidirectional, 24, 2, 33, 129},
                          {OpKind::kGRU, RnnDirection::kForward, 30, 16, 40, 256}};
  for (const Shape& z : shapes)
    for (DT dt : {DT::kFloat32, DT::kFloat16})
      for (bool lbr : {true, false}) {
        if (!lbr && z.kind != OpKind::kGRU) continue;
        RnnConfig c;
        c.kind = z.kind, c.dir = z.dir, c.S = z.S, c.B = z.B, c.I = z.I, c.H = z.H;
        c.bias = c.h0 = c.c0 = c.lens = true;
        c.peep = c.kind == OpKind::kLSTM;
        c.lbr = lbr && c.kind == OpKind::kGRU;
        c.scale = 2.0 / std::sqrt(static_cast<double>(z.H));
        const Inputs ins = make_inputs(c, dt);
        if (z.H < 1000 || block_smem() > 200 * 1024) {
          EXPECT_GE(tactics_or_default(c, ins).size(), 2u) << describe(c, dt, GpuMode::kCaptured);
        }
        check(c, dt, GpuMode::kCaptured);
        if (HasFailure()) return;
      }
  RnnConfig big;
  big.kind = OpKind::kLSTM, big.S = 4, big.B = 17, big.H = 64;
  EXPECT_EQ(tactics_of(big.kind, Attrs{attrs_of(big)}, make_inputs(big, DT::kFloat32), outputs_of(big)).size(), 0u);
  check(big, DT::kFloat32);
  big.kind = OpKind::kGRU, big.B = 2;
  EXPECT_EQ(tactics_of(big.kind, Attrs{attrs_of(big)}, make_inputs(big, DT::kFloat64), outputs_of(big)).size(), 0u);
}

// Omitted optional outputs (views that do not exist, with null data), run directly: the harness
// allocates every output, so this builds the views itself.
std::vector<HostTensor> run_gpu_omitting(const RnnConfig& c, const Inputs& ins, const std::vector<OutputType>& types,
                                         const std::vector<bool>& absent_out, int32_t tactic) {
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  std::vector<TensorView> iv, ov;
  for (const HostTensor& t : ins) {
    if (!t.exists) {
      iv.push_back(t.view(nullptr));
      continue;
    }
    bufs.push_back(std::make_unique<DeviceBuffer>(t.bytes.size(), 0));
    bufs.back()->upload(t.bytes);
    iv.push_back(t.view(bufs.back()->data()));
  }
  std::vector<HostTensor> outs = empty_outputs(types, 0xFF);
  std::vector<DeviceBuffer*> out_bufs(outs.size(), nullptr);
  for (size_t k = 0; k < outs.size(); ++k) {
    if (absent_out[k]) {
      ov.push_back(TensorView{outs[k].dtype, outs[k].shape, nullptr, false});
      continue;
    }
    bufs.push_back(std::make_unique<DeviceBuffer>(outs[k].bytes.size(), 0));
    out_bufs[k] = bufs.back().get();
    ov.push_back(outs[k].view(out_bufs[k]->data()));
  }
  gpu::check_cuda(cudaDeviceSynchronize(), "uploading the inputs");
  Stream stream;
  GpuResources& res = GpuResources::get();
  const std::vector<const void*> host_in(ins.size(), nullptr);
  std::unique_ptr<gpu::StepState> state;
  const Attrs attrs{attrs_of(c)};
  gpu::GpuEnv env = res.env(stream.get(), host_in, &state);
  env.tactic = tactic;
  const gpu::GpuKernelEntry* entry = gpu::gpu_kernel_entry(c.kind);
  if (entry->workspace) env = res.env(stream.get(), host_in, &state, entry->workspace(c.kind, attrs, iv, ov, env));
  env.tactic = tactic;
  entry->fn(c.kind, attrs, iv, ov, env);
  gpu::check_cuda(cudaStreamSynchronize(stream.get()), "cudaStreamSynchronize");
  res.throw_if_device_error();
  for (size_t k = 0; k < outs.size(); ++k) {
    if (!out_bufs[k]) continue;
    bool guards_ok = false;
    outs[k].bytes = out_bufs[k]->download(&guards_ok);
    EXPECT_TRUE(guards_ok) << "output " << k << ": bytes outside the tensor were written";
  }
  return outs;
}

TEST_F(GpuRnn, OmittedOutputs) {
  KILN_SKIP_WITHOUT_GPU();
  for (OpKind k : kRnnKinds) {
    RnnConfig c;
    c.kind = k;
    c.dir = RnnDirection::kBidirectional;
    c.h0 = c.c0 = c.bias = true;
    const size_t n = outputs_of(c);
    std::vector<std::vector<bool>> masks = {std::vector<bool>(n, false), {true, false, false}, {false, true, true}};
    if (k == OpKind::kLSTM) masks.push_back({true, true, false});
    for (DT dt : kRnnDtypes)
      for (std::vector<bool> mask : masks) {
        mask.resize(n);
        if (std::all_of(mask.begin(), mask.end(), [](bool b) { return b; })) continue;
        const Inputs ins = make_inputs(c, dt);
        const std::vector<OutputType> types = infer(c, ins);
        const std::vector<HostTensor> want = run_cpu(c.kind, Attrs{attrs_of(c)}, ins, types);
        for (int32_t tactic : tactics_or_default(c, ins))
          compare(c, dt, GpuMode::kDirect, run_gpu_omitting(c, ins, types, mask, tactic), want, mask);
      }
  }
}

// sequence_lens known only at run time: a value outside [0, seq] is a device error.
TEST_F(GpuRnn, BadSequenceLensIsADeviceError) {
  KILN_SKIP_WITHOUT_GPU();
  for (OpKind k : kRnnKinds)
    for (int bad : {6, -1}) {
      RnnConfig c;
      c.kind = k;
      c.S = 5, c.B = 3;
      const Inputs ins = make_inputs(c, DT::kFloat32, bad);
      const std::vector<OutputType> types = infer(c, ins);
      for (GpuMode m : {GpuMode::kDirect, GpuMode::kCaptured})
        for (int32_t tactic : tactics_or_default(c, ins)) {
          try {
            (void)run_gpu(c.kind, Attrs{attrs_of(c)}, ins, types, m, GpuRunOptions{tactic});
            ADD_FAILURE() << op_name(k) << " tactic " << tactic << ": sequence length " << bad << " should fail";
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("value the op cannot take"), std::string::npos) << e.what();
          }
        }
    }
}

TEST(GpuRnnErrors, UnsupportedDtypeThrows) {
  KILN_SKIP_WITHOUT_GPU();
  RnnConfig c;
  const Inputs ins = {rand_tensor(DT::kBFloat16, {3, 2, 4}, -1, 1), rand_tensor(DT::kBFloat16, {1, 3, 4}, -1, 1),
                      rand_tensor(DT::kBFloat16, {1, 3, 3}, -1, 1)};
  const std::vector<OutputType> types = {{DT::kBFloat16, {3, 1, 2, 3}}, {DT::kBFloat16, {1, 2, 3}}};
  EXPECT_THROW((void)run_gpu(OpKind::kRNN, Attrs{attrs_of(c)}, ins, types, GpuMode::kDirect), Error);
}

}  // namespace
}  // namespace kiln::gpu_test
