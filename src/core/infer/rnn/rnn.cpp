// Shape inference of the recurrent ops RNN, GRU and LSTM (ONNX opsets 7 to 21).
//   X [seq, batch, input] (layout 1: [batch, seq, input]), W [dirs, G*H, input], R [dirs, G*H, H],
//   B [dirs, 2*G*H], sequence_lens [batch] int32, initial_h / initial_c [dirs, batch, H]
//   (layout 1: [batch, dirs, H]), P [dirs, 3*H] (LSTM);
//   Y [seq, dirs, batch, H] (layout 1: [batch, seq, dirs, H]), Y_h / Y_c shaped like initial_h.
// G is the number of gate blocks (1, 3, 4). hidden_size 0 (absent) is taken from R.
#include "core/infer/rnn.h"

#include <cmath>
#include <string>

#include "core/shape_infer.h"

namespace kiln {

namespace {

std::string shp(std::span<const int64_t> s) { return shape_string({s.begin(), s.end()}); }

bool takes_alpha(RnnActivation a) {
  switch (a) {
    case RnnActivation::kAffine:
    case RnnActivation::kLeakyRelu:
    case RnnActivation::kThresholdedRelu:
    case RnnActivation::kScaledTanh:
    case RnnActivation::kHardSigmoid:
    case RnnActivation::kElu: return true;
    case RnnActivation::kRelu:
    case RnnActivation::kTanh:
    case RnnActivation::kSigmoid:
    case RnnActivation::kSoftsign:
    case RnnActivation::kSoftplus: return false;
  }
  return false;
}
bool takes_beta(RnnActivation a) {
  return a == RnnActivation::kAffine || a == RnnActivation::kScaledTanh || a == RnnActivation::kHardSigmoid;
}
float default_alpha(RnnActivation a) {
  if (a == RnnActivation::kLeakyRelu) return 0.01f;
  if (a == RnnActivation::kHardSigmoid) return 0.2f;
  if (a == RnnActivation::kElu) return 1.0f;
  return 0.0f;
}
float default_beta(RnnActivation a) { return a == RnnActivation::kHardSigmoid ? 0.5f : 0.0f; }

void expect_shape(const char* op, const char* what, std::span<const int64_t> got, std::vector<int64_t> want) {
  if (!std::equal(got.begin(), got.end(), want.begin(), want.end()))
    throw Error(std::string(op) + ": " + what + " must have shape " + shape_string(want) + ", got " + shp(got));
}

std::vector<OutputType> infer_rnn(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t n_out) {
  const auto& a = attrs_as<RnnAttrs>(attrs);
  const char* op = op_name(kind).data();
  const int64_t gates = rnn_gate_blocks(kind);
  auto has = [&](size_t i) { return in.size() > i && in[i].exists; };

  if (static_cast<size_t>(a.direction) >= kEnumNames<RnnDirection>.size())
    throw Error(std::string(op) + ": invalid direction");
  const int64_t dirs = a.direction == RnnDirection::kBidirectional ? 2 : 1;
  if (a.layout != 0 && a.layout != 1)
    throw Error(std::string(op) + ": layout must be 0 or 1, got " + std::to_string(a.layout));
  if (a.hidden_size < 0) throw Error(std::string(op) + ": hidden_size must not be negative");
  if (!(a.clip >= 0.0f)) throw Error(std::string(op) + ": clip must be a non-negative number (0: no clipping)");
  if (a.input_forget != 0 && (kind != OpKind::kLSTM || a.input_forget != 1))
    throw Error(std::string(op) + ": input_forget must be 0 or 1 and exists only for LSTM");
  if (a.linear_before_reset != 0 && (kind != OpKind::kGRU || a.linear_before_reset != 1))
    throw Error(std::string(op) + ": linear_before_reset must be 0 or 1 and exists only for GRU");
  (void)rnn_gate_functions(kind, a);  // validates the activation list

  const TensorView &x = in[0], &w = in[1], &r = in[2];
  const DataType t = x.dtype;
  if (t != DataType::kFloat32 && t != DataType::kFloat64 && t != DataType::kFloat16)
    throw Error(std::string(op) + " supports float32, float64 and float16, got " + std::string(dtype_name(t)));
  const char* names[] = {"X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"};
  for (size_t i = 0; i < in.size(); ++i) {
    if (i == 4 || !in[i].exists) continue;
    if (in[i].dtype != t)
      throw Error(std::string(op) + ": " + names[i] + " must have X's element type " + std::string(dtype_name(t)) +
                  ", got " + std::string(dtype_name(in[i].dtype)));
  }
  if (x.rank() != 3) throw Error(std::string(op) + ": X must be 3-D, got " + shp(x.shape));
  const int64_t seq = a.layout ? x.shape[1] : x.shape[0];
  const int64_t batch = a.layout ? x.shape[0] : x.shape[1];
  const int64_t input = x.shape[2];
  if (w.rank() != 3 || w.shape[0] != dirs || w.shape[2] != input || w.shape[1] % gates != 0)
    throw Error(std::string(op) + ": W must be [" + std::to_string(dirs) + ", " + std::to_string(gates) +
                "*hidden_size, " + std::to_string(input) + "], got " + shp(w.shape));
  const int64_t hidden = w.shape[1] / gates;
  if (a.hidden_size != 0 && a.hidden_size != hidden)
    throw Error(std::string(op) + ": hidden_size " + std::to_string(a.hidden_size) + " does not match W " +
                shp(w.shape));
  expect_shape(op, "R", r.shape, {dirs, gates * hidden, hidden});
  if (has(3)) expect_shape(op, "B", in[3].shape, {dirs, 2 * gates * hidden});
  if (has(4)) {
    if (in[4].dtype != DataType::kInt32)
      throw Error(std::string(op) + ": sequence_lens must be int32, got " + std::string(dtype_name(in[4].dtype)));
    expect_shape(op, "sequence_lens", in[4].shape, {batch});
    if (in[4].data) {  // a constant: check the values now too
      const auto* p = in[4].as<const int32_t>();
      for (int64_t b = 0; b < batch; ++b)
        if (p[b] < 0 || p[b] > seq)
          throw Error(std::string(op) + ": sequence_lens[" + std::to_string(b) + "] = " + std::to_string(p[b]) +
                      " is outside [0, " + std::to_string(seq) + "]");
    }
  }
  std::vector<int64_t> state =
      a.layout ? std::vector<int64_t>{batch, dirs, hidden} : std::vector<int64_t>{dirs, batch, hidden};
  if (has(5)) expect_shape(op, "initial_h", in[5].shape, state);
  if (kind == OpKind::kLSTM) {
    if (has(6)) expect_shape(op, "initial_c", in[6].shape, state);
    if (has(7)) expect_shape(op, "P", in[7].shape, {dirs, 3 * hidden});
  }

  std::vector<OutputType> out;
  if (n_out > 0)
    out.push_back(OutputType{
        t, a.layout ? std::vector<int64_t>{batch, seq, dirs, hidden} : std::vector<int64_t>{seq, dirs, batch, hidden}});
  for (size_t i = 1; i < n_out; ++i) out.push_back(OutputType{t, state});
  return out;
}

constexpr InferEntry kEntries[] = {
    {OpKind::kGRU, infer_rnn},
    {OpKind::kLSTM, infer_rnn},
    {OpKind::kRNN, infer_rnn},
};

}  // namespace

RnnDims rnn_dims(OpKind kind, const RnnAttrs& a, std::span<const TensorView> in) {
  const TensorView& x = in[0];
  RnnDims dm{};
  dm.batch_first = a.layout == 1;
  dm.seq = dm.batch_first ? x.shape[1] : x.shape[0];
  dm.batch = dm.batch_first ? x.shape[0] : x.shape[1];
  dm.input = x.shape[2];
  dm.hidden = in[2].shape[2];
  dm.dirs = in[1].shape[0];
  dm.gates = rnn_gate_blocks(kind);
  return dm;
}

int rnn_gate_blocks(OpKind kind) { return kind == OpKind::kLSTM ? 4 : kind == OpKind::kGRU ? 3 : 1; }
int rnn_activation_slots(OpKind kind) { return kind == OpKind::kLSTM ? 3 : kind == OpKind::kGRU ? 2 : 1; }

std::vector<RnnGateFn> rnn_gate_functions(OpKind kind, const RnnAttrs& a) {
  const char* op = op_name(kind).data();
  const size_t slots = static_cast<size_t>(rnn_activation_slots(kind));
  const size_t dirs = a.direction == RnnDirection::kBidirectional ? 2 : 1;
  std::vector<RnnActivation> acts = a.activations;
  if (acts.empty()) {
    if (kind == OpKind::kRNN)
      acts = {RnnActivation::kTanh};
    else if (kind == OpKind::kGRU)
      acts = {RnnActivation::kSigmoid, RnnActivation::kTanh};
    else
      acts = {RnnActivation::kSigmoid, RnnActivation::kTanh, RnnActivation::kTanh};
  }
  if (acts.size() == slots && dirs == 2) acts.insert(acts.end(), acts.begin(), acts.end());
  if (acts.size() != slots * dirs)
    throw Error(std::string(op) + ": activations must list " + std::to_string(slots * dirs) + " functions (" +
                std::to_string(slots) + " per direction), got " + std::to_string(a.activations.size()));
  std::vector<RnnGateFn> fns;
  size_t ia = 0, ib = 0;
  for (RnnActivation act : acts) {
    if (static_cast<size_t>(act) >= kEnumNames<RnnActivation>.size())
      throw Error(std::string(op) + ": invalid activation");
    RnnGateFn f{act, default_alpha(act), default_beta(act)};
    if (takes_alpha(act) && ia < a.activation_alpha.size()) f.alpha = a.activation_alpha[ia++];
    if (takes_beta(act) && ib < a.activation_beta.size()) f.beta = a.activation_beta[ib++];
    fns.push_back(f);
  }
  return fns;
}

std::span<const InferEntry> rnn_infer_entries() { return kEntries; }

}  // namespace kiln
