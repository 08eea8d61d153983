// CPU reference kernels: plain, obviously right, and fast enough to be a real fallback.
// Every OpKind has one. Output shapes were fixed by shape inference when the engine was built (and
// re-checked on load), so a kernel trusts the views it is given: output views have their final
// shapes and writable data. Kernels throw kiln::Error for data-dependent failures (an index out of
// range), never read or write out of bounds.
#pragma once

#include <span>

#include "core/op_kind.h"
#include "core/tensor.h"

namespace kiln::cpu {

class ThreadPool;

struct KernelEnv {
  ThreadPool* pool = nullptr;  // may be null: run single-threaded
};

using CpuKernel = void (*)(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs,
                           std::span<const TensorView> outputs, KernelEnv& env);

struct KernelEntry {
  OpKind kind;
  CpuKernel fn;
};

std::span<const KernelEntry> elementwise_kernels();
std::span<const KernelEntry> reduce_kernels();
std::span<const KernelEntry> nn_kernels();
std::span<const KernelEntry> tensor_kernels();
std::span<const KernelEntry> extra_kernels();
std::span<const KernelEntry> rnn_kernels();

// The kernel for kind, or null if the CPU backend does not support it.
CpuKernel cpu_kernel(OpKind kind);
bool kernel_table_complete(std::string* missing);

}  // namespace kiln::cpu
