// GemmPlan and gemm_rowmajor (nn_gemm.h): row-major products through cuBLASLt.
// Operand swap: row-major D [m, n] is column-major D^T [n, m], so cuBLASLt's "A" is our B (op
// trans_b), its "B" our A (op trans_a), and its m and n are our n and m. cuBLASLt's BIAS
// epilogue runs along its D's rows: a bias per column of ours. (Its row-major layouts, which
// would give a bias per row of ours, found no algorithm for half products with a bias here.)
#include <algorithm>
#include <climits>
#include <memory>
#include <string>

#include "runtime/cuda/gpu_kernels.h"
#include "runtime/cuda/nn_gemm.h"
#include "runtime/cuda/nn_internal.cuh"

namespace kiln::gpu {

namespace {

constexpr int kMaxAlgos = 16;

cudaDataType_t lt_type(DataType t) {
  switch (t) {
    case DataType::kFloat32: return CUDA_R_32F;
    case DataType::kFloat16: return CUDA_R_16F;
    case DataType::kFloat64: return CUDA_R_64F;
    case DataType::kBFloat16: return CUDA_R_16BF;
    default: throw Error("GEMM: element type " + std::string(dtype_name(t)) + " is not supported by cuBLASLt here");
  }
}

template <class V>
void set_layout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, V v) {
  check_cublas(cublasLtMatrixLayoutSetAttribute(l, attr, &v, sizeof(v)), "cublasLtMatrixLayoutSetAttribute");
}
template <class V>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, V v) {
  check_cublas(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)), "cublasLtMatmulDescSetAttribute");
}
template <class V>
void set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, V v) {
  check_cublas(cublasLtMatmulPreferenceSetAttribute(p, attr, &v, sizeof(v)), "cublasLtMatmulPreferenceSetAttribute");
}

// A column-major layout of rows x cols with leading dimension ld, batched when batch > 1.
cublasLtMatrixLayout_t make_layout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                   int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  check_cublas(cublasLtMatrixLayoutCreate(&l, t, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld),
               "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    set_layout(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, static_cast<int32_t>(batch));
    set_layout(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride);
  }
  return l;
}

}  // namespace

GemmPlan::GemmPlan(cublasLtHandle_t lt, const GemmDesc& d, GemmAlignment align, size_t max_workspace, int max_algos)
    : lt_(lt), desc_(d) {
  GemmDesc& g = desc_;
  if (g.m <= 0 || g.n <= 0 || g.k <= 0) throw Error("GEMM: m, n and k must be positive");
  if (g.batch < 1 || g.batch > INT_MAX) throw Error("GEMM: batch count out of range");
  if (g.lda == 0) g.lda = g.trans_a ? g.m : g.k;
  if (g.ldb == 0) g.ldb = g.trans_b ? g.k : g.n;
  if (g.ldc == 0) g.ldc = g.n;
  try {
    build(align, max_workspace, max_algos);
  } catch (...) {
    release();
    throw;
  }
}

void GemmPlan::build(GemmAlignment align, size_t max_workspace, int max_algos) {
  const GemmDesc& g = desc_;
  const cudaDataType_t t = lt_type(g.dtype);
  const bool dbl = g.dtype == DataType::kFloat64;
  const cublasComputeType_t compute = dbl ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  check_cublas(cublasLtMatmulDescCreate(&op_, compute, dbl ? CUDA_R_64F : CUDA_R_32F), "cublasLtMatmulDescCreate");
  set_desc(op_, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N));
  set_desc(op_, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N));
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  switch (g.activation) {
    case GemmActivation::kNone: epilogue = g.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT; break;
    case GemmActivation::kRelu: epilogue = g.bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU; break;
    case GemmActivation::kGeluTanh: epilogue = g.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU; break;
  }
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    set_desc(op_, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(epilogue));
  if (g.bias) {
    // The heuristic reads the bias pointer's alignment from its value: a stand-in with the
    // alignment run() will see (run() sets the real one).
    set_desc(op_, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
             reinterpret_cast<const void*>(static_cast<uintptr_t>(std::max<uint32_t>(align.bias, 1))));
  }
  // cuBLASLt's A: our B, stored [k, n] (or [n, k]) row-major = column-major [n, k] (or [k, n]).
  la_ = g.trans_b ? make_layout(t, g.k, g.n, g.ldb, g.batch, g.stride_b)
                  : make_layout(t, g.n, g.k, g.ldb, g.batch, g.stride_b);
  lb_ = g.trans_a ? make_layout(t, g.m, g.k, g.lda, g.batch, g.stride_a)
                  : make_layout(t, g.k, g.m, g.lda, g.batch, g.stride_a);
  lc_ = make_layout(g.float_out ? CUDA_R_32F : t, g.n, g.m, g.ldc, g.batch, g.stride_c);

  cublasLtMatmulPreference_t pref = nullptr;
  check_cublas(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, cublasStatus_t (*)(cublasLtMatmulPreference_t)> guard(
      pref, cublasLtMatmulPreferenceDestroy);
  cublasLtMatmulHeuristicResult_t found[kMaxAlgos] = {};
  max_algos = std::clamp(max_algos, 1, kMaxAlgos);
  int count = 0;
  set_pref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(max_workspace));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align.b);
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align.a);
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align.c);
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align.c);
  // Split-K partial sums of a half product must not be added up in half.
  if (g.dtype == DataType::kFloat16 || g.dtype == DataType::kBFloat16)
    set_pref(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
             static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(lt_, op_, la_, lb_, lc_, lc_, pref, max_algos, found, &count);
  // NOT_SUPPORTED: no algorithm for this problem (count stays 0).
  if (st != CUBLAS_STATUS_NOT_SUPPORTED) check_cublas(st, "cublasLtMatmulAlgoGetHeuristic");
  for (int i = 0; i < count; ++i)
    if (found[i].state == CUBLAS_STATUS_SUCCESS) algos_.push_back({found[i].algo, found[i].workspaceSize});
}

