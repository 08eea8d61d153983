// The quantization ops of the quant family: QuantizeLinear, DequantizeLinear (with the elementwise
// family's element access and parallel loop, elementwise/elementwise_internal.h) and
// DynamicQuantizeLinear.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/cpu/elementwise/elementwise_internal.h"
#include "runtime/cpu/quant/quant_internal.h"

namespace kiln::cpu::quant {

namespace {

using ew::load;
using ew::parallel_range;
using ew::store;

// ---- Quantize / Dequantize -------------------------------------------------------------------
// x viewed as [outer, axis_len, inner]; the scale index of element (o, a, i) is 0 (per tensor),
// a (per axis), or (o * n_blocks + a / block) * inner + i (blocked).
struct QuantLayout {
  enum class Mode { kTensor, kAxis, kBlocked } mode = Mode::kTensor;
  int64_t outer = 1, axis_len = 1, inner = 1, block = 1, n_blocks = 1;
};

QuantLayout quant_layout(const QuantizeAttrs& a, const TensorView& x, const TensorView& scale) {
  QuantLayout l;
  l.inner = x.numel();
  if (scale.rank() == 0 || (scale.numel() == 1 && (scale.rank() == 1 || a.block_size > 0))) return l;
  const int64_t axis = normalize_axis(a.axis, static_cast<int64_t>(x.rank()));
  l.outer = 1;
  for (int64_t d = 0; d < axis; ++d) l.outer *= x.shape[d];
  l.axis_len = x.shape[axis];
  l.inner = 1;
  for (size_t d = static_cast<size_t>(axis) + 1; d < x.rank(); ++d) l.inner *= x.shape[d];
  if (a.block_size > 0) {
    l.mode = QuantLayout::Mode::kBlocked;
    l.block = a.block_size;
    l.n_blocks = scale.shape[axis];
  } else {
    l.mode = QuantLayout::Mode::kAxis;
  }
  return l;
}

// Calls row(element_begin, count, scale_base, scale_stride) over every row piece, in parallel.
template <class RowFn>
void for_quant_rows(KernelEnv& env, const QuantLayout& l, RowFn&& row) {
  const int64_t n = l.outer * l.axis_len * l.inner;
  parallel_range(env, n, [&](int64_t begin, int64_t end) {
    for (int64_t pos = begin; pos < end;) {
      const int64_t r = pos / l.inner, i = pos % l.inner;
      const int64_t cnt = std::min(l.inner - i, end - pos);
      const int64_t o = r / l.axis_len, a = r % l.axis_len;
      switch (l.mode) {
        case QuantLayout::Mode::kTensor: row(pos, cnt, int64_t{0}, int64_t{0}); break;
        case QuantLayout::Mode::kAxis: row(pos, cnt, a, int64_t{0}); break;
        case QuantLayout::Mode::kBlocked:
          row(pos, cnt, (o * l.n_blocks + a / l.block) * l.inner + i, int64_t{1});
          break;
      }
      pos += cnt;
    }
  });
}

// The dtypes inference admits, dispatched without instantiating the rest.
template <class Fn>
void dispatch_quantized(DataType t, const char* op, Fn&& fn) {  // int8, uint8, int16, uint16 (+ int32)
  if (t == DataType::kInt8) return fn(Tag<int8_t>{});
  if (t == DataType::kUInt8) return fn(Tag<uint8_t>{});
  if (t == DataType::kInt16) return fn(Tag<int16_t>{});
  if (t == DataType::kUInt16) return fn(Tag<uint16_t>{});
  if (t == DataType::kInt32) return fn(Tag<int32_t>{});
  throw_unsupported_dtype(t, op);
}
template <class Fn>
void dispatch_quant_float(DataType t, const char* op, Fn&& fn) {  // float32, float16, bfloat16 (+ int32)
  if (t == DataType::kFloat32) return fn(Tag<float>{});
  if (t == DataType::kFloat16) return fn(Tag<Half>{});
  if (t == DataType::kBFloat16) return fn(Tag<BFloat16>{});
  if (t == DataType::kInt32) return fn(Tag<int32_t>{});
  throw_unsupported_dtype(t, op);
}

template <class Q>
std::vector<Q> values_as(const TensorView& t, const char* op) {
  std::vector<Q> v(static_cast<size_t>(t.numel()));
  dispatch_numeric(t.dtype, op, [&](auto tag) {
    using S = typename decltype(tag)::type;
    const S* p = t.as<const S>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<Q>(load(p[i]));
  });
  return v;
}

// y = saturate(round_half_even(x / scale) + zero_point). NaN quantizes to the zero point.
void quantize_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                     KernelEnv& env) {
  const QuantLayout l = quant_layout(attrs_as<QuantizeAttrs>(attrs), in[0], in[1]);
  const bool has_zp = in.size() > 2 && in[2].exists;
  auto run = [&](auto qtag) {
    using Q = typename decltype(qtag)::type;  // float for float inputs (as the ONNX reference), else double
    const std::vector<Q> scale = values_as<Q>(in[1], "QuantizeLinear");
    const std::vector<Q> zp = has_zp ? values_as<Q>(in[2], "QuantizeLinear") : std::vector<Q>(scale.size(), Q(0));
    dispatch_quantized(out[0].dtype, "QuantizeLinear", [&](auto otag) {
      using O = typename decltype(otag)::type;
      if constexpr (sizeof(O) > 2) throw_unsupported_dtype(out[0].dtype, "QuantizeLinear output");
      const Q qmin = static_cast<Q>(std::numeric_limits<O>::min()),
              qmax = static_cast<Q>(std::numeric_limits<O>::max());
      O* po = out[0].as<O>();
      dispatch_quant_float(in[0].dtype, "QuantizeLinear", [&](auto xtag) {
        using X = typename decltype(xtag)::type;
        const X* px = in[0].as<const X>();
        if constexpr (std::is_same_v<X, float> && std::is_same_v<Q, float> && sizeof(O) == 1) {
          if (l.mode == QuantLayout::Mode::kTensor) {  // the common case, vectorized: the same bits
            parallel_range(env, out[0].numel(), [&](int64_t begin, int64_t end) {
              quantize_floats(px + begin, end - begin, scale[0], zp[0], po + begin);
            });
            return;
          }
        }
        for_quant_rows(env, l, [&](int64_t p, int64_t cnt, int64_t sb, int64_t ss) {
          for (int64_t i = 0; i < cnt; ++i) {
            Q v = std::rint(static_cast<Q>(load(px[p + i])) / scale[sb + i * ss]);
            v = (v == v ? v : Q(0)) + zp[sb + i * ss];
            po[p + i] = static_cast<O>(v < qmin ? qmin : v > qmax ? qmax : v);
          }
        });
      });
    });
  };
  if (in[0].dtype == DataType::kInt32 || in[1].dtype == DataType::kInt32)
    run(Tag<double>{});
  else
    run(Tag<float>{});
}

// y = (x - zero_point) * scale, computed in float (as the ONNX reference), stored as scale's type.
void dequantize_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                       KernelEnv& env) {
  const QuantLayout l = quant_layout(attrs_as<QuantizeAttrs>(attrs), in[0], in[1]);
  const std::vector<float> scale = values_as<float>(in[1], "DequantizeLinear");
  const bool has_zp = in.size() > 2 && in[2].exists;
  const std::vector<float> zp =
      has_zp ? values_as<float>(in[2], "DequantizeLinear") : std::vector<float>(scale.size(), 0.f);
  dispatch_quant_float(out[0].dtype, "DequantizeLinear", [&](auto otag) {
    using O = typename decltype(otag)::type;
    if constexpr (std::is_integral_v<O>) throw_unsupported_dtype(out[0].dtype, "DequantizeLinear output");
    O* po = out[0].as<O>();
    dispatch_quantized(in[0].dtype, "DequantizeLinear", [&](auto xtag) {
      using X = typename decltype(xtag)::type;
      const X* px = in[0].as<const X>();
      for_quant_rows(env, l, [&](int64_t p, int64_t cnt, int64_t sb, int64_t ss) {
        for (int64_t i = 0; i < cnt; ++i)
          po[p + i] = store<O>((static_cast<float>(px[p + i]) - zp[sb + i * ss]) * scale[sb + i * ss]);
      });
    });
  });
}

}  // namespace

