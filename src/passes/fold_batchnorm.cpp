// fold-batchnorm: an inference BatchNormalization whose input is the only use of a Conv,
// ConvTranspose or Gemm output folds into that node's weights. With s = scale / sqrt(var + eps)
// per output channel (computed in double): W' = W * s and B' = (B - mean) * s + bias. The producer
// then writes the BN's output itself and the BN disappears. New constants are always created (the
// originals may be shared with other nodes); the old ones are dropped from the engine when unused.
// Requires: float (32, 64 or 16) values, constant W (and B or C) and constant BN parameters, the
// producer's output read by the BN only and not a graph output, BN not in training mode.
#include <cmath>

#include "passes/const_data.h"
#include "passes/pass.h"

namespace kiln::passes {

namespace {

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string origin_of(const graph::Node& n) { return n.origin.empty() ? n.name : n.origin; }

// Tries to fold the BN at nodes[bn_index] into its producer. Returns true on success.
bool fold_one(graph::Graph& g, size_t bn_index, const std::vector<int>& uses, const std::vector<int>& producer) {
  const graph::Node& bn = g.nodes[bn_index];
  const auto& ba = std::get<BatchNormAttrs>(bn.attrs);
  if (ba.training_mode != 0) return false;
  for (size_t i = 1; i < bn.outputs.size(); ++i)
    if (bn.outputs[i] != graph::kNoValue) return false;  // running mean/var outputs: training
  if (bn.inputs.size() != 5 || bn.outputs.empty() || bn.outputs[0] == graph::kNoValue) return false;
  graph::ValueId x = bn.inputs[0];
  if (x == graph::kNoValue || uses[static_cast<size_t>(x)] != 1 || g.is_graph_output(x)) return false;
  int p = producer[static_cast<size_t>(x)];
  if (p < 0) return false;
  graph::Node& prod = g.nodes[static_cast<size_t>(p)];
  if (prod.kind != OpKind::kConv && prod.kind != OpKind::kConvTranspose && prod.kind != OpKind::kGemm) return false;
  if (prod.outputs.size() != 1 || prod.outputs[0] != x) return false;
  const graph::Value& xv = g.value(x);
  if (!is_float_type(xv.dtype) || !xv.shape_static() || xv.shape.size() < 2) return false;
  int64_t channels = xv.shape[1];

  // BN parameters: constant floats of C elements each.
  std::vector<double> bnp[4];
  for (int i = 0; i < 4; ++i) {
    graph::ValueId v = bn.inputs[static_cast<size_t>(i) + 1];
    if (v == graph::kNoValue) return false;
    bnp[i] = read_doubles(g.value(v));
    if (static_cast<int64_t>(bnp[i].size()) != channels) return false;
  }
  const std::vector<double>&scale = bnp[0], &bias = bnp[1], &mean = bnp[2], &var = bnp[3];
  std::vector<double> s(static_cast<size_t>(channels));
  for (size_t c = 0; c < s.size(); ++c) s[c] = scale[c] / std::sqrt(var[c] + static_cast<double>(ba.epsilon));

  if (prod.inputs.size() < 2 || prod.inputs[1] == graph::kNoValue) return false;
  const graph::Value& wv = g.value(prod.inputs[1]);
  if (wv.dtype != xv.dtype || !wv.shape_static()) return false;
  std::vector<double> w = read_doubles(wv);
  if (w.empty() || static_cast<int64_t>(w.size()) != numel(wv.shape)) return false;
  graph::ValueId bid = prod.inputs.size() > 2 ? prod.inputs[2] : graph::kNoValue;
  std::vector<double> b;
  std::vector<int64_t> b_shape;
  if (bid != graph::kNoValue) {
    const graph::Value& bv = g.value(bid);
    if (bv.dtype != xv.dtype || !bv.shape_static()) return false;
    b = read_doubles(bv);
    if (b.empty() && numel(bv.shape) != 0) return false;
    if (static_cast<int64_t>(b.size()) != numel(bv.shape)) return false;
    b_shape = bv.shape;
  }

  std::vector<double> new_b;
  std::vector<int64_t> new_b_shape{channels};
  if (prod.kind == OpKind::kConv || prod.kind == OpKind::kConvTranspose) {
    const auto& ca = std::get<ConvAttrs>(prod.attrs);
    if (wv.shape.size() < 2 || ca.group < 1) return false;
    size_t inner = static_cast<size_t>(numel(wv.shape) / (wv.shape[0] * wv.shape[1]));
    if (prod.kind == OpKind::kConv) {
      // W: [C_out, C_in / group, k...]
      if (wv.shape[0] != channels) return false;
      size_t per_out = static_cast<size_t>(wv.shape[1]) * inner;
      for (size_t i = 0; i < w.size(); ++i) w[i] *= s[i / per_out];
    } else {
      // W: [C_in, C_out / group, k...]; input channel ci belongs to group ci / (C_in / group) and its
      // j-th filter writes output channel group * (C_out / group) + j.
      int64_t c_in = wv.shape[0], out_per_group = wv.shape[1];
      if (c_in % ca.group != 0 || out_per_group * ca.group != channels) return false;
      int64_t in_per_group = c_in / ca.group;
      for (int64_t ci = 0; ci < c_in; ++ci)
        for (int64_t j = 0; j < out_per_group; ++j) {
          double f = s[static_cast<size_t>((ci / in_per_group) * out_per_group + j)];
          size_t base = static_cast<size_t>(ci * out_per_group + j) * inner;
          for (size_t k = 0; k < inner; ++k) w[base + k] *= f;
        }
    }
    if (bid != graph::kNoValue && static_cast<int64_t>(b.size()) != channels) return false;
    new_b.resize(static_cast<size_t>(channels));
    for (size_t c = 0; c < new_b.size(); ++c) new_b[c] = ((b.empty() ? 0.0 : b[c]) - mean[c]) * s[c] + bias[c];
  } else {
    // Gemm: Y = alpha * A' B' + beta * C, Y [M, N], the BN channel is N.
    auto& ga = std::get<GemmAttrs>(prod.attrs);
    if ((ga.transB != 0 && ga.transB != 1) || wv.shape.size() != 2 || xv.shape.size() != 2) return false;
    int64_t m = xv.shape[0], n = channels;
    if (ga.transB == 0) {  // B [K, N]
      if (wv.shape[1] != n) return false;
      for (size_t i = 0; i < w.size(); ++i) w[i] *= s[i % static_cast<size_t>(n)];
    } else {  // B [N, K]
      if (wv.shape[0] != n) return false;
      size_t k = static_cast<size_t>(wv.shape[1]);
      for (size_t i = 0; i < w.size(); ++i) w[i] *= s[i / k];
    }
    // C broadcasts to [M, N] (unidirectionally). Keep a per-row C as [M, N]; otherwise [N].
    int64_t cm = 1, cn = 1;
    if (bid != graph::kNoValue) {
      if (b_shape.size() > 2) return false;
      if (b_shape.size() == 2) cm = b_shape[0];
      if (!b_shape.empty()) cn = b_shape.back();
      if ((cm != 1 && cm != m) || (cn != 1 && cn != n)) return false;
    }
    double beta = static_cast<double>(ga.beta);
    int64_t rows = cm;
    new_b.resize(static_cast<size_t>(rows * n));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < n; ++c) {
        double cval = bid == graph::kNoValue ? 0.0 : b[static_cast<size_t>(r * cn + (cn == 1 ? 0 : c))];
        new_b[static_cast<size_t>(r * n + c)] =
            (beta * cval - mean[static_cast<size_t>(c)]) * s[static_cast<size_t>(c)] + bias[static_cast<size_t>(c)];
      }
    new_b_shape = rows == 1 ? std::vector<int64_t>{n} : std::vector<int64_t>{m, n};
    ga.beta = 1.0f;
  }

