// CPU kernels of the loss family: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <vector>

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

template <class T>
double to_d(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    return static_cast<float>(v);
  else
    return static_cast<double>(v);
}
template <class T>
T from_d(double v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

// ---- losses ----------------------------------------------------------------------------------
// Both losses pick, per sample (n, d1..dk), the value at the target class c = target[n, d..]:
//   l = -weight[c] * v[n, c, d..]   (v = input for NLL, log_softmax(scores, axis 1) for SCE)
// with l = 0 and weight 0 where c == ignore_index. reduction: none keeps l per sample, sum adds
// them, mean divides the sum by the sum of the applied weights (the sample count without weights).
// Accumulation is in double; a class index outside [0, C) is an error.

// x viewed as [N, C, D]; one task covers n and a block of d.
constexpr int64_t kDBlock = 512;

template <class T, class L>
void loss_typed(bool softmax, const LossAttrs& a, std::span<const TensorView> in, std::span<const TensorView> out,
                KernelEnv& env) {
  const TensorView& x = in[0];
  const int64_t N = x.shape[0], C = x.shape[1];
  int64_t D = 1;
  for (size_t i = 2; i < x.rank(); ++i) D *= x.shape[i];
  const T* px = x.as<const T>();
  const L* pt = in[1].as<const L>();
  const T* pw = in.size() > 2 && in[2].exists ? in[2].as<const T>() : nullptr;
  T* log_prob = softmax && out.size() > 1 ? out[1].as<T>() : nullptr;
  const bool has_ignore = a.ignore_index != kNoIgnoreIndex;
  const bool reduce = a.reduction != LossReduction::kNone;
  std::vector<double> loss(reduce ? static_cast<size_t>(N * D) : 0), weight(loss.size());
  T* pl = out[0].as<T>();
  const int64_t blocks = (D + kDBlock - 1) / kDBlock;
  std::atomic<bool> bad{false};
  std::atomic<int64_t> bad_label{0};
  parallel(env, N * blocks, kDBlock * std::max<int64_t>(C, 1) * (softmax ? 8 : 1), [&](int64_t t0, int64_t t1) {
    std::vector<double> mx(softmax ? kDBlock : 0), lse(mx.size());
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n = t / blocks, d0 = (t % blocks) * kDBlock, d1 = std::min(D, d0 + kDBlock), nd = d1 - d0;
      const T* xn = px + n * C * D;
      if (softmax) {
        // log_softmax over c for each d: x - max - log(sum exp(x - max)), rows walked along d.
        std::fill(mx.begin(), mx.begin() + nd, -INFINITY);
        std::fill(lse.begin(), lse.begin() + nd, 0.0);
        for (int64_t c = 0; c < C; ++c)
          for (int64_t d = 0; d < nd; ++d) mx[d] = std::max(mx[d], to_d(xn[c * D + d0 + d]));
        for (int64_t c = 0; c < C; ++c)
          for (int64_t d = 0; d < nd; ++d) lse[d] += std::exp(to_d(xn[c * D + d0 + d]) - mx[d]);
        for (int64_t d = 0; d < nd; ++d) lse[d] = mx[d] + std::log(lse[d]);
        if (log_prob) {
          T* lp = log_prob + n * C * D;
          for (int64_t c = 0; c < C; ++c)
            for (int64_t d = 0; d < nd; ++d) lp[c * D + d0 + d] = from_d<T>(to_d(xn[c * D + d0 + d]) - lse[d]);
        }
      }
      for (int64_t d = d0; d < d1; ++d) {
        const int64_t i = n * D + d;
        const int64_t label = static_cast<int64_t>(pt[i]);
        double l = 0, w = 0;
        if (!(has_ignore && label == a.ignore_index)) {
          if (label < 0 || label >= C) {
            bad = true;  // reported after the loop
            bad_label = label;
            continue;
          }
          w = pw ? to_d(pw[label]) : 1.0;
          double v = to_d(xn[label * D + d]);
          if (softmax) v -= lse[d - d0];
          l = -w * v;
        }
        if (reduce) {
          loss[i] = l;
          weight[i] = w;
        } else {
          pl[i] = from_d<T>(l);
        }
      }
    }
  });
  if (bad)
    throw Error(std::string(softmax ? "SoftmaxCrossEntropyLoss" : "NegativeLogLikelihoodLoss") + ": target class " +
                std::to_string(bad_label.load()) + " is outside [0, " + std::to_string(C) + ")");
  if (!reduce) return;
  double s = 0, sw = 0;
  for (size_t i = 0; i < loss.size(); ++i) {
    s += loss[i];
    sw += weight[i];
  }
  // mean over zero applied weight is 0/0 = NaN, as in the ONNX reference and PyTorch.
  pl[0] = from_d<T>(a.reduction == LossReduction::kSum ? s : s / sw);
}

void loss_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                 KernelEnv& env) {
  const auto& a = std::get<LossAttrs>(attrs);
  const bool softmax = kind == OpKind::kSoftmaxCrossEntropyLoss;
  dispatch_float(in[0].dtype, op_name(kind).data(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (in[1].dtype == DataType::kInt32)
      loss_typed<T, int32_t>(softmax, a, in, out, env);
    else
      loss_typed<T, int64_t>(softmax, a, in, out, env);
  });
}

constexpr KernelEntry kEntries[] = {
    {OpKind::kNegativeLogLikelihoodLoss, loss_kernel},
    {OpKind::kSoftmaxCrossEntropyLoss, loss_kernel},
};

}  // namespace

std::span<const KernelEntry> loss_kernels() { return kEntries; }

}  // namespace kiln::cpu
