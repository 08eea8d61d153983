// rnn family (RNN, GRU, LSTM): shape inference + CPU kernels against a plain float64 reference
// written here from the ONNX equations, one batch entry and one step at a time, on random inputs:
// every direction, with and without bias / initial states / sequence_lens / peepholes, clip,
// linear_before_reset, input_forget, layout 1, non-default activations, float32 / float64 /
// float16, with and without a thread pool. Outputs are poisoned (NaN) before the kernel runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/attrs_codec.h"
#include "core/shape_infer.h"
#include "op_test_util.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln {
namespace {

using namespace kiln::test;  // Shape, Tensor, make, numel
using Act = RnnActivation;

// Floats uniform in [lo, hi], rounded to the dtype (values() then gives what the kernel sees).
Tensor random_tensor(DataType dt, Shape shape, std::mt19937& rng, double lo = -1, double hi = 1) {
  std::vector<double> v(static_cast<size_t>(numel(shape)));
  std::uniform_real_distribution<double> u(lo, hi);
  for (double& x : v) x = u(rng);
  return make(dt, shape, v);
}

// Infers, allocates NaN-poisoned outputs, runs the kernel. absent_out[k]: output k is an omitted
// optional output (its view does not exist).
std::vector<Tensor> run(OpKind kind, const Attrs& attrs, const std::vector<const Tensor*>& in, size_t n_out,
                        cpu::ThreadPool* pool = nullptr, std::vector<bool> absent_out = {}) {
  std::vector<TensorView> iv;
  for (const Tensor* t : in) iv.push_back(t ? t->view() : absent_tensor());
  std::vector<OutputType> types = infer_shapes(kind, attrs, iv, n_out);
  std::vector<Tensor> out;
  for (size_t k = 0; k < types.size(); ++k) {
    out.push_back(make(types[k].dtype, types[k].shape, std::vector<double>(numel(types[k].shape), NAN)));
    if (k < absent_out.size() && absent_out[k]) out.back().exists = false;
  }
  std::vector<TensorView> ov;
  for (Tensor& t : out) ov.push_back(t.view());
  cpu::KernelEnv env{pool};
  cpu::CpuKernel k = cpu::cpu_kernel(kind);
  EXPECT_NE(k, nullptr);
  k(kind, attrs, iv, ov, env);
  return out;
}

void infer(OpKind kind, const Attrs& attrs, const std::vector<const Tensor*>& in, size_t n_out) {
  std::vector<TensorView> iv;
  for (const Tensor* t : in) iv.push_back(t ? t->view() : absent_tensor());
  infer_shapes(kind, attrs, iv, n_out);
}

double tolerance(DataType dt) {
  if (dt == DataType::kFloat64) return 1e-10;
  if (dt == DataType::kFloat32) return 5e-5;
  return 4e-3;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i]));
    ASSERT_TRUE(ok) << what << ": element " << i << " got " << got[i] << " want " << want[i];
  }
}

// ---- the reference ---------------------------------------------------------------------------

struct Fn {
  Act act;
  double alpha = 0, beta = 0;
};

double apply(const Fn& f, double x) {
  switch (f.act) {
    case Act::kRelu: return std::max(0.0, x);
    case Act::kTanh: return std::tanh(x);
    case Act::kSigmoid: return 1 / (1 + std::exp(-x));
    case Act::kAffine: return f.alpha * x + f.beta;
    case Act::kLeakyRelu: return x >= 0 ? x : f.alpha * x;
    case Act::kThresholdedRelu: return x >= f.alpha ? x : 0;
    case Act::kScaledTanh: return f.alpha * std::tanh(f.beta * x);
    case Act::kHardSigmoid: return std::min(1.0, std::max(0.0, f.alpha * x + f.beta));
    case Act::kElu: return x >= 0 ? x : f.alpha * (std::exp(x) - 1);
    case Act::kSoftsign: return x / (1 + std::abs(x));
    case Act::kSoftplus: return std::log(1 + std::exp(x));
  }
  return NAN;
}

// Inputs in layout 0, as doubles; empty vectors for omitted inputs.
struct RefIn {
  int64_t S, B, I, H, D;
  std::vector<double> x, w, r, bias, h0, c0, p;
  std::vector<int64_t> lens;
};
struct RefOut {
  std::vector<double> y, yh, yc;  // [S, D, B, H], [D, B, H], [D, B, H]
};

