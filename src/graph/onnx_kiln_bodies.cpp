// Kiln's own function bodies, for op types ONNX defines without one (onnx_functions.cpp expands
// them). Written in ONNX's text syntax at opset 17 and built per node, from its attributes (as
// ONNX's context-dependent functions are). Shapes enter as Shape ops, which the builder folds once
// the input shapes are bound, so each body becomes a few kernels and constants.
#include <onnx/defs/function.h>

#include <algorithm>
#include <charconv>
#include <map>

#include "graph/onnx_import_internal.h"

namespace kiln::graph::detail {

namespace {

int64_t attr_i(const onnx::NodeProto& n, const std::string& name, int64_t dflt) {
  const onnx::AttributeProto* a = find_attr(n, name);
  return a != nullptr ? a->i() : dflt;
}
std::vector<int64_t> attr_ints(const onnx::NodeProto& n, const std::string& name) {
  const onnx::AttributeProto* a = find_attr(n, name);
  return a != nullptr ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : std::vector<int64_t>{};
}
// A float as ONNX's text syntax reads it back exactly ("1e-08", not to_string's "0.000000"),
// whatever the locale, and always as a float ("1.0": a bare "1" parses as an int).
std::string num_text(float v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".eEni") == std::string::npos) s += ".0";
  return s;
}

std::string ints_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}
bool has_input(const onnx::NodeProto& n, int i) { return n.input_size() > i && !n.input(i).empty(); }

void make_body(onnx::FunctionProto& f, const std::string& op, const std::vector<std::string>& inputs,
               const std::vector<std::string>& outputs, const std::string& text) {
  f.set_name(op);
  f.set_domain("");
  for (const auto& i : inputs) f.add_input(i);
  for (const auto& o : outputs) f.add_output(o);
  auto* o = f.add_opset_import();
  o->set_domain("");
  o->set_version(kKilnBodyOpset);
  onnx::FunctionBuilder(f).Add(text.c_str());
}

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

// DFT along one axis as a MatMul with a matrix of cosines and sines: the input is viewed as
// [P, n, Q, 2] (a real input padded to complex), transposed to [P, Q, 2n], multiplied by the
// [2n, 2K] matrix of e^(-+2 pi i n k / L), and shaped back. The product is taken in float64: in
// float32 the terms that cancel (the imaginary part of a real signal's DC) leave 1e-7 of the
// signal's magnitude where the answer is 0. L is dft_length (the signal is
// truncated or zero-padded to it) or n; K is L, or L/2 + 1 when onesided. The matrix depends only on
// shapes, so the builder folds it into a constant. Opset 20 moved the axis to an input (default -2).
void dft_body(const onnx::NodeProto& n, int64_t opset, onnx::FunctionProto& f) {
  const bool inverse = attr_i(n, "inverse", 0) != 0, onesided = attr_i(n, "onesided", 0) != 0;
  if (inverse && onesided) throw Error("DFT: inverse and onesided cannot both be set");
  std::string text = "shape1 = Constant <value_ints = [1]> ()\n";
  if (opset >= 20)
    text += has_input(n, 2) ? "axis = Reshape(axis_in, shape1)\n" : "axis = Constant <value_ints = [-2]> ()\n";
  else
    text += "axis = Constant <value_ints = [" + std::to_string(attr_i(n, "axis", 1)) + "]> ()\n";
  text += R"(
    zero = Constant <value_ints = [0]> ()
    one = Constant <value_ints = [1]> ()
    two = Constant <value_ints = [2]> ()
    last = Constant <value_ints = [-1]> ()
    big = Constant <value_ints = [9223372036854775807]> ()
    zeros7 = Constant <value_ints = [0, 0, 0, 0, 0, 0, 0]> ()
    s = Shape(input)
    n = Gather(s, axis)
    pre = Slice(s, zero, axis)
    axis1 = Add(axis, one)
    post = Slice(s, axis1, last)
    C = Slice(s, last, big)
    pre1 = Concat <axis = 0> (one, pre)
    post1 = Concat <axis = 0> (one, post)
    P = ReduceProd <keepdims = 1> (pre1)
    Q = ReduceProd <keepdims = 1> (post1)
    x4_shape = Concat <axis = 0> (P, n, Q, C)
    x4 = Reshape(input, x4_shape)
    grow = Sub(two, C)
    pads = Concat <axis = 0> (zeros7, grow)
    x4c = Pad(x4, pads)
    xt = Transpose <perm = [0, 2, 1, 3]> (x4c)
    rows = Mul(n, two)
    x2_shape = Concat <axis = 0> (P, Q, rows)
    x2f = Reshape(xt, x2_shape)
    x2 = Cast <to = 11> (x2f)
  )";
  text += has_input(n, 1) ? "L64 = Cast <to = 7> (dft_length)\nL = Reshape(L64, shape1)\n" : "L = Identity(n)\n";
  text += onesided ? "half = Div(L, two)\nK = Add(half, one)\n" : "K = Identity(L)\n";
  text += R"(
    zero_s = Constant <value_int = 0> ()
    one_s = Constant <value_int = 1> ()
    n_s = Squeeze(n)
    K_s = Squeeze(K)
    ns = Range(zero_s, n_s, one_s)
    ks = Range(zero_s, K_s, one_s)
    n_col = Unsqueeze(ns, one)
    k_row = Unsqueeze(ks, zero)
    nk = Mul(n_col, k_row)
    nk_mod = Mod(nk, L)
    nk_f = Cast <to = 11> (nk_mod)
    L_f = Cast <to = 11> (L)
    two_pi = Constant <value = double {6.283185307179586}> ()
    turns = Div(nk_f, L_f)
    angle = Mul(turns, two_pi)
    in_range = Less(n_col, L)
    mask = Cast <to = 11> (in_range)
    cos_a = Cos(angle)
    sin_a = Sin(angle)
    c = Mul(cos_a, mask)
    sin_m = Mul(sin_a, mask)
  )";
  text += inverse ? "sn = Identity(sin_m)\n" : "sn = Neg(sin_m)\n";
  text += R"(
    neg_sn = Neg(sn)
    axis2 = Constant <value_ints = [2]> ()
    c3 = Unsqueeze(c, axis2)
    sn3 = Unsqueeze(sn, axis2)
    neg_sn3 = Unsqueeze(neg_sn, axis2)
    row_re = Concat <axis = 2> (c3, sn3)
    row_im = Concat <axis = 2> (neg_sn3, c3)
    row_re4 = Unsqueeze(row_re, one)
    row_im4 = Unsqueeze(row_im, one)
    W = Concat <axis = 1> (row_re4, row_im4)
    cols = Mul(K, two)
    W_shape = Concat <axis = 0> (rows, cols)
    W2 = Reshape(W, W_shape)
    y2 = MatMul(x2, W2)
  )";
  text += inverse ? "y2d = Div(y2, L_f)\ny2s = CastLike(y2d, input)\n" : "y2s = CastLike(y2, input)\n";
  text += R"(
    y4_shape = Concat <axis = 0> (P, Q, K, two)
    y4 = Reshape(y2s, y4_shape)
    yt = Transpose <perm = [0, 2, 1, 3]> (y4)
    out_shape = Concat <axis = 0> (pre, K, post, two)
    output = Reshape(yt, out_shape)
  )";
  make_body(f, "DFT", {"input", "dft_length", "axis_in"}, {"output"}, text);
}

