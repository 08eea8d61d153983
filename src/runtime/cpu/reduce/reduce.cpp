// CPU kernels of Reduce*, and the reduce family's kernel table (this file's entries and those of the
// other files in this folder).
//
// Reductions coalesce the input into alternating runs of kept and reduced dimensions (size-1 dims
// dropped), then take one of two loops:
//  - the innermost run is reduced: every output element reduces contiguous rows (dot-product-like);
//  - the innermost run is kept: every output row accumulates whole contiguous input rows into a
//    small block of accumulators (axpy-like), so the input is still read sequentially.
// Float types accumulate in double; integer sums and products wrap modulo 2^64 (then modulo the
// type's width), which is exactly the wrapping arithmetic of the element type.
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "core/infer/reduce_util.h"
#include "runtime/cpu/reduce/reduce_internal.h"

namespace kiln::cpu {

namespace {

using namespace reduce_detail;

struct ReducePlan {
  int64_t out_count = 1;
  int64_t red_count = 1;
  bool inner_reduced = false;
  int64_t inner = 1;                  // length of the innermost (contiguous) run
  std::vector<int64_t> kept_offsets;  // inner_reduced: one per output element, else one per output row
  std::vector<int64_t> red_offsets;   // offsets of the reduced runs that are not the innermost one
};

struct Run {
  int64_t size, stride;
};

// Input offsets of every index of `runs` in row-major order.
std::vector<int64_t> offsets_of(const std::vector<Run>& runs) {
  std::vector<int64_t> offs{0};
  for (const Run& r : runs) {
    std::vector<int64_t> next;
    next.reserve(offs.size() * static_cast<size_t>(r.size));
    for (int64_t o : offs)
      for (int64_t i = 0; i < r.size; ++i) next.push_back(o + i * r.stride);
    offs.swap(next);
  }
  return offs;
}

ReducePlan make_plan(std::span<const int64_t> shape, const std::vector<bool>& mask) {
  ReducePlan p;
  for (size_t i = 0; i < shape.size(); ++i) (mask[i] ? p.red_count : p.out_count) *= shape[i];
  if (p.out_count == 0 || p.red_count == 0) return p;
  std::vector<int64_t> strides = strides_of(shape);
  std::vector<Run> kept, red;
  bool last_reduced = false, any = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    std::vector<Run>& runs = mask[i] ? red : kept;
    if (any && last_reduced == mask[i]) {  // adjacent to the previous run of the same kind: merge
      runs.back().size *= shape[i];
      runs.back().stride = strides[i];
    } else {
      runs.push_back({shape[i], strides[i]});
    }
    last_reduced = mask[i];
    any = true;
  }
  if (!any) {
    p.kept_offsets = {0};
    p.red_offsets = {0};
    return p;
  }
  p.inner_reduced = last_reduced;
  std::vector<Run>& last = last_reduced ? red : kept;
  p.inner = last.back().size;
  last.pop_back();
  p.kept_offsets = offsets_of(kept);
  p.red_offsets = offsets_of(red);
  return p;
}

template <class T>
using WideInt = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
// Two's-complement widening: arithmetic mod 2^64 on these is arithmetic mod 2^bits on T.
template <class T>
uint64_t wrap(T x) {
  return static_cast<uint64_t>(static_cast<WideInt<T>>(x));
}

template <class T>
using SumAcc = std::conditional_t<kIsFloat<T>, double, uint64_t>;

template <class T>
T finish_sum(SumAcc<T> a) {
  if constexpr (kIsFloat<T>)
    return from_double<T>(a);
  else
    return static_cast<T>(a);  // modular (C++20)
}

template <class T>
struct SumOp {
  using Acc = SumAcc<T>;
  Acc init() const { return 0; }
  void add(Acc& a, T x, int64_t) const {
    if constexpr (kIsFloat<T>)
      a += to_double(x);
    else
      a += wrap(x);
  }
  T finish(Acc a, int64_t, int64_t) const { return finish_sum<T>(a); }
  void merge(Acc& a, Acc b) const { a += b; }
};

template <class T>
struct SumSquareOp : SumOp<T> {
  using Acc = SumAcc<T>;
  void add(Acc& a, T x, int64_t) const {
    if constexpr (kIsFloat<T>)
      a += to_double(x) * to_double(x);
    else
      a += wrap(x) * wrap(x);
  }
};

template <class T>
struct L1Op : SumOp<T> {
  using Acc = SumAcc<T>;
  void add(Acc& a, T x, int64_t) const {
    if constexpr (kIsFloat<T>)
      a += std::fabs(to_double(x));
    else if constexpr (std::is_signed_v<T>)
      a += x < 0 ? 0 - wrap(x) : wrap(x);
    else
      a += wrap(x);
  }
};

template <class T>
struct ProdOp : SumOp<T> {
  using Acc = SumAcc<T>;
  Acc init() const { return 1; }
  void add(Acc& a, T x, int64_t) const {
    if constexpr (kIsFloat<T>)
      a *= to_double(x);
    else
      a *= wrap(x);
  }
  void merge(Acc& a, Acc b) const { a *= b; }
};

template <class T>
struct MeanOp : SumOp<T> {
  using Acc = SumAcc<T>;
  T finish(Acc a, int64_t count, int64_t) const {
    if constexpr (kIsFloat<T>) {
      return from_double<T>(a / static_cast<double>(count));  // empty: 0 / 0 = NaN
    } else if constexpr (std::is_signed_v<T>) {
      return count ? static_cast<T>(static_cast<int64_t>(a) / count) : T{0};
    } else {
      return count ? static_cast<T>(a / static_cast<uint64_t>(count)) : T{0};
    }
  }
};

// L2, LogSum: a double sum, then a function of it.
template <class T, bool kSquare, double (*kFn)(double)>
struct DoubleSumOp {
  using Acc = double;
  Acc init() const { return 0.0; }
  void add(Acc& a, T x, int64_t) const {
    double v = to_double(x);
    a += kSquare ? v * v : v;
  }
  T finish(Acc a, int64_t, int64_t) const { return from_double<T>(kFn(a)); }
  void merge(Acc& a, Acc b) const { a += b; }
};
double sqrt_fn(double v) { return std::sqrt(v); }
double log_fn(double v) { return std::log(v); }

// Max / Min. NaN propagates for floats; empty sets give -inf/+inf (floats) or the type's
// lowest/highest (integers) or false/true (bool).
template <class T, bool kMax>
struct ExtremeOp {
  using Acc = ComputeType<T>;  // comparisons are exact in the element type
  Acc init() const {
    if constexpr (std::is_same_v<T, bool>)
      return !kMax;
    else if constexpr (kIsFloat<T>)
      return kMax ? -std::numeric_limits<Acc>::infinity() : std::numeric_limits<Acc>::infinity();
    else
      return kMax ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
  }
  void add(Acc& a, T x, int64_t) const {
    if constexpr (std::is_same_v<T, bool>) {
      a = kMax ? (a || x) : (a && x);
    } else if constexpr (kIsFloat<T>) {
      Acc v = static_cast<Acc>(x);
      a = ((kMax ? v > a : v < a) || v != v) ? v : a;
    } else {
      if (kMax ? x > a : x < a) a = x;
    }
  }
  T finish(Acc a, int64_t, int64_t) const {
    if constexpr (kIsFloat<T>)
      return from_double<T>(a);
    else
      return a;
  }
  void merge(Acc& a, Acc b) const {
    if constexpr (std::is_same_v<T, bool>)
      a = kMax ? (a || b) : (a && b);
    else if ((kMax ? b > a : b < a) || b != b)
      a = b;
  }
};

// ReduceLogSumExp, pass 1: the shift m = max of the finite elements (0 if none), so that
// exp(x - m) <= 1 for finite x and infinities keep their meaning in pass 2.
template <class T>
struct FiniteMaxOp {
  using Acc = double;
  Acc init() const { return -HUGE_VAL; }
  void add(Acc& a, T x, int64_t) const {
    double v = to_double(x);
    if (std::isinf(v)) return;
    if (v > a || v != v) a = v;
  }
  double finish(Acc a, int64_t, int64_t) const { return a == -HUGE_VAL ? 0.0 : a; }
  void merge(Acc& a, Acc b) const {
    if (b > a || b != b) a = b;
  }
};

// Pass 2: m + log(sum exp(x - m)).
template <class T>
struct ShiftedLseOp {
  using Acc = double;
  const double* shift;
  Acc init() const { return 0.0; }
  void add(Acc& a, T x, int64_t o) const {
    // exp of the (double) difference in the element's compute precision: float's expf is much
    // faster and its 1-ulp error is far below what the result can show.
    using E = std::conditional_t<std::is_same_v<ComputeType<T>, float>, float, double>;
    a += std::exp(static_cast<E>(to_double(x) - shift[o]));
  }
  T finish(Acc a, int64_t, int64_t o) const { return from_double<T>(shift[o] + std::log(a)); }
  void merge(Acc& a, Acc b) const { a += b; }
};

template <class T, class Op, class Out>
void run_reduce(const ReducePlan& p, const T* x, Out* y, const Op& op, KernelEnv& env) {
  using Acc = typename Op::Acc;
  if (p.out_count == 0) return;
  if (p.red_count == 0) {
    for (int64_t o = 0; o < p.out_count; ++o) y[o] = op.finish(op.init(), 0, o);
    return;
  }
  const int64_t n = p.inner;
  if (p.inner_reduced) {
    parallel_for(env, p.out_count, p.red_count, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        // Four independent accumulators: the adds pipeline instead of waiting on each other.
        Acc a = op.init(), a1 = op.init(), a2 = op.init(), a3 = op.init();
        const T* base = x + p.kept_offsets[o];
        for (int64_t r : p.red_offsets) {
          const T* q = base + r;
          int64_t j = 0;
          for (; j + 4 <= n; j += 4) {
            op.add(a, q[j], o);
            op.add(a1, q[j + 1], o);
            op.add(a2, q[j + 2], o);
            op.add(a3, q[j + 3], o);
          }
          for (; j < n; ++j) op.add(a, q[j], o);
        }
        op.merge(a, a1);
        op.merge(a2, a3);
        op.merge(a, a2);
        y[o] = op.finish(a, p.red_count, o);
      }
    });
    return;
  }
  constexpr int64_t kBlock = 256;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const int64_t rows = static_cast<int64_t>(p.kept_offsets.size());
  parallel_for(env, rows * blocks, p.red_count * kBlock, [&](int64_t b, int64_t e) {
    std::array<Acc, kBlock> acc;
    for (int64_t t = b; t < e; ++t) {
      int64_t row = t / blocks, c0 = (t % blocks) * kBlock, len = std::min(kBlock, n - c0);
      int64_t o0 = row * n + c0;
      for (int64_t j = 0; j < len; ++j) acc[j] = op.init();
      const T* base = x + p.kept_offsets[row] + c0;
      for (int64_t r : p.red_offsets) {
        const T* q = base + r;
        for (int64_t j = 0; j < len; ++j) op.add(acc[j], q[j], o0 + j);
      }
      for (int64_t j = 0; j < len; ++j) y[o0 + j] = op.finish(acc[j], p.red_count, o0 + j);
    }
  });
}

