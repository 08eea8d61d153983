// CPU kernels of the tensor family, layout part: ops that only move elements (Reshape .. Split).
// Transpose, Slice, Tile, Expand, DepthToSpace and SpaceToDepth are all one operation here: a
// copy of a strided view of the input (strides may be 0 for broadcast or negative for reversed
// slices) into the contiguous output. Index ops are in tensor_index.cpp, Pad and generators in
// tensor_gen.cpp. Everything dispatches on element size, so every dtype (bool too) works.
#include <algorithm>
#include <cstring>
#include <string>

#include "core/shape_infer.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln {
namespace tensor_plan {
// Defined in src/core/infer/tensor.cpp.
void slice_plan(std::span<const int64_t> shape, std::span<const TensorView> in, std::vector<int64_t>& start,
                std::vector<int64_t>& step, std::vector<int64_t>& count);
}  // namespace tensor_plan

namespace cpu {
namespace tensor_ops {

// Kernels defined in tensor_index.cpp and tensor_gen.cpp.
#define KILN_TENSOR_KERNEL(name) \
  void name(OpKind, const Attrs&, std::span<const TensorView>, std::span<const TensorView>, KernelEnv&)
KILN_TENSOR_KERNEL(gather);
KILN_TENSOR_KERNEL(gather_elements);
KILN_TENSOR_KERNEL(gather_nd);
KILN_TENSOR_KERNEL(scatter_elements);
KILN_TENSOR_KERNEL(scatter_nd);
KILN_TENSOR_KERNEL(pad);
KILN_TENSOR_KERNEL(shape);
KILN_TENSOR_KERNEL(size);
KILN_TENSOR_KERNEL(constant_of_shape);
KILN_TENSOR_KERNEL(range);
KILN_TENSOR_KERNEL(eye_like);
KILN_TENSOR_KERNEL(one_hot);
KILN_TENSOR_KERNEL(trilu);
#undef KILN_TENSOR_KERNEL

}  // namespace tensor_ops

namespace {

using Dims = std::vector<int64_t>;

// Below this many bytes of work a loop stays on the calling thread.
constexpr int64_t kParallelBytes = int64_t{1} << 16;

template <class Fn>
void run_rows(KernelEnv& env, int64_t rows, int64_t bytes_per_row, const Fn& fn) {
  if (env.pool && rows > 1 && rows * bytes_per_row >= kParallelBytes)
    env.pool->parallel_for(rows, fn);
  else
    fn(0, rows);
}

template <class T>
void strided_rows(const uint8_t* src, uint8_t* dst, const Dims& shape, const Dims& strides, int64_t begin, int64_t end,
                  KernelEnv&) {
  const size_t r = shape.size();
  const int64_t inner = shape[r - 1], istride = strides[r - 1];
  // Multi-index of row `begin` over the outer dims and its source offset (in elements).
  Dims idx(r - 1, 0);
  int64_t off = 0, rem = begin;
  for (size_t d = r - 1; d-- > 0;) {
    idx[d] = rem % shape[d];
    rem /= shape[d];
    off += idx[d] * strides[d];
  }
  const T* s = reinterpret_cast<const T*>(src);
  T* o = reinterpret_cast<T*>(dst) + begin * inner;
  for (int64_t row = begin; row < end; ++row, o += inner) {
    const T* p = s + off;
    if (istride == 1) {
      std::memcpy(o, p, static_cast<size_t>(inner) * sizeof(T));
    } else if (istride == 0) {
      for (int64_t i = 0; i < inner; ++i) o[i] = p[0];
    } else {
      for (int64_t i = 0; i < inner; ++i) o[i] = p[i * istride];
    }
    for (size_t d = r - 1; d-- > 0;) {
      off += strides[d];
      if (++idx[d] < shape[d]) break;
      off -= strides[d] * shape[d];
      idx[d] = 0;
    }
  }
}

// The transpose-like case: the output's inner dim reads src with a stride while another dim `j`
// reads it contiguously. Copying kTile x kTile blocks of the (j, inner) plane keeps both the reads
// and the writes within a few cache lines instead of striding through src for every element.
template <class T>
void blocked_copy(const T* src, T* dst, const Dims& shape, const Dims& strides, size_t j, KernelEnv& env) {
  constexpr int64_t kTile = 32;
  const size_t r = shape.size();
  const Dims ostr = strides_of(shape);
  const int64_t rows = shape[j], cols = shape[r - 1], cstride = strides[r - 1], rstride = ostr[j];
  // Outer dims: all but j and the inner one.
  Dims oshape, osrc, odst;
  for (size_t d = 0; d + 1 < r; ++d)
    if (d != j) {
      oshape.push_back(shape[d]);
      osrc.push_back(strides[d]);
      odst.push_back(ostr[d]);
    }
  int64_t outer = 1;
  for (int64_t d : oshape) outer *= d;
  const int64_t row_blocks = (rows + kTile - 1) / kTile;
  run_rows(env, outer * row_blocks, kTile * cols * static_cast<int64_t>(sizeof(T)), [&](int64_t b, int64_t e) {
    for (int64_t item = b; item < e; ++item) {
      int64_t o = item / row_blocks, sb = 0, db = 0;
      for (size_t d = oshape.size(); d-- > 0;) {
        const int64_t i = o % oshape[d];
        o /= oshape[d];
        sb += i * osrc[d];
        db += i * odst[d];
      }
      const int64_t r0 = (item % row_blocks) * kTile, r1 = std::min(rows, r0 + kTile);
      for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
        const int64_t c1 = std::min(cols, c0 + kTile);
        for (int64_t rr = r0; rr < r1; ++rr) {
          const T* s = src + sb + rr;  // dim j has source stride 1
          T* d = dst + db + rr * rstride;
          for (int64_t c = c0; c < c1; ++c) d[c] = s[c * cstride];
        }
      }
    }
  });
}

// dst (contiguous, shape `shape`) = the view of src with element strides `strides`. Size-1 dims
// are dropped and dims that are contiguous with their inner neighbour merged, so that the inner
// loop is as long as possible (a memcpy when its stride is 1).
void strided_copy(DataType dt, Dims shape, Dims strides, const void* src, void* dst, KernelEnv& env) {
  Dims s, st;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) return;
    if (shape[i] == 1) continue;
    if (!s.empty() && st.back() == strides[i] * shape[i]) {
      s.back() *= shape[i];
      st.back() = strides[i];
    } else {
      s.push_back(shape[i]);
      st.push_back(strides[i]);
    }
  }
  if (s.empty()) {
    s.push_back(1);
    st.push_back(1);
  }
  const int64_t inner = s.back();
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < s.size(); ++i) rows *= s[i];
  const int64_t esize = static_cast<int64_t>(dtype_size(dt));
  dispatch_bytes(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (st.back() != 1 && st.back() != 0 && inner >= 8) {
      for (size_t j = 0; j + 1 < s.size(); ++j)
        if (st[j] == 1 && s[j] >= 8) {
          blocked_copy<T>(static_cast<const T*>(src), static_cast<T*>(dst), s, st, j, env);
          return;
        }
    }
    run_rows(env, rows, inner * esize, [&](int64_t b, int64_t e) {
      strided_rows<T>(static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), s, st, b, e, env);
    });
  });
}