// STFT: frames gathered at multiples of frame_step ([batch, frames, frame_length, 1 or 2]), times
// the window, then a DFT along the frame axis (onesided by default).
void stft_body(const onnx::NodeProto& n, int64_t, onnx::FunctionProto& f) {
  const bool onesided = attr_i(n, "onesided", 1) != 0;
  if (!has_input(n, 3) && !has_input(n, 2))
    throw Error("STFT: give the frame_length input, the window input, or both");
  std::string text = R"(
    shape1 = Constant <value_ints = [1]> ()
    zero = Constant <value_ints = [0]> ()
    one = Constant <value_ints = [1]> ()
    step64 = Cast <to = 7> (frame_step)
    step = Reshape(step64, shape1)
  )";
  text += has_input(n, 3) ? "L64 = Cast <to = 7> (frame_length)\nL = Reshape(L64, shape1)\n" : "L = Shape(window)\n";
  text += R"(
    len = Shape <start = 1, end = 2> (signal)
    span = Sub(len, L)
    steps = Div(span, step)
    F = Add(steps, one)
    zero_s = Constant <value_int = 0> ()
    one_s = Constant <value_int = 1> ()
    F_s = Squeeze(F)
    L_s = Squeeze(L)
    fs = Range(zero_s, F_s, one_s)
    starts = Mul(fs, step)
    offsets = Range(zero_s, L_s, one_s)
    starts2 = Unsqueeze(starts, one)
    offsets2 = Unsqueeze(offsets, zero)
    idx = Add(starts2, offsets2)
    frames = Gather <axis = 1> (signal, idx)
  )";
  if (has_input(n, 2))
    text += R"(
    w_shape = Constant <value_ints = [1, 1, -1, 1]> ()
    w4 = Reshape(window, w_shape)
    w4x = CastLike(w4, signal)
    framed = Mul(frames, w4x)
    )";
  else
    text += "framed = Identity(frames)\n";
  text += std::string("output = DFT <axis = 2, onesided = ") + (onesided ? "1" : "0") + "> (framed)\n";
  make_body(f, "STFT", {"signal", "frame_step", "window", "frame_length"}, {"output"}, text);
}

