// CPU reference kernels: plain, obviously right, and fast enough to be a real fallback.
// Every OpKind has one. Output shapes were fixed by shape inference when the engine was built (and
// re-checked on load), so a kernel trusts the views it is given: output views have their final
// shapes and writable data. Kernels throw kiln::Error for data-dependent failures (an index out of
// range), never read or write out of bounds.
#pragma once

#include <memory>
#include <span>

#include "core/op_kind.h"
#include "core/tensor.h"

namespace kiln::cpu {

class ThreadPool;

struct KernelEnv {
  ThreadPool* pool = nullptr;  // may be null: run single-threaded
  // The step's own slot in its context, kept across runs (a library's primitive, weights in its
  // layout: runtime/cpu/onednn.h); null where the kernel is called outside a context.
  std::shared_ptr<void>* state = nullptr;
};

using CpuKernel = void (*)(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs,
                           std::span<const TensorView> outputs, KernelEnv& env);

struct KernelEntry {
  OpKind kind;
  CpuKernel fn;
};

// Each op family's kernels (OpInfo::family), registered from runtime/cpu/<family>/: in
// <family>/<family>.cpp where that is one of the family's files, else in <family>/registry.cpp.
std::span<const KernelEntry> elementwise_kernels();
std::span<const KernelEntry> reduce_kernels();
std::span<const KernelEntry> norm_kernels();
std::span<const KernelEntry> conv_kernels();
std::span<const KernelEntry> gemm_kernels();
std::span<const KernelEntry> pool_kernels();
std::span<const KernelEntry> resize_kernels();
std::span<const KernelEntry> tensor_kernels();
std::span<const KernelEntry> rnn_kernels();
std::span<const KernelEntry> quant_kernels();
std::span<const KernelEntry> loss_kernels();

// The kernel for kind, or null if the CPU backend does not support it.
CpuKernel cpu_kernel(OpKind kind);
// True when every op has exactly one kernel and every family registers only ops of its own family;
// else false, with the ops at fault (and their counts, or the family that registered each where it
// does not belong) appended to *missing.
bool kernel_table_complete(std::string* missing);

}  // namespace kiln::cpu
