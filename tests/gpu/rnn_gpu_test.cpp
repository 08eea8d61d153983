// RNN, GRU and LSTM on the GPU against the CPU kernel (the reference), over the configurations of
// tests/cpu/ops_rnn_test.cpp: every direction, with and without bias / initial states /
// sequence_lens / peepholes, clip, linear_before_reset, input_forget, layout 1, non-default
// activations with alpha / beta, subsets of the outputs (also omitted ones), zero sizes, float32 /
// float16 / float64, direct, misaligned and under stream capture. The outputs carry error that
// accumulates over the time steps, so they are compared with a tolerance of this file's own
// (compare below) rather than the harness's per-op accuracies. Plus: sequence_lens outside
// [0, seq] is a device error. Skips without a GPU.
#include <algorithm>

#include "gpu_harness.h"

namespace kiln::gpu_test {
namespace {

using Act = RnnActivation;
using Inputs = std::vector<HostTensor>;

struct Config {
  OpKind kind = OpKind::kRNN;
  RnnDirection dir = RnnDirection::kForward;
  int64_t S = 3, B = 2, I = 4, H = 3;
  bool bias = false, h0 = false, c0 = false, peep = false, lens = false;
  bool layout1 = false, lbr = false, input_forget = false, set_hidden = true;
  float clip = 0;
  std::vector<Act> acts;  // empty: defaults
  std::vector<float> alphas, betas;
  size_t n_out = 0;  // 0: all the op has
  double scale = 1;  // range of the random weights
};

std::string describe(const Config& c, DT dt, GpuMode m) {
  return std::string(op_name(c.kind)) + " " + std::string(dtype_name(dt)) +
         " dir=" + std::string(kEnumNames<RnnDirection>[static_cast<size_t>(c.dir)]) + " S=" + std::to_string(c.S) +
         " B=" + std::to_string(c.B) + " I=" + std::to_string(c.I) + " H=" + std::to_string(c.H) +
         (c.bias ? " bias" : "") + (c.h0 ? " h0" : "") + (c.c0 ? " c0" : "") + (c.peep ? " P" : "") +
         (c.lens ? " lens" : "") + (c.layout1 ? " layout1" : "") + (c.lbr ? " lbr" : "") +
         (c.input_forget ? " input_forget" : "") + (c.clip > 0 ? " clip=" + std::to_string(c.clip) : "") +
         (c.acts.empty() ? "" : " custom-acts") + " n_out=" + std::to_string(c.n_out) + " " + mode_name(m);
}

RnnAttrs attrs_of(const Config& c) {
  RnnAttrs a;
  a.direction = c.dir;
  a.hidden_size = c.set_hidden ? c.H : 0;
  a.layout = c.layout1 ? 1 : 0;
  a.linear_before_reset = c.lbr ? 1 : 0;
  a.input_forget = c.input_forget ? 1 : 0;
  a.clip = c.clip;
  a.activations = c.acts;
  a.activation_alpha = c.alphas;
  a.activation_beta = c.betas;
  return a;
}

size_t all_outputs(OpKind k) { return k == OpKind::kLSTM ? 3 : 2; }
size_t outputs_of(const Config& c) { return c.n_out ? c.n_out : all_outputs(c.kind); }

// X, W, R, B, sequence_lens, initial_h (, initial_c, P); trailing omitted inputs dropped.
// bad_lens: one sequence length outside [0, S].
Inputs make_inputs(const Config& c, DT dt, int bad_lens = 0) {
  const int64_t D = c.dir == RnnDirection::kBidirectional ? 2 : 1;
  const int64_t G = c.kind == OpKind::kLSTM ? 4 : c.kind == OpKind::kGRU ? 3 : 1;
  const bool lstm = c.kind == OpKind::kLSTM;
  const Shape state = c.layout1 ? Shape{c.B, D, c.H} : Shape{D, c.B, c.H};
  Inputs in;
  in.push_back(rand_tensor(dt, c.layout1 ? Shape{c.B, c.S, c.I} : Shape{c.S, c.B, c.I}, -2, 2));
  in.push_back(rand_tensor(dt, {D, G * c.H, c.I}, -c.scale, c.scale));
  in.push_back(rand_tensor(dt, {D, G * c.H, c.H}, -c.scale, c.scale));
  in.push_back(c.bias ? rand_tensor(dt, {D, 2 * G * c.H}, -1, 1) : absent());
  if (c.lens || bad_lens) {
    HostTensor l = rand_tensor(DT::kInt32, {c.B}, 0, static_cast<double>(c.S));
    if (c.B > 0) set(l, 0, static_cast<double>(c.S));  // one full-length entry
    if (c.B > 2) set(l, 2, 0);                         // and one empty one
    if (bad_lens && c.B > 1) set(l, 1, bad_lens);
    in.push_back(l);
  } else {
    in.push_back(absent());
  }
  in.push_back(c.h0 ? rand_tensor(dt, state, -1, 1) : absent());
  if (lstm) {
    in.push_back(c.c0 ? rand_tensor(dt, state, -1, 1) : absent());
    in.push_back(c.peep ? rand_tensor(dt, {D, 3 * c.H}, -1, 1) : absent());
  }
  while (!in.empty() && !in.back().exists) in.pop_back();
  return in;
}

// Error accumulates over the steps (and float16 outputs round once more on each side).
Tolerance tolerance(DT dt) {
  if (dt == DT::kFloat16) return {1e-2, 1e-2};
  if (dt == DT::kFloat64) return {1e-9, 1e-9};
  return {1e-4, 1e-4};
}

std::vector<OutputType> infer(const Config& c, const Inputs& ins) {
  std::vector<TensorView> iv;
  for (const HostTensor& t : ins) iv.push_back(t.view(nullptr));
  return infer_shapes(c.kind, Attrs{attrs_of(c)}, iv, outputs_of(c));
}

void compare(const Config& c, DT dt, GpuMode m, const std::vector<HostTensor>& got, const std::vector<HostTensor>& want,
             const std::vector<bool>& absent_out = {}) {
  const std::string what = describe(c, dt, m);
  for (size_t k = 0; k < want.size(); ++k) {
    if (k < absent_out.size() && absent_out[k]) continue;
    expect_match(got[k], want[k], tolerance(dt), what + " output " + std::to_string(k));
  }
}

void check(const Config& c, DT dt, GpuMode m = GpuMode::kDirect) {
  const Inputs ins = make_inputs(c, dt);
  const RnnAttrs a = attrs_of(c);
  const std::vector<OutputType> types = infer(c, ins);
  const std::vector<HostTensor> want = run_cpu(c.kind, Attrs{a}, ins, types);
  std::vector<HostTensor> got;
  try {
    got = run_gpu(c.kind, Attrs{a}, ins, types, m);
  } catch (const Error& e) {
    ADD_FAILURE() << describe(c, dt, m) << ": GPU kernel threw: " << e.what();
    return;
  }
  compare(c, dt, m, got, want);
}

void check_all_modes(const Config& c, DT dt) {
  for (GpuMode m : {GpuMode::kDirect, GpuMode::kMisaligned, GpuMode::kCaptured}) check(c, dt, m);
}

const DT kDtypes[] = {DT::kFloat32, DT::kFloat16, DT::kFloat64};
constexpr OpKind kKinds[] = {OpKind::kRNN, OpKind::kGRU, OpKind::kLSTM};
constexpr RnnDirection kDirs[] = {RnnDirection::kForward, RnnDirection::kReverse, RnnDirection::kBidirectional};

class GpuRnn : public testing::Test {
 protected:
  void SetUp() override {
    rng().seed(
        static_cast<uint32_t>(std::hash<std::string>{}(testing::UnitTest::GetInstance()->current_test_info()->name())));
  }
};

TEST_F(GpuRnn, DefaultsEveryDirection) {
  KILN_SKIP_WITHOUT_GPU();
  for (OpKind k : kKinds)
    for (RnnDirection d : kDirs)
      for (DT dt : kDtypes) {
        Config c;
        c.kind = k;
        c.dir = d;
        check_all_modes(c, dt);
      }
}

// Every option on and off, over random shapes (odd sizes included), dtypes and directions.
TEST_F(GpuRnn, RandomConfigurations) {
  KILN_SKIP_WITHOUT_GPU();
  std::mt19937 g(7);
  auto coin = [&] { return std::uniform_int_distribution<int>(0, 1)(g) == 1; };
  auto pick = [&](std::vector<int64_t> v) { return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(g)]; };
  for (int iter = 0; iter < 108; ++iter) {
    Config c;
    c.kind = kKinds[iter % 3];
    c.dir = kDirs[(iter / 3) % 3];
    const DT dt = kDtypes[(iter / 9) % 3];
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
  for (OpKind k : kKinds)
    for (DT dt : kDtypes)
      for (bool lbr : {false, true}) {
        if (lbr && k != OpKind::kGRU) continue;
        Config c;
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

TEST_F(GpuRnn, ClipAndLinearBeforeReset) {
  KILN_SKIP_WITHOUT_GPU();
  for (OpKind k : kKinds)
    for (RnnDirection d : kDirs)
      for (bool lbr : {false, true}) {
        if (lbr && k != OpKind::kGRU) continue;
        Config c;
        c.kind = k;
        c.dir = d;
        c.clip = 0.25f;
        c.lbr = lbr;
        c.bias = c.h0 = c.c0 = c.peep = true;
        c.scale = 3;  // pre-activations well past the clip
        for (DT dt : kDtypes) check_all_modes(c, dt);
      }
}

TEST_F(GpuRnn, InputForgetAndPeepholes) {
  KILN_SKIP_WITHOUT_GPU();
  for (RnnDirection d : kDirs)
    for (bool forget : {false, true})
      for (bool peep : {false, true}) {
        Config c;
        c.kind = OpKind::kLSTM;
        c.dir = d;
        c.input_forget = forget;
        c.peep = peep;
        c.c0 = c.h0 = true;
        for (DT dt : kDtypes) check_all_modes(c, dt);
      }
}

TEST_F(GpuRnn, SequenceLensAndLayout) {
  KILN_SKIP_WITHOUT_GPU();
  for (OpKind k : kKinds)
    for (RnnDirection d : kDirs)
      for (bool layout1 : {false, true})
        for (bool lbr : {false, true}) {
          if (lbr && k != OpKind::kGRU) continue;
          Config c;
          c.kind = k;
          c.dir = d;
          c.S = 6, c.B = 5;
          c.lens = true;
          c.layout1 = layout1;
          c.lbr = lbr;
          c.h0 = c.c0 = c.bias = true;
          for (DT dt : kDtypes) check_all_modes(c, dt);
        }
}

// Non-default activations; alpha / beta are consumed in order by the functions that take them.
TEST_F(GpuRnn, Activations) {
  KILN_SKIP_WITHOUT_GPU();
  for (Act act : {Act::kRelu, Act::kSigmoid, Act::kAffine, Act::kLeakyRelu, Act::kThresholdedRelu, Act::kScaledTanh,
                  Act::kHardSigmoid, Act::kElu, Act::kSoftsign, Act::kSoftplus}) {
    Config c;
    c.kind = OpKind::kRNN;
    c.dir = RnnDirection::kBidirectional;
    c.acts = {act, Act::kTanh};
    c.alphas = {0.7f};
    c.betas = {-0.2f};
    c.h0 = c.bias = true;
    for (DT dt : kDtypes) check_all_modes(c, dt);
  }
  Config gru;  // defaults for a missing alpha / beta
  gru.kind = OpKind::kGRU;
  gru.dir = RnnDirection::kBidirectional;
  gru.acts = {Act::kHardSigmoid, Act::kLeakyRelu, Act::kSigmoid, Act::kElu};
  gru.bias = true;
  gru.scale = 2;
  for (bool lbr : {false, true}) {
    gru.lbr = lbr;
    for (DT dt : kDtypes) check_all_modes(gru, dt);
  }
  Config lstm;  // f, g, h per direction; alphas shared out in order across both directions
  lstm.kind = OpKind::kLSTM;
  lstm.dir = RnnDirection::kBidirectional;
  lstm.acts = {Act::kHardSigmoid, Act::kLeakyRelu, Act::kSoftsign, Act::kSigmoid, Act::kScaledTanh, Act::kAffine};
  lstm.alphas = {0.3f, 0.05f, 0.9f, 1.1f};
  lstm.betas = {0.4f, 1.2f, 0.1f};
  lstm.bias = lstm.h0 = lstm.c0 = lstm.peep = true;
  for (DT dt : kDtypes) check_all_modes(lstm, dt);
  Config one;  // one direction's list for a bidirectional op
  one.kind = OpKind::kGRU;
  one.dir = RnnDirection::kBidirectional;
  one.acts = {Act::kSigmoid, Act::kRelu};
  for (DT dt : kDtypes) check_all_modes(one, dt);
}

// Subsets of the outputs: Y only, Y and Y_h of an LSTM.
TEST_F(GpuRnn, FewerOutputs) {
  KILN_SKIP_WITHOUT_GPU();
  for (OpKind k : kKinds)
    for (size_t n_out = 1; n_out < all_outputs(k); ++n_out) {
      Config c;
      c.kind = k;
      c.dir = RnnDirection::kBidirectional;
      c.h0 = c.lens = true;
      c.n_out = n_out;
      for (DT dt : kDtypes) check_all_modes(c, dt);
    }
}

// Omitted optional outputs (views that do not exist, with null data), run directly: the harness
// allocates every output, so this builds the views itself.
std::vector<HostTensor> run_gpu_omitting(const Config& c, const Inputs& ins, const std::vector<OutputType>& types,
                                         const std::vector<bool>& absent_out) {
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
  const gpu::GpuKernelEntry* entry = gpu::gpu_kernel_entry(c.kind);
  if (entry->workspace) env = res.env(stream.get(), host_in, &state, entry->workspace(c.kind, attrs, iv, ov, env));
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
  for (OpKind k : kKinds) {
    Config c;
    c.kind = k;
    c.dir = RnnDirection::kBidirectional;
    c.h0 = c.c0 = c.bias = true;
    const size_t n = outputs_of(c);
    std::vector<std::vector<bool>> masks = {std::vector<bool>(n, false), {true, false, false}, {false, true, true}};
    if (k == OpKind::kLSTM) masks.push_back({true, true, false});
    for (DT dt : kDtypes)
      for (std::vector<bool> mask : masks) {
        mask.resize(n);
        if (std::all_of(mask.begin(), mask.end(), [](bool b) { return b; })) continue;
        const Inputs ins = make_inputs(c, dt);
        const std::vector<OutputType> types = infer(c, ins);
        const std::vector<HostTensor> want = run_cpu(c.kind, Attrs{attrs_of(c)}, ins, types);
        compare(c, dt, GpuMode::kDirect, run_gpu_omitting(c, ins, types, mask), want, mask);
      }
  }
}

TEST_F(GpuRnn, ZeroSizes) {
  KILN_SKIP_WITHOUT_GPU();
  for (OpKind k : kKinds)
    for (auto [S, B, I, H] :
         {std::tuple{0, 2, 3, 3}, std::tuple{3, 0, 3, 3}, std::tuple{3, 2, 0, 3}, std::tuple{3, 2, 3, 0}}) {
      Config c;
      c.kind = k;
      c.dir = RnnDirection::kBidirectional;
      c.S = S, c.B = B, c.I = I, c.H = H;
      c.h0 = c.bias = c.c0 = true;
      c.lens = B > 0;
      for (DT dt : kDtypes) check_all_modes(c, dt);
    }
}

// sequence_lens known only at run time: a value outside [0, seq] is a device error.
TEST_F(GpuRnn, BadSequenceLensIsADeviceError) {
  KILN_SKIP_WITHOUT_GPU();
  for (OpKind k : kKinds)
    for (int bad : {6, -1}) {
      Config c;
      c.kind = k;
      c.S = 5, c.B = 3;
      const Inputs ins = make_inputs(c, DT::kFloat32, bad);
      const std::vector<OutputType> types = infer(c, ins);
      for (GpuMode m : {GpuMode::kDirect, GpuMode::kCaptured}) {
        try {
          (void)run_gpu(c.kind, Attrs{attrs_of(c)}, ins, types, m);
          ADD_FAILURE() << op_name(k) << ": sequence length " << bad << " should fail";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("value the op cannot take"), std::string::npos) << e.what();
        }
      }
    }
}

TEST(GpuRnnErrors, UnsupportedDtypeThrows) {
  KILN_SKIP_WITHOUT_GPU();
  Config c;
  const Inputs ins = {rand_tensor(DT::kBFloat16, {3, 2, 4}, -1, 1), rand_tensor(DT::kBFloat16, {1, 3, 4}, -1, 1),
                      rand_tensor(DT::kBFloat16, {1, 3, 3}, -1, 1)};
  const std::vector<OutputType> types = {{DT::kBFloat16, {3, 1, 2, 3}}, {DT::kBFloat16, {1, 2, 3}}};
  EXPECT_THROW((void)run_gpu(OpKind::kRNN, Attrs{attrs_of(c)}, ins, types, GpuMode::kDirect), Error);
}

}  // namespace
}  // namespace kiln::gpu_test
