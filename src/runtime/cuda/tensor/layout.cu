// Layout ops on the GPU: Transpose, Slice, Expand and Tile as one strided copy (as on the CPU,
// runtime/cpu/tensor/layout.cpp), Concat/Split as one block-moving kernel per op call, and Pad (its
// own kernel, below; the CPU kernel: runtime/cpu/tensor/layout.cpp).
//   strided copy: after dims are merged, a whole contiguous copy is a cudaMemcpyAsync; a
//     contiguous inner run moves in words of up to 16 bytes (when sizes, strides and pointers
//     allow); when the inner output dim strides through the source while another dim reads it
//     contiguously (any transpose that moves the source's inner dim: last-two-dims swaps,
//     NCHW<->NHWC, ...), tiles of 32 x 32..256 go through shared memory so that both the reads
//     and the writes are coalesced, unless the output's inner dim has under 8 elements (NCHW ->
//     NHWC with 3 channels), where a thread moves one source position and its few inner
//     elements; everything else decodes output indices into source offsets,
//     16 bytes of output per decode where the inner dim allows.
//   Measured on an H200 (float32 / float16, [32,256,28,28]-sized tensors): Concat, Split and
//   channel Slice at memcpy speed (~3.6-4 TB/s counting reads and writes), NCHW<->NHWC about
//   2.7 / 2.1 TB/s, Expand of a per-channel vector ~5 TB/s (writes mostly).
//   Concat/Split: up to kMaxParts parts per launch, passed by value; blockIdx.y picks the part,
//     and each part picks its own word width (a misaligned part does not slow the others down).
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/cuda/dependent_launch.cuh"
#include "runtime/cuda/tensor/tensor_internal.cuh"

