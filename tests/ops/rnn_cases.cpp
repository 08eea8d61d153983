// The rnn family's op cases (tests/ops/op_case.h): RNN, GRU and LSTM over the configurations of
// tests/cpu/ops_rnn_test.cpp: every direction, with and without bias / initial states /
// sequence_lens / peepholes, clip, linear_before_reset, input_forget, layout 1, non-default
// activations with alpha / beta, subsets of the outputs, zero sizes; float32, float16 and float64.
// The outputs carry error that accumulates over the time steps: rnn_tolerance.
#include <tuple>

#include "ops/rnn_case_util.h"

namespace kiln::optest {
namespace {

// A case of one op whose runs are the configurations `configs` returns.
OpCase rnn_case(OpKind k, const std::string& variant, std::function<std::vector<RnnConfig>()> configs) {
  return {std::string(op_name(k)) + "_" + variant, k, kRnnDtypes, [configs](DT dt) {
            OpRuns runs;
            for (const RnnConfig& c : configs()) runs.push_back(rnn_run(c, dt));
            return runs;
          }};
}

RnnConfig base(OpKind k, RnnDirection d = RnnDirection::kBidirectional) {
  RnnConfig c;
  c.kind = k;
  c.dir = d;
  return c;
}

void add_op_cases(std::vector<OpCase>& out, OpKind k) {
  out.push_back(rnn_case(k, "defaults", [k] {
    std::vector<RnnConfig> v;
    for (RnnDirection d : kRnnDirs) v.push_back(base(k, d));
    return v;
  }));
  out.push_back(rnn_case(k, "clip", [k] {
    std::vector<RnnConfig> v;
    for (RnnDirection d : kRnnDirs)
      for (bool lbr : {false, true}) {
        if (lbr && k != OpKind::kGRU) continue;
        RnnConfig c = base(k, d);
        c.clip = 0.25f;
        c.lbr = lbr;
        c.bias = c.h0 = c.c0 = c.peep = true;
        c.scale = 3;  // pre-activations well past the clip
        v.push_back(c);
      }
    return v;
  }));
  out.push_back(rnn_case(k, "sequence_lens_layout", [k] {
    std::vector<RnnConfig> v;
    for (RnnDirection d : kRnnDirs)
      for (bool layout1 : {false, true})
        for (bool lbr : {false, true}) {
          if (lbr && k != OpKind::kGRU) continue;
          RnnConfig c = base(k, d);
          c.S = 6, c.B = 5;
          c.lens = true;
          c.layout1 = layout1;
          c.lbr = lbr;
          c.h0 = c.c0 = c.bias = true;
          v.push_back(c);
        }
    return v;
  }));
  // Subsets of the outputs: Y only, Y and Y_h of an LSTM.
  out.push_back(rnn_case(k, "fewer_outputs", [k] {
    std::vector<RnnConfig> v;
    for (size_t n_out = 1; n_out < all_outputs(k); ++n_out) {
      RnnConfig c = base(k);
      c.h0 = c.lens = true;
      c.n_out = n_out;
      v.push_back(c);
    }
    return v;
  }));
  out.push_back(rnn_case(k, "zero_sizes", [k] {
    std::vector<RnnConfig> v;
    for (auto [S, B, I, H] :
         {std::tuple{0, 2, 3, 3}, std::tuple{3, 0, 3, 3}, std::tuple{3, 2, 0, 3}, std::tuple{3, 2, 3, 0}}) {
      RnnConfig c = base(k);
      c.S = S, c.B = B, c.I = I, c.H = H;
      c.h0 = c.bias = c.c0 = true;
      c.lens = B > 0;
      v.push_back(c);
    }
    return v;
  }));
}

// Non-default activations; alpha / beta are consumed in order by the functions that take them.
void add_activation_cases(std::vector<OpCase>& out) {
  out.push_back(rnn_case(OpKind::kRNN, "activations", [] {
    std::vector<RnnConfig> v;
    for (Act act : {Act::kRelu, Act::kSigmoid, Act::kAffine, Act::kLeakyRelu, Act::kThresholdedRelu, Act::kScaledTanh,
                    Act::kHardSigmoid, Act::kElu, Act::kSoftsign, Act::kSoftplus}) {
      RnnConfig c = base(OpKind::kRNN);
      c.acts = {act, Act::kTanh};
      c.alphas = {0.7f};
      c.betas = {-0.2f};
      c.h0 = c.bias = true;
      v.push_back(c);
    }
    return v;
  }));
  out.push_back(rnn_case(OpKind::kGRU, "activations", [] {
    std::vector<RnnConfig> v;
    RnnConfig gru = base(OpKind::kGRU);  // defaults for a missing alpha / beta
    gru.acts = {Act::kHardSigmoid, Act::kLeakyRelu, Act::kSigmoid, Act::kElu};
    gru.bias = true;
    gru.scale = 2;
    for (bool lbr : {false, true}) {
      gru.lbr = lbr;
      v.push_back(gru);
    }
    RnnConfig one = base(OpKind::kGRU);  // one direction's list for a bidirectional op
    one.acts = {Act::kSigmoid, Act::kRelu};
    v.push_back(one);
    return v;
  }));
  out.push_back(rnn_case(OpKind::kLSTM, "activations", [] {
    RnnConfig lstm = base(OpKind::kLSTM);  // f, g, h per direction; alphas shared out in order across both
    lstm.acts = {Act::kHardSigmoid, Act::kLeakyRelu, Act::kSoftsign, Act::kSigmoid, Act::kScaledTanh, Act::kAffine};
    lstm.alphas = {0.3f, 0.05f, 0.9f, 1.1f};
    lstm.betas = {0.4f, 1.2f, 0.1f};
    lstm.bias = lstm.h0 = lstm.c0 = lstm.peep = true;
    return std::vector<RnnConfig>{lstm};
  }));
  out.push_back(rnn_case(OpKind::kLSTM, "input_forget_peepholes", [] {
    std::vector<RnnConfig> v;
    for (RnnDirection d : kRnnDirs)
      for (bool forget : {false, true})
        for (bool peep : {false, true}) {
          RnnConfig c = base(OpKind::kLSTM, d);
          c.input_forget = forget;
          c.peep = peep;
          c.c0 = c.h0 = true;
          v.push_back(c);
        }
    return v;
  }));
}

}  // namespace

std::vector<OpCase> rnn_cases() {
  std::vector<OpCase> out;
  for (OpKind k : kRnnKinds) add_op_cases(out, k);
  add_activation_cases(out);
  return out;
}

}  // namespace kiln::optest
