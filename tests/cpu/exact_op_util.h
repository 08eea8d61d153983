// Helpers of the CPU op tests whose references are exact or float64 (ops_quant_test.cpp,
// ops_loss_test.cpp, ops_bitshift_test.cpp).
#pragma once

#include <random>
#include <string>
#include <vector>

#include "core/shape_infer.h"
#include "op_test_util.h"

namespace kiln::test {

// Floats in [lo, hi] rounded to the dtype; integers uniform in [lo, hi].
inline Tensor random_tensor(DataType dt, Shape shape, std::mt19937& rng, double lo, double hi) {
  std::vector<double> v(static_cast<size_t>(numel(shape)));
  std::uniform_real_distribution<double> uf(lo, hi);
  std::uniform_int_distribution<int64_t> ui(static_cast<int64_t>(lo), static_cast<int64_t>(hi));
  for (double& x : v) x = is_float(dt) ? uf(rng) : static_cast<double>(ui(rng));
  Tensor t = make(dt, shape, v);
  return make(dt, shape, t.values());  // exact values of the stored type
}

// Shape inference only (for the negative tests).
inline void infer(OpKind kind, const Attrs& attrs, const std::vector<const Tensor*>& in, size_t n_out) {
  std::vector<TensorView> iv;
  for (const Tensor* t : in) iv.push_back(t ? t->view() : absent_tensor());
  infer_shapes(kind, attrs, iv, n_out);
}

inline double tolerance(DataType dt) {
  switch (dt) {
    case DataType::kFloat64: return 1e-9;
    case DataType::kFloat32: return 2e-5;
    case DataType::kFloat16: return 4e-3;
    case DataType::kBFloat16: return 3e-2;
    default: return 0;
  }
}

inline std::string str(const Shape& s) { return shape_string(s); }

}  // namespace kiln::test
