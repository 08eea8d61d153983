// Reduce* on the GPU: the ops of the reduction engine (reduce_internal.cuh) with the CPU kernels'
// semantics (runtime/cpu/reduce/reduce.cpp):
//   float32, float16 and bfloat16 accumulate in float (the CPU: double), so sums differ in the
//   last bits; float64 accumulates in double;
//   32- and 64-bit integers' Sum, SumSquare, L1, Mean and Prod wrap modulo 2^64 like the CPU
//   (exact in any order); their L2, LogSum and LogSumExp go through double and convert back
//   saturating;
//   Max/Min propagate NaN and also take int8, uint8 and bool; empty reductions give the CPU's
//   values (Sum 0, Prod 1, Mean NaN or 0, Max -inf or lowest, LogSum/LogSumExp -inf, ...).
// ReduceLogSumExp is one pass with an online (max, sum) pair; +inf and NaN are tracked as flags so
// the result is the CPU's (NaN if any NaN, else +inf if any +inf, else max + log(sum exp(x - max))).
// The element types are the CPU kernel's (and shape inference's): every numeric type but int16
// and uint16, and the 8-bit ones for Max and Min only.
#include <cmath>

#include "core/infer/reduce_util.h"
#include "runtime/cuda/reduce/reduce_internal.cuh"

namespace kiln::gpu::red {

namespace {

enum class SumKind { kSum, kSumSquare, kL1, kMean, kProd, kL2, kLogSum };

template <class T, SumKind K>
struct SumOp {
  static constexpr bool kFloat = kIsFloatDev<T>;
  static constexpr bool kViaDouble = K == SumKind::kL2 || K == SumKind::kLogSum;
  using In = T;
  using Out = T;
  using Acc = std::conditional_t<kFloat, FloatAcc<T>, std::conditional_t<kViaDouble, double, uint64_t>>;

  __device__ Acc init() const { return K == SumKind::kProd ? Acc(1) : Acc(0); }
  __device__ void add(Acc& a, T x, int64_t) const {
    if constexpr (kFloat || kViaDouble) {
      const Acc v = static_cast<Acc>(load(x));
      if constexpr (K == SumKind::kSumSquare || K == SumKind::kL2)
        a += v * v;
      else if constexpr (K == SumKind::kL1)
        a += fabs(v);
      else if constexpr (K == SumKind::kProd)
        a *= v;
      else
        a += v;
    } else {
      const uint64_t v = wrap64(x);
      if constexpr (K == SumKind::kSumSquare)
        a += v * v;
      else if constexpr (K == SumKind::kL1 && std::is_signed_v<T>)
        a += x < 0 ? 0 - v : v;
      else if constexpr (K == SumKind::kProd)
        a *= v;
      else
        a += v;
    }
  }
  __device__ void merge(Acc& a, const Acc& b) const {
    if constexpr (K == SumKind::kProd)
      a *= b;
    else
      a += b;
  }
  __device__ T finish(const Acc& a, int64_t count) const {
    if constexpr (kFloat) {
      if constexpr (K == SumKind::kMean) return store<T>(a / static_cast<Acc>(count));  // empty: NaN
      if constexpr (K == SumKind::kL2) return store<T>(sqrt(a));
      if constexpr (K == SumKind::kLogSum) return store<T>(log(a));
      return store<T>(a);
    } else if constexpr (kViaDouble) {
      return int_from_double<T>(K == SumKind::kL2 ? sqrt(a) : log(a));
    } else {
      if constexpr (K == SumKind::kMean && std::is_signed_v<T>)
        return count ? static_cast<T>(static_cast<int64_t>(a) / count) : T{0};
      if constexpr (K == SumKind::kMean) return count ? static_cast<T>(a / static_cast<uint64_t>(count)) : T{0};
      return static_cast<T>(a);  // modular
    }
  }
};

// Max / Min; 8-bit integers and bools accumulate in int (shuffles move 4-byte words).
template <class T, bool kMax>
struct ExtremeOp {
  using In = T;
  using Out = T;
  using C = Compute<T>;
  using Acc = std::conditional_t<(sizeof(T) < 4 && !ew::kIsHalfDev<T>), int32_t, C>;