namespace kiln {
namespace tensor_plan {
// Defined in src/core/infer/tensor/layout.cpp.
void slice_plan(std::span<const int64_t> shape, std::span<const TensorView> in, std::vector<int64_t>& start,
                std::vector<int64_t>& step, std::vector<int64_t>& count);
void pad_plan(std::span<const int64_t> shape, std::span<const TensorView> in, std::vector<int64_t>& begin,
              std::vector<int64_t>& end);
}  // namespace tensor_plan

namespace gpu::tensor {

namespace {

using Dims = std::vector<int64_t>;

// ---- strided copy ------------------------------------------------------------------------------
struct CopyPlan {
  int rank = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};  // source strides in words; may be 0 or negative
};

template <class W, int V>
struct alignas(sizeof(W) * V) Vec {
  W v[V];
};

// Output offset i's source offset: base + i's digits in p.shape dotted with p.stride. I is
// uint32_t or uint64_t: the sum wraps modulo 2^bits through negative strides and comes out exact,
// since the final offset lies in [0, source size).
template <class I>
__device__ __forceinline__ I source_offset(const CopyPlan& p, I i, I base) {
  I rem = i, off = base;
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {
    if (d >= p.rank) continue;
    const I dim = static_cast<I>(p.shape[d]);
    const I q = d > 0 ? rem / dim : 0;
    off += (rem - q * dim) * static_cast<I>(p.stride[d]);
    rem = q;
  }
  return off;
}

// Each thread moves V consecutive output words of one row (the inner dim is a multiple of V, and
// with V > 1 the output is 16-byte aligned): one index decode and one 16-byte store for V words.
template <class I, class W, int V>
__global__ void __launch_bounds__(kThreads)
    strided_kernel(const W* __restrict__ src, W* __restrict__ dst, I items, I base, I inner_stride, CopyPlan p) {
  const I step = static_cast<I>(grid_threads());
  for (I t = static_cast<I>(global_thread()); t < items; t += step) {
    const I i = t * V, off = source_offset(p, i, base);
    if constexpr (V == 1) {
      dst[i] = src[off];
    } else {
      Vec<W, V> v;
#pragma unroll
      for (int k = 0; k < V; ++k) v.v[k] = src[off + static_cast<I>(k) * inner_stride];
      *reinterpret_cast<Vec<W, V>*>(dst + i) = v;
    }
  }
}

// Output dims: `a` reads the source contiguously, `b` (the last) writes the output contiguously;
// the other dims are batch dims with their own source and output strides. A tile covers 32 a by
// 32 * R b (R up to 8 / word size, so that each thread has 4 R loads, 32 bytes, in flight, but no
// taller than dim b): the reads run along a and the writes along b, each 32 threads wide.
constexpr int kTile = 32, kTileRows = 8;
struct TilePlan {
  int batch_rank = 0;
  int64_t batch_shape[kMaxDims] = {};
  int64_t batch_src[kMaxDims] = {};
  int64_t batch_dst[kMaxDims] = {};
  int64_t na = 0, nb = 0;  // sizes of dims a and b
  int64_t a_dst = 0;       // output stride of a
  int64_t b_src = 0;       // source stride of b
  int64_t tiles_a = 0, tiles_b = 0, tiles = 0;
  int64_t base = 0;  // source offset of the first element
};

// Adds to so and dof the source and output offsets of batch position `rem` (its digits in the
// batch dims, the last fastest).
template <class I>
__device__ __forceinline__ void add_batch_offsets(const TilePlan& p, I rem, int64_t& so, int64_t& dof) {
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {
    if (d >= p.batch_rank) continue;
    const I dim = static_cast<I>(p.batch_shape[d]);
    const I q = rem / dim;
    const auto i = static_cast<int64_t>(rem - q * dim);
    rem = q;
    so += i * p.batch_src[d];
    dof += i * p.batch_dst[d];
  }
}

// I: uint32_t when there are fewer than 2^31 tiles (the tile decode then divides in 32 bits).
template <class I, class W, int R>
__global__ void __launch_bounds__(kTile* kTileRows)
    tiled_kernel(const W* __restrict__ src, W* __restrict__ dst, TilePlan p) {
  constexpr int kB = kTile * R;
  __shared__ W tile[kB][kTile + 1];  // [b][a]; the padding column avoids bank conflicts
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (I t = blockIdx.x; t < static_cast<I>(p.tiles); t += gridDim.x) {
    const I rem = t / static_cast<I>(p.tiles_b);
    const int64_t b0 = static_cast<int64_t>(t - rem * static_cast<I>(p.tiles_b)) * kB;
    const I q = rem / static_cast<I>(p.tiles_a);
    const int64_t a0 = static_cast<int64_t>(rem - q * static_cast<I>(p.tiles_a)) * kTile;
    int64_t so = p.base, dof = 0;
    add_batch_offsets(p, q, so, dof);
    if (a0 + tx < p.na) {
      const W* s = src + so + a0 + tx + b0 * p.b_src;
#pragma unroll
      for (int k = 0; k < kB / kTileRows; ++k) {
        const int y = ty + k * kTileRows;
        if (b0 + y < p.nb) tile[y][tx] = s[y * p.b_src];
      }
    }
    __syncthreads();
    W* d = dst + dof + a0 * p.a_dst + b0;
#pragma unroll
    for (int k = 0; k < kTile / kTileRows; ++k) {
      const int y = ty + k * kTileRows;
      if (a0 + y < p.na) {
#pragma unroll
        for (int r = 0; r < R; ++r)
          if (b0 + r * kTile + tx < p.nb) d[y * p.a_dst + r * kTile + tx] = tile[r * kTile + tx][y];
      }
    }
    __syncthreads();
  }
}

// Dims a (read contiguously) and b (the last), and the batch dims, of a merged copy.
TilePlan tile_plan(const Dims& s, const Dims& st, size_t a, int64_t base) {
  const size_t r = s.size();
  const Dims ostr = strides_of(s);
  TilePlan p;
  p.base = base;
  for (size_t d = 0; d + 1 < r; ++d) {
    if (d == a) continue;
    p.batch_shape[p.batch_rank] = s[d];
    p.batch_src[p.batch_rank] = st[d];
    p.batch_dst[p.batch_rank] = ostr[d];
    ++p.batch_rank;
  }
  p.na = s[a];
  p.nb = s[r - 1];
  p.a_dst = ostr[a];
  p.b_src = st[r - 1];
  return p;
}

// Dim b under 8 elements (NCHW -> NHWC with 3 channels: the input transpose of image networks): a
// thread moves one position of dim a with its NB elements of b. Reads run along a across the
// threads; each thread writes NB contiguous words next to its neighbours'. (The 32 x 32 tiles
// left most threads idle there: ResNet-50's input at batch 256 took 0.153 ms, 1 TB/s, on an H100.)
template <class I, class W, int NB>
__global__ void __launch_bounds__(kThreads)
    small_inner_kernel(const W* __restrict__ src, W* __restrict__ dst, TilePlan p, I items) {
  const I step = static_cast<I>(grid_threads());
  for (I t = static_cast<I>(global_thread()); t < items; t += step) {
    const I rem = t / static_cast<I>(p.na);
    const auto a = static_cast<int64_t>(t - rem * static_cast<I>(p.na));
    int64_t so = p.base + a, dof = a * p.a_dst;
    add_batch_offsets(p, rem, so, dof);
    W v[NB];
#pragma unroll
    for (int b = 0; b < NB; ++b) v[b] = src[so + b * p.b_src];
#pragma unroll
    for (int b = 0; b < NB; ++b) dst[dof + b] = v[b];
  }
}

// The same with 16-byte words: a thread moves V = 16 / sizeof(W) consecutive positions of dim a,
// one 16-byte load from each of the NB rows of b and NB 16-byte stores of their interleaving
// (ResNet-50's float16 input at batch 256: 0.081 ms with 2-byte accesses). Where dim a directly
// precedes b in Y and every offset keeps the words aligned (vector_fits).
template <class I, class W, int NB>
__global__ void __launch_bounds__(kThreads)
    small_inner_vec_kernel(const W* __restrict__ src, W* __restrict__ dst, TilePlan p, I items) {
  constexpr int V = static_cast<int>(16 / sizeof(W));
  wait_for_inputs();  // a dependent launch (launch_small_inner)
  start_next_kernel();
  const I step = static_cast<I>(grid_threads()), runs = static_cast<I>(p.na / V);
  for (I t = static_cast<I>(global_thread()); t < items; t += step) {
    const I rem = t / runs;
    const auto a = static_cast<int64_t>(t - rem * runs) * V;
    int64_t so = p.base + a, dof = a * NB;
    add_batch_offsets(p, rem, so, dof);
    alignas(16) W v[NB][V];
#pragma unroll
    for (int b = 0; b < NB; ++b)
      *reinterpret_cast<uint4*>(v[b]) = *reinterpret_cast<const uint4*>(src + so + b * p.b_src);
    alignas(16) W out[NB * V];
#pragma unroll
    for (int i = 0; i < V; ++i)
#pragma unroll
      for (int b = 0; b < NB; ++b) out[i * NB + b] = v[b][i];
#pragma unroll
    for (int k = 0; k < NB; ++k) reinterpret_cast<uint4*>(dst + dof)[k] = reinterpret_cast<const uint4*>(out)[k];
  }
}

// Whether small_inner_vec_kernel takes the plan: dim a right before b in Y, and the runs of V
// positions 16-byte aligned in X and in Y.
template <class W>
bool vector_fits(const TilePlan& p, const void* src, const void* dst) {
  if constexpr (sizeof(W) > 4) {
    return false;
  } else {
    constexpr int64_t V = 16 / sizeof(W);
    if (p.a_dst != p.nb || p.na % V != 0 || p.b_src % V != 0 || p.base % V != 0) return false;
    for (int d = 0; d < p.batch_rank; ++d)
      if (p.batch_src[d] % V != 0 || p.batch_dst[d] % V != 0) return false;
    return aligned_to(src, 16) && aligned_to(dst, 16);
  }
}

template <class W>
void launch_small_inner(const Dims& s, const Dims& st, size_t a, const void* src, int64_t base, void* dst, GpuEnv& env,
                        const char* op) {
  const TilePlan p = tile_plan(s, st, a, base);
  int64_t items = p.na;
  for (int d = 0; d < p.batch_rank; ++d) items *= p.batch_shape[d];
  const W* sp = static_cast<const W*>(src);
  W* dp = static_cast<W*>(dst);
  const bool vec = vector_fits<W>(p, src, dst);
  auto launch = [&](auto nb_tag) {
    constexpr int NB = decltype(nb_tag)::value;
    if constexpr (sizeof(W) <= 4) {
      if (vec) {
        const int64_t runs = items / static_cast<int64_t>(16 / sizeof(W));
        // A programmatic dependent launch (dependent_launch.cuh): an image's channels-last
        // transpose before the stem, say.
        const dim3 grid(blocks_for(runs));
        if (runs < k32Bit)
          launch_dependent<small_inner_vec_kernel<uint32_t, W, NB>>(grid, kThreads, 0, env.stream, 1, op, sp,
                                                                           dp, p, static_cast<uint32_t>(runs));
        else
          launch_dependent<small_inner_vec_kernel<uint64_t, W, NB>>(grid, kThreads, 0, env.stream, 1, op, sp,
                                                                           dp, p, static_cast<uint64_t>(runs));
        return;
      }
    }
    if (items < k32Bit)
      small_inner_kernel<uint32_t, W, NB>
          <<<blocks_for(items), kThreads, 0, env.stream>>>(sp, dp, p, static_cast<uint32_t>(items));
    else
      small_inner_kernel<uint64_t, W, NB>
          <<<blocks_for(items), kThreads, 0, env.stream>>>(sp, dp, p, static_cast<uint64_t>(items));
  };
  switch (p.nb) {
    case 2: launch(std::integral_constant<int, 2>{}); break;
    case 3: launch(std::integral_constant<int, 3>{}); break;
    case 4: launch(std::integral_constant<int, 4>{}); break;
    case 5: launch(std::integral_constant<int, 5>{}); break;
    case 6: launch(std::integral_constant<int, 6>{}); break;
    default: launch(std::integral_constant<int, 7>{}); break;
  }
  check_launch(op);
}

template <class W>
void launch_tiled(const Dims& s, const Dims& st, size_t a, const void* src, int64_t base, void* dst, GpuEnv& env,
                  const char* op) {
  TilePlan p = tile_plan(s, st, a, base);
  constexpr int kMaxR = sizeof(W) >= 8 ? 1 : static_cast<int>(8 / sizeof(W));
  int r_b = 1;
  while (r_b < kMaxR && kTile * r_b * 2 <= p.nb) r_b *= 2;
  p.tiles_a = (p.na + kTile - 1) / kTile;
  p.tiles_b = (p.nb + kTile * r_b - 1) / (kTile * r_b);
  p.tiles = p.tiles_a * p.tiles_b;
  for (int d = 0; d < p.batch_rank; ++d) p.tiles *= p.batch_shape[d];
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(p.tiles, kMaxBlocks));
  const dim3 threads(kTile, kTileRows);
  const W* sp = static_cast<const W*>(src);
  W* dp = static_cast<W*>(dst);
  auto launch = [&](auto r_tag) {
    constexpr int R = decltype(r_tag)::value;
    if constexpr (R <= kMaxR) {
      if (p.tiles < k32Bit)
        tiled_kernel<uint32_t, W, R><<<blocks, threads, 0, env.stream>>>(sp, dp, p);
      else
        tiled_kernel<uint64_t, W, R><<<blocks, threads, 0, env.stream>>>(sp, dp, p);
    }
  };
  switch (r_b) {
    case 8: launch(std::integral_constant<int, 8>{}); break;
    case 4: launch(std::integral_constant<int, 4>{}); break;
    case 2: launch(std::integral_constant<int, 2>{}); break;
    default: launch(std::integral_constant<int, 1>{}); break;
  }
  check_launch(op);
}

template <class I, class W>
void launch_strided(const W* src, W* dst, int64_t n, int64_t base, const CopyPlan& p, GpuEnv& env) {
  constexpr int V = static_cast<int>(16 / sizeof(W));
  const int64_t inner = p.shape[p.rank - 1], inner_stride = p.stride[p.rank - 1];
  if (V > 1 && inner % V == 0 && aligned_to(dst, 16)) {
    if constexpr (V > 1)
      strided_kernel<I, W, V><<<blocks_for(n / V), kThreads, 0, env.stream>>>(
          src, dst, static_cast<I>(n / V), static_cast<I>(base), static_cast<I>(inner_stride), p);
  } else {
    strided_kernel<I, W, 1>
        <<<blocks_for(n), kThreads, 0, env.stream>>>(src, dst, static_cast<I>(n), static_cast<I>(base), 0, p);
  }
}

}  // namespace

