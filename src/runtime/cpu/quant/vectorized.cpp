// The INT8 kernels' loops that the compiler vectorizes (declared in quant_internal.h).
//
// store_rows: kiln.QConv's epilogue (runtime/qfused_math.h) over rows of int32 sums whose channels
// are contiguous (channels-last outputs, NhwcQConv's oneDNN path): the same float32 operations, in
// the same order, as quant_internal.h's store_one, written as loops over the channels. IEEE
// multiplications, additions and divisions round the same in vector lanes, and the project
// compiles with -ffp-contract=off (CMakeLists.txt; the x86 clone's target has no FMA either), so
// no product is fused into an addition: the bits are store_one's. The activation, the output type
// and the residual's kind are template parameters, so that the inner loop has no branches but
// selects. quantize_floats: QuantizeLinear's loop (quantize.cpp) for float32 and one scale, alike.
// dot_rows: the integer sums of small kiln.QMatMul products (matmul.cpp), exact.
#include <cmath>
#include <limits>
#include <type_traits>

#include "runtime/cpu/quant/quant_internal.h"

namespace kiln::cpu::quant {

namespace {

enum ZKind { kNoZ, kZInt8, kZUInt8, kZFloat };

// Rows [0, n_rows) of m_count channels from flat element `first` on (sums, y and the residual are
// indexed from the tensor's start).
template <int Act, class Out, int Z>
[[gnu::always_inline]] inline void rows_of(const Channels& c, const int32_t* __restrict sums, int64_t first,
                                           int64_t n_rows, int64_t m_count, void* y_data) {
  const float* __restrict alpha = c.alpha.data();
  const float* __restrict bias = c.bias.data();
  Out* __restrict y = static_cast<Out*>(y_data);
  const qfused::Epilogue e = c.epi;
  const void* z = c.z ? c.z->data : nullptr;
  for (int64_t r = 0; r < n_rows; ++r) {
    const int64_t base = first + r * m_count;
    for (int64_t m = 0; m < m_count; ++m) {
      const int64_t at = base + m;
      float v = static_cast<float>(sums[at]) * alpha[m];
      v = v + bias[m];
      if constexpr (Z == kZInt8 || Z == kZUInt8) {
        using ZT = std::conditional_t<Z == kZInt8, int8_t, uint8_t>;
        const float zr = e.z_scale * static_cast<float>(static_cast<int32_t>(static_cast<const ZT*>(z)[at]) - e.z_zero);
        v = v + zr;
      } else if constexpr (Z == kZFloat) {
        v = v + static_cast<const float*>(z)[at];
      }
      if constexpr (Act == 1) v = v > 0.0f ? v : (v == v ? 0.0f : v);
      if constexpr (Act == 2) v = v < e.act_alpha ? e.act_alpha : (v > e.act_beta ? e.act_beta : v);
      if constexpr (Act == 3) v = v < 0.0f ? v * e.act_alpha : v;
      if constexpr (std::is_same_v<Out, float>) {
        y[at] = v;
      } else {
        float q = std::rint(v / e.y_scale);
        q = (q == q ? q : 0.0f) + e.y_zero;
        q = q < e.qmin ? e.qmin : (q > e.qmax ? e.qmax : q);
        y[at] = static_cast<Out>(static_cast<int32_t>(q));
      }
    }
  }
}

template <int Act, class Out>
[[gnu::always_inline]] inline void with_z(const Channels& c, const int32_t* sums, int64_t first, int64_t n_rows,
                                          int64_t m_count, void* y) {
  if (!c.z)
    rows_of<Act, Out, kNoZ>(c, sums, first, n_rows, m_count, y);
  else if (c.z->dtype == DataType::kFloat32)
    rows_of<Act, Out, kZFloat>(c, sums, first, n_rows, m_count, y);
  else if (c.z->dtype == DataType::kInt8)
    rows_of<Act, Out, kZInt8>(c, sums, first, n_rows, m_count, y);
  else
    rows_of<Act, Out, kZUInt8>(c, sums, first, n_rows, m_count, y);
}

template <int Act>
[[gnu::always_inline]] inline void with_out(const Channels& c, const int32_t* sums, int64_t first, int64_t n_rows,
                                            int64_t m_count, const TensorView& y) {
  if (!c.epi.quantize)
    with_z<Act, float>(c, sums, first, n_rows, m_count, y.data);
  else if (y.dtype == DataType::kInt8)
    with_z<Act, int8_t>(c, sums, first, n_rows, m_count, y.data);
  else
    with_z<Act, uint8_t>(c, sums, first, n_rows, m_count, y.data);
}

#if defined(__x86_64__)
[[gnu::target_clones("avx2", "default")]]
#endif
void rows(const Channels& c, const int32_t* sums, int64_t first, int64_t n_rows, int64_t m_count, const TensorView& y) {
  switch (c.epi.act) {
    case 1: with_out<1>(c, sums, first, n_rows, m_count, y); break;
    case 2: with_out<2>(c, sums, first, n_rows, m_count, y); break;
    case 3: with_out<3>(c, sums, first, n_rows, m_count, y); break;
    default: with_out<0>(c, sums, first, n_rows, m_count, y); break;
  }
}

template <class Out>
[[gnu::always_inline]] inline void quantize_of(const float* __restrict x, int64_t n, float scale, float zero,
                                               Out* __restrict y) {
  constexpr float lo = std::numeric_limits<Out>::min(), hi = std::numeric_limits<Out>::max();
  for (int64_t i = 0; i < n; ++i) {
    float v = std::rint(x[i] / scale);
    v = (v == v ? v : 0.0f) + zero;
    y[i] = static_cast<Out>(v < lo ? lo : (v > hi ? hi : v));
  }
}

#if defined(__x86_64__)
[[gnu::target_clones("avx2", "default")]]
#endif
void quantize_int8(const float* x, int64_t n, float scale, float zero, int8_t* y) {
  quantize_of(x, n, scale, zero, y);
}

#if defined(__x86_64__)
[[gnu::target_clones("avx2", "default")]]
#endif
void quantize_uint8(const float* x, int64_t n, float scale, float zero, uint8_t* y) {
  quantize_of(x, n, scale, zero, y);
}

template <class W>
[[gnu::always_inline]] inline void dot_rows_of(const int16_t* __restrict x, int64_t k, const W* __restrict w, int64_t n,
                                               int32_t* __restrict sums) {
  for (int64_t j = 0; j < n; ++j) {
    const W* __restrict wj = w + j * k;
    int32_t acc = 0;  // pairs of products in int32 (vpmaddwd): exact for |x| <= 255
    for (int64_t i = 0; i < k; ++i) acc += int32_t{x[i]} * int32_t{static_cast<int16_t>(wj[i])};
    sums[j] = acc;
  }
}

#if defined(__x86_64__)
[[gnu::target_clones("avx2", "default")]]
#endif
void dot_rows_s8(const int16_t* x, int64_t k, const int8_t* w, int64_t n, int32_t* sums) {
  dot_rows_of(x, k, w, n, sums);
}

#if defined(__x86_64__)
[[gnu::target_clones("avx2", "default")]]
#endif
void dot_rows_u8(const int16_t* x, int64_t k, const uint8_t* w, int64_t n, int32_t* sums) {
  dot_rows_of(x, k, w, n, sums);
}

}  // namespace

void dot_rows(const int16_t* x, int64_t k, const int8_t* w, int64_t n, int32_t* sums) { dot_rows_s8(x, k, w, n, sums); }
void dot_rows(const int16_t* x, int64_t k, const uint8_t* w, int64_t n, int32_t* sums) {
  dot_rows_u8(x, k, w, n, sums);
}

void quantize_floats(const float* x, int64_t n, float scale, float zero, int8_t* y) {
  quantize_int8(x, n, scale, zero, y);
}
void quantize_floats(const float* x, int64_t n, float scale, float zero, uint8_t* y) {
  quantize_uint8(x, n, scale, zero, y);
}

void store_rows(const Channels& c, const int32_t* sums, int64_t r0, int64_t r1, int64_t m_count, const TensorView& y) {
  // Few channels (LeNet's 6): groups of `rep` rows are one row of rep * m_count channels, whose
  // scales and biases repeat, so that the inner loop is long enough to vectorize.
  const int64_t rep = m_count < 64 ? (64 + m_count - 1) / m_count : 1;
  const int64_t groups = rep > 1 ? (r1 - r0) / rep : 0;
  if (groups > 0) {
    Channels wide = c;
    wide.alpha.resize(static_cast<size_t>(m_count * rep));
    wide.bias.resize(static_cast<size_t>(m_count * rep));
    for (int64_t i = m_count; i < m_count * rep; ++i) {
      wide.alpha[static_cast<size_t>(i)] = c.alpha[static_cast<size_t>(i % m_count)];
      wide.bias[static_cast<size_t>(i)] = c.bias[static_cast<size_t>(i % m_count)];
    }
    rows(wide, sums, r0 * m_count, groups, m_count * rep, y);
    r0 += groups * rep;
  }
  rows(c, sums, r0 * m_count, r1 - r0, m_count, y);
}

}  // namespace kiln::cpu::quant
