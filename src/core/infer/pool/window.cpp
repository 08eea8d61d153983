// Shape inference of the pool family's windowed pools, AveragePool and MaxPool; their window
// geometry is in core/infer/nn_geometry.cpp.
#include <string>

#include "core/infer/nn_geometry.h"
#include "core/infer/pool/pool_internal.h"

namespace kiln::nn {

namespace {

void check_float(const TensorView& t, const char* what) {
  switch (t.dtype) {
    case DataType::kFloat32:
    case DataType::kFloat64:
    case DataType::kFloat16:
    case DataType::kBFloat16: return;
    default: throw Error(std::string(what) + " must be a float type, got " + std::string(dtype_name(t.dtype)));
  }
}

std::vector<int64_t> nc_plus(std::span<const int64_t> x, int64_t channels, const std::vector<int64_t>& spatial) {
  std::vector<int64_t> s{x[0], channels};
  s.insert(s.end(), spatial.begin(), spatial.end());
  return s;
}

}  // namespace

std::vector<OutputType> infer_pool(OpKind kind, const Attrs& attrs, std::span<const TensorView> in,
                                   size_t num_outputs) {
  const auto& a = attrs_as<PoolAttrs>(attrs);
  const bool max_pool = kind == OpKind::kMaxPool;
  if (max_pool && (in[0].dtype == DataType::kInt8 || in[0].dtype == DataType::kUInt8)) {
    // MaxPool also takes 8-bit integers.
  } else {
    check_float(in[0], "X");
  }
  if (!max_pool && a.count_include_pad != 0 && a.count_include_pad != 1)
    throw Error("count_include_pad must be 0 or 1");
  if (max_pool && a.storage_order != 0 && a.storage_order != 1) throw Error("storage_order must be 0 or 1");
  if (!max_pool && num_outputs != 1) throw Error("AveragePool has one output");
  WindowGeometry g = pool_geometry(a, in[0].shape);
  std::vector<int64_t> shape = nc_plus(in[0].shape, in[0].shape[1], g.out);
  std::vector<OutputType> out{OutputType{in[0].dtype, shape}};
  if (num_outputs == 2) out.push_back(OutputType{DataType::kInt64, shape});
  return out;
}

}  // namespace kiln::nn
