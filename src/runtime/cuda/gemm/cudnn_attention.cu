// cuDNN's fused attention for the Attention op (declared in nn_internal.cuh): its unified SDPA
// operation (cuDNN 9.13.1 and later), Y = softmax(scale Q K^T) V in one kernel, read and written in
// place through the tensors' strides (BERT's and ViT's packed projections need no copies). Each
// engine configuration the heuristics list is an attention tactic (kCudnnTactic + i, nn_gemm.h)
// that the builder times against Kiln's own kernels (gemm/attention.cu).
//
// Taken: float16 and bfloat16, head sizes (Q's and V's the same) multiples of 8 up to 128, no mask
// input, not causal, no softcap. Not taken, left to Kiln's kernels:
// - a float mask: a query row whose keys are all masked by -inf (float16's form of the exporters'
//   lowest float) gives zeros in Kiln's kernels and NaN in a softmax that subtracts the row's
//   maximum, and the builder cannot see the mask's values when it chooses; cuDNN 9.19's unified
//   operation has no additive mask either (9.21 adds one);
// - causal: cuDNN 9.19's unified operation has no diagonal mask (9.21 adds one), and the
//   composite graph (matmul, scale, index comparison and select, softmax, matmul) that the
//   frontend builds for older versions finds no engine on the H200 with this cuDNN.
//
// Measured (H200, float16, bench/micro/gpu_kernels_bench.cpp, BM_Attention): ViT-B/16 at batch 64
// ([64, 12, 197, 64]) 48.7 us against 89 us for Kiln's best; [8, 16, 2048, 64] 296 against 708 us;
// [1, 16, 2048, 128] 61 against 152 us; BERT's [1, 12, 128, 64] 8.7 us against Kiln's 5.
//
// Graphs are made once per geometry and type on each device (cudnn_graph::
// GraphCache) and never while a stream is being captured: such a step runs Kiln's kernel, as does
// one whose tensors are not 16-byte aligned.
#include <atomic>
#include <deque>

#include "core/attention.h"
#include "runtime/cuda/nn_internal.cuh"
#include "runtime/cuda/quant/conv/cudnn_graph.cuh"