void strided_copy(size_t esize, const Dims& shape, const Dims& strides, const void* src, int64_t base,
                  int64_t src_numel, void* dst, GpuEnv& env, const char* op) {
  Dims s, st;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) return;
    if (shape[i] == 1) continue;
    if (!s.empty() && st.back() == strides[i] * shape[i]) {
      s.back() *= shape[i];
      st.back() = strides[i];
    } else {
      s.push_back(shape[i]);
      st.push_back(strides[i]);
    }
  }
  if (s.empty()) {
    s.push_back(1);
    st.push_back(1);
  }
  const size_t r = s.size();
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  const int64_t ebytes = static_cast<int64_t>(esize);
  if (r == 1 && st[0] == 1)
    return copy_device(dst, static_cast<const uint8_t*>(src) + base * ebytes, static_cast<size_t>(n) * esize, env, op);
  if (static_cast<int>(r) > kMaxDims)
    throw Error(std::string(op) + ": the copy needs " + std::to_string(r) +
                " dimensions after merging; the CUDA backend supports at most " + std::to_string(kMaxDims));

  // The output's inner dim strides through the source while dim j reads it contiguously: tiles
  // (inner dim of 8 or more), or a thread per position of j (2 to 7, where j has 32 or more).
  if (st.back() != 1 && st.back() != 0 && s.back() >= 2) {
    const bool small = s.back() < 8;
    for (size_t j = 0; j + 1 < r; ++j)
      if (st[j] == 1 && s[j] >= (small ? 32 : 8)) {
        dispatch_word(esize, [&](auto tag) {
          using W = typename decltype(tag)::type;
          if (small)
            launch_small_inner<W>(s, st, j, src, base, dst, env, op);
          else if constexpr (sizeof(W) <= 8)
            launch_tiled<W>(s, st, j, src, base, dst, env, op);
        });
        return;
      }
  }

  // A contiguous inner run moves in wider words when every outer stride keeps them aligned.
  size_t w = esize;
  if (st.back() == 1) {
    w = widest_word(esize, {s.back() * ebytes, base * ebytes}, {src, dst});
    for (size_t d = 0; d + 1 < r && w > esize; ++d)
      while (w > esize && (st[d] * ebytes) % static_cast<int64_t>(w) != 0) w /= 2;
    const int64_t f = static_cast<int64_t>(w / esize);
    if (f > 1) {
      s.back() /= f;
      n /= f;
      base /= f;
      for (size_t d = 0; d + 1 < r; ++d) st[d] /= f;
    }
  }
  CopyPlan p;
  p.rank = static_cast<int>(r);
  for (size_t d = 0; d < r; ++d) {
    p.shape[d] = s[d];
    p.stride[d] = st[d];
  }
  dispatch_word(w, [&](auto tag) {
    using W = typename decltype(tag)::type;
    const W* sp = static_cast<const W*>(src);
    W* dp = static_cast<W*>(dst);
    if (n < k32Bit && src_numel < k32Bit)
      launch_strided<uint32_t, W>(sp, dp, n, base, p, env);
    else
      launch_strided<uint64_t, W>(sp, dp, n, base, p, env);
  });
  check_launch(op);
}

