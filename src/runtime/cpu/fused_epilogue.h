// The epilogue of the internal fused ops on the CPU: FusedConv (conv/conv.cpp), FusedGemm and
// FusedMatMul (gemm/gemm.cpp) run their product with the Conv, Gemm and MatMul kernels (the
// product's bias included where the op has one), then one pass over the output applies the
// epilogue (core/epilogue.h) in place: FusedMatMul's per-column bias, the activation, the residual
// Z and the second activation. The pass computes in float (double for float64) and rounds once on
// the store.
#pragma once

#include <cstdint>
#include <span>

#include "core/epilogue.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/onednn.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln::cpu::fused {

inline constexpr int64_t kParallelMin = int64_t{1} << 15;  // below this, waking the workers costs more than it saves

// A float32 GELU epilogue without a residual (a transformer's FFN): the bias added row by row, then
// oneDNN's vectorized GELU (runtime/cpu/onednn.h) where Kiln has it. False otherwise.
inline bool gelu_in_library(const EpilogueAttrs& e, const TensorView& Y, const TensorView* Z, int64_t columns,
                            const TensorView* bias, KernelEnv& env) {
  if (Y.dtype != DataType::kFloat32 || Z || e.activation2 != Activation::kNone ||
      (e.activation != Activation::kGelu && e.activation != Activation::kGeluTanh) || !onednn::available())
    return false;
  float* y = Y.as<float>();
  const int64_t n = Y.numel();
  if (bias) {
    const float* b = bias->as<const float>();
    auto rows = [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = 0; c < columns; ++c) y[r * columns + c] += b[c];
    };
    if (env.pool && env.pool->team() > 1 && n >= kParallelMin)
      env.pool->parallel_for(n / columns, rows);
    else
      rows(0, n / columns);
  }
  if (onednn::gelu_inplace(e.activation, y, n, env)) return true;
  if (!bias) return false;
  for (int64_t i = 0; i < n; ++i) y[i] = epilogue::apply<float>(e, y[i], 0.0f, 0.0f, false);  // the library declined
  return true;
}

// Y = activation2(activation(Y + bias[i % columns]) + Z), in place; bias and Z may be null.
inline void apply_epilogue(const EpilogueAttrs& e, const TensorView& Y, const TensorView* bias, const TensorView* Z,
                           KernelEnv& env) {
  const int64_t n = Y.numel();
  if (n == 0) return;
  const int64_t columns = bias ? bias->numel() : 1;
  if (gelu_in_library(e, Y, Z, columns, bias, env)) return;
  dispatch_float(Y.dtype, "fused epilogue", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = ComputeType<T>;
    T* y = Y.as<T>();
    const T* b = bias ? bias->as<const T>() : nullptr;
    const T* z = Z ? Z->as<const T>() : nullptr;
    auto run = [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const C bv = b ? static_cast<C>(b[i % columns]) : C(0);
        const C zv = z ? static_cast<C>(z[i]) : C(0);
        y[i] = T(epilogue::apply<C>(e, static_cast<C>(y[i]), bv, zv, z != nullptr));
      }
    };
    if (env.pool && env.pool->team() > 1 && n >= kParallelMin)
      env.pool->parallel_for(n, run);
    else
      run(0, n);
  });
}

inline const TensorView* optional_input(std::span<const TensorView> in, size_t i) {
  return in.size() > i && in[i].exists ? &in[i] : nullptr;
}

}  // namespace kiln::cpu::fused