// fns: per direction, the op's slots (f[, g[, h]]).
RefOut reference(OpKind kind, const RnnAttrs& a, const RefIn& in, const std::vector<std::vector<Fn>>& fns) {
  const int64_t S = in.S, B = in.B, I = in.I, H = in.H, D = in.D;
  const int64_t G = kind == OpKind::kLSTM ? 4 : kind == OpKind::kGRU ? 3 : 1;
  RefOut o;
  o.y.assign(static_cast<size_t>(S * D * B * H), 0.0);
  o.yh.assign(static_cast<size_t>(D * B * H), 0.0);
  o.yc = o.yh;
  auto cl = [&](double v) { return a.clip > 0 ? std::min<double>(a.clip, std::max<double>(-a.clip, v)) : v; };
  for (int64_t d = 0; d < D; ++d) {
    const auto& f = fns[static_cast<size_t>(d)];
    auto W = [&](int64_t row, int64_t k) { return in.w[static_cast<size_t>((d * G * H + row) * I + k)]; };
    auto R = [&](int64_t row, int64_t k) { return in.r[static_cast<size_t>((d * G * H + row) * H + k)]; };
    auto Wb = [&](int64_t row) { return in.bias.empty() ? 0.0 : in.bias[static_cast<size_t>(d * 2 * G * H + row)]; };
    auto Rb = [&](int64_t row) {
      return in.bias.empty() ? 0.0 : in.bias[static_cast<size_t>(d * 2 * G * H + G * H + row)];
    };
    auto P = [&](int64_t row) { return in.p.empty() ? 0.0 : in.p[static_cast<size_t>(d * 3 * H + row)]; };
    const bool rev = a.direction == RnnDirection::kReverse || d == 1;
    for (int64_t b = 0; b < B; ++b) {
      std::vector<double> h(static_cast<size_t>(H), 0.0), c(h);
      for (int64_t j = 0; j < H; ++j) {
        if (!in.h0.empty()) h[j] = in.h0[static_cast<size_t>((d * B + b) * H + j)];
        if (!in.c0.empty()) c[j] = in.c0[static_cast<size_t>((d * B + b) * H + j)];
      }
      const int64_t len = in.lens.empty() ? S : in.lens[static_cast<size_t>(b)];
      for (int64_t s = 0; s < len; ++s) {
        const int64_t t = rev ? len - 1 - s : s;
        const double* xt = in.x.data() + (t * B + b) * I;
        // xw(row) = W[row] . x_t ;  hr(row, v) = R[row] . v
        auto xw = [&](int64_t row) {
          double acc = 0;
          for (int64_t k = 0; k < I; ++k) acc += W(row, k) * xt[k];
          return acc;
        };
        auto hr = [&](int64_t row, const std::vector<double>& v) {
          double acc = 0;
          for (int64_t k = 0; k < H; ++k) acc += R(row, k) * v[k];
          return acc;
        };
        std::vector<double> nh(static_cast<size_t>(H));
        if (kind == OpKind::kRNN) {
          for (int64_t j = 0; j < H; ++j) nh[j] = apply(f[0], cl(xw(j) + hr(j, h) + Wb(j) + Rb(j)));
        } else if (kind == OpKind::kGRU) {
          std::vector<double> z(nh), r(nh), rh(nh);
          for (int64_t j = 0; j < H; ++j) {
            z[j] = apply(f[0], cl(xw(j) + hr(j, h) + Wb(j) + Rb(j)));
            r[j] = apply(f[0], cl(xw(H + j) + hr(H + j, h) + Wb(H + j) + Rb(H + j)));
            rh[j] = r[j] * h[j];
          }
          for (int64_t j = 0; j < H; ++j) {
            const int64_t row = 2 * H + j;
            double pre = a.linear_before_reset ? xw(row) + r[j] * (hr(row, h) + Rb(row)) + Wb(row)
                                               : xw(row) + hr(row, rh) + Rb(row) + Wb(row);
            double n = apply(f[1], cl(pre));
            nh[j] = (1 - z[j]) * n + z[j] * h[j];
          }
        } else {
          std::vector<double> nc(nh);
          for (int64_t j = 0; j < H; ++j) {
            auto pre = [&](int64_t blk) {
              return xw(blk * H + j) + hr(blk * H + j, h) + Wb(blk * H + j) + Rb(blk * H + j);
            };
            double ig = apply(f[0], cl(pre(0) + P(j) * c[j]));
            double fg = a.input_forget ? 1 - ig : apply(f[0], cl(pre(2) + P(2 * H + j) * c[j]));
            double cg = apply(f[1], cl(pre(3)));
            nc[j] = fg * c[j] + ig * cg;
            double og = apply(f[0], cl(pre(1) + P(H + j) * nc[j]));
            nh[j] = og * apply(f[2], nc[j]);
          }
          c = nc;
        }
        h = nh;
        for (int64_t j = 0; j < H; ++j) o.y[static_cast<size_t>(((t * D + d) * B + b) * H + j)] = h[j];
      }
      if (len > 0)
        for (int64_t j = 0; j < H; ++j) {
          o.yh[static_cast<size_t>((d * B + b) * H + j)] = h[j];
          o.yc[static_cast<size_t>((d * B + b) * H + j)] = c[j];
        }
    }
  }
  return o;
}

