// CPU kernels of the normalizations: LayerNormalization, InstanceNormalization,
// BatchNormalization (inference) and LRN. Statistics are computed in double with two passes
// (mean, then the mean of squared deviations), which avoids the cancellation of E[x^2] - E[x]^2.
#include <cmath>

#include "runtime/cpu/reduce/reduce_internal.h"  // the axis helpers (reduce_detail)

namespace kiln::cpu {

namespace {

using namespace reduce_detail;

// The values of `p` broadcast (numpy, right-aligned) to `target`, flattened row-major.
std::vector<double> broadcast_param(const TensorView& p, std::span<const int64_t> target) {
  std::vector<double> src = p.to_double();
  int64_t n = 1;
  for (int64_t d : target) n *= d;
  std::vector<double> out(static_cast<size_t>(n));
  size_t off = target.size() - p.rank();
  std::vector<int64_t> pstr = strides_of(p.shape);
  std::vector<int64_t> idx(target.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t src_off = 0;
    for (size_t d = off; d < target.size(); ++d)
      if (p.shape[d - off] != 1) src_off += idx[d] * pstr[d - off];
    out[i] = src[src_off];
    for (size_t d = target.size(); d-- > 0;) {  // odometer
      if (++idx[d] < target[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

void write_doubles(const TensorView& out, const std::vector<double>& v) {
  dispatch_float(out.dtype, "normalization statistics", [&](auto tag) {
    using U = typename decltype(tag)::type;
    U* p = out.as<U>();
    for (size_t i = 0; i < v.size(); ++i) p[i] = from_double<U>(v[i]);
  });
}

bool wanted(std::span<const TensorView> outputs, size_t i) {
  return outputs.size() > i && outputs[i].exists && outputs[i].data;
}

}  // namespace

void layer_norm_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> inputs,
                       std::span<const TensorView> outputs, KernelEnv& env) {
  const auto& a = attrs_as<LayerNormAttrs>(attrs);
  const TensorView& x = inputs[0];
  int64_t axis = normalize_axis(a.axis, static_cast<int64_t>(x.rank()));
  AxisSplit s = split_at(x.shape, axis);
  int64_t rows = s.outer, d = s.len * s.inner;
  std::span<const int64_t> norm_shape = x.shape.subspan(static_cast<size_t>(axis));
  std::vector<double> scale = broadcast_param(inputs[1], norm_shape);
  std::vector<double> bias = inputs.size() > 2 && inputs[2].exists ? broadcast_param(inputs[2], norm_shape)
                                                                   : std::vector<double>(static_cast<size_t>(d), 0.0);
  std::vector<double> mean(static_cast<size_t>(rows)), inv_std(static_cast<size_t>(rows));
  const double eps = a.epsilon;
  dispatch_float(x.dtype, "LayerNormalization", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.as<const T>();
    T* yp = outputs[0].as<T>();
    parallel_for(env, rows, d * 4, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* xr = xp + r * d;
        T* yr = yp + r * d;
        double sum = 0.0;
        for (int64_t j = 0; j < d; ++j) sum += to_double(xr[j]);
        double mu = sum / static_cast<double>(d);
        double sq = 0.0;
        for (int64_t j = 0; j < d; ++j) {
          double dv = to_double(xr[j]) - mu;
          sq += dv * dv;
        }
        double inv = 1.0 / std::sqrt(sq / static_cast<double>(d) + eps);
        for (int64_t j = 0; j < d; ++j) yr[j] = from_double<T>((to_double(xr[j]) - mu) * inv * scale[j] + bias[j]);
        mean[r] = mu;
        inv_std[r] = inv;
      }
    });
  });
  if (wanted(outputs, 1)) write_doubles(outputs[1], mean);
  if (wanted(outputs, 2)) write_doubles(outputs[2], inv_std);
}

void instance_norm_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> inputs,
                          std::span<const TensorView> outputs, KernelEnv& env) {
  const double eps = attrs_as<EpsilonAttrs>(attrs).epsilon;
  const TensorView& x = inputs[0];
  int64_t n = x.shape[0], c = x.shape[1], sp = x.numel() / std::max<int64_t>(n * c, 1);
  if (n * c == 0) return;
  std::vector<double> scale = inputs[1].to_double(), bias = inputs[2].to_double();
  dispatch_float(x.dtype, "InstanceNormalization", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.as<const T>();
    T* yp = outputs[0].as<T>();
    parallel_for(env, n * c, sp * 4, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const T* xr = xp + t * sp;
        T* yr = yp + t * sp;
        double sum = 0.0;
        for (int64_t j = 0; j < sp; ++j) sum += to_double(xr[j]);
        double mu = sum / static_cast<double>(sp), sq = 0.0;
        for (int64_t j = 0; j < sp; ++j) {
          double dv = to_double(xr[j]) - mu;
          sq += dv * dv;
        }
        // y = (x - mu) * k + B with k = scale / sqrt(var + eps)
        double k = scale[t % c] / std::sqrt(sq / static_cast<double>(sp) + eps), b0 = bias[t % c];
        for (int64_t j = 0; j < sp; ++j) yr[j] = from_double<T>((to_double(xr[j]) - mu) * k + b0);
      }
    });
  });
}

