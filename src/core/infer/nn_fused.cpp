// Shape inference of the internal fused ops (FusedConv, FusedGemm, FusedMatMul; core/attrs.h has
// their epilogue). The product is inferred by its own op's entry (Conv, Gemm, MatMul) on the
// leading inputs; then the fused inputs are checked: FusedMatMul's bias has one value per column
// of the product, and the residual Z has exactly the output's type and shape (no broadcast: the
// kernels read it element for element). FusedGemm alone may take a float32 A with a float16 B (its
// weights stored in float16, converted as they are read; to-fp16 makes it for a classifier that
// reads a float32 feature vector): the product, C, Z and Y are float32 then.
#include <algorithm>
#include <string>
#include <vector>

#include "core/shape_infer.h"

namespace kiln::nn {

namespace {

std::string shp(std::span<const int64_t> s) { return shape_string({s.begin(), s.end()}); }

void check_epilogue(OpKind kind, const EpilogueAttrs& e, bool has_z) {
  if (e.activation2 != Activation::kNone && !has_z)
    throw Error(std::string(op_name(kind)) + ": activation2 follows the residual add and needs the input Z");
}

void check_residual(OpKind kind, std::span<const TensorView> in, const OutputType& y) {
  if (in.size() < 4 || !in[3].exists) return;
  const TensorView& z = in[3];
  if (z.dtype != y.dtype || !std::equal(z.shape.begin(), z.shape.end(), y.shape.begin(), y.shape.end()))
    throw Error(std::string(op_name(kind)) + ": the residual Z " + std::string(dtype_name(z.dtype)) + shp(z.shape) +
                " must have the output's type and shape " + std::string(dtype_name(y.dtype)) + shp(y.shape));
}

bool has_z(std::span<const TensorView> in) { return in.size() > 3 && in[3].exists; }

// FusedGemm's float32 A with float16 B: a float32 product whose weights are stored in float16.
bool mixed_product(std::span<const TensorView> in) {
  return in.size() > 1 && in[0].dtype == DataType::kFloat32 && in[1].dtype == DataType::kFloat16;
}

// The first min(n, in.size()) inputs.
std::span<const TensorView> leading(std::span<const TensorView> in, size_t n) {
  return in.first(std::min(n, in.size()));
}

}  // namespace

std::vector<OutputType> infer_fused(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  std::vector<OutputType> out;
  switch (kind) {
    case OpKind::kFusedConv: {
      const auto& a = attrs_as<FusedConvAttrs>(attrs);
      check_epilogue(kind, a, has_z(in));
      if (a.x_channels_first != 0) throw Error("FusedConv: x_channels_first is an attribute of NhwcConv only");
      out = infer_shapes(OpKind::kConv, Attrs{static_cast<const ConvAttrs&>(a)}, leading(in, 3), 1);
      break;
    }
    case OpKind::kFusedGemm: {
      const auto& a = attrs_as<FusedGemmAttrs>(attrs);
      check_epilogue(kind, a, has_z(in));
      // Float16 weights under a float32 product: B is read as if it were float32.
      std::vector<TensorView> product(leading(in, 3).begin(), leading(in, 3).end());
      if (mixed_product(in)) product[1].dtype = DataType::kFloat32;
      out = infer_shapes(OpKind::kGemm, Attrs{static_cast<const GemmAttrs&>(a)}, product, 1);
      break;
    }
    case OpKind::kFusedMatMul: {
      check_epilogue(kind, attrs_as<EpilogueAttrs>(attrs), has_z(in));
      out = infer_shapes(OpKind::kMatMul, Attrs{NoAttrs{}}, leading(in, 2), 1);
      const DataType t = out[0].dtype;
      if (in.size() > 2 && in[2].exists) {
        const TensorView& b = in[2];
        const std::vector<int64_t>& y = out[0].shape;
        if (b.dtype != t || y.empty() || b.rank() != 1 || b.shape[0] != y.back())
          throw Error("FusedMatMul: the bias must be " + std::string(dtype_name(t)) + "[" +
                      (y.empty() ? std::string("?") : std::to_string(y.back())) + "] (one value per column), got " +
                      std::string(dtype_name(b.dtype)) + shp(b.shape));
      }
      break;
    }
    default: throw Error(std::string(op_name(kind)) + " is not a fused op");
  }
  const DataType t = out[0].dtype;
  if (t != DataType::kFloat32 && t != DataType::kFloat64 && t != DataType::kFloat16 && t != DataType::kBFloat16)
    throw Error(std::string(op_name(kind)) + " takes float types only, got " + std::string(dtype_name(t)));
  check_residual(kind, in, out[0]);
  return out;
}

}  // namespace kiln::nn
