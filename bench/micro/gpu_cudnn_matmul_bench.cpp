// Does cuDNN's graph API fuse a transformer layer's products with their epilogues (bias,
// erf GELU, residual) into kernels faster than cuBLASLt's product plus Kiln's epilogue kernel? For
// each of BERT-base's four products at batch 1 (128 tokens, float16) it builds the operation graph
// matmul -> add bias -> GELU or add residual, and times every engine configuration cuDNN's
// heuristics list, as the builder times tactics: 20 launches captured in a CUDA graph, the graph
// replayed, CUDA events around the replays. Prints one line per candidate (or why it failed).
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "graph_timing.h"
#include "runtime/cuda/nn_gemm.h"
#include "runtime/cuda/nn_internal.cuh"
#include "runtime/cuda/quant/conv/cudnn_graph.cuh"

namespace cg = kiln::gpu::cudnn_graph;

namespace {

struct Shape {
  const char* name;
  int64_t m, n, k;
  bool gelu, residual;
};

}  // namespace

int main() {
  cudaStream_t s;
  if (!kiln::bench::probe_stream(&s)) return 0;
  cudnnHandle_t h;
  if (cudnnCreate(&h) != CUDNN_STATUS_SUCCESS) return 1;
  cudnnSetStream(h, s);
  cublasLtHandle_t lt;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) return 1;
  const Shape shapes[] = {{"qkv", 128, 2304, 768, false, false},
                          {"out-proj + residual", 128, 768, 768, false, true},
                          {"ffn-in + erf GELU", 128, 3072, 768, true, false},
                          {"ffn-out + residual", 128, 768, 3072, false, true}};
  void* ws = nullptr;
  const size_t ws_bytes = size_t{64} << 20;
  KILN_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
  for (const Shape& sh : shapes) {
    const int64_t m = sh.m, n = sh.n, k = sh.k;
    void *a, *b, *bias, *z, *y;
    KILN_CUDA_CHECK(cudaMalloc(&a, m * k * 2));
    KILN_CUDA_CHECK(cudaMalloc(&b, k * n * 2));
    KILN_CUDA_CHECK(cudaMalloc(&bias, n * 2));
    KILN_CUDA_CHECK(cudaMalloc(&z, m * n * 2));
    KILN_CUDA_CHECK(cudaMalloc(&y, m * n * 2));
    KILN_CUDA_CHECK(cudaMemset(a, 0, m * k * 2));
    KILN_CUDA_CHECK(cudaMemset(b, 0, k * n * 2));
    KILN_CUDA_CHECK(cudaMemset(bias, 0, n * 2));
    KILN_CUDA_CHECK(cudaMemset(z, 0, m * n * 2));
    const int64_t da[] = {1, m, k}, sa[] = {m * k, k, 1}, db[] = {1, k, n}, sb[] = {k * n, n, 1};
    const int64_t dy[] = {1, m, n}, sy[] = {m * n, n, 1}, dbias[] = {1, 1, n}, sbias[] = {n, n, 1};
    // What an engine runs today: cuBLASLt with its bias epilogue and the residual as C, Kiln's
    // epilogue kernel after it for the erf GELU.
    {
      kiln::gpu::GemmDesc d;
      d.dtype = kiln::DataType::kFloat16;
      d.m = m, d.n = n, d.k = k, d.bias = true;
      kiln::gpu::GemmPlan plan(lt, d);
      kiln::EpilogueAttrs gelu;
      gelu.activation = kiln::Activation::kGelu;
      for (int i = 0; i < plan.algo_count(); ++i) {
        const double ms = kiln::bench::graph_time_ms(s, [&] {
          plan.run(s, i, 1.0, a, b, sh.residual ? 1.0 : 0.0, sh.residual ? z : nullptr, y, bias, ws, ws_bytes);
          if (sh.gelu)
            kiln::gpu::nn::apply_epilogue(y, nullptr, nullptr, gelu, m * n, 1, n, kiln::DataType::kFloat16, s, "probe");
        });
        std::printf("  cuBLASLt %d%s: %.4f ms\n", i, sh.gelu ? " + GELU kernel" : "", ms);
      }
    }
    try {
      cg::Desc ta = cg::tensor(1, CUDNN_DATA_HALF, da, sa);
      cg::Desc tb = cg::tensor(2, CUDNN_DATA_HALF, db, sb);
      cg::Desc tbias = cg::tensor(3, CUDNN_DATA_HALF, dbias, sbias);
      cg::Desc tz = cg::tensor(4, CUDNN_DATA_HALF, dy, sy);
      cg::Desc ty = cg::tensor(5, CUDNN_DATA_HALF, dy, sy);
      cg::Desc t1 = cg::tensor(10, CUDNN_DATA_FLOAT, dy, sy, true);
      cg::Desc t2 = cg::tensor(11, CUDNN_DATA_FLOAT, dy, sy, true);
      std::vector<cg::Desc> ops;
      ops.push_back(cg::matmul(ta, tb, t1, CUDNN_DATA_FLOAT));
      const bool more = sh.gelu || sh.residual;
      ops.push_back(cg::pointwise(CUDNN_POINTWISE_ADD, t1, &tbias, more ? t2 : ty));
      if (sh.gelu) ops.push_back(cg::pointwise(CUDNN_POINTWISE_GELU_FWD, t2, nullptr, ty));
      if (sh.residual) ops.push_back(cg::pointwise(CUDNN_POINTWISE_ADD, t2, &tz, ty));
      std::vector<const cg::Desc*> raw;
      for (const cg::Desc& d : ops) raw.push_back(&d);
      cg::Graph graph(h, raw, ws_bytes, sh.name);
      graph.prepare_all();
      std::vector<int64_t> uids = {1, 2, 3, 5};
      std::vector<void*> data = {a, b, bias, y};
      if (sh.residual) {
        uids.push_back(4);
        data.push_back(z);
      }
      std::printf("%s [%lld, %lld] x [%lld, %lld]: %zu candidates\n", sh.name, (long long)m, (long long)k, (long long)k,
                  (long long)n, graph.candidates());
      for (size_t i = 0; i < graph.candidates(); ++i) {
        if (!graph.builds(i)) {
          std::printf("  candidate %zu: does not build\n", i);
          continue;
        }
        const double ms = kiln::bench::graph_time_ms(s, [&] { graph.run(h, i, uids, data, ws); });
        std::printf("  candidate %zu: %.4f ms\n", i, ms);
      }
    } catch (const std::exception& e) {
      std::printf("%s: %s\n", sh.name, e.what());
    }
    cudaFree(a);
    cudaFree(b);
    cudaFree(bias);
    cudaFree(z);
    cudaFree(y);
  }
  cudnnDestroy(h);
  return 0;
}
