// Kiln's bodies for GridSample and RoiAlign (onnx_kiln_bodies.h).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "graph/onnx_kiln_bodies.h"

namespace kiln::graph::detail {

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

}  // namespace kiln::graph::detail