  __device__ Acc init() const {
    if constexpr (std::is_same_v<T, Bool8>)
      return kMax ? 0 : 1;
    else if constexpr (std::is_floating_point_v<Acc>)
      return kMax ? -INFINITY : INFINITY;
    else
      return kMax ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
  }
  __device__ void merge(Acc& a, const Acc& v) const {
    if constexpr (std::is_same_v<T, Bool8>)
      a = kMax ? (a | v) : (a & v);
    else if ((kMax ? v > a : v < a) || is_nan(v))
      a = v;
  }
  __device__ void add(Acc& a, T x, int64_t) const { merge(a, static_cast<Acc>(load(x))); }
  __device__ T finish(const Acc& a, int64_t) const {
    if constexpr (std::is_same_v<T, Bool8>)
      return Bool8{static_cast<uint8_t>(a != 0)};
    else
      return store<T>(static_cast<C>(a));
  }
};

// LogSumExp: m = max of the finite elements seen, s = sum of exp(x - m) over them.
template <class F>
struct LseAcc {
  F m, s;
  int flags;  // 1: a +inf was seen, 2: a NaN was seen
  int pad;
};

template <class T>
struct LseOp {
  using In = T;
  using Out = T;
  using F = std::conditional_t<std::is_same_v<Compute<T>, float>, float, double>;  // double: float64, integers
  using Acc = LseAcc<F>;

