// The conv and gemm families' GPU kernels beyond the op-case table (tests/ops/conv_gemm_cases.cpp,
// run against the CPU with every tactic by op_cases_gpu_test): where the GEMV tactic is offered and
// that it runs captured and on pointers it cannot take, 16- and 8-byte aligned pointers, the
// row-major GEMM helper other GPU code calls, FusedGemm's float16 weights, and the errors.
#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <set>
#include <string>

#include "gpu_harness.h"
#include "ops/nn_case_util.h"
#include "runtime/cuda/nn_gemm.h"
#include "runtime/cuda/nn_internal.cuh"

namespace kiln::gpu_test {
namespace {

using Inputs = std::vector<HostTensor>;

// terms: products summed per output element; scale: bound of one product's size.
void check_nn(OpKind kind, const Attrs& attrs, const Inputs& ins, double terms, double scale, GpuMode mode,
              int32_t tactic = -1) {
  const std::string label = tactic >= 0 ? " tactic " + std::to_string(tactic) : "";
  auto tol = [&](const HostTensor& want) {
    return is_float(want.dtype) ? dot_tolerance(want.dtype, terms, scale, max_abs(want)) : Tolerance{};
  };
  // Direct runs twice: the second reuses the step state (no setup) and must give the same result.
  check_op_with(kind, attrs, ins, 1, tol, mode, GpuRunOptions{tactic, kModeShift, 2}, label);
}

bool starts_with(const std::string& s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }

// The small-batch Gemm cases exist for the GEMV: it must be offered (except in float64), and it
// also runs captured in a graph and on pointers it cannot take (shifted by one element: cuBLASLt's
// first algorithm instead).
TEST(NnGpuGemv, SmallBatchCasesRunTheGemvCapturedAndMisaligned) {
  KILN_SKIP_WITHOUT_GPU();
  int n = 0;
  for (const OpCase& c : op_cases()) {
    if (!starts_with(c.name, "GemmSmallM") && !starts_with(c.name, "GemmResNet")) continue;
    ++n;
    rng().seed(static_cast<uint32_t>(std::hash<std::string>{}(c.name)));
    for (DT dt : c.dtypes) {
      SCOPED_TRACE(c.name + " " + std::string(dtype_name(dt)));
      for (const OpRun& r : c.runs(dt)) {
        const std::vector<int32_t> tactics = tactics_of(c.kind, r.attrs, r.in);
        const bool gemv = std::find(tactics.begin(), tactics.end(), gpu::kGemvTactic) != tactics.end();
        EXPECT_EQ(gemv, dt != DT::kFloat64);
        if (gemv)
          for (GpuMode mode : {GpuMode::kCaptured, GpuMode::kMisaligned}) check_run(c, r, mode, gpu::kGemvTactic);
      }
    }
  }
  EXPECT_GT(n, 0) << "no GemmSmallM / GemmResNet case in tests/ops/conv_gemm_cases.cpp";
}

// The GEMV tactic is offered exactly where runtime/cuda/gemm/gemv.cu takes the product: at most 8 rows of A, W
// transposed, k a whole number of 16-byte chunks, a float type other than float64.
TEST(NnGpuGemv, OfferedForSmallBatchesOnly) {
  KILN_SKIP_WITHOUT_GPU();
  auto offered = [](int64_t m, int64_t k, int64_t ta, int64_t tb, DT dt) {
    const std::vector<int32_t> t =
        tactics_of(OpKind::kGemm, gemm(ta, tb), gemm_inputs(m, 16, k, ta, tb, Shape{16})(dt));
    return std::find(t.begin(), t.end(), gpu::kGemvTactic) != t.end();
  };
  EXPECT_TRUE(offered(1, 64, 0, 1, DT::kFloat16));
  EXPECT_TRUE(offered(8, 64, 0, 1, DT::kFloat32));
  EXPECT_TRUE(offered(4, 64, 0, 1, DT::kBFloat16));
  EXPECT_FALSE(offered(9, 64, 0, 1, DT::kFloat16));  // a batch of 9
  EXPECT_FALSE(offered(1, 60, 0, 1, DT::kFloat16));  // 60 halves: not whole 16-byte chunks
  EXPECT_TRUE(offered(1, 60, 0, 1, DT::kFloat32));   // 15 chunks of float32
  EXPECT_FALSE(offered(1, 64, 0, 0, DT::kFloat16));  // W not transposed
  EXPECT_FALSE(offered(1, 64, 1, 1, DT::kFloat16));  // A transposed
  EXPECT_FALSE(offered(1, 64, 0, 1, DT::kFloat64));
}

// Pointers 16-byte aligned (but not 32): cuDNN still runs (the direct kernel takes over below 16),
// cuBLASLt with the alignment its plan assumed; at 8 bytes cuBLASLt plans again.
TEST(NnGpuAlignment, SixteenAndEightByteShifts) {
  KILN_SKIP_WITHOUT_GPU();
  for (const OpCase& c : op_cases()) {
    if (!c.tactics || (c.kind != OpKind::kConv && c.kind != OpKind::kConvTranspose && c.kind != OpKind::kGemm &&
                       c.kind != OpKind::kMatMul))
      continue;
    rng().seed(static_cast<uint32_t>(std::hash<std::string>{}(c.name)));
    for (DT dt : kF)
      for (const OpRun& r : c.runs(dt))
        for (size_t shift : {size_t{16}, size_t{8}}) check_run(c, r, GpuMode::kDirect, -1, shift);
  }
}

// gemm_rowmajor (nn_gemm.h), the helper other GPU code calls: transposes, leading dimensions
// wider than the matrices, strided batches with a shared A, alpha and beta, float32, float16 and
// bfloat16.
TEST(NnGpuGemmHelper, RowMajorBatchedMatchesReference) {
  KILN_SKIP_WITHOUT_GPU();
  rng().seed(7);
  for (DT dt : {DT::kFloat32, DT::kFloat16, DT::kBFloat16})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " ta " + std::to_string(ta) + " tb " + std::to_string(tb));
        const int64_t m = 13, n = 10, k = 21, batch = 3, pad = 3;
        gpu::GemmDesc d;
        d.dtype = dt;
        d.trans_a = ta;
        d.trans_b = tb;
        d.m = m;
        d.n = n;
        d.k = k;
        d.lda = (ta ? m : k) + pad;
        d.ldb = (tb ? k : n) + pad;
        d.ldc = n + pad;
        d.batch = batch;
        const int64_t a_rows = ta ? k : m, b_rows = tb ? n : k;
        d.stride_a = 0;  // one A for every batch
        d.stride_b = b_rows * d.ldb;
        d.stride_c = m * d.ldc;
        const HostTensor a = rand_tensor(dt, {a_rows * d.lda}, -1, 1);
        const HostTensor b = rand_tensor(dt, {batch * b_rows * d.ldb}, -1, 1);
        HostTensor c = rand_tensor(dt, {batch * m * d.ldc}, -1, 1);
        const float alpha = 0.75f, beta = -0.5f;
        // Reference in double from the (rounded) inputs.
        std::vector<double> want(static_cast<size_t>(c.numel()));
        for (int64_t i = 0; i < c.numel(); ++i) want[static_cast<size_t>(i)] = get(c, i);
        for (int64_t bi = 0; bi < batch; ++bi)
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double acc = 0;
              for (int64_t p = 0; p < k; ++p)
                acc += get(a, ta ? p * d.lda + i : i * d.lda + p) *
                       get(b, bi * d.stride_b + (tb ? j * d.ldb + p : p * d.ldb + j));
              double& w = want[static_cast<size_t>(bi * d.stride_c + i * d.ldc + j)];
              w = alpha * acc + beta * w;
            }
        DeviceBuffer da(a.bytes.size(), 0), db(b.bytes.size(), 0), dc(c.bytes.size(), 0);
        DeviceBuffer ws(gpu::kGemmWorkspaceBytes, 0);
        da.upload(a.bytes);
        db.upload(b.bytes);
        dc.upload(c.bytes);
        Stream stream;
        gpu::gemm_rowmajor(GpuResources::get().env(stream.get(), {}, nullptr).cublaslt, stream.get(), d, alpha,
                           da.data(), db.data(), beta, dc.data(), ws.data(), gpu::kGemmWorkspaceBytes);
        KILN_CUDA_OK(cudaStreamSynchronize(stream.get()));
        bool guards = false;
        c.bytes = dc.download(&guards);
        EXPECT_TRUE(guards);
        double max_want = 0;
        for (double w : want) max_want = std::max(max_want, std::abs(w));
        const Tolerance tol = dot_tolerance(dt, k, alpha, max_want);
        int bad = 0;
        for (int64_t i = 0; i < c.numel() && bad < 5; ++i)
          if (!same_value(get(c, i), want[static_cast<size_t>(i)], tol)) {
            ++bad;
            ADD_FAILURE() << "element " << i << ": gpu " << get(c, i) << ", reference " << want[static_cast<size_t>(i)];
          }
      }
}