namespace kiln::gpu::nn {

namespace cg = cudnn_graph;

struct CudnnAttention {
  std::deque<cg::Desc> keep;  // the descriptors the graph was made from
  std::unique_ptr<cg::Graph> graph;
};

namespace {

constexpr size_t kMaxWorkspace = size_t{64} << 20;
enum Uid : int64_t { kQ = 1, kK, kV, kY, kScale };
std::atomic<uint64_t> runs{0};  // cudnn_attention_run's calls, for the tests

std::vector<int64_t> key_of(const AttentionShape& g, DataType dt) {
  std::vector<int64_t> k{g.batch,  g.q_heads,   g.kv_heads, g.q_len, g.kv_len, g.head_size, g.v_head_size,
                         static_cast<int64_t>(dt)};
  for (const auto* s : {&g.q_stride, &g.k_stride, &g.v_stride, &g.y_stride}) k.insert(k.end(), s->begin(), s->end());
  return k;
}

std::shared_ptr<const CudnnAttention> make(const AttentionShape& g, DataType dt, cudnnHandle_t handle) {
  auto c = std::make_shared<CudnnAttention>();
  const cudnnDataType_t io = dt == DataType::kFloat16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
  const int64_t b = g.batch, h = g.q_heads, hk = g.kv_heads, sq = g.q_len, skv = g.kv_len, d = g.head_size,
                dv = g.v_head_size;
  auto add = [&](cg::Desc desc) -> const cg::Desc& { return c->keep.emplace_back(std::move(desc)); };
  try {
    const int64_t dq[] = {b, h, sq, d}, dk[] = {b, hk, skv, d}, dvv[] = {b, hk, skv, dv}, dy[] = {b, h, sq, dv};
    const cg::Desc& q = add(cg::tensor(kQ, io, dq, g.q_stride));
    const cg::Desc& k = add(cg::tensor(kK, io, dk, g.k_stride));
    const cg::Desc& v = add(cg::tensor(kV, io, dvv, g.v_stride));
    const cg::Desc& y = add(cg::tensor(kY, io, dy, g.y_stride));
    const cg::Desc& scale = add(cg::scalar(kScale, CUDNN_DATA_FLOAT, 4));
    const cg::Desc* ops[] = {&add(cg::sdpa_forward(q, k, v, y, scale))};
    c->graph = std::make_unique<cg::Graph>(handle, ops, kMaxWorkspace, "fused attention");
  } catch (const Error&) {
    c->graph.reset();  // cuDNN has no engine for it on this GPU: Kiln's kernels alone
  }
  return c;
}

// Elements contiguous along a head, and every row, head and batch 16-byte aligned (8 elements).
bool rows_aligned(const std::array<int64_t, 4>& stride) {
  return stride[3] == 1 && stride[0] % 8 == 0 && stride[1] % 8 == 0 && stride[2] % 8 == 0;
}

}  // namespace

bool cudnn_attention_takes(const AttentionShape& g, DataType dt) {
  return (dt == DataType::kFloat16 || dt == DataType::kBFloat16) && !g.has_mask && !g.causal && g.softcap == 0.0f &&
         g.mask_period == 0 && g.head_size == g.v_head_size && g.head_size % 8 == 0 && g.head_size <= 128 &&
         rows_aligned(g.q_stride) && rows_aligned(g.k_stride) && rows_aligned(g.v_stride) && rows_aligned(g.y_stride) &&
         g.batch > 0 && g.q_len > 0 && g.kv_len > 0;
}

std::shared_ptr<const CudnnAttention> cudnn_attention(const AttentionShape& g, DataType dt,
                                                      std::span<const void* const, 4> qkvy, cudaStream_t stream) {
  if (!cudnn_attention_takes(g, dt)) return nullptr;
  // cuDNN's attention kernels assume 16-byte aligned tensors whatever alignment the descriptors
  // declare (the H200 with cuDNN 9.19: misaligned-address faults and writes past the output).
  for (const void* p : qkvy)
    if (alignment_of(p, 16) < 16) return nullptr;
  static auto* graphs = new cg::GraphCache<CudnnAttention>("fused attention");  // never freed (cudnn_graph.cuh)
  const std::shared_ptr<const CudnnAttention> c =
      graphs->get(key_of(g, dt), [&](cudnnHandle_t h) { return make(g, dt, h); }, cg::capturing(stream));
  return c && c->graph ? c : nullptr;
}

std::vector<int32_t> cudnn_attention_tactics(const CudnnAttention& c) {
  return c.graph->tactics(kCudnnTactic, kCudnnTactics);
}

size_t cudnn_attention_workspace(const CudnnAttention& c, int32_t tactic) {
  const size_t i = static_cast<size_t>(tactic - kCudnnTactic);
  return c.graph->builds(i) ? c.graph->workspace(i) : 0;
}

bool cudnn_attention_runs(const CudnnAttention& c, int32_t tactic, size_t workspace_bytes, cudaStream_t stream) {
  return c.graph->runs(static_cast<size_t>(tactic - kCudnnTactic), workspace_bytes, stream);
}

uint64_t cudnn_attention_run_count() { return runs.load(); }

void cudnn_attention_run(const CudnnAttention& c, int32_t tactic, std::span<const void* const, 4> qkvy, float scale,
                         GpuEnv& env) {
  // Passed by value (the graph is shared by steps of other scales): cuDNN reads it when the kernel
  // is enqueued.
  const int64_t uids[] = {kQ, kK, kV, kY, kScale};
  void* const data[] = {const_cast<void*>(qkvy[0]), const_cast<void*>(qkvy[1]), const_cast<void*>(qkvy[2]),
                        const_cast<void*>(qkvy[3]), &scale};
  c.graph->run(env.cudnn, static_cast<size_t>(tactic - kCudnnTactic), uids, data, env.workspace);
  runs.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace kiln::gpu::nn
