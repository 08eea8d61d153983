// The generator ops on the GPU: Trilu, EyeLike, ConstantOfShape, Range, OneHot (the CPU kernels:
// runtime/cpu/tensor/gen.cpp). Values the CPU reads on the host come from the host copies of
// constant inputs (Trilu's k, Range's start/delta) or from attributes and static shapes, and reach
// the kernels as arguments; values in non-constant inputs (OneHot's off/on values) are read by the
// kernels on the device. Range's start and delta are read on the device too if a host copy is
// missing.
#include <cmath>
#include <cstring>

#include "runtime/cuda/tensor/tensor_internal.cuh"

namespace kiln::gpu::tensor {

namespace {

// ---- Trilu, EyeLike ----------------------------------------------------------------------------
// Trilu keeps x[.., i, j] where j - i >= k (upper) or j - i <= k (lower); k is int64 on the host,
// or read from k_dev (int32/int64) when there is no host copy. All-zero bytes are 0 in every dtype.
template <class I, class W>
__global__ void __launch_bounds__(kThreads)
    trilu_kernel(const W* src, W* dst, I n, I rows, I cols, int64_t k, const void* k_dev, bool k64, bool upper) {
  if (k_dev) k = load_index(k_dev, k64, 0);
  const I step = static_cast<I>(grid_threads());
  for (I e = static_cast<I>(global_thread()); e < n; e += step) {
    const I q = e / cols, j = e - q * cols, i = q % rows;
    const int64_t d = static_cast<int64_t>(j) - static_cast<int64_t>(i);
    dst[e] = (upper ? d >= k : d <= k) ? src[e] : W{};
  }
}

void trilu(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
           GpuEnv& env) {
  const TensorView &x = in[0], &o = out[0];
  const bool upper = attrs_as<TriluAttrs>(attrs).upper != 0;
  const int64_t n = o.numel(), rows = x.shape[x.rank() - 2], cols = x.shape[x.rank() - 1];
  if (n == 0) return;
  int64_t k = 0;
  const void* k_dev = nullptr;
  bool k64 = false;
  if (in.size() > 1 && in[1].exists) {
    if (in[1].dtype != DataType::kInt32 && in[1].dtype != DataType::kInt64) throw Error("Trilu: k must be an integer");
    if (const void* h = env.host(1)) {
      k = TensorView{in[1].dtype, in[1].shape, const_cast<void*>(h)}.to_int64()[0];
    } else {
      k_dev = in[1].data;
      k64 = index64(in[1]);
    }
  }
  dispatch_word(dtype_size(x.dtype), [&](auto tag) {
    using W = typename decltype(tag)::type;
    if constexpr (sizeof(W) <= 8) {
      const W* sp = static_cast<const W*>(x.data);
      W* dp = static_cast<W*>(o.data);
      if (n < k32Bit)
        trilu_kernel<uint32_t, W>
            <<<blocks_for(n), kThreads, 0, env.stream>>>(sp, dp, static_cast<uint32_t>(n), static_cast<uint32_t>(rows),
                                                         static_cast<uint32_t>(cols), k, k_dev, k64, upper);
      else
        trilu_kernel<uint64_t, W>
            <<<blocks_for(n), kThreads, 0, env.stream>>>(sp, dp, static_cast<uint64_t>(n), static_cast<uint64_t>(rows),
                                                         static_cast<uint64_t>(cols), k, k_dev, k64, upper);
    }
  });
  check_launch("Trilu");
}

template <class W>
__global__ void __launch_bounds__(kThreads) eye_kernel(W* dst, int64_t n, int64_t cols, int64_t k, W one) {
  const int64_t step = grid_threads();
  for (int64_t e = global_thread(); e < n; e += step) {
    const int64_t i = e / cols, j = e - i * cols;
    dst[e] = j - i == k ? one : W{};
  }
}

// The bytes of 1 in dtype (bool: 1).
uint64_t one_bits(DataType dt, const char* op) {
  uint64_t bits = 0;
  dispatch_all(dt, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T one;
    if constexpr (std::is_same_v<T, bool>)
      one = true;
    else
      one = T(static_cast<ComputeType<T>>(1.0));
    std::memcpy(&bits, &one, sizeof(T));
  });
  return bits;
}

void eye_like(OpKind, const Attrs& attrs, std::span<const TensorView>, std::span<const TensorView> out, GpuEnv& env) {
  const TensorView& o = out[0];
  const int64_t n = o.numel();
  if (n == 0) return;
  const uint64_t one = one_bits(o.dtype, "EyeLike");
  dispatch_word(dtype_size(o.dtype), [&](auto tag) {
    using W = typename decltype(tag)::type;
    if constexpr (sizeof(W) <= 8) {
      W w;
      std::memcpy(&w, &one, sizeof(W));
      eye_kernel<W><<<blocks_for(n), kThreads, 0, env.stream>>>(static_cast<W*>(o.data), n, o.shape[1],
                                                                attrs_as<EyeLikeAttrs>(attrs).k, w);
    }
  });
  check_launch("EyeLike");
}

// ---- ConstantOfShape ---------------------------------------------------------------------------
template <class W>
__global__ void __launch_bounds__(kThreads) fill_kernel(W* dst, int64_t n, W v) {
  const int64_t step = grid_threads();
  for (int64_t e = global_thread(); e < n; e += step) dst[e] = v;
}

void constant_of_shape(OpKind, const Attrs& attrs, std::span<const TensorView>, std::span<const TensorView> out,
                       GpuEnv& env) {
  const TensorView& o = out[0];
  const Scalar& v = attrs_as<ConstantOfShapeAttrs>(attrs).value;
  const size_t esize = dtype_size(o.dtype);
  const int64_t n = o.numel();
  if (n == 0) return;
  // The first bytes hold the value (little-endian). One repeated byte (zero, most often) is a memset.
  if (std::all_of(v.bytes.begin(), v.bytes.begin() + esize, [&](uint8_t b) { return b == v.bytes[0]; }))
    return check_cuda(cudaMemsetAsync(o.data, v.bytes[0], o.bytes(), env.stream), "ConstantOfShape");
  dispatch_word(esize, [&](auto tag) {
    using W = typename decltype(tag)::type;
    if constexpr (sizeof(W) <= 8) {
      W w;
      std::memcpy(&w, v.bytes.data(), sizeof(W));
      fill_kernel<W><<<blocks_for(n), kThreads, 0, env.stream>>>(static_cast<W*>(o.data), n, w);
    }
  });
  check_launch("ConstantOfShape");
}

// ---- Range -------------------------------------------------------------------------------------
// Floats: start + i * delta in double, rounded once to the type (through float for the half
// types), as on the CPU; __dadd_rn/__dmul_rn keep nvcc from contracting it into an fma, which
// rounds differently. Integers: modulo 2^64, exact since every value fits the type.
template <class T>
__global__ void __launch_bounds__(kThreads)
    range_kernel(T* dst, int64_t n, T start, T delta, const T* start_dev, const T* delta_dev) {
  if (start_dev) start = *start_dev;
  if (delta_dev) delta = *delta_dev;
  const int64_t step = grid_threads();
  for (int64_t i = global_thread(); i < n; i += step) {
    if constexpr (std::is_integral_v<T>) {
      using U = unsigned long long;
      dst[i] = static_cast<T>(static_cast<U>(start) + static_cast<U>(i) * static_cast<U>(delta));
    } else {
      const double v = __dadd_rn(static_cast<double>(load(start)),
                                 __dmul_rn(static_cast<double>(i), static_cast<double>(load(delta))));
      dst[i] = store<T>(static_cast<Compute<T>>(v));
    }
  }
}

void range(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, GpuEnv& env) {
  const int64_t n = out[0].numel();
  if (n == 0) return;
  dispatch_device_numeric(out[0].dtype, "Range", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T start{}, delta{};
    const T *start_dev = nullptr, *delta_dev = nullptr;
    if (const void* h = env.host(0))
      std::memcpy(&start, h, sizeof(T));
    else
      start_dev = static_cast<const T*>(in[0].data);
    if (const void* h = env.host(2))
      std::memcpy(&delta, h, sizeof(T));
    else
      delta_dev = static_cast<const T*>(in[2].data);
    range_kernel<T><<<blocks_for(n), kThreads, 0, env.stream>>>(static_cast<T*>(out[0].data), n, start, delta,
                                                                start_dev, delta_dev);
  });
  check_launch("Range");
}

