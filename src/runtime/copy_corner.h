// Padding and slicing along ranged axes (range engines): a tensor of shape `from` copied into one
// of shape `to` of the same rank, both row-major. Each axis keeps its first min(from, to) indices;
// what `to` has beyond `from` is left as it is (callers zero it once) or set to zero.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/types.h"

namespace kiln::detail {

// Host memory. `zero_rest`: also write zeros where `to` has no counterpart in `from`.
void copy_corner(const void* src, const std::vector<int64_t>& from, void* dst, const std::vector<int64_t>& to,
                 size_t elem_bytes, bool zero_rest);

inline int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The bytes of a tensor of `shape` and `dtype` (a caller's input or output between buckets).
inline size_t byte_count(const std::vector<int64_t>& shape, DataType dtype) {
  return static_cast<size_t>(element_count(shape)) * dtype_size(dtype);
}

}  // namespace kiln::detail
