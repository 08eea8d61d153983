// Broadcasting binary and variadic CUDA kernels: Add Sub Mul Div Mod(fmod) PRelu Pow, Max Min Sum
// Mean (variadic), comparisons, And Or Xor, and Where. Formulas mirror the CPU kernels
// (runtime/cpu/ops/elementwise_binary.cpp). Integer Div and Mod are left to the CPU: their
// division-by-zero check reads the divisor on the host.
#include <cmath>

#include "runtime/cuda/elementwise_internal.cuh"

namespace kiln::gpu::ew {

namespace {

// Integer add/sub/mul wrap modulo 2^bits (through the unsigned type: no signed-overflow UB).
template <class C>
__device__ __forceinline__ C wrap(std::make_unsigned_t<C> v) {
  return static_cast<C>(v);
}
template <class C>
using U = std::make_unsigned_t<C>;

template <OpKind K>
struct BinOp;

template <>
struct BinOp<OpKind::kAdd> : NoInit {
  explicit BinOp(const Attrs&) {}
  template <class C>
  __device__ C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>)
      return wrap<C>(static_cast<U<C>>(a) + static_cast<U<C>>(b));
    else
      return a + b;
  }
};
template <>
struct BinOp<OpKind::kSub> : NoInit {
  explicit BinOp(const Attrs&) {}
  template <class C>
  __device__ C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>)
      return wrap<C>(static_cast<U<C>>(a) - static_cast<U<C>>(b));
    else
      return a - b;
  }
};
template <>
struct BinOp<OpKind::kMul> : NoInit {
  explicit BinOp(const Attrs&) {}
  template <class C>
  __device__ C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>)
      return wrap<C>(static_cast<U<C>>(a) * static_cast<U<C>>(b));
    else
      return a * b;
  }
};
template <>
struct BinOp<OpKind::kDiv> : NoInit {
  explicit BinOp(const Attrs&) {}
  __device__ float operator()(float a, float b) const { return a / b; }  // IEEE division (no fast math)
};
// Floats require fmod = 1 (inference checks): C's fmod, the sign of the dividend.
template <>
struct BinOp<OpKind::kMod> : NoInit {
  explicit BinOp(const Attrs&) {}
  __device__ float operator()(float a, float b) const { return fmodf(a, b); }
};
template <>
struct BinOp<OpKind::kPRelu> : NoInit {
  explicit BinOp(const Attrs&) {}
  __device__ float operator()(float x, float slope) const { return x < 0.0f ? x * slope : x; }
};
// Max/Min propagate NaN like np.maximum/np.minimum (and the CPU kernels).
template <>
struct BinOp<OpKind::kMax> : NoInit {
  explicit BinOp(const Attrs&) {}
  template <class C>
  __device__ C operator()(C a, C b) const {
    if constexpr (!std::is_integral_v<C>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return a < b ? b : a;
  }
};
template <>
struct BinOp<OpKind::kMin> : NoInit {
  explicit BinOp(const Attrs&) {}
  template <class C>
  __device__ C operator()(C a, C b) const {
    if constexpr (!std::is_integral_v<C>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return b < a ? b : a;
  }
};
template <>
struct BinOp<OpKind::kSum> : BinOp<OpKind::kAdd> {
  using BinOp<OpKind::kAdd>::BinOp;
};
template <>
struct BinOp<OpKind::kMean> : BinOp<OpKind::kAdd> {
  using BinOp<OpKind::kAdd>::BinOp;
};

#define KILN_GPU_COMPARE(KIND, EXPR)             \
  template <>                                    \
  struct BinOp<OpKind::KIND> : NoInit {          \
    explicit BinOp(const Attrs&) {}              \
    template <class C>                           \
    __device__ bool operator()(C a, C b) const { \
      return EXPR;                               \
    }                                            \
  };
KILN_GPU_COMPARE(kEqual, a == b)
KILN_GPU_COMPARE(kGreater, a > b)
KILN_GPU_COMPARE(kGreaterOrEqual, a >= b)
KILN_GPU_COMPARE(kLess, a < b)
KILN_GPU_COMPARE(kLessOrEqual, a <= b)
KILN_GPU_COMPARE(kAnd, a&& b)  // C is bool here (Bool8 loads as bool)
KILN_GPU_COMPARE(kOr, a || b)
KILN_GPU_COMPARE(kXor, a != b)
#undef KILN_GPU_COMPARE

// Which element types each arithmetic op takes on the GPU.
template <OpKind K>
inline constexpr bool kIntegerToo =
    K == OpKind::kAdd || K == OpKind::kSub || K == OpKind::kMul || K == OpKind::kMax || K == OpKind::kMin;

// Add, Sub, Mul, Div, Mod, PRelu: same dtype in and out.
template <OpKind K>
void arith_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                  GpuEnv& env) {
  const BinOp<K> f(attrs);
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_binary<T, T, T>(in[0], in[1], out[0], env, f, name_of(K));
  };
  if constexpr (kIntegerToo<K>)
    dispatch_ew_numeric(in[0].dtype, name_of(K), run);
  else
    dispatch_ew_float(in[0].dtype, name_of(K), run);
}

