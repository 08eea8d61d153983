// The CPU side of the channels-last ops (NhwcConv in conv/conv.cpp, NhwcAveragePool and NhwcMaxPool
// in pool/nhwc.cpp, NhwcQConv in quant/conv.cpp). The channels-last pass makes them for GPU
// engines, where the layout pays; here they only keep such graphs runnable (and testable)
// everywhere: the data inputs are permuted to channels-first ([N, S..., C] -> [N, C, S...], the
// convolutions' W and Z too), the channels-first kernel runs, and its output is permuted back.
// Plainly correct, not fast. These are the permutations they share.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "core/layout.h"
#include "core/shape_infer.h"
#include "core/tensor.h"

namespace kiln::cpu::channels_last {

// A tensor with its own storage, viewed with `shape`.
struct Owned {
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  TensorView view(DataType dt) { return TensorView{dt, shape, bytes.data(), true}; }
};

// Moves the channel axis: to_last [N, C, S] -> [N, S, C], else [N, S, C] -> [N, C, S] (S the
// spatial axes flattened; `from` has shape [n, a, b] with (a, b) = (C, S) or (S, C)).
inline void swap_inner(const uint8_t* from, uint8_t* to, int64_t n, int64_t a, int64_t b, size_t es) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < a; ++p)
      for (int64_t q = 0; q < b; ++q)
        std::memcpy(to + static_cast<size_t>((i * b + q) * a + p) * es,
                    from + static_cast<size_t>((i * a + p) * b + q) * es, es);
}

inline Owned to_first(const TensorView& t) {
  Owned o;
  const int64_t c = t.shape.back();
  o.shape = channels_first_shape(t.shape);
  o.bytes.resize(t.bytes());
  const int64_t s = t.shape[0] * c > 0 ? t.numel() / (t.shape[0] * c) : 0;
  swap_inner(static_cast<const uint8_t*>(t.data), o.bytes.data(), t.shape[0], s, c, dtype_size(t.dtype));
  return o;
}

inline void to_last(const TensorView& first, const TensorView& out) {
  const int64_t c = first.shape[1];
  const int64_t s = first.shape[0] * c > 0 ? first.numel() / (first.shape[0] * c) : 0;
  swap_inner(static_cast<const uint8_t*>(first.data), static_cast<uint8_t*>(out.data), first.shape[0], c, s,
             dtype_size(first.dtype));
}

// Runs kernel(inputs, y) on channels-first copies of the inputs of `kind` that
// nhwc_permuted_inputs names (the others as they are; also input 0 when x_first says it is
// channels-first already) and writes y, permuted back to channels-last, to out: the whole CPU
// kernel of a channels-last op that has a channels-first twin.
template <class Kernel>
void run_channels_first(OpKind kind, std::span<const TensorView> in, const TensorView& out, Kernel&& kernel,
                        bool x_first = false) {
  const std::vector<size_t> permuted = nhwc_permuted_inputs(kind);
  std::vector<Owned> owned;
  owned.reserve(permuted.size());  // the views below point into owned's elements
  std::vector<TensorView> ins(in.begin(), in.end());
  for (size_t i : permuted) {
    if (i >= in.size() || !in[i].exists || (x_first && i == 0)) continue;
    owned.push_back(to_first(in[i]));
    ins[i] = owned.back().view(in[i].dtype);
  }
  Owned y;
  y.shape = channels_first_shape(out.shape);
  y.bytes.resize(out.bytes());
  const TensorView yv = y.view(out.dtype);
  kernel(std::span<const TensorView>(ins), yv);
  to_last(yv, out);
}

}  // namespace kiln::cpu::channels_last
