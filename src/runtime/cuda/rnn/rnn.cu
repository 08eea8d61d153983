// The rnn family's CUDA kernels (the GPU side of runtime/cpu/rnn/rnn.cpp): RNN, GRU and LSTM, every
// option the CPU kernel takes (directions, layouts, activations with alpha/beta, clip,
// sequence_lens, initial states, peepholes, input_forget, linear_before_reset, optional outputs).
//
// Two paths, tactics the builder times: the persistent kernel (rnn_persistent.cu: one launch for
// every time step, where it takes the op) and the kernels per time step here, which take every op.
//
// The step-wise structure is the CPU kernel's, so the two are easy to hold side by side. Per
// direction: one GEMM projects the inputs of all time steps (X [seq*batch, input] times W^T, the
// state-independent biases folded in) into the workspace; then the host walks the time steps,
// enqueueing per step a GEMM for the recurrent term (H_{t-1} R^T) and a pointwise kernel (one
// thread per batch entry and hidden unit) that applies the gates, updates H (and C) in the
// workspace and writes Y's row. GRU without linear_before_reset needs (r . H) R_h^T, so it runs a
// gate kernel, a second GEMM and the update kernel. Everything is stream-ordered, so it is fine
// under stream capture; the kernel count grows with the sequence length.
//
// The GEMM is a plain shared-memory tiled kernel (16 x 16 tiles) accumulating in the compute
// type, float for float32/float16 and double for float64 (no TF32, no cuBLASLt). sequence_lens
// stays on the device: every kernel reads it, and a value outside [0, seq] sets kGpuBadValue (the
// CPU throws); such a value only changes which steps count as active, never an address.
#include "runtime/cuda/rnn/rnn_internal.cuh"

namespace kiln::gpu {

namespace {

using ew::global_thread;
using ew::grid_threads;
using namespace rnn;

// ---- per-step kernels ----------------------------------------------------------------------------
// What one step of one direction works on. Buffers in the compute type C live in the workspace.
template <class T, class C>
struct Step {
  RnnDims dm;
  int64_t d = 0, t = 0;
  const C* xw = nullptr;          // [seq * batch, G*H], rows in X's row order
  C* hr = nullptr;                // [batch, G*H]: H R^T, then (GRU) z in its first block
  C* h = nullptr;                 // [batch, H]
  C* c = nullptr;                 // [batch, H] (LSTM)
  C* rh = nullptr;                // [batch, H] (GRU without linear_before_reset): r . H
  const C* hh = nullptr;          // [batch, H] (same): (r . H) R_h^T
  const T* peep = nullptr;        // this direction's P [3H] (LSTM), or null
  const T* rbh = nullptr;         // this direction's Rb_h [H] (GRU with linear_before_reset), or null
  const int32_t* lens = nullptr;  // sequence_lens, or null: every entry runs seq steps
  T* y = nullptr;                 // Y, or null
  C clip = C(0);
  GateFns fns{};
  bool input_forget = false;

