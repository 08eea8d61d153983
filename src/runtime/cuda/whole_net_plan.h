// The whole-network plan: whether a GPU engine can run as ONE kernel (whole_net.cu), and the layer
// table that kernel walks. Plain C++ (no CUDA), so that the decision is made, shown by `kiln
// inspect` and unit-tested on machines without a GPU.
//
// Eligible: a chain of steps, each reading the previous step's output (directly, or through a view
// of it at offset 0 of the same size: Flatten, Reshape), every other input a constant; one engine
// input, read by the first step, and one engine output, written by the last; every tensor of the
// chain [N, ...] with the same N <= kWholeNetMaxBatch; float32, float16 or bfloat16 data. Ops:
// Conv / FusedConv / NhwcConv (2-D, any group, stride, pad, dilation; bias and one activation, no
// residual), MaxPool / AveragePool and their Nhwc twins (2-D, no Indices output), GlobalAveragePool
// / GlobalMaxPool (2-D; also as ReduceMean / ReduceMax over the spatial axes, as the channels-last
// pass writes them), Gemm / FusedGemm (transA 0, any transB, alpha, beta, C broadcast as ONNX
// allows), MatMul / FusedMatMul (2-D A, constant 2-D B, per-column bias), the activations of
// core/epilogue.h as ops (Relu, LeakyRelu, Clip with constant bounds, Sigmoid, Tanh, HardSigmoid,
// HardSwish, Gelu), Cast between float types, Transpose keeping the batch axis first, and
// Identity / Reshape / Flatten / Squeeze / Unsqueeze left as steps (copies). Anything else: the
// plan says why not, and the engine runs step by step as before.
//
// Memory: sample n of the batch is one thread block cluster on Hopper (whole_net.cu), one block
// elsewhere; every block of it holds the whole activation. The activations live in one
// shared-memory region of the size of the largest (input + output) pair of consecutive layers: a
// layer reads its input from one end of the region and writes its output at the other end, so the
// two never overlap and the ends alternate (the engine input is first copied to the low end). The
// last layer writes the engine output to global memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/attrs.h"
#include "kiln/types.h"

namespace kiln::detail {
struct EngineImpl;
}

namespace kiln::gpu {

inline constexpr int64_t kWholeNetMaxBatch = 8;  // a cluster per sample: beyond this the step path wins
inline constexpr int kWholeNetThreads = 1024;    // threads per block

enum class WnOp : uint8_t {
  kConv,       // direct convolution, bias, activation
  kPool,       // window pooling (max or average), or global pooling as a window over the whole plane
  kDense,      // y = act(alpha * x W + beta * C): Gemm, MatMul and their fused forms
  kUnary,      // y = act(x), with a change of float type (Cast, the activations, copies)
  kTranspose,  // a permutation of the per-sample axes
};

enum class WnPool : uint8_t {
  kMax,            // MaxPool: a number replaces NaN, an empty window gives the lowest value
  kAverage,        // AveragePool: sum / count (count_include_pad: the padded count)
  kGlobalMax,      // GlobalMaxPool, ReduceMax: NaN propagates
  kGlobalAverage,  // GlobalAveragePool, ReduceMean: summed in double
};

// One layer of the table, per sample (the batch axis dropped). A plain struct, copied to the device
// as is: the kernel reads it from global memory.
struct WnLayer {
  WnOp op = WnOp::kUnary;
  DataType in_dtype = DataType::kFloat32, out_dtype = DataType::kFloat32;
  bool nhwc = false;     // kConv / kPool: data [H, W, C] (and W [M, kh, kw, C/group]) instead of [C, H, W]
  bool trans_b = false;  // kDense: W is [M, K], else [K, M]
  WnPool pool = WnPool::kMax;
  bool count_include_pad = false;
  Activation act = Activation::kNone;
  float act_alpha = 0, act_beta = 0;
  // kConv / kPool: input [c, h, w], output [m, oh, ow] (pools: m = c). kDense: k = c inputs, m outputs.
  int32_t c = 0, h = 1, w = 1, m = 0, oh = 1, ow = 1;
  int32_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  int32_t ph = 0, pw = 0, ph_end = 0, pw_end = 0;  // pads at the start and the end of each axis
  int32_t groups = 1;
  // kDense: y[j] = act(alpha * sum_k x[k] W(k, j) + beta * bias[n * bias_row + j * bias_col]), n the
  // sample (Gemm's C broadcast; FusedMatMul's per-column bias with beta 1). No bias: beta 0.
  float alpha = 1, beta = 0;
  int32_t bias_row = 0, bias_col = 0;
  // kTranspose: the input's per-sample dims and the permutation (output axis i is input axis
  // perm[i]), left-padded to 4 axes with dims of 1.
  int32_t dims[4] = {1, 1, 1, 1}, perm[4] = {0, 1, 2, 3};
  int32_t in_elems = 0, out_elems = 0;   // per sample
  uint32_t in_off = 0, out_off = 0;      // byte offsets in the block's shared memory (out_off unused by the last layer)
  int32_t w_tensor = -1, b_tensor = -1;  // the engine's weight and bias tensors (kConv, kDense), -1: none
  const void* weight = nullptr;          // their device addresses, set before the upload
  const void* bias = nullptr;
};

struct WholeNetPlan {
  std::string refusal;  // empty: eligible; else why not (names the step)
  std::vector<WnLayer> layers;
  int64_t batch = 0;
  int32_t in_bytes = 0;      // one sample of the engine input
  int32_t out_elems = 0;     // one sample of the engine output
  size_t smem_bytes = 0;     // dynamic shared memory per block: activation region, scratch, layer
  uint32_t scratch_off = 0;  // kDense with W [K, M]: partial sums of the split reduction (kWholeNetThreads floats)
  uint32_t layer_off = 0;    // the block's copy of the layer it runs

  bool eligible() const { return refusal.empty(); }
  // "7 layers in one kernel, 9.2 KiB of shared memory per sample", or "not used: <refusal>".
  std::string describe() const;
};

// Decides for an engine (a GPU engine; the decision does not look at the target) whether the
// whole-network kernel can run it, with at most `max_smem_bytes` of shared memory per block.
WholeNetPlan plan_whole_network(const detail::EngineImpl& e, size_t max_smem_bytes);

}  // namespace kiln::gpu
