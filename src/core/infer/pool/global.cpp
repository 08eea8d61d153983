// Shape inference of the pool family's global pools, GlobalAveragePool and GlobalMaxPool.
#include <string>

#include "core/infer/pool/pool_internal.h"

namespace kiln::nn {

namespace {

std::string shp(std::span<const int64_t> s) { return shape_string({s.begin(), s.end()}); }

bool is_float(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 || t == DataType::kBFloat16;
}

}  // namespace

std::vector<OutputType> infer_global_pool(OpKind kind, const Attrs&, std::span<const TensorView> in, size_t) {
  const TensorView& x = in[0];
  if (!is_float(x.dtype))
    throw Error(std::string(op_name(kind)) + " does not support element type " + std::string(dtype_name(x.dtype)));
  if (x.rank() < 3) throw Error(std::string(op_name(kind)) + ": X must be [N, C, spatial...], got " + shp(x.shape));
  std::vector<int64_t> out(x.shape.begin(), x.shape.end());
  bool empty_plane = false;
  for (size_t i = 2; i < out.size(); ++i) {
    empty_plane |= out[i] == 0;
    out[i] = 1;
  }
  if (empty_plane && x.shape[0] * x.shape[1] > 0)
    throw Error(std::string(op_name(kind)) + ": cannot pool over an empty spatial extent " + shp(x.shape));
  return {OutputType{x.dtype, out}};
}

}  // namespace kiln::nn
