// Gather, GatherElements and GatherND on the GPU (the CPU kernels: runtime/cpu/tensor/index.cpp).
// Indices are int32 or int64 (a kernel argument, not a template parameter) and may be negative
// (counting from the end). An index outside [-dim, dim) sets kGpuIndexOutOfRange in *env.error and
// its element is skipped: nothing is read out of bounds. Where the CPU kernel checks every index
// even though the output is empty (Gather, GatherND), a check-only kernel does the same.
// Gather and GatherND copy slices, so a slice of a multiple of 16 (8, 4) bytes with aligned
// pointers moves in 16-byte (8, 4) words.
//
// ScatterElements and ScatterND on the GPU (the CPU kernels: runtime/cpu/tensor/index.cpp): the
// data is copied to the output, then one thread per update element writes or combines it.
//   reduction none: a plain store of raw words (every dtype). With duplicate indices the winner is
//     unspecified here (ONNX leaves it undefined; the CPU's last-wins is one valid outcome).
//   add/mul/max/min: an atomic read-modify-write in the numeric type (every numeric dtype): native
//     integer atomics where they exist, else a compare-and-swap loop (on the enclosing aligned
//     32-bit word for 1- and 2-byte types). Results equal the CPU's except that float sums and
//     products of duplicates round in another order. Formulas are the CPU's Combine: integers
//     wrap, half types compute in float, max/min keep the destination unless the update compares
//     greater/smaller (so a NaN destination stays and a NaN update is ignored).
// Bad indices set kGpuIndexOutOfRange and skip their elements.
#include <cstring>

#include "runtime/cuda/tensor/tensor_internal.cuh"