void copy_whole(const TensorView& in, const TensorView& out) {
  if (in.data != out.data && out.bytes() > 0) std::memcpy(out.data, in.data, out.bytes());
}

// Reshape, Flatten, Squeeze, Unsqueeze: same bytes, new shape.
void k_view(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, KernelEnv&) {
  copy_whole(in[0], out[0]);
}

void k_transpose(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                 KernelEnv& env) {
  const TensorView& x = in[0];
  const size_t r = x.rank();
  std::vector<int64_t> perm = attrs_as<TransposeAttrs>(attrs).perm;
  if (perm.empty())
    for (size_t i = r; i-- > 0;) perm.push_back(static_cast<int64_t>(i));
  const Dims xs = strides_of(x.shape);
  Dims strides(r);
  for (size_t i = 0; i < r; ++i) strides[i] = xs[perm[i]];
  strided_copy(x.dtype, Dims(out[0].shape.begin(), out[0].shape.end()), strides, x.data, out[0].data, env);
}

void k_slice(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, KernelEnv& env) {
  const TensorView& x = in[0];
  Dims start, step, count;
  tensor_plan::slice_plan(x.shape, in, start, step, count);
  if (out[0].numel() == 0) return;
  const Dims xs = strides_of(x.shape);
  Dims strides(x.rank());
  int64_t base = 0;
  for (size_t i = 0; i < x.rank(); ++i) {
    base += start[i] * xs[i];
    strides[i] = count[i] > 1 ? xs[i] * step[i] : 0;  // a stride is never used for a single element
  }
  const uint8_t* src = static_cast<const uint8_t*>(x.data) + base * static_cast<int64_t>(dtype_size(x.dtype));
  strided_copy(x.dtype, count, strides, src, out[0].data, env);
}

// Tile as a strided copy: output [r0*d0, r1*d1, ...] is row-major [r0, d0, r1, d1, ...] where the
// repeat dims have stride 0.
void k_tile(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, KernelEnv& env) {
  const TensorView& x = in[0];
  const Dims xs = strides_of(x.shape);
  Dims shape, strides;
  for (size_t i = 0; i < x.rank(); ++i) {
    shape.push_back(x.shape[i] == 0 ? 0 : out[0].shape[i] / x.shape[i]);
    strides.push_back(0);
    shape.push_back(x.shape[i]);
    strides.push_back(xs[i]);
  }
  strided_copy(x.dtype, shape, strides, x.data, out[0].data, env);
}