// Swaps the first two axes of a [n0, n1, rest] array.
std::vector<double> swap01(const std::vector<double>& v, int64_t n0, int64_t n1) {
  std::vector<double> o(v.size());
  const int64_t rest = n0 * n1 == 0 ? 0 : static_cast<int64_t>(v.size()) / (n0 * n1);
  for (int64_t i = 0; i < n0; ++i)
    for (int64_t j = 0; j < n1; ++j)
      for (int64_t k = 0; k < rest; ++k)
        o[static_cast<size_t>((j * n0 + i) * rest + k)] = v[static_cast<size_t>((i * n1 + j) * rest + k)];
  return o;
}
// [S, D, B, H] -> [B, S, D, H]
std::vector<double> y_to_batch_first(const std::vector<double>& v, int64_t S, int64_t D, int64_t B, int64_t H) {
  std::vector<double> o(v.size());
  for (int64_t t = 0; t < S; ++t)
    for (int64_t d = 0; d < D; ++d)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < H; ++j)
          o[static_cast<size_t>(((b * S + t) * D + d) * H + j)] = v[static_cast<size_t>(((t * D + d) * B + b) * H + j)];
  return o;
}

// ---- one configuration -------------------------------------------------------------------------

struct Config {
  OpKind kind = OpKind::kRNN;
  DataType dt = DataType::kFloat32;
  RnnDirection dir = RnnDirection::kForward;
  int64_t S = 3, B = 2, I = 4, H = 3;
  bool bias = false, h0 = false, c0 = false, peep = false, lens = false;
  bool layout1 = false, lbr = false, input_forget = false, pool = false, set_hidden = true;
  float clip = 0;
  std::vector<Act> acts;  // empty: defaults
  std::vector<float> alphas, betas;
  std::vector<std::vector<Fn>> ref_fns;  // the reference's view of acts (needed when acts is set)
  size_t n_out = 0;                      // 0: all the op has
  std::vector<bool> absent_out;
  double scale = 1;  // range of the random weights
};

std::string describe(const Config& c) {
  return std::string(op_name(c.kind)) + " " + std::string(dtype_name(c.dt)) +
         " dir=" + std::string(kEnumNames<RnnDirection>[static_cast<size_t>(c.dir)]) + " S=" + std::to_string(c.S) +
         " B=" + std::to_string(c.B) + " I=" + std::to_string(c.I) + " H=" + std::to_string(c.H) +
         (c.bias ? " bias" : "") + (c.h0 ? " h0" : "") + (c.c0 ? " c0" : "") + (c.peep ? " P" : "") +
         (c.lens ? " lens" : "") + (c.layout1 ? " layout1" : "") + (c.lbr ? " lbr" : "") +
         (c.input_forget ? " input_forget" : "") + (c.clip > 0 ? " clip=" + std::to_string(c.clip) : "") +
         (c.acts.empty() ? "" : " custom-acts") + (c.pool ? " pool" : "");
}