// ---- DynamicQuantizeLinear -------------------------------------------------------------------
// uint8, per the ONNX reference, in float32:
//   max' = max(0, max(x)), min' = min(0, min(x)), scale = (max' == min' ? 1 : max' - min') / 255
//   zp = round_half_even(clamp(0 - min' / scale, 0, 255)), y = clamp(round(x / scale) + zp, 0, 255)
// NaN elements are skipped by the range scan and quantize to 0.

void dynamic_quantize_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                             KernelEnv& env) {
  const float* x = in[0].as<const float>();
  const int64_t n = in[0].numel();
  constexpr int64_t kBlock = 16384;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<float> bmin(static_cast<size_t>(blocks), 0.0f), bmax(static_cast<size_t>(blocks), 0.0f);
  parallel(env, blocks, kBlock, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      float lo = 0.0f, hi = 0.0f;
      for (int64_t i = b * kBlock, e = std::min(n, i + kBlock); i < e; ++i) {
        lo = x[i] < lo ? x[i] : lo;  // NaN compares false: skipped
        hi = x[i] > hi ? x[i] : hi;
      }
      bmin[b] = lo;
      bmax[b] = hi;
    }
  });
  float mn = 0.0f, mx = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) {
    mn = std::min(mn, bmin[b]);
    mx = std::max(mx, bmax[b]);
  }
  const float scale = (mx == mn ? 1.0f : mx - mn) / 255.0f;
  float zpf = 0.0f - mn / scale;
  if (!(zpf >= 0.0f)) zpf = 0.0f;
  if (zpf > 255.0f) zpf = 255.0f;
  const float zp = std::nearbyint(zpf);
  uint8_t* y = out[0].as<uint8_t>();
  parallel(env, blocks, kBlock, [&](int64_t b0, int64_t b1) {
    for (int64_t i = b0 * kBlock, e = std::min(n, b1 * kBlock); i < e; ++i) {
      float v = std::nearbyint(x[i] / scale) + zp;
      if (!(v >= 0.0f)) v = 0.0f;
      if (v > 255.0f) v = 255.0f;
      y[i] = static_cast<uint8_t>(v);
    }
  });
  *out[1].as<float>() = scale;
  *out[2].as<uint8_t>() = static_cast<uint8_t>(zp);
}

namespace {

constexpr KernelEntry kEntries[] = {
    {OpKind::kDequantizeLinear, dequantize_kernel},
    {OpKind::kDynamicQuantizeLinear, dynamic_quantize_kernel},
    {OpKind::kQuantizeLinear, quantize_kernel},
};

}  // namespace

std::span<const KernelEntry> quantize_kernel_entries() { return kEntries; }

}  // namespace kiln::cpu::quant
