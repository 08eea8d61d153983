// Shape inference of the nn family: Gemm, MatMul and the global pools here; Conv, ConvTranspose
// and the windowed pools in nn_conv.cpp; Resize in nn_resize.cpp; the fused ops in nn_fused.cpp, the
// channels-last ones in nn_nhwc.cpp.
#include <string>

#include "core/infer/nn_geometry.h"
#include "core/shape_infer.h"

namespace kiln {

namespace nn {

std::vector<OutputType> infer_conv(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t n);
std::vector<OutputType> infer_pool(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t n);
std::vector<OutputType> infer_resize(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t n);
std::vector<OutputType> infer_fused(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t n);
std::vector<OutputType> infer_nhwc(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t n);

namespace {

std::string shp(std::span<const int64_t> s) { return shape_string({s.begin(), s.end()}); }

bool is_float(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 || t == DataType::kBFloat16;
}

// Gemm and MatMul: the float types and the 32/64-bit integers.
void check_matmul_dtype(DataType t, const char* op) {
  if (is_float(t) || t == DataType::kInt32 || t == DataType::kInt64 || t == DataType::kUInt32 || t == DataType::kUInt64)
    return;
  throw Error(std::string(op) + " does not support element type " + std::string(dtype_name(t)));
}

std::vector<OutputType> infer_gemm(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const auto& a = attrs_as<GemmAttrs>(attrs);
  const TensorView &A = in[0], &B = in[1];
  check_matmul_dtype(A.dtype, "Gemm");
  if (B.dtype != A.dtype) throw Error("Gemm: B must have A's element type");
  if (A.rank() != 2 || B.rank() != 2)
    throw Error("Gemm: A and B must be 2-D, got " + shp(A.shape) + " and " + shp(B.shape));
  if ((a.transA != 0 && a.transA != 1) || (a.transB != 0 && a.transB != 1))
    throw Error("Gemm: transA and transB must be 0 or 1");
  const int64_t m = a.transA ? A.shape[1] : A.shape[0], k = a.transA ? A.shape[0] : A.shape[1];
  const int64_t kb = a.transB ? B.shape[1] : B.shape[0], n = a.transB ? B.shape[0] : B.shape[1];
  if (k != kb)
    throw Error("Gemm: inner dimensions differ: A " + shp(A.shape) + (a.transA ? " (transposed)" : "") + ", B " +
                shp(B.shape) + (a.transB ? " (transposed)" : ""));
  if (in.size() > 2 && in[2].exists) {
    const TensorView& C = in[2];
    if (C.dtype != A.dtype) throw Error("Gemm: C must have A's element type");
    // C broadcasts unidirectionally to [M, N].
    const int64_t want[2] = {m, n};
    if (C.rank() > 2) throw Error("Gemm: C must have rank <= 2, got " + shp(C.shape));
    for (size_t i = 0; i < C.rank(); ++i) {
      int64_t d = C.shape[C.rank() - 1 - i], w = want[1 - i];
      if (d != 1 && d != w)
        throw Error("Gemm: C " + shp(C.shape) + " does not broadcast to [" + std::to_string(m) + "," +
                    std::to_string(n) + "]");
    }
  }
  return {OutputType{A.dtype, {m, n}}};
}

std::vector<OutputType> infer_matmul(OpKind, const Attrs&, std::span<const TensorView> in, size_t) {
  const TensorView &A = in[0], &B = in[1];
  check_matmul_dtype(A.dtype, "MatMul");
  if (B.dtype != A.dtype) throw Error("MatMul: B must have A's element type");
  if (A.rank() < 1 || B.rank() < 1) throw Error("MatMul operands must have rank >= 1");
  // numpy: a 1-D A is [1, K] and a 1-D B is [K, 1]; the added dimension is dropped afterwards.
  const int64_t ka = A.shape[A.rank() - 1];
  const int64_t kb = B.rank() == 1 ? B.shape[0] : B.shape[B.rank() - 2];
  if (ka != kb) throw Error("MatMul: inner dimensions of " + shp(A.shape) + " and " + shp(B.shape) + " differ");
  std::span<const int64_t> ab = A.rank() > 2 ? A.shape.first(A.rank() - 2) : std::span<const int64_t>();
  std::span<const int64_t> bb = B.rank() > 2 ? B.shape.first(B.rank() - 2) : std::span<const int64_t>();
  std::vector<int64_t> out = broadcast_shapes(ab, bb);
  if (A.rank() >= 2) out.push_back(A.shape[A.rank() - 2]);
  if (B.rank() >= 2) out.push_back(B.shape[B.rank() - 1]);
  return {OutputType{A.dtype, out}};
}

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

constexpr InferEntry kEntries[] = {
    {OpKind::kAveragePool, infer_pool},
    {OpKind::kConv, infer_conv},
    {OpKind::kConvTranspose, infer_conv},
    {OpKind::kGemm, infer_gemm},
    {OpKind::kGlobalAveragePool, infer_global_pool},
    {OpKind::kGlobalMaxPool, infer_global_pool},
    {OpKind::kMatMul, infer_matmul},
    {OpKind::kMaxPool, infer_pool},
    {OpKind::kResize, infer_resize},
    {OpKind::kFusedConv, infer_fused},
    {OpKind::kFusedGemm, infer_fused},
    {OpKind::kFusedMatMul, infer_fused},
    {OpKind::kNhwcAveragePool, infer_nhwc},
    {OpKind::kNhwcConv, infer_nhwc},
    {OpKind::kNhwcMaxPool, infer_nhwc},
    {OpKind::kNhwcQConv, infer_nhwc},
};

}  // namespace
}  // namespace nn

std::span<const InferEntry> nn_infer_entries() { return nn::kEntries; }

}  // namespace kiln