void check(const Config& c, std::mt19937& rng) {
  SCOPED_TRACE(describe(c));
  const int64_t D = c.dir == RnnDirection::kBidirectional ? 2 : 1;
  const int64_t G = c.kind == OpKind::kLSTM ? 4 : c.kind == OpKind::kGRU ? 3 : 1;
  const bool lstm = c.kind == OpKind::kLSTM;
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

  RefIn ri{c.S, c.B, c.I, c.H, D, {}, {}, {}, {}, {}, {}, {}, {}};
  Tensor x = random_tensor(c.dt, {c.S, c.B, c.I}, rng, -2, 2);
  ri.x = x.values();
  if (c.layout1) x = make(c.dt, {c.B, c.S, c.I}, swap01(ri.x, c.S, c.B));
  Tensor w = random_tensor(c.dt, {D, G * c.H, c.I}, rng, -c.scale, c.scale);
  Tensor r = random_tensor(c.dt, {D, G * c.H, c.H}, rng, -c.scale, c.scale);
  ri.w = w.values();
  ri.r = r.values();
  Tensor bias, lens, h0, c0, p;
  bias.exists = lens.exists = h0.exists = c0.exists = p.exists = false;
  if (c.bias) {
    bias = random_tensor(c.dt, {D, 2 * G * c.H}, rng);
    ri.bias = bias.values();
  }
  if (c.lens) {
    std::vector<double> v(static_cast<size_t>(c.B));
    std::uniform_int_distribution<int64_t> u(0, c.S);
    for (double& l : v) l = static_cast<double>(u(rng));
    if (c.B > 0) v[0] = static_cast<double>(c.S);  // keep one full-length entry
    if (c.B > 2) v[2] = 0;                         // and one empty one
    lens = make(DataType::kInt32, {c.B}, v);
    for (double l : v) ri.lens.push_back(static_cast<int64_t>(l));
  }
  auto state = [&](std::vector<double>& ref) {
    Tensor t = random_tensor(c.dt, {D, c.B, c.H}, rng);
    ref = t.values();
    if (c.layout1) t = make(c.dt, {c.B, D, c.H}, swap01(ref, D, c.B));
    return t;
  };
  if (c.h0) h0 = state(ri.h0);
  if (lstm && c.c0) c0 = state(ri.c0);
  if (lstm && c.peep) {
    p = random_tensor(c.dt, {D, 3 * c.H}, rng);
    ri.p = p.values();
  }

  std::vector<const Tensor*> in = {&x, &w, &r, &bias, &lens, &h0};
  if (lstm) in.insert(in.end(), {&c0, &p});
  while (!in.empty() && !in.back()->exists) in.pop_back();
  const size_t n_out = c.n_out ? c.n_out : (lstm ? 3 : 2);

  std::vector<std::vector<Fn>> fns = c.ref_fns;
  if (fns.empty()) {
    std::vector<Fn> one;
    if (c.kind == OpKind::kRNN)
      one = {{Act::kTanh}};
    else if (c.kind == OpKind::kGRU)
      one = {{Act::kSigmoid}, {Act::kTanh}};
    else
      one = {{Act::kSigmoid}, {Act::kTanh}, {Act::kTanh}};
    fns.assign(static_cast<size_t>(D), one);
  }
  RefOut want = reference(c.kind, a, ri, fns);
  if (c.layout1) {
    want.y = y_to_batch_first(want.y, c.S, D, c.B, c.H);
    want.yh = swap01(want.yh, D, c.B);
    want.yc = swap01(want.yc, D, c.B);
  }

  cpu::ThreadPool pool(3);
  std::vector<Tensor> got = run(c.kind, Attrs{a}, in, n_out, c.pool ? &pool : nullptr, c.absent_out);
  ASSERT_EQ(got.size(), n_out);
  const Shape y_shape = c.layout1 ? Shape{c.B, c.S, D, c.H} : Shape{c.S, D, c.B, c.H};
  const Shape st_shape = c.layout1 ? Shape{c.B, D, c.H} : Shape{D, c.B, c.H};
  const double tol = tolerance(c.dt);
  for (size_t k = 0; k < n_out; ++k) {
    EXPECT_EQ(got[k].dtype, c.dt);
    EXPECT_EQ(got[k].shape, k == 0 ? y_shape : st_shape);
    if (!got[k].exists) continue;
    const std::vector<double>& ref = k == 0 ? want.y : k == 1 ? want.yh : want.yc;
    expect_near(got[k].values(), ref, tol, k == 0 ? "Y" : k == 1 ? "Y_h" : "Y_c");
  }
}

