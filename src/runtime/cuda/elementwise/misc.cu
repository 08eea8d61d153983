// Cast, CastLike, Clip, Identity and Dropout (inference form) on the GPU. Conversion rules are the
// CPU kernels' (runtime/cpu/elementwise/misc.cpp):
//   bool -> T: 0 or 1.   T -> bool: x != 0 (NaN is true).
//   float -> int: truncate toward zero, saturate at the type's range, NaN -> 0.
//   int -> int: wrap modulo 2^bits.   -> float16: through float (int64 -> float16 may round
//   twice, as on the CPU), overflow gives +-inf.
#include <limits>

#include "runtime/cuda/elementwise/elementwise_internal.cuh"

namespace kiln::gpu::ew {

namespace {

// ---- Cast --------------------------------------------------------------------------------------
// From/To are device storage types; the functor maps From's compute type to To's.
template <class From, class To>
struct CastOp : NoInit {
  using CF = Compute<From>;
  using CT = Compute<To>;
  __device__ CT operator()(CF x) const {
    if constexpr (std::is_same_v<To, Bool8>)
      return x != CF(0);
    else if constexpr (std::is_same_v<From, Bool8>)
      return static_cast<CT>(x ? 1 : 0);
    else if constexpr (std::is_floating_point_v<CF> && std::is_integral_v<CT>)
      return sat_float_to_int<CT>(x);
    else
      return static_cast<CT>(x);
  }
};

void copy_bytes(const TensorView& in, const TensorView& out, GpuEnv& env, const char* op) {
  if (out.data != in.data && in.bytes() > 0)
    check_cuda(cudaMemcpyAsync(out.data, in.data, in.bytes(), cudaMemcpyDeviceToDevice, env.stream), op);
}

void cast_kernel(OpKind kind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                 GpuEnv& env) {
  const char* name = name_of(kind);
  if (in[0].dtype == out[0].dtype) return copy_bytes(in[0], out[0], env, name);
  dispatch_ew_all(in[0].dtype, name, [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    dispatch_ew_all(out[0].dtype, name, [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      if constexpr (!std::is_same_v<From, To>) launch_unary<From, To>(in[0], out[0], env, CastOp<From, To>{}, name);
    });
  });
}

// ---- Clip --------------------------------------------------------------------------------------
// max(x, lo) then min(., hi): with lo > hi every element becomes hi (numpy/ONNX); NaN passes. The
// optional bounds are one-element device tensors, read by every thread once (init), since a GPU
// kernel may not read device data on the host.
template <class T>
struct ClipOp {
  using C = Compute<T>;
  const T* lo_p;
  const T* hi_p;
  C lo, hi;
  __device__ void init() {
    if constexpr (std::is_floating_point_v<C>) {
      lo = lo_p ? load(*lo_p) : -INFINITY;
      hi = hi_p ? load(*hi_p) : INFINITY;
    } else {
      lo = lo_p ? load(*lo_p) : std::numeric_limits<C>::lowest();
      hi = hi_p ? load(*hi_p) : std::numeric_limits<C>::max();
    }
  }
  __device__ C operator()(C v) const {
    v = v < lo ? lo : v;
    return v > hi ? hi : v;
  }
};

void clip_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, GpuEnv& env) {
  dispatch_ew_numeric(in[0].dtype, "Clip", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ClipOp<T> f{};
    if (in.size() > 1 && in[1].exists && in[1].numel() == 1) f.lo_p = static_cast<const T*>(in[1].data);
    if (in.size() > 2 && in[2].exists && in[2].numel() == 1) f.hi_p = static_cast<const T*>(in[2].data);
    launch_unary<T, T>(in[0], out[0], env, f, "Clip");
  });
}

// ---- Identity, Dropout -------------------------------------------------------------------------
void identity_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                     GpuEnv& env) {
  copy_bytes(in[0], out[0], env, "Identity");
}

// Sets kGpuBadValue where training_mode is true and the ratio is not +-0 (or absent: 0.5). The
// ratio's zero test is on its bits, whatever its float type (`bytes` of 2, 4 or 8).
__global__ void dropout_check(const uint8_t* training, const void* ratio, int bytes, int* error) {
  if (!*training) return;
  bool zero = false;
  if (ratio) {
    if (bytes == 2) zero = (*static_cast<const uint16_t*>(ratio) & 0x7fffu) == 0;
    if (bytes == 4) zero = (*static_cast<const uint32_t*>(ratio) & 0x7fffffffu) == 0;
    if (bytes == 8) zero = (*static_cast<const uint64_t*>(ratio) & 0x7fffffffffffffffull) == 0;
  }
  if (!zero && error) atomicCAS(error, 0, static_cast<int>(kGpuBadValue));
}

// Inference Dropout, and training-mode Dropout with ratio 0, are the identity with an all-true
// mask. Shape inference rejects a constant true training_mode with another constant ratio when
// the engine is built; inputs known only at run time are checked on the device (kGpuBadValue,
// reported by Context::check), as the CPU kernel throws for them.
void dropout_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                    GpuEnv& env) {
  const bool has_training = in.size() > 2 && in[2].exists;
  const bool has_ratio = in.size() > 1 && in[1].exists;
  auto host_ratio_zero = [&] {
    TensorView r = in[1];
    r.data = const_cast<void*>(env.host(1));
    return r.to_double()[0] == 0.0;
  };
  if (has_training && !(env.host(2) && *static_cast<const uint8_t*>(env.host(2)) == 0) &&
      !(has_ratio && env.host(1) && host_ratio_zero())) {
    dropout_check<<<1, 1, 0, env.stream>>>(static_cast<const uint8_t*>(in[2].data), has_ratio ? in[1].data : nullptr,
                                           has_ratio ? static_cast<int>(dtype_size(in[1].dtype)) : 0, env.error);
    check_cuda(cudaGetLastError(), "Dropout: training_mode check");
  }
  copy_bytes(in[0], out[0], env, "Dropout");
  if (out.size() > 1 && out[1].data && out[1].numel() > 0)
    check_cuda(cudaMemsetAsync(out[1].data, 1, static_cast<size_t>(out[1].numel()), env.stream), "Dropout mask");
}

constexpr GpuKernelEntry kEntries[] = {
    {OpKind::kCast, cast_kernel},       {OpKind::kCastLike, cast_kernel},     {OpKind::kClip, clip_kernel},
    {OpKind::kDropout, dropout_kernel}, {OpKind::kIdentity, identity_kernel},
};

}  // namespace

std::span<const GpuKernelEntry> misc_gpu_entries() { return kEntries; }

}  // namespace kiln::gpu::ew
