// Shape inference of the tensor family's layout ops: Transpose, Slice, Tile, Expand, Concat, Split
// and Pad. Slice and Pad expose their parameter resolution (tensor_plan::slice_plan / pad_plan) so
// the CPU and CUDA kernels and the passes apply exactly the clamping and validation that inference
// applied.
#include <algorithm>
#include <string>

#include "core/infer/tensor/tensor_internal.h"

namespace kiln {

namespace tensor_plan {

// Resolves Slice's starts/ends/axes/steps against `shape` into per-dimension start, step and
// count (unsliced dims: 0, 1, dim). ONNX rule: negative start/end add dim; then for step > 0
// both clamp to [0, dim], for step < 0 start clamps to [0, dim-1] and end to [-1, dim-1].
void slice_plan(std::span<const int64_t> shape, std::span<const TensorView> in, std::vector<int64_t>& start,
                std::vector<int64_t>& step, std::vector<int64_t>& count) {
  const int64_t r = static_cast<int64_t>(shape.size());
  std::vector<int64_t> starts = const_ints(in[1], "Slice", "starts");
  std::vector<int64_t> ends = const_ints(in[2], "Slice", "ends");
  if (starts.size() != ends.size()) throw Error("Slice: starts and ends have different lengths");
  const size_t n = starts.size();
  std::vector<int64_t> axes(n), steps(n, 1);
  for (size_t i = 0; i < n; ++i) axes[i] = static_cast<int64_t>(i);
  if (has_input(in, 3)) axes = const_ints(in[3], "Slice", "axes");
  if (has_input(in, 4)) steps = const_ints(in[4], "Slice", "steps");
  if (axes.size() != n || steps.size() != n)
    throw Error("Slice: starts, ends, axes and steps must have the same length");
  axes = unique_axes(axes, r, "Slice");
  start.assign(r, 0);
  step.assign(r, 1);
  count.assign(shape.begin(), shape.end());
  for (size_t i = 0; i < n; ++i) {
    const int64_t ax = axes[i], s = steps[i], dim = shape[ax];
    if (s == 0) throw Error("Slice: step 0 on axis " + std::to_string(ax));
    int64_t b = starts[i], e = ends[i];
    if (b < 0) b += dim;  // cannot overflow: b < 0 <= dim
    if (e < 0) e += dim;
    int64_t c = 0;
    if (dim == 0) {
      b = 0;
    } else if (s > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      c = e > b ? (e - b - 1) / s + 1 : 0;
    } else {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      // -s overflows for INT64_MIN: divide in unsigned arithmetic.
      const uint64_t ms = uint64_t{0} - static_cast<uint64_t>(s);
      c = b > e ? static_cast<int64_t>(static_cast<uint64_t>(b - e - 1) / ms) + 1 : 0;
    }
    start[ax] = c > 0 ? b : 0;
    step[ax] = s;
    count[ax] = c;
  }
}

// Resolves Pad's pads/axes input into per-dimension begin and end pads (negative: crop).
void pad_plan(std::span<const int64_t> shape, std::span<const TensorView> in, std::vector<int64_t>& begin,
              std::vector<int64_t>& end) {
  const int64_t r = static_cast<int64_t>(shape.size());
  std::vector<int64_t> pads = const_ints(in[1], "Pad", "pads");
  std::vector<int64_t> axes(r);
  for (int64_t i = 0; i < r; ++i) axes[i] = i;
  if (has_input(in, 3)) axes = unique_axes(const_ints(in[3], "Pad", "axes"), r, "Pad");
  if (pads.size() != 2 * axes.size())
    throw Error("Pad: pads has " + std::to_string(pads.size()) + " values, expected 2 * " +
                std::to_string(axes.size()));
  begin.assign(r, 0);
  end.assign(r, 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    begin[axes[i]] = pads[i];
    end[axes[i]] = pads[axes.size() + i];
  }
}

}  // namespace tensor_plan

namespace tensor_infer {

using namespace tensor_plan;

std::vector<OutputType> infer_transpose(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const TensorView& x = in[0];
  const int64_t r = static_cast<int64_t>(x.rank());
  std::vector<int64_t> perm = attrs_as<TransposeAttrs>(attrs).perm;
  if (perm.empty())
    for (int64_t i = r; i-- > 0;) perm.push_back(i);
  if (static_cast<int64_t>(perm.size()) != r)
    throw Error("Transpose: perm has " + std::to_string(perm.size()) + " entries for rank " + std::to_string(r));
  std::vector<bool> seen(r, false);
  Shape out(r);
  for (int64_t i = 0; i < r; ++i) {
    if (perm[i] < 0 || perm[i] >= r || seen[perm[i]])
      throw Error("Transpose: perm " + shape_string(perm) + " is not a permutation of 0.." + std::to_string(r - 1));
    seen[perm[i]] = true;
    out[i] = x.shape[perm[i]];
  }
  return one(x.dtype, out);
}

std::vector<OutputType> infer_concat(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const TensorView& x = in[0];
  const int64_t r = static_cast<int64_t>(x.rank());
  if (r == 0) throw Error("Concat: inputs must have rank >= 1");
  const int64_t axis = normalize_axis(attrs_as<AxisAttrs>(attrs).axis, r, "Concat axis");
  Shape out = shape_of(x);
  int64_t total = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const TensorView& t = in[i];
    if (!t.exists) throw Error("Concat: input " + std::to_string(i) + " is missing");
    if (t.dtype != x.dtype) throw Error("Concat: inputs have different element types");
    if (static_cast<int64_t>(t.rank()) != r) throw Error("Concat: inputs have different ranks");
    for (int64_t d = 0; d < r; ++d)
      if (d != axis && t.shape[d] != x.shape[d])
        throw Error("Concat: input " + std::to_string(i) + " shape " + shape_string(shape_of(t)) + " does not match " +
                    shape_string(shape_of(x)) + " outside axis " + std::to_string(axis));
    if (__builtin_add_overflow(total, t.shape[axis], &total)) throw Error("Concat: output too large");
  }
  out[axis] = total;
  checked_numel(out, "Concat");
  return one(x.dtype, out);
}

std::vector<OutputType> infer_split(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t n_out) {
  const auto& a = attrs_as<SplitAttrs>(attrs);
  const TensorView& x = in[0];
  const int64_t r = static_cast<int64_t>(x.rank());
  if (r == 0) throw Error("Split: input must have rank >= 1");
  const int64_t axis = normalize_axis(a.axis, r, "Split axis");
  const int64_t d = x.shape[axis];
  const int64_t n = static_cast<int64_t>(n_out);
  if (a.num_outputs < 0 || (a.num_outputs != 0 && a.num_outputs != n))
    throw Error("Split: num_outputs " + std::to_string(a.num_outputs) + " does not match the node's " +
                std::to_string(n) + " outputs");
  std::vector<int64_t> sizes;
  if (has_input(in, 1)) {
    sizes = const_ints(in[1], "Split", "split");
    if (static_cast<int64_t>(sizes.size()) != n)
      throw Error("Split: split has " + std::to_string(sizes.size()) + " sizes for " + std::to_string(n) + " outputs");
    int64_t sum = 0;
    for (int64_t s : sizes) {
      if (s < 0 || s > d - sum)
        throw Error("Split: split sizes " + shape_string(sizes) + " do not sum to " + std::to_string(d));
      sum += s;
    }
    if (sum != d) throw Error("Split: split sizes " + shape_string(sizes) + " do not sum to " + std::to_string(d));
  } else if (d % n == 0) {
    sizes.assign(n, d / n);
  } else {
    // Opset 18: parts of ceil(d / n), the last one gets what is left.
    const int64_t part = d / n + 1;
    const int64_t last = d - part * (n - 1);
    if (last < 0) throw Error("Split: cannot split dim " + std::to_string(d) + " into " + std::to_string(n) + " parts");
    sizes.assign(n, part);
    sizes.back() = last;
  }
  std::vector<OutputType> outs;
  for (int64_t s : sizes) {
    Shape o = shape_of(x);
    o[axis] = s;
    outs.push_back({x.dtype, o});
  }
  return outs;
}

std::vector<OutputType> infer_slice(OpKind, const Attrs&, std::span<const TensorView> in, size_t) {
  std::vector<int64_t> start, step, count;
  slice_plan(in[0].shape, in, start, step, count);
  return one(in[0].dtype, count);
}

std::vector<OutputType> infer_tile(OpKind, const Attrs&, std::span<const TensorView> in, size_t) {
  const TensorView& x = in[0];
  if (in[1].rank() != 1) throw Error("Tile: repeats must be 1-D");
  std::vector<int64_t> rep = const_ints(in[1], "Tile", "repeats");
  if (rep.size() != x.rank())
    throw Error("Tile: repeats has " + std::to_string(rep.size()) + " values for rank " + std::to_string(x.rank()));
  Shape out(x.rank());
  for (size_t i = 0; i < rep.size(); ++i) {
    if (rep[i] < 0) throw Error("Tile: negative repeat " + std::to_string(rep[i]));
    if (__builtin_mul_overflow(x.shape[i], rep[i], &out[i])) throw Error("Tile: output too large");
  }
  checked_numel(out, "Tile");
  return one(x.dtype, out);
}

std::vector<OutputType> infer_expand(OpKind, const Attrs&, std::span<const TensorView> in, size_t) {
  if (in[1].rank() != 1) throw Error("Expand: shape must be 1-D");
  std::vector<int64_t> s = const_ints(in[1], "Expand", "shape");
  for (int64_t d : s)
    if (d < 0) throw Error("Expand: negative dimension in shape " + shape_string(s));
  Shape out = broadcast_shapes(in[0].shape, s);
  checked_numel(out, "Expand");
  return one(in[0].dtype, out);
}

std::vector<OutputType> infer_pad(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const PadMode mode = attrs_as<PadAttrs>(attrs).mode;
  if (mode != PadMode::kConstant && mode != PadMode::kReflect && mode != PadMode::kEdge && mode != PadMode::kWrap)
    throw Error("Pad: invalid mode");
  const TensorView& x = in[0];
  if (in[1].rank() != 1) throw Error("Pad: pads must be 1-D");
  if (has_input(in, 2)) {
    if (in[2].dtype != x.dtype) throw Error("Pad: constant_value must have the data's element type");
    if (in[2].rank() > 1 || in[2].numel() != 1) throw Error("Pad: constant_value must be a scalar");
  }
  std::vector<int64_t> begin, end;
  pad_plan(x.shape, in, begin, end);
  Shape out(x.rank());
  for (size_t i = 0; i < x.rank(); ++i) {
    const int64_t d = x.shape[i];
    if (__builtin_add_overflow(d, begin[i], &out[i]) || __builtin_add_overflow(out[i], end[i], &out[i]) || out[i] < 0)
      throw Error("Pad: pads " + std::to_string(begin[i]) + ", " + std::to_string(end[i]) + " on axis " +
                  std::to_string(i) + " of size " + std::to_string(d) + " give an invalid size");
    // Negative pads crop first; what is left is padded. Cropping more than there is is an error.
    const int64_t kept = d - std::max<int64_t>(0, -begin[i]) - std::max<int64_t>(0, -end[i]);
    if (kept < 0) throw Error("Pad: negative pads crop more than axis " + std::to_string(i) + " holds");
    if (mode != PadMode::kConstant && kept == 0 && out[i] > 0)
      throw Error("Pad: cannot pad an empty axis " + std::to_string(i) + " in mode " +
                  std::string(kEnumNames<PadMode>[static_cast<size_t>(mode)]));
  }
  checked_numel(out, "Pad");
  return one(x.dtype, out);
}

}  // namespace tensor_infer

}  // namespace kiln
