// Row-major GEMM through cuBLASLt, for the Gemm/MatMul kernels and for other GPU code that needs
// a matrix product on the stream (the RNN kernels, say):
//   D = act(alpha * op(A) op(B) + beta * C (+ a bias per column)), for `batch` matrices at fixed
//   strides, act one of cuBLASLt's epilogue activations (Relu, or GELU's tanh approximation).
// float32 runs with CUBLAS_COMPUTE_32F (never TF32), float16 as half A/B/C/D with float
// accumulation (split-K partial sums are kept in float, never in half), float64 in double.
// cuBLASLt is column-major: the row-major product is computed as D^T = op(B)^T op(A)^T.
//
// GemmPlan holds the descriptors and the heuristic's algorithms (host-only work, fine under
// stream capture) so that a step can keep one and run it again; gemm_rowmajor() is the one-off.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace kiln::gpu {

// The Gemm tactic of Kiln's GEMV for small batches (gemm/gemv.cu), next to cuBLASLt's algorithm
// indices 0-7.
inline constexpr int32_t kGemvTactic = 64;
// The Gemm/MatMul tactics of cuDNN's fused products (gemm/cudnn_matmul.cu): kCudnnTactic + the index
// of an engine configuration cuDNN's heuristics list.
inline constexpr int32_t kCudnnTactic = 80;
inline constexpr int32_t kCudnnTactics = 8;

// Workspace that lets cuBLASLt choose its fastest kernels (what NVIDIA recommends for Hopper).
inline constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;

// cuBLASLt's epilogue activations. kGeluTanh: cuBLASLt's GELU is the tanh approximation (PyTorch
// uses it only for gelu(approximate="tanh")).
enum class GemmActivation : uint8_t { kNone, kRelu, kGeluTanh };

struct GemmDesc {
  DataType dtype = DataType::kFloat32;  // float32, float16, bfloat16 or float64
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;                        // op(A) is [m, k], op(B) [k, n], D [m, n]; all > 0
  int64_t lda = 0, ldb = 0, ldc = 0;                  // row strides in elements; 0: packed. C and D share ldc
  int64_t batch = 1;                                  // strided batch: matrix i at A + i * stride_a, ...
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;   // elements; 0 repeats one matrix (not for C)
  bool bias = false;                                  // add a vector of n values to every row of D (BIAS epilogue)
  GemmActivation activation = GemmActivation::kNone;  // applied last, after C and the bias
  bool float_out = false;                             // C and D in float32 (float16/bfloat16 A and B)
};

// Least alignment (bytes) of the pointers a plan will run with; the heuristic leaves out kernels
// that need more. 16 is what every pointer of a Kiln engine has.
struct GemmAlignment {
  uint32_t a = 16, b = 16, c = 16, bias = 16;
};

class GemmPlan {
 public:
  // Asks the heuristic for up to `max_algos` algorithms that need at most max_workspace bytes.
  GemmPlan(cublasLtHandle_t lt, const GemmDesc& d, GemmAlignment align = {}, size_t max_workspace = kGemmWorkspaceBytes,
           int max_algos = 8);
  ~GemmPlan();
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;

  // Algorithms found, best first; 0 if cuBLASLt has none (run() then throws).
  int algo_count() const { return static_cast<int>(algos_.size()); }
  // Workspace bytes of algorithm `index` (clamped to the range; 0 when there is none).
  size_t workspace(int index) const;
  // Whether some algorithm runs within workspace_bytes.
  bool fits(size_t workspace_bytes) const;
  // Enqueues the product with algorithm `index` (out of range: the first). c may be d (in place)
  // and is not read when beta is 0; bias is read only with GemmDesc::bias. If workspace_bytes is
  // too small for that algorithm, the first one that fits runs instead.
  void run(cudaStream_t stream, int index, double alpha, const void* a, const void* b, double beta, const void* c,
           void* d, const void* bias, void* workspace, size_t workspace_bytes) const;

 private:
  void build(GemmAlignment align, size_t max_workspace, int max_algos);
  void release();

  cublasLtHandle_t lt_;
  GemmDesc desc_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, lc_ = nullptr;
  // A named struct: nvcc 13.0 crashes destroying a vector of cuBLASLt's anonymous-struct typedefs.
  struct Algo {
    cublasLtMatmulAlgo_t algo;
    size_t workspace;
  };
  std::vector<Algo> algos_;
};

// One product, planned and run on the spot (a few microseconds of host work per call).
void gemm_rowmajor(cublasLtHandle_t lt, cudaStream_t stream, const GemmDesc& d, float alpha, const void* a,
                   const void* b, float beta, void* c, void* workspace, size_t workspace_bytes);

}  // namespace kiln::gpu
