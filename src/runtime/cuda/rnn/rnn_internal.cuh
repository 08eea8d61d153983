// What the two GPU paths of the rnn family share (rnn.cu: a kernel per time step;
// rnn_persistent.cu: one launch per layer): the gate functions, the shapes, and each op's cell
// update, written once so that both compute the same thing as the CPU kernel.
#pragma once

#include "core/infer/rnn.h"
#include "runtime/cuda/elementwise/elementwise_internal.cuh"

namespace kiln::gpu::rnn {

// ---- activations -----------------------------------------------------------------------------
struct GateFn {
  int act;
  float alpha, beta;
};
struct GateFns {
  GateFn f[3];  // the op's slots f, g, h for one direction
};

__device__ __forceinline__ float m_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double m_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_log1p(float x) { return log1pf(x); }
__device__ __forceinline__ double m_log1p(double x) { return log1p(x); }

template <class C>
__device__ C activate(const GateFn& f, C x) {
  const C alpha = static_cast<C>(f.alpha), beta = static_cast<C>(f.beta);
  switch (static_cast<RnnActivation>(f.act)) {
    case RnnActivation::kRelu: return x > C(0) ? x : C(0);
    case RnnActivation::kTanh: return m_tanh(x);
    case RnnActivation::kSigmoid: return C(1) / (C(1) + m_exp(-x));
    case RnnActivation::kAffine: return alpha * x + beta;
    case RnnActivation::kLeakyRelu: return x >= C(0) ? x : alpha * x;
    case RnnActivation::kThresholdedRelu: return x >= alpha ? x : C(0);
    case RnnActivation::kScaledTanh: return alpha * m_tanh(beta * x);
    case RnnActivation::kHardSigmoid: return ew::std_min(ew::std_max(alpha * x + beta, C(0)), C(1));
    case RnnActivation::kElu: return x >= C(0) ? x : alpha * (m_exp(x) - C(1));
    case RnnActivation::kSoftsign: return x / (C(1) + (x < C(0) ? -x : x));
    case RnnActivation::kSoftplus: return x > C(0) ? x + m_log1p(m_exp(-x)) : m_log1p(m_exp(x));
  }
  return x;
}

template <class C>
__device__ __forceinline__ C clip_activate(const GateFn& f, C clip, C x) {
  if (clip > C(0)) x = ew::std_min(ew::std_max(x, -clip), clip);
  return activate(f, x);
}

template <class T, class C>
__device__ __forceinline__ C to_c(T v) {
  return static_cast<C>(ew::load(v));
}
template <class T, class C>
__device__ __forceinline__ T from_c(C v) {
  return ew::store<T>(v);
}

// The gate functions of direction d, as the kernels take them.
inline GateFns gate_fns_of(const std::vector<RnnGateFn>& fns, size_t slots, int64_t d) {
  GateFns g{};
  for (size_t k = 0; k < slots; ++k) {
    const RnnGateFn& f = fns[static_cast<size_t>(d) * slots + k];
    g.f[k] = GateFn{static_cast<int>(f.act), f.alpha, f.beta};
  }
  return g;
}

// Shapes and indexing: core/infer/rnn.h's RnnDims and rnn_dims, shared with the CPU kernel.
// Direction d runs backwards in time.
inline bool reversed(const RnnAttrs& a, int64_t d) { return a.direction == RnnDirection::kReverse || d == 1; }

// ---- GEMM: c[m x n] = a[m x k] * b[n x k]^T (+ bias), row-major with leading dimensions --------
// bias (input projection only): wb[j] + rb[j] for j < rb_cols, else wb[j], summed first as the CPU
// does; null wb: none.
constexpr int kTile = 16;

template <class TA, class TB, class C>
__global__ void __launch_bounds__(kTile* kTile)
    gemm_nt_kernel(int64_t M, int64_t N, int64_t K, const TA* a, int64_t lda, const TB* b, int64_t ldb, C* c,
                   int64_t ldc, const TB* wb, const TB* rb, int64_t rb_cols) {
  __shared__ C as[kTile][kTile + 1], bs[kTile][kTile + 1];
  const int tx = static_cast<int>(threadIdx.x) % kTile, ty = static_cast<int>(threadIdx.x) / kTile;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t j = n0 + tx;
  C bias = C(0);
  if (wb && j < N) bias = to_c<TB, C>(wb[j]) + (j < rb_cols ? to_c<TB, C>(rb[j]) : C(0));
  // Loop bounds depend on the block only, so every thread reaches every barrier.
  for (int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTile; m0 < M; m0 += static_cast<int64_t>(gridDim.y) * kTile) {
    C acc = C(0);
    for (int64_t k0 = 0; k0 < K; k0 += kTile) {
      const int64_t k = k0 + tx;
      as[ty][tx] = m0 + ty < M && k < K ? to_c<TA, C>(a[(m0 + ty) * lda + k]) : C(0);
      bs[ty][tx] = n0 + ty < N && k < K ? to_c<TB, C>(b[(n0 + ty) * ldb + k]) : C(0);
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < kTile; ++kk) acc += as[ty][kk] * bs[tx][kk];
      __syncthreads();
    }
    if (m0 + ty < M && j < N) c[(m0 + ty) * ldc + j] = acc + bias;
  }
}

