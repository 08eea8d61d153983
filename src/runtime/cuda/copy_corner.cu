#include <cuda_runtime.h>

#include <algorithm>

#include "kiln/types.h"
#include "runtime/cuda/checks.h"
#include "runtime/cuda/copy_corner.h"

namespace kiln::gpu {

namespace {

constexpr int kMaxRank = 8;

struct Shapes {
  int rank;
  int64_t from[kMaxRank], to[kMaxRank];
};

// One thread per element of dst; T is the unit the innermost axis is counted in.
template <class T>
__global__ void copy_corner_kernel(const T* __restrict__ src, T* __restrict__ dst, Shapes s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t rest = i, src_index = 0, src_stride = 1;
    bool inside = true;
    for (int a = s.rank - 1; a >= 0; --a) {
      const int64_t c = rest % s.to[a];
      rest /= s.to[a];
      inside &= c < s.from[a];
      src_index += c * src_stride;
      src_stride *= s.from[a];
    }
    dst[i] = inside ? src[src_index] : T{};
  }
}

template <class T>
void launch(const void* src, void* dst, const Shapes& s, int64_t n, cudaStream_t stream) {
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 65535);
  copy_corner_kernel<T>
      <<<static_cast<unsigned>(blocks), threads, 0, stream>>>(static_cast<const T*>(src), static_cast<T*>(dst), s, n);
}

}  // namespace

void copy_corner_device(const void* src, const std::vector<int64_t>& from_shape, void* dst,
                        const std::vector<int64_t>& to_shape, size_t elem_bytes, CUstream_st* stream) {
  // Trailing axes of the same size in both are one element of the axis before them.
  size_t rank = from_shape.size();
  while (rank > 1 && from_shape[rank - 1] == to_shape[rank - 1]) elem_bytes *= static_cast<size_t>(from_shape[--rank]);
  if (rank > static_cast<size_t>(kMaxRank)) throw Error("copy_corner_device: rank above 8");
  Shapes s{static_cast<int>(rank), {}, {}};
  int64_t n = 1;
  for (size_t a = 0; a < rank; ++a) {
    s.from[a] = from_shape[a];
    s.to[a] = to_shape[a];
    n *= to_shape[a];
  }
  // The innermost axis counted in the widest unit that divides an element.
  size_t unit = 16;
  while (elem_bytes % unit != 0 || reinterpret_cast<uintptr_t>(src) % unit != 0 ||
         reinterpret_cast<uintptr_t>(dst) % unit != 0)
    unit /= 2;
  const auto per = static_cast<int64_t>(elem_bytes / unit);
  if (rank == 0) {
    s.rank = 1;
    s.from[0] = s.to[0] = 1;
  }
  s.from[s.rank - 1] *= per;
  s.to[s.rank - 1] *= per;
  n *= per;
  if (n == 0) return;
  auto st = static_cast<cudaStream_t>(stream);
  switch (unit) {
    case 16: launch<uint4>(src, dst, s, n, st); break;
    case 8: launch<uint2>(src, dst, s, n, st); break;
    case 4: launch<uint32_t>(src, dst, s, n, st); break;
    case 2: launch<uint16_t>(src, dst, s, n, st); break;
    default: launch<uint8_t>(src, dst, s, n, st); break;
  }
  check_launch("padding or slicing a range engine's input or output");
}

}  // namespace kiln::gpu
