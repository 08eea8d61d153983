// The persistent path of RNN, GRU and LSTM on the GPU: one GEMM projects the
// inputs of every time step and both directions (cuBLASLt, float accumulation and float output),
// then one cooperative launch runs all the time steps of both directions.
//
// Each block owns `units` hidden units of one direction: it keeps their rows of R (every gate) in
// shared memory for the whole sequence, and one thread per (batch entry, unit) keeps that cell's h
// and c in registers. A time step: read h_{t-1} of the direction (every unit, from a
// double-buffered float array in global memory) into shared memory, one warp per row of R takes
// the products with every batch entry, the owner threads apply the gates and write h_t, Y's row and
// their slot of the next buffer, and the blocks of the direction meet at a barrier (a counter in
// global memory: release on arrival, acquire while waiting) before the next step reads it. The
// launch is cooperative, so every block is resident and the barrier cannot wait on a block that
// never runs; a grid of at most one block per SM keeps that true. GRU without linear_before_reset
// needs r . h of every unit before n: its step computes z and r, writes r . h to a second buffer,
// meets the other blocks, then takes (r . h) R_h^T (two barriers a step).
//
// The numbers are the step-wise path's (rnn_internal.cuh's cell updates), with float state and
// accumulation; the order of the sums differs (biases added per step here).
#include <algorithm>

#include "runtime/cuda/nn_gemm.h"
#include "runtime/cuda/mma.cuh"
#include "runtime/cuda/nn_internal.cuh"
#include "runtime/cuda/rnn/rnn_internal.cuh"

namespace kiln::gpu::rnn {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kVec = 8;  // elements of a row each lane takes at once
constexpr size_t kGemmWorkspace = size_t{1} << 20;

__host__ __device__ constexpr size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

template <class T>
struct Args {
  RnnDims dm;
  int units = 0, blocks_per_dir = 0, hp = 0;  // hp: hidden padded to kVec
  const float* xw = nullptr;                  // [seq * batch rows in X's order, dirs * G * H]
  const T* r = nullptr;                       // R [dirs, G * H, H]
  const T* bias = nullptr;                    // B [dirs, 2 * G * H] or null
  const T *h0 = nullptr, *c0 = nullptr, *peep = nullptr;
  const int32_t* lens = nullptr;
  T *y = nullptr, *yh = nullptr, *yc = nullptr;
  float* hbuf = nullptr;      // [dirs, 2, batch, H]
  float* rhbuf = nullptr;     // [dirs, 2, batch, H]: r . h (GRU without linear_before_reset)
  unsigned* count = nullptr;  // [dirs], zero at launch
  int* error = nullptr;
  OpKind kind = OpKind::kRNN;
  bool input_forget = false, first_reversed = false, lbr = false;
  float clip = 0;
  GateFns fns[2] = {};
};

__device__ __forceinline__ void load_vec(const float* p, float (&v)[kVec]) {
  const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void load_vec(const __half* p, float (&v)[kVec]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    v[2 * i] = f.x, v[2 * i + 1] = f.y;
  }
}

// The blocks of one direction meet: every write before it is visible to every read after it.
__device__ __forceinline__ void direction_barrier(unsigned* count, unsigned target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(count, 1u);
    unsigned seen = 0;
    do {
      asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(seen) : "l"(count) : "memory");
    } while (seen < target);
  }
  __syncthreads();
}

