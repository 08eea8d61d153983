// CPU kernels of the tensor family's generator ops: ConstantOfShape, EyeLike, OneHot, Range and
// Trilu.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/shape_infer.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/tensor/tensor_internal.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln {
namespace cpu::tensor_ops {

namespace {

using Dims = std::vector<int64_t>;

constexpr int64_t kParallelBytes = int64_t{1} << 16;

template <class Fn>
void run_rows(KernelEnv& env, int64_t rows, int64_t bytes_per_row, const Fn& fn) {
  if (env.pool && rows > 1 && rows * bytes_per_row >= kParallelBytes)
    env.pool->parallel_for(rows, fn);
  else
    fn(0, rows);
}

template <class T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, bool>)
    return v != 0;
  else
    return static_cast<T>(static_cast<ComputeType<T>>(v));
}

}  // namespace

void constant_of_shape(OpKind, const Attrs& attrs, std::span<const TensorView>, std::span<const TensorView> out,
                       KernelEnv&) {
  const Scalar& v = attrs_as<ConstantOfShapeAttrs>(attrs).value;
  dispatch_bytes(out[0].dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T val;
    std::memcpy(&val, v.bytes.data(), sizeof(T));  // little-endian: the first bytes hold the value
    std::fill_n(out[0].as<T>(), out[0].numel(), val);
  });
}

void range(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, KernelEnv&) {
  const int64_t n = out[0].numel();
  dispatch_numeric(out[0].dtype, "Range", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T s = *in[0].as<const T>(), d = *in[2].as<const T>();
    T* o = out[0].as<T>();
    if constexpr (kIsFloat<T>) {
      // start + i * delta per element (no accumulated rounding), rounded once to T.
      const double ds = static_cast<ComputeType<T>>(s), dd = static_cast<ComputeType<T>>(d);
      for (int64_t i = 0; i < n; ++i) o[i] = from_double<T>(ds + static_cast<double>(i) * dd);
    } else {
      // Every value lies between start and limit, so it fits T; 128-bit avoids intermediate overflow.
      const __int128 ds = s, dd = d;
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(ds + static_cast<__int128>(i) * dd);
    }
  });
}

void eye_like(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out, KernelEnv&) {
  const TensorView& o = out[0];
  const int64_t rows = o.shape[0], cols = o.shape[1], k = attrs_as<EyeLikeAttrs>(attrs).k;
  if (o.bytes() > 0) std::memset(o.data, 0, o.bytes());  // all-zero bytes are 0 in every dtype
  if (k >= cols || k <= -rows) return;
  const int64_t i0 = std::max<int64_t>(0, -k), i1 = std::min(rows, cols - k);
  dispatch_all(o.dtype, "EyeLike", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T one = from_double<T>(1.0);
    for (int64_t i = i0; i < i1; ++i) o.as<T>()[i * cols + i + k] = one;
  });
}

void one_hot(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out, KernelEnv&) {
  const TensorView &ind = in[0], &vals = in[2], &o = out[0];
  const int64_t r = static_cast<int64_t>(ind.rank());
  int64_t axis = attrs_as<OneHotAttrs>(attrs).axis;
  if (axis < 0) axis += r + 1;
  const int64_t depth = o.shape[axis];
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < r; ++i) (i < axis ? outer : inner) *= ind.shape[i];
  // Class of every index, or -1 when it is outside [-depth, depth - 1] (all off_value).
  std::vector<int64_t> cls(static_cast<size_t>(ind.numel()));
  dispatch_numeric(ind.dtype, "OneHot", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = ind.as<const T>();
    for (size_t i = 0; i < cls.size(); ++i) {
      // Integer value of the index (floats truncate, as a cast to int64 does) if in [-depth, depth).
      bool ok = false;
      int64_t c = 0;
      if constexpr (kIsFloat<T>) {
        const double v = std::trunc(static_cast<double>(static_cast<ComputeType<T>>(p[i])));
        ok = v >= static_cast<double>(-depth) && v < static_cast<double>(depth);  // false for NaN
        if (ok) c = static_cast<int64_t>(v);
      } else if constexpr (std::is_unsigned_v<T>) {
        ok = p[i] < static_cast<uint64_t>(depth);
        if (ok) c = static_cast<int64_t>(p[i]);
      } else {
        ok = p[i] >= -depth && p[i] < depth;
        if (ok) c = p[i];
      }
      if (!ok)
        c = -1;
      else if (c < 0)
        c += depth;
      cls[i] = c;
    }
  });
  dispatch_bytes(o.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T off = vals.as<const T>()[0], on = vals.as<const T>()[1];
    T* dst = o.as<T>();
    std::fill_n(dst, o.numel(), off);
    for (int64_t a = 0; a < outer; ++a)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t c = cls[a * inner + i];
        if (c >= 0) dst[(a * depth + c) * inner + i] = on;
      }
  });
}

void trilu(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
           KernelEnv& env) {
  const TensorView &x = in[0], &o = out[0];
  const bool upper = attrs_as<TriluAttrs>(attrs).upper != 0;
  const size_t r = x.rank();
  const int64_t rows = x.shape[r - 2], cols = x.shape[r - 1];
  if (o.numel() == 0) return;
  int64_t k = in.size() > 1 && in[1].exists ? in[1].to_int64()[0] : 0;
  k = std::clamp<int64_t>(k, -rows - 1, cols + 1);  // beyond these every element is kept or zeroed
  const size_t esize = dtype_size(x.dtype);
  const int64_t total_rows = o.numel() / cols;
  run_rows(env, total_rows, cols * static_cast<int64_t>(esize), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      const int64_t i = row % rows;
      // upper keeps columns j >= i + k; lower keeps j <= i + k.
      const int64_t cut = std::clamp<int64_t>(upper ? i + k : i + k + 1, 0, cols);
      const int64_t keep_b = upper ? cut : 0, keep_e = upper ? cols : cut;
      uint8_t* d = static_cast<uint8_t*>(o.data) + row * cols * esize;
      const uint8_t* s = static_cast<const uint8_t*>(x.data) + row * cols * esize;
      if (keep_e > keep_b && d != s) std::memcpy(d + keep_b * esize, s + keep_b * esize, (keep_e - keep_b) * esize);
      if (upper)
        std::memset(d, 0, keep_b * esize);
      else
        std::memset(d + keep_e * esize, 0, (cols - keep_e) * esize);
    }
  });
}

namespace {

constexpr KernelEntry kEntries[] = {
    {OpKind::kConstantOfShape, constant_of_shape},
    {OpKind::kRange, range},
    {OpKind::kEyeLike, eye_like},
    {OpKind::kOneHot, one_hot},
    {OpKind::kTrilu, trilu},
};

}  // namespace

std::span<const KernelEntry> gen_kernel_entries() { return kEntries; }

}  // namespace cpu::tensor_ops
}  // namespace kiln
