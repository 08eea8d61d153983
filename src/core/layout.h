// Channels-first ([N, C, S...]) and channels-last ([N, S..., C]) shapes and the permutation
// between them, for the channels-last ops (NhwcConv, NhwcQConv, the Nhwc pools): their shape
// inference, the CPU kernels that run the channels-first twins, the GPU plans and the passes that
// make them. Rank 3 and more (one spatial axis or several).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kiln {

// [N, C, S...] -> [N, S..., C]
inline std::vector<int64_t> channels_last_shape(std::span<const int64_t> s) {
  std::vector<int64_t> out{s[0]};
  out.insert(out.end(), s.begin() + 2, s.end());
  out.push_back(s[1]);
  return out;
}

// [N, S..., C] -> [N, C, S...]
inline std::vector<int64_t> channels_first_shape(std::span<const int64_t> s) {
  std::vector<int64_t> out{s[0], s.back()};
  out.insert(out.end(), s.begin() + 1, s.end() - 1);
  return out;
}

// Transpose's perm from channels-first to channels-last for `rank` axes: [0, 2, ..., rank - 1, 1].
inline std::vector<int64_t> channels_last_perm(std::size_t rank) {
  std::vector<int64_t> p{0};
  for (std::size_t i = 2; i < rank; ++i) p.push_back(static_cast<int64_t>(i));
  p.push_back(1);
  return p;
}

}  // namespace kiln
