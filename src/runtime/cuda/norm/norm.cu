// LayerNormalization, InstanceNormalization, BatchNormalization (inference) and LRN on the GPU,
// with the CPU kernels' semantics (runtime/cpu/norm/norm.cpp).
//
// Layer and InstanceNormalization normalize rows (the trailing axes from `axis`; an [N, C] plane):
// two passes, mean then the mean of squared deviations, in float (the CPU uses double, so the last
// bits may differ; float64 computes in double). A row stays in registers between the passes, so X
// is read once: with 16-byte loads (where the row length and pointers allow) rows up to 1024
// elements (2048 for float16) take one warp each, as BERT's [*, 768], and up to 8192 (16384) take
// 2 to 8 warps; without vectors a warp holds up to 1024 elements. Longer rows take a block each and
// read X three times.
// BatchNormalization folds its parameters per channel into y = x * k + b, computed in double by a
// small kernel as on the CPU (its four parameters may each be any float type), then applies it with
// an uncontracted multiply and add in X's compute type: the CPU's bits. LRN sums its channel window
// in float and calls powf (the CPU: double; float64 in double). X may have any float type, as on
// the CPU.
#include <cmath>
#include <string>

#include "runtime/cuda/dependent_launch.cuh"
#include "runtime/cuda/device_math.cuh"
#include "runtime/cuda/elementwise/elementwise_internal.cuh"