constexpr OpKind kKinds[] = {OpKind::kRNN, OpKind::kGRU, OpKind::kLSTM};
constexpr RnnDirection kDirs[] = {RnnDirection::kForward, RnnDirection::kReverse, RnnDirection::kBidirectional};

// ---- tests -------------------------------------------------------------------------------------

TEST(Rnn, DefaultsEveryDirection) {
  std::mt19937 rng(1);
  for (OpKind k : kKinds)
    for (RnnDirection d : kDirs)
      for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16}) {
        Config c;
        c.kind = k;
        c.dir = d;
        c.dt = dt;
        check(c, rng);
      }
}

// Every option on and off, over random shapes (odd sizes included), dtypes and directions.
TEST(Rnn, RandomConfigurations) {
  std::mt19937 rng(7);
  auto coin = [&] { return std::uniform_int_distribution<int>(0, 1)(rng) == 1; };
  auto pick = [&](std::vector<int64_t> v) { return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)]; };
  const DataType dts[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16};
  for (int iter = 0; iter < 240; ++iter) {
    Config c;
    c.kind = kKinds[iter % 3];
    c.dir = kDirs[(iter / 3) % 3];
    c.dt = dts[(iter / 9) % 3];
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
    c.pool = iter % 3 == 1;
    c.set_hidden = iter % 7 != 0;
    c.scale = 1.5;
    check(c, rng);
    if (HasFatalFailure()) return;
  }
}

// A larger case through the pool (sgemm's blocked paths and the parallel row loops).
TEST(Rnn, LargerThreaded) {
  std::mt19937 rng(3);
  for (OpKind k : kKinds)
    for (DataType dt : {DataType::kFloat32, DataType::kFloat64}) {
      Config c;
      c.kind = k;
      c.dt = dt;
      c.dir = RnnDirection::kBidirectional;
      c.S = 9, c.B = 37, c.I = 45, c.H = 40;
      c.bias = c.h0 = c.c0 = c.peep = c.lens = true;
      c.lbr = k == OpKind::kGRU;
      c.pool = true;
      c.scale = 0.3;
      check(c, rng);
    }
}

TEST(Rnn, ClipAndLinearBeforeReset) {
  std::mt19937 rng(11);
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
        check(c, rng);
      }
}

TEST(Rnn, InputForgetAndPeepholes) {
  std::mt19937 rng(12);
  for (RnnDirection d : kDirs)
    for (bool forget : {false, true})
      for (bool peep : {false, true}) {
        Config c;
        c.kind = OpKind::kLSTM;
        c.dir = d;
        c.input_forget = forget;
        c.peep = peep;
        c.c0 = c.h0 = true;
        check(c, rng);
      }
}

TEST(Rnn, SequenceLensAndLayout) {
  std::mt19937 rng(13);
  for (OpKind k : kKinds)
    for (RnnDirection d : kDirs)
      for (bool layout1 : {false, true}) {
        Config c;
        c.kind = k;
        c.dir = d;
        c.S = 6, c.B = 5;
        c.lens = true;
        c.layout1 = layout1;
        c.h0 = c.c0 = c.bias = true;
        check(c, rng);
      }
}

