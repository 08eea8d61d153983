// CPU kernels of the tensor family's index ops: Gather, GatherElements, GatherND, ScatterElements,
// ScatterND. Every index is checked before it is used (out of range: kiln::Error); negative indices
// count from the end. Gathers run in parallel; scatters run in index order, so with duplicate
// indices the last update wins (reduction none) or all are combined in order.
#include <cstring>
#include <string>
#include <type_traits>

#include "core/shape_infer.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/tensor/tensor_internal.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln::cpu::tensor_ops {

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

[[noreturn]] void index_error(const char* op, int64_t v, int64_t dim) {
  throw Error(std::string(op) + ": index " + std::to_string(v) + " is out of range for a dimension of size " +
              std::to_string(dim));
}

inline int64_t fix_index(int64_t v, int64_t dim, const char* op) {
  if (v < -dim || v >= dim) index_error(op, v, dim);
  return v < 0 ? v + dim : v;
}

// Calls fn(Tag<I>) with the index type (int32 or int64).
template <class Fn>
void dispatch_index(DataType t, Fn&& fn) {
  if (t == DataType::kInt32)
    fn(Tag<int32_t>{});
  else
    fn(Tag<int64_t>{});
}

int64_t prod(std::span<const int64_t> s, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e; ++i) p *= s[i];
  return p;
}

void copy_data(const TensorView& in, const TensorView& out) {
  if (in.data != out.data && out.bytes() > 0) std::memcpy(out.data, in.data, out.bytes());
}

// Integer arithmetic wraps (in unsigned, at least int width: no signed overflow, no promotion trap
// of uint16 * uint16); floats compute in ComputeType.
template <class T>
struct Combine {
  using C = ComputeType<T>;
  static T add(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using W = std::make_unsigned_t<decltype(a + b)>;
      return static_cast<T>(static_cast<W>(a) + static_cast<W>(b));
    } else {
      return T(static_cast<C>(a) + static_cast<C>(b));
    }
  }
  static T mul(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using W = std::make_unsigned_t<decltype(a * b)>;
      return static_cast<T>(static_cast<W>(a) * static_cast<W>(b));
    } else {
      return T(static_cast<C>(a) * static_cast<C>(b));
    }
  }
  static T max(T a, T b) { return static_cast<C>(b) > static_cast<C>(a) ? b : a; }
  static T min(T a, T b) { return static_cast<C>(b) < static_cast<C>(a) ? b : a; }
};

// Calls fn(Tag<T>, combine) where combine(dst, update) implements the reduction; reduction none
// works on raw bytes, the others on the numeric type.
template <class Fn>
void dispatch_reduction(DataType dt, ScatterReduction red, const char* op, Fn&& fn) {
  if (red == ScatterReduction::kNone) {
    dispatch_bytes(dt, [&](auto tag) {
      using T = typename decltype(tag)::type;
      fn(tag, [](T, T u) { return u; });
    });
    return;
  }
  dispatch_numeric(dt, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    switch (red) {
      case ScatterReduction::kAdd: fn(tag, [](T d, T u) { return Combine<T>::add(d, u); }); break;
      case ScatterReduction::kMul: fn(tag, [](T d, T u) { return Combine<T>::mul(d, u); }); break;
      case ScatterReduction::kMax: fn(tag, [](T d, T u) { return Combine<T>::max(d, u); }); break;
      case ScatterReduction::kMin: fn(tag, [](T d, T u) { return Combine<T>::min(d, u); }); break;
      case ScatterReduction::kNone: break;
    }
  });
}

}  // namespace

