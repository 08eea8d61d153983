// Einsum on the GPU: a generic kernel for every equation the CPU kernel takes (parse_einsum in
// core/infer/reduce_util.h: diagonals, sums, broadcast ellipsis dims, any number of inputs).
// Each output element is the sum, over every combination of the labels missing from the output,
// of the product of the inputs' elements; every input reaches a label through a stride (summed
// over a repeated label, which takes the diagonal; 0 along a broadcast dim of size 1). A group of
// G threads per output splits the sum: G = 1 when there are many outputs (neighbouring threads,
// neighbouring outputs), a warp or a block when there are few and the sums are long. Correct for
// any equation but not a GEMM: matmul-shaped equations run at CUDA-core speed with no data reuse.
// Floats compute in float (float64 in double) like the CPU; integers wrap modulo 2^64 like the CPU
// (exact). Every numeric type, as the CPU kernel.
#include <algorithm>

#include "core/infer/reduce_util.h"
#include "runtime/cuda/reduce/reduce_internal.cuh"

namespace kiln::gpu::red {

namespace {

constexpr int kMaxIn = 8;
constexpr int kMaxLabels = 16;

struct EinsumParams {
  int n_in = 0, n_out = 0, n_sum = 0;
  int64_t out_count = 1, sum_count = 1;
  int64_t out_dim[kMaxLabels] = {}, sum_dim[kMaxLabels] = {};
  int64_t out_stride[kMaxIn][kMaxLabels] = {}, sum_stride[kMaxIn][kMaxLabels] = {};
};

template <class T>
struct InPtrs {
  const T* p[kMaxIn];
};

template <class T>
using EinsumAcc = std::conditional_t<kIsFloatDev<T>, FloatAcc<T>, uint64_t>;

template <class T>
__device__ __forceinline__ EinsumAcc<T> ein_load(T v) {
  if constexpr (kIsFloatDev<T>)
    return load(v);
  else
    return wrap64(v);
}

template <class T>
struct EinsumSumOp {
  using Acc = EinsumAcc<T>;
  __device__ Acc init() const { return Acc(0); }
  __device__ void merge(Acc& a, const Acc& b) const { a += b; }
};

template <class T, int G>
__global__ void __launch_bounds__(kBlock) einsum_kernel(InPtrs<T> in, T* __restrict__ y, EinsumParams p) {
  using Acc = EinsumAcc<T>;
  constexpr int kGroups = kBlock / G;
  const int t = static_cast<int>(threadIdx.x) % G;
  for (int64_t o0 = static_cast<int64_t>(blockIdx.x) * kGroups; o0 < p.out_count;
       o0 += static_cast<int64_t>(gridDim.x) * kGroups) {
    const int64_t o = o0 + threadIdx.x / G;
    if (o >= p.out_count) continue;  // G == 1 only
    int64_t base[kMaxIn];
    for (int i = 0; i < p.n_in; ++i) base[i] = 0;
    int64_t rest = o;
    for (int d = p.n_out - 1; d >= 0; --d) {
      const int64_t q = rest / p.out_dim[d], idx = rest - q * p.out_dim[d];
      rest = q;
      for (int i = 0; i < p.n_in; ++i) base[i] += idx * p.out_stride[i][d];
    }
    Acc a = 0;
    if constexpr (G == 1) {
      // One thread walks the whole sum: an odometer over the summed labels, no divisions.
      int64_t idx[kMaxLabels], off[kMaxIn];
      for (int d = 0; d < p.n_sum; ++d) idx[d] = 0;
      for (int i = 0; i < p.n_in; ++i) off[i] = base[i];
      for (int64_t s = 0; s < p.sum_count; ++s) {
        Acc prod = ein_load(in.p[0][off[0]]);
        for (int i = 1; i < p.n_in; ++i) prod *= ein_load(in.p[i][off[i]]);
        a += prod;
        for (int d = p.n_sum - 1; d >= 0; --d) {
          for (int i = 0; i < p.n_in; ++i) off[i] += p.sum_stride[i][d];
          if (++idx[d] < p.sum_dim[d]) break;
          for (int i = 0; i < p.n_in; ++i) off[i] -= p.sum_stride[i][d] * p.sum_dim[d];
          idx[d] = 0;
        }
      }
    }
    for (int64_t s = G == 1 ? p.sum_count : t; s < p.sum_count; s += G) {
      int64_t off[kMaxIn];
      for (int i = 0; i < p.n_in; ++i) off[i] = base[i];
      int64_t r = s;
      for (int d = p.n_sum - 1; d >= 0; --d) {
        const int64_t q = r / p.sum_dim[d], idx = r - q * p.sum_dim[d];
        r = q;
        for (int i = 0; i < p.n_in; ++i) off[i] += idx * p.sum_stride[i][d];
      }
      Acc prod = ein_load(in.p[0][off[0]]);
      for (int i = 1; i < p.n_in; ++i) prod *= ein_load(in.p[i][off[i]]);
      a += prod;
    }
    a = group_reduce<G>(a, EinsumSumOp<T>{});
    if (t == 0) {
      if constexpr (kIsFloatDev<T>)
        y[o] = store<T>(a);
      else
        y[o] = static_cast<T>(a);  // modular
    }
  }
}

EinsumParams make_params(const EinsumPlan& plan, std::span<const TensorView> inputs) {
  EinsumParams p;
  if (inputs.size() > static_cast<size_t>(kMaxIn))
    throw Error("Einsum: the CUDA backend takes at most " + std::to_string(kMaxIn) + " inputs");
  p.n_in = static_cast<int>(inputs.size());
  const size_t n_labels = plan.label_dims.size();
  std::vector<bool> in_out(n_labels, false);
  for (int l : plan.out_labels) in_out[static_cast<size_t>(l)] = true;
  std::vector<int> sum_labels;
  for (size_t l = 0; l < n_labels; ++l)
    if (plan.label_dims[l] >= 0 && !in_out[l]) sum_labels.push_back(static_cast<int>(l));
  if (plan.out_labels.size() > static_cast<size_t>(kMaxLabels) || sum_labels.size() > static_cast<size_t>(kMaxLabels))
    throw Error("Einsum: the CUDA backend takes at most " + std::to_string(kMaxLabels) +
                " output labels and as many summed ones");
  p.n_out = static_cast<int>(plan.out_labels.size());
  p.n_sum = static_cast<int>(sum_labels.size());
  // Per input, the element stride of every label (0 if absent or broadcast).
  std::vector<std::vector<int64_t>> label_stride(inputs.size(), std::vector<int64_t>(n_labels, 0));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int64_t> st = strides_of(inputs[i].shape);
    for (size_t d = 0; d < plan.in_labels[i].size(); ++d) {
      const size_t l = static_cast<size_t>(plan.in_labels[i][d]);
      if (inputs[i].shape[d] == plan.label_dims[l]) label_stride[i][l] += st[d];
    }
  }
  for (int d = 0; d < p.n_out; ++d) {
    const size_t l = static_cast<size_t>(plan.out_labels[static_cast<size_t>(d)]);
    p.out_dim[d] = plan.label_dims[l];
    p.out_count *= p.out_dim[d];
    for (int i = 0; i < p.n_in; ++i) p.out_stride[i][d] = label_stride[static_cast<size_t>(i)][l];
  }
  for (int d = 0; d < p.n_sum; ++d) {
    const size_t l = static_cast<size_t>(sum_labels[static_cast<size_t>(d)]);
    p.sum_dim[d] = plan.label_dims[l];
    p.sum_count *= p.sum_dim[d];
    for (int i = 0; i < p.n_in; ++i) p.sum_stride[i][d] = label_stride[static_cast<size_t>(i)][l];
  }
  return p;
}

void einsum_gpu_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                       GpuEnv& env) {
  const EinsumPlan plan = parse_einsum(attrs_as<EinsumAttrs>(attrs).equation, in);
  if (numel_of(plan.out_shape) != out[0].numel()) throw Error("Einsum: output shape does not match the equation");
  const EinsumParams p = make_params(plan, in);
  if (p.out_count == 0) return;
  for (const TensorView& t : in)
    if (t.dtype != in[0].dtype) throw Error("Einsum: every input must have the same element type");
  ew::dispatch_ew_numeric(in[0].dtype, "Einsum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    InPtrs<T> ptrs{};
    for (size_t i = 0; i < in.size(); ++i) ptrs.p[i] = static_cast<const T*>(in[i].data);
    T* y = static_cast<T*>(out[0].data);
    int g = 1;
    if (p.sum_count >= 64 && p.out_count < 16384) g = p.out_count >= 1024 ? 32 : kBlock;
    if (g == 1)
      einsum_kernel<T, 1><<<grid_for(p.out_count, kBlock), kBlock, 0, env.stream>>>(ptrs, y, p);
    else if (g == 32)
      einsum_kernel<T, 32><<<grid_for(p.out_count, kBlock / 32), kBlock, 0, env.stream>>>(ptrs, y, p);
    else
      einsum_kernel<T, kBlock><<<grid_for(p.out_count, 1), kBlock, 0, env.stream>>>(ptrs, y, p);
  });
  check_launch("Einsum");
}

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kEinsum, einsum_gpu_kernel},
};

}  // namespace

std::span<const GpuKernelEntry> einsum_entries() { return kEntries; }

}  // namespace kiln::gpu::red
