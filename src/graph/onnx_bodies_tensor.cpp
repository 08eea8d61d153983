// Kiln's bodies for ReverseSequence and MaxUnpool (onnx_kiln_bodies.h).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "graph/onnx_kiln_bodies.h"

namespace kiln::graph::detail {

// ReverseSequence: y = GatherElements(x, idx) along the time axis, idx[t, b] = lens[b] - 1 - t
// where t < lens[b], else t; idx is broadcast over the dimensions after the first two.
void reverse_sequence_body(const onnx::NodeProto& n, int64_t, onnx::FunctionProto& f) {
  const int64_t t = attr_i(n, "time_axis", 0), b = attr_i(n, "batch_axis", 1);
  if (!((t == 0 && b == 1) || (t == 1 && b == 0)))
    throw Error("ReverseSequence: time_axis " + std::to_string(t) + " and batch_axis " + std::to_string(b) +
                " should be 0 and 1, or 1 and 0");
  make_body(f, "ReverseSequence", {"x", "lens"}, {"y"}, R"(
    T = Shape <start = )" + std::to_string(t) + ", end = " + std::to_string(t + 1) + R"(> (x)
    Tscalar = Squeeze(T)
    zero = Constant <value_int = 0> ()
    one = Constant <value_int = 1> ()
    steps = Range(zero, Tscalar, one)
    time_axes = Constant <value_ints = [)" + std::to_string(1 - t) + R"(]> ()
    batch_axes = Constant <value_ints = [)" + std::to_string(1 - b) + R"(]> ()
    steps2 = Unsqueeze(steps, time_axes)
    lens64 = Cast <to = 7> (lens)
    lens2 = Unsqueeze(lens64, batch_axes)
    last = Sub(lens2, one)
    reversed = Sub(last, steps2)
    inside = Less(steps2, lens2)
    idx2 = Where(inside, reversed, steps2)
    rest = Shape <start = 2> (x)
    rest_zeros = Mul(rest, zero)
    rest_ones = Add(rest_zeros, one)
    idx2_shape = Shape(idx2)
    idx_shape = Concat <axis = 0> (idx2_shape, rest_ones)
    idx_r = Reshape(idx2, idx_shape)
    x_shape = Shape(x)
    idx = Expand(idx_r, x_shape)
    y = GatherElements <axis = )" + std::to_string(t) + R"(> (x, idx)
  )");
}

// MaxUnpool: the values scattered into a zero tensor at their flat indices (MaxPool's second output).
// The output shape is the third input, or (in - 1) * stride + kernel - pads per spatial dimension.
void max_unpool_body(const onnx::NodeProto& n, int64_t, onnx::FunctionProto& f) {
  const std::vector<int64_t> kernel = attr_ints(n, "kernel_shape");
  if (kernel.empty()) throw Error("MaxUnpool: attribute 'kernel_shape' is required");
  std::vector<int64_t> strides = attr_ints(n, "strides"), pads = attr_ints(n, "pads");
  const size_t r = kernel.size();
  if (strides.empty()) strides.assign(r, 1);
  if (pads.empty()) pads.assign(2 * r, 0);
  if (strides.size() != r || pads.size() != 2 * r)
    throw Error("MaxUnpool: kernel_shape has " + std::to_string(r) + " values, so strides needs " +
                std::to_string(r) + " and pads " + std::to_string(2 * r));
  std::vector<int64_t> extra(r);
  for (size_t i = 0; i < r; ++i) extra[i] = kernel[i] - pads[i] - pads[i + r];
  // With output_shape the indices refer to that shape, as the spec's text describes (the indices of
  // a MaxPool whose input had that shape), and as onnxruntime and PyTorch read them. ONNX's
  // reference reads them in the default shape and pads the result instead; its test data follows.
  std::string text = has_input(n, 2) ? "out_shape = Cast <to = 7> (output_shape)\n" : R"(
    nc = Shape <end = 2> (X)
    spatial = Shape <start = 2> (X)
    one = Constant <value_int = 1> ()
    strides = Constant <value_ints = )" + ints_text(strides) + R"(> ()
    extra = Constant <value_ints = )" + ints_text(extra) + R"(> ()
    spatial_m1 = Sub(spatial, one)
    spatial_s = Mul(spatial_m1, strides)
    out_spatial = Add(spatial_s, extra)
    out_shape = Concat <axis = 0> (nc, out_spatial)
  )";
  text += R"(
    total = ReduceProd <keepdims = 1> (out_shape)
    zeros = ConstantOfShape(total)
    zeros_x = CastLike(zeros, X)
    flat = Constant <value_ints = [-1]> ()
    X_flat = Reshape(X, flat)
    I_flat = Reshape(I, flat)
    Y_flat = ScatterElements <axis = 0> (zeros_x, I_flat, X_flat)
    Y = Reshape(Y_flat, out_shape)
  )";
  make_body(f, "MaxUnpool", {"X", "I", "output_shape"}, {"Y"}, text);
}

}  // namespace kiln::graph::detail
