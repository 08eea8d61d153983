// CPU kernels of the tensor family's layout ops: Transpose, Slice, Tile, Expand, Concat, Split and
// Pad. Transpose, Slice, Tile and Expand (and depth_space.cpp's DepthToSpace and SpaceToDepth) are
// all one operation here, strided_copy: a copy of a strided view of the input (strides may be 0
// for broadcast or negative for reversed slices) into the contiguous output. Everything
// dispatches on element size, so every dtype (bool too) works.
#include <algorithm>
#include <cstring>
#include <string>

#include "core/shape_infer.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/tensor/tensor_internal.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln {
namespace tensor_plan {
// Defined in the tensor family's shape inference (core/infer/tensor/layout.cpp).
void slice_plan(std::span<const int64_t> shape, std::span<const TensorView> in, std::vector<int64_t>& start,
                std::vector<int64_t>& step, std::vector<int64_t>& count);
void pad_plan(std::span<const int64_t> shape, std::span<const TensorView> in, std::vector<int64_t>& begin,
              std::vector<int64_t>& end);
}  // namespace tensor_plan

namespace cpu {

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

}  // namespace

namespace tensor_ops {

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

}  // namespace tensor_ops

namespace {

using tensor_ops::strided_copy;

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

// ---- Pad ----------------------------------------------------------------------------------------

// Source index along one axis for every output position, or -1 for the constant. Negative pads
// crop first (cb, ce); the kept length L is then padded by pb, pe according to the mode.
Dims pad_map(int64_t dim, int64_t begin, int64_t end, int64_t out_dim, PadMode mode) {
  const int64_t cb = std::max<int64_t>(0, -begin), ce = std::max<int64_t>(0, -end);
  const int64_t pb = std::max<int64_t>(0, begin), len = dim - cb - ce;
  Dims m(out_dim);
  for (int64_t o = 0; o < out_dim; ++o) {
    int64_t p = o - pb;
    if (p < 0 || p >= len) {
      switch (mode) {
        case PadMode::kConstant: m[o] = -1; continue;
        case PadMode::kEdge: p = std::clamp<int64_t>(p, 0, len - 1); break;
        case PadMode::kWrap: p = ((p % len) + len) % len; break;
        case PadMode::kReflect:
          if (len == 1) {
            p = 0;
          } else {  // reflection without repeating the edge has period 2 (len - 1)
            const int64_t period = 2 * (len - 1);
            p = ((p % period) + period) % period;
            if (p >= len) p = period - p;
          }
          break;
      }
    }
    m[o] = cb + p;
  }
  return m;
}

void pad(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out, KernelEnv& env) {
  const PadMode mode = attrs_as<PadAttrs>(attrs).mode;
  const TensorView &x = in[0], &o = out[0];
  const size_t r = x.rank();
  if (o.numel() == 0) return;
  if (r == 0) {
    std::memcpy(o.data, x.data, dtype_size(x.dtype));
    return;
  }
  Dims begin, end;
  tensor_plan::pad_plan(x.shape, in, begin, end);
  std::vector<Dims> maps(r);
  for (size_t d = 0; d < r; ++d) maps[d] = pad_map(x.shape[d], begin[d], end[d], o.shape[d], mode);
  const Dims xs = strides_of(x.shape);
  const int64_t last = o.shape[r - 1], rows = o.numel() / last;
  // The kept middle of the last axis is one contiguous run.
  const int64_t pb = std::max<int64_t>(0, begin[r - 1]), cb = std::max<int64_t>(0, -begin[r - 1]);
  const int64_t len = x.shape[r - 1] - cb - std::max<int64_t>(0, -end[r - 1]);
  const bool has_value = in.size() > 2 && in[2].exists;
  dispatch_bytes(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T cval{};
    if (has_value) std::memcpy(&cval, in[2].data, sizeof(T));
    const T* src = x.as<const T>();
    const Dims& lm = maps[r - 1];
    run_rows(env, rows, last * static_cast<int64_t>(sizeof(T)), [&](int64_t b, int64_t e) {
      Dims id(r - 1);
      int64_t rem = b;
      for (size_t d = r - 1; d-- > 0;) {
        id[d] = rem % o.shape[d];
        rem /= o.shape[d];
      }
      for (int64_t row = b; row < e; ++row) {
        T* dst = o.as<T>() + row * last;
        int64_t off = 0;
        bool inside = true;
        for (size_t d = 0; d + 1 < r; ++d) {
          const int64_t m = maps[d][id[d]];
          if (m < 0) inside = false;
          off += m * xs[d];
        }
        if (!inside) {
          std::fill(dst, dst + last, cval);
        } else {
          const T* s = src + off;
          for (int64_t i = 0; i < pb; ++i) dst[i] = lm[i] < 0 ? cval : s[lm[i]];
          if (len > 0) std::memcpy(dst + pb, s + cb, static_cast<size_t>(len) * sizeof(T));
          for (int64_t i = pb + len; i < last; ++i) dst[i] = lm[i] < 0 ? cval : s[lm[i]];
        }
        for (size_t d = r - 1; d-- > 0;) {
          if (++id[d] < o.shape[d]) break;
          id[d] = 0;
        }
      }
    });
  });
}

constexpr KernelEntry kEntries[] = {
    {OpKind::kTranspose, k_transpose},
    {OpKind::kSlice, k_slice},
    {OpKind::kTile, k_tile},
    {OpKind::kExpand, k_expand},
    {OpKind::kConcat, k_concat},
    {OpKind::kSplit, k_split},
    {OpKind::kPad, pad},
};

}  // namespace

std::span<const KernelEntry> tensor_ops::layout_kernel_entries() { return kEntries; }

}  // namespace cpu
}  // namespace kiln
