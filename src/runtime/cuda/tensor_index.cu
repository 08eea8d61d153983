// Gather, GatherElements and GatherND on the GPU (the CPU kernels: runtime/cpu/ops/tensor_index.cpp).
// Indices are int32 or int64 (a kernel argument, not a template parameter) and may be negative
// (counting from the end). An index outside [-dim, dim) sets kGpuIndexOutOfRange in *env.error and
// its element is skipped: nothing is read out of bounds. Where the CPU kernel checks every index
// even though the output is empty (Gather, GatherND), a check-only kernel does the same.
// Gather and GatherND copy slices, so a slice of a multiple of 16 (8, 4) bytes with aligned
// pointers moves in 16-byte (8, 4) words.
#include "runtime/cuda/tensor_internal.cuh"

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

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kGather, gather},
    {OpKind::kGatherElements, gather_elements},
    {OpKind::kGatherND, gather_nd},
};

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

std::span<const GpuKernelEntry> index_entries() { return kEntries; }

}  // namespace kiln::gpu::tensor
