// Shape inference of the gemm family: Gemm, MatMul, Attention (core/attention.h), and the internal
// fused ops FusedGemm and FusedMatMul, inferred as Gemm and MatMul with their epilogue checked
// (core/infer/fused.h). FusedGemm alone may take a float32 A with a float16 B (its weights stored in
// float16, converted as they are read; to-fp16 makes it for a classifier that reads a float32
// feature vector): the product, C, Z and Y are float32 then.
#include <string>
#include <vector>

#include "core/attention.h"
#include "core/infer/fused.h"
#include "core/shape_infer.h"

namespace kiln {

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

// FusedGemm's float32 A with float16 B: a float32 product whose weights are stored in float16.
bool mixed_product(std::span<const TensorView> in) {
  return in.size() > 1 && in[0].dtype == DataType::kFloat32 && in[1].dtype == DataType::kFloat16;
}

std::vector<OutputType> infer_fused(OpKind kind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  std::vector<OutputType> out;
  switch (kind) {
    case OpKind::kFusedGemm: {
      const auto& a = attrs_as<FusedGemmAttrs>(attrs);
      fused::check_epilogue(kind, a, fused::has_z(in));
      // Float16 weights under a float32 product: B is read as if it were float32.
      std::vector<TensorView> product(fused::leading(in, 3).begin(), fused::leading(in, 3).end());
      if (mixed_product(in)) product[1].dtype = DataType::kFloat32;
      out = infer_shapes(OpKind::kGemm, Attrs{static_cast<const GemmAttrs&>(a)}, product, 1);
      break;
    }
    case OpKind::kFusedMatMul: {
      fused::check_epilogue(kind, attrs_as<EpilogueAttrs>(attrs), fused::has_z(in));
      out = infer_shapes(OpKind::kMatMul, Attrs{NoAttrs{}}, fused::leading(in, 2), 1);
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
  fused::check_output(kind, in, out);
  return out;
}

std::vector<OutputType> infer_attention(OpKind, const Attrs& attrs, std::span<const TensorView> in, size_t) {
  const AttentionShape g = attention_shape(attrs_as<AttentionAttrs>(attrs), in);
  if (g.three_d) return {OutputType{in[0].dtype, {g.batch, g.q_len, g.q_heads * g.v_head_size}}};
  return {OutputType{in[0].dtype, {g.batch, g.q_heads, g.q_len, g.v_head_size}}};
}

constexpr InferEntry kEntries[] = {
    {OpKind::kAttention, infer_attention},  // core/attention.h
    {OpKind::kGemm, infer_gemm},
    {OpKind::kMatMul, infer_matmul},
    {OpKind::kFusedGemm, infer_fused},
    {OpKind::kFusedMatMul, infer_fused},
};

}  // namespace

std::span<const InferEntry> gemm_infer_entries() { return kEntries; }

}  // namespace kiln
