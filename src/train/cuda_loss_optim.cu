// GPU training backend: softmax cross-entropy, device metrics, and the multi-tensor optimizer steps
// with mixed precision's dynamic loss scale.
//
// The loss: one warp per row (max, then the sum of exponentials in double, as the CPU takes it),
// rows' losses summed per block and the blocks' sums in block order by the last block, which also
// writes the mean and [loss sum, count] (loss_stats()). A replica all-reduces that pair, so every
// replica holds the loss of the whole batch, and its backward pass divides by the whole batch's
// count: the replicas' gradients then add up to the single-device gradient.
//
// The optimizers update every parameter in one launch: a table on the device lists each
// parameter's pointers and one chunk of kParamChunk elements per block; it is built once per list of
// parameters and reused while the pointers stay the same. With a loss scale (fp16), a first launch
// flags any non-finite gradient; the update launch then skips the step if flagged, unscales the
// gradients otherwise, and its last block updates the scale.
#include <cmath>
#include <cstring>

#include "train/cuda_internal.cuh"

namespace kiln::train {

using namespace cuda_detail;

namespace {

constexpr int kRowsPerBlock = kThreads / 32;  // one warp per row
constexpr unsigned kFullMask = 0xffffffffu;
constexpr size_t kMaxParamTables = 4;  // lists of parameters kept (a trainer uses one)

template <class T>
__global__ void ce_forward_kernel(const T* logits, const int32_t* labels, float* probs, int64_t n, int64_t c,
                                  double* partial, unsigned* counter, double* stats, float* loss) {
  __shared__ double row_loss[kRowsPerBlock];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  double rl = 0;
  if (row < n) {
    const T* z = logits + row * c;
    float mx = -INFINITY;
    for (int64_t j = lane; j < c; j += 32) mx = fmaxf(mx, ld(z, j));
    for (int s = 16; s > 0; s /= 2) mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, s));
    double sum = 0;
    for (int64_t j = lane; j < c; j += 32) sum += exp(static_cast<double>(ld(z, j) - mx));
    for (int s = 16; s > 0; s /= 2) sum += __shfl_xor_sync(kFullMask, sum, s);
    for (int64_t j = lane; j < c; j += 32)
      probs[row * c + j] = static_cast<float>(exp(static_cast<double>(ld(z, j) - mx)) / sum);
    const int32_t label = labels[row];
    // A label outside [0, C) makes the loss NaN, which the metrics report with its step.
    rl = label >= 0 && label < c ? log(sum) + static_cast<double>(mx) - static_cast<double>(ld(z, label)) : NAN;
  }
  if (lane == 0) row_loss[warp] = rl;
  __syncthreads();
  if (threadIdx.x == 0) {
    double b = 0;
    for (int w = 0; w < kRowsPerBlock; ++w) b += row_loss[w];
    partial[blockIdx.x] = b;
  }
  if (!last_block(counter, gridDim.x) || threadIdx.x != 0) return;
  double total = 0;
  for (unsigned b = 0; b < gridDim.x; ++b) total += __ldcg(partial + b);
  stats[0] = total;
  stats[1] = static_cast<double>(n);
  *loss = static_cast<float>(total / static_cast<double>(n > 0 ? n : 1));
}

__global__ void metrics_kernel(const float* loss, const float* probs, const int32_t* labels, int64_t n, int64_t c,
                               int64_t step, double* metrics, double* delta) {
  long long hits = 0;
  for (int64_t row = threadIdx.x; row < n; row += blockDim.x) {
    const float* p = probs + row * c;
    int64_t best = 0;
    for (int64_t j = 1; j < c; ++j)
      if (p[j] > p[best]) best = j;
    hits += best == labels[row];
  }
  hits = block_sum(hits);
  if (threadIdx.x != 0) return;
  const double l = *loss;
  const double d[kMetricsSize] = {l * static_cast<double>(n), static_cast<double>(hits), static_cast<double>(n),
                                  isfinite(l) ? 0.0 : 1.0};
  if (delta) {  // a replica: the group adds the deltas first (add_metrics_kernel)
    for (int q = 0; q < kMetricsSize; ++q) delta[q] = d[q];
    return;
  }
  metrics[kLossSum] += d[0];
  metrics[kCorrect] += d[1];
  metrics[kCount] += d[2];
  if (d[3] > 0 && metrics[kFirstBadStep] < 0) metrics[kFirstBadStep] = static_cast<double>(step);
}