namespace kiln::gpu {

namespace norm {

namespace {

using ew::Compute;
using ew::FloatAcc;
using ew::kThreads;
using ew::load;
using ew::store;

// ---- Layer / InstanceNormalization ---------------------------------------------------------------
// How a LayerNormalization parameter is indexed by the position j in the row.
enum class ParamMode : int { kFull, kOne, kBroadcast, kAbsent };

constexpr int kMaxNormDims = 8;

struct NormArgs {
  int64_t rows = 0;
  int d = 0;  // row length
  float eps = 0;
  const void* scale = nullptr;  // X's element type
  const void* bias = nullptr;
  ParamMode smode = ParamMode::kAbsent, bmode = ParamMode::kAbsent;
  // kBroadcast: the normalized shape and each parameter's strides in it (0 along broadcast dims).
  int rank = 0;
  int64_t shape[kMaxNormDims] = {};
  int64_t sstride[kMaxNormDims] = {}, bstride[kMaxNormDims] = {};
  int64_t channels = 0;     // > 0: InstanceNormalization, parameters per channel (row % channels)
  bool vec_params = false;  // Scale (and B) whole rows, 16-byte aligned: read as vectors
  void* mean = nullptr;     // LayerNormalization's optional statistics outputs
  void* inv_std = nullptr;
  FloatCode mean_code = FloatCode::kF32, inv_code = FloatCode::kF32;
};

// F (float, or double for float64) is where the kernels compute.
template <class T, class F = FloatAcc<T>>
__device__ __forceinline__ F param(const NormArgs& a, const void* p, ParamMode m, const int64_t* stride, int64_t j) {
  const T* t = static_cast<const T*>(p);
  switch (m) {
    case ParamMode::kFull: return load(t[j]);
    case ParamMode::kOne: return load(t[0]);
    case ParamMode::kBroadcast: {
      int64_t off = 0;
      for (int k = a.rank - 1; k >= 0; --k) {
        const int64_t q = j / a.shape[k];
        off += (j - q * a.shape[k]) * stride[k];
        j = q;
      }
      return load(t[off]);
    }
    case ParamMode::kAbsent: break;
  }
  return F(0);
}

// The output of element j of row `row` (channel factors ck, cb: InstanceNormalization).
template <class T, class F>
__device__ __forceinline__ F norm_out(const NormArgs& a, F v, F mu, F inv, F ck, F cb, int64_t j) {
  if (a.channels > 0) return (v - mu) * ck + cb;
  const F s = param<T>(a, a.scale, a.smode, a.sstride, j);
  const F b = param<T>(a, a.bias, a.bmode, a.bstride, j);
  return (v - mu) * inv * s + b;
}

template <class T, class F>
__device__ __forceinline__ void row_factors(const NormArgs& a, int64_t row, F inv, F* ck, F* cb) {
  if (a.channels > 0) {
    const int64_t c = row % a.channels;
    *ck = load(static_cast<const T*>(a.scale)[c]) * inv;
    *cb = load(static_cast<const T*>(a.bias)[c]);
  }
}

__device__ __forceinline__ void write_stats(const NormArgs& a, int64_t row, double mu, double inv) {
  if (a.mean) store_any(a.mean, a.mean_code, row, mu);
  if (a.inv_std) store_any(a.inv_std, a.inv_code, row, inv);
}

// W warps per row (W = 1: no shared memory, no barrier), or with W = 1 L lanes per row (L = 4, 8,
// 16: 32 / L rows a warp, for short rows such as Swin's 96 channels, which left 20 of a warp's 32
// lanes idle and ran at a quarter of the memory's rate); thread t of the row's L * W holds NV
// vectors of V elements: elements (k * L * W + t) * V + e. With vectors (V > 1), Scale and B are
// read as vectors too when they are whole rows (vec_params).
template <class T, int V, int NV, int W, int L = 32>
__global__ void __launch_bounds__(kThreads)
    norm_reg_kernel(const T* __restrict__ x, T* __restrict__ y, const __grid_constant__ NormArgs a) {
  static_assert(L == 32 || W == 1, "lanes per row below 32 with one warp per row only");
  using VecT = ew::Vec<T, V>;
  using F = FloatAcc<T>;
  constexpr int kRowsPerWarp = 32 / L, kRowsPerBlock = kThreads / 32 / W * kRowsPerWarp, kStep = L * W * V;
  __shared__ F red[2][kThreads / 32];
  wait_for_inputs();  // a programmatic dependent launch (launch_norm)
  start_next_kernel();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp / W * kRowsPerWarp + lane / L;
  const bool live = row < a.rows;
  if constexpr (W == 1 && L == 32) {
    if (!live) return;  // the whole warp: the shuffles below see every lane
  }
  const int t0 = ((warp % W) * L + lane % L) * V;
  const int64_t base = (live ? row : 0) * a.d;
  // The row's sum of v over its L lanes and W warps, in a fixed order.
  auto row_sum = [&](F v, F* buf) {
    v = group_sum<L>(v);
    if constexpr (W > 1) {
      if (lane == 0) buf[warp] = v;
      __syncthreads();
      v = 0;
#pragma unroll
      for (int w = 0; w < W; ++w) v += buf[warp / W * W + w];
    }
    return v;
  };
  F v[NV][V];
  F sum = 0;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int j = k * kStep + t0;
    if (live && j < a.d) {  // d % V == 0: the whole vector is inside
      const VecT w = *reinterpret_cast<const VecT*>(x + base + j);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        v[k][e] = load(w.v[e]);
        sum += v[k][e];
      }
    }
  }
  const F mu = row_sum(sum, red[0]) / static_cast<F>(a.d);
  F sq = 0;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    if (live && k * kStep + t0 < a.d) {
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const F dv = v[k][e] - mu;
        sq += dv * dv;
      }
    }
  }
  const F inv = F(1) / sqrt(row_sum(sq, red[1]) / static_cast<F>(a.d) + static_cast<F>(a.eps));
  if (!live) return;
  F ck = 0, cb = 0;
  row_factors<T>(a, row, inv, &ck, &cb);
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int j = k * kStep + t0;
    if (j < a.d) {
      VecT w;
      if (V > 1 && a.vec_params) {
        const VecT sv = *reinterpret_cast<const VecT*>(static_cast<const T*>(a.scale) + j);
        VecT bv;
        if (a.bias) bv = *reinterpret_cast<const VecT*>(static_cast<const T*>(a.bias) + j);
#pragma unroll
        for (int e = 0; e < V; ++e)
          w.v[e] = store<T>((v[k][e] - mu) * inv * static_cast<F>(load(sv.v[e])) +
                            (a.bias ? static_cast<F>(load(bv.v[e])) : F(0)));
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e) w.v[e] = store<T>(norm_out<T>(a, v[k][e], mu, inv, ck, cb, j + e));
      }
      *reinterpret_cast<VecT*>(y + base + j) = w;
    }
  }
  if (t0 == 0) write_stats(a, row, mu, inv);
}

