// The window geometry of Conv, ConvTranspose and the pools (core/infer/nn_geometry.h), shared by
// their shape inference (conv/conv.cpp, pool/window.cpp, and quant/conv.cpp for the integer and
// quantized convolutions) and by the CPU and CUDA kernels.
#include "core/infer/nn_geometry.h"

#include <string>

#include "core/shape_infer.h"

namespace kiln::nn {

namespace {

// Attribute values beyond this are rejected: it keeps every product below in int64 range.
constexpr int64_t kMaxAttr = int64_t{1} << 31;

int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw Error(std::string(what) + " overflows int64");
  return r;
}
int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) throw Error(std::string(what) + " overflows int64");
  return r;
}

// An attribute list of n values (or `fill` repeated when empty), each in [lo, kMaxAttr].
std::vector<int64_t> attr_list(const std::vector<int64_t>& v, size_t n, int64_t fill, int64_t lo, const char* name) {
  if (v.empty()) return std::vector<int64_t>(n, fill);
  if (v.size() != n)
    throw Error(std::string(name) + " has " + std::to_string(v.size()) + " values, expected " + std::to_string(n));
  for (int64_t x : v)
    if (x < lo || x > kMaxAttr) throw Error(std::string(name) + " value " + std::to_string(x) + " is out of range");
  return v;
}

int64_t floor_div(int64_t a, int64_t b) {  // b > 0
  int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}
int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

void check_data_shape(std::span<const int64_t> x, const char* what) {
  if (x.size() < 3)
    throw Error(std::string(what) + " must have rank >= 3 ([N, C, spatial...]), got " +
                shape_string({x.begin(), x.end()}));
  // Bounded so that every size computed below stays far inside int64.
  for (int64_t d : x)
    if (d < 0 || d > (int64_t{1} << 48)) throw Error(std::string(what) + " has a dimension out of range");
}

// Explicit pads or auto_pad, then the forward (Conv/pool) output size per axis.
void forward_output(WindowGeometry& g, AutoPad auto_pad, const std::vector<int64_t>& pads, bool ceil_mode) {
  const size_t n = g.rank();
  g.pads = attr_list(pads, 2 * n, 0, 0, "pads");
  g.out.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const int64_t ek = (g.kernel[i] - 1) * g.dilations[i] + 1;
    const int64_t in = g.in[i], s = g.strides[i];
    switch (auto_pad) {
      case AutoPad::kNotSet: {
        const int64_t span = in + g.pads[i] + g.pads[n + i] - ek;
        g.out[i] = (ceil_mode ? ceil_div(span, s) : floor_div(span, s)) + 1;
        // With ceil_mode a window may hang over the end, even when the kernel is longer than the
        // padded input (ONNX and onnxruntime then give one output).
        if (g.out[i] < 1)
          throw Error("spatial axis " + std::to_string(i) + ": padded input " + std::to_string(span + ek) +
                      " is smaller than the dilated kernel " + std::to_string(ek));
        // ONNX: with ceil_mode the last window must start inside the input or the left padding.
        if (ceil_mode && (g.out[i] - 1) * s >= in + g.pads[i]) --g.out[i];
        break;
      }
      case AutoPad::kValid:
        if (in < ek)
          throw Error("spatial axis " + std::to_string(i) + ": input " + std::to_string(in) +
                      " is smaller than the dilated kernel " + std::to_string(ek) + " (auto_pad VALID)");
        g.pads[i] = g.pads[n + i] = 0;
        g.out[i] = (in - ek) / s + 1;
        break;
      case AutoPad::kSameUpper:
      case AutoPad::kSameLower: {
        g.out[i] = ceil_div(in, s);
        int64_t total = g.out[i] > 0 ? (g.out[i] - 1) * s + ek - in : 0;
        if (total < 0) total = 0;
        const int64_t small = total / 2, big = total - small;
        g.pads[i] = auto_pad == AutoPad::kSameUpper ? small : big;
        g.pads[n + i] = auto_pad == AutoPad::kSameUpper ? big : small;
        break;
      }
    }
  }
}

}  // namespace

WindowGeometry conv_geometry(const ConvAttrs& attrs, std::span<const int64_t> x, std::span<const int64_t> w) {
  check_data_shape(x, "Conv input X");
  if (w.size() != x.size())
    throw Error("Conv weight W " + shape_string({w.begin(), w.end()}) + " must have the rank of X " +
                shape_string({x.begin(), x.end()}));
  const size_t n = x.size() - 2;
  if (attrs.group < 1 || attrs.group > kMaxAttr) throw Error("Conv group must be >= 1");
  if (x[1] % attrs.group != 0)
    throw Error("Conv: input channels " + std::to_string(x[1]) + " are not divisible by group " +
                std::to_string(attrs.group));
  if (w[1] * attrs.group != x[1])
    throw Error("Conv: W " + shape_string({w.begin(), w.end()}) + " expects " + std::to_string(w[1]) +
                " channels per group, X has " + std::to_string(x[1]) + " channels in " + std::to_string(attrs.group) +
                " groups");
  if (w[0] % attrs.group != 0)
    throw Error("Conv: output channels " + std::to_string(w[0]) + " are not divisible by group");
  WindowGeometry g;
  g.in.assign(x.begin() + 2, x.end());
  g.kernel.assign(w.begin() + 2, w.end());
  for (int64_t k : g.kernel)
    if (k < 1 || k > kMaxAttr) throw Error("Conv: kernel dimension " + std::to_string(k) + " is out of range");
  if (!attrs.kernel_shape.empty() && attrs.kernel_shape != g.kernel)
    throw Error("Conv: kernel_shape does not match W " + shape_string({w.begin(), w.end()}));
  g.strides = attr_list(attrs.strides, n, 1, 1, "strides");
  g.dilations = attr_list(attrs.dilations, n, 1, 1, "dilations");
  if (!attrs.output_padding.empty() || !attrs.output_shape.empty())
    throw Error("Conv does not take output_padding or output_shape");
  forward_output(g, attrs.auto_pad, attrs.pads, false);
  return g;
}