void gather(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
            KernelEnv& env) {
  const TensorView &x = in[0], &ind = in[1];
  const int64_t r = static_cast<int64_t>(x.rank());
  const int64_t axis = normalize_axis(attrs_as<AxisAttrs>(attrs).axis, r);
  const int64_t outer = prod(x.shape, 0, axis), dim = x.shape[axis], inner = prod(x.shape, axis + 1, r);
  const int64_t n = ind.numel();
  std::vector<int64_t> idx(n);
  dispatch_index(ind.dtype, [&](auto tag) {
    using I = typename decltype(tag)::type;
    for (int64_t j = 0; j < n; ++j) idx[j] = fix_index(ind.as<const I>()[j], dim, "Gather");
  });
  if (out[0].numel() == 0) return;
  dispatch_bytes(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = x.as<const T>();
    T* dst = out[0].as<T>();
    run_rows(env, outer * n, inner * static_cast<int64_t>(sizeof(T)), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const T* s = src + ((p / n) * dim + idx[p % n]) * inner;
        if (inner == 1)
          dst[p] = *s;
        else
          std::memcpy(dst + p * inner, s, static_cast<size_t>(inner) * sizeof(T));
      }
    });
  });
}

void gather_elements(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                     KernelEnv& env) {
  const TensorView &x = in[0], &ind = in[1];
  const size_t r = x.rank();
  const int64_t axis = normalize_axis(attrs_as<AxisAttrs>(attrs).axis, static_cast<int64_t>(r));
  const Dims xs = strides_of(x.shape);
  const int64_t total = ind.numel(), dim = x.shape[axis];
  if (total == 0) return;
  dispatch_bytes(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_index(ind.dtype, [&](auto itag) {
      using I = typename decltype(itag)::type;
      const I* ip = ind.as<const I>();
      const T* src = x.as<const T>();
      T* dst = out[0].as<T>();
      run_rows(env, total, static_cast<int64_t>(sizeof(T)), [&](int64_t b, int64_t e) {
        // Data offset of every dim but the axis, kept in step with the indices' multi-index.
        Dims id(r);
        int64_t off = 0, rem = b;
        for (size_t d = r; d-- > 0;) {
          id[d] = rem % ind.shape[d];
          rem /= ind.shape[d];
          if (static_cast<int64_t>(d) != axis) off += id[d] * xs[d];
        }
        for (int64_t p = b; p < e; ++p) {
          dst[p] = src[off + fix_index(ip[p], dim, "GatherElements") * xs[axis]];
          for (size_t d = r; d-- > 0;) {
            const bool on_axis = static_cast<int64_t>(d) == axis;
            if (++id[d] < ind.shape[d]) {
              if (!on_axis) off += xs[d];
              break;
            }
            if (!on_axis) off -= xs[d] * (ind.shape[d] - 1);
            id[d] = 0;
          }
        }
      });
    });
  });
}

void gather_nd(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
               KernelEnv& env) {
  const TensorView &x = in[0], &ind = in[1];
  const size_t r = x.rank(), q = ind.rank();
  const size_t b = static_cast<size_t>(attrs_as<GatherNDAttrs>(attrs).batch_dims);
  const size_t m = static_cast<size_t>(ind.shape[q - 1]);
  const int64_t batches = prod(x.shape, 0, b), tuples = prod(ind.shape, b, q - 1);
  const int64_t slice = prod(x.shape, b + m, r), batch_stride = prod(x.shape, b, r);
  const Dims xs = strides_of(x.shape);
  // Resolve every tuple to a data offset first, so index errors surface before any copy.
  std::vector<int64_t> offs(static_cast<size_t>(batches * tuples));
  dispatch_index(ind.dtype, [&](auto tag) {
    using I = typename decltype(tag)::type;
    const I* ip = ind.as<const I>();
    for (int64_t t = 0; t < batches * tuples; ++t) {
      int64_t off = (t / std::max<int64_t>(tuples, 1)) * batch_stride;
      for (size_t j = 0; j < m; ++j) off += fix_index(ip[t * m + j], x.shape[b + j], "GatherND") * xs[b + j];
      offs[t] = off;
    }
  });
  if (out[0].numel() == 0) return;
  const int64_t esize = static_cast<int64_t>(dtype_size(x.dtype));
  run_rows(env, batches * tuples, slice * esize, [&](int64_t bb, int64_t e) {
    for (int64_t t = bb; t < e; ++t)
      std::memcpy(static_cast<uint8_t*>(out[0].data) + t * slice * esize,
                  static_cast<const uint8_t*>(x.data) + offs[t] * esize, static_cast<size_t>(slice * esize));
  });
}

