// CUDA kernels: the GPU counterpart of the CPU kernel table (runtime/cpu/kernels.h), same calling
// convention. Output shapes were fixed by shape inference, exactly as for the CPU kernels; the
// views' data pointers are device pointers. A kernel only enqueues work on env.stream: it never
// synchronizes, never allocates device memory, and never reads device tensor data on the host.
// Inputs that are build-time constants (weights: Slice starts, Pad pads, Reshape targets, ...) are
// also given as host copies in env.host_in, which a kernel may read while it enqueues its work.
// A failed launch throws kiln::Error naming the op and carrying CUDA's error string. A data error
// that only the device can see (an index out of range) is written to *env.error (a GpuError code);
// the context reports it, naming the step, when it next synchronizes.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/op_kind.h"
#include "core/tensor.h"
#include "runtime/cuda/checks.h"

namespace kiln::gpu {

// Codes a kernel writes to *GpuEnv::error (device memory, 0 = no error). The first one sticks
// (kernels use atomicCAS(error, 0, code) or a plain store; either is fine: any non-zero is an error).
enum GpuError : int {
  kGpuOk = 0,
  kGpuIndexOutOfRange = 1,  // Gather/Scatter/OneHot/... index outside [-n, n)
  kGpuBadValue = 2,         // any other data-dependent failure the CPU kernel would throw for
};
const char* gpu_error_message(int code);

// Per-step state a kernel may keep between runs of one context (cuDNN descriptors, a cuBLASLt
// plan): created on the first call (host-only work, so also fine under stream capture).
struct StepState {
  virtual ~StepState() = default;
};

struct GpuEnv {
  cudaStream_t stream = nullptr;         // null: the legacy default stream
  cudnnHandle_t cudnn = nullptr;         // already bound to `stream`
  cublasLtHandle_t cublaslt = nullptr;
  void* workspace = nullptr;             // device scratch for this step only, 256-byte aligned
  size_t workspace_bytes = 0;            // at least what the entry's workspace() asked for
  int* error = nullptr;                  // device int for GpuError codes of this step (may be null)
  std::span<const void* const> host_in;  // per input: a host copy if it is a constant, else null
  int32_t tactic = -1;                   // the builder's timed choice for this step; -1: default
  std::unique_ptr<StepState>* state = nullptr;  // this step's slot in this context (may be null)

  // Host copy of input i, or null if it is not a build-time constant (or absent).
  const void* host(size_t i) const { return i < host_in.size() ? host_in[i] : nullptr; }
};

using GpuKernel = void (*)(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                           std::span<const TensorView> out, GpuEnv& env);
// Device scratch a step needs (bytes) for these shapes; data pointers are null, handles are set.
using GpuWorkspace = size_t (*)(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                                std::span<const TensorView> out, GpuEnv& env);

// The tactics a step may run with (e.g. cuDNN algorithm ids), best guess first; the builder times
// each on the device and records the fastest in the engine (env.tactic). Empty: only the default.
using GpuTactics = std::vector<int32_t> (*)(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                                            std::span<const TensorView> out, GpuEnv& env);

struct GpuKernelEntry {
  OpKind kind;
  GpuKernel fn;
  GpuWorkspace workspace = nullptr;  // null: needs none (called with env.tactic set)
  GpuTactics tactics = nullptr;      // null: one implementation
};

// One span per op family (OpInfo::family; the folder runtime/cuda/<family>/ defines it); the table
// joins them.
std::span<const GpuKernelEntry> elementwise_gpu_kernels();
std::span<const GpuKernelEntry> reduce_gpu_kernels();
std::span<const GpuKernelEntry> norm_gpu_kernels();
std::span<const GpuKernelEntry> conv_gpu_kernels();
std::span<const GpuKernelEntry> gemm_gpu_kernels();
std::span<const GpuKernelEntry> pool_gpu_kernels();
std::span<const GpuKernelEntry> resize_gpu_kernels();
std::span<const GpuKernelEntry> tensor_gpu_kernels();
std::span<const GpuKernelEntry> rnn_gpu_kernels();
std::span<const GpuKernelEntry> quant_gpu_kernels();
std::span<const GpuKernelEntry> loss_gpu_kernels();

// The entry for kind, or null if the CUDA backend does not support it.
const GpuKernelEntry* gpu_kernel_entry(OpKind kind);
// The kernel for kind, or null if the CUDA backend does not support it yet.
GpuKernel gpu_kernel(OpKind kind);
// False (and the problems appended to *duplicates) if an op has more than one entry, or if a
// family's span holds an op of another family (OpInfo::family): "Op (family F, registered by G) ".
bool gpu_kernel_table_valid(std::string* duplicates);

}  // namespace kiln::gpu
