// Gemm, MatMul, FusedGemm and FusedMatMul on the GPU. The float types (float32, float16 and
// bfloat16 with float accumulation, float64) go through cuBLASLt (GemmPlan, nn_gemm.h); the integer
// types the CPU takes (int32, int64, uint32, uint64) through the tiled kernel of gemm_kernels.cu,
// which wraps modulo 2^bits like the CPU kernel. The tiled kernel also runs float products for which
// cuBLASLt offers no algorithm (pointers aligned to less than an element pair, say).
//
// Gemm's C: a full [M, N] C is cuBLASLt's C operand; a per-column vector with beta == 1 is the
// BIAS epilogue; any other broadcast is first written into Y, which is then C in place.
// MatMul: batch dims are merged where both operands stay linear; a single batch dim with B shared
// and A's matrices back to back folds into one [batch*M, K] x [K, N] product; otherwise the last
// merged batch dim is one strided-batched call (stride 0 for a broadcast operand) and the dims
// before it a host loop of such calls.
// FusedGemm / FusedMatMul: cuBLASLt's epilogue, act(product + C + bias) with act Relu or GELU-tanh,
// computes the fused epilogue (core/attrs.h) where it can (LtEpilogue); the rest runs in the
// epilogue kernel (nn_epilogue.cu) after the plain product, as it does where cuBLASLt has no
// algorithm for the fused form.
// Per-step state: the GemmPlan (descriptors and heuristic results) and the batch layout; the
// tactics are indices into the heuristic's list (up to 8), the GEMV (gemv.cu, a few rows) and cuDNN's
// fused products (cudnn_matmul.cu: float16/bfloat16, one product with its whole epilogue, erf GELU
// included), which the builder times against them.
#include <algorithm>
#include <climits>
#include <optional>
#include <string>
#include <vector>

#include "runtime/cuda/nn_gemm.h"
#include "runtime/cuda/nn_internal.cuh"

namespace kiln::gpu::nn {

// ---- the fused epilogue (nn_internal.cuh) --------------------------------------------------------
std::optional<GemmActivation> lt_activation(Activation a, DataType dt) {
  if (a == Activation::kNone) return GemmActivation::kNone;
  if (a == Activation::kRelu) return GemmActivation::kRelu;
  if (a == Activation::kGeluTanh && dt == DataType::kFloat16) return GemmActivation::kGeluTanh;
  return std::nullopt;
}

LtEpilogue lt_epilogue(const EpilogueAttrs* e, bool has_z, bool c_free, DataType dt) {
  if (!e) return {};
  if (!has_z) {
    if (const std::optional<GemmActivation> a = lt_activation(e->activation, dt)) return {true, *a, false};
  } else if (e->activation == Activation::kNone && c_free) {
    if (const std::optional<GemmActivation> a = lt_activation(e->activation2, dt)) return {true, *a, true};
  }
  return {false, GemmActivation::kNone, false};
}
LtEpilogue lt_unfused(const EpilogueAttrs* e) { return {e == nullptr, GemmActivation::kNone, false}; }

void append_epilogue(std::vector<int64_t>& key, const LtEpilogue& e) {
  key.insert(key.end(), {e.whole, static_cast<int64_t>(e.activation), e.z_as_c});
}

std::unique_ptr<GemmPlan> lt_plan(cublasLtHandle_t handle, GemmDesc d, GemmAlignment al, bool bias,
                                  const EpilogueAttrs* e, LtEpilogue* lt) {
  d.bias = bias && lt->whole;
  d.activation = lt->activation;
  auto plan = std::make_unique<GemmPlan>(handle, d, al);
  if (plan->algo_count() > 0 || !e || (!d.bias && d.activation == GemmActivation::kNone && !lt->z_as_c)) return plan;
  *lt = lt_unfused(e);
  d.bias = false;
  d.activation = GemmActivation::kNone;
  return std::make_unique<GemmPlan>(handle, d, al);
}

namespace {

// The float types (cuBLASLt) or the integer kernel's types.
bool lt_dtype(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFloat64;
}

// y = scale * C broadcast to [m, n] (or zeros without C).
void fill_from_c(const TensorView* C, const TensorView& Y, int64_t m, int64_t n, float scale, GpuEnv& env,
                 const char* op) {
  if (!C) {
    check_cuda(cudaMemsetAsync(Y.data, 0, Y.bytes(), env.stream), op);
    return;
  }
  const int64_t cr = C->rank() == 2 ? C->shape[0] : 1, cc = C->rank() >= 1 ? C->shape[C->rank() - 1] : 1;
  broadcast_c(C->data, Y.data, m, n, cr == 1 ? 0 : cc, cc == 1 ? 0 : 1, scale, Y.dtype, env.stream, op);
}

void append_shape(std::vector<int64_t>& key, const TensorView& t) {
  key.push_back(-1);
  key.insert(key.end(), t.shape.begin(), t.shape.end());
}

bool has_input(std::span<const TensorView> in, size_t i) { return in.size() > i && in[i].exists; }

// ---- cuDNN's fused products (cudnn_matmul.cu) ------------------------------------------------------
bool is_cudnn(int32_t tactic) { return tactic >= kCudnnTactic && tactic < kCudnnTactic + kCudnnTactics; }

// The epilogue and residual of a fused op into p; false where cuDNN's graph cannot take them.
bool add_epilogue(FusedProduct& p, const EpilogueAttrs* epi, const TensorView* Z, const TensorView& Y) {
  if (Z) {
    if (Z->numel() != Y.numel() || Z->dtype != Y.dtype) return false;
    p.has_z = true;
    p.align_z = alignment_of(Z->data, 16);
  }
  if (epi) {
    p.act1 = epi->activation;
    p.act2 = epi->activation2;
  }
  p.align_y = alignment_of(Y.data, 16);
  return cudnn_takes(p);
}

// A step's cuDNN graph, planned with a cuDNN tactic for the product as its pointers were then.
struct CudnnStep {
  FusedProduct product;
  std::shared_ptr<const CudnnProduct> graph;