// One block per row, any length. F: the type the statistics are computed in (double for
// LayerNormalization's stash_type float64).
template <class T, class F = FloatAcc<T>>
__global__ void __launch_bounds__(1024)
    norm_block_kernel(const T* __restrict__ x, T* __restrict__ y, const __grid_constant__ NormArgs a) {
  __shared__ F scratch[32];
  wait_for_inputs();  // a programmatic dependent launch (launch_norm)
  start_next_kernel();
  const int64_t row = blockIdx.x;
  const T* xr = x + row * a.d;
  T* yr = y + row * a.d;
  F sum = 0;
  for (int j = threadIdx.x; j < a.d; j += blockDim.x) sum += load(xr[j]);
  const F mu = block_sum(sum, scratch) / static_cast<F>(a.d);
  F sq = 0;
  for (int j = threadIdx.x; j < a.d; j += blockDim.x) {
    const F dv = load(xr[j]) - mu;
    sq += dv * dv;
  }
  const F inv = F(1) / sqrt(block_sum(sq, scratch) / static_cast<F>(a.d) + static_cast<F>(a.eps));
  F ck = 0, cb = 0;
  row_factors<T>(a, row, inv, &ck, &cb);
  for (int j = threadIdx.x; j < a.d; j += blockDim.x)
    yr[j] = store<T>(norm_out<T>(a, static_cast<F>(load(xr[j])), mu, inv, ck, cb, j));
  if (threadIdx.x == 0) write_stats(a, row, mu, inv);
}

template <class T, int V, int NV, int W, int L = 32>
void reg_launch(const T* x, T* y, const NormArgs& a, cudaStream_t s) {
  constexpr int kRowsPerBlock = kThreads / 32 / W * (32 / L);
  const auto blocks = static_cast<unsigned>((a.rows + kRowsPerBlock - 1) / kRowsPerBlock);
  launch_dependent<norm_reg_kernel<T, V, NV, W, L>>(dim3(blocks), kThreads, 0, s, 1, "normalization", x, y, a);
}

// Picks the kernel: rows held in registers (by 1 to 8 warps, vectorized where the row length and
// pointers allow) while they fit, else a block per row reading X three times. double_stats: the
// statistics in double (the block kernel).
template <class T>
void launch_norm(const T* x, T* y, NormArgs a, cudaStream_t s, bool double_stats = false) {
  if (a.rows == 0) return;
  const int threads = a.d >= 16384 ? 1024 : a.d >= 4096 ? 512 : 256;
  if (double_stats) {
    launch_dependent<norm_block_kernel<T, double>>(dim3(static_cast<unsigned>(a.rows)), threads, 0, s, 1,
                                                   "normalization", x, y, a);
    return;
  }
  constexpr int kV = ew::kVecBytes / sizeof(T);
  const bool vec = a.d % kV == 0 && ew::aligned_to(x, ew::kVecBytes) && ew::aligned_to(y, ew::kVecBytes);
  const int64_t vecs = (a.d + kV - 1) / kV, per_lane = (a.d + 31) / 32;
  a.vec_params =
      vec && a.channels == 0 && a.smode == ParamMode::kFull && ew::aligned_to(a.scale, ew::kVecBytes) &&
      (a.bmode == ParamMode::kAbsent || (a.bmode == ParamMode::kFull && ew::aligned_to(a.bias, ew::kVecBytes)));
  if (vec && vecs <= 32 * 8) {
    if (vecs <= 4)
      reg_launch<T, kV, 1, 1, 4>(x, y, a, s);
    else if (vecs <= 8)
      reg_launch<T, kV, 1, 1, 8>(x, y, a, s);
    else if (vecs <= 16)
      reg_launch<T, kV, 1, 1, 16>(x, y, a, s);
    else if (vecs <= 32)
      reg_launch<T, kV, 1, 1>(x, y, a, s);
    else if (vecs <= 64)
      reg_launch<T, kV, 2, 1>(x, y, a, s);
    else if (vecs <= 128)
      reg_launch<T, kV, 4, 1>(x, y, a, s);
    else
      reg_launch<T, kV, 8, 1>(x, y, a, s);
  } else if (vec && vecs <= 2 * 32 * 8) {
    reg_launch<T, kV, 8, 2>(x, y, a, s);
  } else if (vec && vecs <= 4 * 32 * 8) {
    reg_launch<T, kV, 8, 4>(x, y, a, s);
  } else if (vec && vecs <= 8 * 32 * 8) {
    reg_launch<T, kV, 8, 8>(x, y, a, s);
  } else if (!vec && per_lane <= 32) {
    if (per_lane <= 2)
      reg_launch<T, 1, 2, 1>(x, y, a, s);
    else if (per_lane <= 8)
      reg_launch<T, 1, 8, 1>(x, y, a, s);
    else
      reg_launch<T, 1, 32, 1>(x, y, a, s);
  } else {
    launch_dependent<norm_block_kernel<T>>(dim3(static_cast<unsigned>(a.rows)), threads, 0, s, 1, "normalization", x,
                                           y, a);
  }
}