// Non-default activations; alpha / beta are consumed in order by the functions that take them.
TEST(Rnn, Activations) {
  std::mt19937 rng(14);
  // RNN, one function per direction; bidirectional with different functions per direction.
  const std::vector<std::pair<Act, Fn>> singles = {
      {Act::kRelu, {Act::kRelu}},
      {Act::kSigmoid, {Act::kSigmoid}},
      {Act::kAffine, {Act::kAffine, 0.7, -0.2}},
      {Act::kLeakyRelu, {Act::kLeakyRelu, 0.7}},
      {Act::kThresholdedRelu, {Act::kThresholdedRelu, 0.7}},
      {Act::kScaledTanh, {Act::kScaledTanh, 0.7, -0.2}},
      {Act::kHardSigmoid, {Act::kHardSigmoid, 0.7, -0.2}},
      {Act::kElu, {Act::kElu, 0.7}},
      {Act::kSoftsign, {Act::kSoftsign}},
      {Act::kSoftplus, {Act::kSoftplus}},
  };
  for (const auto& [act, fn] : singles) {
    Config c;
    c.kind = OpKind::kRNN;
    c.dir = RnnDirection::kBidirectional;
    c.acts = {act, Act::kTanh};
    c.alphas = {0.7f};
    c.betas = {-0.2f};
    c.ref_fns = {{fn}, {{Act::kTanh}}};
    c.h0 = c.bias = true;
    check(c, rng);
  }
  // Defaults for a missing alpha / beta: LeakyRelu 0.01, HardSigmoid 0.2 / 0.5, Elu 1.
  {
    Config c;
    c.kind = OpKind::kGRU;
    c.dir = RnnDirection::kBidirectional;
    c.acts = {Act::kHardSigmoid, Act::kLeakyRelu, Act::kSigmoid, Act::kElu};
    c.ref_fns = {{{Act::kHardSigmoid, 0.2, 0.5}, {Act::kLeakyRelu, 0.01}}, {{Act::kSigmoid}, {Act::kElu, 1.0}}};
    c.bias = true;
    c.scale = 2;
    check(c, rng);
  }
  // LSTM f, g, h per direction; alphas shared out in order across both directions.
  {
    Config c;
    c.kind = OpKind::kLSTM;
    c.dir = RnnDirection::kBidirectional;
    c.acts = {Act::kHardSigmoid, Act::kLeakyRelu, Act::kSoftsign, Act::kSigmoid, Act::kScaledTanh, Act::kAffine};
    c.alphas = {0.3f, 0.05f, 0.9f, 1.1f};
    c.betas = {0.4f, 1.2f, 0.1f};
    c.ref_fns = {{{Act::kHardSigmoid, 0.3, 0.4}, {Act::kLeakyRelu, 0.05}, {Act::kSoftsign}},
                 {{Act::kSigmoid}, {Act::kScaledTanh, 0.9, 1.2}, {Act::kAffine, 1.1, 0.1}}};
    c.bias = c.h0 = c.c0 = c.peep = true;
    check(c, rng);
  }
  // One direction's list given to a bidirectional op applies to both.
  {
    Config c;
    c.kind = OpKind::kGRU;
    c.dir = RnnDirection::kBidirectional;
    c.acts = {Act::kSigmoid, Act::kRelu};
    c.ref_fns = {{{Act::kSigmoid}, {Act::kRelu}}, {{Act::kSigmoid}, {Act::kRelu}}};
    check(c, rng);
  }
}

// Subsets of the outputs: Y only, Y omitted (absent view) with Y_h, LSTM without Y_c.
TEST(Rnn, OptionalOutputs) {
  std::mt19937 rng(15);
  for (OpKind k : kKinds) {
    Config c;
    c.kind = k;
    c.dir = RnnDirection::kBidirectional;
    c.n_out = 1;
    check(c, rng);
    c.n_out = 2;
    c.absent_out = {true};
    check(c, rng);
    c.n_out = k == OpKind::kLSTM ? 3 : 2;
    c.absent_out = {true, false, false};
    check(c, rng);
  }
}

TEST(Rnn, ZeroSizes) {
  std::mt19937 rng(16);
  for (OpKind k : kKinds) {
    for (auto [S, B, I] : {std::tuple{0, 2, 3}, std::tuple{3, 0, 3}, std::tuple{3, 2, 0}}) {
      Config c;
      c.kind = k;
      c.dir = RnnDirection::kBidirectional;
      c.S = S, c.B = B, c.I = I;
      c.h0 = c.bias = c.c0 = true;
      c.lens = B > 0;
      check(c, rng);
    }
  }
}