  static CudnnStep plan(const std::optional<FusedProduct>& q, GpuEnv& env) {
    if (!is_cudnn(env.tactic) || !q) return {};
    return {*q, cudnn_product(*q, env.stream)};
  }
  // Whether it runs now (q: the product as the pointers are now): its plan builds and fits the
  // workspace, and the pointers keep the alignment it was planned for; else cuBLASLt runs.
  bool runs(const std::optional<FusedProduct>& q, const GpuEnv& env) const {
    return graph && q && q->align_a == product.align_a && q->align_b == product.align_b &&
           q->align_c == product.align_c && q->align_z == product.align_z && q->align_y == product.align_y &&
           cudnn_runs(*graph, env.tactic, env.workspace_bytes, env.stream);
  }
};

// ---- Gemm --------------------------------------------------------------------------------------
enum class CMode { kNone, kFull, kBias, kBroadcast };

struct GemmStepPlan final : StepState {
  std::vector<int64_t> key;
  CMode mode = CMode::kNone;
  LtEpilogue lt;
  std::unique_ptr<GemmPlan> gemm;  // null: nothing for cuBLASLt (empty, K = 0, integers)
  CudnnStep cudnn;                 // with a cuDNN tactic
};

const GemmAttrs& gemm_attrs(OpKind kind, const Attrs& attrs) {
  if (kind == OpKind::kFusedGemm) return std::get<FusedGemmAttrs>(attrs);
  return std::get<GemmAttrs>(attrs);
}
const EpilogueAttrs* epilogue_of(OpKind kind, const Attrs& attrs) {
  if (kind == OpKind::kFusedGemm) return &std::get<FusedGemmAttrs>(attrs);
  if (kind == OpKind::kFusedMatMul) return &std::get<EpilogueAttrs>(attrs);
  return nullptr;
}
// The residual input of a fused op, or null.
const TensorView* residual(OpKind kind, std::span<const TensorView> in) {
  return is_internal_op(kind) && has_input(in, 3) ? &in[3] : nullptr;
}

struct GemmShape {
  int64_t m, n, k;
  bool has_c;
  const TensorView* C;
};

GemmShape gemm_shape(const GemmAttrs& a, std::span<const TensorView> in, const TensorView& Y) {
  const TensorView& A = in[0];
  const bool has_c = in.size() > 2 && in[2].exists && a.beta != 0.0f;
  return {Y.shape[0], Y.shape[1], a.transA ? A.shape[0] : A.shape[1], has_c, has_c ? &in[2] : nullptr};
}

// cuDNN's fused product for this Gemm (pointers as bound now), if its graph takes it: A not
// transposed, alpha 1, C per column or full with beta 1.
std::optional<FusedProduct> gemm_product(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                                         const TensorView& Y) {
  const GemmAttrs& a = gemm_attrs(kind, attrs);
  const GemmShape s = gemm_shape(a, in, Y);
  if (a.transA || a.alpha != 1.0f || in[0].dtype != in[1].dtype || Y.dtype != in[0].dtype) return std::nullopt;
  FusedProduct p;
  p.m = s.m;
  p.n = s.n;
  p.k = s.k;
  p.trans_b = a.transB != 0;
  p.dtype = Y.dtype;
  p.align_a = alignment_of(in[0].data, 16);
  p.align_b = alignment_of(in[1].data, 16);
  if (s.has_c) {
    if (a.beta != 1.0f || s.C->dtype != Y.dtype) return std::nullopt;
    if (s.C->numel() == s.n && (s.C->rank() < 2 || s.C->shape[0] == 1))
      p.c = FusedProduct::C::kPerColumn;
    else if (s.C->numel() == s.m * s.n && s.C->rank() == 2)
      p.c = FusedProduct::C::kFull;
    else
      return std::nullopt;
    p.align_c = alignment_of(s.C->data, 16);
  }
  if (!add_epilogue(p, epilogue_of(kind, attrs), residual(kind, in), Y)) return std::nullopt;
  return p;
}

// Whether the GEMV tactic runs this Gemm: a small-M product gemv.cu takes, with a residual (of a
// fused op) as large as Y.
bool gemv_takes(OpKind kind, const GemmAttrs& a, std::span<const TensorView> in, const TensorView& Y) {
  const GemmShape s = gemm_shape(a, in, Y);
  const TensorView* Z = residual(kind, in);
  if (Z && (Z->numel() != s.m * s.n || Z->dtype != Y.dtype)) return false;
  return gemv_fits(in[0].dtype, in[1].dtype, s.m, s.n, s.k, a.transA != 0, a.transB != 0, in[0].data, in[1].data);
}

// FusedGemm's float16 weights under a float32 product (core/infer/gemm/gemm.cpp): only the GEMV runs it.
bool mixed(std::span<const TensorView> in) { return in[0].dtype != in[1].dtype; }

GemmStepPlan& gemm_plan(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                        std::span<const TensorView> out, GpuEnv& env, std::unique_ptr<GemmStepPlan>& local) {
  const GemmAttrs& a = gemm_attrs(kind, attrs);
  const EpilogueAttrs* epi = epilogue_of(kind, attrs);
  const TensorView* Z = residual(kind, in);
  const TensorView &A = in[0], &B = in[1], &Y = out[0];
  const GemmShape s = gemm_shape(a, in, Y);
  // The mode and the pointers' alignment decide which algorithms qualify.
  CMode mode = CMode::kNone;
  if (s.has_c) {
    const bool per_column = s.C->numel() == s.n && (s.C->rank() < 2 || s.C->shape[0] == 1);
    if (s.C->numel() == s.m * s.n)
      mode = CMode::kFull;
    else if (per_column && a.beta == 1.0f && alignment_of(s.C->data, 16) == 16)
      mode = CMode::kBias;
    else
      mode = CMode::kBroadcast;
  }
  GemmAlignment al;
  al.a = alignment_of(A.data, 16);
  al.b = alignment_of(B.data, 16);
  al.c = std::min(alignment_of(Y.data, 16), mode == CMode::kFull ? alignment_of(s.C->data, 16) : 16u);
  al.bias = mode == CMode::kBias ? alignment_of(s.C->data, 16) : 16u;
  const LtEpilogue lt = lt_epilogue(epi, Z != nullptr, mode == CMode::kNone || mode == CMode::kBias, A.dtype);
  if (lt.z_as_c) al.c = std::min(al.c, alignment_of(Z->data, 16));
  std::vector<int64_t> key{static_cast<int64_t>(A.dtype),
                           env.tactic,
                           static_cast<int64_t>(mode),
                           a.transA,
                           a.transB,
                           al.a,
                           al.b,
                           al.c,
                           al.bias};
  append_shape(key, A);
  append_shape(key, B);
  append_shape(key, Y);
  append_epilogue(key, lt);
  return step_plan<GemmStepPlan>(env, key, local, [&] {
    auto p = std::make_unique<GemmStepPlan>();
    p->key = key;
    p->mode = mode;
    p->lt = lt_unfused(epi);
    p->cudnn = CudnnStep::plan(gemm_product(kind, attrs, in, Y), env);
    if (s.m > 0 && s.n > 0 && s.k > 0 && lt_dtype(A.dtype)) {
      GemmDesc d;
      d.dtype = A.dtype;
      d.trans_a = a.transA != 0;
      d.trans_b = a.transB != 0;
      d.m = s.m;
      d.n = s.n;
      d.k = s.k;
      d.lda = A.shape[1];
      d.ldb = B.shape[1];
      p->lt = lt;
      p->gemm = lt_plan(env.cublaslt, d, al, mode == CMode::kBias, epi, &p->lt);
      if (p->gemm->algo_count() == 0) p->gemm.reset();  // the tiled kernel runs instead
    }
    return p;
  });
}

void gemm_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                 GpuEnv& env) {
  const char* op = op_name(kind).data();
  const GemmAttrs& a = gemm_attrs(kind, attrs);
  const EpilogueAttrs* epi = epilogue_of(kind, attrs);
  const TensorView* Z = residual(kind, in);
  const TensorView &A = in[0], &B = in[1], &Y = out[0];
  const GemmShape s = gemm_shape(a, in, Y);
  if (s.m == 0 || s.n == 0) return;
  // The epilogue kernel, unless the product computed the epilogue already; `bias` is a per-column
  // C that the product left out.
  auto finish = [&](bool done, const void* bias = nullptr) {
    if (epi && !done)
      apply_epilogue(Y.data, bias, Z ? Z->data : nullptr, *epi, s.m * s.n, 1, s.n, Y.dtype, env.stream, op);
  };
  auto tiled = [&] {
    TiledGemm p;
    p.m = s.m;
    p.n = s.n;
    p.k = s.k;
    p.lda = A.shape[1];
    p.ldb = B.shape[1];
    p.ta = a.transA != 0;
    p.tb = a.transB != 0;
    p.use_c = s.has_c;
    p.alpha = a.alpha;
    p.beta = a.beta;
    if (s.has_c) {
      const int64_t cr = s.C->rank() == 2 ? s.C->shape[0] : 1, cc = s.C->rank() >= 1 ? s.C->shape[s.C->rank() - 1] : 1;
      p.crs = cr == 1 ? 0 : cc;
      p.ccs = cc == 1 ? 0 : 1;
    }
    tiled_gemm(p, A.dtype, A.data, B.data, s.has_c ? s.C->data : nullptr, Y.data, env.stream, op);
  };
  if (!lt_dtype(A.dtype)) {
    tiled();
    return finish(false);
  }
  if (s.k == 0) {
    fill_from_c(s.C, Y, s.m, s.n, a.beta, env, op);
    return finish(false);
  }
  const bool mix = mixed(in);
  const bool by_gemv = (env.tactic == kGemvTactic || mix) && gemv_takes(kind, a, in, Y);
  if (mix && !by_gemv)
    throw Error(std::string(op) + ": a float32 A with float16 weights runs only as a matrix-vector product (A of 1 " +
                "to " + std::to_string(kGemvMaxM) + " rows, not transposed; B transposed; K a multiple of 8; A and B " +
                "16-byte aligned); rebuild the engine");
  if (by_gemv) {
    Gemv g;
    g.m = s.m;
    g.n = s.n;
    g.k = s.k;
    g.alpha = a.alpha;
    g.beta = a.beta;
    if (s.has_c) {
      g.c = s.C->data;
      const int64_t cr = s.C->rank() == 2 ? s.C->shape[0] : 1, cc = s.C->rank() >= 1 ? s.C->shape[s.C->rank() - 1] : 1;
      g.crs = cr == 1 ? 0 : cc;
      g.ccs = cc == 1 ? 0 : 1;
    }
    g.epi = epi;
    g.z = Z ? Z->data : nullptr;
    return gemv(g, A.dtype, B.dtype, A.data, B.data, Y.data, env.stream, op);
  }
  std::unique_ptr<GemmStepPlan> local;
  GemmStepPlan& p = gemm_plan(kind, attrs, in, out, env, local);
  if (p.cudnn.graph && p.cudnn.runs(gemm_product(kind, attrs, in, Y), env))
    return cudnn_run(*p.cudnn.graph, env.tactic, A.data, B.data, s.has_c ? s.C->data : nullptr, Z ? Z->data : nullptr,
                     Y.data, env);
  if (!p.gemm || !p.gemm->fits(env.workspace_bytes)) {  // (a workspace planned elsewhere)
    tiled();
    return finish(false);
  }
  const void* c_z = p.lt.z_as_c ? Z->data : nullptr;  // Z as cuBLASLt's C, with beta 1
  switch (p.mode) {
    case CMode::kNone:
      p.gemm->run(env.stream, env.tactic, a.alpha, A.data, B.data, c_z ? 1.0 : 0.0, c_z, Y.data, nullptr, env.workspace,
                  env.workspace_bytes);
      break;
    case CMode::kFull:
      p.gemm->run(env.stream, env.tactic, a.alpha, A.data, B.data, a.beta, s.C->data, Y.data, nullptr, env.workspace,
                  env.workspace_bytes);
      break;
    case CMode::kBias:  // cuBLASLt adds the bias only where it computes the whole epilogue
      p.gemm->run(env.stream, env.tactic, a.alpha, A.data, B.data, c_z ? 1.0 : 0.0, c_z, Y.data,
                  p.lt.whole ? s.C->data : nullptr, env.workspace, env.workspace_bytes);
      if (!p.lt.whole) return finish(false, s.C->data);
      break;
    case CMode::kBroadcast:
      fill_from_c(s.C, Y, s.m, s.n, 1.0f, env, op);
      p.gemm->run(env.stream, env.tactic, a.alpha, A.data, B.data, a.beta, Y.data, Y.data, nullptr, env.workspace,
                  env.workspace_bytes);
      break;
  }
  finish(p.lt.whole);
}

// ---- MatMul ------------------------------------------------------------------------------------
struct MatMulStepPlan final : StepState {
  std::vector<int64_t> key;
  int64_t m = 0, n = 0, k = 0, batches = 0;
  BatchDims batch;
  LtEpilogue lt;
  std::unique_ptr<GemmPlan> gemm;
  std::vector<int64_t> a_off, b_off, y_off;  // one gemm run per entry (elements)
  int64_t rows = 0;  // A's rows where the product is one [rows, k] x [k, n]; else 0
  CudnnStep cudnn;   // with a cuDNN tactic
};

// FusedMatMul's per-column bias, or null.
const TensorView* matmul_bias(OpKind kind, std::span<const TensorView> in) {
  return kind == OpKind::kFusedMatMul && has_input(in, 2) ? &in[2] : nullptr;
}

// cuDNN's fused product for this MatMul (pointers as bound now), if its graph takes it: one
// product, B a matrix of A's type, FusedMatMul's bias per column.
std::optional<FusedProduct> matmul_product(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                                           const TensorView& Y, const MatMulStepPlan& plan) {
  const TensorView* bias = matmul_bias(kind, in);
  if (plan.rows == 0 || in[1].rank() < 2 || in[0].dtype != in[1].dtype || Y.dtype != in[0].dtype) return std::nullopt;
  FusedProduct p;
  p.m = plan.rows;
  p.n = plan.n;
  p.k = plan.k;
  p.dtype = Y.dtype;
  p.align_a = alignment_of(in[0].data, 16);
  p.align_b = alignment_of(in[1].data, 16);
  if (bias) {
    if (bias->dtype != Y.dtype) return std::nullopt;
    p.c = FusedProduct::C::kPerColumn;
    p.align_c = alignment_of(bias->data, 16);
  }
  if (!add_epilogue(p, epilogue_of(kind, attrs), residual(kind, in), Y)) return std::nullopt;
  return p;
}

MatMulStepPlan& matmul_plan(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                            std::span<const TensorView> out, GpuEnv& env, std::unique_ptr<MatMulStepPlan>& local) {
  const TensorView &A = in[0], &B = in[1], &Y = out[0];
  const EpilogueAttrs* epi = epilogue_of(kind, attrs);
  const TensorView *bias = matmul_bias(kind, in), *Z = residual(kind, in);
  const uint32_t al_a = alignment_of(A.data, 16), al_b = alignment_of(B.data, 16), al_y = alignment_of(Y.data, 16);
  const uint32_t al_bias = bias ? alignment_of(bias->data, 16) : 16u, al_z = Z ? alignment_of(Z->data, 16) : 16u;
  // A vector B drops the column axis: the bias then runs along another axis than cuBLASLt's.
  const LtEpilogue lt = B.rank() >= 2 ? lt_epilogue(epi, Z != nullptr, true, A.dtype) : lt_unfused(epi);
  std::vector<int64_t> key{static_cast<int64_t>(A.dtype), env.tactic, al_a, al_b, al_y, bias != nullptr, al_bias, al_z};
  append_shape(key, A);
  append_shape(key, B);
  append_shape(key, Y);
  append_epilogue(key, lt);
  return step_plan<MatMulStepPlan>(env, key, local, [&] {
    auto p = std::make_unique<MatMulStepPlan>();
    p->key = key;
    p->lt = lt_unfused(epi);
    const size_t ra = A.rank(), rb = B.rank();
    p->m = ra >= 2 ? A.shape[ra - 2] : 1;
    p->k = A.shape[ra - 1];
    p->n = rb >= 2 ? B.shape[rb - 1] : 1;
    const size_t batch_rank = Y.rank() - (ra >= 2) - (rb >= 2);
    // Strides of each operand's batch dims, aligned right; merged where both stay linear.
    std::vector<int64_t> dims, sa, sb;
    auto stride_of = [&](const TensorView& t, size_t out_dim, int64_t mat) {
      const size_t tr = t.rank() > 2 ? t.rank() - 2 : 0;
      const size_t from_right = batch_rank - 1 - out_dim;
      if (from_right >= tr) return int64_t{0};
      int64_t s = mat;
      for (size_t i = tr - from_right; i < tr; ++i) s *= t.shape[i];
      return t.shape[tr - 1 - from_right] == 1 ? int64_t{0} : s;
    };
    p->batches = 1;
    for (size_t i = 0; i < batch_rank; ++i) {
      const int64_t d = Y.shape[i], a_s = stride_of(A, i, p->m * p->k), b_s = stride_of(B, i, p->k * p->n);
      p->batches *= d;
      if (d == 1) continue;
      if (!dims.empty() && sa.back() == a_s * d && sb.back() == b_s * d) {
        dims.back() *= d;
        sa.back() = a_s;
        sb.back() = b_s;
      } else {
        dims.push_back(d);
        sa.push_back(a_s);
        sb.push_back(b_s);
      }
    }
    if (dims.size() > static_cast<size_t>(kMaxBatchDims))
      throw Error("MatMul: more than 8 batch dimensions after merging; not supported by the CUDA backend");
    p->batch.rank = static_cast<int>(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) {
      p->batch.dims[i] = dims[i];
      p->batch.sa[i] = sa[i];
      p->batch.sb[i] = sb[i];
    }
    if (Y.numel() == 0 || p->k == 0 || !lt_dtype(A.dtype)) return p;
    if (dims.empty())
      p->rows = p->m;
    else if (dims.size() == 1 && sb[0] == 0 && sa[0] == p->m * p->k)  // B shared, A's matrices back to back
      p->rows = p->m * dims[0];
    p->cudnn = CudnnStep::plan(matmul_product(kind, attrs, in, Y, *p), env);

    GemmDesc d;
    d.dtype = A.dtype;
    d.m = p->m;
    d.n = p->n;
    d.k = p->k;
    // Batch offsets are multiples of the strides: the pointers of later matrices may be less aligned.
    const size_t es = dtype_size(A.dtype);
    GemmAlignment al;
    al.a = al_a;
    al.b = al_b;
    al.c = std::min(al_y, alignment_of(reinterpret_cast<const void*>(p->m * p->n * es), 16));
    for (size_t i = 0; i < dims.size(); ++i) {
      if (sa[i]) al.a = std::min(al.a, alignment_of(reinterpret_cast<const void*>(sa[i] * es), 16));
      if (sb[i]) al.b = std::min(al.b, alignment_of(reinterpret_cast<const void*>(sb[i] * es), 16));
    }
    al.bias = al_bias;
    if (lt.z_as_c) al.c = std::min(al.c, al_z);  // Z's matrices sit at Y's offsets
    p->lt = lt;
    auto make = [&](const GemmDesc& desc) { return lt_plan(env.cublaslt, desc, al, bias != nullptr, epi, &p->lt); };
    const int r = p->batch.rank;
    if (r == 1 && sb[0] == 0 && sa[0] == p->m * p->k) {  // B shared, A's matrices back to back
      d.m = p->m * dims[0];
      p->gemm = make(d);
      p->a_off = p->b_off = p->y_off = {0};
    } else if (r >= 1) {
      d.batch = dims[r - 1];
      d.stride_a = sa[r - 1];
      d.stride_b = sb[r - 1];
      d.stride_c = p->m * p->n;
      if (d.batch <= INT_MAX) p->gemm = make(d);
      const int64_t inner = p->gemm && p->gemm->algo_count() > 0 ? d.batch : 1;
      if (inner == 1) {  // no strided-batch algorithm: one call per matrix
        d.batch = 1;
        p->gemm = make(d);
      }
      // Offsets of each call: the output batches in order, `inner` at a time.
      for (int64_t bi = 0; bi < p->batches; bi += inner) {
        int64_t rest = bi, oa = 0, ob = 0;
        for (int dd = r - 1; dd >= 0; --dd) {
          const int64_t idx = rest % dims[dd];
          rest /= dims[dd];
          oa += idx * sa[dd];
          ob += idx * sb[dd];
        }
        p->a_off.push_back(oa);
        p->b_off.push_back(ob);
        p->y_off.push_back(bi * p->m * p->n);
      }
    } else {
      p->gemm = make(d);
      p->a_off = p->b_off = p->y_off = {0};
    }
    if (p->gemm->algo_count() == 0) p->gemm.reset();  // the tiled kernel runs instead
    return p;
  });
}

void matmul_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                   GpuEnv& env) {
  const char* op = op_name(kind).data();
  const TensorView &A = in[0], &B = in[1], &Y = out[0];
  if (Y.numel() == 0) return;
  const EpilogueAttrs* epi = epilogue_of(kind, attrs);
  const TensorView *bias = matmul_bias(kind, in), *Z = residual(kind, in);
  std::unique_ptr<MatMulStepPlan> local;
  MatMulStepPlan& p = matmul_plan(kind, attrs, in, out, env, local);
  // The epilogue kernel, unless the product computed the epilogue already.
  auto finish = [&](bool done) {
    if (epi && !done)
      apply_epilogue(Y.data, bias ? bias->data : nullptr, Z ? Z->data : nullptr, *epi, Y.numel(), 1,
                     Y.rank() ? Y.shape.back() : 1, Y.dtype, env.stream, op);
  };
  auto tiled = [&] {
    TiledGemm g;
    g.m = p.m;
    g.n = p.n;
    g.k = p.k;
    g.lda = p.k;
    g.ldb = p.n;
    g.batches = p.batches;
    g.batch = p.batch;
    tiled_gemm(g, A.dtype, A.data, B.data, nullptr, Y.data, env.stream, op);
  };
  if (!lt_dtype(A.dtype)) {
    tiled();
    return finish(false);
  }
  if (p.k == 0) {
    check_cuda(cudaMemsetAsync(Y.data, 0, Y.bytes(), env.stream), op);
    return finish(false);
  }
  if (p.cudnn.graph && p.cudnn.runs(matmul_product(kind, attrs, in, Y, p), env))
    return cudnn_run(*p.cudnn.graph, env.tactic, A.data, B.data, bias ? bias->data : nullptr, Z ? Z->data : nullptr,
                     Y.data, env);
  if (!p.gemm || !p.gemm->fits(env.workspace_bytes)) {  // (a workspace planned elsewhere)
    tiled();
    return finish(false);
  }
  const size_t es = dtype_size(A.dtype);
  const char *a = static_cast<const char*>(A.data), *b = static_cast<const char*>(B.data);
  char* y = static_cast<char*>(Y.data);
  const char* z = p.lt.z_as_c ? static_cast<const char*>(Z->data) : nullptr;  // Z as cuBLASLt's C, beta 1
  const void* lt_bias = p.lt.whole && bias ? bias->data : nullptr;
  for (size_t i = 0; i < p.a_off.size(); ++i)
    p.gemm->run(env.stream, env.tactic, 1.0, a + p.a_off[i] * es, b + p.b_off[i] * es, z ? 1.0 : 0.0,
                z ? z + p.y_off[i] * es : nullptr, y + p.y_off[i] * es, lt_bias, env.workspace, env.workspace_bytes);
  finish(p.lt.whole);
}

