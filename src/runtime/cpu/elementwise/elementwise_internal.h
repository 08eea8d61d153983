// Shared machinery of the CPU elementwise kernels (private to src/runtime/cpu/elementwise/; the
// quant family's QuantizeLinear / DequantizeLinear (quant/quantize.cpp) use it too):
// element load/store through the compute type, overflow-safe integer arithmetic, saturating
// float->int conversion, the broadcast plan + row walker, and block-parallel loops.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "core/shape_infer.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln::cpu::ew {

// ---- element access ------------------------------------------------------------------------
template <class T>
inline constexpr bool kIsHalfType = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Bool tensors are read as bytes and tested against 0, so a stray byte value cannot make a
// `bool` load undefined.
template <class T>
using Storage = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;

template <class T>
inline ComputeType<T> load(T v) {
  if constexpr (kIsHalfType<T>)
    return static_cast<float>(v);
  else
    return v;
}

template <class T, class C>
inline T store(C v) {
  if constexpr (kIsHalfType<T>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

// ---- integer arithmetic without UB ---------------------------------------------------------
// Signed overflow is UB, and small types promote to int (where uint16*uint16 can overflow), so
// the arithmetic runs in an unsigned type of at least 32 bits and wraps modulo 2^n on the way back.
template <class T>
using Wide = std::conditional_t<(sizeof(T) < 4), uint32_t, std::make_unsigned_t<T>>;

template <class T>
inline T wrap_add(T a, T b) {
  return static_cast<T>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b));
}
template <class T>
inline T wrap_sub(T a, T b) {
  return static_cast<T>(static_cast<Wide<T>>(a) - static_cast<Wide<T>>(b));
}
template <class T>
inline T wrap_mul(T a, T b) {
  return static_cast<T>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b));
}
template <class T>
inline T wrap_neg(T a) {
  return static_cast<T>(Wide<T>(0) - static_cast<Wide<T>>(a));
}

// Float -> integer with saturation: NaN -> 0, values beyond the range -> the range's ends, others
// truncate toward zero. (A plain static_cast is UB out of range.)
template <class To, class From>
inline To sat_float_to_int(From f) {
  const double d = static_cast<double>(f);
  if (d != d) return To(0);
  constexpr double lo = static_cast<double>(std::numeric_limits<To>::min());
  // max() rounds up to a power of two for 32/64-bit types, so `>=` catches everything not below it.
  constexpr double hi = static_cast<double>(std::numeric_limits<To>::max());
  if (d <= lo) return std::numeric_limits<To>::min();
  if (d >= hi) return std::numeric_limits<To>::max();
  return static_cast<To>(d);
}

// ---- parallel loops --------------------------------------------------------------------------
inline constexpr int64_t kBlock = 16384;  // elements per parallel work item

// Calls fn(begin, end) over [0, n): serially when small or without a pool, else in blocks.
template <class Fn>
void parallel_range(KernelEnv& env, int64_t n, Fn&& fn) {
  if (n <= 0) return;
  if (!env.pool || env.pool->team() <= 1 || n <= kBlock) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  env.pool->parallel_for(blocks, [&](int64_t b, int64_t e) { fn(b * kBlock, std::min(n, e * kBlock)); });
}

// ---- broadcasting ----------------------------------------------------------------------------
// Output shape with per-input element strides (0 along broadcast dims). Size-1 output dims are
// dropped and adjacent dims merged wherever every input stays linear across them, so same-shape
// inputs become one contiguous row and "[N,C,H,W] + [1,C,1,1]" becomes three dims.
template <size_t K>
struct BroadcastPlan {
  std::vector<int64_t> shape;
  std::array<std::vector<int64_t>, K> strides;
};

template <size_t K>
BroadcastPlan<K> make_plan(std::span<const int64_t> out, const std::array<std::span<const int64_t>, K>& ins) {
  const size_t r = out.size();
  std::array<std::vector<int64_t>, K> full;
  for (size_t k = 0; k < K; ++k) {
    full[k].assign(r, 0);
    const size_t lead = r - ins[k].size();
    int64_t acc = 1;
    for (size_t i = ins[k].size(); i-- > 0;) {
      full[k][lead + i] = ins[k][i] == 1 ? 0 : acc;
      acc *= ins[k][i];
    }
  }
  BroadcastPlan<K> p;
  for (size_t i = 0; i < r; ++i) {
    if (out[i] == 1) continue;
    bool merge = !p.shape.empty();
    for (size_t k = 0; k < K && merge; ++k) merge = p.strides[k].back() == full[k][i] * out[i];
    if (merge) {
      p.shape.back() *= out[i];
      for (size_t k = 0; k < K; ++k) p.strides[k].back() = full[k][i];
    } else {
      p.shape.push_back(out[i]);
      for (size_t k = 0; k < K; ++k) p.strides[k].push_back(full[k][i]);
    }
  }
  if (p.shape.empty()) {
    p.shape.push_back(1);
    for (size_t k = 0; k < K; ++k) p.strides[k].push_back(0);
  }
  return p;
}

