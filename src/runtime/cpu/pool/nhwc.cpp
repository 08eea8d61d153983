// NhwcAveragePool and NhwcMaxPool on the CPU: the channels-last pass makes them for GPU engines;
// here the input is permuted to channels-first (runtime/cpu/channels_last.h), AveragePool / MaxPool
// (window.cpp) runs, and its output is permuted back: plainly correct, not fast; float32 pools
// run in oneDNN where Kiln has it (runtime/cpu/onednn.h), as CPU engines' channels-last pools do,
// and 8-bit MaxPool (INT8 engines) in this file's channels-last loop.
#include <algorithm>
#include <array>
#include <limits>
#include <vector>

#include "core/infer/nn_geometry.h"
#include "core/layout.h"
#include "core/shape_infer.h"
#include "runtime/cpu/channels_last.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/onednn.h"
#include "runtime/cpu/pool/pool_internal.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln::cpu::pool {

namespace {

// dst[e] = max(dst[e], src[e]) for e < n. Clones for AVX2: baseline x86-64 (SSE2) has no signed
// byte maximum, so the default build would not vectorize it.
#if defined(__x86_64__)
[[gnu::target_clones("avx2", "default")]]
#endif
void max_into(int8_t* __restrict dst, const int8_t* __restrict src, int64_t n) {
  for (int64_t e = 0; e < n; ++e) dst[e] = std::max(dst[e], src[e]);
}
#if defined(__x86_64__)
[[gnu::target_clones("avx2", "default")]]
#endif
void max_into(uint8_t* __restrict dst, const uint8_t* __restrict src, int64_t n) {
  for (int64_t e = 0; e < n; ++e) dst[e] = std::max(dst[e], src[e]);
}

// MaxPool on channels-last 8-bit integers (the maximum is exact in any order), one output row at a
// time, in whole rows of W * C contiguous values so that every loop vectorizes whatever C is:
//   1. the elementwise maximum of the window's input rows, into a row buffer whose pads (and the
//      columns a ceil_mode window passes) hold the type's lowest value;
//   2. the maximum over the window's columns at every column (the row shifted by each tap);
//   3. every stride-th column of that, one channel vector each, is the output row.
// INT8 engines' max pools run here: oneDNN 2.6's int8 pooling took 1.0-1.1 ms for LeNet-5's first
// pool at batch 256 (6 channels), 5 times its float32 pooling of 4 times the bytes.
template <class T>
void nhwc_max_q8(const PoolAttrs& a, const TensorView& x, const TensorView& y, KernelEnv& env) {
  const int64_t n = x.shape[0], c = x.shape[3];
  const nn::WindowGeometry g = nn::pool_geometry(a, std::array<int64_t, 4>{n, c, x.shape[1], x.shape[2]});
  const int64_t ih = g.in[0], iw = g.in[1], oh = g.out[0], ow = g.out[1];
  if (n * oh * ow * c == 0) return;  // nothing to write (and no row buffer of negative width)
  const int64_t kw = g.kernel[1], sw = g.strides[1], dw = g.dilations[1], pl = g.pads[1];
  // Padded row: pl columns, the input's iw, then what the last window reaches past it.
  const int64_t reach = (ow - 1) * sw + (kw - 1) * dw + 1;
  const int64_t wide = std::max(reach, pl + iw), cols = reach - (kw - 1) * dw;  // cols: step 2's columns
  const T* px = x.as<const T>();
  T* py = y.as<T>();
  constexpr T kLowest = std::numeric_limits<T>::lowest();
  const auto rows = [&](int64_t r0, int64_t r1) {
    std::vector<T> padded(static_cast<size_t>(wide * c)), across(static_cast<size_t>(cols * c));
    T* m = padded.data() + pl * c;  // the input's columns within the padded row
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / oh, i = r % oh;
      std::fill(padded.begin(), padded.end(), kLowest);
      for (int64_t ki = 0; ki < g.kernel[0]; ++ki) {
        const int64_t h = i * g.strides[0] - g.pads[0] + ki * g.dilations[0];
        if (h >= 0 && h < ih) max_into(m, px + (b * ih + h) * iw * c, iw * c);
      }
      std::copy_n(padded.data(), cols * c, across.data());
      for (int64_t kj = 1; kj < kw; ++kj) max_into(across.data(), padded.data() + kj * dw * c, cols * c);
      T* out = py + (b * oh + i) * ow * c;
      for (int64_t j = 0; j < ow; ++j) std::copy_n(across.data() + j * sw * c, c, out + j * c);
    }
  };
  if (env.pool && env.pool->team() > 1 && n * oh > 1 && n * oh * ow * c >= (int64_t{1} << 14))
    env.pool->parallel_for(n * oh, rows);
  else
    rows(0, n * oh);
}

void nhwc_pool_kernel(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                      KernelEnv& env) {
  const bool indices = out.size() > 1 && out[1].exists;
  const DataType dt = in[0].dtype;
  if (!indices && kind == OpKind::kNhwcMaxPool && in[0].rank() == 4 &&
      std::get<PoolAttrs>(attrs).kernel_shape.size() == 2) {
    if (dt == DataType::kInt8) return nhwc_max_q8<int8_t>(std::get<PoolAttrs>(attrs), in[0], out[0], env);
    if (dt == DataType::kUInt8) return nhwc_max_q8<uint8_t>(std::get<PoolAttrs>(attrs), in[0], out[0], env);
  }
  if (!indices && onednn::nhwc_pool(kind, std::get<PoolAttrs>(attrs), in[0], out[0], env)) return;
  channels_last::run_channels_first(kind, in, out[0], [&](std::span<const TensorView> ins, const TensorView& y) {
    pool_kernel(kind == OpKind::kNhwcMaxPool ? OpKind::kMaxPool : OpKind::kAveragePool, attrs, ins, {&y, 1}, env);
  });
}

constexpr KernelEntry kEntries[] = {
    {OpKind::kNhwcAveragePool, nhwc_pool_kernel},
    {OpKind::kNhwcMaxPool, nhwc_pool_kernel},
};

}  // namespace

std::span<const KernelEntry> nhwc_kernel_entries() { return kEntries; }

}  // namespace kiln::cpu::pool
