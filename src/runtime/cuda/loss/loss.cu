// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss on the GPU, the CPU kernels' semantics
// (runtime/cpu/loss/loss.cpp): per sample (n, d1..dk) with class c = target[n, d..]
//   l = -weight[c] * v[n, c, d..]   (v = input for NLL, log_softmax(scores, axis 1) for SCE)
// with l = 0 and weight 0 where c == ignore_index; reduction none keeps l per sample, sum adds
// them, mean divides the sum by the sum of the applied weights (0/0 = NaN when nothing counts).
// Everything is computed in double like the CPU, so results agree to double rounding.
//
// One thread per sample (x viewed as [N, C, D]; neighbouring threads take neighbouring d, so the
// class loop reads coalesced when D is large) computes its log-sum-exp, the optional log_prob
// column and its loss. With a reduction the per-sample losses and weights go to the workspace
// (doubles) and one block sums them in a fixed order. A class outside [0, C) sets
// kGpuIndexOutOfRange; that sample reads nothing.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "runtime/cuda/device_math.cuh"
#include "runtime/cuda/elementwise/elementwise_internal.cuh"

namespace kiln::gpu {

namespace loss {

namespace {

constexpr int kSumThreads = 1024;

template <class T, class L>
__global__ void __launch_bounds__(ew::kThreads)
    loss_sample_kernel(const T* x, const L* target, const T* weight, T* log_prob, T* out, double* ws_loss,
                       double* ws_weight, int64_t N, int64_t C, int64_t D, bool softmax, bool has_ignore,
                       int64_t ignore_index, int* err) {
  const int64_t total = N * D;
  for (int64_t i = ew::global_thread(); i < total; i += ew::grid_threads()) {
    const int64_t n = i / D, d = i - n * D;
    const T* xn = x + n * C * D + d;
    double lse = 0;
    if (softmax) {
      double mx = -INFINITY, s = 0;
      for (int64_t c = 0; c < C; ++c) {
        const double v = to_d(xn[c * D]);
        mx = mx < v ? v : mx;  // std::max(mx, v)
      }
      for (int64_t c = 0; c < C; ++c) s += exp(to_d(xn[c * D]) - mx);
      lse = mx + log(s);
      if (log_prob) {
        T* lp = log_prob + n * C * D + d;
        for (int64_t c = 0; c < C; ++c) lp[c * D] = from_d<T>(to_d(xn[c * D]) - lse);
      }
    }
    const int64_t label = static_cast<int64_t>(target[i]);
    double l = 0, w = 0;
    if (!(has_ignore && label == ignore_index)) {
      if (label < 0 || label >= C) {
        set_error(err, kGpuIndexOutOfRange);
      } else {
        w = weight ? to_d(weight[label]) : 1.0;
        double v = to_d(xn[label * D]);
        if (softmax) v -= lse;
        l = -w * v;
      }
    }
    if (ws_loss) {
      ws_loss[i] = l;
      ws_weight[i] = w;
    } else {
      out[i] = from_d<T>(l);
    }
  }
}

// One block: sum of loss and weight over n samples, then out = sum or sum / weight_sum.
template <class T>
__global__ void __launch_bounds__(kSumThreads)
    loss_reduce_kernel(const double* loss, const double* weight, int64_t n, bool mean, T* out) {
  __shared__ double sl[kSumThreads], sw[kSumThreads];
  const int t = static_cast<int>(threadIdx.x);
  double a = 0, b = 0;
  for (int64_t i = t; i < n; i += kSumThreads) {
    a += loss[i];
    b += weight[i];
  }
  sl[t] = a;
  sw[t] = b;
  __syncthreads();
  for (int s = kSumThreads / 2; s > 0; s >>= 1) {
    if (t < s) {
      sl[t] += sl[t + s];
      sw[t] += sw[t + s];
    }
    __syncthreads();
  }
  if (t == 0) out[0] = from_d<T>(mean ? sl[0] / sw[0] : sl[0]);
}

struct LossShape {
  int64_t N, C, D;
};
LossShape loss_shape(const TensorView& x) {
  LossShape s{x.shape[0], x.shape[1], 1};
  for (size_t i = 2; i < x.rank(); ++i) s.D *= x.shape[i];
  return s;
}

}  // namespace

size_t loss_workspace(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView>,
                      GpuEnv&) {
  if (std::get<LossAttrs>(attrs).reduction == LossReduction::kNone) return 0;
  const LossShape s = loss_shape(in[0]);
  return static_cast<size_t>(2 * s.N * s.D) * sizeof(double);
}

void loss_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                 GpuEnv& env) {
  const auto& a = std::get<LossAttrs>(attrs);
  const bool softmax = kind == OpKind::kSoftmaxCrossEntropyLoss;
  const char* name = ew::name_of(kind);
  const LossShape s = loss_shape(in[0]);
  const int64_t samples = s.N * s.D;
  const bool reduce = a.reduction != LossReduction::kNone;
  double* ws_loss = nullptr;
  double* ws_weight = nullptr;
  if (reduce) {
    if (env.workspace_bytes < static_cast<size_t>(2 * samples) * sizeof(double))
      throw Error(std::string(name) + ": the workspace is smaller than the kernel asked for");
    ws_loss = static_cast<double*>(env.workspace);
    ws_weight = ws_loss + samples;
  }
  ew::dispatch_ew_float(in[0].dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* weight = in.size() > 2 && in[2].exists ? static_cast<const T*>(in[2].data) : nullptr;
    T* log_prob = softmax && out.size() > 1 && out[1].exists ? static_cast<T*>(out[1].data) : nullptr;
    auto run = [&](auto ltag) {
      using L = typename decltype(ltag)::type;
      if (samples > 0) {
        loss_sample_kernel<T, L><<<ew::blocks_for(samples), ew::kThreads, 0, env.stream>>>(
            static_cast<const T*>(in[0].data), static_cast<const L*>(in[1].data), weight, log_prob,
            static_cast<T*>(out[0].data), ws_loss, ws_weight, s.N, s.C, s.D, softmax, a.ignore_index != kNoIgnoreIndex,
            a.ignore_index, env.error);
        check_launch(name);
      }
      if (reduce) {
        loss_reduce_kernel<T><<<1, kSumThreads, 0, env.stream>>>(
            ws_loss, ws_weight, samples, a.reduction == LossReduction::kMean, static_cast<T*>(out[0].data));
        check_launch(name);
      }
    };
    if (in[1].dtype == DataType::kInt32)
      run(Tag<int32_t>{});
    else if (in[1].dtype == DataType::kInt64)
      run(Tag<int64_t>{});
    else
      ew::throw_gpu_dtype(in[1].dtype, name);
  });
}

namespace {

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kNegativeLogLikelihoodLoss, loss_kernel, loss_workspace},
    {OpKind::kSoftmaxCrossEntropyLoss, loss_kernel, loss_workspace},
};

}  // namespace

}  // namespace loss

// The loss family's table.
std::span<const GpuKernelEntry> loss_gpu_kernels() { return loss::kEntries; }

}  // namespace kiln::gpu