// ---- workspace and tactics -----------------------------------------------------------------------
// cuBLASLt's plan of a step and cuDNN's product, where its graph takes the step: both from one
// step plan (`local` keeps it where the step has no state slot).
struct StepPlans {
  const GemmPlan* lt = nullptr;
  std::optional<FusedProduct> product;
};
StepPlans plans_of(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                   GpuEnv& env, std::unique_ptr<StepState>& local) {
  if (!lt_dtype(in[0].dtype) || out[0].numel() == 0) return {};
  if (kind == OpKind::kGemm || kind == OpKind::kFusedGemm) {
    if (mixed(in)) return {};  // the GEMV's alone
    const GemmAttrs& a = gemm_attrs(kind, attrs);
    if ((a.transA ? in[0].shape[0] : in[0].shape[1]) == 0) return {};
    std::unique_ptr<GemmStepPlan> l;
    const GemmPlan* g = gemm_plan(kind, attrs, in, out, env, l).gemm.get();
    local = std::move(l);
    return {g, gemm_product(kind, attrs, in, out[0])};
  }
  std::unique_ptr<MatMulStepPlan> l;
  const MatMulStepPlan& p = matmul_plan(kind, attrs, in, out, env, l);
  StepPlans r{p.gemm.get(), matmul_product(kind, attrs, in, out[0], p)};
  local = std::move(l);
  return r;
}

