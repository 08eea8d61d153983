// Padding and slicing on the GPU for range engines: the device twin of runtime/copy_corner.h. Every
// element of `dst` (shape `to`) is written: from `src` (shape `from`, same rank) where both have
// it, zero elsewhere. Enqueued on `stream`; throws kiln::Error for a bad launch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

struct CUstream_st;

namespace kiln::gpu {

void copy_corner_device(const void* src, const std::vector<int64_t>& from, void* dst, const std::vector<int64_t>& to,
                        size_t elem_bytes, CUstream_st* stream);

}  // namespace kiln::gpu
