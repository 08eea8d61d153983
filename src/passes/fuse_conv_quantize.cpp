// fuse-conv-quantize: a float channels-last convolution whose output only a per-tensor
// QuantizeLinear reads, directly or (GPU targets) through a MaxPool, writes the quantized tensor
// itself:
//   NhwcConv(X, W, B, Z) -> Y -> QuantizeLinear(s, z) -> Q
// becomes NhwcConv(X, W, B, Z, s, z) -> Q, and
//   NhwcConv -> Y -> NhwcMaxPool -> P -> QuantizeLinear(s, z) -> Q
// becomes NhwcConv(..., s, z) -> Yq -> NhwcMaxPool -> Q (8-bit), since rounding is monotonic:
// Q(max(y)) == max(Q(y)) (fuse-qdq's step 1 moves Q above a MaxPool on the same grounds).
// This is the stem of an INT8 image network, the one convolution fuse-qdq leaves in float16 because
// its input is the float image: ResNet-50's Conv -> Relu -> MaxPool -> Q and MobileNetV2's
// Conv -> ReLU6 -> Q. Kiln's small-channel stem kernel then stores int8 instead of float16 (half the
// bytes), the QuantizeLinear step goes, and ResNet's MaxPool reads int8; on the GPU the other
// NhwcConv tactics compute the float output into their workspace and quantize it in the same step
// (runtime/cuda/conv/conv.cu), so the fused node is never slower than the pair.
// The fused node computes what the pair did: the float output in X's type, then the same
// QuantizeLinear (the CPU kernel exactly; Kiln's GPU stem kernel quantizes the float value before
// its float16 rounding, so a value within half a float16 unit of a half step may land one step
// away). A Q without a zero point gets a uint8 zero of 0 (its type by default).
// Guards (the nodes stay): Y or P has another reader or is a graph output; the Q is not per-tensor
// with a constant positive scale and 8-bit type; the pool has an Indices output; the conv already
// has a quantized output. After channels-last, which makes NhwcConv (GPU targets, float16).
#include "passes/pass.h"
#include "passes/qdq_util.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {

namespace {

using graph::kNoValue;
using graph::ValueId;

// The per-tensor QuantizeLinear that is v's only reader, if any.
graph::Node* only_quantize(graph::Graph& g, const qdq::Uses& u, ValueId v, int* index) {
  graph::Node* q = qdq::only_reader(g, u, v, OpKind::kQuantizeLinear, index);
  return q && q->inputs[0] == v && qdq::per_tensor(g, *q) ? q : nullptr;
}

// One rewrite, if any applies; true if the graph changed.
// through_pool: also through a MaxPool (GPU targets; see PassResult fuse_conv_quantize).
bool fuse_one(graph::Graph& g, bool through_pool) {
  const qdq::Uses u = qdq::uses_of(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    graph::Node& conv = g.nodes[i];
    if (conv.kind != OpKind::kNhwcConv || conv.inputs.size() > 4) continue;
    const ValueId y = conv.outputs[0];
    const DataType dt = g.value(y).dtype;
    if (dt != DataType::kFloat16 && dt != DataType::kFloat32) continue;
    int qi = -1, pi = -1;
    graph::Node* pool = nullptr;
    graph::Node* q = only_quantize(g, u, y, &qi);
    if (!q) {
      if (!through_pool) continue;
      pool = qdq::only_reader(g, u, y, OpKind::kNhwcMaxPool, &pi);
      if (!pool || pool->outputs.size() != 1 || pool->inputs[0] != y) continue;
      q = only_quantize(g, u, pool->outputs[0], &qi);
      if (!q) continue;
    }
    const qdq::QParams qp = *qdq::per_tensor(g, *q);
    ValueId zero = q->inputs.size() > 2 ? q->inputs[2] : kNoValue;
    if (zero == kNoValue) zero = qdq::add_q8(g, q->name + ".zero_point", qp.type, {}, {0});
    conv.inputs.resize(4, kNoValue);
    conv.inputs.push_back(q->inputs[1]);
    conv.inputs.push_back(zero);
    conv.origin = joined_origin(conv, *q);
    if (pool) {
      g.value(y).dtype = qp.type;  // the pool reads the quantized output, and writes Q's
      pool->outputs[0] = q->outputs[0];
    } else {
      conv.outputs[0] = q->outputs[0];
    }
    g.nodes.erase(g.nodes.begin() + qi);
    return true;
  }
  return false;
}

}  // namespace

PassResult fuse_conv_quantize(graph::Graph& g, const BuildOptions& o) {
  PassResult r;
  // On the CPU the fused convolution computes its float output into a buffer and quantizes it
  // after (runtime/cpu/conv/conv.cpp): through a MaxPool that quantizes 4 times the values the
  // pool's output has. Quantizing after the float pool was faster: LeNet-5's first layer at batch
  // 256 1.33 -> 1.11 ms (conv, quantize and pool; the 2-core build machine, 2026-12-02).
  const bool through_pool = o.target != "cpu";
  while (fuse_one(g, through_pool)) ++r.changes;
  if (r.changes) r.detail = std::to_string(r.changes) + " QuantizeLinear into the convolution before it";
  return r;
}

}  // namespace kiln::passes
