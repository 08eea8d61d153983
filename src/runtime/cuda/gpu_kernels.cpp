// The CUDA kernel table: joins the family spans once, like runtime/cpu/kernels.cpp. Compiled only
// with KILN_HAVE_CUDA: kiln_runtime globs every src/runtime .cpp, also in CPU-only builds.
#if defined(KILN_HAVE_CUDA)

#include "runtime/cuda/gpu_kernels.h"

#include <array>

namespace kiln::gpu {

namespace {

struct GpuKernelTable {
  std::array<GpuKernel, kOpCount> fns{};
  std::array<int, kOpCount> count{};
  GpuKernelTable() {
    for (auto entries : {elementwise_gpu_kernels()}) {
      for (const GpuKernelEntry& e : entries) {
        fns[static_cast<size_t>(e.kind)] = e.fn;
        ++count[static_cast<size_t>(e.kind)];
      }
    }
  }
};

const GpuKernelTable& table() {
  static const GpuKernelTable t;
  return t;
}

}  // namespace

GpuKernel gpu_kernel(OpKind kind) { return table().fns[static_cast<size_t>(kind)]; }

bool gpu_kernel_table_valid(std::string* duplicates) {
  bool ok = true;
  for (size_t i = 0; i < kOpCount; ++i) {
    if (table().count[i] > 1) {
      ok = false;
      if (duplicates) *duplicates += std::string(kOpTable[i].name) + " ";
    }
  }
  return ok;
}

void check_cuda(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return;
  throw Error(std::string(what) + ": " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

void check_launch(std::string_view what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw Error(std::string(what) + ": CUDA kernel launch failed: " + cudaGetErrorName(err) + ": " +
                cudaGetErrorString(err));
}

}  // namespace kiln::gpu

#endif  // KILN_HAVE_CUDA