size_t gemm_workspace(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                      GpuEnv& env) {
  std::unique_ptr<StepState> local;
  const StepPlans s = plans_of(kind, attrs, in, out, env, local);
  // The GEMV needs none, cuDNN's graph what its plan asks; but where they cannot run (pointers bound
  // at run time that are not 16-byte aligned), cuBLASLt's first algorithm runs instead, with its
  // workspace.
  const bool cudnn = is_cudnn(env.tactic);
  size_t bytes = s.lt ? s.lt->workspace(env.tactic == kGemvTactic || cudnn ? 0 : env.tactic) : 0;
  if (cudnn && s.product)
    if (const std::shared_ptr<const CudnnProduct> c = cudnn_product(*s.product, env.stream))
      bytes = std::max(bytes, cudnn_workspace(*c, env.tactic));
  return bytes;
}

}  // namespace

// gemm/attention.cu
void attention_gpu(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                   GpuEnv& env);
std::vector<int32_t> attention_tactics(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                                       std::span<const TensorView> out, GpuEnv& env);
size_t attention_workspace(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                           std::span<const TensorView> out, GpuEnv& env);

namespace {

std::vector<int32_t> gemm_tactics(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                                  std::span<const TensorView> out, GpuEnv& env) {
  std::unique_ptr<StepState> local;
  const StepPlans s = plans_of(kind, attrs, in, out, env, local);
  std::vector<int32_t> t;
  for (int i = 0; s.lt && i < s.lt->algo_count(); ++i) t.push_back(i);
  if (s.product)
    if (const std::shared_ptr<const CudnnProduct> c = cudnn_product(*s.product, env.stream)) {
      const std::vector<int32_t> more = cudnn_tactics(*c);
      t.insert(t.end(), more.begin(), more.end());
    }
  if ((kind == OpKind::kGemm || kind == OpKind::kFusedGemm) && out[0].numel() > 0 &&
      gemv_takes(kind, gemm_attrs(kind, attrs), in, out[0]))
    t.push_back(kGemvTactic);
  return t;
}

const GpuKernelEntry kEntries[] = {
    {OpKind::kAttention, attention_gpu, attention_workspace, attention_tactics},
    {OpKind::kGemm, gemm_kernel, gemm_workspace, gemm_tactics},
    {OpKind::kMatMul, matmul_kernel, gemm_workspace, gemm_tactics},
    {OpKind::kFusedGemm, gemm_kernel, gemm_workspace, gemm_tactics},
    {OpKind::kFusedMatMul, matmul_kernel, gemm_workspace, gemm_tactics},
};

}  // namespace

}  // namespace kiln::gpu::nn

namespace kiln::gpu {

// The gemm family's table.
std::span<const GpuKernelEntry> gemm_gpu_kernels() { return nn::kEntries; }

}  // namespace kiln::gpu
