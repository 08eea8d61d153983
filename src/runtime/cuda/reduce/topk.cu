// TopK on the GPU with the CPU kernel's order (runtime/cpu/reduce/topk.cpp): by value, NaN
// above every number (first with largest = 1, last with largest = 0), equal values (-0 == +0,
// NaN == NaN) by lower index first; the output is always sorted (the CPU's partial_sort), so the
// `sorted` attribute changes nothing. K is a build-time constant (env.host(1)).
// Each element becomes an unsigned key whose integer order is the value order (NaN largest, -0
// folded onto +0), paired with its index; the order of (key, index) pairs is total, so the result
// is unique and equals the CPU's. Lines of up to 2048 elements: a block per line sorts the pairs in
// shared memory (bitonic) and writes the first K. Longer lines: a CUB radix sort (stable, so equal
// keys stay in index order) over keys copied to the workspace, then the first K of each line are
// gathered. 32-bit keys get the line number above them and go through one device-wide sort (fast
// for a few long lines, where a segmented sort would give each line one block); 64-bit keys
// (float64, int64, uint64) take CUB's segmented sort. Every numeric type, as the CPU kernel.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include "runtime/cuda/reduce/reduce_internal.cuh"

namespace kiln::gpu::red {

namespace {

constexpr int64_t kSmallLine = 2048;

template <class T>
using KeyOf = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;

template <class T>
__device__ __forceinline__ KeyOf<T> key_of(T v) {
  if constexpr (std::is_same_v<T, double>) {
    if (v != v) return ~uint64_t{0};
    if (v == 0.0) v = 0.0;  // -0 ties with +0
    const auto u = static_cast<uint64_t>(__double_as_longlong(v));
    constexpr uint64_t kSign = uint64_t{1} << 63;
    return (u & kSign) ? ~u : (u | kSign);
  } else if constexpr (kIsFloatDev<T>) {
    float f = load(v);
    if (f != f) return 0xFFFFFFFFu;
    if (f == 0.0f) f = 0.0f;  // -0 ties with +0
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  } else if constexpr (std::is_unsigned_v<T>) {
    return static_cast<KeyOf<T>>(v);
  } else if constexpr (sizeof(T) == 8) {
    return static_cast<uint64_t>(v) ^ (uint64_t{1} << 63);
  } else {
    return static_cast<uint32_t>(v) ^ 0x80000000u;  // 8- and 16-bit values sign-extend first
  }
}

template <bool kLargest, class K>
__device__ __forceinline__ bool key_before(K ka, int ia, K kb, int ib) {
  if (ka != kb) return kLargest ? ka > kb : ka < kb;
  return ia < ib;
}

template <class T, bool kLargest>
__global__ void __launch_bounds__(1024) topk_small_kernel(const T* __restrict__ x, T* __restrict__ vals,
                                                          int64_t* __restrict__ idx, AxisSplit s, int64_t k, int p) {
  using K = KeyOf<T>;
  extern __shared__ __align__(16) unsigned char smem[];
  K* keys = reinterpret_cast<K*>(smem);
  int* ids = reinterpret_cast<int*>(keys + p);
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  const int len = static_cast<int>(s.len);
  const int64_t lines = s.outer * s.inner;
  for (int64_t line = blockIdx.x; line < lines; line += gridDim.x) {
    const int64_t o = line / s.inner, j = line - o * s.inner;
    const T* xl = x + o * s.len * s.inner + j;
    for (int i = tid; i < p; i += nt) {
      const bool real = i < len;
      keys[i] = real ? key_of(xl[i * s.inner]) : (kLargest ? K(0) : ~K(0));
      ids[i] = real ? i : 0x7fffffff;  // padding sorts after every real element
    }
    __syncthreads();
    for (int kk = 2; kk <= p; kk <<= 1) {
      for (int jj = kk >> 1; jj > 0; jj >>= 1) {
        for (int i = tid; i < p; i += nt) {
          const int l = i ^ jj;
          if (l <= i) continue;
          const bool asc = (i & kk) == 0;  // this pair's block sorts best-first
          const bool swap = asc ? key_before<kLargest>(keys[l], ids[l], keys[i], ids[i])
                                : key_before<kLargest>(keys[i], ids[i], keys[l], ids[l]);
          if (swap) {
            const K tk = keys[i];
            keys[i] = keys[l];
            keys[l] = tk;
            const int ti = ids[i];
            ids[i] = ids[l];
            ids[l] = ti;
          }
        }
        __syncthreads();
      }
    }
    for (int64_t r = tid; r < k; r += nt) {
      const int64_t at = (o * k + r) * s.inner + j;
      vals[at] = xl[static_cast<int64_t>(ids[r]) * s.inner];
      idx[at] = ids[r];
    }
    __syncthreads();  // the next line overwrites keys and ids
  }
}

// Long lines: keys and indices laid out line by line for the sort.
template <class T>
inline constexpr bool kComposite = sizeof(KeyOf<T>) == 4;
template <class T>
using SortKey = std::conditional_t<kComposite<T>, uint64_t, KeyOf<T>>;

// Composite keys: the line's code above the key, ordered so that the sort direction that puts
// the best key first also puts line 0 first (a descending sort sees the line codes reversed).
template <class T, bool kLargest>
__global__ void __launch_bounds__(kBlock)
    topk_keys_kernel(const T* __restrict__ x, SortKey<T>* __restrict__ keys, int* __restrict__ ids,
                     int* __restrict__ offsets, AxisSplit s) {
  const int64_t n = s.outer * s.len * s.inner, lines = s.outer * s.inner;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * kBlock + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * kBlock) {
    // e runs over the input in memory order (coalesced reads); its line-major slot is scattered.
    const int64_t o = e / (s.len * s.inner), rest = e - o * s.len * s.inner;
    const int64_t i = rest / s.inner, j = rest - i * s.inner;
    const int64_t line = o * s.inner + j;
    const int64_t slot = line * s.len + i;
    if constexpr (kComposite<T>) {
      const uint64_t code = static_cast<uint64_t>(kLargest ? lines - 1 - line : line);
      keys[slot] = code << 32 | key_of(x[e]);
    } else {
      keys[slot] = key_of(x[e]);
    }
    ids[slot] = static_cast<int>(i);
    if (e <= lines) offsets[e] = static_cast<int>(e * s.len);
  }
}

template <class T>
__global__ void __launch_bounds__(kBlock)
    topk_gather_kernel(const T* __restrict__ x, const int* __restrict__ sorted_ids, T* __restrict__ vals,
                       int64_t* __restrict__ idx, AxisSplit s, int64_t k) {
  const int64_t n = s.outer * k * s.inner;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * kBlock + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * kBlock) {
    const int64_t o = e / (k * s.inner), rest = e - o * k * s.inner;
    const int64_t r = rest / s.inner, j = rest - r * s.inner;
    const int id = sorted_ids[(o * s.inner + j) * s.len + r];
    vals[e] = x[(o * s.len + id) * s.inner + j];
    idx[e] = id;
  }
}