// ---- cuDNN's graphs as tactics ---------------------------------------------------------------------
// For the named op cases: where `offered(name)` and the type is float16 or bfloat16, cuDNN's engine
// configurations are among the tactics, and each also runs captured in a graph (and must be what
// ran: `runs` counts) and on pointers one element off 16 bytes (a graph for that alignment, or the
// op's fallback); elsewhere none is offered. op_cases_gpu_test runs them direct against the CPU.
// Returns how many of the named cases the table has.
int check_cudnn_engines(const std::set<std::string>& names, const std::function<bool(const std::string&)>& offered,
                        uint64_t (*runs)()) {
  int n = 0;
  for (const OpCase& c : op_cases()) {
    if (!names.count(c.name)) continue;
    ++n;
    rng().seed(static_cast<uint32_t>(std::hash<std::string>{}(c.name)));
    for (DT dt : c.dtypes) {
      SCOPED_TRACE(c.name + " " + std::string(dtype_name(dt)));
      for (const OpRun& r : c.runs(dt)) {
        std::vector<int32_t> engines;
        for (int32_t t : tactics_of(c.kind, r.attrs, r.in))
          if (t >= gpu::kCudnnTactic && t < gpu::kCudnnTactic + gpu::kCudnnTactics) engines.push_back(t);
        if (dt == DT::kFloat32 || !offered(c.name)) {
          EXPECT_TRUE(engines.empty());
          continue;
        }
        EXPECT_FALSE(engines.empty());
        for (int32_t t : engines) {
          const uint64_t before = runs();
          check_run(c, r, GpuMode::kCaptured, t);
          EXPECT_GT(runs(), before) << "engine " << t << " did not run";
          check_run(c, r, GpuMode::kMisaligned, t);
        }
      }
    }
  }
  return n;
}