namespace kiln::gpu::tensor {

namespace {

using Dims = std::vector<int64_t>;

int64_t prod(std::span<const int64_t> s, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e; ++i) p *= s[i];
  return p;
}

// ---- Gather ------------------------------------------------------------------------------------
// out [outer, n, inner] from x [outer, dim, inner]; sizes in words.
template <class I, class W>
__global__ void __launch_bounds__(kThreads)
    gather_kernel(const W* __restrict__ src, W* __restrict__ dst, const void* ind, bool i64, I total, I n, I dim,
                  I inner, int* error) {
  const I step = static_cast<I>(grid_threads());
  for (I e = static_cast<I>(global_thread()); e < total; e += step) {
    const I q = e / inner, c = e - q * inner;
    const I o = q / n, j = q - o * n;
    const int64_t idx = fix_index(load_index(ind, i64, static_cast<int64_t>(j)), static_cast<int64_t>(dim));
    if (idx < 0) {
      report(error, kGpuIndexOutOfRange);
      continue;
    }
    dst[e] = src[(o * dim + static_cast<I>(idx)) * inner + c];
  }
}

void gather(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out, GpuEnv& env) {
  const TensorView &x = in[0], &ind = in[1];
  const size_t r = x.rank();
  const int64_t axis = normalize_axis(attrs_as<AxisAttrs>(attrs).axis, static_cast<int64_t>(r));
  const int64_t outer = prod(x.shape, 0, axis), dim = x.shape[axis], inner = prod(x.shape, axis + 1, r);
  const int64_t n = ind.numel();
  const size_t esize = dtype_size(x.dtype);
  if (out[0].numel() == 0) {
    IndexDims dims;
    dims.dim[0] = dim;
    return check_indices(ind.data, index64(ind), n, dims, env, "Gather");
  }
  const size_t w = widest_word(esize, {inner * static_cast<int64_t>(esize)}, {x.data, out[0].data});
  const int64_t iw = inner * static_cast<int64_t>(esize) / static_cast<int64_t>(w);
  const int64_t total = outer * n * iw;
  dispatch_word(w, [&](auto tag) {
    using W = typename decltype(tag)::type;
    const W* sp = static_cast<const W*>(x.data);
    W* dp = static_cast<W*>(out[0].data);
    if (total < k32Bit && outer * dim * iw < k32Bit)
      gather_kernel<uint32_t, W><<<blocks_for(total), kThreads, 0, env.stream>>>(
          sp, dp, ind.data, index64(ind), static_cast<uint32_t>(total), static_cast<uint32_t>(n),
          static_cast<uint32_t>(dim), static_cast<uint32_t>(iw), env.error);
    else
      gather_kernel<uint64_t, W><<<blocks_for(total), kThreads, 0, env.stream>>>(
          sp, dp, ind.data, index64(ind), static_cast<uint64_t>(total), static_cast<uint64_t>(n),
          static_cast<uint64_t>(dim), static_cast<uint64_t>(iw), env.error);
  });
  check_launch("Gather");
}

// ---- GatherElements ----------------------------------------------------------------------------
template <class I, class W>
__global__ void __launch_bounds__(kThreads)
    gather_elements_kernel(const W* __restrict__ src, W* __restrict__ dst, const void* ind, bool i64, I total,
                           ElementsPlan p, int* error) {
  const I step = static_cast<I>(grid_threads());
  for (I e = static_cast<I>(global_thread()); e < total; e += step) {
    const I off = elements_offset(p, e);
    const int64_t idx = fix_index(load_index(ind, i64, static_cast<int64_t>(e)), p.dim);
    if (idx < 0) {
      report(error, kGpuIndexOutOfRange);
      continue;
    }
    dst[e] = src[off + static_cast<I>(idx) * static_cast<I>(p.axis_stride)];
  }
}

void gather_elements(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                     GpuEnv& env) {
  const TensorView &x = in[0], &ind = in[1];
  const int64_t total = ind.numel();
  if (total == 0) return;
  const ElementsPlan p = elements_plan(x, ind, attrs_as<AxisAttrs>(attrs).axis, "GatherElements");
  dispatch_word(dtype_size(x.dtype), [&](auto tag) {
    using W = typename decltype(tag)::type;
    const W* sp = static_cast<const W*>(x.data);
    W* dp = static_cast<W*>(out[0].data);
    if (total < k32Bit && x.numel() < k32Bit)
      gather_elements_kernel<uint32_t, W><<<blocks_for(total), kThreads, 0, env.stream>>>(
          sp, dp, ind.data, index64(ind), static_cast<uint32_t>(total), p, env.error);
    else
      gather_elements_kernel<uint64_t, W><<<blocks_for(total), kThreads, 0, env.stream>>>(
          sp, dp, ind.data, index64(ind), static_cast<uint64_t>(total), p, env.error);
  });
  check_launch("GatherElements");
}

// ---- GatherND ----------------------------------------------------------------------------------
// Output element e = (batch, tuple, c): the tuple's m indices pick a slice of x's dims b .. b+m-1
// in that batch; c walks the slice (slice words each).
struct NDPlan {
  int m = 0;
  int64_t dim[kMaxDims] = {};     // x.shape[b + j]
  int64_t stride[kMaxDims] = {};  // x strides of those dims, in words
  int64_t tuples = 1;             // tuples per batch
  int64_t batch_stride = 0;       // words
  int64_t slice = 0;              // words
};

template <class W>
__global__ void __launch_bounds__(kThreads)
    gather_nd_kernel(const W* __restrict__ src, W* __restrict__ dst, const void* ind, bool i64, int64_t total, NDPlan p,
                     int* error) {
  const int64_t step = grid_threads();
  for (int64_t e = global_thread(); e < total; e += step) {
    const int64_t t = e / p.slice, c = e - t * p.slice;
    int64_t off = (t / p.tuples) * p.batch_stride;
    bool ok = true;
#pragma unroll
    for (int j = 0; j < kMaxDims; ++j) {
      if (j >= p.m) break;
      const int64_t v = fix_index(load_index(ind, i64, t * p.m + j), p.dim[j]);
      ok = ok && v >= 0;
      off += v * p.stride[j];
    }
    if (!ok) {
      report(error, kGpuIndexOutOfRange);
      continue;
    }
    dst[e] = src[off + c];
  }
}

void gather_nd(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
               GpuEnv& env) {
  const TensorView &x = in[0], &ind = in[1];
  const size_t r = x.rank(), q = ind.rank();
  const size_t b = static_cast<size_t>(attrs_as<GatherNDAttrs>(attrs).batch_dims);
  const size_t m = static_cast<size_t>(ind.shape[q - 1]);
  const int64_t batches = prod(x.shape, 0, b), tuples = prod(ind.shape, b, q - 1);
  const int64_t slice = prod(x.shape, b + m, r), batch_stride = prod(x.shape, b, r);
  const Dims xs = strides_of(x.shape);
  if (m > static_cast<size_t>(kMaxDims))
    throw Error("GatherND: " + std::to_string(m) + " indices per tuple; the CUDA backend supports at most " +
                std::to_string(kMaxDims));
  IndexDims dims;
  dims.m = static_cast<int>(m);
  for (size_t j = 0; j < m; ++j) dims.dim[j] = x.shape[b + j];
  if (out[0].numel() == 0) return check_indices(ind.data, index64(ind), batches * tuples * m, dims, env, "GatherND");
  const size_t esize = dtype_size(x.dtype);
  const size_t w = widest_word(esize, {slice * static_cast<int64_t>(esize)}, {x.data, out[0].data});
  const int64_t f = static_cast<int64_t>(w / esize);
  NDPlan p;
  p.m = static_cast<int>(m);
  for (size_t j = 0; j < m; ++j) {
    p.dim[j] = x.shape[b + j];
    p.stride[j] = xs[b + j] / f;  // a multiple of slice, so of f
  }
  p.tuples = tuples;
  p.batch_stride = batch_stride / f;
  p.slice = slice / f;
  const int64_t total = batches * tuples * p.slice;
  dispatch_word(w, [&](auto tag) {
    using W = typename decltype(tag)::type;
    gather_nd_kernel<W><<<blocks_for(total), kThreads, 0, env.stream>>>(
        static_cast<const W*>(x.data), static_cast<W*>(out[0].data), ind.data, index64(ind), total, p, env.error);
  });
  check_launch("GatherND");
}

}  // namespace

