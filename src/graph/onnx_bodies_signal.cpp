// Kiln's bodies for DFT, STFT and MelWeightMatrix (onnx_kiln_bodies.h).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "graph/onnx_kiln_bodies.h"

namespace kiln::graph::detail {

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

}  // namespace kiln::graph::detail