namespace {

// ---- Transpose, Slice, Tile, Expand (the CPU kernels' strided views) ---------------------------
void transpose_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                      GpuEnv& env) {
  const TensorView& x = in[0];
  const size_t r = x.rank();
  std::vector<int64_t> perm = attrs_as<TransposeAttrs>(attrs).perm;
  if (perm.empty())
    for (size_t i = r; i-- > 0;) perm.push_back(static_cast<int64_t>(i));
  const Dims xs = strides_of(x.shape);
  Dims strides(r);
  for (size_t i = 0; i < r; ++i) strides[i] = xs[perm[i]];
  strided_copy(dtype_size(x.dtype), Dims(out[0].shape.begin(), out[0].shape.end()), strides, x.data, 0, x.numel(),
               out[0].data, env, "Transpose");
}

void slice_kernel(OpKind kind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                  GpuEnv& env) {
  const TensorView& x = in[0];
  const std::vector<TensorView> hin = with_host_constants(kind, in, env);
  Dims start, step, count;
  tensor_plan::slice_plan(x.shape, hin, start, step, count);
  if (out[0].numel() == 0) return;
  const Dims xs = strides_of(x.shape);
  Dims strides(x.rank());
  int64_t base = 0;
  for (size_t i = 0; i < x.rank(); ++i) {
    base += start[i] * xs[i];
    strides[i] = count[i] > 1 ? xs[i] * step[i] : 0;
  }
  strided_copy(dtype_size(x.dtype), count, strides, x.data, base, x.numel(), out[0].data, env, "Slice");
}