// GridSample on 4-D inputs (X [N, C, H, W], grid [N, Ho, Wo, 2] of (x, y) in [-1, 1]), as PyTorch
// computes it: per axis, the coordinate is denormalized (align_corners), rounded for nearest,
// and, outside [x_min, x_max], clamped (border) or reflected (reflection), except for bicubic;
// then each of the 1, 2 or 4 taps per axis is weighted and its index padded (zeros: weight 0;
// border: clamped; reflection: reflected). Each tap gathers whole rows of channels from X viewed
// as [N*H*W, C] (one index per sample, not per channel). ONNX's reference also moves bicubic's coordinate at the border; PyTorch and
// onnxruntime do not, and models come from PyTorch. Coordinates and weights are computed in
// float64, which to-fp16 leaves alone: in float16 a coordinate near 100 is off by up to 0.03 pixel.
void grid_sample_body(const onnx::NodeProto& n, int64_t, onnx::FunctionProto& f) {
  auto attr_s = [&](const std::string& name, const std::string& dflt) {
    const onnx::AttributeProto* a = find_attr(n, name);
    return a != nullptr ? a->s() : dflt;
  };
  std::string mode = attr_s("mode", "bilinear"), padding = attr_s("padding_mode", "zeros");
  if (mode == "linear") mode = "bilinear";  // opset 20's names
  if (mode == "cubic") mode = "bicubic";
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic")
    throw Error("GridSample: mode '" + mode + "' is not one of bilinear (linear), nearest, bicubic (cubic)");
  if (padding != "zeros" && padding != "border" && padding != "reflection")
    throw Error("GridSample: padding_mode '" + padding + "' is not one of zeros, border, reflection");
  const bool align = attr_i(n, "align_corners", 0) != 0;

  std::string t = R"(
    N = Shape <end = 1> (X)
    C = Shape <start = 1, end = 2> (X)
    HW = Shape <start = 2> (X)
    HW_1 = ReduceProd <keepdims = 1> (HW)
    Xt = Transpose <perm = [0, 2, 3, 1]> (X)
    minus1 = Constant <value_ints = [-1]> ()
    rows_shape = Concat <axis = 0> (minus1, C)
    Xrows = Reshape(Xt, rows_shape)
    zero_s = Constant <value_int = 0> ()
    one_s = Constant <value_int = 1> ()
    N_s = Squeeze(N)
    HW_s = Squeeze(HW_1)
    batches = Range(zero_s, N_s, one_s)
    batch_rows = Mul(batches, HW_s)
    b3_shape = Constant <value_ints = [-1, 1, 1]> ()
    batch_rows3 = Reshape(batch_rows, b3_shape)
    gridf = Cast <to = 11> (grid)
    zero = Constant <value = double {0.0}> ()
    one = Constant <value = double {1.0}> ()
    two = Constant <value = double {2.0}> ()
    half = Constant <value = double {0.5}> ()
    W_i = Shape <start = 3, end = 4> (X)
    W_i64 = Squeeze(W_i)
  )";
  if (mode == "bicubic")
    t += "A = Constant <value = double {-0.75}> ()\nA2 = Constant <value = double {1.25}> ()\n"
         "A3 = Constant <value = double {2.25}> ()\nA5 = Constant <value = double {-3.75}> ()\n"
         "A8 = Constant <value = double {-6.0}> ()\nA4 = Constant <value = double {-3.0}> ()\n";
  // The per-axis coordinate and taps: axis "x" is grid[..., 0] along W, "y" grid[..., 1] along H.
  struct Tap {
    std::string index, weight;
  };
  auto axis_taps = [&](const std::string& a, int component, int dim) {
    const std::string d = std::to_string(dim);
    t += a + "_comp = Constant <value_int = " + std::to_string(component) + "> ()\n";
    t += a + "_g = Gather <axis = 3> (gridf, " + a + "_comp)\n";
    t += a + "_size_i = Shape <start = " + d + ", end = " + std::to_string(dim + 1) + "> (X)\n";
    t += a + "_size = Cast <to = 11> (" + a + "_size_i)\n";
    t += a + "_last = Sub(" + a + "_size, one)\n";
    t += a + "_g1 = Add(" + a + "_g, one)\n";
    if (align) {
      t += a + "_h = Div(" + a + "_g1, two)\n" + a + "_c0 = Mul(" + a + "_h, " + a + "_last)\n";
      t += a + "_min = Identity(zero)\n" + a + "_max = Identity(" + a + "_last)\n";
    } else {
      t += a + "_s = Mul(" + a + "_g1, " + a + "_size)\n" + a + "_s1 = Sub(" + a + "_s, one)\n" + a + "_c0 = Div(" +
           a + "_s1, two)\n";
      t += a + "_min = Neg(half)\n" + a + "_max = Sub(" + a + "_size, half)\n";
    }
    t += mode == "nearest" ? a + "_c1 = Round(" + a + "_c0)\n" : a + "_c1 = Identity(" + a + "_c0)\n";
    // v reflected into [lo, hi] (ONNX's _gs_reflect); lo and hi are names of float tensors.
    auto reflect = [&](const std::string& out, const std::string& v, const std::string& lo, const std::string& hi) {
      const std::string p = out + "_r";
      t += p + "_rng = Sub(" + hi + ", " + lo + ")\n";
      t += p + "_below = Less(" + v + ", " + lo + ")\n";
      t += p + "_dlo = Sub(" + lo + ", " + v + ")\n" + p + "_dhi = Sub(" + v + ", " + hi + ")\n";
      t += p + "_dx = Where(" + p + "_below, " + p + "_dlo, " + p + "_dhi)\n";
      t += p + "_q = Div(" + p + "_dx, " + p + "_rng)\n" + p + "_n = Floor(" + p + "_q)\n";
      t += p + "_nr = Mul(" + p + "_n, " + p + "_rng)\n" + p + "_rem = Sub(" + p + "_dx, " + p + "_nr)\n";
      t += p + "_n2 = Div(" + p + "_n, two)\n" + p + "_n2f = Floor(" + p + "_n2)\n" + p + "_n2x = Mul(" + p +
           "_n2f, two)\n" + p + "_odd = Sub(" + p + "_n, " + p + "_n2x)\n" + p + "_even = Less(" + p +
           "_odd, half)\n";
      t += p + "_lo_r = Add(" + lo + ", " + p + "_rem)\n" + p + "_hi_r = Sub(" + hi + ", " + p + "_rem)\n";
      // below: even -> lo + r, odd -> hi - r; above: even -> hi - r, odd -> lo + r
      t += p + "_from_lo = Equal(" + p + "_below, " + p + "_even)\n";
      t += p + "_refl = Where(" + p + "_from_lo, " + p + "_lo_r, " + p + "_hi_r)\n";
      t += p + "_above = Greater(" + v + ", " + hi + ")\n" + p + "_outside = Or(" + p + "_below, " + p + "_above)\n";
      t += p + "_has_rng = Greater(" + p + "_rng, zero)\n" + p + "_safe = Where(" + p + "_has_rng, " + p + "_refl, " +
           lo + ")\n";
      t += out + " = Where(" + p + "_outside, " + p + "_safe, " + v + ")\n";
    };
    auto clamp = [&](const std::string& out, const std::string& v, const std::string& lo, const std::string& hi) {
      t += out + "_lo = Max(" + v + ", " + lo + ")\n" + out + " = Min(" + out + "_lo, " + hi + ")\n";
    };
    if (mode == "bicubic") {  // PyTorch (and onnxruntime) pad bicubic's taps only, not the coordinate
      t += a + "_c = Identity(" + a + "_c1)\n";
    } else if (padding == "border") {
      t += a + "_out_lo = Less(" + a + "_c1, " + a + "_min)\n" + a + "_out_hi = Greater(" + a + "_c1, " + a +
           "_max)\n" + a + "_out = Or(" + a + "_out_lo, " + a + "_out_hi)\n";
      clamp(a + "_cl", a + "_c1", "zero", a + "_last");
      t += a + "_c = Where(" + a + "_out, " + a + "_cl, " + a + "_c1)\n";
    } else if (padding == "reflection") {
      reflect(a + "_c", a + "_c1", a + "_min", a + "_max");
    } else {
      t += a + "_c = Identity(" + a + "_c1)\n";
    }
    // Taps: start offset and weights.
    std::vector<Tap> taps;
    std::vector<std::pair<int, std::string>> offsets;  // (offset from floor, weight name)
    if (mode == "nearest") {
      t += a + "_f = Identity(" + a + "_c)\n" + a + "_w0z = Mul(" + a + "_c, zero)\n" + a + "_w0 = Add(" + a +
           "_w0z, one)\n";
      offsets = {{0, a + "_w0"}};
    } else {
      t += a + "_f = Floor(" + a + "_c)\n" + a + "_t = Sub(" + a + "_c, " + a + "_f)\n";
      if (mode == "bilinear") {
        t += a + "_w0 = Sub(one, " + a + "_t)\n" + a + "_w1 = Identity(" + a + "_t)\n";
        offsets = {{0, a + "_w0"}, {1, a + "_w1"}};
      } else {  // Keys' cubic convolution, A = -0.75, at distances t + 1, t, 1 - t, 2 - t
        auto far = [&](const std::string& w, const std::string& x) {  // ((A x - 5A) x + 8A) x - 4A
          t += w + "_a = Mul(A, " + x + ")\n" + w + "_b = Sub(" + w + "_a, A5)\n" + w + "_c = Mul(" + w + "_b, " + x +
               ")\n" + w + "_d = Add(" + w + "_c, A8)\n" + w + "_e = Mul(" + w + "_d, " + x + ")\n" + w +
               " = Sub(" + w + "_e, A4)\n";
        };
        auto near = [&](const std::string& w, const std::string& x) {  // ((A + 2) x - (A + 3)) x x + 1
          t += w + "_a = Mul(A2, " + x + ")\n" + w + "_b = Sub(" + w + "_a, A3)\n" + w + "_c = Mul(" + w + "_b, " + x +
               ")\n" + w + "_d = Mul(" + w + "_c, " + x + ")\n" + w + " = Add(" + w + "_d, one)\n";
        };
        t += a + "_x0 = Add(" + a + "_t, one)\n" + a + "_x2 = Sub(one, " + a + "_t)\n" + a + "_x3 = Sub(two, " + a +
             "_t)\n";
        far(a + "_w0", a + "_x0");
        near(a + "_w1", a + "_t");
        near(a + "_w2", a + "_x2");
        far(a + "_w3", a + "_x3");
        offsets = {{-1, a + "_w0"}, {0, a + "_w1"}, {1, a + "_w2"}, {2, a + "_w3"}};
      }
    }
    std::vector<Tap> out;
    for (const auto& [off, w] : offsets) {
      const std::string i = a + "_i" + std::to_string(off + 1);
      t += i + "_off = Constant <value = double {" + std::to_string(off) + ".0}> ()\n";
      t += i + "_p = Add(" + a + "_f, " + i + "_off)\n";
      std::string weight = w;
      if (padding == "zeros") {
        t += i + "_ge = Less(" + i + "_p, zero)\n" + i + "_lt = Less(" + i + "_p, " + a + "_size)\n" + i +
             "_in_lo = Not(" + i + "_ge)\n" + i + "_in = And(" + i + "_in_lo, " + i + "_lt)\n" + i +
             "_inf = Cast <to = 11> (" + i + "_in)\n" + i + "_w = Mul(" + w + ", " + i + "_inf)\n";
        weight = i + "_w";
        clamp(i + "_q", i + "_p", "zero", a + "_last");
      } else if (padding == "border") {
        clamp(i + "_q", i + "_p", "zero", a + "_last");
      } else {
        reflect(i + "_rf", i + "_p", a + "_min", a + "_max");
        t += i + "_tr = Cast <to = 7> (" + i + "_rf)\n" + i + "_trf = Cast <to = 11> (" + i + "_tr)\n";
        clamp(i + "_q", i + "_trf", "zero", a + "_last");
      }
      t += i + " = Cast <to = 7> (" + i + "_q)\n";
      out.push_back({i, weight});
    }
    return out;
  };
  const std::vector<Tap> xs = axis_taps("x", 0, 3), ys = axis_taps("y", 1, 2);
  std::string sum;
  int k = 0;
  for (const Tap& ty : ys)
    for (const Tap& tx : xs) {
      const std::string p = "tap" + std::to_string(k++);
      t += p + "_row = Mul(" + ty.index + ", W_i64)\n" + p + "_pos = Add(" + p + "_row, " + tx.index + ")\n";
      t += p + "_idx = Add(" + p + "_pos, batch_rows3)\n";
      t += p + "_v = Gather(Xrows, " + p + "_idx)\n";  // [N, Ho, Wo, C]
      t += p + "_w = Mul(" + ty.weight + ", " + tx.weight + ")\n" + p + "_w4 = Unsqueeze(" + p + "_w, minus1)\n" + p +
           "_w_x = CastLike(" + p + "_w4, X)\n" + p + "_term = Mul(" + p + "_v, " + p + "_w_x)\n";
      if (sum.empty()) {
        sum = p + "_term";
      } else {
        t += p + "_sum = Add(" + sum + ", " + p + "_term)\n";
        sum = p + "_sum";
      }
    }
  t += "Y = Transpose <perm = [0, 3, 1, 2]> (" + sum + ")\n";
  make_body(f, "GridSample", {"X", "grid"}, {"Y"}, t);
}