void check_rows(const NormArgs& a, int64_t d, const char* op) {
  if (d >= (int64_t{1} << 31) || a.rows >= (int64_t{1} << 31))
    throw Error(std::string(op) + ": rows too long or too many for the CUDA backend");
}

bool wanted(std::span<const TensorView> out, size_t i) { return out.size() > i && out[i].exists && out[i].data; }

void layer_norm_gpu(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                    GpuEnv& env) {
  const auto& la = std::get<LayerNormAttrs>(attrs);
  const TensorView& X = in[0];
  const int64_t r = static_cast<int64_t>(X.rank());
  const int64_t axis = normalize_axis(la.axis, r);
  int64_t rows = 1, d = 1;
  for (int64_t i = 0; i < r; ++i) (i < axis ? rows : d) *= X.shape[i];
  NormArgs a;
  a.rows = rows;
  a.eps = la.epsilon;
  check_rows(a, d, "LayerNormalization");
  a.d = static_cast<int>(d);
  const std::span<const int64_t> norm = X.shape.subspan(static_cast<size_t>(axis));
  // Broadcast parameters: the normalized shape with each parameter's strides (right-aligned).
  auto mode_of = [&](const TensorView* p, int64_t* stride) {
    if (!p) return ParamMode::kAbsent;
    const int64_t n = p->numel();
    if (n == d) return ParamMode::kFull;  // broadcasting to `norm` with d elements: the same layout
    if (n == 1) return ParamMode::kOne;
    if (norm.size() > static_cast<size_t>(kMaxNormDims))
      throw Error("LayerNormalization: the CUDA backend broadcasts Scale and B over at most 8 axes");
    const size_t lead = norm.size() - p->rank();
    int64_t acc = 1;
    for (size_t i = p->rank(); i-- > 0;) {
      stride[lead + i] = p->shape[i] == 1 ? 0 : acc;
      acc *= p->shape[i];
    }
    return ParamMode::kBroadcast;
  };
  a.rank = static_cast<int>(std::min(norm.size(), static_cast<size_t>(kMaxNormDims)));
  for (int i = 0; i < a.rank; ++i) a.shape[i] = norm[i];
  a.scale = in[1].data;
  a.smode = mode_of(&in[1], a.sstride);
  const bool has_bias = in.size() > 2 && in[2].exists;
  a.bias = has_bias ? in[2].data : nullptr;
  a.bmode = mode_of(has_bias ? &in[2] : nullptr, a.bstride);
  if (wanted(out, 1)) {
    a.mean = out[1].data;
    a.mean_code = float_code(out[1].dtype, "LayerNormalization Mean");
  }
  if (wanted(out, 2)) {
    a.inv_std = out[2].data;
    a.inv_code = float_code(out[2].dtype, "LayerNormalization InvStdDev");
  }
  ew::dispatch_ew_float(X.dtype, "LayerNormalization", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // stash_type is the precision of the statistics: float64 computes them in double.
    launch_norm<T>(static_cast<const T*>(X.data), static_cast<T*>(out[0].data), a, env.stream,
                   la.stash_type == 11 && !std::is_same_v<T, double>);
  });
  check_launch("LayerNormalization");
}

