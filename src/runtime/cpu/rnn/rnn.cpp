// CPU kernels of the recurrent ops RNN, GRU and LSTM (ONNX opsets 7 to 21).
//
// Per direction, the input projections of all time steps are one GEMM, X [seq*batch, input] times
// W^T [input, G*H], with the biases that do not depend on the state folded in. Each step then
// adds H_{t-1} R^T (a [batch, G*H] GEMM) and applies the gate functions (f, g, h = the op's
// activation slots) row by row:
//   RNN:  H = f(x Wi^T + H Ri^T + Wbi + Rbi)
//   GRU:  z = f(x Wz^T + H Rz^T + Wbz + Rbz),  r = f(x Wr^T + H Rr^T + Wbr + Rbr)
//         n = g(x Wh^T + (r . H) Rh^T + Rbh + Wbh)          linear_before_reset = 0
//         n = g(x Wh^T + r . (H Rh^T + Rbh) + Wbh)          linear_before_reset = 1
//         H = (1 - z) . n + z . H
//   LSTM: i = f(x Wi^T + H Ri^T + Pi . C + Wbi + Rbi),  f = f(... + Pf . C ...) or 1 - i (input_forget)
//         c = g(x Wc^T + H Rc^T + Wbc + Rbc),  C = f . C + i . c
//         o = f(x Wo^T + H Ro^T + Po . C_new + Wbo + Rbo),  H = o . h(C)
// clip bounds every pre-activation except C's before h (as onnxruntime does). A batch entry b
// runs sequence_lens[b] steps (the first ones; reverse starts at step len-1); Y is zero past its
// length, and Y_h / Y_c are zero for a length of 0 (onnxruntime's convention).
// float32 uses sgemm; float16 computes in float; float64 in double with its own small GEMM.
#include "core/infer/rnn.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/cpu/gemm.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln::cpu {

namespace {

template <class Fn>
void parallel(KernelEnv& env, int64_t n, int64_t work_per_item, Fn&& fn) {
  if (n <= 0) return;
  if (!env.pool || env.pool->team() <= 1 || n < 2 || n * work_per_item < (1 << 15))
    fn(int64_t{0}, n);
  else
    env.pool->parallel_for(n, fn);
}

// c[m x n] (+)= a[m x k] * b[n x k]^T, row-major with leading dimensions.
void gemm_nt(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
             int64_t ldc, bool accumulate, KernelEnv& env) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return;
  }
  sgemm(false, true, m, n, k, 1.0f, a, lda, b, ldb, accumulate ? 1.0f : 0.0f, c, ldc, env.pool);
}
void gemm_nt(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb, double* c,
             int64_t ldc, bool accumulate, KernelEnv& env) {
  parallel(env, m, n * k, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const double* ar = a + i * lda;
        const double* br = b + j * ldb;
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += ar[p] * br[p];
        c[i * ldc + j] = accumulate ? c[i * ldc + j] + s : s;
      }
  });
}

// Applies one gate function in place; the switch is outside the element loop.
template <class C>
void activate(const RnnGateFn& f, C* x, int64_t n) {
  const C alpha = static_cast<C>(f.alpha), beta = static_cast<C>(f.beta);
  switch (f.act) {
    case RnnActivation::kRelu:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] > C(0) ? x[i] : C(0);
      return;
    case RnnActivation::kTanh:
      for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i]);
      return;
    case RnnActivation::kSigmoid:  // exp(-x) may overflow to inf, giving exactly 0
      for (int64_t i = 0; i < n; ++i) x[i] = C(1) / (C(1) + std::exp(-x[i]));
      return;
    case RnnActivation::kAffine:
      for (int64_t i = 0; i < n; ++i) x[i] = alpha * x[i] + beta;
      return;
    case RnnActivation::kLeakyRelu:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] >= C(0) ? x[i] : alpha * x[i];
      return;
    case RnnActivation::kThresholdedRelu:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] >= alpha ? x[i] : C(0);
      return;
    case RnnActivation::kScaledTanh:
      for (int64_t i = 0; i < n; ++i) x[i] = alpha * std::tanh(beta * x[i]);
      return;
    case RnnActivation::kHardSigmoid:
      for (int64_t i = 0; i < n; ++i) x[i] = std::min(std::max(alpha * x[i] + beta, C(0)), C(1));
      return;
    case RnnActivation::kElu:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] >= C(0) ? x[i] : alpha * (std::exp(x[i]) - C(1));
      return;
    case RnnActivation::kSoftsign:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (C(1) + std::abs(x[i]));
      return;
    case RnnActivation::kSoftplus:  // log(1 + e^x) without overflow
      for (int64_t i = 0; i < n; ++i)
        x[i] = x[i] > C(0) ? x[i] + std::log1p(std::exp(-x[i])) : std::log1p(std::exp(x[i]));
      return;
  }
}

