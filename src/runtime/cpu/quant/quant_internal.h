// Shared pieces of the quant family's CPU kernels (quant/*.cpp in this folder): the parallel loop,
// the zero points, scales and requantization of the ONNX integer ops (matmul.cpp, conv.cpp), and
// the per-channel epilogue of kiln.QConv / kiln.QMatMul (conv.cpp, matmul.cpp; runtime/qfused_math.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "core/shape_infer.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/qfused_math.h"

namespace kiln::cpu::quant {

template <class Fn>
inline void parallel(KernelEnv& env, int64_t n, int64_t work_per_item, Fn&& fn) {
  if (n <= 0) return;
  if (!env.pool || env.pool->team() <= 1 || n < 2 || n * work_per_item < (1 << 15))
    fn(int64_t{0}, n);
  else
    env.pool->parallel_for(n, fn);
}

// ---- the ONNX integer ops ---------------------------------------------------------------------

// Values of a zero-point tensor (int8/uint8) as int32; absent means 0.
inline std::vector<int32_t> zero_points(std::span<const TensorView> in, size_t i) {
  if (i >= in.size() || !in[i].exists) return {0};
  const TensorView& t = in[i];
  std::vector<int32_t> v(static_cast<size_t>(t.numel()));
  if (t.dtype == DataType::kInt8)
    for (size_t k = 0; k < v.size(); ++k) v[k] = t.as<const int8_t>()[k];
  else
    for (size_t k = 0; k < v.size(); ++k) v[k] = t.as<const uint8_t>()[k];
  return v;
}

inline std::vector<float> scales(const TensorView& t) {
  std::vector<double> d = t.to_double();
  return {d.begin(), d.end()};
}

// round_half_even(v) saturated to [lo, hi]; NaN goes to lo. Clamping first keeps the conversion
// in range (a float->int cast of an out-of-range value is undefined).
inline int32_t requantize(double v, double lo, double hi) {
  if (!(v >= lo)) v = lo;
  if (v > hi) v = hi;
  return static_cast<int32_t>(std::nearbyint(v));
}

template <class T>
inline void store_q(void* out, int64_t i, int32_t v) {
  static_cast<T*>(out)[i] = static_cast<T>(v);
}

template <class Fn>
inline void dispatch_q8(DataType t, const char* op, Fn&& fn) {
  if (t == DataType::kUInt8)
    fn(Tag<uint8_t>{});
  else if (t == DataType::kInt8)
    fn(Tag<int8_t>{});
  else
    throw_unsupported_dtype(t, op);
}

// ---- kiln.QConv / kiln.QMatMul ---------------------------------------------------------------

inline bool present(std::span<const TensorView> in, size_t i) { return i < in.size() && in[i].exists; }

// int8/uint8 values as int32; absent: {0}.
inline std::vector<int32_t> ints(std::span<const TensorView> in, size_t i) {
  if (!present(in, i)) return {0};
  const TensorView& t = in[i];
  std::vector<int32_t> v(static_cast<size_t>(t.numel()));
  for (size_t k = 0; k < v.size(); ++k)
    v[k] = t.dtype == DataType::kInt8 ? int32_t{t.as<const int8_t>()[k]} : int32_t{t.as<const uint8_t>()[k]};
  return v;
}

// What every output channel m needs: alpha = x_scale * w_scale[m], bias, w's zero point; and the
// residual z (null: none), read at y's element index.
struct Channels {
  std::vector<float> alpha, bias;
  std::vector<int32_t> w_zero;
  int32_t x_zero = 0;
  qfused::Epilogue epi;
  const TensorView* z = nullptr;

