// The host side of the op tests (tests/ops, tests/gpu): host tensors with random or chosen values,
// the CPU kernel run with poisoned outputs, tolerances, and the comparison that reports the first
// mismatching elements. No CUDA here: tests/ops/op_cases_cpu_test.cpp uses it on machines without
// a GPU, and tests/gpu/gpu_harness.h adds the device side.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/shape_infer.h"
#include "runtime/cpu/kernels.h"

namespace kiln::optest {
using DT = DataType;
using Shape = std::vector<int64_t>;
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

inline bool is_float(DT t) { return t == DT::kFloat32 || t == DT::kFloat64 || t == DT::kFloat16 || t == DT::kBFloat16; }

inline std::string shape_str(const Shape& s) { return shape_string(s); }

// ---- host tensors ------------------------------------------------------------------------------
struct HostTensor {
  DT dtype = DT::kFloat32;
  Shape shape;
  std::vector<uint8_t> bytes;
  bool exists = true;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  TensorView view(void* data) const { return TensorView{dtype, shape, data, exists}; }
};

inline double get(const HostTensor& t, int64_t i) {
  if (t.dtype == DT::kBool) return t.bytes[static_cast<size_t>(i)] ? 1.0 : 0.0;
  return dispatch_numeric(t.dtype, "get", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T v;
    std::memcpy(&v, t.bytes.data() + i * sizeof(T), sizeof(T));
    return static_cast<double>(static_cast<ComputeType<T>>(v));
  });
}

// Floats round to the type (through float for the half types); integers wrap modulo 2^bits.
inline void set(HostTensor& t, int64_t i, double v) {
  if (t.dtype == DT::kBool) {
    t.bytes[static_cast<size_t>(i)] = v != 0;
    return;
  }
  dispatch_numeric(t.dtype, "set", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T x;
    if constexpr (kIsFloat<T>)
      x = T(static_cast<ComputeType<T>>(v));
    else
      x = static_cast<T>(static_cast<int64_t>(v));
    std::memcpy(t.bytes.data() + i * sizeof(T), &x, sizeof(T));
  });
}

inline HostTensor make(DT dt, Shape shape, const std::vector<double>& v) {
  HostTensor t{dt, std::move(shape), {}};
  t.bytes.resize(static_cast<size_t>(t.numel()) * dtype_size(dt));
  for (int64_t i = 0; i < t.numel(); ++i) set(t, i, v[static_cast<size_t>(i) % v.size()]);
  return t;
}

inline HostTensor absent() {
  HostTensor t;
  t.exists = false;
  return t;
}

// Deterministic per test: reseeded from the test's name by the fixture.
inline std::mt19937& rng() {
  static std::mt19937 g(1234);
  return g;
}

// Uniform in [lo, hi]; integer-valued for integer dtypes or when `integral`; bools half true.
inline HostTensor rand_tensor(DT dt, Shape shape, double lo, double hi, bool integral = false) {
  HostTensor t{dt, std::move(shape), {}};
  t.bytes.resize(static_cast<size_t>(t.numel()) * dtype_size(dt));
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double x = u(rng());
    if (dt == DT::kBool)
      x = x > (lo + hi) / 2;
    else if (integral || !is_float(dt))
      x = std::round(x);
    set(t, i, x);
  }
  return t;
}

// Random values with NaN, +-inf, +-0 and halves (rounding ties) mixed in.
// Integer and bool tensors get plain random values.
inline HostTensor special_tensor(DT dt, Shape shape, double lo, double hi) {
  HostTensor t = rand_tensor(dt, std::move(shape), lo, hi);
  if (!is_float(dt)) return t;
  const double specials[] = {kNaN, kInf, -kInf, 0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1.0, -1.0};
  for (int64_t i = 0; i < t.numel(); i += 3) set(t, i, specials[(i / 3) % std::size(specials)]);
  return t;
}

// A 1-D tensor of the integers v, in type dt.
inline HostTensor ints(const std::vector<int64_t>& v, DT dt = DT::kInt64) {
  std::vector<double> d(v.begin(), v.end());
  HostTensor t{dt, {static_cast<int64_t>(v.size())}, {}};
  t.bytes.resize(v.size() * dtype_size(dt));
  for (size_t i = 0; i < v.size(); ++i) set(t, static_cast<int64_t>(i), d[i]);
  return t;
}