__global__ void add_metrics_kernel(const double* delta, int64_t step, double* metrics) {
  metrics[kLossSum] += delta[0];
  metrics[kCorrect] += delta[1];
  metrics[kCount] += delta[2];
  if (delta[3] > 0 && metrics[kFirstBadStep] < 0) metrics[kFirstBadStep] = static_cast<double>(step);
}

// dlogits = f (probs - onehot(labels)) with f = scale (times the loss scale) / count, count being
// n or, in a replica, the whole batch's.
template <class T>
void ce_backward(const float* p, const int32_t* lab, float scale, const LossScale* ls, const double* count, int64_t n,
                 int64_t c, T* d, cudaStream_t s) {
  for_each(
      s, n * c,
      [=] __device__(int64_t i) {
        float f = scale;
        if (ls) f *= ls->scale;
        f /= count ? static_cast<float>(*count) : static_cast<float>(n);
        const int64_t row = i / c, j = i - row * c;
        st(d, i, f * (p[i] - (j == lab[row] ? 1.0f : 0.0f)));
      },
      "softmax_cross_entropy_backward");
}

void check_loss_inputs(const Tensor& logits, const Tensor& labels, const Tensor& probs, const char* op) {
  require(logits.rank() == 2 && labels.dtype() == DataType::kInt32 && labels.numel() == logits.dim(0), op,
          "expected logits [N,C] and int32 labels [N]");
  require(probs.numel() == logits.numel(), op, "probs must have the logits' shape");
  require_f32(probs, op, "probs");
}

// ---- optimizers

struct SgdArgs {
  float lr, momentum, weight_decay;
};

struct AdamArgs {
  float lr, beta1, beta2, eps, weight_decay, step, root_c2;
  bool decoupled;
};

// Mixed precision: after the update, halve the scale on overflow (and count a skipped step), or
// double it after kGrowthInterval clean steps.
__device__ void update_scale(LossScale* ls) {
  if (ls->overflow) {
    ls->scale = fmaxf(ls->scale * 0.5f, 1.0f);
    ls->clean_steps = 0;
    ++ls->skipped;
  } else if (++ls->clean_steps >= CudaBackend::kGrowthInterval) {
    ls->scale = fminf(ls->scale * 2.0f, 16777216.0f);
    ls->clean_steps = 0;
  }
  ls->overflow = 0;
}

__global__ void check_finite_kernel(const ParamEntry* entries, const ParamChunk* chunks, LossScale* ls) {
  const ParamChunk ck = chunks[blockIdx.x];
  const ParamEntry p = entries[ck.param];
  const int64_t begin = ck.part * kParamChunk, end = min(p.n, begin + kParamChunk);
  bool bad = false;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) bad |= !isfinite(p.g[i]);
  if (__syncthreads_or(bad) && threadIdx.x == 0) ls->overflow = 1;
}

// Runs update(p, i, g) over the chunk's elements with the (unscaled) gradient g, unless the loss
// scale flagged an overflow; the last block then updates the scale.
template <class Update>
__global__ void update_kernel(const ParamEntry* entries, const ParamChunk* chunks, LossScale* ls, unsigned* counter,
                              Update update) {
  if (!ls || !ls->overflow) {
    const ParamChunk ck = chunks[blockIdx.x];
    const ParamEntry p = entries[ck.param];
    const int64_t begin = ck.part * kParamChunk, end = min(p.n, begin + kParamChunk);
    const float inv_scale = ls ? 1.0f / ls->scale : 1.0f;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      float g = p.g[i];
      if (ls) g *= inv_scale;
      update(p, i, g);
    }
  }
  if (ls && last_block(counter, gridDim.x) && threadIdx.x == 0) update_scale(ls);
}

void check_slot(const ParamSlot& p, bool adam, const char* op) {
  require_same(p.value, p.grad, op);
  require_same(p.value, p.m, op);
  if (adam) require_same(p.value, p.v, op);
  require_f32(p.value, op, "parameters");
}

}  // namespace