  float plus_residual(float real, int64_t i) const {
    if (z->dtype == DataType::kFloat32) return qfused::add_rn(real, z->as<const float>()[i]);
    return epi.plus_residual(real, z_at(i));
  }
  int32_t z_at(int64_t i) const {
    return z->dtype == DataType::kInt8 ? int32_t{z->as<const int8_t>()[i]} : int32_t{z->as<const uint8_t>()[i]};
  }
};

inline Channels channels(std::span<const TensorView> in, int64_t m, QActivation act, float act_alpha, float act_beta,
                         DataType out_type) {
  Channels c;
  const float sx = *in[1].as<const float>();
  const float* sw = in[4].as<const float>();
  const bool per_channel = in[4].numel() != 1;
  const std::vector<int32_t> zw = ints(in, 5);
  c.x_zero = ints(in, 2)[0];
  c.alpha.resize(static_cast<size_t>(m));
  c.bias.assign(static_cast<size_t>(m), 0.0f);
  c.w_zero.resize(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    c.alpha[i] = qfused::mul_rn(sx, sw[per_channel ? i : 0]);
    c.w_zero[i] = zw[zw.size() == 1 ? 0 : static_cast<size_t>(i)];
  }
  if (present(in, 6)) std::copy_n(in[6].as<const float>(), m, c.bias.begin());
  c.epi.act = static_cast<int>(act);
  c.epi.act_alpha = act_alpha;
  c.epi.act_beta = act_beta;
  c.epi.quantize = present(in, 7);
  if (c.epi.quantize) {
    c.epi.y_scale = *in[7].as<const float>();
    c.epi.y_zero = static_cast<float>(ints(in, 8)[0]);
    c.epi.qmin = out_type == DataType::kUInt8 ? 0.0f : -128.0f;
    c.epi.qmax = out_type == DataType::kUInt8 ? 255.0f : 127.0f;
  }
  if (present(in, 9)) {
    c.z = &in[9];
    if (in[9].dtype != DataType::kFloat32) {
      c.epi.z_scale = *in[10].as<const float>();
      c.epi.z_zero = ints(in, 11)[0];
    }
  }
  return c;
}

// Writes output y[at] from the accumulator of channel m.
inline void store_one(const Channels& c, int64_t m, uint32_t acc, const TensorView& y, int64_t at) {
  float real = qfused::Epilogue::real(acc, c.alpha[m], c.bias[m]);
  if (c.z) real = c.plus_residual(real, at);
  const float v = c.epi.activate(real);
  if (!c.epi.quantize)
    y.as<float>()[at] = v;
  else if (y.dtype == DataType::kInt8)
    y.as<int8_t>()[at] = static_cast<int8_t>(c.epi.quantized(v));
  else
    y.as<uint8_t>()[at] = static_cast<uint8_t>(c.epi.quantized(v));
}

// Writes outputs y[0..count) at stride `step` from accumulators of channel m.
inline void store(const Channels& c, int64_t m, const uint32_t* acc, int64_t count, const TensorView& y, int64_t offset,
                  int64_t step) {
  for (int64_t i = 0; i < count; ++i) store_one(c, m, acc[i], y, offset + i * step);
}

// Rows [r0, r1) of int32 sums whose m_count channels are contiguous (channels-last outputs):
// y[r * m_count + m] as store_one writes it, vectorized (vectorized.cpp).
void store_rows(const Channels& c, const int32_t* sums, int64_t r0, int64_t r1, int64_t m_count, const TensorView& y);
// QuantizeLinear of float32 values with one scale and zero point, vectorized (vectorized.cpp):
// y = saturate(rint(x / scale) + zero), NaN to zero, as quantize.cpp's loop computes it.
void quantize_floats(const float* x, int64_t n, float scale, float zero, int8_t* y);
void quantize_floats(const float* x, int64_t n, float scale, float zero, uint8_t* y);

// sums[j] = sum over i < k of x[i] * w[j * k + i], j < n: one row of centered x (|x| <= 255) times
// the rows of 8-bit w, exact in int32 for k up to 33,000 (vectorized.cpp: vpmaddwd).
void dot_rows(const int16_t* x, int64_t k, const int8_t* w, int64_t n, int32_t* sums);
void dot_rows(const int16_t* x, int64_t k, const uint8_t* w, int64_t n, int32_t* sums);

// The elements of a q8 tensor minus `zero`, as int16 (values in [-255, 255]).
template <class T>
inline void centered(const T* p, int64_t n, int32_t zero, int16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int16_t>(static_cast<int32_t>(p[i]) - zero);
}
inline void centered(const TensorView& t, int64_t offset, int64_t n, int32_t zero, int16_t* out) {
  if (t.dtype == DataType::kInt8)
    centered(t.as<const int8_t>() + offset, n, zero, out);
  else
    centered(t.as<const uint8_t>() + offset, n, zero, out);
}

// w with each output channel's zero point subtracted: [m][k] as int16.
inline std::vector<int16_t> centered_weights(const TensorView& w, const Channels& c, int64_t m, int64_t k) {
  std::vector<int16_t> out(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i) centered(w, i * k, k, c.w_zero[i], out.data() + i * k);
  return out;
}

// ---- the int8 route of the integer sums (cpu/igemm.h: igemm8) ---------------------------------
// Where the weights are int8 with zero points 0 and the CPU has int8 dot products (Arm's asimddp;
// KILN_CPU_IGEMM=int8 takes the route on every CPU, with the portable kernel where there are none,
// KILN_CPU_IGEMM=int16 never), x goes to igemm8 as int8: uint8 values minus 128 and the zero point
// alike (zs), and
//   sum over k of w * (x - x_zero) = sum over k of w * xs - zs * sum over k of w,
// the second term from each output channel's weight sum (int8_route.cpp). Taps in a convolution's
// padding hold zs, as they hold the zero point on the int16 route. The sums are the int16 route's.
bool int8_route(const TensorView& w, const Channels& c);
// The int8 value of x's zero point on the route.
inline int32_t shifted_zero(DataType x, int32_t zero) { return x == DataType::kUInt8 ? zero - 128 : zero; }
// n elements of a q8 tensor from `offset` as the route's int8 values.
void shifted(const TensorView& t, int64_t offset, int64_t n, int8_t* out);
// Sums of the rows of w [rows x k] (int8).
std::vector<int32_t> row_sums(const int8_t* w, int64_t rows, int64_t k);
// sums -= zs * wsum[channel], modulo 2^32; channel = i / per (rows of a convolution's output) or
// i % per (columns of a product's).
void subtract_zero_terms(uint32_t* sums, int64_t n, int32_t zs, const int32_t* wsum, int64_t per, bool rows);

// ---- each file's kernels, joined by registry.cpp ----------------------------------------------
std::span<const KernelEntry> quantize_kernel_entries();  // quantize.cpp
std::span<const KernelEntry> conv_kernel_entries();      // conv.cpp
std::span<const KernelEntry> matmul_kernel_entries();    // matmul.cpp

}  // namespace kiln::cpu::quant