template <class T>
__global__ void __launch_bounds__(kThreads, 1) persistent_kernel(Args<T> p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const RnnDims& dm = p.dm;
  const int H = static_cast<int>(dm.hidden), G = static_cast<int>(dm.gates), B = static_cast<int>(dm.batch);
  const int S = static_cast<int>(dm.seq), hp = p.hp;
  const int d = static_cast<int>(blockIdx.x) / p.blocks_per_dir;
  const int j0 = static_cast<int>(blockIdx.x) % p.blocks_per_dir * p.units;
  const int U = min(p.units, H - j0), rows = G * U;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const bool rev = d == 1 || p.first_reversed;
  const GateFns& fns = p.fns[d];
  const int64_t GH = static_cast<int64_t>(G) * H;

  T* w = reinterpret_cast<T*>(smem);  // [rows][hp]: row g * U + u is R's row g * H + j0 + u
  float* hs = reinterpret_cast<float*>(smem + align_up(static_cast<size_t>(G) * p.units * hp * sizeof(T), 16));
  float* acc = hs + B * hp;  // [B][rows]
  const T* rd = p.r + d * GH * H;
  for (int e = tid; e < rows * hp; e += kThreads) {
    const int rr = e / hp, k = e % hp, g = rr / U, u = rr % U;
    w[e] = k < H ? rd[(static_cast<int64_t>(g) * H + j0 + u) * H + k] : from_c<T, float>(0.0f);
  }
  for (int e = tid; e < B * hp; e += kThreads) hs[e] = 0.0f;  // the padding stays zero

  // The cell this thread owns, if any: its state, biases and peepholes stay in registers.
  const bool owner = tid < B * U;
  const int ob = owner ? tid / U : 0, oj = j0 + (owner ? tid % U : 0);
  float h = 0, c = 0, bsum[4] = {}, rbh = 0, pv[3] = {};
  int len = S;
  if (owner) {
    if (p.h0) h = to_c<T, float>(p.h0[dm.state_off(d, ob) + oj]);
    if (p.c0) c = to_c<T, float>(p.c0[dm.state_off(d, ob) + oj]);
    if (p.bias) {
      const T* bd = p.bias + d * 2 * GH;
      const bool gru = p.kind == OpKind::kGRU, lbr = gru && p.lbr;
#pragma unroll
      for (int g = 0; g < 4; ++g)
        if (g < G)
          bsum[g] = to_c<T, float>(bd[g * H + oj]) + (lbr && g == 2 ? 0.0f : to_c<T, float>(bd[GH + g * H + oj]));
      if (lbr) rbh = to_c<T, float>(bd[GH + 2 * H + oj]);
    }
    if (p.peep)
#pragma unroll
      for (int g = 0; g < 3; ++g) pv[g] = to_c<T, float>(p.peep[d * 3 * H + g * H + oj]);
    if (p.lens) {
      len = p.lens[ob];
      if ((len < 0 || len > S) && p.error) atomicCAS(p.error, 0, kGpuBadValue);
    }
  }

  // This direction's [batch, H] half of a double-buffered state array for step s, and all of one
  // into hs (other blocks wrote it: read past L1).
  auto slot = [&](float* buf, int step) { return buf + (static_cast<int64_t>(d) * 2 + (step & 1)) * B * H; };
  auto load_all = [&](const float* src) {
    for (int e = tid; e < B * H; e += kThreads) hs[e / H * hp + e % H] = __ldcg(src + e);
  };
  unsigned phase = 0;  // barriers passed
  for (int s = 0; s < S; ++s) {
    const int t = rev ? S - 1 - s : s;
    // This step's input terms (in flight while the products run).
    float xq[4] = {};
    const bool active = owner && t < len;
    if (owner) {
      const float* q = p.xw + dm.x_row(t, ob) * dm.dirs * GH + d * GH + oj;
#pragma unroll
      for (int g = 0; g < 4; ++g)
        if (g < G) xq[g] = q[g * H];
    }
    // h_{t-1} of every unit of this direction (other blocks wrote it: read past L1).
    if (s == 0) {
      for (int e = tid; e < B * H; e += kThreads) {
        const int b = e / H, k = e % H;
        hs[b * hp + k] = p.h0 ? to_c<T, float>(p.h0[dm.state_off(d, b) + k]) : 0.0f;
      }
    } else {
      load_all(slot(p.hbuf, s));
    }
    __syncthreads();
    // The products of rows [first, last) of R with hs, for every batch entry, into acc.
    auto products = [&](int first, int last) {
      for (int rr = first + warp; rr < last; rr += kWarps) {
        float a[kMaxRnnBatch] = {};
        const T* wr = w + rr * hp;
        for (int k = lane * kVec; k < hp; k += 32 * kVec) {
          float wv[kVec], hv[kVec];
          load_vec(wr + k, wv);
#pragma unroll
          for (int b = 0; b < kMaxRnnBatch; ++b) {
            if (b >= B) break;
            load_vec(hs + b * hp + k, hv);
#pragma unroll
            for (int i = 0; i < kVec; ++i) a[b] = fmaf(wv[i], hv[i], a[b]);
          }
        }
#pragma unroll
        for (int b = 0; b < kMaxRnnBatch; ++b) {
          if (b >= B) break;
#pragma unroll
          for (int o = 16; o > 0; o /= 2) a[b] += __shfl_xor_sync(0xffffffffu, a[b], o);
          if (lane == 0) acc[b * rows + rr] = a[b];
        }
      }
    };
    const float* hr = acc + ob * rows + (oj - j0);  // the owner's gate g at hr[g * U]
    if (p.kind == OpKind::kGRU && !p.lbr) {
      // n needs r . h of every unit first: z and r, a barrier, then (r . h) R_h^T.
      products(0, 2 * U);
      __syncthreads();
      float z = 0.0f;
      float* rh = slot(p.rhbuf, s);
      if (owner) {
        float r_h = 0.0f;
        if (active) {
          z = clip_activate(fns.f[0], p.clip, hr[0] + xq[0] + bsum[0]);
          r_h = clip_activate(fns.f[0], p.clip, hr[U] + xq[1] + bsum[1]) * h;
        }
        rh[ob * H + oj] = r_h;
      }
      direction_barrier(p.count + d, ++phase * static_cast<unsigned>(p.blocks_per_dir));
      load_all(rh);
      __syncthreads();
      products(2 * U, 3 * U);
      __syncthreads();
      if (active) h = gru_update(fns, p.clip, z, xq[2] + bsum[2], hr[2 * U], h);
    } else {
      products(0, rows);
      __syncthreads();
      if (active) {
        if (p.kind == OpKind::kRNN) {
          h = rnn_cell(fns, p.clip, hr[0] + xq[0] + bsum[0]);
        } else if (p.kind == OpKind::kGRU) {
          h = gru_lbr_cell(fns, p.clip, hr[0] + xq[0] + bsum[0], hr[U] + xq[1] + bsum[1], xq[2] + bsum[2],
                           hr[2 * U] + rbh, h);
        } else {
          h = lstm_cell(fns, p.clip, p.input_forget, hr[0] + xq[0] + bsum[0], hr[U] + xq[1] + bsum[1],
                        hr[2 * U] + xq[2] + bsum[2], hr[3 * U] + xq[3] + bsum[3], p.peep ? pv : nullptr, c);
        }
      }
    }
    if (owner) {
      if (p.y) p.y[dm.y_off(t, d, ob) + oj] = from_c<T, float>(active ? h : 0.0f);
      if (s + 1 < S) slot(p.hbuf, s + 1)[ob * H + oj] = h;
    }
    if (s + 1 < S) direction_barrier(p.count + d, ++phase * static_cast<unsigned>(p.blocks_per_dir));
  }
  if (owner) {
    const bool ran = len > 0;
    if (p.yh) p.yh[dm.state_off(d, ob) + oj] = from_c<T, float>(ran ? h : 0.0f);
    if (p.yc) p.yc[dm.state_off(d, ob) + oj] = from_c<T, float>(ran ? c : 0.0f);
  }
}