// MelWeightMatrix, as ONNX's reference computes it (in float64): M + 2 points evenly spaced on the
// mel scale between the edges, mapped to spectrogram bins (floor((dft_length + 1) f / rate)), and
// triangle filters between neighbouring points: rising over [left, center], falling over
// [center, right), a single 1 where left and center coincide.
void mel_weight_matrix_body(const onnx::NodeProto& n, int64_t, onnx::FunctionProto& f) {
  const int64_t dtype = attr_i(n, "output_datatype", 1);
  make_body(f, "MelWeightMatrix", {"num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz"},
            {"output"}, R"(
    zero_i = Constant <value_int = 0> ()
    one_i = Constant <value_int = 1> ()
    two_i = Constant <value_int = 2> ()
    M = Cast <to = 7> (num_mel_bins)
    L = Cast <to = 7> (dft_length)
    half_L = Div(L, two_i)
    bins = Add(half_L, one_i)
    M2 = Add(M, two_i)
    points_i = Range(zero_i, M2, one_i)
    points = Cast <to = 11> (points_i)
    M2_f = Cast <to = 11> (M2)
    one = Constant <value = double {1.0}> ()
    k700 = Constant <value = double {700.0}> ()
    k2595 = Constant <value = double {2595.0}> ()
    ln10 = Constant <value = double {2.302585092994046}> ()
    lo = Cast <to = 11> (lower_edge_hertz)
    hi = Cast <to = 11> (upper_edge_hertz)
    lo_r = Div(lo, k700)
    lo_1 = Add(lo_r, one)
    lo_ln = Log(lo_1)
    lo_l10 = Div(lo_ln, ln10)
    lo_mel = Mul(lo_l10, k2595)
    hi_r = Div(hi, k700)
    hi_1 = Add(hi_r, one)
    hi_ln = Log(hi_1)
    hi_l10 = Div(hi_ln, ln10)
    hi_mel = Mul(hi_l10, k2595)
    span = Sub(hi_mel, lo_mel)
    step = Div(span, M2_f)
    mel_s = Mul(points, step)
    mel = Add(mel_s, lo_mel)
    e_a = Div(mel, k2595)
    e_b = Mul(e_a, ln10)
    e_c = Exp(e_b)
    e_d = Sub(e_c, one)
    hz = Mul(e_d, k700)
    L1 = Add(L, one_i)
    L1_f = Cast <to = 11> (L1)
    rate = Cast <to = 11> (sample_rate)
    scaled = Mul(hz, L1_f)
    ratio = Div(scaled, rate)
    fbin = Floor(ratio)
    start0 = Constant <value_ints = [0]> ()
    start1 = Constant <value_ints = [1]> ()
    start2 = Constant <value_ints = [2]> ()
    M_1 = Reshape(M, start1)
    end1 = Add(M_1, start1)
    end2 = Add(M_1, start2)
    left_c = Slice(fbin, start0, M_1)
    center_c = Slice(fbin, start1, end1)
    right_c = Slice(fbin, start2, end2)
    left = Unsqueeze(left_c, start0)
    center = Unsqueeze(center_c, start0)
    right = Unsqueeze(right_c, start0)
    j_i = Range(zero_i, bins, one_i)
    j_f = Cast <to = 11> (j_i)
    j = Unsqueeze(j_f, start1)
    flat = Equal(center, left)
    at_center = Equal(j, center)
    at_center_f = Cast <to = 11> (at_center)
    ge_left = Less(j, left)
    not_below = Not(ge_left)
    above_center = Greater(j, center)
    not_above = Not(above_center)
    rising_in = And(not_below, not_above)
    rise_num = Sub(j, left)
    rise_den = Sub(center, left)
    rise_den1 = Max(rise_den, one)
    rise = Div(rise_num, rise_den1)
    rise_in_f = Cast <to = 11> (rising_in)
    rise_v = Mul(rise, rise_in_f)
    first = Where(flat, at_center_f, rise_v)
    has_fall = Greater(right, center)
    below_center = Less(j, center)
    from_center = Not(below_center)
    below_right = Less(j, right)
    fall_span = And(from_center, below_right)
    falling = And(has_fall, fall_span)
    fall_num = Sub(right, j)
    fall_den = Sub(right, center)
    fall_den1 = Max(fall_den, one)
    fall = Div(fall_num, fall_den1)
    weights = Where(falling, fall, first)
    output = Cast <to = )" + std::to_string(dtype) + R"(> (weights)
  )");
}

