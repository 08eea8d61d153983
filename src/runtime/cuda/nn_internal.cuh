// Shared pieces of the conv and gemm families' CUDA kernels (conv/, gemm/; the quant family's
// NhwcQConv and integer products use a few): the own kernels of conv/conv_kernels.cu,
// gemm/gemm_kernels.cu, gemm/gemv.cu and nn_epilogue.cu, the fused epilogue through cuBLASLt
// (gemm/gemm.cu), pointer alignment, and the per-step state lookup.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/attention.h"
#include "runtime/cuda/gpu_kernels.h"
#include "runtime/cuda/nn_gemm.h"

namespace kiln::gpu::nn {

// Conv / ConvTranspose geometry for the direct kernels (conv/conv_kernels.cu): one thread per output
// element, no workspace, any alignment and any number of spatial axes up to kMaxDirectRank. The
// fallback where cuDNN cannot run: pointers below 16-byte alignment, more than 3 spatial axes, or
// tensors beyond cuDNN's 32-bit sizes.
inline constexpr int kMaxDirectRank = 8;
struct DirectConv {
  bool transpose = false;
  int rank = 0;
  int64_t batch = 0, C = 0, M = 0, G = 1;  // X [batch, C, in...], Y [batch, M, out...]
  int64_t in[kMaxDirectRank] = {}, out[kMaxDirectRank] = {}, kernel[kMaxDirectRank] = {};
  int64_t strides[kMaxDirectRank] = {}, dilations[kMaxDirectRank] = {}, pads[kMaxDirectRank] = {};  // pads: begin
  // Channels-last Conv (not ConvTranspose): X [batch, in..., C], W [M, kernel..., C/G], Y [batch, out..., M].
  bool channels_last = false;
  // Channels last with X channels-first ([batch, C, in...]) of this many bytes per element (4:
  // float32, 2: the conv's float16), converted as read: only the small-channel kernel takes it
  // (conv/small_c.cuh); 0: X as above, in the conv's type.
  int x_first_bytes = 0;
};
// Y = conv(X, W) + B (B may be null); float32, float16 (float accumulation) or float64.
void direct_conv(const DirectConv& g, DataType dt, const void* x, const void* w, const void* b, void* y,
                 cudaStream_t stream, const char* op);

// Zero padding (Conv) and cropping (ConvTranspose) around cuDNN, which pads symmetrically only:
// dst [planes, dst...] from src [planes, src...], dst position d reading src position d - pre on
// each spatial axis, or zero where that is outside src.
inline constexpr int kMaxWindowRank = 3;
struct Window {
  int rank = 0;
  int64_t planes = 0;
  int64_t dst[kMaxWindowRank] = {}, src[kMaxWindowRank] = {}, pre[kMaxWindowRank] = {};
  int64_t dst_numel() const {
    int64_t n = planes;
    for (int i = 0; i < rank; ++i) n *= dst[i];
    return n;
  }
  int64_t src_numel() const {
    int64_t n = planes;
    for (int i = 0; i < rank; ++i) n *= src[i];
    return n;
  }
};
// elem: element size in bytes (the bits are moved; zero bits are 0.0 in every float type).
void window_copy(const void* src, void* dst, const Window& w, size_t elem, cudaStream_t stream, const char* op);

// y [n / plane planes of `plane` elements] = bias[plane index % channels], or zeros without a bias.
void bias_fill(const void* bias, void* y, int64_t n, int64_t plane, int64_t channels, size_t elem, cudaStream_t stream,
               const char* op);
// The epilogue pass (nn_epilogue.cu), in place over y's n elements: y = activation2(activation(y +
// bias[(i / inner) % channels]) + z), in float (double for float64); bias and z may be null. A plain
// bias add is the default EpilogueAttrs. Nothing to do when epilogue_is_identity().
bool epilogue_is_identity(const EpilogueAttrs& e, const void* bias, const void* z);
void apply_epilogue(void* y, const void* bias, const void* z, const EpilogueAttrs& e, int64_t n, int64_t inner,
                    int64_t channels, DataType dt, cudaStream_t stream, const char* op);

// ---- GEMM helpers (gemm/gemm_kernels.cu) ----
inline constexpr int kMaxBatchDims = 8;
// MatMul's output batch dims (merged) with the element strides of A's and B's matrices (0: broadcast).
struct BatchDims {
  int rank = 0;
  int64_t dims[kMaxBatchDims] = {}, sa[kMaxBatchDims] = {}, sb[kMaxBatchDims] = {};
};
// Y [batch..., m, n] = alpha * op(A) op(B) (+ beta * C broadcast, C element (i, j) at
// i * crs + j * ccs), row-major. Integers wrap (alpha and beta truncated to the type, as on the
// CPU); float16 and float32 accumulate in float, float64 in double.
struct TiledGemm {
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0;
  bool ta = false, tb = false, use_c = false;
  float alpha = 1.0f, beta = 0.0f;
  int64_t crs = 0, ccs = 0;
  int64_t batches = 1;
  BatchDims batch;
};
void tiled_gemm(const TiledGemm& g, DataType dt, const void* a, const void* b, const void* c, void* y,
                cudaStream_t stream, const char* op);
// y [m, n] = scale * C broadcast (C element (i, j) at i * crs + j * ccs); float types.
void broadcast_c(const void* c, void* y, int64_t m, int64_t n, int64_t crs, int64_t ccs, float scale, DataType dt,
                 cudaStream_t stream, const char* op);

// ---- GEMV for Gemm at small batch (gemm/gemv.cu) ----
// Y [m, n] = epilogue(alpha * A [m, k] W [n, k]^T + beta * C) for 1 <= m <= kGemvMaxM: a warp per
// row of W. C element (i, j) at i * crs + j * ccs (c null: none); the epilogue, when epi is set, as
// core/epilogue.h computes it with z [m, n] the residual (or null) and no bias. The Gemm tactic
// kGemvTactic (nn_gemm.h).
inline constexpr int kGemvMaxM = 8;
struct Gemv {
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  const void* c = nullptr;
  int64_t crs = 0, ccs = 0;
  const EpilogueAttrs* epi = nullptr;
  const void* z = nullptr;
};
// A and W float32, float16 or bfloat16 (one type), or A float32 and W float16 (C, Z and Y then
// float32); A not transposed, W transposed (Gemm's transB = 1); k a whole number of 16-byte chunks
// of W; A and W 16-byte aligned.
bool gemv_fits(DataType a_dt, DataType w_dt, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b,
               const void* a, const void* w);
void gemv(const Gemv& p, DataType a_dt, DataType w_dt, const void* a, const void* w, void* y, cudaStream_t stream,
          const char* op);

// ---- cuDNN's fused products (gemm/cudnn_matmul.cu) ----
// Y [m, n] = act2(act1(A [m, k] op(B) + C) + Z) in one cuDNN graph: op(B) = B [k, n] or, with
// trans_b, B [n, k]^T; C absent, per column ([n]) or full ([m, n]), added with factor 1; Z [m, n] or
// absent (act2 only with Z); the activations none, Relu, GELU (erf) or GELU (tanh); float16 or
// bfloat16, float accumulation; rows packed. align_*: the pointers' alignment in bytes (cuDNN
// plans for it). The Gemm/MatMul tactics kCudnnTactic + i (nn_gemm.h).
struct FusedProduct {
  enum class C : uint8_t { kNone, kPerColumn, kFull };
  int64_t m = 0, n = 0, k = 0;
  bool trans_b = false;
  DataType dtype = DataType::kFloat16;
  C c = C::kNone;
  bool has_z = false;
  Activation act1 = Activation::kNone, act2 = Activation::kNone;
  int64_t align_a = 16, align_b = 16, align_c = 16, align_z = 16, align_y = 16;
};
struct CudnnProduct;  // a graph shared by every step of its shape on a device
bool cudnn_takes(const FusedProduct& p);
// The graph for p (made on first use, but not while `stream` is being captured), or null where
// cuDNN has none or does not take p.
std::shared_ptr<const CudnnProduct> cudnn_product(const FusedProduct& p, cudaStream_t stream);
std::vector<int32_t> cudnn_tactics(const CudnnProduct& c);  // the engine configurations that build
size_t cudnn_workspace(const CudnnProduct& c, int32_t tactic);  // 0 where the tactic's plan does not build
// Whether the tactic's plan builds and fits the workspace (an engine from another GPU or cuDNN may
// name one that does not: cuBLASLt runs instead).
// Under capture only a plan finalized before counts.
bool cudnn_runs(const CudnnProduct& c, int32_t tactic, size_t workspace_bytes, cudaStream_t stream);
uint64_t cudnn_product_runs();  // cudnn_run's calls so far (the tests check that it ran)
void cudnn_run(const CudnnProduct& c, int32_t tactic, const void* a, const void* b, const void* cc, const void* z,
               void* y, GpuEnv& env);

// ---- cuDNN's fused attention (gemm/cudnn_attention.cu) ----
// The Attention tactics kCudnnTactic + i (nn_gemm.h) run cuDNN's fused attention for Q, K, V and Y
// at qkvy (16-byte aligned, else none); float16 and bfloat16, no mask input, not causal, no
// softcap, head sizes multiples of 8 up to 128; cuDNN 9.13.1 or later.
struct CudnnAttention;  // a graph shared by every step of its geometry on a device
bool cudnn_attention_takes(const AttentionShape& g, DataType dt);
// The graph (made on first use, but not while `stream` is being captured), or null where cuDNN has
// none or does not take the op.
std::shared_ptr<const CudnnAttention> cudnn_attention(const AttentionShape& g, DataType dt,
                                                      std::span<const void* const, 4> qkvy, cudaStream_t stream);
std::vector<int32_t> cudnn_attention_tactics(const CudnnAttention& c);  // the configurations that build
size_t cudnn_attention_workspace(const CudnnAttention& c, int32_t tactic);  // 0 where it does not build
// Whether the tactic's plan builds and fits the workspace; under capture only a plan finalized before.
bool cudnn_attention_runs(const CudnnAttention& c, int32_t tactic, size_t workspace_bytes, cudaStream_t stream);
uint64_t cudnn_attention_run_count();  // cudnn_attention_run's calls so far (the tests check that it ran)
void cudnn_attention_run(const CudnnAttention& c, int32_t tactic, std::span<const void* const, 4> qkvy, float scale,
                         GpuEnv& env);

// ---- the fused epilogue through cuBLASLt (gemm/gemm.cu) ----
// What cuBLASLt's epilogue, act(product + C + bias), computes of a fused op's epilogue (core/attrs.h):
// without a residual, all of it when the activation is one of cuBLASLt's; with one, all of it when
// the activation before the add is none, the one after is cuBLASLt's, and cuBLASLt's C is free to
// take Z (beta 1). Plain ops (no epilogue): nothing to do. cuBLASLt's GELU (the tanh form) serves
// float16 only: its tanh is not documented to float32 accuracy, and float32 engines must match
// the CPU.
struct LtEpilogue {
  bool whole = true;  // nothing is left for the epilogue kernel
  GemmActivation activation = GemmActivation::kNone;
  bool z_as_c = false;
};
std::optional<GemmActivation> lt_activation(Activation a, DataType dt);
// c_free: the product leaves cuBLASLt's C unused; dt: the product's type.
LtEpilogue lt_epilogue(const EpilogueAttrs* e, bool has_z, bool c_free, DataType dt);
LtEpilogue lt_unfused(const EpilogueAttrs* e);  // everything left to the epilogue kernel
void append_epilogue(std::vector<int64_t>& key, const LtEpilogue& e);
// A plan for d with lt's part of the epilogue (and the bias when `bias`); when cuBLASLt has no
// algorithm for that, the plain product's plan, and *lt becomes what is then left undone.
std::unique_ptr<GemmPlan> lt_plan(cublasLtHandle_t handle, GemmDesc d, GemmAlignment al, bool bias,
                                  const EpilogueAttrs* e, LtEpilogue* lt);

inline size_t align_up(size_t bytes, size_t to = 256) { return (bytes + to - 1) / to * to; }

// The largest power of two (at most `cap`) that divides the address; null counts as aligned.
inline uint32_t alignment_of(const void* p, uint32_t cap = 256) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 1;
  while (a < cap && v % (2 * a) == 0) a *= 2;
  return a;
}

// This step's state as a Plan if it is one built for `key`, else a new one from make() (kept in
// env.state when the step has a slot, in *local otherwise).
template <class Plan, class Key, class Make>
Plan& step_plan(GpuEnv& env, const Key& key, std::unique_ptr<Plan>& local, Make&& make) {
  if (env.state) {
    if (auto* p = dynamic_cast<Plan*>(env.state->get()); p && p->key == key) return *p;
    std::unique_ptr<Plan> fresh = make();
    Plan& ref = *fresh;
    *env.state = std::move(fresh);
    return ref;
  }
  local = make();
  return *local;
}

}  // namespace kiln::gpu::nn