GemmPlan::~GemmPlan() { release(); }

void GemmPlan::release() {
  if (la_) cublasLtMatrixLayoutDestroy(la_);
  if (lb_) cublasLtMatrixLayoutDestroy(lb_);
  if (lc_) cublasLtMatrixLayoutDestroy(lc_);
  if (op_) cublasLtMatmulDescDestroy(op_);
  la_ = lb_ = lc_ = nullptr;
  op_ = nullptr;
}

size_t GemmPlan::workspace(int index) const {
  if (algos_.empty()) return 0;
  if (index < 0 || index >= algo_count()) index = 0;
  return algos_[static_cast<size_t>(index)].workspace;
}

bool GemmPlan::fits(size_t workspace_bytes) const {
  for (const Algo& a : algos_)
    if (a.workspace <= workspace_bytes) return true;
  return false;
}

void GemmPlan::run(cudaStream_t stream, int index, double alpha, const void* a, const void* b, double beta,
                   const void* c, void* d, const void* bias, void* workspace, size_t workspace_bytes) const {
  if (algos_.empty()) throw Error("GEMM: cuBLASLt has no algorithm for this product");
  if (index < 0 || index >= algo_count()) index = 0;
  if (algos_[static_cast<size_t>(index)].workspace > workspace_bytes) {
    index = -1;
    for (int i = 0; i < algo_count() && index < 0; ++i)
      if (algos_[static_cast<size_t>(i)].workspace <= workspace_bytes) index = i;
    if (index < 0) throw Error("GEMM: the workspace is too small for every cuBLASLt algorithm");
  }
  if (desc_.bias) set_desc(op_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  const float fa = static_cast<float>(alpha), fb = static_cast<float>(beta);
  const bool dbl = desc_.dtype == DataType::kFloat64;
  const void* pa = dbl ? static_cast<const void*>(&alpha) : &fa;
  const void* pb = dbl ? static_cast<const void*>(&beta) : &fb;
  check_cublas(cublasLtMatmul(lt_, op_, pa, b, la_, a, lb_, pb, c ? c : d, lc_, d, lc_,
                              &algos_[static_cast<size_t>(index)].algo, workspace, workspace_bytes, stream),
               "cublasLtMatmul");
}

void gemm_rowmajor(cublasLtHandle_t lt, cudaStream_t stream, const GemmDesc& d, float alpha, const void* a,
                   const void* b, float beta, void* c, void* workspace, size_t workspace_bytes) {
  if (d.m == 0 || d.n == 0 || d.batch == 0) return;
  GemmAlignment al;
  al.a = nn::alignment_of(a, 16);
  al.b = nn::alignment_of(b, 16);
  al.c = nn::alignment_of(c, 16);
  GemmPlan plan(lt, d, al, workspace ? workspace_bytes : 0, 1);
  plan.run(stream, 0, alpha, a, b, beta, c, c, nullptr, workspace, workspace ? workspace_bytes : 0);
}

}  // namespace kiln::gpu