// RoiAlign with a fixed sampling_ratio, as ONNX's reference computes it: per region, sr x sr
// sample points in each output bin (their offsets in bins are constants), each sample bilinear
// from its four neighbours (zero outside [-1, H] x [-1, W], clamped to the last row and column),
// then averaged (avg) or maxed (max: the largest weighted neighbour, as onnxruntime does). X is
// viewed as [N*H*W, C] and gathered at (batch, y, x) for all channels at once.
void roi_align_body(const onnx::NodeProto& n, int64_t opset, onnx::FunctionProto& f) {
  auto attr_s = [&](const std::string& name, const std::string& dflt) {
    const onnx::AttributeProto* a = find_attr(n, name);
    return a != nullptr ? a->s() : dflt;
  };
  const std::string mode = attr_s("mode", "avg");
  const std::string ctm = attr_s("coordinate_transformation_mode", opset >= 16 ? "half_pixel" : "output_half_pixel");
  const int64_t oh = attr_i(n, "output_height", 1), ow = attr_i(n, "output_width", 1);
  const int64_t sr = attr_i(n, "sampling_ratio", 0);
  const onnx::AttributeProto* scale_attr = find_attr(n, "spatial_scale");
  const float scale = scale_attr != nullptr ? scale_attr->f() : 1.0f;
  if (mode != "avg" && mode != "max") throw Error("RoiAlign: mode '" + mode + "' is not avg or max");
  if (ctm != "half_pixel" && ctm != "output_half_pixel")
    throw Error("RoiAlign: coordinate_transformation_mode '" + ctm + "' is not half_pixel or output_half_pixel");
  if (oh < 1 || ow < 1 || oh > 1024 || ow > 1024)
    throw Error("RoiAlign: output_height and output_width should be 1 to 1024");
  if (sr >= 1 && (oh * sr > 4096 || ow * sr > 4096))
    throw Error("RoiAlign: output_height and output_width times sampling_ratio should be at most 4096");
  if (sr < 1 || sr > 64)
    throw Error("RoiAlign: sampling_ratio " + std::to_string(sr) +
                " is not supported: Kiln takes a fixed number of samples per bin, 1 to 64 (0, adaptive, makes "
                "the count depend on each region's size)");
  auto offsets = [&](int64_t bins) {  // bin + (i + 0.5) / sr, for every sample along an axis
    std::string v = "[";
    for (int64_t b = 0; b < bins; ++b)
      for (int64_t i = 0; i < sr; ++i)
        v += (v.size() > 1 ? ", " : "") + num_text(static_cast<float>(static_cast<double>(b) + (static_cast<double>(i) + 0.5) / sr));
    return v + "]";
  };
  std::string t = R"(
    roisf = Cast <to = 1> (rois)
    scale = Constant <value_float = )" + num_text(scale) + R"(> ()
    shift = Constant <value_float = )" + (ctm == "half_pixel" ? "0.5" : "0.0") + R"(> ()
    scaled = Mul(roisf, scale)
    box = Sub(scaled, shift)
    i0 = Constant <value_int = 0> ()
    i1 = Constant <value_int = 1> ()
    i2 = Constant <value_int = 2> ()
    i3 = Constant <value_int = 3> ()
    x1 = Gather <axis = 1> (box, i0)
    y1 = Gather <axis = 1> (box, i1)
    x2 = Gather <axis = 1> (box, i2)
    y2 = Gather <axis = 1> (box, i3)
    zero = Constant <value_float = 0.0> ()
    one = Constant <value_float = 1.0> ()
    minus_one = Constant <value_float = -1.0> ()
    axis1 = Constant <value_ints = [1]> ()
    N = Shape <end = 1> (X)
    C = Shape <start = 1, end = 2> (X)
    H_i = Shape <start = 2, end = 3> (X)
    W_i = Shape <start = 3, end = 4> (X)
    H_s = Squeeze(H_i)
    W_s = Squeeze(W_i)
    H_f = Cast <to = 1> (H_i)
    W_f = Cast <to = 1> (W_i)
    Xt = Transpose <perm = [0, 2, 3, 1]> (X)
    minus1 = Constant <value_ints = [-1]> ()
    Xt_shape = Concat <axis = 0> (minus1, C)
    Xflat = Reshape(Xt, Xt_shape)
    batch = Unsqueeze(batch_indices, axis1)
  )";
  // Per axis: the samples' low and high rows (columns), their weights, and whether they count.
  auto axis = [&](const std::string& a, const std::string& lo, const std::string& hi, const std::string& size_f,
                  int64_t bins) {
    t += a + "_len0 = Sub(" + hi + ", " + lo + ")\n";
    t += ctm == "output_half_pixel" ? a + "_len = Max(" + a + "_len0, one)\n" : a + "_len = Identity(" + a + "_len0)\n";
    t += a + "_bins = Constant <value_float = " + std::to_string(bins) + ".0> ()\n";
    t += a + "_bin = Div(" + a + "_len, " + a + "_bins)\n";
    t += a + "_offsets = Constant <value_floats = " + offsets(bins) + "> ()\n";
    t += a + "_bin2 = Unsqueeze(" + a + "_bin, axis1)\n" + a + "_lo2 = Unsqueeze(" + lo + ", axis1)\n";
    t += a + "_step = Mul(" + a + "_bin2, " + a + "_offsets)\n" + a + "_p = Add(" + a + "_lo2, " + a + "_step)\n";
    t += a + "_under = Less(" + a + "_p, minus_one)\n" + a + "_over = Greater(" + a + "_p, " + size_f + ")\n" + a +
         "_out = Or(" + a + "_under, " + a + "_over)\n" + a + "_in = Not(" + a + "_out)\n" + a +
         "_mask = Cast <to = 1> (" + a + "_in)\n";
    t += a + "_pc = Max(" + a + "_p, zero)\n" + a + "_fl = Floor(" + a + "_pc)\n" + a + "_last = Sub(" + size_f +
         ", one)\n";
    t += a + "_at_end = Less(" + a + "_fl, " + a + "_last)\n" + a + "_edge = Not(" + a + "_at_end)\n";
    t += a + "_lo_f = Min(" + a + "_fl, " + a + "_last)\n" + a + "_p2 = Where(" + a + "_edge, " + a + "_lo_f, " + a +
         "_pc)\n";
    t += a + "_hi_f0 = Add(" + a + "_lo_f, one)\n" + a + "_hi_f = Min(" + a + "_hi_f0, " + a + "_last)\n";
    t += a + "_l = Sub(" + a + "_p2, " + a + "_lo_f)\n" + a + "_h = Sub(one, " + a + "_l)\n";
    t += a + "_wl = Mul(" + a + "_h, " + a + "_mask)\n" + a + "_wh = Mul(" + a + "_l, " + a + "_mask)\n";
    t += a + "_ilo = Cast <to = 7> (" + a + "_lo_f)\n" + a + "_ihi = Cast <to = 7> (" + a + "_hi_f)\n";
  };
  axis("y", "y1", "y2", "H_f", oh);
  axis("x", "x1", "x2", "W_f", ow);
  // [R, Sy, 1] and [R, 1, Sx] index and weight grids for the four neighbours.
  t += R"(
    axis2 = Constant <value_ints = [2]> ()
    batch3 = Unsqueeze(batch, axis2)
    bH = Mul(batch3, H_s)
  )";
  std::vector<std::string> terms;
  for (const char* ya : {"lo", "hi"})
    for (const char* xa : {"lo", "hi"}) {
      const std::string p = std::string("c_") + ya + xa;
      const std::string yi = std::string("y_i") + ya, xi = std::string("x_i") + xa;
      const std::string yw = std::string("y_w") + (ya[0] == 'l' ? "l" : "h"), xw = std::string("x_w") + (xa[0] == 'l' ? "l" : "h");
      t += p + "_y3 = Unsqueeze(" + yi + ", axis2)\n" + p + "_x3 = Unsqueeze(" + xi + ", axis1)\n";
      t += p + "_row = Add(bH, " + p + "_y3)\n" + p + "_rowW = Mul(" + p + "_row, W_s)\n" + p + "_idx = Add(" + p +
           "_rowW, " + p + "_x3)\n";
      t += p + "_v = Gather(Xflat, " + p + "_idx)\n";  // [R, Sy, Sx, C]
      t += p + "_wy = Unsqueeze(" + yw + ", axis2)\n" + p + "_wx = Unsqueeze(" + xw + ", axis1)\n" + p +
           "_w = Mul(" + p + "_wy, " + p + "_wx)\n" + p + "_w4 = Unsqueeze(" + p + "_w, minus1)\n" + p +
           "_wt = CastLike(" + p + "_w4, X)\n" + p + "_term = Mul(" + p + "_v, " + p + "_wt)\n";
      terms.push_back(p + "_term");
    }
  if (mode == "avg")
    t += "s01 = Add(" + terms[0] + ", " + terms[1] + ")\ns012 = Add(s01, " + terms[2] + ")\nsamples = Add(s012, " +
         terms[3] + ")\n";
  else
    t += "samples = Max(" + terms[0] + ", " + terms[1] + ", " + terms[2] + ", " + terms[3] + ")\n";
  t += "R = Shape <end = 1> (rois)\n";
  t += "grid_dims = Constant <value_ints = [" + std::to_string(oh) + ", " + std::to_string(sr) + ", " +
       std::to_string(ow) + ", " + std::to_string(sr) + "]> ()\n";
  t += "split_shape = Concat <axis = 0> (R, grid_dims, C)\nsplit = Reshape(samples, split_shape)\n";
  t += std::string("pooled = ") + (mode == "avg" ? "ReduceMean" : "ReduceMax") + " <axes = [2, 4], keepdims = 0> (split)\n";
  t += "Y = Transpose <perm = [0, 3, 1, 2]> (pooled)\n";
  make_body(f, "RoiAlign", {"X", "rois", "batch_indices"}, {"Y"}, t);
}

