// The CUDA kernel table: joins the family spans once, like runtime/cpu/kernels.cpp. Compiled only
// with KILN_HAVE_CUDA: kiln_runtime globs every src/runtime .cpp, also in CPU-only builds.
#if defined(KILN_HAVE_CUDA)

#include "runtime/cuda/gpu_kernels.h"

#include <array>
#include <string>

namespace kiln::gpu {

namespace {

// The family spans in OpFamily order (elementwise, reduce, norm, conv, gemm, pool, resize, tensor,
// rnn, quant, loss).
struct FamilySpan {
  OpFamily family;
  std::span<const GpuKernelEntry> entries;
};

struct GpuKernelTable {
  std::array<const GpuKernelEntry*, kOpCount> entries{};
  std::array<int, kOpCount> count{};
  std::string misplaced;  // ops registered by another family's span than their own
  GpuKernelTable() {
    const FamilySpan families[] = {
        {OpFamily::kElementwise, elementwise_gpu_kernels()},
        {OpFamily::kReduce, reduce_gpu_kernels()},
        {OpFamily::kNorm, norm_gpu_kernels()},
        {OpFamily::kConv, conv_gpu_kernels()},
        {OpFamily::kGemm, gemm_gpu_kernels()},
        {OpFamily::kPool, pool_gpu_kernels()},
        {OpFamily::kResize, resize_gpu_kernels()},
        {OpFamily::kTensor, tensor_gpu_kernels()},
        {OpFamily::kRnn, rnn_gpu_kernels()},
        {OpFamily::kQuant, quant_gpu_kernels()},
        {OpFamily::kLoss, loss_gpu_kernels()},
    };
    for (const FamilySpan& f : families) {
      for (const GpuKernelEntry& e : f.entries) {
        entries[static_cast<size_t>(e.kind)] = &e;
        ++count[static_cast<size_t>(e.kind)];
        const OpFamily own = op_info(e.kind).family;
        if (own != f.family)
          misplaced += std::string(op_info(e.kind).name) + " (family " + std::string(family_name(own)) +
                       ", registered by " + std::string(family_name(f.family)) + ") ";
      }
    }
  }
};

const GpuKernelTable& table() {
  static const GpuKernelTable t;
  return t;
}

}  // namespace

const GpuKernelEntry* gpu_kernel_entry(OpKind kind) { return table().entries[static_cast<size_t>(kind)]; }

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

bool gpu_kernel_table_valid(std::string* duplicates) {
  bool ok = true;
  for (size_t i = 0; i < kOpCount; ++i) {
    if (table().count[i] > 1) {
      ok = false;
      if (duplicates) *duplicates += std::string(kOpTable[i].name) + " ";
    }
  }
  if (!table().misplaced.empty()) {
    ok = false;
    if (duplicates) *duplicates += table().misplaced;
  }
  return ok;
}

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
