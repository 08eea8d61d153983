// Is an INT8 Linear layer faster than the float16 one on this GPU (issue 40's INT8 transformers)?
// For BERT-base's four products at 128 tokens (batch 1) and 4096 tokens (batch 32) it times, as
// the builder times tactics (20 launches captured in a CUDA graph, the graph replayed, CUDA events
// around the replays), the best of cuBLASLt's heuristic candidates for:
//   fp16:      Y[M, N] = X[M, K] W[K, N] + bias, float16 in and out (what FP16 engines run);
//   i8->i32:   int8 X and W (W stored [N, K]), int32 out;
//   i8->i8:    int8 X and W, int8 out with a per-output-channel float scale and a float bias;
//   i8->i8 gelu: the same with cuBLASLt's GELU epilogue;
//   fp8->fp16: float8 e4m3 X and W, float16 out with bias (Hopper's other 8-bit path).
// Prints each variant's best time, its candidate count, or why cuBLASLt had none.
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "graph_timing.h"

namespace {

struct Variant {
  const char* name;
  cudaDataType_t ab, d;
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasLtEpilogue_t epilogue;
  bool alpha_vector;
};

// Column-major view of the row-major product: D[N, M] = op(A)[N, K] B[K, M] with A = W stored
// [N, K] row-major (transposed: "TN", what IMMA needs) or [K, N] (float16, not transposed).
void run_variant(cublasLtHandle_t lt, cudaStream_t s, const Variant& v, int64_t m, int64_t n, int64_t k, void* a,
                 void* b, void* d, void* bias, void* alpha_vec, void* ws, size_t ws_bytes) {
  const bool tn = v.ab != CUDA_R_16F;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatmulDescCreate(&op, v.compute, v.scale);
  const cublasOperation_t ta = tn ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &v.epilogue, sizeof v.epilogue);
  if (v.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    const cudaDataType_t bt = v.d == CUDA_R_8I ? CUDA_R_32F : CUDA_R_16F;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
  }
  if (v.alpha_vector) {
    const cublasLtPointerMode_t pm = CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof pm);
  }
  cublasLtMatrixLayout_t la, lb, lc;
  if (tn)
    cublasLtMatrixLayoutCreate(&la, v.ab, k, n, k);
  else
    cublasLtMatrixLayoutCreate(&la, v.ab, n, k, n);
  cublasLtMatrixLayoutCreate(&lb, v.ab, k, m, k);
  cublasLtMatrixLayoutCreate(&lc, v.d, n, m, n);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes);
  cublasLtMatmulHeuristicResult_t res[8];
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 8, res, &found);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    std::printf("  %-12s no candidate (status %d)\n", v.name, static_cast<int>(st));
  } else {
    const float one_f = 1.0f, zero_f = 0.0f;
    const int32_t one_i = 1, zero_i = 0;
    const void* alpha =
        v.alpha_vector ? alpha_vec : (v.scale == CUDA_R_32I ? static_cast<const void*>(&one_i) : &one_f);
    const void* beta = v.scale == CUDA_R_32I ? static_cast<const void*>(&zero_i) : &zero_f;
    double best = 1e30;
    int ok = 0;
    for (int i = 0; i < found; ++i) {
      const double ms = kiln::bench::graph_time_ms(s, [&] {
        return cublasLtMatmul(lt, op, alpha, a, la, b, lb, beta, d, lc, d, lc, &res[i].algo, ws, ws_bytes, s) ==
               CUBLAS_STATUS_SUCCESS;
      });
      if (ms < 0) continue;
      ++ok;
      if (ms < best) best = ms;
    }
    const double tops = 2.0 * m * n * k / (best * 1e-3) / 1e12;
    if (ok)
      std::printf("  %-12s %.4f ms (%.0f TOP/s), best of %d candidates\n", v.name, best, tops, ok);
    else
      std::printf("  %-12s %d candidates, none ran\n", v.name, found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
}

}  // namespace

int main() {
  cudaStream_t s;
  if (!kiln::bench::probe_stream(&s)) return 0;
  cublasLtHandle_t lt;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) return 1;
  const Variant variants[] = {
      {"fp16", CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUBLASLT_EPILOGUE_BIAS, false},
      {"i8->i32", CUDA_R_8I, CUDA_R_32I, CUBLAS_COMPUTE_32I, CUDA_R_32I, CUBLASLT_EPILOGUE_DEFAULT, false},
      {"i8->i8", CUDA_R_8I, CUDA_R_8I, CUBLAS_COMPUTE_32I, CUDA_R_32F, CUBLASLT_EPILOGUE_BIAS, true},
      {"i8->i8 gelu", CUDA_R_8I, CUDA_R_8I, CUBLAS_COMPUTE_32I, CUDA_R_32F, CUBLASLT_EPILOGUE_GELU_BIAS, true},
      {"fp8->fp16", CUDA_R_8F_E4M3, CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUBLASLT_EPILOGUE_BIAS, false},
  };
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  const Shape shapes[] = {{"qkv", 2304, 768}, {"out-proj", 768, 768}, {"ffn-in", 3072, 768}, {"ffn-out", 768, 3072}};
  void* ws = nullptr;
  const size_t ws_bytes = size_t{32} << 20;
  KILN_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
  for (const int64_t m : {int64_t{128}, int64_t{4096}}) {
    for (const Shape& sh : shapes) {
      const int64_t n = sh.n, k = sh.k;
      std::printf("%s [%lld, %lld] x [%lld, %lld]\n", sh.name, (long long)m, (long long)k, (long long)k, (long long)n);
      void *a, *b, *d, *bias, *alpha;
      KILN_CUDA_CHECK(cudaMalloc(&a, n * k * 2));
      KILN_CUDA_CHECK(cudaMalloc(&b, k * m * 2));
      KILN_CUDA_CHECK(cudaMalloc(&d, m * n * 4));
      KILN_CUDA_CHECK(cudaMalloc(&bias, n * 4));
      KILN_CUDA_CHECK(cudaMalloc(&alpha, n * 4));
      KILN_CUDA_CHECK(cudaMemset(a, 0, n * k * 2));
      KILN_CUDA_CHECK(cudaMemset(b, 0, k * m * 2));
      KILN_CUDA_CHECK(cudaMemset(bias, 0, n * 4));
      std::vector<float> ones(n, 1e-3f);
      KILN_CUDA_CHECK(cudaMemcpy(alpha, ones.data(), n * 4, cudaMemcpyHostToDevice));
      for (const Variant& v : variants) run_variant(lt, s, v, m, n, k, a, b, d, bias, alpha, ws, ws_bytes);
      cudaFree(a);
      cudaFree(b);
      cudaFree(d);
      cudaFree(bias);
      cudaFree(alpha);
    }
  }
  cublasLtDestroy(lt);
  return 0;
}