void CudaBackend::softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels, const Tensor& probs,
                                                const Tensor& loss) {
  const char* op = "softmax_cross_entropy_forward";
  check_loss_inputs(logits, labels, probs, op);
  require(loss.numel() == 1, op, "loss must be [1]");
  require_f32(loss, op, "loss");
  const int64_t n = logits.dim(0), c = logits.dim(1);
  const unsigned blocks = static_cast<unsigned>(std::max<int64_t>(1, (n + kRowsPerBlock - 1) / kRowsPerBlock));
  auto* partial = static_cast<double*>(scratch(Slot::kPartials, blocks * sizeof(double)));
  unsigned* counter = counters(1);
  dispatch_act(logits.dtype(), op, [&](auto t) {
    using T = decltype(t);
    ce_forward_kernel<<<blocks, kThreads, 0, stream()>>>(logits.data<T>(), labels.data<int32_t>(), probs.data<float>(),
                                                         n, c, partial, counter, loss_stats_, loss.data<float>());
  });
  check_launch(op);
  if (!grouped()) return;
  all_reduce(loss_stats_, loss_stats_, 2, ncclDouble);
  const double* stats = loss_stats_;
  float* l = loss.data<float>();
  for_each(
      stream(), 1, [=] __device__(int64_t) { *l = static_cast<float>(stats[0] / (stats[1] > 0 ? stats[1] : 1)); }, op);
}

void CudaBackend::softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, float scale,
                                                 const Tensor& dlogits) {
  const char* op = "softmax_cross_entropy_backward";
  check_loss_inputs(dlogits, labels, probs, op);
  const int64_t n = probs.dim(0), c = probs.dim(1);
  const double* count = grouped() ? loss_stats_ + 1 : nullptr;  // the whole batch's, from the forward pass
  dispatch_act(dlogits.dtype(), op, [&](auto t) {
    using T = decltype(t);
    ce_backward(probs.data<float>(), labels.data<int32_t>(), scale, loss_scale_, count, n, c, dlogits.data<T>(),
                stream());
  });
}

void CudaBackend::accumulate_metrics(const Tensor& loss, const Tensor& probs, const Tensor& labels, int64_t step,
                                     const Tensor& metrics) {
  const char* op = "accumulate_metrics";
  require(metrics.dtype() == DataType::kFloat64 && metrics.numel() == kMetricsSize, op, "metrics must be float64 [4]");
  require(probs.rank() == 2 && labels.numel() == probs.dim(0), op, "expected probs [N,C] and labels [N]");
  require_f32(probs, op, "probs");
  require_f32(loss, op, "loss");
  double* delta = grouped() ? static_cast<double*>(scratch(Slot::kSmall, kMetricsSize * sizeof(double))) : nullptr;
  metrics_kernel<<<1, kThreads, 0, stream()>>>(loss.data<float>(), probs.data<float>(), labels.data<int32_t>(),
                                               probs.dim(0), probs.dim(1), step, metrics.data<double>(), delta);
  check_launch(op);
  if (!delta) return;
  all_reduce(delta, delta, kMetricsSize, ncclDouble);
  add_metrics_kernel<<<1, 1, 0, stream()>>>(delta, step, metrics.data<double>());
  check_launch(op);
}

const ParamTable& CudaBackend::param_table(std::span<const ParamSlot> params, bool adam) {
  // The key holds `adam` too: a table built for SGD has no v pointers, and a later Adam step on
  // tensors that reuse the same addresses must not find it.
  std::vector<uintptr_t> key{adam};
  for (const ParamSlot& p : params) {
    check_slot(p, adam, adam ? "adam_step" : "sgd_step");
    for (const Tensor* t : {&p.value, &p.grad, &p.m, &p.v})
      key.push_back(t->defined() ? reinterpret_cast<uintptr_t>(t->data<void>()) : 0);
    key.push_back(static_cast<uintptr_t>(p.value.numel()));
    key.push_back(p.decay);
  }
  for (const auto& t : param_tables_)
    if (t->key == key) return *t;

  std::vector<ParamEntry> entries;
  std::vector<ParamChunk> chunks;
  for (const ParamSlot& p : params) {
    const int64_t n = p.value.numel();
    require(n / kParamChunk < INT32_MAX, "optimizer", "a parameter beyond 2^44 elements");
    entries.push_back({p.value.data<float>(), p.grad.data<float>(), p.m.data<float>(),
                       adam ? p.v.data<float>() : nullptr, n, p.decay ? 1.0f : 0.0f});
    for (int64_t part = 0; part * kParamChunk < n; ++part)
      chunks.push_back({static_cast<int32_t>(entries.size() - 1), static_cast<int32_t>(part)});
  }
  auto table = std::make_unique<ParamTable>();
  table->key = std::move(key);
  table->params = static_cast<int64_t>(entries.size());
  table->chunks = static_cast<int64_t>(chunks.size());
  const size_t eb = entries.size() * sizeof(ParamEntry), cb = chunks.size() * sizeof(ParamChunk);
  std::vector<uint8_t> host(eb + cb);
  std::memcpy(host.data(), entries.data(), eb);
  std::memcpy(host.data() + eb, chunks.data(), cb);
  table->device = device_alloc(host.size(), "the optimizer's parameter table");
  stage(host.data(), table->device, host.size());
  if (param_tables_.size() == kMaxParamTables) {
    device_free(param_tables_.front()->device);
    param_tables_.erase(param_tables_.begin());
  }
  param_tables_.push_back(std::move(table));
  return *param_tables_.back();
}

