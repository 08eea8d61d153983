// Helpers shared by the CPU backend's files: element-type dispatch and shape checks. Shape
// mismatches are bugs of the caller (layers compute every shape at build time), but they are
// reported as kiln::Error naming the op rather than read out of bounds.
#pragma once

#include <string>

#include "train/tensor.h"

namespace kiln::train::cpu_detail {

// Calls fn(T{}) with T = float or double for the dtype of t.
template <class Fn>
decltype(auto) dispatch(const Tensor& t, const char* op, Fn&& fn) {
  switch (t.dtype()) {
    case DataType::kFloat32: return fn(float{});
    case DataType::kFloat64: return fn(double{});
    default:
      throw Error(std::string("train op ") + op + ": the CPU backend takes float32 or float64, not " +
                  std::string(dtype_name(t.dtype())));
  }
}

inline void require(bool ok, const char* op, const std::string& what) {
  if (!ok) throw Error(std::string("train op ") + op + ": " + what);
}

inline void require_same(const Tensor& a, const Tensor& b, const char* op) {
  require(a.dtype() == b.dtype() && a.numel() == b.numel(), op,
          "tensors differ: " + std::string(dtype_name(a.dtype())) + shape_string(a.shape()) + " vs " +
              std::string(dtype_name(b.dtype())) + shape_string(b.shape()));
}

// Output size of a window sweep: (in + 2 pad - dilation (kernel - 1) - 1) / stride + 1.
inline int64_t window_out(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

}  // namespace kiln::train::cpu_detail