template <class T>
void reduce_typed(OpKind kind, const ReducePlan& p, const T* x, T* y, KernelEnv& env) {
  if (kind == OpKind::kReduceMax) return run_reduce(p, x, y, ExtremeOp<T, true>{}, env);
  if (kind == OpKind::kReduceMin) return run_reduce(p, x, y, ExtremeOp<T, false>{}, env);
  if constexpr (!std::is_same_v<T, bool> && !std::is_same_v<T, int8_t> && !std::is_same_v<T, uint8_t>) {
    if (kind == OpKind::kReduceSum) return run_reduce(p, x, y, SumOp<T>{}, env);
    if (kind == OpKind::kReduceSumSquare) return run_reduce(p, x, y, SumSquareOp<T>{}, env);
    if (kind == OpKind::kReduceL1) return run_reduce(p, x, y, L1Op<T>{}, env);
    if (kind == OpKind::kReduceL2) return run_reduce(p, x, y, DoubleSumOp<T, true, sqrt_fn>{}, env);
    if (kind == OpKind::kReduceLogSum) return run_reduce(p, x, y, DoubleSumOp<T, false, log_fn>{}, env);
    if (kind == OpKind::kReduceMean) return run_reduce(p, x, y, MeanOp<T>{}, env);
    if (kind == OpKind::kReduceProd) return run_reduce(p, x, y, ProdOp<T>{}, env);
    if (kind == OpKind::kReduceLogSumExp) {
      std::vector<double> shift(static_cast<size_t>(p.out_count));
      run_reduce(p, x, shift.data(), FiniteMaxOp<T>{}, env);
      return run_reduce(p, x, y, ShiftedLseOp<T>{shift.data()}, env);
    }
  }
  throw Error(std::string(op_name(kind)) + ": unsupported element type in the CPU kernel");
}