void tile_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, GpuEnv& env) {
  const TensorView& x = in[0];
  const Dims xs = strides_of(x.shape);
  Dims shape, strides;
  for (size_t i = 0; i < x.rank(); ++i) {
    shape.push_back(x.shape[i] == 0 ? 0 : out[0].shape[i] / x.shape[i]);
    strides.push_back(0);
    shape.push_back(x.shape[i]);
    strides.push_back(xs[i]);
  }
  strided_copy(dtype_size(x.dtype), shape, strides, x.data, 0, x.numel(), out[0].data, env, "Tile");
}

void expand_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, GpuEnv& env) {
  const TensorView& x = in[0];
  const size_t r = out[0].rank(), lead = r - x.rank();
  const Dims xs = strides_of(x.shape);
  Dims strides(r, 0);
  for (size_t i = lead; i < r; ++i) strides[i] = x.shape[i - lead] == 1 ? 0 : xs[i - lead];
  strided_copy(dtype_size(x.dtype), Dims(out[0].shape.begin(), out[0].shape.end()), strides, x.data, 0, x.numel(),
               out[0].data, env, "Expand");
}

// ---- Concat, Split -----------------------------------------------------------------------------
// The whole tensor is [outer, whole_row] bytes; part k covers bytes [pos[k], pos[k] + row[k]) of
// every whole row and is itself [outer, row[k]] bytes.
constexpr int kMaxParts = 32;
struct BlockMove {
  uint8_t* whole = nullptr;
  int64_t whole_row = 0;
  int64_t outer = 0;
  uint8_t* part[kMaxParts] = {};
  int64_t row[kMaxParts] = {};
  int64_t pos[kMaxParts] = {};
  int32_t width[kMaxParts] = {};  // word size of part k's moves
};