  __device__ bool active(int64_t b) const { return t < (lens ? static_cast<int64_t>(lens[b]) : dm.seq); }
  __device__ void write_y(int64_t b, int64_t j, bool act) const {
    if (y) y[dm.y_off(t, d, b) + j] = act ? from_c<T, C>(h[b * dm.hidden + j]) : from_c<T, C>(C(0));
  }
};

template <class T, class C>
__global__ void __launch_bounds__(ew::kThreads) rnn_step_kernel(Step<T, C> s) {
  const int64_t H = s.dm.hidden, GH = s.dm.gates * H;
  for (int64_t i = global_thread(); i < s.dm.batch * H; i += grid_threads()) {
    const int64_t b = i / H, j = i - b * H;
    const bool act = s.active(b);
    if (act) s.h[i] = rnn_cell(s.fns, s.clip, s.hr[b * GH + j] + s.xw[s.dm.x_row(s.t, b) * GH + j]);
    s.write_y(b, j, act);
  }
}

// Gate blocks i, o, f, c.
template <class T, class C>
__global__ void __launch_bounds__(ew::kThreads) lstm_step_kernel(Step<T, C> s) {
  const int64_t H = s.dm.hidden, GH = s.dm.gates * H;
  for (int64_t i = global_thread(); i < s.dm.batch * H; i += grid_threads()) {
    const int64_t b = i / H, j = i - b * H;
    const bool act = s.active(b);
    if (act) {
      const C* p = s.hr + b * GH + j;
      const C* q = s.xw + s.dm.x_row(s.t, b) * GH + j;
      C pv[3] = {};
      if (s.peep)
        for (int g = 0; g < 3; ++g) pv[g] = to_c<T, C>(s.peep[g * H + j]);
      C c = s.c[i];
      s.h[i] = lstm_cell(s.fns, s.clip, s.input_forget, p[0] + q[0], p[H] + q[H], p[2 * H] + q[2 * H],
                         p[3 * H] + q[3 * H], s.peep ? pv : nullptr, c);
      s.c[i] = c;
    }
    s.write_y(b, j, act);
  }
}

// GRU with linear_before_reset: n = g(xw_n + r . (H R_h^T + Rb_h)), all in one kernel.
template <class T, class C>
__global__ void __launch_bounds__(ew::kThreads) gru_lbr_step_kernel(Step<T, C> s) {
  const int64_t H = s.dm.hidden, GH = s.dm.gates * H;
  for (int64_t i = global_thread(); i < s.dm.batch * H; i += grid_threads()) {
    const int64_t b = i / H, j = i - b * H;
    const bool act = s.active(b);
    if (act) {
      const C* p = s.hr + b * GH + j;
      const C* q = s.xw + s.dm.x_row(s.t, b) * GH + j;
      const C rb = s.rbh ? to_c<T, C>(s.rbh[j]) : C(0);
      s.h[i] = gru_lbr_cell(s.fns, s.clip, p[0] + q[0], p[H] + q[H], q[2 * H], p[2 * H] + rb, s.h[i]);
    }
    s.write_y(b, j, act);
  }
}

// GRU without linear_before_reset, first half: z (kept in hr's first block) and r . H.
template <class T, class C>
__global__ void __launch_bounds__(ew::kThreads) gru_gates_kernel(Step<T, C> s) {
  const int64_t H = s.dm.hidden, GH = s.dm.gates * H;
  for (int64_t i = global_thread(); i < s.dm.batch * H; i += grid_threads()) {
    const int64_t b = i / H, j = i - b * H;
    if (!s.active(b)) {
      s.rh[i] = C(0);
      continue;
    }
    C* p = s.hr + b * GH + j;
    const C* q = s.xw + s.dm.x_row(s.t, b) * GH + j;
    p[0] = clip_activate(s.fns.f[0], s.clip, p[0] + q[0]);
    s.rh[i] = clip_activate(s.fns.f[0], s.clip, p[H] + q[H]) * s.h[i];
  }
}

// Second half, after hh = (r . H) R_h^T: n = g(xw_n + hh), H = (1 - z) n + z H.
template <class T, class C>
__global__ void __launch_bounds__(ew::kThreads) gru_update_kernel(Step<T, C> s) {
  const int64_t H = s.dm.hidden, GH = s.dm.gates * H;
  for (int64_t i = global_thread(); i < s.dm.batch * H; i += grid_threads()) {
    const int64_t b = i / H, j = i - b * H;
    const bool act = s.active(b);
    if (act) {
      s.h[i] = gru_update(s.fns, s.clip, s.hr[b * GH + j], s.xw[s.dm.x_row(s.t, b) * GH + 2 * H + j], s.hh[i], s.h[i]);
    }
    s.write_y(b, j, act);
  }
}

// Initial states of direction d (zero when absent).
template <class T, class C>
__global__ void __launch_bounds__(ew::kThreads)
    init_state_kernel(RnnDims dm, int64_t d, const T* h0, const T* c0, C* h, C* c) {
  const int64_t H = dm.hidden;
  for (int64_t i = global_thread(); i < dm.batch * H; i += grid_threads()) {
    const int64_t b = i / H, j = i - b * H;
    h[i] = h0 ? to_c<T, C>(h0[dm.state_off(d, b) + j]) : C(0);
    if (c) c[i] = c0 ? to_c<T, C>(c0[dm.state_off(d, b) + j]) : C(0);
  }
}

// Y_h / Y_c of direction d: the last state, zero for a sequence length of 0.
template <class T, class C>
__global__ void __launch_bounds__(ew::kThreads)
    final_state_kernel(RnnDims dm, int64_t d, const int32_t* lens, const C* h, const C* c, T* yh, T* yc) {
  const int64_t H = dm.hidden;
  for (int64_t i = global_thread(); i < dm.batch * H; i += grid_threads()) {
    const int64_t b = i / H, j = i - b * H;
    const bool ran = (lens ? static_cast<int64_t>(lens[b]) : dm.seq) > 0;
    if (yh) yh[dm.state_off(d, b) + j] = from_c<T, C>(ran ? h[i] : C(0));
    if (yc) yc[dm.state_off(d, b) + j] = from_c<T, C>(ran ? c[i] : C(0));
  }
}

__global__ void check_lens_kernel(const int32_t* lens, int64_t batch, int64_t seq, int* err) {
  for (int64_t b = global_thread(); b < batch; b += grid_threads())
    if ((lens[b] < 0 || lens[b] > seq) && err) atomicCAS(err, 0, kGpuBadValue);
}

// ---- host side -----------------------------------------------------------------------------------
// Workspace layout in elements of the compute type, each buffer starting 256-byte aligned.
struct Layout {
  size_t xw = 0, hr = 0, h = 0, c = 0, rh = 0, hh = 0, total = 0;
};
Layout layout_of(OpKind kind, const RnnAttrs& a, const RnnDims& dm, size_t elem) {
  const size_t align = 256 / elem;
  Layout l;
  size_t at = 0;
  auto take = [&](int64_t n) {
    const size_t start = at;
    at += (static_cast<size_t>(n) + align - 1) / align * align;
    return start;
  };
  const int64_t GH = dm.gates * dm.hidden, BH = dm.batch * dm.hidden;
  l.xw = take(dm.seq * dm.batch * GH);
  l.hr = take(dm.batch * GH);
  l.h = take(BH);
  if (kind == OpKind::kLSTM) l.c = take(BH);
  if (kind == OpKind::kGRU && a.linear_before_reset == 0) {
    l.rh = take(BH);
    l.hh = take(BH);
  }
  l.total = at;
  return l;
}

template <class T, class C>
void run_typed(OpKind kind, const RnnAttrs& a, std::span<const TensorView> in, std::span<const TensorView> out,
               GpuEnv& env) {
  const char* op = ew::name_of(kind);
  auto in_data = [&](size_t i) -> const T* {
    return in.size() > i && in[i].exists ? static_cast<const T*>(in[i].data) : nullptr;
  };
  auto out_data = [&](size_t i) -> T* {
    return out.size() > i && out[i].exists ? static_cast<T*>(out[i].data) : nullptr;
  };
  const RnnDims dm = rnn_dims(kind, a, in);
  const int64_t H = dm.hidden, GH = dm.gates * H, B = dm.batch, S = dm.seq;
  if (B == 0 || H == 0) return;  // every output is empty
  const bool is_lstm = kind == OpKind::kLSTM;
  const bool lbr = kind == OpKind::kGRU && a.linear_before_reset != 0;
  const bool gru_split = kind == OpKind::kGRU && !lbr;
  const std::vector<RnnGateFn> fns = rnn_gate_functions(kind, a);
  const size_t slots = static_cast<size_t>(rnn_activation_slots(kind));

  const Layout lay = layout_of(kind, a, dm, sizeof(C));
  if (env.workspace_bytes < lay.total * sizeof(C))
    throw Error(std::string(op) + ": the workspace is smaller than the kernel asked for");
  C* ws = static_cast<C*>(env.workspace);
  const T* x = in_data(0);
  const T* w = in_data(1);
  const T* r = in_data(2);
  const T* bias = in_data(3);
  const auto* lens = in.size() > 4 && in[4].exists ? static_cast<const int32_t*>(in[4].data) : nullptr;
  const T* h0 = in_data(5);
  const T* c0 = is_lstm ? in_data(6) : nullptr;
  const T* peep = is_lstm ? in_data(7) : nullptr;
  T* yh = out_data(1);
  T* yc = is_lstm ? out_data(2) : nullptr;

  const unsigned blocks = ew::blocks_for(B * H);
  if (lens) {
    check_lens_kernel<<<ew::blocks_for(B), ew::kThreads, 0, env.stream>>>(lens, B, S, env.error);
    check_launch(op);
  }
  Step<T, C> st;
  st.dm = dm;
  st.xw = ws + lay.xw;
  st.hr = ws + lay.hr;
  st.h = ws + lay.h;
  st.c = is_lstm ? ws + lay.c : nullptr;
  st.rh = gru_split ? ws + lay.rh : nullptr;
  st.hh = gru_split ? ws + lay.hh : nullptr;
  st.lens = lens;
  st.y = out_data(0);
  st.clip = static_cast<C>(a.clip);
  st.input_forget = a.input_forget != 0;
  for (int64_t d = 0; d < dm.dirs; ++d) {
    const bool reverse = reversed(a, d);
    const T* wd = w + d * GH * dm.input;
    const T* rd = r + d * GH * H;
    const T* bd = bias ? bias + d * 2 * GH : nullptr;
    st.d = d;
    st.peep = peep ? peep + d * 3 * H : nullptr;
    st.rbh = lbr && bd ? bd + GH + 2 * H : nullptr;
    st.fns = gate_fns_of(fns, slots, d);
    // Input projection with Wb + Rb folded in (not GRU's Rb_h with linear_before_reset).
    gemm_nt<T, T, C>(S * B, GH, dm.input, x, dm.input, wd, dm.input, ws + lay.xw, GH, env, op, bd,
                     bd ? bd + GH : nullptr, lbr ? 2 * H : GH);
    init_state_kernel<T, C><<<blocks, ew::kThreads, 0, env.stream>>>(dm, d, h0, c0, st.h, st.c);
    check_launch(op);
    for (int64_t s = 0; s < S; ++s) {
      st.t = reverse ? S - 1 - s : s;
      // Recurrent term for every row (inactive rows are computed and ignored, as on the CPU).
      gemm_nt<C, T, C>(B, gru_split ? 2 * H : GH, H, st.h, H, rd, H, st.hr, GH, env, op);
      if (kind == OpKind::kRNN) {
        rnn_step_kernel<T, C><<<blocks, ew::kThreads, 0, env.stream>>>(st);
      } else if (is_lstm) {
        lstm_step_kernel<T, C><<<blocks, ew::kThreads, 0, env.stream>>>(st);
      } else if (lbr) {
        gru_lbr_step_kernel<T, C><<<blocks, ew::kThreads, 0, env.stream>>>(st);
      } else {
        gru_gates_kernel<T, C><<<blocks, ew::kThreads, 0, env.stream>>>(st);
        check_launch(op);
        gemm_nt<C, T, C>(B, H, H, st.rh, H, rd + 2 * H * H, H, ws + lay.hh, H, env, op);
        gru_update_kernel<T, C><<<blocks, ew::kThreads, 0, env.stream>>>(st);
      }
      check_launch(op);
    }
    if (yh || yc) {
      final_state_kernel<T, C><<<blocks, ew::kThreads, 0, env.stream>>>(dm, d, lens, st.h, st.c, yh, yc);
      check_launch(op);
    }
  }
}

size_t rnn_workspace(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView>,
                     GpuEnv& env) {
  const auto& a = std::get<RnnAttrs>(attrs);
  if (persistent_takes(kind, a, in, env.tactic)) return persistent_workspace(kind, a, in);
  const RnnDims dm = rnn_dims(kind, a, in);
  const size_t elem = in[0].dtype == DataType::kFloat64 ? sizeof(double) : sizeof(float);
  return layout_of(kind, a, dm, elem).total * elem;
}

std::vector<int32_t> rnn_tactics(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                                 std::span<const TensorView>, GpuEnv&) {
  return persistent_tactics(kind, std::get<RnnAttrs>(attrs), in);
}

void rnn_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                GpuEnv& env) {
  const auto& a = std::get<RnnAttrs>(attrs);
  if (persistent_takes(kind, a, in, env.tactic)) return run_persistent(kind, a, in, out, env);
  switch (in[0].dtype) {
    case DataType::kFloat32: return run_typed<float, float>(kind, a, in, out, env);
    case DataType::kFloat16: return run_typed<__half, float>(kind, a, in, out, env);
    case DataType::kFloat64: return run_typed<double, double>(kind, a, in, out, env);
    default: ew::throw_gpu_dtype(in[0].dtype, ew::name_of(kind));
  }
}

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kGRU, rnn_kernel, rnn_workspace, rnn_tactics},
    {OpKind::kLSTM, rnn_kernel, rnn_workspace, rnn_tactics},
    {OpKind::kRNN, rnn_kernel, rnn_workspace, rnn_tactics},
};

}  // namespace

std::span<const GpuKernelEntry> rnn_gpu_kernels() { return kEntries; }

}  // namespace kiln::gpu