// The current device's properties the fit depends on (each asked once per device).
struct DeviceLimits {
  int sms = 0, smem_optin = 0;
  bool cooperative = false;
};
DeviceLimits device_limits() {
  int dev = 0;
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  return {mma::device_attribute<cudaDevAttrMultiProcessorCount>(dev),
          mma::max_block_smem(dev),
          mma::device_attribute<cudaDevAttrCooperativeLaunch>(dev) != 0};
}

struct Fit {
  int units = 0, blocks_per_dir = 0, hp = 0;
  size_t smem = 0;
};

// How the kernel splits the op over the device (spread 1: a block per SM, 2: half as many), or
// nothing where it does not take it.
std::optional<Fit> fit_of(const RnnDims& dm, DataType dt, int spread) {
  if (dt != DataType::kFloat32 && dt != DataType::kFloat16) return std::nullopt;
  if (dm.seq < 1 || dm.batch < 1 || dm.batch > kMaxRnnBatch || dm.hidden < 1 || dm.hidden > (1 << 16) ||
      dm.seq > (1 << 30) / dm.batch)
    return std::nullopt;
  const DeviceLimits lim = device_limits();
  if (!lim.cooperative || lim.sms < 1) return std::nullopt;
  const int H = static_cast<int>(dm.hidden), G = static_cast<int>(dm.gates), B = static_cast<int>(dm.batch);
  const int D = static_cast<int>(dm.dirs);
  Fit f;
  f.hp = static_cast<int>(align_up(static_cast<size_t>(H), kVec));
  const int per_dir = std::clamp(lim.sms / spread / D, 1, H);
  f.units = (H + per_dir - 1) / per_dir;
  f.blocks_per_dir = (H + f.units - 1) / f.units;
  // The barrier's counter reaches seq * blocks_per_dir (twice that for GRU without
  // linear_before_reset): it must not wrap.
  if (B * f.units > kThreads || 2 * dm.seq * f.blocks_per_dir >= (int64_t{1} << 31)) return std::nullopt;
  f.smem = align_up(static_cast<size_t>(G) * f.units * f.hp * dtype_size(dt), 16) +
           sizeof(float) * static_cast<size_t>(B) * (f.hp + G * f.units);
  if (f.smem > static_cast<size_t>(lim.smem_optin)) return std::nullopt;
  return f;
}