template <OpKind K>
void compare_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                    GpuEnv& env) {
  const BinOp<K> f(attrs);
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_binary<T, T, Bool8>(in[0], in[1], out[0], env, f, name_of(K));
  };
  if constexpr (K == OpKind::kEqual)
    dispatch_ew_all(in[0].dtype, name_of(K), run);  // bools compare as bools
  else
    dispatch_ew_numeric(in[0].dtype, name_of(K), run);
}

template <OpKind K>
void logic_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                  GpuEnv& env) {
  launch_binary<Bool8, Bool8, Bool8>(in[0], in[1], out[0], env, BinOp<K>(attrs), name_of(K));
}

// out / n for Mean, in place.
struct DivideBy : NoInit {
  float n;
  __device__ float operator()(float x) const { return x / n; }
};

// Max, Min, Sum, Mean: folded pairwise into the output (out = f(in0, in1), then out = f(out,
// in_k)) exactly as the CPU does, so float16 rounds at the same steps; the output is contiguous
// with the final shape, so the in-place fold is element-aligned. Mean divides at the end.
template <OpKind K>
void variadic_kernel(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                     GpuEnv& env) {
  const BinOp<K> f(attrs);
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (in.size() == 1) {
      if (out[0].data != in[0].data && out[0].bytes() > 0)
        check_cuda(cudaMemcpyAsync(out[0].data, in[0].data, out[0].bytes(), cudaMemcpyDeviceToDevice, env.stream),
                   name_of(K));
    } else {
      launch_binary<T, T, T>(in[0], in[1], out[0], env, f, name_of(K));
      for (size_t k = 2; k < in.size(); ++k) launch_binary<T, T, T>(out[0], in[k], out[0], env, f, name_of(K));
    }
    if constexpr (K == OpKind::kMean && !std::is_integral_v<T>)
      launch_unary<T, T>(out[0], out[0], env, DivideBy{{}, static_cast<float>(in.size())}, name_of(K));
  };
  if constexpr (kIntegerToo<K>)
    dispatch_ew_numeric(in[0].dtype, name_of(K), run);
  else
    dispatch_ew_float(in[0].dtype, name_of(K), run);
}

// ---- Pow ---------------------------------------------------------------------------------------
// Float base, exponent of any GPU numeric type. The CPU computes pow in double and rounds to
// float; powf is within a few float ulps of that. x^2 is x*x exactly as the CPU's double
// pow rounds it, and x^0.5 the CPU's sqrt shortcut. Integer exponents beyond 2^24 (not exact as
// float) go through double pow so that their parity, which decides the sign for a negative base,
// survives.
struct PowOp : NoInit {
  template <class E>
  __device__ float operator()(float a, E e) const {
    if constexpr (std::is_integral_v<E>) {
      if (e > (E(1) << 24) || e < -(E(1) << 24))
        return static_cast<float>(pow(static_cast<double>(a), static_cast<double>(e)));
    }
    const float b = static_cast<float>(e);
    if (b == 2.0f) return a * a;
    if (b == 0.5f) return sqrtf(a);
    return powf(a, b);
  }
};

