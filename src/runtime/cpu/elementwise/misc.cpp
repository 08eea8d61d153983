// Cast, CastLike, Clip, Identity and Dropout (inference form).
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "runtime/cpu/elementwise/elementwise_internal.h"

namespace kiln::cpu::ew {

namespace {

// ---- Cast ------------------------------------------------------------------------------------
// Conversion rules (ONNX leaves out-of-range float->int undefined; we pick defined ones):
//   bool -> T: 0 or 1.   T -> bool: x != 0 (NaN is true, as in numpy and C).
//   float -> int: truncate toward zero, saturate at the type's range, NaN -> 0.
//   int -> int: wrap modulo 2^bits (numpy's astype).   -> float: nearest (via float for the
//   half types, so double->float16 may round twice), overflow gives +-inf.
template <class To, bool kFromBool, class X>
inline ComputeType<To> convert(X x) {
  using CT = ComputeType<To>;
  if constexpr (kFromBool)
    return static_cast<CT>(x != 0 ? 1 : 0);
  else if constexpr (std::is_same_v<To, bool>)
    return x != X(0);
  else if constexpr (std::is_floating_point_v<X> && std::is_integral_v<CT>)
    return sat_float_to_int<CT>(x);
  else
    return static_cast<CT>(x);
}

void cast_kernel(OpKind kind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                 KernelEnv& env) {
  const DataType from = in[0].dtype, to = out[0].dtype;
  if (from == to) {
    if (out[0].data != in[0].data && out[0].bytes() > 0) std::memcpy(out[0].data, in[0].data, out[0].bytes());
    return;
  }
  const char* name = op_name(kind).data();
  dispatch_all(from, name, [&](auto ft) {
    using FT = typename decltype(ft)::type;
    dispatch_all(to, name, [&](auto tt) {
      using TT = typename decltype(tt)::type;
      run_unary<Storage<FT>, TT>(in[0], out[0], env, [](auto x) { return convert<TT, std::is_same_v<FT, bool>>(x); });
    });
  });
}

// ---- Clip ------------------------------------------------------------------------------------
// max(x, lo) then min(., hi): with lo > hi every element becomes hi (numpy/ONNX); NaN passes.
void clip_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                 KernelEnv& env) {
  dispatch_numeric(in[0].dtype, "Clip", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = ComputeType<T>;
    C lo =
        std::numeric_limits<C>::has_infinity ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::lowest();
    C hi = std::numeric_limits<C>::has_infinity ? std::numeric_limits<C>::infinity() : std::numeric_limits<C>::max();
    if (in.size() > 1 && in[1].exists && in[1].numel() == 1) lo = load(in[1].as<const T>()[0]);
    if (in.size() > 2 && in[2].exists && in[2].numel() == 1) hi = load(in[2].as<const T>()[0]);
    run_unary<T, T>(in[0], out[0], env, [lo, hi](C v) {
      v = v < lo ? lo : v;
      return v > hi ? hi : v;
    });
  });
}

// ---- Identity, Dropout -----------------------------------------------------------------------
void copy_input(const TensorView& in, const TensorView& out) {
  if (out.data != in.data && in.bytes() > 0) std::memmove(out.data, in.data, in.bytes());
}

void identity_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                     KernelEnv&) {
  copy_input(in[0], out[0]);
}

// Training mode with ratio 0 drops nothing; with another ratio it would draw a random mask.
void dropout_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, KernelEnv&) {
  const bool training = in.size() > 2 && in[2].exists && in[2].data && *in[2].as<const uint8_t>() != 0;
  const bool zero_ratio = in.size() > 1 && in[1].exists && in[1].data && in[1].to_double()[0] == 0.0;
  if (training && !zero_ratio)
    throw Error(
        "Dropout: training-mode Dropout with a ratio other than 0 draws a random mask, which an inference "
        "engine does not do; export the model in eval mode");
  copy_input(in[0], out[0]);
  if (out.size() > 1 && out[1].data) std::memset(out[1].data, 1, static_cast<size_t>(out[1].numel()));
}

constexpr KernelEntry kEntries[] = {
    {OpKind::kCast, cast_kernel},
    {OpKind::kCastLike, cast_kernel},
    {OpKind::kClip, clip_kernel},
    {OpKind::kDropout, dropout_kernel},
    {OpKind::kIdentity, identity_kernel},
};

}  // namespace

std::span<const KernelEntry> misc_kernel_entries() { return kEntries; }

}  // namespace kiln::cpu::ew
