// The geometry of an Attention op (ONNX opset 23), shared by its shape inference and its kernels:
// Q [batch, q_heads, q_len, head_size], K [batch, kv_heads, kv_len, head_size], V [batch, kv_heads,
// kv_len, v_head_size] (or each 3-D, [batch, len, heads * size], with the head counts as
// attributes), an optional mask broadcast to [batch, q_heads, q_len, kv_len] (bool: true attends;
// float: added to the scores; with Kiln's mask_period, a 4-D mask repeated along the batch), and Y
// [batch, q_heads, q_len, v_head_size] (3-D like Q). Query head h reads key/value head h / (q_heads
// / kv_heads) (grouped-query attention). Packed (Kiln's packed_qkv): input 0, [batch, len, (q_heads
// + 2 kv_heads) * head_size], holds Q, K and V side by side in each row (one projection GEMM's
// output), read in place through the offsets and strides; inputs 1 and 2 name it again (the op
// keeps its three required inputs); Y is 3-D.
#pragma once

#include <array>
#include <optional>
#include <span>

#include "core/attrs.h"
#include "core/tensor.h"

namespace kiln {

struct AttentionShape {
  int64_t batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head_size = 0, v_head_size = 0;
  bool three_d = false;
  float scale = 1.0f;    // the attribute, or 1/sqrt(head_size)
  float softcap = 0.0f;  // > 0: scores become softcap * tanh(scores / softcap) before the mask
  bool causal = false;   // query i attends keys j <= i (the upper-left aligned lower triangle)
  bool has_mask = false, mask_bool = false;
  // Element strides of (batch, head, position, element) in Q, K, V and Y; of (batch, head, query,
  // key) in the mask, 0 along the dims it broadcasts.
  std::array<int64_t, 4> q_stride{}, k_stride{}, v_stride{}, y_stride{}, mask_stride{};
  // > 0: batch entry b reads the mask's entry b % mask_period (Kiln's mask_period attribute).
  int64_t mask_period = 0;
  int64_t mask_batch(int64_t b) const { return mask_period > 0 ? b % mask_period : b; }
  // Where Q, K and V start in the inputs they are read from: inputs 0, 1 and 2, or input 0 for all
  // three when packed (in elements).
  bool packed = false;
  int64_t q_offset = 0, k_offset = 0, v_offset = 0;
  size_t k_input() const { return packed ? 0 : 1; }
  size_t v_input() const { return packed ? 0 : 2; }
};

// The element strides of a mask of shape `mask` read as [batch, q_heads, q_len, kv_len] = `scores`
// (right-aligned, 0 along the dims it broadcasts); nullopt when it has more than 4 dims or does not
// broadcast to `scores` without enlarging it. Shared by the op and fuse-attention's match.
std::optional<std::array<int64_t, 4>> attention_mask_strides(std::span<const int64_t> mask,
                                                             std::span<const int64_t, 4> scores);

// Whether 3-D Q, K and V whose last axes are wq, wk and wv wide (with a's head counts) can lie side
// by side in one packed_qkv input: K and V equally wide, Q's head size theirs. Shared by the passes
// that pack (fuse-attention's Split, fuse-siblings' projections).
bool attention_packs(const AttentionAttrs& a, int64_t wq, int64_t wk, int64_t wv);

// Checks the inputs (Q, K, V, optional mask) and attributes; throws kiln::Error saying what is wrong.
AttentionShape attention_shape(const AttentionAttrs& a, std::span<const TensorView> in);

}  // namespace kiln