template <class I, class W, bool kIntoWhole>
__device__ __forceinline__ void move_rows(W* whole, W* part, I rows, I rw, I ww) {
  const I n = rows * rw;
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const I r = i / rw, c = i - r * rw;
    if constexpr (kIntoWhole)
      whole[r * ww + c] = part[i];
    else
      part[i] = whole[r * ww + c];
  }
}

template <class W, bool kIntoWhole>
__device__ __forceinline__ void move_part(uint8_t* whole_bytes, int64_t whole_row, int64_t outer, uint8_t* part_bytes,
                                          int64_t row, int64_t pos) {
  constexpr auto kW = static_cast<int64_t>(sizeof(W));
  W* whole = reinterpret_cast<W*>(whole_bytes + pos);
  W* part = reinterpret_cast<W*>(part_bytes);
  if (outer * (whole_row / kW) < k32Bit)
    move_rows<uint32_t, W, kIntoWhole>(whole, part, static_cast<uint32_t>(outer), static_cast<uint32_t>(row / kW),
                                       static_cast<uint32_t>(whole_row / kW));
  else
    move_rows<uint64_t, W, kIntoWhole>(whole, part, static_cast<uint64_t>(outer), static_cast<uint64_t>(row / kW),
                                       static_cast<uint64_t>(whole_row / kW));
}

// __grid_constant__: the part arrays are indexed by blockIdx.y, which must read the parameter
// space directly instead of copying the whole struct into local memory.
template <bool kIntoWhole>
__global__ void __launch_bounds__(kThreads) move_blocks_kernel(const __grid_constant__ BlockMove m) {
  const int k = static_cast<int>(blockIdx.y);
  uint8_t* const part = m.part[k];
  const int64_t row = m.row[k], pos = m.pos[k];
  switch (m.width[k]) {
    case 16: return move_part<uint4, kIntoWhole>(m.whole, m.whole_row, m.outer, part, row, pos);
    case 8: return move_part<unsigned long long, kIntoWhole>(m.whole, m.whole_row, m.outer, part, row, pos);
    case 4: return move_part<uint32_t, kIntoWhole>(m.whole, m.whole_row, m.outer, part, row, pos);
    case 2: return move_part<uint16_t, kIntoWhole>(m.whole, m.whole_row, m.outer, part, row, pos);
    default: return move_part<uint8_t, kIntoWhole>(m.whole, m.whole_row, m.outer, part, row, pos);
  }
}

