// The data-dependent ops on the GPU: NonZero and NonMaxSuppression (the CPU kernels, which define
// the results: runtime/cpu/tensor/select.cpp). Each packs its result at the start of output 0 and
// writes the count into output 1, the extent slot, which the context reads back (decision 56).
//   NonZero: every thread counts the nonzero elements of its own contiguous segment; one block
//   scans the counts into offsets (and the total into the slot); the threads then write their hits'
//   coordinates in element order.
//   NonMaxSuppression: every box is ranked among its class's candidates by counting (higher score
//   first, ties: lower index), in parallel over the boxes; then, as torchvision's CUDA kernel does,
//   a bit mask of which candidate suppresses which later one (n * n / 8 bytes per class, classes in
//   groups of at most 256 MiB); then one block per (batch, class) selects greedily in rank order,
//   64 candidates per step; a last launch places each (batch, class)'s selections after those of
//   the ones before it. torchvision's SSDlite runs one NMS over 27,000 boxes: 534 ms when each
//   candidate was tested against the kept boxes one at a time.
#include "runtime/cuda/tensor/tensor_internal.cuh"

namespace kiln::gpu::tensor {

namespace {

// ---- NonZero -----------------------------------------------------------------------------------
constexpr int kMaxRank = 8;
constexpr int64_t kSegment = 16;           // elements per thread, at least
constexpr int64_t kMaxSegments = 1 << 16;  // threads that count, at most
constexpr int kScanThreads = 1024;

struct Strides {
  int64_t s[kMaxRank];
  int rank;
};

// Element i of x is nonzero: its bits, less a float's sign bit (-0.0 is zero, NaN is not).
template <class W>
__device__ __forceinline__ bool nonzero_at(const W* x, int64_t i, W magnitude) {
  return (x[i] & magnitude) != 0;
}

template <class W>
__global__ void __launch_bounds__(kThreads)
    count_nonzero(const W* x, int64_t n, int64_t seg, int64_t segments, W magnitude, int64_t* counts) {
  const int64_t t = global_thread();
  if (t >= segments) return;
  const int64_t lo = t * seg, hi = min(n, lo + seg);
  int64_t c = 0;
  for (int64_t i = lo; i < hi; ++i) c += nonzero_at(x, i, magnitude);
  counts[t] = c;
}

// One block: counts -> exclusive offsets, in place; the total into *total.
__global__ void __launch_bounds__(kScanThreads) scan_counts(int64_t* counts, int64_t segments, int64_t* total) {
  __shared__ int64_t part[kScanThreads];
  const int64_t per = (segments + kScanThreads - 1) / kScanThreads;
  const int64_t lo = threadIdx.x * per, hi = min(segments, lo + per);
  int64_t sum = 0;
  for (int64_t i = lo; i < hi; ++i) sum += counts[i];
  part[threadIdx.x] = sum;
  __syncthreads();
  for (int d = 1; d < kScanThreads; d *= 2) {  // inclusive Hillis-Steele scan of the parts
    const int64_t v = threadIdx.x >= d ? part[threadIdx.x - d] : 0;
    __syncthreads();
    part[threadIdx.x] += v;
    __syncthreads();
  }
  int64_t run = part[threadIdx.x] - sum;
  for (int64_t i = lo; i < hi; ++i) {
    const int64_t c = counts[i];
    counts[i] = run;
    run += c;
  }
  if (threadIdx.x == kScanThreads - 1) *total = part[threadIdx.x];
}

template <class W>
__global__ void __launch_bounds__(kThreads)
    write_nonzero(const W* x, int64_t n, int64_t seg, int64_t segments, W magnitude, const int64_t* offsets,
                  const int64_t* total, Strides st, int64_t* y) {
  const int64_t t = global_thread();
  if (t >= segments) return;
  const int64_t count = *total;
  int64_t pos = offsets[t];
  const int64_t lo = t * seg, hi = min(n, lo + seg);
  for (int64_t i = lo; i < hi; ++i) {
    if (!nonzero_at(x, i, magnitude)) continue;
    int64_t rest = i;
    for (int d = 0; d < st.rank; ++d) {
      y[d * count + pos] = rest / st.s[d];
      rest %= st.s[d];
    }
    ++pos;
  }
}

struct NonZeroPlan {
  int64_t n, seg, segments;
};

NonZeroPlan nonzero_plan(const TensorView& x) {
  NonZeroPlan p;
  p.n = x.numel();
  p.segments = std::clamp<int64_t>((p.n + kSegment - 1) / kSegment, 1, kMaxSegments);
  p.seg = (p.n + p.segments - 1) / p.segments;
  return p;
}

size_t nonzero_workspace(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView>, GpuEnv&) {
  return static_cast<size_t>(nonzero_plan(in[0]).segments) * sizeof(int64_t);
}

bool float_type(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFloat64;
}

void nonzero(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, GpuEnv& env) {
  const TensorView& x = in[0];
  if (static_cast<int>(x.rank()) > kMaxRank)
    throw Error("NonZero: the CUDA backend takes inputs of rank up to " + std::to_string(kMaxRank));
  const NonZeroPlan p = nonzero_plan(x);
  auto* counts = static_cast<int64_t*>(env.workspace);
  auto* total = out[1].as<int64_t>();
  Strides st{{1}, 1};  // a scalar: one coordinate, 0 (onnxruntime's)
  if (x.rank() > 0) {
    st.rank = static_cast<int>(x.rank());
    const std::vector<int64_t> s = strides_of(x.shape);
    for (int d = 0; d < st.rank; ++d) st.s[d] = s[static_cast<size_t>(d)];
  }
  if (p.n == 0) {
    check_cuda(cudaMemsetAsync(total, 0, sizeof(int64_t), env.stream), "NonZero");
    return;
  }
  const size_t esize = dtype_size(x.dtype);
  if (esize > 8) throw_gpu_dtype(x.dtype, "NonZero");
  dispatch_word(esize, [&](auto tag) {
    using W = typename decltype(tag)::type;
    if constexpr (sizeof(W) <= 8) {
      const W sign = float_type(x.dtype) ? static_cast<W>(W{1} << (sizeof(W) * 8 - 1)) : W{0};
      const W magnitude = static_cast<W>(~sign);
      const W* xp = static_cast<const W*>(x.data);
      const unsigned blocks = static_cast<unsigned>((p.segments + kThreads - 1) / kThreads);
      count_nonzero<W><<<blocks, kThreads, 0, env.stream>>>(xp, p.n, p.seg, p.segments, magnitude, counts);
      scan_counts<<<1, kScanThreads, 0, env.stream>>>(counts, p.segments, total);
      write_nonzero<W><<<blocks, kThreads, 0, env.stream>>>(xp, p.n, p.seg, p.segments, magnitude, counts, total, st,
                                                            out[0].as<int64_t>());
    }
  });
  check_launch("NonZero");
}

// ---- NonMaxSuppression -------------------------------------------------------------------------
constexpr int kNmsThreads = 256;
constexpr int kWord = 64;                            // candidates per mask word
constexpr size_t kMaskGroupBytes = size_t{1} << 28;  // mask bytes of the (batch, class)es done at once

struct NmsArgs {
  const float* boxes;         // [batches, n, 4]
  const float* scores;        // [batches, classes, n]
  int64_t classes, n, words;  // words: mask words per candidate, ceil(n / 64)
  bool center;
  const int64_t* max_per_class;  // null: 0
  const float* iou_threshold;    // null: 0
  const float* score_threshold;  // null: none
  uint64_t* mask;                // workspace: per (batch, class) of a group, [n, words] suppression bits
  int64_t* candidates;           // workspace: per (batch, class), the boxes that pass the score threshold
  int64_t* kept_count;           // workspace: per (batch, class)
  int32_t* order;                // workspace: per (batch, class), n candidates by rank
  int32_t* kept;                 // workspace: per (batch, class), n selections
  int* error;
};

struct NmsBox {
  float x0, y0, x1, y1;
};

__device__ NmsBox nms_box(const float* b, bool center) {
  if (center) {
    const float hw = b[2] / 2, hh = b[3] / 2;
    return {b[0] - hw, b[1] - hh, b[0] + hw, b[1] + hh};
  }
  return {fminf(b[1], b[3]), fminf(b[0], b[2]), fmaxf(b[1], b[3]), fmaxf(b[0], b[2])};
}

// The CPU kernel's test, operation for operation (float32, no contraction into FMAs): whether kept
// box a suppresses the later candidate b.
__device__ bool nms_suppresses(const NmsBox& a, const NmsBox& b, float thr) {
  const float ix0 = fmaxf(a.x0, b.x0), ix1 = fminf(a.x1, b.x1);
  const float iy0 = fmaxf(a.y0, b.y0), iy1 = fminf(a.y1, b.y1);
  if (ix1 <= ix0 || iy1 <= iy0) return false;
  const float inter = __fmul_rn(__fsub_rn(ix1, ix0), __fsub_rn(iy1, iy0));
  const float area_a = __fmul_rn(__fsub_rn(a.x1, a.x0), __fsub_rn(a.y1, a.y0));
  const float area_b = __fmul_rn(__fsub_rn(b.x1, b.x0), __fsub_rn(b.y1, b.y0));
  const float uni = __fsub_rn(__fadd_rn(area_a, area_b), inter);
  if (inter <= 0 || area_a <= 0 || area_b <= 0 || uni <= 0) return false;
  return __fdiv_rn(inter, uni) > thr;
}

__device__ bool nms_candidate(float s, bool by_score, float thr) { return !isnan(s) && (!by_score || s > thr); }

// Grid (batch * class, boxes / 256): each thread ranks its box among the class's candidates by
// counting (higher score first, then lower index), the scores read in tiles shared by the block.
__global__ void __launch_bounds__(kNmsThreads) nms_rank(NmsArgs a) {
  const int64_t bc = blockIdx.x, n = a.n, i = int64_t{blockIdx.y} * kNmsThreads + threadIdx.x;
  const float* s = a.scores + bc * n;
  const bool by_score = a.score_threshold != nullptr;
  const float thr = by_score ? *a.score_threshold : 0.0f;
  const float si = i < n ? s[i] : 0.0f;
  const bool mine = i < n && nms_candidate(si, by_score, thr);
  __shared__ float tile[kNmsThreads];
  int64_t rank = 0;
  for (int64_t j0 = 0; j0 < n; j0 += kNmsThreads) {
    const int64_t j = j0 + threadIdx.x;
    const float sj = j < n ? s[j] : 0.0f;
    tile[threadIdx.x] = j < n && nms_candidate(sj, by_score, thr) ? sj : __int_as_float(0x7fffffff);  // NaN: none
    __syncthreads();
    if (mine) {
      const int64_t m = min(int64_t{kNmsThreads}, n - j0);
      for (int64_t k = 0; k < m; ++k) {
        const float t = tile[k];
        rank += t > si || (t == si && j0 + k < i);  // NaN (no candidate) compares false
      }
    }
    __syncthreads();
  }
  if (mine) {
    a.order[bc * n + rank] = static_cast<int32_t>(i);
    atomicAdd(reinterpret_cast<unsigned long long*>(a.candidates + bc), 1ull);
  }
}

// Grid (mask words, mask words, the group's (batch, class)es), 64 threads: bit j % 64 of word
// j / 64 of row i says whether candidate i (by rank) suppresses the later candidate j. Words left of
// the diagonal are never read and stay unwritten.
__global__ void __launch_bounds__(kWord) nms_mask(NmsArgs a, int64_t first_bc) {
  const int64_t col = blockIdx.x, row = blockIdx.y, bc = first_bc + blockIdx.z, n = a.n;
  const int64_t total = a.candidates[bc];
  if (col < row || row * kWord >= total) return;
  const float* bx = a.boxes + (bc / a.classes) * n * 4;
  const int32_t* order = a.order + bc * n;
  const float thr = a.iou_threshold ? *a.iou_threshold : 0.0f;
  __shared__ NmsBox later[kWord];
  const int64_t j = col * kWord + threadIdx.x;
  if (j < total) later[threadIdx.x] = nms_box(bx + int64_t{order[j]} * 4, a.center);
  __syncthreads();
  const int64_t i = row * kWord + threadIdx.x;
  if (i >= total) return;
  const NmsBox mine = nms_box(bx + int64_t{order[i]} * 4, a.center);
  uint64_t bits = 0;
  const int64_t m = min(int64_t{kWord}, total - col * kWord);
  for (int64_t k = col == row ? threadIdx.x + 1 : 0; k < m; ++k)
    if (nms_suppresses(mine, later[k], thr)) bits |= uint64_t{1} << k;
  a.mask[((bc - first_bc) * n + i) * a.words + col] = bits;
}

// One block per (batch, class) of the group: greedy selection in rank order, 64 candidates at a
// time. Thread 0 settles a word's candidates among themselves from the mask's diagonal word; then
// the block ORs the rows of the ones kept into the removed bits of the words after it.
__global__ void __launch_bounds__(kNmsThreads) nms_scan(NmsArgs a, int64_t first_bc) {
  extern __shared__ uint64_t removed[];  // [words]
  __shared__ uint64_t diagonal[kWord];
  __shared__ uint64_t kept_bits;
  __shared__ int64_t kept_now;
  const int64_t bc = first_bc + blockIdx.x, n = a.n, words = a.words;
  const int64_t total = a.candidates[bc];
  const float ithr = a.iou_threshold ? *a.iou_threshold : 0.0f;
  const int64_t max_kept = a.max_per_class ? min(max(*a.max_per_class, int64_t{0}), n) : 0;
  if (!(ithr >= 0 && ithr <= 1)) {
    if (threadIdx.x == 0) {
      a.kept_count[bc] = 0;
      if (a.error) *a.error = kGpuBadValue;
    }
    return;
  }
  const uint64_t* mask = a.mask + (bc - first_bc) * n * words;
  const int32_t* order = a.order + bc * n;
  int32_t* kept = a.kept + bc * n;
  for (int64_t w = threadIdx.x; w < words; w += blockDim.x) removed[w] = 0;
  if (threadIdx.x == 0) kept_now = 0;
  __syncthreads();
  for (int64_t c = 0; c * kWord < total && kept_now < max_kept; ++c) {
    const int64_t m = min(int64_t{kWord}, total - c * kWord);
    if (threadIdx.x < m) diagonal[threadIdx.x] = mask[(c * kWord + threadIdx.x) * words + c];
    __syncthreads();
    if (threadIdx.x == 0) {
      uint64_t gone = removed[c], keep = 0;
      int64_t k = kept_now;
      for (int64_t b = 0; b < m && k < max_kept; ++b) {
        if (gone >> b & 1) continue;
        kept[k++] = order[c * kWord + b];
        keep |= uint64_t{1} << b;
        gone |= diagonal[b];
      }
      kept_bits = keep;
      kept_now = k;
    }
    __syncthreads();
    const uint64_t keep = kept_bits;
    for (int64_t w = c + 1 + threadIdx.x; w < words; w += blockDim.x) {
      uint64_t acc = removed[w];
      for (uint64_t rest = keep; rest; rest &= rest - 1)
        acc |= mask[(c * kWord + __ffsll(static_cast<long long>(rest)) - 1) * words + w];
      removed[w] = acc;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) a.kept_count[bc] = kept_now;
}

// One block per (batch, class): its selections after those of the (batch, class)es before it.
__global__ void __launch_bounds__(kNmsThreads)
    nms_place(const int32_t* kept, const int64_t* kept_count, int64_t classes, int64_t n, int64_t* y, int64_t* total) {
  const int64_t bc = blockIdx.x;
  __shared__ int64_t base;
  if (threadIdx.x == 0) {
    int64_t sum = 0;
    for (int64_t q = 0; q < bc; ++q) sum += kept_count[q];
    base = sum;
    if (bc == gridDim.x - 1) *total = sum + kept_count[bc];
  }
  __syncthreads();
  for (int64_t k = threadIdx.x; k < kept_count[bc]; k += blockDim.x) {
    int64_t* row = y + (base + k) * 3;
    row[0] = bc / classes;
    row[1] = bc % classes;
    row[2] = kept[bc * n + k];
  }
}

// The (batch, class)es whose masks fit in the workspace at once: as many as fit in
// kMaskGroupBytes, at least one (a class of n boxes takes n * n / 8 bytes).
int64_t nms_group(int64_t bcs, int64_t n) {
  const int64_t per = n * ((n + kWord - 1) / kWord) * 8;
  return std::clamp<int64_t>(static_cast<int64_t>(kMaskGroupBytes) / std::max<int64_t>(per, 1), 1,
                             std::min<int64_t>(bcs, 65535));
}

// The workspace: per (batch, class) the candidates and kept counts, the ranked candidates and the
// selections, then the masks of as many (batch, class)es as fit (at least one). Sized at the
// bound's shapes; a run at smaller ones takes as many masks at a time as the space holds.
size_t nms_tail_bytes(int64_t bcs, int64_t n) {
  return static_cast<size_t>(bcs) * 2 * sizeof(int64_t) + static_cast<size_t>(bcs * n) * 2 * sizeof(int32_t);
}

size_t nms_workspace(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView>, GpuEnv&) {
  const int64_t bcs = in[1].shape[0] * in[1].shape[1], n = in[1].shape[2], words = (n + kWord - 1) / kWord;
  return nms_tail_bytes(bcs, n) + static_cast<size_t>(nms_group(bcs, n) * n * words) * 8;
}

void nms(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out, GpuEnv& env) {
  const int64_t bcs = in[1].shape[0] * in[1].shape[1], n = in[1].shape[2];
  auto* total = out[1].as<int64_t>();
  if (bcs == 0 || n == 0) {
    check_cuda(cudaMemsetAsync(total, 0, sizeof(int64_t), env.stream), "NonMaxSuppression");
    return;
  }
  NmsArgs a{};
  a.words = (n + kWord - 1) / kWord;
  const size_t removed_bytes = static_cast<size_t>(a.words) * 8;
  if (removed_bytes > 40 * 1024 || bcs > INT32_MAX || (n + kNmsThreads - 1) / kNmsThreads > 65535)
    throw Error("NonMaxSuppression: " + std::to_string(n) + " boxes per class are more than the CUDA backend's " +
                std::to_string(40 * 1024 * 8) + "; the CPU backend takes any number");
  auto present = [&](size_t i) { return in.size() > i && in[i].exists; };
  a.boxes = in[0].as<float>();
  a.scores = in[1].as<float>();
  a.classes = in[1].shape[1];
  a.n = n;
  a.center = attrs_as<NmsAttrs>(attrs).center_point_box == 1;
  a.max_per_class = present(2) ? in[2].as<int64_t>() : nullptr;
  a.iou_threshold = present(3) ? in[3].as<float>() : nullptr;
  a.score_threshold = present(4) ? in[4].as<float>() : nullptr;
  const size_t tail = nms_tail_bytes(bcs, n), per = static_cast<size_t>(n * a.words) * 8;
  if (env.workspace_bytes < tail + per)
    throw Error("NonMaxSuppression: a workspace of " + std::to_string(env.workspace_bytes) + " bytes for " +
                std::to_string(n) + " boxes (internal error)");
  const int64_t group = std::min<int64_t>({bcs, 65535, static_cast<int64_t>((env.workspace_bytes - tail) / per)});
  a.candidates = static_cast<int64_t*>(env.workspace);
  a.kept_count = a.candidates + bcs;
  a.order = reinterpret_cast<int32_t*>(a.kept_count + bcs);
  a.kept = a.order + bcs * n;
  a.mask = reinterpret_cast<uint64_t*>(static_cast<char*>(env.workspace) + tail);  // tail: a multiple of 8
  a.error = env.error;
  check_cuda(cudaMemsetAsync(a.candidates, 0, static_cast<size_t>(bcs) * sizeof(int64_t), env.stream),
             "NonMaxSuppression");
  nms_rank<<<dim3(static_cast<unsigned>(bcs), static_cast<unsigned>((n + kNmsThreads - 1) / kNmsThreads)), kNmsThreads,
             0, env.stream>>>(a);
  for (int64_t first = 0; first < bcs; first += group) {
    const int64_t g = std::min(group, bcs - first);
    const unsigned w = static_cast<unsigned>(a.words);
    nms_mask<<<dim3(w, w, static_cast<unsigned>(g)), kWord, 0, env.stream>>>(a, first);
    nms_scan<<<static_cast<unsigned>(g), kNmsThreads, removed_bytes, env.stream>>>(a, first);
  }
  nms_place<<<static_cast<unsigned>(bcs), kNmsThreads, 0, env.stream>>>(a.kept, a.kept_count, a.classes, n,
                                                                        out[0].as<int64_t>(), total);
  check_launch("NonMaxSuppression");
}

void select_branch(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, GpuEnv& env) {
  const void* cond = env.host(0);
  if (!cond) throw Error("If: the condition is not known on the host; the context reads it back first");
  const size_t n = out.size(), first = *static_cast<const bool*>(cond) ? 1 : 1 + n;
  for (size_t i = 0; i < n; ++i) {
    const TensorView& from = in[first + i];
    if (out[i].bytes() != from.bytes())
      throw Error("If: output " + std::to_string(i) + " has " + std::to_string(out[i].bytes()) +
                  " bytes, its branch's " + std::to_string(from.bytes()));
    if (from.bytes() != 0 && out[i].data != from.data)
      check_cuda(cudaMemcpyAsync(out[i].data, from.data, from.bytes(), cudaMemcpyDeviceToDevice, env.stream),
                 "If: copying the chosen branch's output");
  }
}

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kNonZero, nonzero, nonzero_workspace},
    {OpKind::kNonMaxSuppression, nms, nms_workspace},
    {OpKind::kSelectBranch, select_branch, nullptr},
};

}  // namespace

std::span<const GpuKernelEntry> select_entries() { return kEntries; }

}  // namespace kiln::gpu::tensor