// Random values over the whole range of an 8-bit quantized type (int8 or uint8).
inline double qlo(DT t) { return t == DT::kInt8 ? -128 : 0; }
inline double qhi(DT t) { return t == DT::kInt8 ? 127 : 255; }
inline HostTensor rand_q(DT t, Shape s) { return rand_tensor(t, std::move(s), qlo(t), qhi(t)); }

enum class Accuracy {
  kExact,           // the same IEEE operations as the CPU: bit-identical values (NaN matches NaN)
  kArith,           // float32 1e-5 relative + 1e-6 absolute (contracted multiply-adds)
  kTranscendental,  // float32 1e-4 relative + 1e-6 absolute (math library functions)
};

struct Tolerance {
  double rel = 0, abs = 0;
};

// Unless exact: float16 outputs 2e-3 relative + 1e-3 absolute (one half ulp is 2^-10 relative),
// bfloat16 8e-3 + 1e-3 (one ulp is up to 2^-7 relative: results computed in float that differ in
// the last float bits may round to neighbouring bfloat16 values), float64 the float32 bounds
// scaled down by 1e8 (the GPU computes float64 in double: the math library's last-place error
// and contracted multiply-adds).
inline Tolerance tolerance_for(DT out, Accuracy acc) {
  if (acc == Accuracy::kExact || !is_float(out)) return {};
  if (out == DT::kFloat16) return {2e-3, 1e-3};
  if (out == DT::kBFloat16) return {8e-3, 1e-3};
  if (out == DT::kFloat64) return acc == Accuracy::kTranscendental ? Tolerance{1e-12, 1e-14} : Tolerance{1e-13, 1e-14};
  return acc == Accuracy::kTranscendental ? Tolerance{1e-4, 1e-6} : Tolerance{1e-5, 1e-6};
}

inline std::vector<HostTensor> empty_outputs(const std::vector<OutputType>& types, uint8_t poison) {
  std::vector<HostTensor> outs;
  for (const OutputType& o : types) {
    HostTensor t{o.dtype, o.shape, {}};
    t.bytes.assign(static_cast<size_t>(t.numel()) * dtype_size(o.dtype), poison);
    outs.push_back(std::move(t));
  }
  return outs;
}

// A data-dependent op's (OpTrait kDataDependent) output 0 cut to its packed data: the shape with the
// extent its output 1 holds. An extent outside the bound is an error.
inline void pack_data_dependent(OpKind kind, std::vector<HostTensor>& outs) {
  if (!has_trait(kind, kDataDependent)) return;
  HostTensor& y = outs.at(0);
  int64_t extent = 0;
  std::memcpy(&extent, outs.at(1).bytes.data(), sizeof extent);
  const auto axis = static_cast<size_t>(data_dependent_axis(kind));
  if (extent < 0 || extent > y.shape.at(axis))
    throw Error(std::string(op_name(kind)) + " reports an extent of " + std::to_string(extent) + ", outside 0.." +
                std::to_string(y.shape[axis]));
  y.shape[axis] = extent;
  y.bytes.resize(static_cast<size_t>(y.numel()) * dtype_size(y.dtype));
}

inline std::vector<HostTensor> run_cpu(OpKind kind, const Attrs& attrs, const std::vector<HostTensor>& ins,
                                       const std::vector<OutputType>& types) {
  std::vector<HostTensor> outs = empty_outputs(types, 0xAB);
  for (HostTensor& t : outs)
    if (is_float(t.dtype))
      for (int64_t i = 0; i < t.numel(); ++i) set(t, i, kNaN);
  std::vector<TensorView> iv, ov;
  for (const HostTensor& t : ins) iv.push_back(t.view(t.exists ? const_cast<uint8_t*>(t.bytes.data()) : nullptr));
  for (HostTensor& t : outs) ov.push_back(t.view(t.bytes.data()));
  cpu::KernelEnv env;
  cpu::cpu_kernel(kind)(kind, attrs, iv, ov, env);
  pack_data_dependent(kind, outs);
  return outs;
}

inline bool same_value(double g, double r, Tolerance tol) {
  if (std::isnan(r)) return std::isnan(g);
  if (std::isinf(r) || (tol.rel == 0 && tol.abs == 0)) return g == r && std::signbit(g) == std::signbit(r);
  return std::abs(g - r) <= tol.abs + tol.rel * std::abs(r);
}

