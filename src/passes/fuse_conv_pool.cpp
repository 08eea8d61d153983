// fuse-conv-pool: a channels-last INT8 convolution whose float32 output only a global average pool
// reads writes the pooled values itself:
//   NhwcQConv(...) -> Y [N, H, W, M] -> ReduceMean(axes = spatial, keepdims) -> P [N, 1, 1, M]
// becomes NhwcQConv(..., pool_mean = 1) -> P. This is the end of an image classifier in an INT8
// engine (ResNet's last block and its GlobalAveragePool, which channels-last made a ReduceMean; so
// is MobileNetV2's last 1x1 layer): one step instead of two, and Y, N * H * W * M float32 values, is
// never written (at batch 1 the reduction was a launch of its own; at batch 256 Y is 100 MB).
// Kiln's tensor-core kernel averages the pixels of each image in its epilogue where its tile holds
// whole images; the GPU's other tactics compute Y into their workspace and reduce it in the same
// step, and the CPU runs the pair, so the fused node computes what the pair did.
// Guards (the nodes stay): Y has another reader or is a graph output; Y is not float32 (a
// quantized output would be averaged after its rounding); the reduction is not over exactly the
// spatial axes, or drops them (keepdims 0); the images have more than kMaxPixels pixels, where the
// pooling kernels of the reduction are better placed than a convolution's epilogue. After
// channels-last, which makes NhwcQConv and the ReduceMean.
#include <algorithm>
#include <set>

#include "passes/pass.h"
#include "passes/qdq_util.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {

namespace {

using graph::ValueId;

// The most pixels per image the tensor-core kernel pools in its tiles (its tiles have 64 or 128
// rows): where an image is larger, the reduction stays a step of its own.
constexpr int64_t kMaxPixels = 64;

// Whether reduce (a ReduceMean reading y [N, S..., M]) averages exactly the spatial axes S and
// keeps them.
bool spatial_mean(const graph::Graph& g, const graph::Node& reduce, int64_t rank) {
  const auto& a = std::get<ReduceAttrs>(reduce.attrs);
  if (a.keepdims != 1 || reduce.inputs.size() != 2) return false;
  const std::optional<std::vector<double>> axes = qdq::constant_values(g, reduce.inputs[1]);
  if (!axes) return false;
  std::set<int64_t> got;
  for (double d : *axes) got.insert(d < 0 ? static_cast<int64_t>(d) + rank : static_cast<int64_t>(d));
  std::set<int64_t> want;
  for (int64_t k = 1; k + 1 < rank; ++k) want.insert(k);
  return got == want && got.size() == axes->size();
}

bool fuse_one(graph::Graph& g) {
  const qdq::Uses u = qdq::uses_of(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    graph::Node& conv = g.nodes[i];
    if (conv.kind != OpKind::kNhwcQConv || conv.outputs.size() != 1) continue;
    auto& a = std::get<QConvAttrs>(conv.attrs);
    const ValueId y = conv.outputs[0];
    const graph::Value& yv = g.value(y);
    if (a.pool_mean != 0 || yv.dtype != DataType::kFloat32 || yv.shape.size() < 3) continue;
    int64_t pixels = 1;
    for (size_t k = 1; k + 1 < yv.shape.size(); ++k) pixels *= yv.shape[k];
    if (pixels < 1 || pixels > kMaxPixels) continue;
    int ri = -1;
    graph::Node* reduce = qdq::only_reader(g, u, y, OpKind::kReduceMean, &ri);
    if (!reduce || reduce->inputs[0] != y || reduce->outputs.size() != 1 ||
        !spatial_mean(g, *reduce, static_cast<int64_t>(yv.shape.size())))
      continue;
    a.pool_mean = 1;
    conv.origin = joined_origin(conv, *reduce);
    conv.outputs[0] = reduce->outputs[0];
    g.nodes.erase(g.nodes.begin() + ri);
    return true;
  }
  return false;
}

}  // namespace

PassResult fuse_conv_pool(graph::Graph& g, const BuildOptions&) {
  PassResult r;
  while (fuse_one(g)) ++r.changes;
  if (r.changes) r.detail = std::to_string(r.changes) + " global average pool" + (r.changes == 1 ? "" : "s") +
                            " into the convolution before it";
  return r;
}

}  // namespace kiln::passes
