// Conv and ConvTranspose by their ONNX definitions in float64, written independently of Kiln's
// kernels (no im2col, no tiles): every tap of every output summed one by one. Shared by the op
// tests, the geometry sweep (conv_sweep_test.cpp) and the convolution fuzzer (tests/fuzz).
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::test {

// A convolution with explicit pads on n spatial axes. Conv: X [batch, channels, in...],
// W [out_channels, channels / group, kernel...], Y [batch, out_channels, out()...]. Image position
// of output position o and tap j on axis i: o * strides[i] - pads_begin[i] + j * dilations[i].
// ConvTranspose: X [batch, channels, in...], W [channels, out_channels / group, kernel...], each
// input position o adds its taps into output position o * strides[i] - pads_begin[i] + j * dilations[i].
struct ConvProblem {
  int64_t batch = 1, channels = 1, out_channels = 1, group = 1;
  std::vector<int64_t> in, kernel, strides, dilations, pads_begin, pads_end;
  std::vector<int64_t> output_padding;  // ConvTranspose only (empty: zeros)

  size_t rank() const { return in.size(); }
  // Conv: floor((in + pb + pe - ((k - 1) * d + 1)) / s) + 1 per axis (may be <= 0 for bad geometry).
  std::vector<int64_t> conv_out() const {
    std::vector<int64_t> o(rank());
    for (size_t i = 0; i < rank(); ++i) {
      const int64_t span = in[i] + pads_begin[i] + pads_end[i] - ((kernel[i] - 1) * dilations[i] + 1);
      o[i] = span < 0 ? 0 : span / strides[i] + 1;
    }
    return o;
  }
  // ConvTranspose: s * (in - 1) + output_padding + (k - 1) * d + 1 - pb - pe per axis.
  std::vector<int64_t> transpose_out() const {
    std::vector<int64_t> o(rank());
    for (size_t i = 0; i < rank(); ++i)
      o[i] = strides[i] * (in[i] - 1) + (output_padding.empty() ? 0 : output_padding[i]) +
             (kernel[i] - 1) * dilations[i] + 1 - pads_begin[i] - pads_end[i];
    return o;
  }
  // [begin..., end...] as ONNX's pads attribute.
  std::vector<int64_t> pads() const {
    std::vector<int64_t> p = pads_begin;
    p.insert(p.end(), pads_end.begin(), pads_end.end());
    return p;
  }
};

inline int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t d : v) p *= d;
  return p;
}

// Position `flat` of a grid of these dims as a multi-index (row-major).
inline std::vector<int64_t> grid_index(int64_t flat, const std::vector<int64_t>& dims) {
  std::vector<int64_t> idx(dims.size());
  for (size_t d = dims.size(); d-- > 0;) {
    idx[d] = flat % dims[d];
    flat /= dims[d];
  }
  return idx;
}

// The flat position in a grid of `dims` that grid position `at` (of the other grid) reaches with
// tap `tap`: at[i] * strides[i] - pads_begin[i] + tap[i] * dilations[i] on each axis; false where it
// falls outside.
inline bool tap_position(const ConvProblem& p, const std::vector<int64_t>& at, const std::vector<int64_t>& tap,
                         const std::vector<int64_t>& dims, int64_t* pos) {
  *pos = 0;
  for (size_t i = 0; i < p.rank(); ++i) {
    const int64_t q = at[i] * p.strides[i] - p.pads_begin[i] + tap[i] * p.dilations[i];
    if (q < 0 || q >= dims[i]) return false;
    *pos = *pos * dims[i] + q;
  }
  return true;
}

// Y of Conv; `bias` may be null.
inline std::vector<double> conv_reference(const ConvProblem& p, const std::vector<double>& x,
                                          const std::vector<double>& w, const std::vector<double>* bias) {
  const std::vector<int64_t> out = p.conv_out();
  const int64_t cg = p.channels / p.group, mg = p.out_channels / p.group;
  const int64_t pin = product(p.in), pout = product(out), ks = product(p.kernel);
  std::vector<double> y(static_cast<size_t>(p.batch * p.out_channels * pout));
  for (int64_t n = 0; n < p.batch; ++n)
    for (int64_t m = 0; m < p.out_channels; ++m)
      for (int64_t o = 0; o < pout; ++o) {
        const std::vector<int64_t> oi = grid_index(o, out);
        double acc = bias ? (*bias)[static_cast<size_t>(m)] : 0.0;
        for (int64_t t = 0; t < ks; ++t) {
          int64_t pos = 0;
          if (!tap_position(p, oi, grid_index(t, p.kernel), p.in, &pos)) continue;
          for (int64_t c = 0; c < cg; ++c) {
            const int64_t xc = (m / mg) * cg + c;
            acc += x[static_cast<size_t>((n * p.channels + xc) * pin + pos)] *
                   w[static_cast<size_t>((m * cg + c) * ks + t)];
          }
        }
        y[static_cast<size_t>((n * p.out_channels + m) * pout + o)] = acc;
      }
  return y;
}

// Y of ConvTranspose; `bias` may be null.
inline std::vector<double> conv_transpose_reference(const ConvProblem& p, const std::vector<double>& x,
                                                    const std::vector<double>& w, const std::vector<double>* bias) {
  const std::vector<int64_t> out = p.transpose_out();
  const int64_t cg = p.channels / p.group, mg = p.out_channels / p.group;
  const int64_t pin = product(p.in), pout = product(out), ks = product(p.kernel);
  std::vector<double> y(static_cast<size_t>(p.batch * p.out_channels * pout));
  for (int64_t n = 0; n < p.batch; ++n)
    for (int64_t m = 0; m < p.out_channels; ++m)
      for (int64_t o = 0; o < pout; ++o)
        y[static_cast<size_t>((n * p.out_channels + m) * pout + o)] = bias ? (*bias)[static_cast<size_t>(m)] : 0.0;
  for (int64_t n = 0; n < p.batch; ++n)
    for (int64_t c = 0; c < p.channels; ++c)
      for (int64_t i = 0; i < pin; ++i) {
        const std::vector<int64_t> ii = grid_index(i, p.in);
        const double xv = x[static_cast<size_t>((n * p.channels + c) * pin + i)];
        for (int64_t t = 0; t < ks; ++t) {
          int64_t pos = 0;
          if (!tap_position(p, ii, grid_index(t, p.kernel), out, &pos)) continue;
          for (int64_t j = 0; j < mg; ++j) {
            const int64_t m = (c / cg) * mg + j;
            y[static_cast<size_t>((n * p.out_channels + m) * pout + pos)] +=
                xv * w[static_cast<size_t>((c * mg + j) * ks + t)];
          }
        }
      }
  return y;
}

}  // namespace kiln::test