// ---- OneHot ------------------------------------------------------------------------------------
// The class of a float index: truncated, if it lies in [-depth, depth) (never for NaN), else -1.
__device__ __forceinline__ int64_t float_class(double x, int64_t depth) {
  const double v = trunc(x);
  if (!(v >= static_cast<double>(-depth) && v < static_cast<double>(depth))) return -1;
  const auto c = static_cast<int64_t>(v);
  return c < 0 ? c + depth : c;
}

__device__ __forceinline__ int64_t signed_class(int64_t v, int64_t depth) {
  if (v < -depth || v >= depth) return -1;
  return v < 0 ? v + depth : v;
}

__device__ __forceinline__ int64_t unsigned_class(uint64_t v, int64_t depth) {
  return v < static_cast<uint64_t>(depth) ? static_cast<int64_t>(v) : -1;
}

// The class of index element j of a tensor of dtype dt (uniform across the grid).
__device__ __forceinline__ int64_t one_hot_class(const void* p, DataType dt, int64_t j, int64_t depth) {
  switch (dt) {
    case DataType::kFloat32: return float_class(static_cast<const float*>(p)[j], depth);
    case DataType::kFloat64: return float_class(static_cast<const double*>(p)[j], depth);
    case DataType::kFloat16: return float_class(load(static_cast<const __half*>(p)[j]), depth);
    case DataType::kBFloat16: return float_class(load(static_cast<const BF16*>(p)[j]), depth);
    case DataType::kInt8: return signed_class(static_cast<const int8_t*>(p)[j], depth);
    case DataType::kInt16: return signed_class(static_cast<const int16_t*>(p)[j], depth);
    case DataType::kInt32: return signed_class(static_cast<const int32_t*>(p)[j], depth);
    case DataType::kInt64: return signed_class(static_cast<const int64_t*>(p)[j], depth);
    case DataType::kUInt8: return unsigned_class(static_cast<const uint8_t*>(p)[j], depth);
    case DataType::kUInt16: return unsigned_class(static_cast<const uint16_t*>(p)[j], depth);
    case DataType::kUInt32: return unsigned_class(static_cast<const uint32_t*>(p)[j], depth);
    case DataType::kUInt64: return unsigned_class(static_cast<const uint64_t*>(p)[j], depth);
    default: return -1;
  }
}

