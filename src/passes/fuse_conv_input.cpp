// fuse-conv-input: a channels-last convolution whose input is a channels-first tensor moved
// channels-last by a Transpose, and perhaps cast to the convolution's type by a Cast before or
// after it, reads the channels-first tensor itself:
//   X [N, C, H, W] float32 -> Cast(float16) -> Transpose(0, 2, 3, 1) -> NhwcConv
// becomes NhwcConv(x_channels_first = 1) reading X. That chain is what a float16 or INT8 engine
// puts before its stem: to-fp16 casts the float32 image and channels-last transposes it. Two
// kernels and two passes over the image go (ResNet-50 at batch 256: 0.4 GB of traffic). On the
// GPU, Kiln's small-channel stem kernel stages X's rows as they are and converts them in shared
// memory; every other tactic runs the same Cast and Transpose into its workspace first, so the
// step costs what the chain did (runtime/cuda/conv/conv.cu). The CPU casts X and runs the
// convolution. The Cast rounds as before, so the outputs are unchanged.
// Guards (nothing changes): the convolution is not of the stem kernel's shapes (3 input channels,
// 2-D, one group, a square 3x3 or 7x7 kernel with stride 2, 32 or 64 filters: elsewhere folding
// would only move the conversion into the step, and out of the whole-network kernel's reach); a
// value of the chain has another reader or is a graph output; the Transpose does not move axis 1
// last; a Cast converts from anything but float32 or into anything but W's type (then only the
// Transpose folds, where X is W's type); the convolution already reads a channels-first X. After
// channels-last, which makes NhwcConv.
#include "core/layout.h"
#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {

namespace {

using graph::ValueId;

// The shapes of Kiln's RGB stem kernel (runtime/cuda/conv/small_c.cuh), which reads a
// channels-first X itself: W [M, k, k, 3] with M 32 or 64, k 3 or 7, stride 2, one group.
bool stem_shape(const graph::Graph& g, const graph::Node& conv) {
  const auto& a = std::get<FusedConvAttrs>(conv.attrs);
  const TensorView w = g.value(conv.inputs[1]).view();
  if (w.rank() != 4 || w.shape[3] != 3 || (w.shape[0] != 32 && w.shape[0] != 64)) return false;
  if (w.shape[1] != w.shape[2] || (w.shape[1] != 3 && w.shape[1] != 7) || a.group != 1) return false;
  for (int64_t d : a.dilations)
    if (d != 1) return false;
  return a.strides == std::vector<int64_t>{2, 2};
}

bool fuse_one(graph::Graph& g, size_t i, const GraphFacts& f, std::vector<char>& removed) {
  graph::Node& conv = g.nodes[i];
  if (conv.kind != OpKind::kNhwcConv || conv.inputs.size() < 2) return false;
  if (std::get<FusedConvAttrs>(conv.attrs).x_channels_first || !stem_shape(g, conv)) return false;
  const DataType w_type = g.value(conv.inputs[1]).dtype;
  ValueId x = conv.inputs[0];
  int transpose = -1, cast = -1;
  // Up the chain: at most one Transpose and one Cast, each read only by the node after it.
  while (f.only_read_once(g, x)) {
    const int at = f.producer[static_cast<size_t>(x)];
    if (at < 0) break;
    const graph::Node& n = g.nodes[static_cast<size_t>(at)];
    if (n.inputs.empty() || n.inputs[0] == graph::kNoValue) break;
    const graph::Value& from = g.value(n.inputs[0]);
    if (n.kind == OpKind::kTranspose && transpose < 0) {
      const size_t rank = from.view().rank();
      if (rank < 3 || resolved_perm(std::get<TransposeAttrs>(n.attrs), rank) != channels_last_perm(rank)) break;
      transpose = at;
    } else if (n.kind == OpKind::kCast && cast < 0) {
      if (from.dtype != DataType::kFloat32 || g.value(n.outputs[0]).dtype != w_type) break;
      cast = at;
    } else {
      break;
    }
    x = n.inputs[0];
  }
  if (transpose < 0) return false;
  const DataType xt = g.value(x).dtype;
  if (xt != w_type && xt != DataType::kFloat32) return false;
  conv.inputs[0] = x;
  std::get<FusedConvAttrs>(conv.attrs).x_channels_first = 1;
  remove_node(g, static_cast<size_t>(transpose), removed);
  if (cast >= 0) remove_node(g, static_cast<size_t>(cast), removed);
  return true;
}

}  // namespace

PassResult fuse_conv_input(graph::Graph& g, const BuildOptions&) {
  PassResult r;
  r.changes = rewrite_until_done(g, fuse_one);
  if (r.changes)
    r.detail = std::to_string(r.changes) + " convolution" + (r.changes == 1 ? "" : "s") +
               " reading a channels-first input (Cast and Transpose folded)";
  return r;
}

}  // namespace kiln::passes
