// The data-dependent ops on the GPU: NonZero and NonMaxSuppression (the CPU kernels, which define
// the results: runtime/cpu/tensor/select.cpp). Each packs its result at the start of output 0 and
// writes the count into output 1, the extent slot, which the context reads back (decision 56).
//   NonZero: every thread counts the nonzero elements of its own contiguous segment; one block
//   scans the counts into offsets (and the total into the slot); the threads then write their hits'
//   coordinates in element order.
//   NonMaxSuppression: one block per (batch, class) ranks its candidates by score (ties: lower
//   index first) by counting, then selects greedily, one candidate at a time, every thread testing
//   it against a share of the boxes kept so far; a second launch places each (batch, class)'s
//   selections after those of the ones before it. The ranking is quadratic in the boxes of a class,
//   which is fine for the few thousand a detector keeps before its NMS.
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

struct NmsArgs {
  const float* boxes;   // [batches, n, 4]
  const float* scores;  // [batches, classes, n]
  int64_t classes, n;
  bool center;
  const int64_t* max_per_class;  // null: 0
  const float* iou_threshold;    // null: 0
  const float* score_threshold;  // null: none
  int32_t* order;                // workspace: per (batch, class), n candidates by rank
  int32_t* kept;                 // workspace: per (batch, class), n selections
  int64_t* kept_count;           // workspace: per (batch, class)
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

// The CPU kernel's test, operation for operation (float32, no contraction into FMAs).
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

__global__ void __launch_bounds__(kNmsThreads) nms_select(NmsArgs a) {
  const int64_t bc = blockIdx.x, b = bc / a.classes, n = a.n;
  const float* s = a.scores + bc * n;
  const float* bx = a.boxes + b * n * 4;
  int32_t* order = a.order + bc * n;
  int32_t* kept = a.kept + bc * n;
  const bool by_score = a.score_threshold != nullptr;
  const float sthr = by_score ? *a.score_threshold : 0.0f;
  const float ithr = a.iou_threshold ? *a.iou_threshold : 0.0f;
  const int64_t max_kept = a.max_per_class ? min(max(*a.max_per_class, int64_t{0}), n) : 0;
  if (!(ithr >= 0 && ithr <= 1)) {
    if (threadIdx.x == 0) {
      a.kept_count[bc] = 0;
      if (a.error) *a.error = kGpuBadValue;
    }
    return;
  }
  __shared__ int candidates;
  __shared__ int kept_now;
  if (threadIdx.x == 0) candidates = 0;
  __syncthreads();
  // Rank each candidate among the others: higher score first, then lower index.
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float si = s[i];
    if (isnan(si) || (by_score && !(si > sthr))) continue;
    int64_t rank = 0;
    for (int64_t j = 0; j < n; ++j) {
      const float sj = s[j];
      if (isnan(sj) || (by_score && !(sj > sthr))) continue;
      rank += sj > si || (sj == si && j < i);
    }
    order[rank] = static_cast<int32_t>(i);
    atomicAdd(&candidates, 1);
  }
  if (threadIdx.x == 0) kept_now = 0;
  __syncthreads();
  const int total = candidates;
  for (int r = 0; r < total && kept_now < max_kept; ++r) {
    const int32_t c = order[r];
    const NmsBox cand = nms_box(bx + int64_t{c} * 4, a.center);
    bool hit = false;
    for (int k = threadIdx.x; k < kept_now && !hit; k += blockDim.x)
      hit = nms_suppresses(nms_box(bx + int64_t{kept[k]} * 4, a.center), cand, ithr);
    hit = __syncthreads_or(hit);
    if (!hit && threadIdx.x == 0) {
      kept[kept_now] = c;
      kept_now = kept_now + 1;
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

size_t nms_workspace(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView>, GpuEnv&) {
  const int64_t bcs = in[1].shape[0] * in[1].shape[1], n = in[1].shape[2];
  return static_cast<size_t>(bcs * n) * 2 * sizeof(int32_t) + static_cast<size_t>(bcs) * sizeof(int64_t);
}

void nms(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out, GpuEnv& env) {
  const int64_t bcs = in[1].shape[0] * in[1].shape[1], n = in[1].shape[2];
  auto* total = out[1].as<int64_t>();
  if (bcs == 0 || n == 0) {
    check_cuda(cudaMemsetAsync(total, 0, sizeof(int64_t), env.stream), "NonMaxSuppression");
    return;
  }
  if (n > INT32_MAX) throw Error("NonMaxSuppression: too many boxes for the CUDA backend");
  auto present = [&](size_t i) { return in.size() > i && in[i].exists; };
  NmsArgs a{};
  a.boxes = in[0].as<float>();
  a.scores = in[1].as<float>();
  a.classes = in[1].shape[1];
  a.n = n;
  a.center = attrs_as<NmsAttrs>(attrs).center_point_box == 1;
  a.max_per_class = present(2) ? in[2].as<int64_t>() : nullptr;
  a.iou_threshold = present(3) ? in[3].as<float>() : nullptr;
  a.score_threshold = present(4) ? in[4].as<float>() : nullptr;
  auto* ws = static_cast<int32_t*>(env.workspace);
  a.order = ws;
  a.kept = ws + bcs * n;
  a.kept_count = reinterpret_cast<int64_t*>(ws + 2 * bcs * n);
  a.error = env.error;
  nms_select<<<static_cast<unsigned>(bcs), kNmsThreads, 0, env.stream>>>(a);
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
