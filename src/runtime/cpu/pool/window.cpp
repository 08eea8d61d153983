// AveragePool and MaxPool on the CPU, any number of spatial axes, parallel over the N*C planes.
// Window of output position o on axis i: taps j in [0, k) at image position
// start = o * stride - pad_begin, start + j * dilation. Per axis and output index the range of
// taps inside the image [jlo, jhi) is tabulated once, so the inner loops never test bounds.
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/infer/nn_geometry.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/pool/pool_internal.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln::cpu::pool {

namespace {

using kiln::nn::WindowGeometry;

int64_t ceil_div(int64_t a, int64_t b) {  // b > 0
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

struct AxisTable {
  std::vector<int64_t> first;   // image index of the first inside tap
  std::vector<int64_t> count;   // inside taps
  std::vector<int64_t> padded;  // taps inside the padded extent [-pad_begin, in + pad_end)
};

std::vector<AxisTable> axis_tables(const WindowGeometry& g) {
  const size_t n = g.rank();
  std::vector<AxisTable> t(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t s = g.strides[i], d = g.dilations[i], k = g.kernel[i], in = g.in[i];
    for (int64_t o = 0; o < g.out[i]; ++o) {
      const int64_t start = o * s - g.pads[i];
      const int64_t jlo = start < 0 ? ceil_div(-start, d) : 0;
      const int64_t jhi = std::max(jlo, std::min(k, ceil_div(in - start, d)));
      t[i].first.push_back(start + jlo * d);
      t[i].count.push_back(jhi - jlo);
      t[i].padded.push_back(std::max<int64_t>(0, std::min(k, ceil_div(in + g.pads[n + i] - start, d))));
    }
  }
  return t;
}

// Calls fn(image_offset) for every inside tap of the window of output `o` (a multi-index).
template <class F>
inline void for_window(const std::vector<AxisTable>& t, const std::vector<int64_t>& o,
                       const std::vector<int64_t>& img_stride, const std::vector<int64_t>& step, int64_t* j, F&& fn) {
  const size_t n = t.size();
  int64_t base = 0;
  for (size_t i = 0; i < n; ++i) {
    if (t[i].count[o[i]] == 0) return;
    base += t[i].first[o[i]] * img_stride[i];
    j[i] = 0;
  }
  const int64_t last_count = t[n - 1].count[o[n - 1]], last_step = step[n - 1];
  for (;;) {
    int64_t off = base;
    for (size_t i = 0; i + 1 < n; ++i) off += j[i] * step[i];
    for (int64_t q = 0; q < last_count; ++q) fn(off + q * last_step);
    size_t i = n - 1;
    for (; i-- > 0;) {
      if (++j[i] < t[i].count[o[i]]) break;
      j[i] = 0;
    }
    if (i == static_cast<size_t>(-1)) return;
  }
}

template <class T>
void pool_typed(bool is_max, const PoolAttrs& a, const WindowGeometry& g, const T* x, T* y, int64_t* indices,
                int64_t planes, ThreadPool* pool) {
  using C = std::conditional_t<std::is_same_v<T, double>, double, std::conditional_t<kIsFloat<T>, float, T>>;
  const size_t n = g.rank();
  const std::vector<AxisTable> t = axis_tables(g);
  const int64_t in_size = WindowGeometry::product(g.in), out_size = WindowGeometry::product(g.out);
  std::vector<int64_t> img_stride(n, 1), step(n);
  for (size_t i = n - 1; i-- > 0;) img_stride[i] = img_stride[i + 1] * g.in[i + 1];
  for (size_t i = 0; i < n; ++i) step[i] = img_stride[i] * g.dilations[i];
  const bool col_major = a.storage_order == 1;
  const bool include_pad = a.count_include_pad == 1;

  auto body = [&](int64_t p0, int64_t p1) {
    std::vector<int64_t> o(n), j(n), pos(n);
    for (int64_t p = p0; p < p1; ++p) {
      const T* xp = x + p * in_size;
      T* yp = y + p * out_size;
      std::fill(o.begin(), o.end(), 0);
      for (int64_t q = 0; q < out_size; ++q) {
        if (is_max) {
          // A window with no input element (possible with dilations or ceil_mode) gives the
          // lowest value, an AveragePool one 0, as onnxruntime does.
          C best = std::numeric_limits<C>::lowest();
          int64_t arg = -1;
          for_window(t, o, img_stride, step, j.data(), [&](int64_t off) {
            const C v = static_cast<C>(xp[off]);
            // The first maximum wins; a number replaces NaN, never the other way round.
            if (arg < 0 || v > best || (best != best && v == v)) {
              best = v;
              arg = off;
            }
          });
          yp[q] = static_cast<T>(best);
          if (indices) {
            int64_t idx = arg < 0 ? 0 : arg;
            if (col_major && arg >= 0) {
              // Spatial position in column-major order (first axis fastest).
              int64_t rem = arg, cm = 0, mul = 1;
              for (size_t i = n; i-- > 0;) {
                pos[i] = rem % g.in[i];
                rem /= g.in[i];
              }
              for (size_t i = 0; i < n; ++i) {
                cm += pos[i] * mul;
                mul *= g.in[i];
              }
              idx = cm;
            }
            indices[p * out_size + q] = p * in_size + idx;
          }
        } else {
          C sum = 0;
          int64_t cnt = 0;
          for_window(t, o, img_stride, step, j.data(), [&](int64_t off) {
            sum += static_cast<C>(xp[off]);
            ++cnt;
          });
          int64_t div = cnt;
          if (include_pad) {
            div = 1;
            for (size_t i = 0; i < n; ++i) div *= t[i].padded[o[i]];
          }
          yp[q] = static_cast<T>(div > 0 && cnt > 0 ? sum / static_cast<C>(div) : C(0));
        }
        for (size_t i = n; i-- > 0;)
          if (++o[i] < g.out[i])
            break;
          else
            o[i] = 0;
      }
    }
  };
  const int64_t work = out_size * std::max<int64_t>(WindowGeometry::product(g.kernel), 1);
  if (pool && pool->team() > 1 && planes > 1 && planes * work >= (1 << 15))
    pool->parallel_for(planes, body);
  else
    body(0, planes);
}

}  // namespace

void pool_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                 KernelEnv& env) {
  const auto& a = std::get<PoolAttrs>(attrs);
  const TensorView &X = in[0], &Y = out[0];
  const WindowGeometry g = kiln::nn::pool_geometry(a, X.shape);
  const bool is_max = kind == OpKind::kMaxPool;
  int64_t* indices = out.size() > 1 && out[1].exists ? out[1].as<int64_t>() : nullptr;
  const int64_t planes = X.shape[0] * X.shape[1];
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    pool_typed<T>(is_max, a, g, X.as<const T>(), Y.as<T>(), indices, planes, env.pool);
  };
  if (is_max && X.dtype == DataType::kInt8) {
    run(Tag<int8_t>{});
  } else if (is_max && X.dtype == DataType::kUInt8) {
    run(Tag<uint8_t>{});
  } else {
    dispatch_float(X.dtype, is_max ? "MaxPool" : "AveragePool", run);
  }
}

namespace {

constexpr KernelEntry kEntries[] = {
    {OpKind::kAveragePool, pool_kernel},
    {OpKind::kMaxPool, pool_kernel},
};

}  // namespace

std::span<const KernelEntry> window_kernel_entries() { return kEntries; }

}  // namespace kiln::cpu::pool
