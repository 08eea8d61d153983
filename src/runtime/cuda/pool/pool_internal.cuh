// Shared pieces of the pool family's CUDA kernels (private to src/runtime/cuda/pool/*.cu): the
// per-file entry spans and the elementwise helpers they use; the device helpers they share with
// the norm and resize families are in device_math.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <span>

#include "runtime/cuda/device_math.cuh"
#include "runtime/cuda/elementwise/elementwise_internal.cuh"

namespace kiln::gpu::pool {

using ew::Compute;
using ew::kThreads;
using ew::load;
using ew::store;

// The spans of the pool/*.cu files; registry.cu joins them.
std::span<const GpuKernelEntry> window_entries();  // window.cu: MaxPool, AveragePool
std::span<const GpuKernelEntry> global_entries();  // global.cu: GlobalAveragePool, GlobalMaxPool
std::span<const GpuKernelEntry> nhwc_entries();    // nhwc.cu: NhwcMaxPool, NhwcAveragePool

using ew::FloatAcc;

}  // namespace kiln::gpu::pool
