// ArgMax / ArgMin on the GPU through the reduction engine (reduce_internal.cuh), with the CPU's
// semantics (runtime/cpu/reduce/arg.cpp): a NaN is the extreme (the first one, or the last with
// select_last_index), ties go to the lowest index (or the highest with select_last_index). The
// accumulator is a (value, index) pair compared by arg_beats, a total order, so the parallel
// merge finds exactly the CPU's index. Every numeric type, as the CPU kernel.
#include "runtime/cuda/reduce/reduce_internal.cuh"

namespace kiln::gpu::red {

namespace {

template <class C>
struct ArgAcc {
  C v;
  int64_t i;  // -1: empty
};

template <class T, bool kMax, bool kLast>
struct ArgOp {
  using In = T;
  using Out = int64_t;
  using C = Compute<T>;
  using Acc = ArgAcc<C>;
  __device__ Acc init() const { return {C{}, -1}; }
  __device__ void merge(Acc& a, const Acc& b) const {
    if (arg_beats<kMax, kLast>(b.v, b.i, a.v, a.i)) a = b;
  }
  __device__ void add(Acc& a, T x, int64_t r) const { merge(a, Acc{load(x), r}); }
  __device__ int64_t finish(const Acc& a, int64_t) const { return a.i; }
};

void arg_run(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
             GpuEnv& env, size_t* ws) {
  const auto& a = attrs_as<ArgReduceAttrs>(attrs);
  const TensorView& x = in[0];
  const char* name = ew::name_of(kind);
  const AxisSplit s = split_at(x.shape, normalize_axis(a.axis, static_cast<int64_t>(x.rank())));
  if (ws) *ws = 0;
  if (s.len == 0) return;  // inference made the output empty
  const RedShape p = plan_axis(s);
  const bool is_max = kind == OpKind::kArgMax, last = a.select_last_index != 0;
  ew::dispatch_ew_numeric(x.dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (is_max)
      last ? run_reduction(p, x.data, out[0].data, ArgOp<T, true, true>{}, env, name, ws)
           : run_reduction(p, x.data, out[0].data, ArgOp<T, true, false>{}, env, name, ws);
    else
      last ? run_reduction(p, x.data, out[0].data, ArgOp<T, false, true>{}, env, name, ws)
           : run_reduction(p, x.data, out[0].data, ArgOp<T, false, false>{}, env, name, ws);
  });
}

void arg_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                GpuEnv& env) {
  arg_run(kind, attrs, in, out, env, nullptr);
}

size_t arg_workspace(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                     GpuEnv& env) {
  size_t bytes = 0;
  arg_run(kind, attrs, in, out, env, &bytes);
  return bytes;
}

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kArgMax, arg_kernel, arg_workspace},
    {OpKind::kArgMin, arg_kernel, arg_workspace},
};

}  // namespace

std::span<const GpuKernelEntry> arg_entries() { return kEntries; }

}  // namespace kiln::gpu::red