void CudaBackend::sgd_step(std::span<const ParamSlot> params, const SgdStep& s) {
  if (params.empty()) return;
  const ParamTable& t = param_table(params, false);
  if (grouped()) {
    group_.api->check(group_.api->group_start(), "ncclGroupStart");
    for (const ParamSlot& p : params) all_reduce(p.grad.data<void>(), p.grad.data<void>(), p.grad.numel(), ncclFloat);
    group_.api->check(group_.api->group_end(), "ncclGroupEnd");
  }
  const unsigned blocks = static_cast<unsigned>(t.chunks);
  if (loss_scale_) check_finite_kernel<<<blocks, kThreads, 0, stream()>>>(t.entries(), t.chunk_list(), loss_scale_);
  const SgdArgs a{s.lr, s.momentum, s.weight_decay};
  // PyTorch's form, as the CPU computes it: m = momentum m + (g + wd w); w -= lr m.
  auto update = [a] __device__(const ParamEntry& p, int64_t i, float g) {
    const float m = a.momentum * p.m[i] + (g + a.weight_decay * p.decay * p.w[i]);
    p.m[i] = m;
    p.w[i] -= a.lr * m;
  };
  update_kernel<<<blocks, kThreads, 0, stream()>>>(t.entries(), t.chunk_list(), loss_scale_, counters(1), update);
  check_launch("sgd_step");
}

void CudaBackend::adam_step(std::span<const ParamSlot> params, const AdamStep& s) {
  require(s.t >= 1, "adam_step", "the step count t starts at 1");
  if (params.empty()) return;
  const ParamTable& t = param_table(params, true);
  if (grouped()) {
    group_.api->check(group_.api->group_start(), "ncclGroupStart");
    for (const ParamSlot& p : params) all_reduce(p.grad.data<void>(), p.grad.data<void>(), p.grad.numel(), ncclFloat);
    group_.api->check(group_.api->group_end(), "ncclGroupEnd");
  }
  const unsigned blocks = static_cast<unsigned>(t.chunks);
  if (loss_scale_) check_finite_kernel<<<blocks, kThreads, 0, stream()>>>(t.entries(), t.chunk_list(), loss_scale_);
  // The CPU's bias corrections: in double once per step, then float.
  const double c1 = 1.0 - std::pow(static_cast<double>(s.beta1), static_cast<double>(s.t));
  const double c2 = 1.0 - std::pow(static_cast<double>(s.beta2), static_cast<double>(s.t));
  const AdamArgs a{s.lr,
                   s.beta1,
                   s.beta2,
                   s.eps,
                   s.weight_decay,
                   static_cast<float>(s.lr / c1),
                   static_cast<float>(std::sqrt(c2)),
                   s.decoupled};
  auto update = [a] __device__(const ParamEntry& p, int64_t i, float g) {
    const float wd = a.weight_decay * p.decay;
    if (a.decoupled)
      p.w[i] -= a.lr * wd * p.w[i];
    else
      g += wd * p.w[i];
    const float m = a.beta1 * p.m[i] + (1.0f - a.beta1) * g;
    const float v = a.beta2 * p.v[i] + (1.0f - a.beta2) * g * g;
    p.m[i] = m;
    p.v[i] = v;
    p.w[i] -= a.step * m / (sqrtf(v) / a.root_c2 + a.eps);
  };
  update_kernel<<<blocks, kThreads, 0, stream()>>>(t.entries(), t.chunk_list(), loss_scale_, counters(1), update);
  check_launch("adam_step");
}

}  // namespace kiln::train
