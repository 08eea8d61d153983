// cuDNN's fused products for Gemm, MatMul, FusedGemm and FusedMatMul in float16 and bfloat16
// (declared in nn_internal.cuh): one operation graph, matmul -> add C -> activation -> add Z ->
// activation, whose engines (cuDNN's runtime fusion compiles them) compute the whole epilogue in
// the product's kernel, erf GELU included, which cuBLASLt's epilogues do not have. The builder times
// each engine configuration the heuristics list as a tactic (kCudnnTactic + i) against cuBLASLt's.
//
// Measured on the H200 (bench/micro/gpu_cudnn_matmul_bench.cpp, BERT-base's products at 128 tokens,
// float16, CUDA graphs): the FFN's [128, 768] x [768, 3072] with bias and erf GELU 3.8 us against
// 7.2 us for cuBLASLt and Kiln's epilogue kernel; the output projection with bias and residual 2.8
// against 3.8 us.
//
// A graph is made once per shape, types, epilogue and pointer alignment on each device and shared by
// every step with them (BERT's twelve layers use four; cudnn_graph::GraphCache). Graphs are never made, nor
// their plans finalized, while the stream is being captured (a context re-recording its graph after
// new bindings): such a step runs cuBLASLt. A shape first seen at run time (data-dependent shapes)
// makes its graph then, a fraction of a second once. The cache is not bounded.
#include <atomic>
#include <deque>
#include <string>

#include "runtime/cuda/checks.h"
#include "runtime/cuda/nn_internal.cuh"
#include "runtime/cuda/quant/conv/cudnn_graph.cuh"