// Walks output elements [begin, end) in rows along the innermost plan dim, calling
// row(out_offset, in_offsets, inner_strides, count).
template <size_t K, class RowFn>
void walk(const BroadcastPlan<K>& p, int64_t begin, int64_t end, RowFn&& row) {
  const size_t r = p.shape.size();
  std::vector<int64_t> idx(r);
  std::array<int64_t, K> off{};
  int64_t rem = begin;
  for (size_t i = r; i-- > 0;) {
    idx[i] = rem % p.shape[i];
    rem /= p.shape[i];
    for (size_t k = 0; k < K; ++k) off[k] += idx[i] * p.strides[k][i];
  }
  std::array<int64_t, K> inner{};
  for (size_t k = 0; k < K; ++k) inner[k] = p.strides[k][r - 1];
  const int64_t n_inner = p.shape[r - 1];
  for (int64_t pos = begin; pos < end;) {
    const int64_t cnt = std::min(n_inner - idx[r - 1], end - pos);
    row(pos, off, inner, cnt);
    pos += cnt;
    idx[r - 1] += cnt;
    for (size_t k = 0; k < K; ++k) off[k] += cnt * inner[k];
    for (size_t i = r - 1; i > 0 && idx[i] == p.shape[i]; --i) {
      idx[i] = 0;
      ++idx[i - 1];
      for (size_t k = 0; k < K; ++k) off[k] += p.strides[k][i - 1] - p.shape[i] * p.strides[k][i];
    }
  }
}

// out[i] = f(a[i], b[i]) with the common stride patterns split out so the compiler vectorizes them.
template <class TA, class TB, class TO, class F>
inline void binary_row(const TA* a, int64_t sa, const TB* b, int64_t sb, TO* o, int64_t n, const F& f) {
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = store<TO>(f(load(a[i]), load(b[i])));
  } else if (sa == 0 && sb == 1) {
    const auto x = load(a[0]);
    for (int64_t i = 0; i < n; ++i) o[i] = store<TO>(f(x, load(b[i])));
  } else if (sa == 1 && sb == 0) {
    const auto y = load(b[0]);
    for (int64_t i = 0; i < n; ++i) o[i] = store<TO>(f(load(a[i]), y));
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = store<TO>(f(load(a[i * sa]), load(b[i * sb])));
  }
}

// Broadcasting binary op: out = f(a, b), f taking compute types. TA/TB/TO are storage types.
template <class TA, class TB, class TO, class F>
void run_binary(const TensorView& a, const TensorView& b, const TensorView& out, KernelEnv& env, const F& f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const BroadcastPlan<2> plan = make_plan<2>(out.shape, {a.shape, b.shape});
  const TA* pa = a.as<const TA>();
  const TB* pb = b.as<const TB>();
  TO* po = out.as<TO>();
  parallel_range(env, n, [&](int64_t begin, int64_t end) {
    walk(plan, begin, end,
         [&](int64_t o, const std::array<int64_t, 2>& off, const std::array<int64_t, 2>& st, int64_t cnt) {
           binary_row(pa + off[0], st[0], pb + off[1], st[1], po + o, cnt, f);
         });
  });
}

// Contiguous unary op: out[i] = f(in[i]).
template <class TI, class TO, class F>
void run_unary(const TensorView& in, const TensorView& out, KernelEnv& env, const F& f) {
  const TI* pi = in.as<const TI>();
  TO* po = out.as<TO>();
  parallel_range(env, in.numel(), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) po[i] = store<TO>(f(load(pi[i])));
  });
}

// ---- kernel entry points implemented in the family's files --------------------------------
std::span<const KernelEntry> unary_kernel_entries();   // unary.cpp
std::span<const KernelEntry> binary_kernel_entries();  // binary.cpp
std::span<const KernelEntry> misc_kernel_entries();    // misc.cpp

}  // namespace kiln::cpu::ew
