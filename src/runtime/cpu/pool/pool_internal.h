// What the pool family's CPU files (pool/*.cpp in this folder) share: AveragePool / MaxPool's
// kernel (window.cpp), which the channels-last pools (nhwc.cpp) run, and each file's entries,
// joined by registry.cpp.
#pragma once

#include <span>

#include "runtime/cpu/kernels.h"

namespace kiln::cpu::pool {

// AveragePool and MaxPool (window.cpp).
void pool_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                 KernelEnv& env);

std::span<const KernelEntry> window_kernel_entries();  // window.cpp
std::span<const KernelEntry> global_kernel_entries();  // global.cpp
std::span<const KernelEntry> nhwc_kernel_entries();    // nhwc.cpp

}  // namespace kiln::cpu::pool
