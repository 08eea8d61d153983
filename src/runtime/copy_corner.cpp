#include "runtime/copy_corner.h"

#include <algorithm>
#include <cstring>

namespace kiln::detail {

namespace {

// Axis `axis` onwards; src and dst point at the start of the current block of each.
void copy_axis(const uint8_t* src, const std::vector<int64_t>& from, uint8_t* dst, const std::vector<int64_t>& to,
               size_t axis, const std::vector<size_t>& src_stride, const std::vector<size_t>& dst_stride,
               size_t elem_bytes, bool zero_rest) {
  const int64_t common = std::min(from[axis], to[axis]);
  if (axis + 1 == from.size()) {
    std::memcpy(dst, src, static_cast<size_t>(common) * elem_bytes);
    if (zero_rest && to[axis] > common)
      std::memset(dst + common * elem_bytes, 0, static_cast<size_t>(to[axis] - common) * elem_bytes);
    return;
  }
  for (int64_t k = 0; k < common; ++k)
    copy_axis(src + k * src_stride[axis], from, dst + k * dst_stride[axis], to, axis + 1, src_stride, dst_stride,
              elem_bytes, zero_rest);
  if (zero_rest && to[axis] > common)
    std::memset(dst + common * dst_stride[axis], 0, static_cast<size_t>(to[axis] - common) * dst_stride[axis]);
}

}  // namespace

void copy_corner(const void* src, const std::vector<int64_t>& from_shape, void* dst,
                 const std::vector<int64_t>& to_shape, size_t elem_bytes, bool zero_rest) {
  // Trailing axes of the same size in both are one element of the axis before them.
  size_t rank = from_shape.size();
  while (rank > 0 && from_shape[rank - 1] == to_shape[rank - 1]) elem_bytes *= static_cast<size_t>(from_shape[--rank]);
  if (rank == 0) {
    std::memcpy(dst, src, elem_bytes);
    return;
  }
  const std::vector<int64_t> from(from_shape.begin(), from_shape.begin() + static_cast<std::ptrdiff_t>(rank));
  const std::vector<int64_t> to(to_shape.begin(), to_shape.begin() + static_cast<std::ptrdiff_t>(rank));
  std::vector<size_t> src_stride(from.size()), dst_stride(to.size());
  size_t s = elem_bytes, d = elem_bytes;
  for (size_t a = from.size(); a-- > 0;) {
    src_stride[a] = s;
    dst_stride[a] = d;
    s *= static_cast<size_t>(from[a]);
    d *= static_cast<size_t>(to[a]);
  }
  if (element_count(to) == 0) return;
  if (element_count(from) == 0 || std::min(from[0], to[0]) == 0) {
    if (zero_rest) std::memset(dst, 0, d);
    return;
  }
  copy_axis(static_cast<const uint8_t*>(src), from, static_cast<uint8_t*>(dst), to, 0, src_stride, dst_stride,
            elem_bytes, zero_rest);
}

}  // namespace kiln::detail