// Workspace of the long-line path: keys in and out, ids in and out, segment offsets, CUB's scratch.
struct SortSpace {
  size_t keys_in = 0, keys_out = 0, ids_in = 0, ids_out = 0, offsets = 0, temp = 0, temp_bytes = 0, total = 0;
};

inline size_t align_up(size_t v) { return (v + 255) / 256 * 256; }

int bits_for(int64_t v) {
  int b = 0;
  for (; v > 0; v >>= 1) ++b;
  return b;
}

// The stable sort of (key, id) pairs: device-wide over composite keys, else segmented by line.
template <class T, bool kLargest>
cudaError_t sort_pairs(void* temp, size_t& temp_bytes, const SortKey<T>* kin, SortKey<T>* kout, const int* iin,
                       int* iout, int n, int lines, const int* offsets, cudaStream_t stream) {
  using K = SortKey<T>;
  if constexpr (kComposite<T>) {
    const int end_bit = 32 + bits_for(lines - 1);
    if constexpr (kLargest)
      return cub::DeviceRadixSort::SortPairsDescending(temp, temp_bytes, kin, kout, iin, iout, n, 0, end_bit, stream);
    else
      return cub::DeviceRadixSort::SortPairs(temp, temp_bytes, kin, kout, iin, iout, n, 0, end_bit, stream);
  } else if constexpr (kLargest) {
    return cub::DeviceSegmentedRadixSort::SortPairsDescending(temp, temp_bytes, kin, kout, iin, iout, n, lines, offsets,
                                                              offsets + 1, 0, int(sizeof(K) * 8), stream);
  } else {
    return cub::DeviceSegmentedRadixSort::SortPairs(temp, temp_bytes, kin, kout, iin, iout, n, lines, offsets,
                                                    offsets + 1, 0, int(sizeof(K) * 8), stream);
  }
}

