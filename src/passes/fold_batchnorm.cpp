// fold-batchnorm: an inference BatchNormalization whose input is the only use of a Conv,
// ConvTranspose, Gemm or 2-D MatMul (constant B) output folds into that node's weights: with
// s = scale / sqrt(var + eps) per channel (computed in double) the BN is y * s + (bias - mean * s),
// a per-channel affine map that fold_affine_into (affine_fold.h) moves into the producer, which then
// writes the BN's output itself (named "conv1 + bn1"). The BN channel is axis 1, so a MatMul
// qualifies only when its output is 2-D (the channel is its last axis).
// Requires: float (32, 64 or 16) values, constant weights and BN parameters, the producer's output
// read by the BN only and not a graph output, BN not in training mode.
#include <cmath>

#include "passes/affine_fold.h"
#include "passes/pass.h"

namespace kiln::passes {

namespace {

bool fold_one(graph::Graph& g, size_t bn_index, const GraphFacts& facts, Tally& tally) {
  const graph::Node& bn = g.nodes[bn_index];
  if (bn.kind != OpKind::kBatchNormalization) return false;
  const auto& ba = std::get<BatchNormAttrs>(bn.attrs);
  if (ba.training_mode != 0) return false;
  for (size_t i = 1; i < bn.outputs.size(); ++i)
    if (bn.outputs[i] != graph::kNoValue) return false;  // running mean/var outputs: training
  if (bn.inputs.size() != 5 || bn.outputs.empty() || bn.outputs[0] == graph::kNoValue) return false;
  const graph::ValueId x = bn.inputs[0];
  const int p = facts.producer[static_cast<size_t>(x)];
  if (p < 0 || output_channel_axis(g, g.nodes[static_cast<size_t>(p)]) != 1) return false;
  const graph::Value& xv = g.value(x);
  const int64_t channels = xv.shape[1];

  // BN parameters: constant floats of C elements each.
  std::vector<double> bnp[4];
  for (int i = 0; i < 4; ++i) {
    graph::ValueId v = bn.inputs[static_cast<size_t>(i) + 1];
    if (v == graph::kNoValue) return false;
    bnp[i] = read_doubles(g.value(v));
    if (static_cast<int64_t>(bnp[i].size()) != channels) return false;
  }
  const std::vector<double>&scale = bnp[0], &bias = bnp[1], &mean = bnp[2], &var = bnp[3];
  std::vector<double> s(static_cast<size_t>(channels)), shift(s.size());
  for (size_t c = 0; c < s.size(); ++c) {
    s[c] = scale[c] / std::sqrt(var[c] + static_cast<double>(ba.epsilon));
    shift[c] = bias[c] - mean[c] * s[c];
  }
  const std::string label = std::string(op_name(g.nodes[static_cast<size_t>(p)].kind)) + " + BatchNormalization";
  if (!fold_affine_into(g, static_cast<size_t>(p), s, shift, bn.outputs[0], bn, facts, "bnfold")) return false;
  tally.add(label);
  return true;
}

}  // namespace

PassResult fold_batchnorm(graph::Graph& g, const BuildOptions&) {
  Tally tally;
  PassResult r;
  r.changes = rewrite_until_done(g, [&](graph::Graph& gr, size_t i, const GraphFacts& f, std::vector<char>& removed) {
    if (!fold_one(gr, i, f, tally)) return false;
    remove_node(gr, i, removed);
    return true;
  });
  r.detail = tally.str();
  return r;
}

}  // namespace kiln::passes