void pow_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, GpuEnv& env) {
  dispatch_ew_float(in[0].dtype, "Pow", [&](auto base_tag) {
    using T = typename decltype(base_tag)::type;
    dispatch_ew_numeric(in[1].dtype, "Pow exponent", [&](auto exp_tag) {
      using E = typename decltype(exp_tag)::type;
      launch_binary<T, E, T>(in[0], in[1], out[0], env, PowOp{}, "Pow");
    });
  });
}

// ---- Where -------------------------------------------------------------------------------------
template <class T>
void launch_where(std::span<const TensorView> in, const TensorView& out, GpuEnv& env) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const Plan<3> p = make_plan<3>(out.shape, {in[0].shape, in[1].shape, in[2].shape}, "Where");
  const auto* c = static_cast<const Bool8*>(in[0].data);
  const auto* x = static_cast<const T*>(in[1].data);
  const auto* y = static_cast<const T*>(in[2].data);
  auto* o = static_cast<T*>(out.data);
  if (p.flat()) {
    where_flat_kernel<T>
        <<<blocks_for(n), kThreads, 0, env.stream>>>(c, x, y, o, n, p.stride[0][0], p.stride[1][0], p.stride[2][0]);
  } else if (n < (int64_t{1} << 31)) {
    where_strided_kernel<uint32_t, T>
        <<<blocks_for(n), kThreads, 0, env.stream>>>(c, x, y, o, static_cast<uint32_t>(n), p);
  } else {
    where_strided_kernel<uint64_t, T>
        <<<blocks_for(n), kThreads, 0, env.stream>>>(c, x, y, o, static_cast<uint64_t>(n), p);
  }
  check_launch("Where");
}

// Any element type: Where moves x's or y's bytes.
void where_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, GpuEnv& env) {
  switch (dtype_size(out[0].dtype)) {
    case 1: return launch_where<uint8_t>(in, out[0], env);
    case 2: return launch_where<uint16_t>(in, out[0], env);
    case 4: return launch_where<uint32_t>(in, out[0], env);
    case 8: return launch_where<uint64_t>(in, out[0], env);
  }
  throw_gpu_dtype(out[0].dtype, "Where");
}

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kAdd, arith_kernel<OpKind::kAdd>},
    {OpKind::kAnd, logic_kernel<OpKind::kAnd>},
    {OpKind::kDiv, arith_kernel<OpKind::kDiv>},
    {OpKind::kEqual, compare_kernel<OpKind::kEqual>},
    {OpKind::kGreater, compare_kernel<OpKind::kGreater>},
    {OpKind::kGreaterOrEqual, compare_kernel<OpKind::kGreaterOrEqual>},
    {OpKind::kLess, compare_kernel<OpKind::kLess>},
    {OpKind::kLessOrEqual, compare_kernel<OpKind::kLessOrEqual>},
    {OpKind::kMax, variadic_kernel<OpKind::kMax>},
    {OpKind::kMean, variadic_kernel<OpKind::kMean>},
    {OpKind::kMin, variadic_kernel<OpKind::kMin>},
    {OpKind::kMod, arith_kernel<OpKind::kMod>},
    {OpKind::kMul, arith_kernel<OpKind::kMul>},
    {OpKind::kOr, logic_kernel<OpKind::kOr>},
    {OpKind::kPRelu, arith_kernel<OpKind::kPRelu>},
    {OpKind::kPow, pow_kernel},
    {OpKind::kSub, arith_kernel<OpKind::kSub>},
    {OpKind::kSum, variadic_kernel<OpKind::kSum>},
    {OpKind::kWhere, where_kernel},
    {OpKind::kXor, logic_kernel<OpKind::kXor>},
};

}  // namespace

std::span<const GpuKernelEntry> binary_gpu_entries() { return kEntries; }

}  // namespace kiln::gpu::ew