// Reports up to 5 mismatching elements of one output.
inline void expect_match(const HostTensor& got, const HostTensor& want, Tolerance tol, const std::string& what) {
  ASSERT_EQ(got.dtype, want.dtype) << what;
  ASSERT_EQ(got.bytes.size(), want.bytes.size()) << what;
  int bad = 0;
  for (int64_t i = 0; i < got.numel() && bad < 5; ++i) {
    bool ok;
    double g = 0, r = 0;
    if (got.dtype == DT::kBool) {
      // Exact bytes: a bool output must hold 0 or 1, never the 0xFF poison.
      g = got.bytes[static_cast<size_t>(i)];
      r = want.bytes[static_cast<size_t>(i)];
      ok = g == r;
    } else {
      g = get(got, i);
      r = get(want, i);
      ok = is_float(got.dtype) ? same_value(g, r, tol) : std::abs(g - r) <= tol.abs;
    }
    if (!ok) {
      ++bad;
      ADD_FAILURE() << what << " [" << dtype_name(got.dtype) << "] element " << i << " of " << got.numel() << ": gpu "
                    << g << ", cpu " << r;
    }
  }
}

inline std::string describe(OpKind kind, const std::vector<HostTensor>& ins) {
  std::ostringstream s;
  s << op_name(kind) << "(";
  for (size_t i = 0; i < ins.size(); ++i) {
    if (i) s << ", ";
    if (!ins[i].exists)
      s << "absent";
    else
      s << dtype_name(ins[i].dtype) << shape_str(ins[i].shape);
  }
  s << ")";
  return s.str();
}

// Views for shape inference: the data of the op's constant inputs (const_inputs), as the builder
// has it; the rest shape-only. An op whose shapes follow its inputs' values (kShapeFromData) sees
// them all, as the runtime's inference does.
inline std::vector<TensorView> infer_views(OpKind kind, const std::vector<HostTensor>& ins) {
  static int64_t nothing = 0;  // data for an empty constant (an empty vector may have none)
  std::vector<TensorView> iv;
  for (size_t i = 0; i < ins.size(); ++i) {
    const HostTensor& t = ins[i];
    const bool is_const =
        t.exists && ((i < 32 && (op_info(kind).const_inputs >> i & 1u)) || has_trait(kind, kShapeFromData));
    void* d = nullptr;
    if (is_const) d = t.bytes.empty() ? static_cast<void*>(&nothing) : const_cast<uint8_t*>(t.bytes.data());
    iv.push_back(t.view(d));
  }
  return iv;
}

// The largest finite magnitude in t (0 if absent).
inline double max_abs(const HostTensor& t) {
  double m = 0;
  if (!t.exists) return 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = std::abs(get(t, i));
    if (std::isfinite(v)) m = std::max(m, v);
  }
  return m;
}

// Outputs that are sums of `terms` products of at most `scale` in size each (the nn ops): their
// summation order differs between cuDNN/cuBLASLt and the CPU. An absolute error of 2 * eps * terms
// * scale (eps of the accumulation type) on top of a relative one, and for float16 half an output
// ulp of the largest value (cuDNN may round the product before adding the bias).
inline Tolerance dot_tolerance(DT dt, double terms, double scale, double max_ref) {
  const double acc_eps = dt == DT::kFloat64 ? std::ldexp(1.0, -52) : std::ldexp(1.0, -23);
  Tolerance t;
  t.abs = 2 * acc_eps * std::max(terms, 1.0) * scale + 1e-30;
  if (dt == DT::kFloat32) t.rel = 1e-5;
  if (dt == DT::kFloat64) t.rel = 1e-12;
  if (dt == DT::kFloat16) {
    t.rel = 2e-3;
    t.abs += std::ldexp(1.0, -11) * max_ref + 1e-4;
  }
  if (dt == DT::kBFloat16) {
    t.rel = 8e-3;
    t.abs += std::ldexp(1.0, -8) * max_ref + 1e-3;
  }
  return t;
}

// A dot product followed by an epilogue (the fused and channels-last ops): dot_tolerance widened
// for the activation applied after it (math-library differences, 1e-4 relative in float32) and, in
// float16, by a second half ulp (the CPU rounds the product to half before the epilogue, cuDNN's
// fused call does not).
inline Tolerance epilogue_tolerance(const HostTensor& want, double terms, double scale) {
  Tolerance t = dot_tolerance(want.dtype, terms, scale, max_abs(want));
  if (want.dtype == DT::kFloat32) t.rel += 1e-4;
  if (want.dtype == DT::kFloat16) t.abs += std::ldexp(1.0, -11) * max_abs(want);
  return t;
}

// The tolerance for one output, given the reference values.
using ToleranceFn = std::function<Tolerance(const HostTensor& want)>;

}  // namespace kiln::optest
