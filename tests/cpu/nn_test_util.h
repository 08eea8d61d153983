// Helpers of the CPU tests of the conv, pool, gemm and resize families (ops_conv_test.cpp,
// ops_pool_test.cpp, ops_gemm_test.cpp, ops_resize_test.cpp): random tensors, tolerances, index
// arithmetic, the window geometry written independently from the library's, and shape-inference
// error checks.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/shape_infer.h"
#include "op_test_util.h"

namespace kiln::test::nn {

// Random values representable in dt (floats in [-1, 1], integers in [lo, hi]).
inline Tensor random_tensor(DataType dt, Shape shape, std::mt19937& rng, int lo = -5, int hi = 5) {
  std::vector<double> v(static_cast<size_t>(numel(shape)));
  std::uniform_real_distribution<double> uf(-1, 1);
  std::uniform_int_distribution<int> ui(lo, hi);
  for (double& x : v) x = is_float(dt) ? uf(rng) : ui(rng);
  Tensor t = make(dt, shape, v);
  return t;
}

inline double tolerance(DataType dt) {
  switch (dt) {
    case DataType::kFloat64: return 1e-9;
    case DataType::kFloat32: return 2e-4;
    case DataType::kFloat16: return 4e-3;
    case DataType::kBFloat16: return 3e-2;
    default: return 0;
  }
}

// Row-major multi-index of flat index i.
inline Shape unflatten(int64_t i, const Shape& s) {
  Shape idx(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    idx[d] = s[d] ? i % s[d] : 0;
    i = s[d] ? i / s[d] : 0;
  }
  return idx;
}
inline int64_t flatten(const Shape& idx, const Shape& s) {
  int64_t f = 0;
  for (size_t d = 0; d < s.size(); ++d) f = f * s[d] + idx[d];
  return f;
}

// ---- window geometry, written independently from the library's -----------------------------

struct Win {
  Shape k, s, d, pb, pe, out;
};

inline Win forward_window(const Shape& in, const Shape& k, Shape s, Shape d, Shape pads, AutoPad ap, bool ceil_mode) {
  const size_t n = in.size();
  if (s.empty()) s.assign(n, 1);
  if (d.empty()) d.assign(n, 1);
  if (pads.empty()) pads.assign(2 * n, 0);
  Win w{k, s, d, Shape(n), Shape(n), Shape(n)};
  for (size_t i = 0; i < n; ++i) {
    const int64_t ek = (k[i] - 1) * d[i] + 1;
    if (ap == AutoPad::kNotSet) {
      w.pb[i] = pads[i];
      w.pe[i] = pads[n + i];
      const double q = double(in[i] + w.pb[i] + w.pe[i] - ek) / double(s[i]);
      w.out[i] = int64_t(ceil_mode ? std::ceil(q) : std::floor(q)) + 1;
      if (ceil_mode && (w.out[i] - 1) * s[i] >= in[i] + w.pb[i]) --w.out[i];
    } else if (ap == AutoPad::kValid) {
      w.out[i] = int64_t(std::ceil(double(in[i] - ek + 1) / double(s[i])));
    } else {
      w.out[i] = int64_t(std::ceil(double(in[i]) / double(s[i])));
      const int64_t total = std::max<int64_t>(0, (w.out[i] - 1) * s[i] + ek - in[i]);
      w.pb[i] = ap == AutoPad::kSameUpper ? total / 2 : (total + 1) / 2;
      w.pe[i] = total - w.pb[i];
    }
  }
  return w;
}

inline Tensor shaped(Shape s, DataType dt = DataType::kFloat32) { return make(dt, s, std::vector<double>(numel(s), 1.0)); }

inline void expect_infer_error(OpKind kind, const Attrs& attrs, const std::vector<const Tensor*>& in, size_t n_out,
                        const std::string& what) {
  std::vector<TensorView> iv;
  for (const Tensor* t : in) {
    TensorView v;
    if (t)
      v = t->view();
    else
      v.exists = false;
    iv.push_back(v);
  }
  EXPECT_THROW(infer_shapes(kind, attrs, iv, n_out), Error) << what;
}

}  // namespace kiln::test::nn
