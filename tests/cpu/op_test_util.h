// Helpers shared by the op kernel tests: a host tensor that owns its bytes, and filling one
// from doubles in any Kiln dtype.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/tensor.h"

namespace kiln::test {

using Shape = std::vector<int64_t>;

inline int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

struct Tensor {
  DataType dtype = DataType::kFloat32;
  Shape shape;
  std::vector<uint8_t> buf;
  bool exists = true;
  TensorView view() const {
    if (!exists) return absent_tensor();
    TensorView v;
    v.dtype = dtype;
    v.shape = shape;
    v.data = const_cast<uint8_t*>(buf.data());
    return v;
  }
  std::vector<double> values() const { return view().to_double(); }
};

inline Tensor make(DataType dt, Shape shape, const std::vector<double>& v) {
  Tensor t{dt, shape, std::vector<uint8_t>(static_cast<size_t>(numel(shape)) * dtype_size(dt) + 1)};
  EXPECT_EQ(static_cast<int64_t>(v.size()), numel(shape));
  dispatch_all(dt, "make", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = reinterpret_cast<T*>(t.buf.data());
    for (size_t i = 0; i < v.size(); ++i) {
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
        p[i] = T(static_cast<float>(v[i]));
      else
        p[i] = static_cast<T>(v[i]);
    }
  });
  return t;
}

}  // namespace kiln::test
