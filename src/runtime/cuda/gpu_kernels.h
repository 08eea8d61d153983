// CUDA kernels: the GPU counterpart of the CPU kernel table (runtime/cpu/kernels.h), same calling
// convention. Output shapes were fixed by shape inference, exactly as for the CPU kernels; the
// views' data pointers are device pointers. A kernel only enqueues work on env.stream: it never
// synchronizes, never allocates, and never reads tensor data on the host (so inputs that the CPU
// kernels read on the host, such as Clip's bounds, are read by the device code). A failed launch
// throws kiln::Error naming the op and carrying CUDA's error string.
#pragma once

#include <cuda_runtime_api.h>

#include <span>
#include <string>
#include <string_view>

#include "core/op_kind.h"
#include "core/tensor.h"

namespace kiln::gpu {

struct GpuEnv {
  cudaStream_t stream = nullptr;  // null: the legacy default stream
};

using GpuKernel = void (*)(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                           std::span<const TensorView> out, GpuEnv& env);

struct GpuKernelEntry {
  OpKind kind;
  GpuKernel fn;
};

// One span per op family (the CPU table's families); families without GPU kernels yet have none.
std::span<const GpuKernelEntry> elementwise_gpu_kernels();

// The kernel for kind, or null if the CUDA backend does not support it yet.
GpuKernel gpu_kernel(OpKind kind);
// False (and the duplicated ops appended to *duplicates) if an op has more than one entry.
bool gpu_kernel_table_valid(std::string* duplicates);

// Throws kiln::Error "<what>: <CUDA error string>" unless err is cudaSuccess.
void check_cuda(cudaError_t err, std::string_view what);
// After a kernel launch: reports a bad launch (configuration, missing sm_90 image, ...) without
// synchronizing. cudaGetLastError also returns an earlier asynchronous failure of this thread.
void check_launch(std::string_view what);

}  // namespace kiln::gpu