namespace kiln::gpu::nn {

namespace cg = cudnn_graph;

struct CudnnProduct {
  std::deque<cg::Desc> keep;  // the descriptors the graph was made from
  std::unique_ptr<cg::Graph> graph;
  bool has_c = false, has_z = false;
};

namespace {

constexpr size_t kMaxWorkspace = size_t{64} << 20;
enum Uid : int64_t { kA = 1, kB, kC, kZ, kY, kVirtual = 100 };

bool takes(Activation a) {
  return a == Activation::kNone || a == Activation::kRelu || a == Activation::kGelu || a == Activation::kGeluTanh;
}

std::vector<int64_t> key_of(const FusedProduct& p) {
  return {p.m,
          p.n,
          p.k,
          p.trans_b,
          static_cast<int64_t>(p.dtype),
          static_cast<int64_t>(p.c),
          p.has_z,
          static_cast<int64_t>(p.act1),
          static_cast<int64_t>(p.act2),
          p.align_a,
          p.align_b,
          p.align_c,
          p.align_z,
          p.align_y};
}

std::shared_ptr<const CudnnProduct> make(const FusedProduct& p, cudnnHandle_t handle) {
  auto b = std::make_shared<CudnnProduct>();
  b->has_c = p.c != FusedProduct::C::kNone;
  b->has_z = p.has_z;
  const cudnnDataType_t dt = p.dtype == DataType::kFloat16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
  const int64_t m = p.m, n = p.n, k = p.k;
  try {
    auto add = [&](cg::Desc d) -> const cg::Desc& { return b->keep.emplace_back(std::move(d)); };
    int64_t next_virtual = kVirtual;
    auto virt = [&]() -> const cg::Desc& {
      const int64_t dims[] = {1, m, n}, strides[] = {m * n, n, 1};
      return add(cg::tensor(next_virtual++, CUDNN_DATA_FLOAT, dims, strides, true));
    };
    const int64_t da[] = {1, m, k}, sa[] = {m * k, k, 1};
    const int64_t db[] = {1, k, n}, sb_n[] = {k * n, n, 1}, sb_t[] = {k * n, 1, k};
    const int64_t dy[] = {1, m, n}, sy[] = {m * n, n, 1}, dc[] = {1, 1, n}, sc[] = {n, n, 1};
    const cg::Desc& a = add(cg::tensor(kA, dt, da, sa, false, p.align_a));
    const cg::Desc& bt =
        add(cg::tensor(kB, dt, db, p.trans_b ? std::span<const int64_t>(sb_t) : sb_n, false, p.align_b));
    const cg::Desc* c = nullptr;
    if (p.c == FusedProduct::C::kPerColumn) c = &add(cg::tensor(kC, dt, dc, sc, false, p.align_c));
    if (p.c == FusedProduct::C::kFull) c = &add(cg::tensor(kC, dt, dy, sy, false, p.align_c));
    const cg::Desc* z = p.has_z ? &add(cg::tensor(kZ, dt, dy, sy, false, p.align_z)) : nullptr;
    const cg::Desc& y = add(cg::tensor(kY, dt, dy, sy, false, p.align_y));

    // The steps after the product, each a pointwise op; the last writes Y.
    struct Step {
      Activation act = Activation::kNone;
      const cg::Desc* operand = nullptr;  // an add of this tensor, or (null) the activation
    };
    std::vector<Step> steps;
    if (c) steps.push_back({Activation::kNone, c});
    if (p.act1 != Activation::kNone) steps.push_back({p.act1, nullptr});
    if (z) steps.push_back({Activation::kNone, z});
    if (z && p.act2 != Activation::kNone) steps.push_back({p.act2, nullptr});
    std::vector<const cg::Desc*> ops;
    const cg::Desc* cur = steps.empty() ? &y : &virt();
    ops.push_back(&add(cg::matmul(a, bt, *cur, CUDNN_DATA_FLOAT)));
    for (size_t i = 0; i < steps.size(); ++i) {
      const cg::Desc& to = i + 1 == steps.size() ? y : virt();
      const Step& s = steps[i];
      if (s.operand)
        ops.push_back(&add(cg::pointwise(CUDNN_POINTWISE_ADD, *cur, s.operand, to)));
      else if (s.act == Activation::kRelu)
        ops.push_back(&add(cg::relu(*cur, to, 0, std::nullopt)));
      else
        ops.push_back(&add(
            cg::pointwise(s.act == Activation::kGelu ? CUDNN_POINTWISE_GELU_FWD : CUDNN_POINTWISE_GELU_APPROX_TANH_FWD,
                          *cur, nullptr, to)));
      cur = &to;
    }
    b->graph = std::make_unique<cg::Graph>(handle, ops, kMaxWorkspace, "a fused product");
  } catch (const Error&) {
    b->graph.reset();  // cuDNN has no engine for it on this GPU: cuBLASLt's tactics alone
  }
  return b;
}

}  // namespace

bool cudnn_takes(const FusedProduct& p) {
  return (p.dtype == DataType::kFloat16 || p.dtype == DataType::kBFloat16) && p.m > 0 && p.n > 0 && p.k > 0 &&
         takes(p.act1) && takes(p.act2) && (p.has_z || p.act2 == Activation::kNone);
}

namespace {
std::atomic<uint64_t> runs{0};  // cudnn_run's calls, for the tests
}  // namespace

uint64_t cudnn_product_runs() { return runs.load(); }

std::shared_ptr<const CudnnProduct> cudnn_product(const FusedProduct& p, cudaStream_t stream) {
  if (!cudnn_takes(p)) return nullptr;
  static auto* graphs = new cg::GraphCache<CudnnProduct>("a fused product");  // never freed (cudnn_graph.cuh)
  // No new graph while a stream is captured (heuristics, compiles).
  const std::shared_ptr<const CudnnProduct> b =
      graphs->get(key_of(p), [&](cudnnHandle_t h) { return make(p, h); }, cg::capturing(stream));
  return b && b->graph ? b : nullptr;
}

std::vector<int32_t> cudnn_tactics(const CudnnProduct& c) { return c.graph->tactics(kCudnnTactic, kCudnnTactics); }

size_t cudnn_workspace(const CudnnProduct& c, int32_t tactic) {
  const size_t i = static_cast<size_t>(tactic - kCudnnTactic);
  return c.graph->builds(i) ? c.graph->workspace(i) : 0;
}

bool cudnn_runs(const CudnnProduct& c, int32_t tactic, size_t workspace_bytes, cudaStream_t stream) {
  return c.graph->runs(static_cast<size_t>(tactic - kCudnnTactic), workspace_bytes, stream);
}

void cudnn_run(const CudnnProduct& c, int32_t tactic, const void* a, const void* b, const void* cc, const void* z,
               void* y, GpuEnv& env) {
  std::vector<int64_t> uids{kA, kB, kY};
  std::vector<void*> data{const_cast<void*>(a), const_cast<void*>(b), y};
  if (c.has_c) {
    uids.push_back(kC);
    data.push_back(const_cast<void*>(cc));
  }
  if (c.has_z) {
    uids.push_back(kZ);
    data.push_back(const_cast<void*>(z));
  }
  c.graph->run(env.cudnn, static_cast<size_t>(tactic - kCudnnTactic), uids, data, env.workspace);
  runs.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace kiln::gpu::nn