void k_expand(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, KernelEnv& env) {
  const TensorView& x = in[0];
  const size_t r = out[0].rank(), lead = r - x.rank();
  const Dims xs = strides_of(x.shape);
  Dims strides(r, 0);
  for (size_t i = lead; i < r; ++i) strides[i] = x.shape[i - lead] == 1 ? 0 : xs[i - lead];
  strided_copy(x.dtype, Dims(out[0].shape.begin(), out[0].shape.end()), strides, x.data, out[0].data, env);
}

// DepthToSpace: output [N, C', H, b, W, b] is a permutation of the input split as
// DCR [N, b1, b2, C', H, W] or CRD [N, C', b1, b2, H, W]. SpaceToDepth: output [N, b1, b2, C, H', W']
// from input [N, C, H', b1, W', b2].
void k_depth_space(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
                   KernelEnv& env) {
  const auto& a = attrs_as<DepthToSpaceAttrs>(attrs);
  const TensorView& x = in[0];
  const int64_t b = a.blocksize, n = x.shape[0], c = x.shape[1], h = x.shape[2], w = x.shape[3];
  const int64_t hw = h * w, chw = c * hw;
  Dims shape, strides;
  if (kind == OpKind::kDepthToSpace) {
    const int64_t cc = c / (b * b);
    shape = {n, cc, h, b, w, b};
    if (a.mode == DepthToSpaceMode::kDcr)  // input [N, b1, b2, C', H, W] strides
      strides = {chw, hw, w, b * cc * hw, 1, cc * hw};
    else  // input [N, C', b1, b2, H, W]
      strides = {chw, b * b * hw, w, b * hw, 1, hw};
  } else {
    const int64_t ho = h / b, wo = w / b;
    shape = {n, b, b, c, ho, wo};
    strides = {chw, w, 1, hw, b * w, b};
  }
  strided_copy(x.dtype, shape, strides, x.data, out[0].data, env);
}

// Concat and Split move [outer, axis*inner] blocks between one whole tensor and its slices along
// `axis`: Concat gathers the parts into the whole, Split scatters the whole into the parts.
void move_blocks(const TensorView& whole, std::span<const TensorView> parts, int64_t axis_attr, bool into_whole,
                 KernelEnv& env) {
  const int64_t axis = normalize_axis(axis_attr, static_cast<int64_t>(whole.rank()));
  int64_t outer = 1, inner = static_cast<int64_t>(dtype_size(whole.dtype));
  for (int64_t i = 0; i < axis; ++i) outer *= whole.shape[i];
  for (size_t i = axis + 1; i < whole.rank(); ++i) inner *= whole.shape[i];
  const int64_t whole_row = whole.shape[axis] * inner;
  if (outer == 0 || whole_row == 0) return;
  auto* w = static_cast<uint8_t*>(whole.data);
  run_rows(env, outer, whole_row, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t pos = 0;
      for (const TensorView& t : parts) {
        const int64_t row = t.shape[axis] * inner;
        auto* part = static_cast<uint8_t*>(t.data) + r * row;
        if (row) {
          if (into_whole) {
            std::memcpy(w + r * whole_row + pos, part, static_cast<size_t>(row));
          } else {
            std::memcpy(part, w + r * whole_row + pos, static_cast<size_t>(row));
          }
        }
        pos += row;
      }
    }
  });
}

void k_concat(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
              KernelEnv& env) {
  move_blocks(out[0], in, attrs_as<AxisAttrs>(attrs).axis, /*into_whole=*/true, env);
}

void k_split(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out,
             KernelEnv& env) {
  move_blocks(in[0], out, attrs_as<SplitAttrs>(attrs).axis, /*into_whole=*/false, env);
}

using namespace tensor_ops;

constexpr KernelEntry kEntries[] = {
    {OpKind::kReshape, k_view},
    {OpKind::kFlatten, k_view},
    {OpKind::kSqueeze, k_view},
    {OpKind::kUnsqueeze, k_view},
    {OpKind::kTranspose, k_transpose},
    {OpKind::kSlice, k_slice},
    {OpKind::kTile, k_tile},
    {OpKind::kExpand, k_expand},
    {OpKind::kDepthToSpace, k_depth_space},
    {OpKind::kSpaceToDepth, k_depth_space},
    {OpKind::kConcat, k_concat},
    {OpKind::kSplit, k_split},
    {OpKind::kGather, gather},
    {OpKind::kGatherElements, gather_elements},
    {OpKind::kGatherND, gather_nd},
    {OpKind::kScatterElements, scatter_elements},
    {OpKind::kScatterND, scatter_nd},
    {OpKind::kPad, pad},
    {OpKind::kShape, shape},
    {OpKind::kSize, size},
    {OpKind::kConstantOfShape, constant_of_shape},
    {OpKind::kRange, range},
    {OpKind::kEyeLike, eye_like},
    {OpKind::kOneHot, one_hot},
    {OpKind::kTrilu, trilu},
};

}  // namespace

std::span<const KernelEntry> tensor_kernels() { return kEntries; }

}  // namespace cpu
}  // namespace kiln