void batch_norm_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> inputs,
                       std::span<const TensorView> outputs, KernelEnv& env) {
  const auto& a = attrs_as<BatchNormAttrs>(attrs);
  if (a.training_mode != 0)
    throw Error(
        "BatchNormalization: training-mode BatchNormalization is not supported in an inference engine; "
        "export the model in eval mode");
  const TensorView& x = inputs[0];
  int64_t n = x.shape[0], c = x.shape[1], sp = x.numel() / std::max<int64_t>(n * c, 1);
  if (n * c == 0) return;
  std::vector<double> scale = inputs[1].to_double(), bias = inputs[2].to_double(), mean = inputs[3].to_double(),
                      var = inputs[4].to_double();
  // y = (x - mean) / sqrt(var + eps) * scale + B  =  x * k + (B - mean * k)
  std::vector<double> k(static_cast<size_t>(c)), b(static_cast<size_t>(c));
  for (int64_t i = 0; i < c; ++i) {
    k[i] = scale[i] / std::sqrt(var[i] + static_cast<double>(a.epsilon));
    b[i] = bias[i] - mean[i] * k[i];
  }
  dispatch_float(x.dtype, "BatchNormalization", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = ComputeType<T>;
    const T* xp = x.as<const T>();
    T* yp = outputs[0].as<T>();
    parallel_for(env, n * c, sp, [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t) {
        const C kc = static_cast<C>(k[t % c]), bc = static_cast<C>(b[t % c]);
        const T* xr = xp + t * sp;
        T* yr = yp + t * sp;
        for (int64_t j = 0; j < sp; ++j) yr[j] = static_cast<T>(static_cast<C>(xr[j]) * kc + bc);
      }
    });
  });
}

// y = x / (bias + alpha / size * sum_{c' in window(c)} x[c']^2) ^ beta over the channel axis, the
// window being [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)] clipped to [0, C).
void lrn_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> inputs, std::span<const TensorView> outputs,
                KernelEnv& env) {
  const auto& a = attrs_as<LrnAttrs>(attrs);
  const TensorView& x = inputs[0];
  int64_t n = x.shape[0], c = x.shape[1], sp = x.numel() / std::max<int64_t>(n * c, 1);
  if (n * c == 0) return;
  const int64_t lo_off = (a.size - 1) / 2, hi_off = a.size / 2;  // floor((size-1)/2), ceil((size-1)/2)
  const double scale = static_cast<double>(a.alpha) / static_cast<double>(a.size);
  const double bias = a.bias, beta = a.beta;
  dispatch_float(x.dtype, "LRN", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.as<const T>();
    T* yp = outputs[0].as<T>();
    parallel_for(env, n * c, sp * a.size, [&](int64_t b, int64_t e) {
      std::vector<double> sq(static_cast<size_t>(sp));
      for (int64_t t = b; t < e; ++t) {
        int64_t img = t / c, ch = t % c;
        int64_t c0 = std::max<int64_t>(0, ch - lo_off), c1 = std::min<int64_t>(c - 1, ch + hi_off);
        std::fill(sq.begin(), sq.end(), 0.0);
        for (int64_t cc = c0; cc <= c1; ++cc) {
          const T* xr = xp + (img * c + cc) * sp;
          for (int64_t j = 0; j < sp; ++j) sq[j] += to_double(xr[j]) * to_double(xr[j]);
        }
        const T* xr = xp + t * sp;
        T* yr = yp + t * sp;
        for (int64_t j = 0; j < sp; ++j)
          yr[j] = from_double<T>(to_double(xr[j]) / std::pow(bias + scale * sq[j], beta));
      }
    });
  });
}

namespace {

constexpr KernelEntry kEntries[] = {
    {OpKind::kLayerNormalization, layer_norm_kernel},
    {OpKind::kInstanceNormalization, instance_norm_kernel},
    {OpKind::kBatchNormalization, batch_norm_kernel},
    {OpKind::kLRN, lrn_kernel},
};

}  // namespace

std::span<const KernelEntry> norm_kernels() { return kEntries; }

}  // namespace kiln::cpu
