// Helpers shared by the op kernel tests: a host tensor that owns its bytes, filling one from
// doubles in any Kiln dtype, running one op with poisoned outputs, comparing with a reference.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/shape_infer.h"
#include "core/tensor.h"
#include "runtime/cpu/kernels.h"

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

inline bool is_float(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 || t == DataType::kBFloat16;
}

// Infers, allocates poisoned outputs (NaN for floats, 0xAB bytes otherwise), runs the kernel.
inline std::vector<Tensor> run(OpKind kind, const Attrs& attrs, const std::vector<const Tensor*>& in, size_t n_out,
                               cpu::ThreadPool* pool = nullptr) {
  std::vector<TensorView> iv;
  for (const Tensor* t : in) iv.push_back(t ? t->view() : absent_tensor());
  std::vector<OutputType> types = infer_shapes(kind, attrs, iv, n_out);
  std::vector<Tensor> out;
  for (const OutputType& o : types) {
    Tensor t{o.dtype, o.shape,
             std::vector<uint8_t>(static_cast<size_t>(numel(o.shape)) * dtype_size(o.dtype) + 1, 0xAB)};
    if (is_float(o.dtype)) t = make(o.dtype, o.shape, std::vector<double>(numel(o.shape), NAN));
    out.push_back(std::move(t));
  }
  std::vector<TensorView> ov;
  for (Tensor& t : out) ov.push_back(t.view());
  cpu::KernelEnv env{pool};
  cpu::CpuKernel k = cpu::cpu_kernel(kind);
  EXPECT_NE(k, nullptr);
  k(kind, attrs, iv, ov, env);
  return out;
}

// [N, C, H, W] <-> [N, H, W, C] of a 4-D tensor, element by element.
inline Tensor permute4(const Tensor& t, bool to_last) {
  const Shape& s = t.shape;
  const Shape out = to_last ? Shape{s[0], s[2], s[3], s[1]} : Shape{s[0], s[3], s[1], s[2]};
  const std::vector<double> v = t.values();
  std::vector<double> r(v.size());
  for (int64_t a = 0; a < out[0]; ++a)
    for (int64_t b = 0; b < out[1]; ++b)
      for (int64_t c = 0; c < out[2]; ++c)
        for (int64_t d = 0; d < out[3]; ++d) {
          // to_last: out (n, h, w, ch) = in (n, ch, h, w); else out (n, ch, h, w) = in (n, h, w, ch).
          const int64_t src = to_last ? ((a * s[1] + d) * s[2] + b) * s[3] + c : ((a * s[1] + c) * s[2] + d) * s[3] + b;
          r[static_cast<size_t>(((a * out[1] + b) * out[2] + c) * out[3] + d)] = v[static_cast<size_t>(src)];
        }
  return make(t.dtype, out, r);
}

inline void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok =
        std::isnan(want[i]) ? std::isnan(got[i]) : std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i]));
    ASSERT_TRUE(ok) << what << ": element " << i << " got " << got[i] << " want " << want[i];
  }
}

}  // namespace kiln::test