void scatter_elements(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                      KernelEnv&) {
  const auto& a = attrs_as<ScatterAttrs>(attrs);
  const TensorView &x = in[0], &ind = in[1], &upd = in[2];
  const size_t r = x.rank();
  const int64_t axis = normalize_axis(a.axis, static_cast<int64_t>(r));
  const Dims xs = strides_of(x.shape);
  const int64_t total = ind.numel(), dim = x.shape[axis];
  copy_data(x, out[0]);
  if (total == 0) return;
  dispatch_reduction(x.dtype, a.reduction, "ScatterElements", [&](auto tag, auto combine) {
    using T = typename decltype(tag)::type;
    dispatch_index(ind.dtype, [&](auto itag) {
      using I = typename decltype(itag)::type;
      const I* ip = ind.as<const I>();
      const T* up = upd.as<const T>();
      T* dst = out[0].as<T>();
      Dims id(r, 0);
      int64_t off = 0;
      for (int64_t p = 0; p < total; ++p) {
        T& o = dst[off + fix_index(ip[p], dim, "ScatterElements") * xs[axis]];
        o = combine(o, up[p]);
        for (size_t d = r; d-- > 0;) {
          const bool on_axis = static_cast<int64_t>(d) == axis;
          if (++id[d] < ind.shape[d]) {
            if (!on_axis) off += xs[d];
            break;
          }
          if (!on_axis) off -= xs[d] * (ind.shape[d] - 1);
          id[d] = 0;
        }
      }
    });
  });
}

void scatter_nd(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                KernelEnv&) {
  const auto& a = attrs_as<ScatterAttrs>(attrs);
  const TensorView &x = in[0], &ind = in[1], &upd = in[2];
  const size_t r = x.rank(), q = ind.rank();
  const size_t k = static_cast<size_t>(ind.shape[q - 1]);
  const int64_t tuples = prod(ind.shape, 0, q - 1), slice = prod(x.shape, k, r);
  const Dims xs = strides_of(x.shape);
  std::vector<int64_t> offs(static_cast<size_t>(tuples));
  dispatch_index(ind.dtype, [&](auto tag) {
    using I = typename decltype(tag)::type;
    const I* ip = ind.as<const I>();
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t off = 0;
      for (size_t j = 0; j < k; ++j) off += fix_index(ip[t * k + j], x.shape[j], "ScatterND") * xs[j];
      offs[t] = off;
    }
  });
  copy_data(x, out[0]);
  if (slice == 0) return;
  dispatch_reduction(x.dtype, a.reduction, "ScatterND", [&](auto tag, auto combine) {
    using T = typename decltype(tag)::type;
    const T* up = upd.as<const T>();
    T* dst = out[0].as<T>();
    for (int64_t t = 0; t < tuples; ++t) {
      T* o = dst + offs[t];
      const T* u = up + t * slice;
      for (int64_t i = 0; i < slice; ++i) o[i] = combine(o[i], u[i]);
    }
  });
}

namespace {

constexpr KernelEntry kEntries[] = {
    {OpKind::kGather, gather},
    {OpKind::kGatherElements, gather_elements},
    {OpKind::kGatherND, gather_nd},
    {OpKind::kScatterElements, scatter_elements},
    {OpKind::kScatterND, scatter_nd},
};

}  // namespace

std::span<const KernelEntry> index_kernel_entries() { return kEntries; }

}  // namespace kiln::cpu::tensor_ops