void instance_norm_gpu(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                       GpuEnv& env) {
  const TensorView& X = in[0];
  NormArgs a;
  a.channels = X.shape[1];
  a.rows = X.shape[0] * X.shape[1];
  if (a.rows == 0 || X.numel() == 0) return;
  const int64_t d = X.numel() / a.rows;
  check_rows(a, d, "InstanceNormalization");
  a.d = static_cast<int>(d);
  a.eps = std::get<EpsilonAttrs>(attrs).epsilon;
  a.scale = in[1].data;
  a.bias = in[2].data;
  ew::dispatch_ew_float(X.dtype, "InstanceNormalization", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_norm<T>(static_cast<const T*>(X.data), static_cast<T*>(out[0].data), a, env.stream);
  });
  check_launch("InstanceNormalization");
}

// ---- BatchNormalization ----------------------------------------------------------------------------
struct BnParams {
  const void* p[4];  // scale, B, mean, var
  FloatCode code[4];
  double eps;
};

// A channel's folded factors in X's compute type C (the CPU's static_cast<C>(k)).
template <class C>
struct Fold {
  C k, b;
};

// k = scale / sqrt(var + eps), b = B - mean * k, in double as on the CPU (uncontracted).
template <class C>
__global__ void bn_fold_kernel(BnParams p, Fold<C>* kb, int64_t channels) {
  for (int64_t c = ew::global_thread(); c < channels; c += ew::grid_threads()) {
    const double s = load_any(p.p[0], p.code[0], c), b = load_any(p.p[1], p.code[1], c);
    const double m = load_any(p.p[2], p.code[2], c), v = load_any(p.p[3], p.code[3], c);
    const double k = __ddiv_rn(s, __dsqrt_rn(__dadd_rn(v, p.eps)));
    kb[c] = Fold<C>{static_cast<C>(k), static_cast<C>(__dsub_rn(b, __dmul_rn(m, k)))};
  }
}

// y = x * k + b per element; V elements per step, all in one channel (sp % V == 0).
template <class T, int V, class I>
__global__ void __launch_bounds__(kThreads)
    bn_apply_kernel(const T* __restrict__ x, T* __restrict__ y, const Fold<Compute<T>>* __restrict__ kb, I steps, I sp,
                    I channels) {
  using VecT = ew::Vec<T, V>;
  const I stride = static_cast<I>(ew::grid_threads());
  for (I i = static_cast<I>(ew::global_thread()); i < steps; i += stride) {
    const Fold<Compute<T>> f = kb[(i * V / sp) % channels];
    const VecT w = reinterpret_cast<const VecT*>(x)[i];
    VecT o;
#pragma unroll
    for (int t = 0; t < V; ++t) o.v[t] = store<T>(mul_add_nc(f.b, load(w.v[t]), f.k));
    reinterpret_cast<VecT*>(y)[i] = o;
  }
}

size_t bn_workspace(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView>, GpuEnv&) {
  return static_cast<size_t>(in[0].shape[1]) * sizeof(Fold<double>);
}

template <class T, int V>
void bn_apply(const T* x, T* y, const Fold<Compute<T>>* kb, int64_t n, int64_t sp, int64_t c, cudaStream_t s) {
  const int64_t steps = n / V;
  if (n < (int64_t{1} << 31))
    bn_apply_kernel<T, V, uint32_t><<<ew::blocks_for(steps), kThreads, 0, s>>>(
        x, y, kb, static_cast<uint32_t>(steps), static_cast<uint32_t>(sp), static_cast<uint32_t>(c));
  else
    bn_apply_kernel<T, V, uint64_t><<<ew::blocks_for(steps), kThreads, 0, s>>>(
        x, y, kb, static_cast<uint64_t>(steps), static_cast<uint64_t>(sp), static_cast<uint64_t>(c));
}

