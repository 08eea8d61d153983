// Attributes and inputs of the conv and gemm families' cases (tests/ops/conv_gemm_cases.cpp), for
// the GPU tests that build more of them (tests/gpu/nn_gpu_test.cpp).
#pragma once

#include <functional>
#include <optional>

#include "ops/op_case.h"

namespace kiln::optest {

inline const std::vector<DT> kF = {DT::kFloat32, DT::kFloat16};
// Every float type the CPU kernels take: a selection of cases runs them all.
inline const std::vector<DT> kFD = {DT::kFloat32, DT::kFloat16, DT::kFloat64, DT::kBFloat16};
inline const std::vector<DT> kInts = {DT::kInt32, DT::kInt64, DT::kUInt32, DT::kUInt64};

inline int64_t product(const Shape& s, size_t from = 0) {
  int64_t p = 1;
  for (size_t i = from; i < s.size(); ++i) p *= s[i];
  return p;
}

inline ConvAttrs conv(std::vector<int64_t> pads = {}, std::vector<int64_t> strides = {}, int64_t group = 1,
                      std::vector<int64_t> dilations = {}, AutoPad auto_pad = AutoPad::kNotSet) {
  ConvAttrs a;
  a.pads = std::move(pads);
  a.strides = std::move(strides);
  a.group = group;
  a.dilations = std::move(dilations);
  a.auto_pad = auto_pad;
  return a;
}

inline ConvAttrs conv_t(std::vector<int64_t> pads, std::vector<int64_t> strides, int64_t group = 1,
                        std::vector<int64_t> output_padding = {}, std::vector<int64_t> output_shape = {},
                        std::vector<int64_t> dilations = {}, AutoPad auto_pad = AutoPad::kNotSet) {
  ConvAttrs a = conv(std::move(pads), std::move(strides), group, std::move(dilations), auto_pad);
  a.output_padding = std::move(output_padding);
  a.output_shape = std::move(output_shape);
  return a;
}

// X, W (and B with `bias`), values in [-1, 1]; B has W.shape[0] (Conv) or W.shape[1] * group
// (ConvTranspose) entries.
inline std::function<Inputs(DT)> conv_inputs(Shape x, Shape w, bool bias, int64_t bias_len = -1) {
  return [=](DT dt) {
    Inputs in{rand_tensor(dt, x, -1, 1), rand_tensor(dt, w, -1, 1)};
    if (bias) in.push_back(rand_tensor(dt, {bias_len >= 0 ? bias_len : w[0]}, -1, 1));
    return in;
  };
}

inline GemmAttrs gemm(int64_t ta, int64_t tb, float alpha = 1.0f, float beta = 1.0f) {
  GemmAttrs a;
  a.transA = ta;
  a.transB = tb;
  a.alpha = alpha;
  a.beta = beta;
  return a;
}

// A, B (stored per transA/transB) for [m, k] x [k, n], plus C of shape c (absent when c is null).
inline std::function<Inputs(DT)> gemm_inputs(int64_t m, int64_t n, int64_t k, bool ta, bool tb,
                                             std::optional<Shape> c) {
  return [=](DT dt) {
    const bool integer = !is_float(dt);
    const double lo = integer ? (dt == DT::kUInt32 || dt == DT::kUInt64 ? 0 : -9) : -1, hi = integer ? 9 : 1;
    Inputs in{rand_tensor(dt, ta ? Shape{k, m} : Shape{m, k}, lo, hi),
              rand_tensor(dt, tb ? Shape{n, k} : Shape{k, n}, lo, hi)};
    if (c) in.push_back(rand_tensor(dt, *c, lo, hi));
    return in;
  };
}

inline std::function<Inputs(DT)> matmul_inputs(Shape a, Shape b) {
  return [=](DT dt) {
    const bool integer = !is_float(dt);
    const double lo = integer ? (dt == DT::kUInt32 || dt == DT::kUInt64 ? 0 : -9) : -1, hi = integer ? 9 : 1;
    return Inputs{rand_tensor(dt, a, lo, hi), rand_tensor(dt, b, lo, hi)};
  };
}

}  // namespace kiln::optest