template <class C>
void clip_activate(const RnnGateFn& f, C clip, C* x, int64_t n) {
  if (clip > C(0))
    for (int64_t i = 0; i < n; ++i) x[i] = std::min(std::max(x[i], -clip), clip);
  activate(f, x, n);
}

// The elements of v in the compute type: v's own data when the types agree, else a converted copy.
template <class T, class C>
const C* compute_data(const TensorView& v, std::vector<C>& store) {
  if (!v.exists) return nullptr;
  if constexpr (std::is_same_v<T, C>) {
    return v.as<const C>();
  } else {
    const T* p = v.as<const T>();
    store.resize(static_cast<size_t>(v.numel()));
    for (size_t i = 0; i < store.size(); ++i) store[i] = static_cast<C>(static_cast<float>(p[i]));
    return store.data();
  }
}

template <class T, class C>
void run_typed(OpKind kind, const RnnAttrs& a, std::span<const TensorView> in, std::span<const TensorView> out,
               KernelEnv& env) {
  auto has_in = [&](size_t i) { return in.size() > i && in[i].exists; };
  auto out_data = [&](size_t i) -> T* { return out.size() > i && out[i].exists ? out[i].as<T>() : nullptr; };
  const TensorView& xv = in[0];
  const RnnDims dm = rnn_dims(kind, a, in);
  const int64_t H = dm.hidden, GH = dm.gates * H, B = dm.batch, S = dm.seq;
  const std::vector<RnnGateFn> fns = rnn_gate_functions(kind, a);
  const size_t slots = static_cast<size_t>(rnn_activation_slots(kind));
  const C clip = static_cast<C>(a.clip);
  const bool lbr = kind == OpKind::kGRU && a.linear_before_reset != 0;
  const bool is_lstm = kind == OpKind::kLSTM;

  std::vector<int64_t> lens(static_cast<size_t>(B), S);
  if (has_in(4)) {
    const auto* p = in[4].as<const int32_t>();
    for (int64_t b = 0; b < B; ++b) {
      if (p[b] < 0 || p[b] > S)
        throw Error(std::string(op_name(kind)) + ": sequence_lens[" + std::to_string(b) +
                    "] = " + std::to_string(p[b]) + " is outside [0, " + std::to_string(S) + "]");
      lens[static_cast<size_t>(b)] = p[b];
    }
  }
  std::vector<C> sx, sw, sr, sb, sh0, sc0, sp;
  const C* x = compute_data<T, C>(xv, sx);
  const C* w = compute_data<T, C>(in[1], sw);
  const C* r = compute_data<T, C>(in[2], sr);
  const C* bias = has_in(3) ? compute_data<T, C>(in[3], sb) : nullptr;
  const C* h0 = has_in(5) ? compute_data<T, C>(in[5], sh0) : nullptr;
  const C* c0 = is_lstm && has_in(6) ? compute_data<T, C>(in[6], sc0) : nullptr;
  const C* peep = is_lstm && has_in(7) ? compute_data<T, C>(in[7], sp) : nullptr;
  T* y = out_data(0);
  T* yh = out_data(1);
  T* yc = is_lstm ? out_data(2) : nullptr;

  std::vector<C> xw(static_cast<size_t>(S * B * GH)), hr(static_cast<size_t>(B * GH));
  std::vector<C> h(static_cast<size_t>(B * H)), c(is_lstm ? h.size() : 0), bx(static_cast<size_t>(GH)), rbh;
  std::vector<C> rh, hh, tmp;  // GRU (r . H) and its product with Rh^T; LSTM h(C)
  if (kind == OpKind::kGRU && !lbr) rh.resize(h.size()), hh.resize(h.size());
  if (is_lstm) tmp.resize(h.size());

  for (int64_t d = 0; d < dm.dirs; ++d) {
    const bool reverse = a.direction == RnnDirection::kReverse || d == 1;
    const C* wd = w + d * GH * dm.input;
    const C* rd = r + d * GH * H;
    const C* pd = peep ? peep + d * 3 * H : nullptr;
    const RnnGateFn* fn = fns.data() + static_cast<size_t>(d) * slots;
    // Biases outside the recurrence: Wb + Rb, except GRU's Rbh with linear_before_reset.
    std::fill(bx.begin(), bx.end(), C(0));
    rbh.assign(static_cast<size_t>(H), C(0));
    if (bias) {
      const C* bd = bias + d * 2 * GH;
      for (int64_t j = 0; j < GH; ++j) bx[j] = bd[j] + (lbr && j >= 2 * H ? C(0) : bd[GH + j]);
      if (lbr) std::copy(bd + GH + 2 * H, bd + 2 * GH, rbh.begin());
    }
    // xw rows follow X's rows (x_row), so one GEMM covers every step and batch entry.
    gemm_nt(S * B, GH, dm.input, x, dm.input, wd, dm.input, xw.data(), GH, false, env);
    parallel(env, S * B, GH, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = 0; j < GH; ++j) xw[i * GH + j] += bx[j];
    });
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = 0; j < H; ++j) {
        h[b * H + j] = h0 ? h0[dm.state_off(d, b) + j] : C(0);
        if (is_lstm) c[b * H + j] = c0 ? c0[dm.state_off(d, b) + j] : C(0);
      }
    }

    for (int64_t s = 0; s < S; ++s) {
      const int64_t t = reverse ? S - 1 - s : s;
      auto active = [&](int64_t b) { return t < lens[static_cast<size_t>(b)]; };
      // Recurrent term for every row (inactive rows are computed and ignored: one GEMM is cheaper).
      const int64_t rec_n = rh.empty() ? GH : 2 * H;
      gemm_nt(B, rec_n, H, h.data(), H, rd, H, hr.data(), GH, false, env);
      auto row_pre = [&](int64_t b) {  // hr row b += xw(t, b) over the GEMM'd gate blocks
        C* p = hr.data() + b * GH;
        const C* q = xw.data() + dm.x_row(t, b) * GH;
        return std::pair<C*, const C*>{p, q};
      };
      if (kind == OpKind::kRNN) {
        parallel(env, B, 8 * H, [&](int64_t b0, int64_t b1) {
          for (int64_t b = b0; b < b1; ++b) {
            if (!active(b)) continue;
            auto [p, q] = row_pre(b);
            for (int64_t j = 0; j < H; ++j) p[j] += q[j];
            clip_activate(fn[0], clip, p, H);
            std::copy(p, p + H, h.data() + b * H);
          }
        });
      } else if (kind == OpKind::kGRU) {
        // z, r (and with linear_before_reset the whole new-gate input) per row.
        parallel(env, B, 8 * GH, [&](int64_t b0, int64_t b1) {
          for (int64_t b = b0; b < b1; ++b) {
            if (!active(b)) {
              if (!rh.empty()) std::fill(rh.begin() + b * H, rh.begin() + (b + 1) * H, C(0));
              continue;
            }
            auto [p, q] = row_pre(b);
            for (int64_t j = 0; j < 2 * H; ++j) p[j] += q[j];
            clip_activate(fn[0], clip, p, 2 * H);  // z and r
            const C* hp = h.data() + b * H;
            if (rh.empty()) {
              C* n = p + 2 * H;
              for (int64_t j = 0; j < H; ++j) n[j] = q[2 * H + j] + p[H + j] * (n[j] + rbh[j]);
            } else {
              for (int64_t j = 0; j < H; ++j) rh[b * H + j] = p[H + j] * hp[j];
            }
          }
        });
        if (!rh.empty()) gemm_nt(B, H, H, rh.data(), H, rd + 2 * H * H, H, hh.data(), H, false, env);
        parallel(env, B, 8 * H, [&](int64_t b0, int64_t b1) {
          for (int64_t b = b0; b < b1; ++b) {
            if (!active(b)) continue;
            auto [p, q] = row_pre(b);
            C* n = p + 2 * H;
            if (!rh.empty())
              for (int64_t j = 0; j < H; ++j) n[j] = q[2 * H + j] + hh[b * H + j];
            clip_activate(fn[1], clip, n, H);
            C* hp = h.data() + b * H;
            for (int64_t j = 0; j < H; ++j) hp[j] = (C(1) - p[j]) * n[j] + p[j] * hp[j];
          }
        });
      } else {  // LSTM: gate blocks i, o, f, c
        parallel(env, B, 16 * GH, [&](int64_t b0, int64_t b1) {
          for (int64_t b = b0; b < b1; ++b) {
            if (!active(b)) continue;
            auto [p, q] = row_pre(b);
            for (int64_t j = 0; j < GH; ++j) p[j] += q[j];
            C *gi = p, *go = p + H, *gf = p + 2 * H, *gc = p + 3 * H;
            C* cp = c.data() + b * H;
            if (pd)
              for (int64_t j = 0; j < H; ++j) gi[j] += pd[j] * cp[j];
            clip_activate(fn[0], clip, gi, H);
            if (a.input_forget) {
              for (int64_t j = 0; j < H; ++j) gf[j] = C(1) - gi[j];
            } else {
              if (pd)
                for (int64_t j = 0; j < H; ++j) gf[j] += pd[2 * H + j] * cp[j];
              clip_activate(fn[0], clip, gf, H);
            }
            clip_activate(fn[1], clip, gc, H);
            for (int64_t j = 0; j < H; ++j) cp[j] = gf[j] * cp[j] + gi[j] * gc[j];
            if (pd)
              for (int64_t j = 0; j < H; ++j) go[j] += pd[H + j] * cp[j];
            clip_activate(fn[0], clip, go, H);
            C* th = tmp.data() + b * H;
            std::copy(cp, cp + H, th);
            activate(fn[2], th, H);
            C* hp = h.data() + b * H;
            for (int64_t j = 0; j < H; ++j) hp[j] = go[j] * th[j];
          }
        });
      }
      if (y)
        for (int64_t b = 0; b < B; ++b) {
          T* yo = y + dm.y_off(t, d, b);
          const C* hp = h.data() + b * H;
          if (active(b))
            for (int64_t j = 0; j < H; ++j) yo[j] = T(hp[j]);
          else
            std::fill(yo, yo + H, T(C(0)));
        }
    }
    for (int64_t b = 0; b < B; ++b) {
      const bool ran = lens[static_cast<size_t>(b)] > 0;
      for (int64_t j = 0; j < H; ++j) {
        if (yh) yh[dm.state_off(d, b) + j] = T(ran ? h[b * H + j] : C(0));
        if (yc) yc[dm.state_off(d, b) + j] = T(ran ? c[b * H + j] : C(0));
      }
    }
  }
}

void rnn_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                KernelEnv& env) {
  const auto& a = std::get<RnnAttrs>(attrs);
  const DataType t = in[0].dtype;
  if (t == DataType::kFloat32) return run_typed<float, float>(kind, a, in, out, env);
  if (t == DataType::kFloat64) return run_typed<double, double>(kind, a, in, out, env);
  if (t == DataType::kFloat16) return run_typed<Half, float>(kind, a, in, out, env);
  throw_unsupported_dtype(t, op_name(kind).data());
}

constexpr KernelEntry kKernels[] = {
    {OpKind::kGRU, rnn_kernel},
    {OpKind::kLSTM, rnn_kernel},
    {OpKind::kRNN, rnn_kernel},
};

}  // namespace

std::span<const KernelEntry> rnn_kernels() { return kKernels; }

}  // namespace kiln::cpu