void batch_norm_gpu(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                    GpuEnv& env) {
  const auto& a = std::get<BatchNormAttrs>(attrs);
  if (a.training_mode != 0)
    throw Error(
        "BatchNormalization: training-mode BatchNormalization is not supported in an inference engine; "
        "export the model in eval mode");
  const TensorView& X = in[0];
  const int64_t n = X.numel(), c = X.shape[1];
  if (n == 0) return;
  const int64_t sp = n / (X.shape[0] * c);
  if (env.workspace_bytes < static_cast<size_t>(c) * sizeof(Fold<double>))
    throw Error("BatchNormalization: the workspace is smaller than the entry asked for");
  BnParams p;
  for (int i = 0; i < 4; ++i) {
    p.p[i] = in[i + 1].data;
    p.code[i] = float_code(in[i + 1].dtype, "BatchNormalization");
  }
  p.eps = static_cast<double>(a.epsilon);
  ew::dispatch_ew_float(X.dtype, "BatchNormalization", [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto* kb = static_cast<Fold<Compute<T>>*>(env.workspace);
    bn_fold_kernel<<<ew::blocks_for(c), kThreads, 0, env.stream>>>(p, kb, c);
    constexpr int kV = ew::kVecBytes / sizeof(T);
    const auto* x = static_cast<const T*>(X.data);
    auto* y = static_cast<T*>(out[0].data);
    if (sp % kV == 0 && ew::aligned_to(x, ew::kVecBytes) && ew::aligned_to(y, ew::kVecBytes))
      bn_apply<T, kV>(x, y, kb, n, sp, c, env.stream);
    else
      bn_apply<T, 1>(x, y, kb, n, sp, c, env.stream);
  });
  check_launch("BatchNormalization");
}

// ---- LRN ---------------------------------------------------------------------------------------
template <class T, class I>
__global__ void __launch_bounds__(kThreads)
    lrn_kernel(const T* __restrict__ x, T* __restrict__ y, I n, I sp, I channels, int lo_off, int hi_off, double scale,
               float bias, float beta) {
  using F = FloatAcc<T>;
  const I stride = static_cast<I>(ew::grid_threads());
  for (I i = static_cast<I>(ew::global_thread()); i < n; i += stride) {
    const I plane = i / sp, j = i - plane * sp;
    const I ch = plane % channels;
    const T* xs = x + (plane - ch) * sp + j;  // this position in channel 0 of the image
    const I c0 = ch >= static_cast<I>(lo_off) ? ch - lo_off : 0;
    const I c1 = ch + static_cast<I>(hi_off) < channels ? ch + static_cast<I>(hi_off) : channels - 1;
    F sq = 0;
    for (I cc = c0; cc <= c1; ++cc) {
      const F v = load(xs[cc * sp]);
      sq += v * v;
    }
    y[i] = store<T>(load(x[i]) / pow(F(bias) + F(scale) * sq, F(beta)));
  }
}

void lrn_gpu(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out, GpuEnv& env) {
  const auto& a = std::get<LrnAttrs>(attrs);
  const TensorView& X = in[0];
  const int64_t n = X.numel();
  if (n == 0) return;
  const int64_t c = X.shape[1], sp = n / (X.shape[0] * c);
  if (a.size > (int64_t{1} << 30)) throw Error("LRN: size too large for the CUDA backend");
  const int lo_off = static_cast<int>((a.size - 1) / 2), hi_off = static_cast<int>(a.size / 2);
  const double scale = static_cast<double>(a.alpha) / static_cast<double>(a.size);
  ew::dispatch_ew_float(X.dtype, "LRN", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto* x = static_cast<const T*>(X.data);
    auto* y = static_cast<T*>(out[0].data);
    if (n < (int64_t{1} << 31))
      lrn_kernel<T, uint32_t><<<ew::blocks_for(n), kThreads, 0, env.stream>>>(
          x, y, static_cast<uint32_t>(n), static_cast<uint32_t>(sp), static_cast<uint32_t>(c), lo_off, hi_off, scale,
          a.bias, a.beta);
    else
      lrn_kernel<T, uint64_t><<<ew::blocks_for(n), kThreads, 0, env.stream>>>(
          x, y, static_cast<uint64_t>(n), static_cast<uint64_t>(sp), static_cast<uint64_t>(c), lo_off, hi_off, scale,
          a.bias, a.beta);
  });
  check_launch("LRN");
}

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kLayerNormalization, layer_norm_gpu},
    {OpKind::kInstanceNormalization, instance_norm_gpu},
    {OpKind::kBatchNormalization, batch_norm_gpu, bn_workspace},
    {OpKind::kLRN, lrn_gpu},
};

}  // namespace

}  // namespace norm

// The norm family's table.
std::span<const GpuKernelEntry> norm_gpu_kernels() { return norm::kEntries; }

}  // namespace kiln::gpu