  // Rewrite: new constants (never modify the originals, which other nodes may read).
  DataType t = xv.dtype;
  std::vector<int64_t> w_shape = wv.shape;
  std::string w_name = g.unique_name(wv.name + "_bnfold");
  graph::ValueId new_w = g.add_constant(w_name, t, w_shape, encode_doubles(t, w));
  std::string b_base = bid != graph::kNoValue ? g.value(bid).name : prod.name + ".bias";
  std::string b_name = g.unique_name(b_base + "_bnfold");
  graph::ValueId new_bias = g.add_constant(b_name, t, new_b_shape, encode_doubles(t, new_b));
  // add_value may have reallocated g.values; nodes are untouched, but re-fetch references.
  graph::Node& pn = g.nodes[static_cast<size_t>(p)];
  const graph::Node& bnn = g.nodes[bn_index];
  pn.inputs[1] = new_w;
  if (pn.inputs.size() < 3) pn.inputs.resize(3, graph::kNoValue);
  pn.inputs[2] = new_bias;
  pn.outputs[0] = bnn.outputs[0];
  pn.origin = origin_of(pn) + " + " + origin_of(bnn);
  return true;
}

}  // namespace

PassResult fold_batchnorm(graph::Graph& g, const BuildOptions&) {
  PassResult r;
  std::vector<int> uses = g.use_counts();
  std::vector<int> producer = g.producers();
  std::vector<char> removed(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].kind != OpKind::kBatchNormalization) continue;
    if (!fold_one(g, i, uses, producer)) continue;
    removed[i] = 1;
    ++r.changes;
  }
  if (r.changes == 0) return r;
  std::vector<graph::Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!removed[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  return r;
}

}  // namespace kiln::passes