int spread_of(int32_t tactic) { return tactic == kRnnPersistentHalf ? 2 : 1; }

// Workspace: the input terms, the h buffers, the counters, cuBLASLt's scratch.
struct WsLayout {
  size_t xw = 0, hbuf = 0, rhbuf = 0, count = 0, gemm = 0, total = 0;
};
WsLayout ws_layout(const RnnDims& dm) {
  WsLayout l;
  const size_t state = align_up(sizeof(float) * static_cast<size_t>(dm.dirs * 2 * dm.batch * dm.hidden), 256);
  l.xw = 0;
  l.hbuf = align_up(sizeof(float) * static_cast<size_t>(dm.seq * dm.batch * dm.dirs * dm.gates * dm.hidden), 256);
  l.rhbuf = l.hbuf + state;
  l.count = l.rhbuf + state;
  l.gemm = l.count + 256;
  l.total = l.gemm + kGemmWorkspace;
  return l;
}

struct ProjectionPlan final : StepState {
  std::vector<int64_t> key;
  std::unique_ptr<GemmPlan> gemm;
};

template <class T>
void launch(const Fit& f, Args<T> args, int blocks, cudaStream_t stream) {
  auto* kernel = persistent_kernel<T>;
  if (f.smem > 48 * 1024)
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(f.smem)),
               "cudaFuncSetAttribute");
  int per_sm = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, f.smem),
             "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  if (per_sm * device_limits().sms < blocks)
    throw Error("RNN persistent kernel: " + std::to_string(blocks) + " blocks cannot all be resident");
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = f.smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  check_cuda(cudaLaunchKernelEx(&cfg, kernel, args), "cudaLaunchKernelEx (RNN persistent kernel)");
}

}  // namespace

bool persistent_takes(OpKind kind, const RnnAttrs& a, std::span<const TensorView> in, int32_t tactic) {
  return tactic != kRnnStepwise && fit_of(rnn_dims(kind, a, in), in[0].dtype, spread_of(tactic)).has_value();
}

std::vector<int32_t> persistent_tactics(OpKind kind, const RnnAttrs& a, std::span<const TensorView> in) {
  const RnnDims dm = rnn_dims(kind, a, in);
  const std::optional<Fit> full = fit_of(dm, in[0].dtype, 1);
  if (!full) return {};
  std::vector<int32_t> t{kRnnPersistent};
  if (const std::optional<Fit> half = fit_of(dm, in[0].dtype, 2); half && half->units != full->units)
    t.push_back(kRnnPersistentHalf);
  t.push_back(kRnnStepwise);
  return t;
}

size_t persistent_workspace(OpKind kind, const RnnAttrs& a, std::span<const TensorView> in) {
  return ws_layout(rnn_dims(kind, a, in)).total;
}