void move_blocks(const TensorView& whole, std::span<const TensorView> parts, int64_t axis_attr, bool into_whole,
                 GpuEnv& env, const char* op) {
  const int64_t axis = normalize_axis(axis_attr, static_cast<int64_t>(whole.rank()));
  const size_t esize = dtype_size(whole.dtype);
  int64_t outer = 1, inner = static_cast<int64_t>(esize);
  for (int64_t i = 0; i < axis; ++i) outer *= whole.shape[i];
  for (size_t i = axis + 1; i < whole.rank(); ++i) inner *= whole.shape[i];
  const int64_t whole_row = whole.shape[axis] * inner;
  if (outer == 0 || whole_row == 0) return;
  BlockMove m;
  m.whole = static_cast<uint8_t*>(whole.data);
  m.whole_row = whole_row;
  m.outer = outer;
  int n = 0;
  int64_t pos = 0, most = 0;
  auto flush = [&] {
    if (n == 0) return;
    const dim3 grid(blocks_for(most), static_cast<unsigned>(n));
    if (into_whole)
      move_blocks_kernel<true><<<grid, kThreads, 0, env.stream>>>(m);
    else
      move_blocks_kernel<false><<<grid, kThreads, 0, env.stream>>>(m);
    check_launch(op);
    n = 0;
    most = 0;
  };
  for (const TensorView& t : parts) {
    const int64_t row = t.shape[axis] * inner;
    if (row > 0) {
      // An outer of 1 leaves whole_row out of every address.
      const size_t w = widest_word(esize, {row, pos, outer > 1 ? whole_row : 0}, {whole.data, t.data});
      m.part[n] = static_cast<uint8_t*>(t.data);
      m.row[n] = row;
      m.pos[n] = pos;
      m.width[n] = static_cast<int32_t>(w);
      most = std::max(most, outer * row / static_cast<int64_t>(w));
      if (++n == kMaxParts) flush();
    }
    pos += row;
  }
  flush();
}

void concat_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                   GpuEnv& env) {
  move_blocks(out[0], in, attrs_as<AxisAttrs>(attrs).axis, /*into_whole=*/true, env, "Concat");
}

void split_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                  GpuEnv& env) {
  move_blocks(in[0], out, attrs_as<SplitAttrs>(attrs).axis, /*into_whole=*/false, env, "Split");
}

// ---- Pad ---------------------------------------------------------------------------------------
// Per output dim, innermost first: the begin pad pb, the begin crop cb and the kept length len
// (negative pads crop first; the kept part is then padded as the mode says), and the source
// stride. Each thread writes V consecutive elements of one output row: one decode of the outer
// dims, then the inner dim's positions one by one, and one vector store.
struct PadPlan {
  int rank = 0;
  int64_t out[kMaxDims] = {};
  int64_t pb[kMaxDims] = {};
  int64_t cb[kMaxDims] = {};
  int64_t len[kMaxDims] = {};
  int64_t xs[kMaxDims] = {};
};

template <class W, int V>
struct alignas(sizeof(W) * V) PadVec {
  W v[V];
};

// Maps pos (relative to the kept part, length len) into it as the mode says; false: the constant.
__device__ __forceinline__ bool pad_map(int64_t& pos, int64_t len, PadMode mode) {
  if (pos >= 0 && pos < len) return true;
  switch (mode) {
    case PadMode::kConstant: return false;
    case PadMode::kEdge: pos = pos < 0 ? 0 : len - 1; break;
    case PadMode::kWrap: pos = ((pos % len) + len) % len; break;
    case PadMode::kReflect:
      if (len == 1) {
        pos = 0;
      } else {  // reflection without repeating the edge has period 2 (len - 1)
        const int64_t period = 2 * (len - 1);
        pos = ((pos % period) + period) % period;
        if (pos >= len) pos = period - pos;
      }
      break;
  }
  return true;
}

template <class I, class W, int V>
__global__ void __launch_bounds__(kThreads)
    pad_kernel(const W* __restrict__ src, W* __restrict__ dst, I items, PadPlan p, PadMode mode, const W* value) {
  const W cval = value ? *value : W{};
  const I step = static_cast<I>(grid_threads());
  for (I t = static_cast<I>(global_thread()); t < items; t += step) {
    const I e = t * V;
    I rem = e / static_cast<I>(p.out[0]);
    const int64_t o0 = static_cast<int64_t>(e - rem * static_cast<I>(p.out[0]));
    int64_t off = 0;
    bool inside = true;
#pragma unroll
    for (int d = 1; d < kMaxDims; ++d) {
      if (d >= p.rank) break;
      const I dim = static_cast<I>(p.out[d]);
      const I q = d + 1 < p.rank ? rem / dim : 0;
      int64_t pos = static_cast<int64_t>(rem - q * dim) - p.pb[d];
      rem = q;
      inside = pad_map(pos, p.len[d], mode) && inside;
      off += (p.cb[d] + pos) * p.xs[d];
    }
    PadVec<W, V> v;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      int64_t pos = o0 + k - p.pb[0];
      const bool in0 = pad_map(pos, p.len[0], mode);
      v.v[k] = inside && in0 ? src[off + (p.cb[0] + pos) * p.xs[0]] : cval;
    }
    if constexpr (V == 1)
      dst[e] = v.v[0];
    else
      *reinterpret_cast<PadVec<W, V>*>(dst + e) = v;
  }
}