// ---- ai.onnx.preview.training's optimizers: one update step, elementwise, per the spec's formulas.
// Inputs R (learning rate), T (step count), then the n tensors X, the n gradients G and the n (or
// 2n, Adam) states; outputs the new X then the new states.

float attr_f(const onnx::NodeProto& n, const std::string& name, float dflt) {
  const onnx::AttributeProto* a = find_attr(n, name);
  return a != nullptr ? a->f() : dflt;
}
// A constant in the type of the first tensor updated (float, double or float16).
std::string float_const(const std::string& name, float v) {
  return name + "_f = Constant <value_float = " + num_text(v) + "> ()\n" + name + " = CastLike(" + name + "_f, X0)\n";
}
// The number of tensors a call updates: (inputs - 2) / per_tensor, checked.
int optimizer_tensors(const onnx::NodeProto& n, int per_tensor) {
  const int k = n.input_size() - 2;
  if (k <= 0 || k % per_tensor != 0 || n.output_size() > k / per_tensor * (per_tensor - 1))
    throw Error(n.op_type() + ": expects R, T and " + std::to_string(per_tensor) + " inputs per tensor (X, G, state" +
                (per_tensor == 4 ? "s" : "") + "), and at most " + std::to_string(per_tensor - 1) +
                " outputs per tensor; got " + std::to_string(n.input_size()) + " inputs and " +
                std::to_string(n.output_size()) + " outputs");
  return k / per_tensor;
}
std::vector<std::string> names(const std::string& prefix, int count) {
  std::vector<std::string> v;
  for (int i = 0; i < count; ++i) v.push_back(prefix + std::to_string(i));
  return v;
}
std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

void adagrad_body(const onnx::NodeProto& n, int64_t, onnx::FunctionProto& f) {
  const int k = optimizer_tensors(n, 3);
  std::string t = float_const("decay", attr_f(n, "decay_factor", 0.0f)) + float_const("eps", attr_f(n, "epsilon", 1e-6f)) +
                  float_const("norm", attr_f(n, "norm_coefficient", 0.0f)) + float_const("one", 1.0f) + R"(
    R_x = CastLike(R, X0)
    T_f = CastLike(T, X0)
    decayed = Mul(T_f, decay)
    denom = Add(decayed, one)
    r = Div(R_x, denom)
  )";
  for (int i = 0; i < k; ++i) {
    const std::string s = std::to_string(i);
    t += "nx" + s + " = Mul(norm, X" + s + ")\ng" + s + " = Add(nx" + s + ", G" + s + ")\n";
    t += "g2_" + s + " = Mul(g" + s + ", g" + s + ")\nH_new" + s + " = Add(H" + s + ", g2_" + s + ")\n";
    t += "root" + s + " = Sqrt(H_new" + s + ")\nadaptive" + s + " = Add(root" + s + ", eps)\n";
    t += "rg" + s + " = Mul(r, g" + s + ")\nstep" + s + " = Div(rg" + s + ", adaptive" + s + ")\n";
    t += "X_new" + s + " = Sub(X" + s + ", step" + s + ")\n";
  }
  make_body(f, "Adagrad", concat(concat(concat({"R", "T"}, names("X", k)), names("G", k)), names("H", k)),
            concat(names("X_new", k), names("H_new", k)), t);
}

void momentum_body(const onnx::NodeProto& n, int64_t, onnx::FunctionProto& f) {
  const int k = optimizer_tensors(n, 3);
  auto mode = find_attr(n, "mode");
  const std::string m = mode != nullptr ? mode->s() : "standard";
  if (m != "standard" && m != "nesterov") throw Error("Momentum: mode '" + m + "' is not standard or nesterov");
  if (find_attr(n, "alpha") == nullptr || find_attr(n, "beta") == nullptr)
    throw Error("Momentum: attributes 'alpha' and 'beta' are required");
  std::string t = float_const("alpha", attr_f(n, "alpha", 0.0f)) + float_const("beta", attr_f(n, "beta", 0.0f)) +
                  float_const("norm", attr_f(n, "norm_coefficient", 0.0f)) + float_const("one", 1.0f) + R"(
    R_x = CastLike(R, X0)
    zero_i = Constant <value_int = 0> ()
    started = Greater(T, zero_i)
    beta_t = Where(started, beta, one)
  )";
  for (int i = 0; i < k; ++i) {
    const std::string s = std::to_string(i);
    t += "nx" + s + " = Mul(norm, X" + s + ")\ng" + s + " = Add(nx" + s + ", G" + s + ")\n";
    t += "av" + s + " = Mul(alpha, V" + s + ")\nbg" + s + " = Mul(beta_t, g" + s + ")\nV_new" + s + " = Add(av" + s +
         ", bg" + s + ")\n";
    if (m == "standard") {
      t += "dir" + s + " = Identity(V_new" + s + ")\n";
    } else {
      t += "av_new" + s + " = Mul(alpha, V_new" + s + ")\ndir" + s + " = Add(g" + s + ", av_new" + s + ")\n";
    }
    t += "step" + s + " = Mul(R_x, dir" + s + ")\nX_new" + s + " = Sub(X" + s + ", step" + s + ")\n";
  }
  make_body(f, "Momentum", concat(concat(concat({"R", "T"}, names("X", k)), names("G", k)), names("V", k)),
            concat(names("X_new", k), names("V_new", k)), t);
}