TEST(Rnn, AttrsCodecRoundTrip) {
  RnnAttrs a;
  a.activations = {Act::kSoftplus, Act::kHardSigmoid, Act::kRelu};
  a.activation_alpha = {0.5f, 2.0f};
  a.activation_beta = {-1.0f};
  a.clip = 3;
  a.direction = RnnDirection::kBidirectional;
  a.hidden_size = 7;
  a.input_forget = 1;
  a.layout = 1;
  std::vector<uint8_t> bytes = encode_attrs(Attrs{a});
  Attrs back = decode_attrs(OpKind::kLSTM, bytes);
  const auto& b = std::get<RnnAttrs>(back);
  EXPECT_EQ(b.activations, a.activations);
  EXPECT_EQ(b.activation_alpha, a.activation_alpha);
  EXPECT_EQ(b.activation_beta, a.activation_beta);
  EXPECT_EQ(b.clip, a.clip);
  EXPECT_EQ(b.direction, a.direction);
  EXPECT_EQ(b.hidden_size, 7);
  EXPECT_EQ(b.input_forget, 1);
  EXPECT_EQ(b.layout, 1);
  std::string text = describe_attrs(Attrs{a});
  EXPECT_NE(text.find("activations=[Softplus,HardSigmoid,Relu]"), std::string::npos) << text;
  EXPECT_NE(text.find("direction=bidirectional"), std::string::npos) << text;
  // A damaged enumerator or a truncated record is rejected.
  std::vector<uint8_t> bad = bytes;
  const size_t act_byte = 4 + 2 * 4 + 4 + 4 + 4;  // after both float lists and the activations count
  ASSERT_LT(act_byte, bad.size());
  bad[act_byte] = 99;
  EXPECT_THROW(decode_attrs(OpKind::kLSTM, bad), Error);
  bad = bytes;
  bad.pop_back();
  EXPECT_THROW(decode_attrs(OpKind::kLSTM, bad), Error);
}

// ---- inference errors --------------------------------------------------------------------------

struct Bad {
  OpKind kind = OpKind::kLSTM;
  RnnAttrs a;
  Tensor x, w, r, bias, lens, h0, c0, p;
  Bad() {
    a.hidden_size = 3;
    x = make(DataType::kFloat32, {5, 2, 4}, std::vector<double>(40, 0.5));
    w = make(DataType::kFloat32, {1, 12, 4}, std::vector<double>(48, 0.1));
    r = make(DataType::kFloat32, {1, 12, 3}, std::vector<double>(36, 0.1));
    bias = make(DataType::kFloat32, {1, 24}, std::vector<double>(24, 0));
    lens = make(DataType::kInt32, {2}, {5, 3});
    h0 = make(DataType::kFloat32, {1, 2, 3}, std::vector<double>(6, 0));
    c0 = h0;
    p = make(DataType::kFloat32, {1, 9}, std::vector<double>(9, 0));
  }
  void infer_all(size_t n_out = 3) const { infer(kind, Attrs{a}, {&x, &w, &r, &bias, &lens, &h0, &c0, &p}, n_out); }
};

TEST(Rnn, InferenceAcceptsTheBaseline) {
  Bad b;
  EXPECT_NO_THROW(b.infer_all());
  b.lens.buf.assign(b.lens.buf.size(), 0);  // lens as a build-time constant: 0 is legal
  EXPECT_NO_THROW(b.infer_all());
}