void run_persistent(OpKind kind, const RnnAttrs& a, std::span<const TensorView> in, std::span<const TensorView> out,
                    GpuEnv& env) {
  const char* op = ew::name_of(kind);
  const RnnDims dm = rnn_dims(kind, a, in);
  const DataType dt = in[0].dtype;
  const std::optional<Fit> f = fit_of(dm, dt, spread_of(env.tactic));
  if (!f) throw Error(std::string(op) + ": the persistent kernel does not take this op");
  const WsLayout lay = ws_layout(dm);
  if (env.workspace_bytes < lay.total)
    throw Error(std::string(op) + ": the workspace is smaller than the kernel asked for");
  auto* ws = static_cast<unsigned char*>(env.workspace);
  auto present = [](std::span<const TensorView> v, size_t i) {
    return v.size() > i && v[i].exists ? v[i].data : nullptr;
  };
  float* xw = reinterpret_cast<float*>(ws + lay.xw);

  // Input terms of every step and direction: X [seq * batch, input] times W [dirs * G * H, input]^T.
  const int64_t M = dm.seq * dm.batch, N = dm.dirs * dm.gates * dm.hidden, K = dm.input;
  if (K == 0) {
    check_cuda(cudaMemsetAsync(xw, 0, sizeof(float) * static_cast<size_t>(M * N), env.stream), "cudaMemsetAsync");
  } else {
    GemmAlignment al;
    al.a = nn::alignment_of(in[0].data, 16);
    al.b = nn::alignment_of(in[1].data, 16);
    al.c = 16;
    const std::vector<int64_t> key{static_cast<int64_t>(dt), M, N, K, al.a, al.b};
    std::unique_ptr<ProjectionPlan> local;
    ProjectionPlan& plan = nn::step_plan<ProjectionPlan>(env, key, local, [&] {
      auto pp = std::make_unique<ProjectionPlan>();
      pp->key = key;
      GemmDesc g;
      g.dtype = dt;
      g.trans_b = true;
      g.m = M, g.n = N, g.k = K;
      g.float_out = dt != DataType::kFloat32;
      pp->gemm = std::make_unique<GemmPlan>(env.cublaslt, g, al, kGemmWorkspace, 1);
      return pp;
    });
    if (plan.gemm->algo_count() > 0) {
      plan.gemm->run(env.stream, 0, 1.0, in[0].data, in[1].data, 0.0, nullptr, xw, nullptr, ws + lay.gemm,
                     kGemmWorkspace);
    } else if (dt == DataType::kFloat16) {
      gemm_nt<__half, __half, float>(M, N, K, static_cast<const __half*>(in[0].data), K,
                                     static_cast<const __half*>(in[1].data), K, xw, N, env, op);
    } else {
      gemm_nt<float, float, float>(M, N, K, static_cast<const float*>(in[0].data), K,
                                   static_cast<const float*>(in[1].data), K, xw, N, env, op);
    }
  }
  unsigned* count = reinterpret_cast<unsigned*>(ws + lay.count);
  check_cuda(cudaMemsetAsync(count, 0, sizeof(unsigned) * static_cast<size_t>(dm.dirs), env.stream), "cudaMemsetAsync");

  const std::vector<RnnGateFn> fns = rnn_gate_functions(kind, a);
  const size_t slots = static_cast<size_t>(rnn_activation_slots(kind));
  const bool lstm = kind == OpKind::kLSTM;
  auto fill = [&](auto tag) {
    using T = decltype(tag);
    Args<T> g;
    g.dm = dm;
    g.units = f->units, g.blocks_per_dir = f->blocks_per_dir, g.hp = f->hp;
    g.xw = xw;
    g.r = static_cast<const T*>(in[2].data);
    g.bias = static_cast<const T*>(present(in, 3));
    g.lens = static_cast<const int32_t*>(present(in, 4));
    g.h0 = static_cast<const T*>(present(in, 5));
    g.c0 = lstm ? static_cast<const T*>(present(in, 6)) : nullptr;
    g.peep = lstm ? static_cast<const T*>(present(in, 7)) : nullptr;
    g.y = static_cast<T*>(present(out, 0));
    g.yh = static_cast<T*>(present(out, 1));
    g.yc = lstm ? static_cast<T*>(present(out, 2)) : nullptr;
    g.hbuf = reinterpret_cast<float*>(ws + lay.hbuf);
    g.rhbuf = reinterpret_cast<float*>(ws + lay.rhbuf);
    g.lbr = a.linear_before_reset != 0;
    g.count = count;
    g.error = env.error;
    g.kind = kind;
    g.input_forget = a.input_forget != 0;
    g.first_reversed = reversed(a, 0);
    g.clip = a.clip;
    for (int64_t d = 0; d < dm.dirs; ++d) g.fns[d] = gate_fns_of(fns, slots, d);
    launch<T>(*f, g, static_cast<int>(dm.dirs) * f->blocks_per_dir, env.stream);
  };
  if (dt == DataType::kFloat16)
    fill(__half{});
  else
    fill(float{});
  check_launch(op);
}

}  // namespace kiln::gpu::rnn
