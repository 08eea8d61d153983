// Cast, CastLike, Clip, QuantizeLinear, DequantizeLinear, Identity and Dropout (inference form).
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "runtime/cpu/ops/elementwise_internal.h"

namespace kiln::cpu::ew {

namespace {

// ---- Cast ------------------------------------------------------------------------------------
// Conversion rules (ONNX leaves out-of-range float->int undefined; we pick defined ones):
//   bool -> T: 0 or 1.   T -> bool: x != 0 (NaN is true, as in numpy and C).
//   float -> int: truncate toward zero, saturate at the type's range, NaN -> 0.
//   int -> int: wrap modulo 2^bits (numpy's astype).   -> float: nearest (via float for the
//   half types, so double->float16 may round twice), overflow gives +-inf.
template <class To, bool kFromBool, class X>
inline ComputeType<To> convert(X x) {
  using CT = ComputeType<To>;
  if constexpr (kFromBool)
    return static_cast<CT>(x != 0 ? 1 : 0);
  else if constexpr (std::is_same_v<To, bool>)
    return x != X(0);
  else if constexpr (std::is_floating_point_v<X> && std::is_integral_v<CT>)
    return sat_float_to_int<CT>(x);
  else
    return static_cast<CT>(x);
}

void cast_kernel(OpKind kind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                 KernelEnv& env) {
  const DataType from = in[0].dtype, to = out[0].dtype;
  if (from == to) {
    if (out[0].data != in[0].data && out[0].bytes() > 0) std::memcpy(out[0].data, in[0].data, out[0].bytes());
    return;
  }
  const char* name = op_name(kind).data();
  dispatch_all(from, name, [&](auto ft) {
    using FT = typename decltype(ft)::type;
    dispatch_all(to, name, [&](auto tt) {
      using TT = typename decltype(tt)::type;
      run_unary<Storage<FT>, TT>(in[0], out[0], env, [](auto x) { return convert<TT, std::is_same_v<FT, bool>>(x); });
    });
  });
}

// ---- Clip ------------------------------------------------------------------------------------
// max(x, lo) then min(., hi): with lo > hi every element becomes hi (numpy/ONNX); NaN passes.
void clip_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                 KernelEnv& env) {
  dispatch_numeric(in[0].dtype, "Clip", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = ComputeType<T>;
    C lo =
        std::numeric_limits<C>::has_infinity ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::lowest();
    C hi = std::numeric_limits<C>::has_infinity ? std::numeric_limits<C>::infinity() : std::numeric_limits<C>::max();
    if (in.size() > 1 && in[1].exists && in[1].numel() == 1) lo = load(in[1].as<const T>()[0]);
    if (in.size() > 2 && in[2].exists && in[2].numel() == 1) hi = load(in[2].as<const T>()[0]);
    run_unary<T, T>(in[0], out[0], env, [lo, hi](C v) {
      v = v < lo ? lo : v;
      return v > hi ? hi : v;
    });
  });
}

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

// ---- Identity, Dropout -----------------------------------------------------------------------
void copy_input(const TensorView& in, const TensorView& out) {
  if (out.data != in.data && in.bytes() > 0) std::memmove(out.data, in.data, in.bytes());
}

void identity_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                     KernelEnv&) {
  copy_input(in[0], out[0]);
}

// Training mode with ratio 0 drops nothing; with another ratio it would draw a random mask.
void dropout_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, KernelEnv&) {
  const bool training = in.size() > 2 && in[2].exists && in[2].data && *in[2].as<const uint8_t>() != 0;
  const bool zero_ratio = in.size() > 1 && in[1].exists && in[1].data && in[1].to_double()[0] == 0.0;
  if (training && !zero_ratio)
    throw Error(
        "Dropout: training-mode Dropout with a ratio other than 0 draws a random mask, which an inference "
        "engine does not do; export the model in eval mode");
  copy_input(in[0], out[0]);
  if (out.size() > 1 && out[1].data) std::memset(out[1].data, 1, static_cast<size_t>(out[1].numel()));
}

constexpr KernelEntry kEntries[] = {
    {OpKind::kCast, cast_kernel},
    {OpKind::kCastLike, cast_kernel},
    {OpKind::kClip, clip_kernel},
    {OpKind::kDequantizeLinear, dequantize_kernel},
    {OpKind::kDropout, dropout_kernel},
    {OpKind::kIdentity, identity_kernel},
    {OpKind::kQuantizeLinear, quantize_kernel},
};

}  // namespace

std::span<const KernelEntry> misc_kernel_entries() { return kEntries; }

}  // namespace kiln::cpu::ew
