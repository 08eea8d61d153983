// Helpers shared by the tensor family's groups (view.cpp, layout.cpp, depth_space.cpp, index.cpp,
// gen.cpp), and their shape inference functions, which registry.cpp lists.
#pragma once

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "core/shape_infer.h"

namespace kiln {

namespace tensor_plan {

// Largest element count any op here may create; keeps byte counts far from int64 overflow.
constexpr int64_t kMaxElements = int64_t{1} << 56;

inline int64_t checked_numel(std::span<const int64_t> shape, const char* op) {
  for (int64_t d : shape)
    if (d < 0) throw Error(std::string(op) + ": negative dimension in " + shape_string({shape.begin(), shape.end()}));
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n) || n > kMaxElements)
      throw Error(std::string(op) + ": output shape " + shape_string({shape.begin(), shape.end()}) + " is too large");
  return n;
}

// The values of a constant integer input (int32 or int64, rank 0 or 1).
inline std::vector<int64_t> const_ints(const TensorView& t, const char* op, const char* what) {
  if (t.dtype != DataType::kInt64 && t.dtype != DataType::kInt32)
    throw Error(std::string(op) + ": " + what + " must be int64 or int32, got " + std::string(dtype_name(t.dtype)));
  if (t.rank() > 1) throw Error(std::string(op) + ": " + what + " must be 1-D");
  if (!t.data) throw Error(std::string(op) + ": " + what + " must be a constant");
  return t.to_int64();
}

// Normalises every axis against rank and rejects duplicates.
inline std::vector<int64_t> unique_axes(const std::vector<int64_t>& axes, int64_t rank, const char* op) {
  std::vector<int64_t> out;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t a : axes) {
    int64_t n = normalize_axis(a, rank, (std::string(op) + " axis").c_str());
    if (seen[n]) throw Error(std::string(op) + ": axis " + std::to_string(a) + " appears more than once");
    seen[n] = true;
    out.push_back(n);
  }
  return out;
}

inline bool has_input(std::span<const TensorView> in, size_t i) { return in.size() > i && in[i].exists; }

}  // namespace tensor_plan

namespace tensor_infer {

using Shape = std::vector<int64_t>;

inline Shape shape_of(const TensorView& t) { return Shape(t.shape.begin(), t.shape.end()); }
inline std::vector<OutputType> one(DataType dt, Shape s) { return {OutputType{dt, std::move(s)}}; }

// view.cpp
std::vector<OutputType> infer_reshape(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_flatten(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_squeeze(OpKind, const Attrs&, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_unsqueeze(OpKind, const Attrs&, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_shape(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_size(OpKind, const Attrs&, std::span<const TensorView> in, size_t);
// layout.cpp
std::vector<OutputType> infer_transpose(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_slice(OpKind, const Attrs&, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_tile(OpKind, const Attrs&, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_expand(OpKind, const Attrs&, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_concat(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_split(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t n_out);
std::vector<OutputType> infer_pad(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t);
// depth_space.cpp
std::vector<OutputType> infer_depth_space(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t);
// index.cpp
std::vector<OutputType> infer_gather(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_gather_elements(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_gather_nd(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_scatter_elements(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_scatter_nd(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t);
// gen.cpp
std::vector<OutputType> infer_constant_of_shape(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_eye_like(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_one_hot(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_range(OpKind, const Attrs&, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_trilu(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t);
// select.cpp
std::vector<OutputType> infer_nonzero(OpKind, const Attrs&, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_nms(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t);
std::vector<OutputType> infer_select_branch(OpKind, const Attrs&, std::span<const TensorView> in, size_t n_out);

}  // namespace tensor_infer

}  // namespace kiln