  __device__ Acc init() const { return {-static_cast<F>(INFINITY), F(0), 0, 0}; }
  __device__ void add(Acc& a, T x, int64_t) const {
    const F v = static_cast<F>(load(x));
    if (v != v) {
      a.flags |= 2;
    } else if (v == static_cast<F>(INFINITY)) {
      a.flags |= 1;
    } else if (v > a.m) {  // also the first finite element: s = 0 * exp(-inf) + 1
      a.s = a.s * exp(a.m - v) + F(1);
      a.m = v;
    } else if (v != -static_cast<F>(INFINITY)) {
      a.s += exp(v - a.m);
    }
  }
  __device__ void merge(Acc& a, const Acc& b) const {
    a.flags |= b.flags;
    if (b.m > a.m) {
      a.s = a.s * exp(a.m - b.m) + b.s;
      a.m = b.m;
    } else if (b.m != -static_cast<F>(INFINITY)) {
      a.s += b.s * exp(b.m - a.m);
    }
  }
  __device__ T finish(const Acc& a, int64_t) const {
    F r;
    if (a.flags & 2)
      r = static_cast<F>(NAN);
    else if (a.flags & 1)
      r = static_cast<F>(INFINITY);
    else if (a.m == -static_cast<F>(INFINITY))
      r = -static_cast<F>(INFINITY);  // empty, or only -inf
    else
      r = a.m + log(a.s);
    if constexpr (kIsFloatDev<T>)
      return store<T>(r);
    else
      return int_from_double<T>(r);
  }
};

// Runs the op of `kind` on element type T, or throws for a type the op does not take.
template <class T>
void reduce_typed(OpKind kind, const RedShape& p, const void* x, void* y, GpuEnv& env, size_t* ws) {
  const char* name = ew::name_of(kind);
  if (kind == OpKind::kReduceMax) return run_reduction(p, x, y, ExtremeOp<T, true>{}, env, name, ws);
  if (kind == OpKind::kReduceMin) return run_reduction(p, x, y, ExtremeOp<T, false>{}, env, name, ws);
  if constexpr (sizeof(T) >= 2) {
    switch (kind) {
      case OpKind::kReduceSum: return run_reduction(p, x, y, SumOp<T, SumKind::kSum>{}, env, name, ws);
      case OpKind::kReduceSumSquare: return run_reduction(p, x, y, SumOp<T, SumKind::kSumSquare>{}, env, name, ws);
      case OpKind::kReduceL1: return run_reduction(p, x, y, SumOp<T, SumKind::kL1>{}, env, name, ws);
      case OpKind::kReduceMean: return run_reduction(p, x, y, SumOp<T, SumKind::kMean>{}, env, name, ws);
      case OpKind::kReduceProd: return run_reduction(p, x, y, SumOp<T, SumKind::kProd>{}, env, name, ws);
      case OpKind::kReduceL2: return run_reduction(p, x, y, SumOp<T, SumKind::kL2>{}, env, name, ws);
      case OpKind::kReduceLogSum: return run_reduction(p, x, y, SumOp<T, SumKind::kLogSum>{}, env, name, ws);
      case OpKind::kReduceLogSumExp: return run_reduction(p, x, y, LseOp<T>{}, env, name, ws);
      default: break;
    }
  }
  throw Error(std::string(name) + ": not a reduction the CUDA backend knows");
}

// Kernel and workspace query in one: ws non-null asks for the workspace size only.
void reduce_run(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                GpuEnv& env, size_t* ws) {
  const TensorView& x = in[0];
  const char* name = ew::name_of(kind);
  const TensorView* axes = nullptr;
  TensorView axes_host;
  if (in.size() > 1 && in[1].exists) {
    axes_host = in[1];
    axes_host.data = const_cast<void*>(env.host(1));
    if (!axes_host.data && axes_host.numel() > 0) {
      if (ws) {  // no plan without the axes: no split, which the kernel falls back to anyway
        *ws = 0;
        return;
      }
      throw Error(std::string(name) + ": the CUDA backend needs the axes input to be a constant");
    }
    axes = &axes_host;
  }
  const RedShape p = plan_reduction(x.shape, reduce_axes_mask(attrs_as<ReduceAttrs>(attrs), x, axes), name);
  const bool max_min = kind == OpKind::kReduceMax || kind == OpKind::kReduceMin;
  auto go = [&](auto tag) { reduce_typed<typename decltype(tag)::type>(kind, p, x.data, out[0].data, env, ws); };
  if (max_min && x.dtype == DataType::kInt8) return go(Tag<int8_t>{});
  if (max_min && x.dtype == DataType::kUInt8) return go(Tag<uint8_t>{});
  if (max_min && x.dtype == DataType::kBool) return go(Tag<Bool8>{});
  dispatch_reduce_types(x.dtype, name, go);
}

void reduce_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                   GpuEnv& env) {
  reduce_run(kind, attrs, in, out, env, nullptr);
}

size_t reduce_workspace(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                        std::span<const TensorView> out, GpuEnv& env) {
  size_t bytes = 0;
  reduce_run(kind, attrs, in, out, env, &bytes);
  return bytes;
}

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kReduceL1, reduce_kernel, reduce_workspace},
    {OpKind::kReduceL2, reduce_kernel, reduce_workspace},
    {OpKind::kReduceLogSum, reduce_kernel, reduce_workspace},
    {OpKind::kReduceLogSumExp, reduce_kernel, reduce_workspace},
    {OpKind::kReduceMax, reduce_kernel, reduce_workspace},
    {OpKind::kReduceMean, reduce_kernel, reduce_workspace},
    {OpKind::kReduceMin, reduce_kernel, reduce_workspace},
    {OpKind::kReduceProd, reduce_kernel, reduce_workspace},
    {OpKind::kReduceSum, reduce_kernel, reduce_workspace},
    {OpKind::kReduceSumSquare, reduce_kernel, reduce_workspace},
};

}  // namespace

std::span<const GpuKernelEntry> reduce_op_entries() { return kEntries; }

}  // namespace kiln::gpu::red

namespace kiln::gpu {

// The reduce family's table: the op groups of reduce.cu, arg.cu, softmax.cu, cumsum.cu, topk.cu
// and einsum.cu, joined once.
std::span<const GpuKernelEntry> reduce_gpu_kernels() {
  static const std::vector<GpuKernelEntry> entries = [] {
    std::vector<GpuKernelEntry> v;
    for (auto group : {red::reduce_op_entries(), red::arg_entries(), red::softmax_entries(), red::cumsum_entries(),
                       red::topk_entries(), red::einsum_entries()})
      v.insert(v.end(), group.begin(), group.end());
    return v;
  }();
  return entries;
}

}  // namespace kiln::gpu