void adam_body(const onnx::NodeProto& n, int64_t, onnx::FunctionProto& f) {
  const int k = optimizer_tensors(n, 4);
  std::string t = float_const("alpha", attr_f(n, "alpha", 0.9f)) + float_const("beta", attr_f(n, "beta", 0.999f)) +
                  float_const("eps", attr_f(n, "epsilon", 1e-6f)) + float_const("norm", attr_f(n, "norm_coefficient", 0.0f)) +
                  float_const("post", attr_f(n, "norm_coefficient_post", 0.0f)) + float_const("one", 1.0f) + R"(
    one_m_alpha = Sub(one, alpha)
    one_m_beta = Sub(one, beta)
    keep = Sub(one, post)
    zero_i = Constant <value_int = 0> ()
    started = Greater(T, zero_i)
    T_f = CastLike(T, X0)
    R_x = CastLike(R, X0)
    alpha_t = Pow(alpha, T_f)
    beta_t = Pow(beta, T_f)
    bias_b = Sub(one, beta_t)
    bias_b_root = Sqrt(bias_b)
    bias_a = Sub(one, alpha_t)
    bias = Div(bias_b_root, bias_a)
    R_bias = Mul(R_x, bias)
    r = Where(started, R_bias, R_x)
  )";
  for (int i = 0; i < k; ++i) {
    const std::string s = std::to_string(i);
    t += "nx" + s + " = Mul(norm, X" + s + ")\ng" + s + " = Add(nx" + s + ", G" + s + ")\n";
    t += "av" + s + " = Mul(alpha, V" + s + ")\nag" + s + " = Mul(one_m_alpha, g" + s + ")\nV_new" + s + " = Add(av" +
         s + ", ag" + s + ")\n";
    t += "g2_" + s + " = Mul(g" + s + ", g" + s + ")\nbh" + s + " = Mul(beta, H" + s + ")\nbg" + s +
         " = Mul(one_m_beta, g2_" + s + ")\nH_new" + s + " = Add(bh" + s + ", bg" + s + ")\n";
    t += "root" + s + " = Sqrt(H_new" + s + ")\nden" + s + " = Add(root" + s + ", eps)\n";
    t += "rv" + s + " = Mul(r, V_new" + s + ")\nstep" + s + " = Div(rv" + s + ", den" + s + ")\nx1_" + s + " = Sub(X" +
         s + ", step" + s + ")\nX_new" + s + " = Mul(x1_" + s + ", keep)\n";
  }
  make_body(f, "Adam",
            concat(concat(concat(concat({"R", "T"}, names("X", k)), names("G", k)), names("V", k)), names("H", k)),
            concat(concat(names("X_new", k), names("V_new", k)), names("H_new", k)), t);
}