WindowGeometry conv_transpose_geometry(const ConvAttrs& attrs, std::span<const int64_t> x, std::span<const int64_t> w) {
  check_data_shape(x, "ConvTranspose input X");
  if (w.size() != x.size())
    throw Error("ConvTranspose weight W " + shape_string({w.begin(), w.end()}) + " must have the rank of X " +
                shape_string({x.begin(), x.end()}));
  const size_t n = x.size() - 2;
  if (attrs.group < 1 || attrs.group > kMaxAttr) throw Error("ConvTranspose group must be >= 1");
  if (w[0] != x[1])
    throw Error("ConvTranspose: W " + shape_string({w.begin(), w.end()}) + " must have X's " + std::to_string(x[1]) +
                " input channels first");
  if (x[1] % attrs.group != 0) throw Error("ConvTranspose: input channels are not divisible by group");
  WindowGeometry g;
  g.in.assign(x.begin() + 2, x.end());
  g.kernel.assign(w.begin() + 2, w.end());
  for (int64_t k : g.kernel)
    if (k < 1 || k > kMaxAttr) throw Error("ConvTranspose: kernel dimension " + std::to_string(k) + " is out of range");
  if (!attrs.kernel_shape.empty() && attrs.kernel_shape != g.kernel)
    throw Error("ConvTranspose: kernel_shape does not match W " + shape_string({w.begin(), w.end()}));
  g.strides = attr_list(attrs.strides, n, 1, 1, "strides");
  g.dilations = attr_list(attrs.dilations, n, 1, 1, "dilations");
  const std::vector<int64_t> out_pad = attr_list(attrs.output_padding, n, 0, 0, "output_padding");
  std::vector<int64_t> out_shape;
  if (!attrs.output_shape.empty()) {
    // Some exporters write the full [N, M, spatial...] shape: keep the spatial part.
    std::vector<int64_t> os = attrs.output_shape;
    if (os.size() == n + 2) os.erase(os.begin(), os.begin() + 2);
    out_shape = attr_list(os, n, 0, 0, "output_shape");
  }
  g.pads.assign(2 * n, 0);
  g.out.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const int64_t ek = (g.kernel[i] - 1) * g.dilations[i] + 1;
    // Size of the full (unpadded) result: stride * (in - 1) + output_padding + dilated kernel.
    const int64_t in_m1 = g.in[i] > 0 ? g.in[i] - 1 : 0;
    const int64_t full =
        checked_add(checked_mul(g.strides[i], in_m1, "ConvTranspose output"), out_pad[i] + ek, "ConvTranspose output");
    if (g.in[i] == 0) throw Error("ConvTranspose: spatial input dimension is 0");
    if (!out_shape.empty() || attrs.auto_pad == AutoPad::kSameUpper || attrs.auto_pad == AutoPad::kSameLower) {
      // ONNX: total_padding = full - output_shape (output_shape defaults to in * stride for SAME_*),
      // split with the odd part at the end for SAME_UPPER and at the beginning otherwise.
      g.out[i] = !out_shape.empty() ? out_shape[i] : checked_mul(g.in[i], g.strides[i], "ConvTranspose output");
      const int64_t total = full - g.out[i];
      const int64_t half = floor_div(total, 2);
      g.pads[i] = attrs.auto_pad == AutoPad::kSameUpper ? half : total - half;
      g.pads[n + i] = total - g.pads[i];
    } else {
      if (attrs.auto_pad == AutoPad::kNotSet) {
        const std::vector<int64_t> p = attr_list(attrs.pads, 2 * n, 0, 0, "pads");
        g.pads[i] = p[i];
        g.pads[n + i] = p[n + i];
      }
      g.out[i] = full - g.pads[i] - g.pads[n + i];
      if (g.out[i] < 0) throw Error("ConvTranspose: pads are larger than the output");
    }
  }
  return g;
}

WindowGeometry pool_geometry(const PoolAttrs& attrs, std::span<const int64_t> x) {
  check_data_shape(x, "pool input X");
  const size_t n = x.size() - 2;
  WindowGeometry g;
  g.in.assign(x.begin() + 2, x.end());
  if (attrs.kernel_shape.empty()) throw Error("kernel_shape is required");
  g.kernel = attr_list(attrs.kernel_shape, n, 1, 1, "kernel_shape");
  g.strides = attr_list(attrs.strides, n, 1, 1, "strides");
  g.dilations = attr_list(attrs.dilations, n, 1, 1, "dilations");
  if (attrs.ceil_mode != 0 && attrs.ceil_mode != 1) throw Error("ceil_mode must be 0 or 1");
  forward_output(g, attrs.auto_pad, attrs.pads, attrs.ceil_mode == 1);
  for (size_t i = 0; i < n; ++i) {
    const int64_t ek = (g.kernel[i] - 1) * g.dilations[i] + 1;
    // A window starting entirely in the padding would have nothing to pool.
    if (g.pads[i] >= ek || g.pads[n + i] >= ek)
      throw Error("pads must be smaller than the (dilated) kernel on spatial axis " + std::to_string(i));
  }
  return g;
}

}  // namespace kiln::nn