template <class TA, class TB, class C>
void gemm_nt(int64_t M, int64_t N, int64_t K, const TA* a, int64_t lda, const TB* b, int64_t ldb, C* c, int64_t ldc,
             GpuEnv& env, const char* op, const TB* wb = nullptr, const TB* rb = nullptr, int64_t rb_cols = 0) {
  if (M == 0 || N == 0) return;
  const dim3 grid(static_cast<unsigned>((N + kTile - 1) / kTile),
                  static_cast<unsigned>(std::min<int64_t>((M + kTile - 1) / kTile, 65535)));
  gemm_nt_kernel<TA, TB, C><<<grid, kTile * kTile, 0, env.stream>>>(M, N, K, a, lda, b, ldb, c, ldc, wb, rb, rb_cols);
  check_launch(op);
}

// ---- cell updates: gate pre-activations (input and recurrent terms, biases in) to the new state --
template <class C>
__device__ __forceinline__ C rnn_cell(const GateFns& fns, C clip, C pre) {
  return clip_activate(fns.f[0], clip, pre);
}

// LSTM, gate blocks i, o, f, c; peep: this unit's P_i, P_o, P_f (null without peepholes). Updates
// c and returns the new h.
template <class C>
__device__ __forceinline__ C lstm_cell(const GateFns& fns, C clip, bool input_forget, C gi, C go, C gf, C gc,
                                       const C* peep, C& c) {
  if (peep) gi += peep[0] * c;
  gi = clip_activate(fns.f[0], clip, gi);
  if (input_forget) {
    gf = C(1) - gi;
  } else {
    if (peep) gf += peep[2] * c;
    gf = clip_activate(fns.f[0], clip, gf);
  }
  gc = clip_activate(fns.f[1], clip, gc);
  c = gf * c + gi * gc;
  if (peep) go += peep[1] * c;
  go = clip_activate(fns.f[0], clip, go);
  return go * activate(fns.f[2], c);
}

// GRU with linear_before_reset: n = g(x_n + r . (h R_h^T + Rb_h)); rec_n is the bracket.
template <class C>
__device__ __forceinline__ C gru_lbr_cell(const GateFns& fns, C clip, C z_pre, C r_pre, C x_n, C rec_n, C h) {
  const C z = clip_activate(fns.f[0], clip, z_pre);
  const C r = clip_activate(fns.f[0], clip, r_pre);
  const C n = clip_activate(fns.f[1], clip, x_n + r * rec_n);
  return (C(1) - z) * n + z * h;
}

// GRU without linear_before_reset, last half: n = g(x_n + (r . h) R_h^T) given z.
template <class C>
__device__ __forceinline__ C gru_update(const GateFns& fns, C clip, C z, C x_n, C rec_n, C h) {
  const C n = clip_activate(fns.f[1], clip, x_n + rec_n);
  return (C(1) - z) * n + z * h;
}

// ---- the persistent path (rnn_persistent.cu) ----------------------------------------------------
// Tactics of the family: the persistent kernel with a block per SM or half as many, or the
// kernels per time step. The default (-1) is the persistent kernel where it takes the op.
inline constexpr int32_t kRnnPersistent = 0;
inline constexpr int32_t kRnnPersistentHalf = 1;
inline constexpr int32_t kRnnStepwise = 2;
// Most batch entries the persistent kernel takes (each warp keeps a sum per entry).
inline constexpr int kMaxRnnBatch = 16;

// Whether the persistent kernel runs this op with this tactic on the current device: float32 or
// float16, batch at most kMaxRnnBatch, R's rows fitting in
// the blocks' shared memory.
bool persistent_takes(OpKind kind, const RnnAttrs& a, std::span<const TensorView> in, int32_t tactic);
// The tactics to time: the persistent ones that take the op (the half-spread one where its grid
// differs), then the step-wise one; empty where the persistent kernel takes none.
std::vector<int32_t> persistent_tactics(OpKind kind, const RnnAttrs& a, std::span<const TensorView> in);
size_t persistent_workspace(OpKind kind, const RnnAttrs& a, std::span<const TensorView> in);
void run_persistent(OpKind kind, const RnnAttrs& a, std::span<const TensorView> in, std::span<const TensorView> out,
                    GpuEnv& env);

}  // namespace kiln::gpu::rnn