TEST(Rnn, InferenceErrors) {
  auto expect_error = [](const char* what, auto mutate) {
    Bad b;
    mutate(b);
    EXPECT_THROW(b.infer_all(), Error) << what;
  };
  expect_error("X rank", [](Bad& b) { b.x.shape = {5, 8}; });
  expect_error("X bfloat16", [](Bad& b) { b.x.dtype = DataType::kBFloat16; });
  expect_error("X int", [](Bad& b) { b.x.dtype = DataType::kInt32; });
  expect_error("W dtype", [](Bad& b) { b.w.dtype = DataType::kFloat64; });
  expect_error("W dirs", [](Bad& b) { b.a.direction = RnnDirection::kBidirectional; });
  expect_error("W input", [](Bad& b) { b.w.shape = {1, 12, 3}; });
  expect_error("W gates", [](Bad& b) { b.w.shape = {1, 13, 4}; });
  expect_error("hidden_size", [](Bad& b) { b.a.hidden_size = 4; });
  expect_error("negative hidden_size", [](Bad& b) { b.a.hidden_size = -3; });
  expect_error("R shape", [](Bad& b) { b.r.shape = {1, 12, 4}; });
  expect_error("B shape", [](Bad& b) { b.bias.shape = {1, 12}; });
  expect_error("lens dtype", [](Bad& b) { b.lens.dtype = DataType::kInt64; });
  expect_error("lens shape", [](Bad& b) { b.lens.shape = {3}; });
  expect_error("lens value", [](Bad& b) { b.lens = make(DataType::kInt32, {2}, {6, 1}); });
  expect_error("lens negative", [](Bad& b) { b.lens = make(DataType::kInt32, {2}, {-1, 1}); });
  expect_error("h0 shape", [](Bad& b) { b.h0.shape = {2, 1, 3}; });
  expect_error("h0 layout 1", [](Bad& b) {
    b.a.layout = 1;
    b.x.shape = {2, 5, 4};
    b.h0.shape = {1, 2, 3};
  });
  expect_error("c0 shape", [](Bad& b) { b.c0.shape = {1, 2, 4}; });
  expect_error("P shape", [](Bad& b) { b.p.shape = {1, 12}; });
  expect_error("layout 2", [](Bad& b) { b.a.layout = 2; });
  expect_error("direction", [](Bad& b) { b.a.direction = static_cast<RnnDirection>(7); });
  expect_error("activation count", [](Bad& b) { b.a.activations = {Act::kTanh, Act::kTanh}; });
  expect_error("activation value", [](Bad& b) { b.a.activations = {Act::kTanh, Act::kTanh, static_cast<Act>(40)}; });
  expect_error("negative clip", [](Bad& b) { b.a.clip = -1; });
  expect_error("NaN clip", [](Bad& b) { b.a.clip = NAN; });
  expect_error("input_forget 2", [](Bad& b) { b.a.input_forget = 2; });
  expect_error("linear_before_reset on LSTM", [](Bad& b) { b.a.linear_before_reset = 1; });
  expect_error("too many outputs", [](Bad& b) { b.kind = OpKind::kGRU; });  // GRU: 8 inputs, 3 outputs
  {
    Bad b;
    b.kind = OpKind::kGRU;
    b.a.input_forget = 1;
    b.w.shape = {1, 9, 4};
    b.r.shape = {1, 9, 3};
    b.bias.shape = {1, 18};
    EXPECT_THROW(infer(b.kind, Attrs{b.a}, {&b.x, &b.w, &b.r, &b.bias}, 2), Error) << "input_forget on GRU";
    b.a.input_forget = 0;
    EXPECT_NO_THROW(infer(b.kind, Attrs{b.a}, {&b.x, &b.w, &b.r, &b.bias}, 2));
    EXPECT_THROW(infer(b.kind, Attrs{b.a}, {&b.x, &b.w, &b.r, &b.bias}, 3), Error) << "GRU with Y_c";
  }
}

// sequence_lens known only at run time: the kernel checks the values.
TEST(Rnn, KernelRejectsBadSequenceLens) {
  Bad b;
  RnnAttrs a = b.a;
  std::vector<TensorView> iv;
  Tensor lens = make(DataType::kInt32, {2}, {5, 3});
  for (const Tensor* t : {&b.x, &b.w, &b.r, &b.bias, &lens}) iv.push_back(t->view());
  iv[4].data = nullptr;  // as in inference of a non-constant input
  std::vector<OutputType> types = infer_shapes(OpKind::kLSTM, Attrs{a}, iv, 2);
  iv[4].data = lens.buf.data();
  reinterpret_cast<int32_t*>(lens.buf.data())[1] = 9;
  std::vector<Tensor> out;
  std::vector<TensorView> ov;
  for (const OutputType& o : types) out.push_back(make(o.dtype, o.shape, std::vector<double>(numel(o.shape), 0)));
  for (Tensor& t : out) ov.push_back(t.view());
  cpu::KernelEnv env{};
  EXPECT_THROW(cpu::cpu_kernel(OpKind::kLSTM)(OpKind::kLSTM, Attrs{a}, iv, ov, env), Error);
}

}  // namespace
}  // namespace kiln