template <class T, bool kLargest>
SortSpace sort_space(const AxisSplit& s) {
  using K = SortKey<T>;
  const int64_t n = s.outer * s.len * s.inner, lines = s.outer * s.inner;
  if (n >= (int64_t{1} << 31)) throw Error("TopK: the CUDA backend sorts at most 2^31 - 1 elements");
  SortSpace w;
  check_cuda(sort_pairs<T, kLargest>(nullptr, w.temp_bytes, nullptr, nullptr, nullptr, nullptr, static_cast<int>(n),
                                     static_cast<int>(lines), nullptr, nullptr),
             "TopK: CUB workspace query");
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t p = at;
    at += align_up(bytes);
    return p;
  };
  w.keys_in = take(n * sizeof(K));
  w.keys_out = take(n * sizeof(K));
  w.ids_in = take(n * sizeof(int));
  w.ids_out = take(n * sizeof(int));
  w.offsets = take((lines + 1) * sizeof(int));
  w.temp = take(w.temp_bytes);
  w.total = at;
  return w;
}

template <class T, bool kLargest>
void topk_typed(const TensorView& x, const TensorView& vals, const TensorView& idx, const AxisSplit& s, int64_t k,
                GpuEnv& env, size_t* ws) {
  using K = KeyOf<T>;
  const bool small = s.len <= kSmallLine;
  if (ws) {
    *ws = small ? 0 : sort_space<T, kLargest>(s).total;
    return;
  }
  const int64_t lines = s.outer * s.inner;
  if (k == 0 || lines == 0) return;
  const T* xp = static_cast<const T*>(x.data);
  T* vp = static_cast<T*>(vals.data);
  int64_t* ip = static_cast<int64_t*>(idx.data);
  if (small) {
    int p = 1;
    while (p < s.len) p <<= 1;
    const int threads = std::clamp(p / 2, 32, 1024);
    const size_t smem = static_cast<size_t>(p) * (sizeof(K) + sizeof(int));
    topk_small_kernel<T, kLargest><<<grid_for(lines, 1), threads, smem, env.stream>>>(xp, vp, ip, s, k, p);
    check_launch("TopK");
    return;
  }
  const SortSpace w = sort_space<T, kLargest>(s);
  if (!env.workspace || env.workspace_bytes < w.total)
    throw Error("TopK: the CUDA kernel needs " + std::to_string(w.total) + " bytes of workspace, got " +
                std::to_string(env.workspace_bytes));
  using SK = SortKey<T>;
  auto* base = static_cast<unsigned char*>(env.workspace);
  SK* kin = reinterpret_cast<SK*>(base + w.keys_in);
  SK* kout = reinterpret_cast<SK*>(base + w.keys_out);
  int* iin = reinterpret_cast<int*>(base + w.ids_in);
  int* iout = reinterpret_cast<int*>(base + w.ids_out);
  int* offsets = reinterpret_cast<int*>(base + w.offsets);
  const int64_t n = s.outer * s.len * s.inner;
  topk_keys_kernel<T, kLargest><<<grid_for(n, kBlock), kBlock, 0, env.stream>>>(xp, kin, iin, offsets, s);
  check_launch("TopK");
  size_t temp_bytes = w.temp_bytes;
  check_cuda(sort_pairs<T, kLargest>(base + w.temp, temp_bytes, kin, kout, iin, iout, static_cast<int>(n),
                                     static_cast<int>(lines), offsets, env.stream),
             "TopK: CUB radix sort");
  topk_gather_kernel<T><<<grid_for(s.outer * k * s.inner, kBlock), kBlock, 0, env.stream>>>(xp, iout, vp, ip, s, k);
  check_launch("TopK");
}

void topk_run(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out, GpuEnv& env,
              size_t* ws) {
  const auto& a = attrs_as<TopKAttrs>(attrs);
  const TensorView& x = in[0];
  const AxisSplit s = split_at(x.shape, normalize_axis(a.axis, static_cast<int64_t>(x.rank())));
  int64_t k = 0;
  if (!ws) {
    const void* k_host = env.host(1);
    if (!k_host) throw Error("TopK: the CUDA backend needs K to be a constant");
    TensorView kv = in[1];
    kv.data = const_cast<void*>(k_host);
    const std::vector<int64_t> kk = kv.to_int64();
    if (kk.size() != 1) throw Error("TopK: K must be a 1-element tensor");
    k = kk[0];
    if (k < 0 || k > s.len) throw Error("TopK: K is out of range");
  }
  ew::dispatch_ew_numeric(x.dtype, "TopK", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (a.largest)
      topk_typed<T, true>(x, out[0], out[1], s, k, env, ws);
    else
      topk_typed<T, false>(x, out[0], out[1], s, k, env, ws);
  });
}

void topk_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                 GpuEnv& env) {
  topk_run(kind, attrs, in, out, env, nullptr);
}

size_t topk_workspace(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                      GpuEnv& env) {
  size_t bytes = 0;
  topk_run(kind, attrs, in, out, env, &bytes);
  return bytes;
}

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kTopK, topk_kernel, topk_workspace},
};

}  // namespace

std::span<const GpuKernelEntry> topk_entries() { return kEntries; }

}  // namespace kiln::gpu::red
