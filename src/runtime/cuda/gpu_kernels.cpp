// The CUDA kernel table: the family registries joined by core/op_registry.h, like the CPU's. Compiled only
// with KILN_HAVE_CUDA: kiln_runtime globs every src/runtime .cpp, also in CPU-only builds.
#if defined(KILN_HAVE_CUDA)

#include "runtime/cuda/gpu_kernels.h"

#include <string>

#include "core/op_registry.h"

namespace kiln::gpu {

namespace {

const OpRegistry<GpuKernelEntry>& table() {
  static const OpRegistry<GpuKernelEntry> t({elementwise_gpu_kernels(), reduce_gpu_kernels(), norm_gpu_kernels(),
                                             conv_gpu_kernels(), gemm_gpu_kernels(), pool_gpu_kernels(),
                                             resize_gpu_kernels(), tensor_gpu_kernels(), rnn_gpu_kernels(),
                                             quant_gpu_kernels(), loss_gpu_kernels()});
  return t;
}

}  // namespace

const GpuKernelEntry* gpu_kernel_entry(OpKind kind) { return table().find(kind); }

GpuKernel gpu_kernel(OpKind kind) {
  const GpuKernelEntry* e = gpu_kernel_entry(kind);
  return e ? e->fn : nullptr;
}

const char* gpu_error_message(int code) {
  switch (code) {
    case kGpuOk: return "no error";
    case kGpuIndexOutOfRange: return "an index is out of range";
    case kGpuBadValue: return "an input holds a value the op cannot take";
  }
  return "unknown device error";
}

// Not every op needs a GPU kernel here (the coverage test requires one for each).
bool gpu_kernel_table_valid(std::string* duplicates) { return table().check(false, duplicates); }

void check_cuda(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return;
  throw Error(std::string(what) + ": " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

void check_cudnn(cudnnStatus_t st, std::string_view what) {
  if (st == CUDNN_STATUS_SUCCESS) return;
  throw Error(std::string(what) + ": cuDNN: " + cudnnGetErrorString(st));
}

void check_cublas(cublasStatus_t st, std::string_view what) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  throw Error(std::string(what) + ": cuBLASLt: " + cublasLtGetStatusString(st));
}

void check_launch(std::string_view what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw Error(std::string(what) + ": CUDA kernel launch failed: " + cudaGetErrorName(err) + ": " +
                cudaGetErrorString(err));
}

}  // namespace kiln::gpu

#endif  // KILN_HAVE_CUDA