template <class I, class W>
void launch_pad(const W* src, W* dst, int64_t n, const PadPlan& p, PadMode mode, const W* value, GpuEnv& env) {
  constexpr int kWide = sizeof(W) >= 8 ? 2 : 4;
  auto fits = [&](int v) { return p.out[0] % v == 0 && aligned_to(dst, sizeof(W) * v); };
  if (fits(kWide))
    pad_kernel<I, W, kWide>
        <<<blocks_for(n / kWide), kThreads, 0, env.stream>>>(src, dst, static_cast<I>(n / kWide), p, mode, value);
  else if (fits(2))
    pad_kernel<I, W, 2>
        <<<blocks_for(n / 2), kThreads, 0, env.stream>>>(src, dst, static_cast<I>(n / 2), p, mode, value);
  else
    pad_kernel<I, W, 1><<<blocks_for(n), kThreads, 0, env.stream>>>(src, dst, static_cast<I>(n), p, mode, value);
}

void pad(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
         GpuEnv& env) {
  const PadMode mode = attrs_as<PadAttrs>(attrs).mode;
  const TensorView &x = in[0], &o = out[0];
  const size_t r = x.rank(), esize = dtype_size(x.dtype);
  const int64_t n = o.numel();
  if (n == 0) return;
  if (r == 0) return copy_device(o.data, x.data, esize, env, "Pad");
  Dims begin, end;
  tensor_plan::pad_plan(x.shape, with_host_constants(kind, in, env), begin, end);
  const Dims xs = strides_of(x.shape);
  // Innermost first. Unpadded dims of size 1 drop out; runs of unpadded dims merge into one.
  PadPlan p;
  bool last_plain = false;
  for (size_t d = r; d-- > 0;) {
    const bool plain = begin[d] == 0 && end[d] == 0;
    if (plain && x.shape[d] == 1) continue;
    const int64_t cb = std::max<int64_t>(0, -begin[d]);
    const int64_t len = x.shape[d] - cb - std::max<int64_t>(0, -end[d]);
    if (plain && last_plain) {  // x is contiguous: an outer plain dim extends the inner one
      const int k = p.rank - 1;
      p.out[k] *= o.shape[d];
      p.len[k] *= len;
      continue;
    }
    if (p.rank == kMaxDims)
      throw Error("Pad: more than " + std::to_string(kMaxDims) + " dimensions after merging unpadded ones");
    p.out[p.rank] = o.shape[d];
    p.pb[p.rank] = std::max<int64_t>(0, begin[d]);
    p.cb[p.rank] = cb;
    p.len[p.rank] = len;
    p.xs[p.rank] = xs[d];
    ++p.rank;
    last_plain = plain;
  }
  if (p.rank == 0) return copy_device(o.data, x.data, o.bytes(), env, "Pad");
  const void* value = in.size() > 2 && in[2].exists ? in[2].data : nullptr;
  dispatch_word(esize, [&](auto tag) {
    using W = typename decltype(tag)::type;
    if constexpr (sizeof(W) <= 8) {
      const W* sp = static_cast<const W*>(x.data);
      W* dp = static_cast<W*>(o.data);
      const W* vp = static_cast<const W*>(value);
      if (n < k32Bit)
        launch_pad<uint32_t, W>(sp, dp, n, p, mode, vp, env);
      else
        launch_pad<uint64_t, W>(sp, dp, n, p, mode, vp, env);
    }
  });
  check_launch("Pad");
}

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kTranspose, transpose_kernel}, {OpKind::kSlice, slice_kernel},   {OpKind::kTile, tile_kernel},
    {OpKind::kExpand, expand_kernel},       {OpKind::kConcat, concat_kernel}, {OpKind::kSplit, split_kernel},
    {OpKind::kPad, pad},
};

}  // namespace

std::span<const GpuKernelEntry> layout_entries() { return kEntries; }

}  // namespace gpu::tensor
}  // namespace kiln
