// RNN, GRU and LSTM configurations (tests/ops/rnn_cases.cpp, tests/gpu/rnn_gpu_test.cpp): the
// attributes and inputs of one, and the tolerance of another backend against the reference.
#pragma once

#include "ops/op_case.h"

namespace kiln::optest {

using Act = RnnActivation;

struct RnnConfig {
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

inline RnnAttrs attrs_of(const RnnConfig& c) {
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

inline size_t all_outputs(OpKind k) { return k == OpKind::kLSTM ? 3 : 2; }
inline size_t outputs_of(const RnnConfig& c) { return c.n_out ? c.n_out : all_outputs(c.kind); }

// X, W, R, B, sequence_lens, initial_h (, initial_c, P); trailing omitted inputs dropped.
// bad_lens: one sequence length outside [0, S].
inline Inputs make_inputs(const RnnConfig& c, DT dt, int bad_lens = 0) {
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
inline Tolerance rnn_tolerance(DT dt) {
  if (dt == DT::kFloat16) return {1e-2, 1e-2};
  if (dt == DT::kFloat64) return {1e-9, 1e-9};
  return {1e-4, 1e-4};
}

inline const std::vector<DT> kRnnDtypes = {DT::kFloat32, DT::kFloat16, DT::kFloat64};
inline constexpr OpKind kRnnKinds[] = {OpKind::kRNN, OpKind::kGRU, OpKind::kLSTM};
inline constexpr RnnDirection kRnnDirs[] = {RnnDirection::kForward, RnnDirection::kReverse,
                                            RnnDirection::kBidirectional};

// One run of a configuration in type dt.
inline OpRun rnn_run(const RnnConfig& c, DT dt) {
  return OpRun{Attrs{attrs_of(c)}, make_inputs(c, dt), outputs_of(c),
               [](const HostTensor& want) { return rnn_tolerance(want.dtype); }};
}

}  // namespace kiln::optest