void reduce_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs,
                   std::span<const TensorView> outputs, KernelEnv& env) {
  const TensorView& x = inputs[0];
  const TensorView* axes = inputs.size() > 1 && inputs[1].exists ? &inputs[1] : nullptr;
  ReducePlan plan = make_plan(x.shape, reduce_axes_mask(attrs_as<ReduceAttrs>(attrs), x, axes));
  auto go = [&](auto tag) {
    using T = typename decltype(tag)::type;
    reduce_typed<T>(kind, plan, x.as<const T>(), outputs[0].as<T>(), env);
  };
  switch (x.dtype) {
    case DataType::kFloat32: return go(Tag<float>{});
    case DataType::kFloat64: return go(Tag<double>{});
    case DataType::kFloat16: return go(Tag<Half>{});
    case DataType::kBFloat16: return go(Tag<BFloat16>{});
    case DataType::kInt32: return go(Tag<int32_t>{});
    case DataType::kUInt32: return go(Tag<uint32_t>{});
    case DataType::kInt64: return go(Tag<int64_t>{});
    case DataType::kUInt64: return go(Tag<uint64_t>{});
    case DataType::kInt8: return go(Tag<int8_t>{});
    case DataType::kUInt8: return go(Tag<uint8_t>{});
    case DataType::kBool: return go(Tag<bool>{});
    case DataType::kInt16:
    case DataType::kUInt16: break;
  }
  throw_unsupported_dtype(x.dtype, op_name(kind).data());
}

constexpr KernelEntry kKernels[] = {
    {OpKind::kReduceL1, reduce_kernel},
    {OpKind::kReduceL2, reduce_kernel},
    {OpKind::kReduceLogSum, reduce_kernel},
    {OpKind::kReduceLogSumExp, reduce_kernel},
    {OpKind::kReduceMax, reduce_kernel},
    {OpKind::kReduceMean, reduce_kernel},
    {OpKind::kReduceMin, reduce_kernel},
    {OpKind::kReduceProd, reduce_kernel},
    {OpKind::kReduceSum, reduce_kernel},
    {OpKind::kReduceSumSquare, reduce_kernel},
};

}  // namespace

std::span<const KernelEntry> reduce_kernels() {
  static const std::vector<KernelEntry> all = [] {
    std::vector<KernelEntry> v(std::begin(kKernels), std::end(kKernels));
    for (auto part : {reduce_detail::arg_kernel_entries(), reduce_detail::softmax_kernel_entries(),
                      reduce_detail::cumsum_kernel_entries(), reduce_detail::topk_kernel_entries(),
                      reduce_detail::einsum_kernel_entries()})
      v.insert(v.end(), part.begin(), part.end());
    return v;
  }();
  return all;
}

}  // namespace kiln::cpu