// cuDNN's fused products (runtime/cuda/gemm/cudnn_matmul.cu): the transformer products.
TEST(NnGpuCudnnProduct, TransformerCasesRunEveryEngineCapturedAndMisaligned) {
  KILN_SKIP_WITHOUT_GPU();
  const std::set<std::string> names = {"FusedGemmLinearBiasGeluTanhResidual", "FusedGemmLinearFullCResidualRelu",
                                       "FusedMatMulFfnBiasGelu", "FusedMatMulProjectionBiasResidual"};
  EXPECT_EQ(check_cudnn_engines(
                names, [](const std::string&) { return true; }, gpu::nn::cudnn_product_runs),
            4)
      << "the transformer products' cases of tests/ops/fused_cases.cpp";
}

// cuDNN's fused attention (runtime/cuda/gemm/cudnn_attention.cu): offered without a mask, causal
// order or softcap, not for the others.
TEST(NnGpuCudnnAttention, UnmaskedCasesRunEveryEngineCapturedAndMisaligned) {
  KILN_SKIP_WITHOUT_GPU();
  const std::set<std::string> taken = {"AttentionPackedUnmasked", "AttentionGroupedUnmasked"};
  const std::set<std::string> names = {"AttentionPackedUnmasked", "AttentionGroupedUnmasked", "AttentionPaddingMask",
                                       "AttentionCausal",         "AttentionSoftcap32",       "AttentionPacked"};
  EXPECT_EQ(
      check_cudnn_engines(
          names, [&](const std::string& name) { return taken.count(name) > 0; }, gpu::nn::cudnn_attention_run_count),
      6)
      << "the attention cases of tests/ops/conv_gemm_cases.cpp";
}