ElementsPlan elements_plan(const TensorView& x, const TensorView& ind, int64_t axis_attr, const char* op) {
  const int64_t r = static_cast<int64_t>(x.rank());
  const int64_t axis = normalize_axis(axis_attr, r);
  if (r > kMaxDims)
    throw Error(std::string(op) + ": rank " + std::to_string(r) + " is above the CUDA backend's limit of " +
                std::to_string(kMaxDims));
  const Dims xs = strides_of(x.shape);
  ElementsPlan p;
  p.rank = static_cast<int>(r);
  p.axis = static_cast<int>(axis);
  p.dim = x.shape[axis];
  p.axis_stride = xs[axis];
  for (int64_t d = 0; d < r; ++d) {
    p.ishape[d] = ind.shape[d];
    p.xstride[d] = xs[d];
  }
  return p;
}

namespace {



template <class T>
__device__ __forceinline__ T combine(ScatterReduction red, T d, T u) {
  if constexpr (std::is_integral_v<T>) {
    using U = unsigned long long;
    switch (red) {
      case ScatterReduction::kAdd: return static_cast<T>(static_cast<U>(d) + static_cast<U>(u));
      case ScatterReduction::kMul: return static_cast<T>(static_cast<U>(d) * static_cast<U>(u));
      case ScatterReduction::kMax: return u > d ? u : d;
      case ScatterReduction::kMin: return u < d ? u : d;
      default: return u;
    }
  } else {
    const Compute<T> a = load(d), b = load(u);
    switch (red) {
      case ScatterReduction::kAdd: return store<T>(a + b);
      case ScatterReduction::kMul: return store<T>(a * b);
      case ScatterReduction::kMax: return b > a ? u : d;
      case ScatterReduction::kMin: return b < a ? u : d;
      default: return u;
    }
  }
}

template <class B, class T>
__device__ __forceinline__ B bits_of(T v) {
  B b = 0;
  memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T, class B>
__device__ __forceinline__ T value_of(B b) {
  T v;
  memcpy(&v, &b, sizeof(T));
  return v;
}

template <class T>
__device__ void atomic_combine(T* addr, T u, ScatterReduction red) {
  if constexpr (std::is_integral_v<T> && sizeof(T) >= 4) {
    // Native atomics: wrapping adds in the unsigned type, signed or unsigned max/min.
    using U = std::conditional_t<sizeof(T) == 4, unsigned int, unsigned long long>;
    using S = std::conditional_t<sizeof(T) == 4, int, long long>;
    using M = std::conditional_t<std::is_signed_v<T>, S, U>;
    if (red == ScatterReduction::kAdd) return (void)atomicAdd(reinterpret_cast<U*>(addr), static_cast<U>(u));
    if (red == ScatterReduction::kMax) return (void)atomicMax(reinterpret_cast<M*>(addr), static_cast<M>(u));
    if (red == ScatterReduction::kMin) return (void)atomicMin(reinterpret_cast<M*>(addr), static_cast<M>(u));
  }
  if constexpr (sizeof(T) >= 4) {
    using U = std::conditional_t<sizeof(T) == 4, unsigned int, unsigned long long>;
    U* a = reinterpret_cast<U*>(addr);
    U old = *a, assumed;
    do {
      assumed = old;
      old = atomicCAS(a, assumed, bits_of<U>(combine(red, value_of<T>(assumed), u)));
    } while (old != assumed);
  } else {
    // The element's bytes inside its aligned 32-bit word; the other bytes are written back as read.
    const auto p = reinterpret_cast<uintptr_t>(addr);
    auto* a = reinterpret_cast<unsigned int*>(p & ~uintptr_t{3});
    const unsigned shift = static_cast<unsigned>(p & 3) * 8;
    const unsigned mask = (sizeof(T) == 1 ? 0xFFu : 0xFFFFu) << shift;
    using B = std::conditional_t<sizeof(T) == 1, uint8_t, uint16_t>;
    unsigned int old = *a, assumed;
    do {
      assumed = old;
      const T cur = value_of<T>(static_cast<B>((assumed & mask) >> shift));
      const unsigned nv = static_cast<unsigned>(bits_of<B>(combine(red, cur, u))) << shift;
      old = atomicCAS(a, assumed, (assumed & ~mask) | nv);
    } while (old != assumed);
  }
}

template <bool kReduce, class T>
__device__ __forceinline__ void put(T* o, T u, ScatterReduction red) {
  if constexpr (kReduce)
    atomic_combine(o, u, red);
  else
    *o = u;
}

// ---- ScatterElements ---------------------------------------------------------------------------
template <bool kReduce, class T>
__global__ void __launch_bounds__(kThreads)
    scatter_elements_kernel(T* dst, const T* __restrict__ upd, const void* ind, bool i64, int64_t total, ElementsPlan p,
                            ScatterReduction red, int* error) {
  const int64_t step = grid_threads();
  for (int64_t e = global_thread(); e < total; e += step) {
    const int64_t idx = fix_index(load_index(ind, i64, e), p.dim);
    if (idx < 0) {
      report(error, kGpuIndexOutOfRange);
      continue;
    }
    put<kReduce>(dst + elements_offset<uint64_t>(p, static_cast<uint64_t>(e)) + idx * p.axis_stride, upd[e], red);
  }
}

// ---- ScatterND ---------------------------------------------------------------------------------
// Update element e = (tuple t, c): the tuple's k indices pick a slice of x's first k dims.
struct ScatterNDPlan {
  int k = 0;
  int64_t dim[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};
  int64_t slice = 0;
};

template <bool kReduce, class T>
__global__ void __launch_bounds__(kThreads)
    scatter_nd_kernel(T* dst, const T* __restrict__ upd, const void* ind, bool i64, int64_t total, ScatterNDPlan p,
                      ScatterReduction red, int* error) {
  const int64_t step = grid_threads();
  for (int64_t e = global_thread(); e < total; e += step) {
    const int64_t t = e / p.slice, c = e - t * p.slice;
    int64_t off = 0;
    bool ok = true;
#pragma unroll
    for (int j = 0; j < kMaxDims; ++j) {
      if (j >= p.k) break;
      const int64_t v = fix_index(load_index(ind, i64, t * p.k + j), p.dim[j]);
      ok = ok && v >= 0;
      off += v * p.stride[j];
    }
    if (!ok) {
      report(error, kGpuIndexOutOfRange);
      continue;
    }
    put<kReduce>(dst + off + c, upd[e], red);
  }
}

// Calls launch(Tag<T>, bool_constant<kReduce>) with raw words for reduction none, else the
// numeric type.
template <class Fn>
void dispatch_scatter(DataType dt, ScatterReduction red, const char* op, Fn&& launch) {
  if (red == ScatterReduction::kNone)
    dispatch_word(dtype_size(dt), [&](auto tag) {
      using W = typename decltype(tag)::type;
      if constexpr (sizeof(W) <= 8) launch(tag, std::false_type{});
    });
  else
    dispatch_device_numeric(dt, op, [&](auto tag) { launch(tag, std::true_type{}); });
}

void scatter_elements(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                      GpuEnv& env) {
  const auto& a = attrs_as<ScatterAttrs>(attrs);
  const TensorView &x = in[0], &ind = in[1], &upd = in[2];
  const int64_t total = ind.numel();
  copy_device(out[0].data, x.data, x.bytes(), env, "ScatterElements");
  if (total == 0) return;
  const ElementsPlan p = elements_plan(x, ind, a.axis, "ScatterElements");
  dispatch_scatter(x.dtype, a.reduction, "ScatterElements", [&](auto tag, auto reduce) {
    using T = typename decltype(tag)::type;
    scatter_elements_kernel<decltype(reduce)::value, T>
        <<<blocks_for(total), kThreads, 0, env.stream>>>(static_cast<T*>(out[0].data), static_cast<const T*>(upd.data),
                                                         ind.data, index64(ind), total, p, a.reduction, env.error);
  });
  check_launch("ScatterElements");
}

void scatter_nd(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                GpuEnv& env) {
  const auto& a = attrs_as<ScatterAttrs>(attrs);
  const TensorView &x = in[0], &ind = in[1], &upd = in[2];
  const size_t r = x.rank(), q = ind.rank();
  const size_t k = static_cast<size_t>(ind.shape[q - 1]);
  int64_t tuples = 1, slice = 1;
  for (size_t i = 0; i + 1 < q; ++i) tuples *= ind.shape[i];
  for (size_t i = k; i < r; ++i) slice *= x.shape[i];
  if (k > static_cast<size_t>(kMaxDims))
    throw Error("ScatterND: " + std::to_string(k) + " indices per tuple; the CUDA backend supports at most " +
                std::to_string(kMaxDims));
  copy_device(out[0].data, x.data, x.bytes(), env, "ScatterND");
  IndexDims dims;
  dims.m = static_cast<int>(k);
  for (size_t j = 0; j < k; ++j) dims.dim[j] = x.shape[j];
  if (slice == 0 || tuples == 0) return check_indices(ind.data, index64(ind), tuples * k, dims, env, "ScatterND");
  const Dims xs = strides_of(x.shape);
  ScatterNDPlan p;
  p.k = static_cast<int>(k);
  for (size_t j = 0; j < k; ++j) {
    p.dim[j] = x.shape[j];
    p.stride[j] = xs[j];
  }
  p.slice = slice;
  const int64_t total = tuples * slice;
  dispatch_scatter(x.dtype, a.reduction, "ScatterND", [&](auto tag, auto reduce) {
    using T = typename decltype(tag)::type;
    scatter_nd_kernel<decltype(reduce)::value, T>
        <<<blocks_for(total), kThreads, 0, env.stream>>>(static_cast<T*>(out[0].data), static_cast<const T*>(upd.data),
                                                         ind.data, index64(ind), total, p, a.reduction, env.error);
  });
  check_launch("ScatterND");
}

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kGather, gather},
    {OpKind::kGatherElements, gather_elements},
    {OpKind::kGatherND, gather_nd},
    {OpKind::kScatterElements, scatter_elements},
    {OpKind::kScatterND, scatter_nd},
};

}  // namespace

std::span<const GpuKernelEntry> index_entries() { return kEntries; }

}  // namespace kiln::gpu::tensor