// out [outer, depth, inner]: on where the index's class is the depth coordinate, else off.
template <class W>
__global__ void __launch_bounds__(kThreads)
    one_hot_kernel(W* dst, int64_t n, int64_t depth, int64_t inner, const void* ind, DataType dt, const W* vals) {
  const W off = vals[0], on = vals[1];
  const int64_t step = grid_threads();
  for (int64_t e = global_thread(); e < n; e += step) {
    const int64_t q = e / inner, i = e - q * inner;
    const int64_t a = q / depth, c = q - a * depth;
    dst[e] = one_hot_class(ind, dt, a * inner + i, depth) == c ? on : off;
  }
}

void one_hot(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out, GpuEnv& env) {
  const TensorView &ind = in[0], &vals = in[2], &o = out[0];
  const int64_t n = o.numel();
  if (n == 0) return;
  if (ind.dtype == DataType::kBool) throw_gpu_dtype(ind.dtype, "OneHot");
  const int64_t r = static_cast<int64_t>(ind.rank());
  int64_t axis = attrs_as<OneHotAttrs>(attrs).axis;
  if (axis < 0) axis += r + 1;
  const int64_t depth = o.shape[axis];
  int64_t inner = 1;
  for (int64_t i = axis; i < r; ++i) inner *= ind.shape[i];
  dispatch_word(dtype_size(o.dtype), [&](auto tag) {
    using W = typename decltype(tag)::type;
    if constexpr (sizeof(W) <= 8)
      one_hot_kernel<W><<<blocks_for(n), kThreads, 0, env.stream>>>(static_cast<W*>(o.data), n, depth, inner, ind.data,
                                                                    ind.dtype, static_cast<const W*>(vals.data));
  });
  check_launch("OneHot");
}

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kTrilu, trilu},
    {OpKind::kEyeLike, eye_like}, {OpKind::kConstantOfShape, constant_of_shape},
    {OpKind::kRange, range},      {OpKind::kOneHot, one_hot},
};

}  // namespace

std::span<const GpuKernelEntry> gen_entries() { return kEntries; }

}  // namespace kiln::gpu::tensor