// ---- errors --------------------------------------------------------------------------------------
void expect_gpu_throws(OpKind kind, const Attrs& attrs, const Inputs& in, const std::string& needle) {
  std::vector<TensorView> iv;
  for (const HostTensor& t : in) iv.push_back(t.view(nullptr));
  expect_cuda_backend_error(kind, attrs, in, infer_shapes(kind, attrs, iv, 1), needle);
}

// FusedGemm's float16 weights under a float32 product (to-fp16's classifier head,
// core/infer/gemm/gemm.cpp): the GEMV is the only tactic and runs it whatever the engine's tactic,
// against the CPU kernel, which widens the weights first; pointers the GEMV cannot take are refused
// with a message rather than run by another kernel that reads one type.
TEST(NnGpuGemv, Float16WeightsUnderFloat32Product) {
  KILN_SKIP_WITHOUT_GPU();
  FusedGemmAttrs a;
  a.transB = 1;
  a.alpha = 0.5f;
  a.activation = Activation::kRelu;
  struct Case {
    int64_t m, n, k;
    std::optional<Shape> c;
  };
  for (const Case& c :
       {Case{1, 1000, 2048, Shape{1000}}, Case{3, 40, 64, std::nullopt}, Case{8, 20, 48, Shape{8, 20}}}) {
    SCOPED_TRACE("m " + std::to_string(c.m) + " n " + std::to_string(c.n) + " k " + std::to_string(c.k));
    Inputs in{rand_tensor(DT::kFloat32, Shape{c.m, c.k}, -1, 1), rand_tensor(DT::kFloat16, Shape{c.n, c.k}, -1, 1)};
    if (c.c) in.push_back(rand_tensor(DT::kFloat32, *c.c, -1, 1));
    EXPECT_EQ(tactics_of(OpKind::kFusedGemm, a, in), std::vector<int32_t>{gpu::kGemvTactic});
    const double scale = max_abs(in[0]) * max_abs(in[1]) * a.alpha;
    for (GpuMode mode : {GpuMode::kDirect, GpuMode::kCaptured})
      for (int32_t tactic : {-1, 0, gpu::kGemvTactic})
        check_nn(OpKind::kFusedGemm, a, in, static_cast<double>(c.k), scale, mode, tactic);
  }
  Inputs odd{rand_tensor(DT::kFloat32, Shape{9, 64}, -1, 1), rand_tensor(DT::kFloat16, Shape{16, 64}, -1, 1)};
  expect_gpu_throws(OpKind::kFusedGemm, a, odd, "runs only as a matrix-vector product");
}

// Types that shape inference and the CPU kernels reject too, given to the GPU kernels directly.
TEST(NnGpuErrors, UnsupportedTypesThrowNamingTheBackend) {
  KILN_SKIP_WITHOUT_GPU();
  expect_cuda_backend_error(OpKind::kConv, conv(), conv_inputs({1, 2, 4, 4}, {3, 2, 3, 3}, false)(DT::kInt32),
                            {OutputType{DT::kInt32, {1, 3, 2, 2}}});
  expect_cuda_backend_error(OpKind::kMatMul, NoAttrs{}, matmul_inputs({2, 3}, {3, 2})(DT::kInt8),
                            {OutputType{DT::kInt8, {2, 2}}});
}

TEST(NnGpuErrors, MoreThanEightSpatialAxesThrow) {
  KILN_SKIP_WITHOUT_GPU();
  const Shape x(11, 1), w(11, 1);
  expect_gpu_throws(OpKind::kConv, conv(), conv_inputs(x, w, false)(DT::kFloat32), "at most 8");
}

TEST(NnGpuErrors, ShapeErrorsThrowBeforeTheGpu) {
  // Shape inference rejects these; the GPU kernels trust the output views it computes.
  const Inputs bad = matmul_inputs({2, 3}, {4, 2})(DT::kFloat32);
  std::vector<TensorView> iv;
  for (const HostTensor& t : bad) iv.push_back(t.view(nullptr));
  EXPECT_THROW(infer_shapes(OpKind::kMatMul, NoAttrs{}, iv, 1), Error);
}

}  // namespace
}  // namespace kiln::gpu_test
