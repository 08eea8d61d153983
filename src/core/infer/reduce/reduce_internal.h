// Helpers shared by the reduce family's groups (reduce.cpp, arg.cpp, softmax.cpp, cumsum.cpp,
// topk.cpp, einsum.cpp) and their shape inference functions, which reduce.cpp's registry lists.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "core/shape_infer.h"

namespace kiln::reduce_infer {

inline std::string name_of(OpKind k) { return std::string(op_name(k)); }

inline bool is_float(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 || t == DataType::kBFloat16;
}

inline void require_float(OpKind k, DataType t, const char* what) {
  if (!is_float(t))
    throw Error(name_of(k) + ": " + what + " must be a float tensor (float32, float64, float16, bfloat16), got " +
                std::string(dtype_name(t)));
}

inline void require_bool_attr(OpKind k, const char* name, int64_t v) {
  if (v != 0 && v != 1) throw Error(name_of(k) + ": attribute " + name + " must be 0 or 1, got " + std::to_string(v));
}

inline std::vector<int64_t> shape_vec(const TensorView& v) { return {v.shape.begin(), v.shape.end()}; }

// Element types ONNX allows for Reduce*: floats, 32/64-bit integers; Max/Min also 8-bit ints and bool.
inline void check_reduce_dtype(OpKind k, DataType t, bool small_ints) {
  switch (t) {
    case DataType::kFloat32:
    case DataType::kFloat64:
    case DataType::kFloat16:
    case DataType::kBFloat16:
    case DataType::kInt32:
    case DataType::kUInt32:
    case DataType::kInt64:
    case DataType::kUInt64: return;
    case DataType::kInt8:
    case DataType::kUInt8:
    case DataType::kBool:
      if (small_ints) return;
      break;
    case DataType::kInt16:
    case DataType::kUInt16: break;
  }
  throw_unsupported_dtype(t, op_name(k).data());
}

// reduce.cpp: ReduceL1 .. ReduceSumSquare
std::vector<OutputType> infer_reduce(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs, size_t);
// arg.cpp: ArgMax, ArgMin
std::vector<OutputType> infer_arg_reduce(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs, size_t);
// softmax.cpp: Softmax, LogSoftmax, Hardmax
std::vector<OutputType> infer_softmax(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs, size_t);
// cumsum.cpp: CumSum
std::vector<OutputType> infer_cumsum(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs, size_t);
// topk.cpp: TopK
std::vector<OutputType> infer_topk(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs, size_t);
// einsum.cpp: Einsum
std::vector<OutputType> infer_einsum(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs,
                                     size_t num_outputs);

}  // namespace kiln::reduce_infer