// TfIdfVectorizer over integer tokens (X [L] or [N, L]): for each n-gram length and skip distance
// d (only d = 1 for unigrams, as onnxruntime counts them once), the n slices X[:, j d : ...] are
// compared with all pool n-grams of that length at once ([N, positions, G]), matched positions
// counted, weighted (TF, IDF or TFIDF) and gathered into the positions ngram_indexes gives.
void tfidf_body(const onnx::NodeProto& n, int64_t, onnx::FunctionProto& f) {
  auto attr_s = [&](const std::string& name, const std::string& dflt) {
    const onnx::AttributeProto* a = find_attr(n, name);
    return a != nullptr ? a->s() : dflt;
  };
  if (find_attr(n, "pool_strings") != nullptr)
    throw Error("TfIdfVectorizer: string n-grams (pool_strings) are not supported; Kiln has no string tensors");
  const std::string mode = attr_s("mode", "");
  if (mode != "TF" && mode != "IDF" && mode != "TFIDF") throw Error("TfIdfVectorizer: mode should be TF, IDF or TFIDF");
  const int64_t min_n = attr_i(n, "min_gram_length", 0), max_n = attr_i(n, "max_gram_length", 0),
                skips = attr_i(n, "max_skip_count", 0);
  const std::vector<int64_t> pool = attr_ints(n, "pool_int64s"), counts = attr_ints(n, "ngram_counts"),
                             indexes = attr_ints(n, "ngram_indexes");
  std::vector<float> weights;
  if (const onnx::AttributeProto* w = find_attr(n, "weights")) weights.assign(w->floats().begin(), w->floats().end());
  if (min_n < 1 || max_n < min_n || max_n > static_cast<int64_t>(counts.size()) || skips < 0 || skips > 64)
    throw Error("TfIdfVectorizer: min_gram_length " + std::to_string(min_n) + ", max_gram_length " +
                std::to_string(max_n) + ", max_skip_count " + std::to_string(skips) + " and " +
                std::to_string(counts.size()) + " ngram_counts do not fit together");
  // The pool's n-grams by length: [start, end) in pool for length k + 1.
  std::vector<std::vector<std::vector<int64_t>>> grams(counts.size());
  size_t total = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    const int64_t start = counts[k], end = k + 1 < counts.size() ? counts[k + 1] : static_cast<int64_t>(pool.size());
    const int64_t len = static_cast<int64_t>(k) + 1;
    if (start < 0 || end < start || end > static_cast<int64_t>(pool.size()) || (end - start) % len != 0)
      throw Error("TfIdfVectorizer: ngram_counts " + ints_text(counts) + " do not split pool_int64s (" +
                  std::to_string(pool.size()) + " values) into n-grams");
    for (int64_t g = start; g < end; g += len) grams[k].emplace_back(pool.begin() + g, pool.begin() + g + len);
    total += grams[k].size();
  }
  if (indexes.size() != total || (!weights.empty() && weights.size() != total))
    throw Error("TfIdfVectorizer: the pool holds " + std::to_string(total) + " n-grams, ngram_indexes has " +
                std::to_string(indexes.size()) + (weights.empty() ? "" : " and weights " + std::to_string(weights.size())));
  int64_t outputs = 0;
  for (int64_t i : indexes) {
    if (i < 0 || i >= (1 << 20)) throw Error("TfIdfVectorizer: ngram_indexes value " + std::to_string(i) + " is out of range");
    outputs = std::max(outputs, i + 1);
  }
  std::vector<int64_t> sorted = indexes;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    throw Error("TfIdfVectorizer: ngram_indexes names an output position twice");
  if (total * static_cast<size_t>(skips + 1) > 65536)
    throw Error("TfIdfVectorizer: " + std::to_string(total) + " n-grams with " + std::to_string(skips + 1) +
                " skip distances are more than Kiln's body handles (65536 comparisons per position)");
  size_t slices = 0;  // the body's size: one slice per item of each counted length and skip distance
  for (size_t k = 0; k < grams.size(); ++k)
    if (!grams[k].empty() && static_cast<int64_t>(k) + 1 >= min_n && static_cast<int64_t>(k) + 1 <= max_n)
      slices += (k + 1) * (k == 0 ? 1 : static_cast<size_t>(skips + 1));
  if (slices > 4096)
    throw Error("TfIdfVectorizer: n-grams up to length " + std::to_string(max_n) + " with " +
                std::to_string(skips + 1) + " skip distances are more than Kiln's body handles");
  std::string t = R"(
    last = Constant <value_ints = [-1]> ()
    L = Shape <start = -1> (X)
    x_shape = Concat <axis = 0> (last, L)
    X64 = Cast <to = 7> (X)
    x2 = Reshape(X64, x_shape)
    zero = Constant <value_ints = [0]> ()
    one = Constant <value_ints = [1]> ()
    axis1 = Constant <value_ints = [1]> ()
    axis2 = Constant <value_ints = [2]> ()
  )";
  std::vector<std::string> per_length;  // [N, G_k] counts for each length in [min_n, max_n]
  std::vector<int64_t> order;           // pool positions of the n-grams in per_length's order
  size_t pool_pos = 0;
  for (size_t k = 0; k < grams.size(); ++k) {
    const int64_t len = static_cast<int64_t>(k) + 1;
    const size_t first = pool_pos;
    pool_pos += grams[k].size();
    if (len < min_n || len > max_n || grams[k].empty()) continue;
    const std::string g = "g" + std::to_string(len);
    for (int64_t j = 0; j < len; ++j) {  // the j-th item of every n-gram of this length: [1, 1, G]
      std::vector<int64_t> items;
      for (const auto& gram : grams[k]) items.push_back(gram[j]);
      t += g + "_item" + std::to_string(j) + " = Constant <value_ints = " + ints_text(items) + "> ()\n";
    }
    std::vector<std::string> per_skip;
    for (int64_t d = 1; d <= (len == 1 ? 1 : skips + 1); ++d) {
      const std::string p = g + "_d" + std::to_string(d);
      std::string match;
      for (int64_t j = 0; j < len; ++j) {
        const std::string q = p + "_j" + std::to_string(j);
        t += q + "_start = Constant <value_ints = [" + std::to_string(j * d) + "]> ()\n";
        t += q + "_back = Constant <value_ints = [" + std::to_string((len - 1 - j) * d) + "]> ()\n";
        t += q + "_end0 = Sub(L, " + q + "_back)\n" + q + "_end = Max(" + q + "_end0, zero)\n";
        t += q + "_x = Slice(x2, " + q + "_start, " + q + "_end, axis1)\n";
        t += q + "_x3 = Unsqueeze(" + q + "_x, axis2)\n";
        t += q + "_eq = Equal(" + q + "_x3, " + g + "_item" + std::to_string(j) + ")\n";
        if (match.empty()) {
          match = q + "_eq";
        } else {
          t += q + "_and = And(" + match + ", " + q + "_eq)\n";
          match = q + "_and";
        }
      }
      t += p + "_hits = Cast <to = 1> (" + match + ")\n";
      t += p + "_count = ReduceSum <keepdims = 0> (" + p + "_hits, axis1)\n";
      per_skip.push_back(p + "_count");
    }
    std::string sum = per_skip[0];
    for (size_t i = 1; i < per_skip.size(); ++i) {
      t += g + "_sum" + std::to_string(i) + " = Add(" + sum + ", " + per_skip[i] + ")\n";
      sum = g + "_sum" + std::to_string(i);
    }
    per_length.push_back(sum);
    for (size_t i = 0; i < grams[k].size(); ++i) order.push_back(static_cast<int64_t>(first + i));
  }
  std::string all;
  if (per_length.empty()) {  // no n-gram of a counted length: all zeros
    t += "N = Shape <end = 1> (x2)\nz_shape = Concat <axis = 0> (N, one)\nzeros_i = ConstantOfShape(z_shape)\n"
         "tf = Cast <to = 1> (zeros_i)\n";
    order.clear();
    all = "tf";
  } else if (per_length.size() == 1) {
    all = per_length[0];
  } else {
    t += "tf = Concat <axis = 1> (";
    for (size_t i = 0; i < per_length.size(); ++i) t += (i ? ", " : "") + per_length[i];
    t += ")\n";
    all = "tf";
  }
  // Weighting per n-gram, then a zero column appended and each output position gathered from the
  // n-gram that ngram_indexes sends there (or from the zero column).
  const size_t G = order.empty() ? 1 : order.size();
  std::vector<float> w(G, 1.0f);
  std::vector<int64_t> source(static_cast<size_t>(outputs), static_cast<int64_t>(G));
  for (size_t i = 0; i < order.size(); ++i) {
    if (!weights.empty()) w[i] = weights[static_cast<size_t>(order[i])];
    source[static_cast<size_t>(indexes[static_cast<size_t>(order[i])])] = static_cast<int64_t>(i);
  }
  std::string wt = "[";
  for (size_t i = 0; i < w.size(); ++i) wt += (i ? ", " : "") + num_text(w[i]);
  t += "w = Constant <value_floats = " + wt + "]> ()\n";
  if (mode == "TF") {
    t += "weighted = Identity(" + all + ")\n";
  } else if (mode == "IDF") {
    t += "zero_f = Constant <value_float = 0.0> ()\npresent = Greater(" + all +
         ", zero_f)\npresent_f = Cast <to = 1> (present)\nweighted = Mul(present_f, w)\n";
  } else {
    t += "weighted = Mul(" + all + ", w)\n";
  }
  t += R"(
    N = Shape <end = 1> (x2)
    zero_col_shape = Concat <axis = 0> (N, one)
    zero_col_i = ConstantOfShape(zero_col_shape)
    zero_col = Cast <to = 1> (zero_col_i)
    padded = Concat <axis = 1> (weighted, zero_col)
  )";
  t += "source = Constant <value_ints = " + ints_text(source) + "> ()\n";
  t += "Y2 = Gather <axis = 1> (padded, source)\n";
  t += "lead = Shape <end = -1> (X)\nC = Constant <value_ints = [" + std::to_string(outputs) +
       "]> ()\nY_shape = Concat <axis = 0> (lead, C)\nY = Reshape(Y2, Y_shape)\n";
  make_body(f, "TfIdfVectorizer", {"X"}, {"Y"}, t);
}

}  // namespace

std::string body_key(const std::string& domain, const std::string& op_type) {
  return default_domain(domain) ? op_type : domain + "::" + op_type;
}

const std::map<std::string, KilnBody>& kiln_bodies() {
  static const std::map<std::string, KilnBody> bodies = {
      {"DFT", {dft_body, "y = DFT <onesided = 1> (x, length)"}},
      {"GridSample", {grid_sample_body, "y = GridSample <mode = \"bicubic\"> (x, grid)"}},
      {"MaxUnpool", {max_unpool_body, "y = MaxUnpool <kernel_shape = [2, 2]> (x, i, shape)"}},
      {"MelWeightMatrix", {mel_weight_matrix_body, "y = MelWeightMatrix (m, l, r, lo, hi)"}},
      {"ReverseSequence", {reverse_sequence_body, "y = ReverseSequence (x, lens)"}},
      {"RoiAlign", {roi_align_body, "y = RoiAlign <sampling_ratio = 2, mode = \"max\"> (x, rois, batch)"}},
      {"STFT", {stft_body, "y = STFT (x, step, window, length)"}},
      {"TfIdfVectorizer",
       {tfidf_body, "y = TfIdfVectorizer <mode = \"TFIDF\", min_gram_length = 1, max_gram_length = 2, "
                    "max_skip_count = 1, pool_int64s = [1, 2, 3], ngram_counts = [0, 1], ngram_indexes = [0, 1]> (x)"}},
      {"ai.onnx.preview.training::Adagrad", {adagrad_body, "y, h = Adagrad (r, t, x, g, h)"}},
      {"ai.onnx.preview.training::Adam", {adam_body, "y, v, h = Adam (r, t, x, g, v, h)"}},
      {"ai.onnx.preview.training::Momentum",
       {momentum_body, "y, v = Momentum <alpha = 0.5, beta = 0.5, mode = \"nesterov\"> (r, t, x, g, v)"}},
  };
  return bodies;
}

}  // namespace kiln::graph::detail
