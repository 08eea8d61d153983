// What the tensor family's CPU files (the files in this folder) share: layout.cpp's strided copy,
// which depth_space.cpp runs too, and each file's entries, joined by registry.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/cpu/kernels.h"

namespace kiln::cpu::tensor_ops {

// dst (contiguous, shape `shape`) = the view of src with element strides `strides` (layout.cpp).
void strided_copy(DataType dt, std::vector<int64_t> shape, std::vector<int64_t> strides, const void* src, void* dst,
                  KernelEnv& env);

std::span<const KernelEntry> view_kernel_entries();         // view.cpp
std::span<const KernelEntry> layout_kernel_entries();       // layout.cpp
std::span<const KernelEntry> depth_space_kernel_entries();  // depth_space.cpp
std::span<const KernelEntry> index_kernel_entries();        // index.cpp
std::span<const KernelEntry> gen_kernel_entries();          // gen.cpp
std::span<const KernelEntry> select_kernel_entries();       // select.cpp

}  // namespace kiln::cpu::tensor_ops
