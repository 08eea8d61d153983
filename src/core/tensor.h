// A non-owning view of a tensor: dtype, shape and (maybe) data. Shape inference sees views whose
// data is null unless the value is a build-time constant; kernels always get data.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/half.h"
#include "kiln/types.h"

namespace kiln {

struct TensorView {
  DataType dtype = DataType::kFloat32;
  std::span<const int64_t> shape;
  void* data = nullptr;
  bool exists = true;  // false for an omitted optional input

  size_t rank() const { return shape.size(); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  template <class T>
  T* as() const {
    return static_cast<T*>(data);
  }
  // The elements of an integer tensor (int32 or int64) widened to int64; throws kiln::Error otherwise.
  std::vector<int64_t> to_int64() const;
  // The elements of any numeric tensor as double.
  std::vector<double> to_double() const;
};

// The view of an omitted optional input.
inline TensorView absent_tensor() {
  TensorView v;
  v.exists = false;
  return v;
}

// Row-major strides in elements.
std::vector<int64_t> strides_of(std::span<const int64_t> shape);
// Normalises a possibly negative axis against rank; throws kiln::Error naming `what` if out of range.
int64_t normalize_axis(int64_t axis, int64_t rank, const char* what = "axis");

// ---- dtype dispatch ------------------------------------------------------------------------
// dispatch_xxx(dtype, fn) calls fn(Tag<T>{}) with the C++ type of dtype, or throws kiln::Error
// naming the dtype and `op` if the dtype is outside the family.
template <class T>
struct Tag {
  using type = T;
};

[[noreturn]] void throw_unsupported_dtype(DataType t, const char* op);

template <class Fn>
decltype(auto) dispatch_float(DataType t, const char* op, Fn&& fn) {
  switch (t) {
    case DataType::kFloat32: return fn(Tag<float>{});
    case DataType::kFloat64: return fn(Tag<double>{});
    case DataType::kFloat16: return fn(Tag<Half>{});
    case DataType::kBFloat16: return fn(Tag<BFloat16>{});
    default: throw_unsupported_dtype(t, op);
  }
}

template <class Fn>
decltype(auto) dispatch_int(DataType t, const char* op, Fn&& fn) {
  switch (t) {
    case DataType::kInt8: return fn(Tag<int8_t>{});
    case DataType::kUInt8: return fn(Tag<uint8_t>{});
    case DataType::kInt16: return fn(Tag<int16_t>{});
    case DataType::kUInt16: return fn(Tag<uint16_t>{});
    case DataType::kInt32: return fn(Tag<int32_t>{});
    case DataType::kUInt32: return fn(Tag<uint32_t>{});
    case DataType::kInt64: return fn(Tag<int64_t>{});
    case DataType::kUInt64: return fn(Tag<uint64_t>{});
    default: throw_unsupported_dtype(t, op);
  }
}

// Every numeric type (floats and integers), not bool.
template <class Fn>
decltype(auto) dispatch_numeric(DataType t, const char* op, Fn&& fn) {
  switch (t) {
    case DataType::kFloat32:
    case DataType::kFloat64:
    case DataType::kFloat16:
    case DataType::kBFloat16: return dispatch_float(t, op, fn);
    case DataType::kBool: throw_unsupported_dtype(t, op);
    default: return dispatch_int(t, op, fn);
  }
}

// Every type, bool included (as bool).
template <class Fn>
decltype(auto) dispatch_all(DataType t, const char* op, Fn&& fn) {
  if (t == DataType::kBool) return fn(Tag<bool>{});
  return dispatch_numeric(t, op, fn);
}

// Copy-only ops (Reshape, Transpose, Gather, ...) move bytes; they dispatch on element size.
template <class Fn>
decltype(auto) dispatch_bytes(DataType t, Fn&& fn) {
  switch (dtype_size(t)) {
    case 1: return fn(Tag<uint8_t>{});
    case 2: return fn(Tag<uint16_t>{});
    case 4: return fn(Tag<uint32_t>{});
    default: return fn(Tag<uint64_t>{});
  }
}

template <class T>
inline constexpr bool kIsFloat = std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
// The type arithmetic is done in: float for half types, else T itself.
template <class T>
using ComputeType = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

template <class T>
DataType dtype_of();

}  // namespace kiln
