// CPU kernels of the internal fused ops: FusedConv, FusedGemm and FusedMatMul run their product
// with the Conv, Gemm and MatMul kernels (the product's bias included where the op has one), then
// one pass over the output applies the epilogue (core/epilogue.h) in place: FusedMatMul's
// per-column bias, the activation, the residual Z and the second activation. The pass computes in
// float (double for float64) and rounds once on the store.
#include <algorithm>

#include "core/epilogue.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln::cpu::nn {

void conv_compute(bool transpose, const ConvAttrs& a, std::span<const TensorView> in, std::span<const TensorView> out,
                  KernelEnv& env);
void gemm_compute(const GemmAttrs& a, std::span<const TensorView> in, std::span<const TensorView> out, KernelEnv& env);
void matmul_kernel(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out,
                   KernelEnv& env);

namespace {

constexpr int64_t kParallelMin = int64_t{1} << 15;  // below this, waking the workers costs more than it saves

// Y = activation2(activation(Y + bias[i % columns]) + Z), in place; bias and Z may be null.
void apply_epilogue(const EpilogueAttrs& e, const TensorView& Y, const TensorView* bias, const TensorView* Z,
                    KernelEnv& env) {
  const int64_t n = Y.numel();
  if (n == 0) return;
  const int64_t columns = bias ? bias->numel() : 1;
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
    if (env.pool && env.pool->size() > 1 && n >= kParallelMin)
      env.pool->parallel_for(n, run);
    else
      run(0, n);
  });
}

const TensorView* optional_input(std::span<const TensorView> in, size_t i) {
  return in.size() > i && in[i].exists ? &in[i] : nullptr;
}

}  // namespace

void fused_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                  KernelEnv& env) {
  const std::span<const TensorView> product_in = in.first(std::min<size_t>(in.size(), 3));
  const TensorView* z = optional_input(in, 3);
  switch (kind) {
    case OpKind::kFusedConv: {
      const auto& a = std::get<FusedConvAttrs>(attrs);
      conv_compute(false, a, product_in, out, env);
      return apply_epilogue(a, out[0], nullptr, z, env);
    }
    case OpKind::kFusedGemm: {
      const auto& a = std::get<FusedGemmAttrs>(attrs);
      gemm_compute(a, product_in, out, env);  // float16 weights under a float32 product included
      return apply_epilogue(a, out[0], nullptr, z, env);
    }
    case OpKind::kFusedMatMul:
      matmul_kernel(OpKind::kMatMul, NoAttrs{}, in.first(2), out, env);
      return apply_epilogue(std::get<EpilogueAttrs>(attrs), out[0], optional_input(in, 2), z, env);
    default: throw Error(std::string(op_name(kind)) + " is not a fused op");
  }
}

}  // namespace kiln::cpu::nn
