// fuse-epilogue: a Conv, Gemm or MatMul and the elementwise chain that follows it become one node,
// which writes the chain's result in one pass over the output instead of one pass per op:
//
//   P -> Add(per-channel constant)* -> activation? -> Add(Z)? -> activation?
//
// Conv and Gemm with an activation or a residual become FusedConv / FusedGemm, MatMul with
// anything FusedMatMul (core/attrs.h, EpilogueAttrs); Conv and Gemm with only bias Adds stay Conv
// and Gemm with the bias folded into B or C. Activations are those match_activation recognises
// (activation_match.h). The new node is named after the anchor; its origin lists every node it
// replaces ("conv1 + bn1 + relu1"), which `kiln inspect` shows.
//
// Guards, each stopping the chain before the op it concerns:
//   - a value inside the chain read by anything else, or a graph output (the chain's last value may be);
//   - types: float32, float16 and float64 only (integer MatMul, bfloat16 stay as they are);
//   - a bias Add's constant must vary along the channel axis only (Conv: axis 1; Gemm, MatMul: the
//     last) and not grow the output; it folds only into a constant B / C (or where there is none);
//   - the residual Z must have exactly the output's shape (no broadcast) and type.
// Matching does not mutate: all matches are found first (nodes claimed, so no two share a node),
// then the graph is rewritten once. The fused node takes the place of the chain's last node, where
// all its inputs (X, W, B and Z) are defined.
#include <algorithm>
#include <map>

#include "passes/activation_match.h"
#include "passes/rewrite_util.h"
#include "passes/pass.h"

namespace kiln::passes {

namespace {

using graph::kNoValue;
using graph::Node;
using graph::ValueId;

struct Fusion {
  int anchor = -1;
  std::vector<int> nodes;    // every node replaced, the anchor included
  std::vector<double> bias;  // the bias Adds' sum per channel; empty: none
  std::optional<ActivationMatch> act1, act2;
  ValueId z = kNoValue;
  ValueId out = kNoValue;
};

// The per-channel values of constant c added to an output of shape y, if c varies along `axis`
// only and broadcasting it does not grow y; empty otherwise.
std::vector<double> channel_values(const graph::Value& c, const std::vector<int64_t>& y, size_t axis) {
  const std::vector<double> v = read_doubles(c);
  if (v.empty() || c.shape.size() > y.size()) return {};
  const size_t offset = y.size() - c.shape.size();
  int64_t along = 1;
  for (size_t i = 0; i < c.shape.size(); ++i) {
    const int64_t d = c.shape[i];
    if (offset + i == axis) {
      if (d != 1 && d != y[axis]) return {};
      along = d;
    } else if (d != 1) {
      return {};
    }
  }
  std::vector<double> out(static_cast<size_t>(y[axis]));
  for (size_t k = 0; k < out.size(); ++k) out[k] = v[along == 1 ? 0 : k];
  return out;
}

// Whether the bias Adds may fold into the anchor: its own bias (Conv's B, Gemm's C) is absent or
// a constant we can read.
bool bias_foldable(const graph::Graph& g, const Node& a) {
  if (a.kind == OpKind::kMatMul) return true;
  if (a.inputs.size() < 3 || a.inputs[2] == kNoValue) return true;
  const graph::Value& b = g.value(a.inputs[2]);
  return !read_doubles(b).empty() || (b.is_constant() && b.view().numel() == 0);
}

class Matcher {
 public:
  explicit Matcher(const graph::Graph& g) : g_(g), ix_(g) {}

  std::vector<Fusion> run() {
    std::vector<Fusion> found;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const OpKind k = g_.nodes[i].kind;
      if (k != OpKind::kConv && k != OpKind::kGemm && k != OpKind::kMatMul) continue;
      if (std::optional<Fusion> f = match(static_cast<int>(i))) {
        for (int n : f->nodes) ix_.claimed[static_cast<size_t>(n)] = 1;
        found.push_back(std::move(*f));
      }
    }
    return found;
  }

 private:
  const graph::Graph& g_;
  GraphIndex ix_;

  std::optional<Fusion> match(int anchor) const {
    const Node& a = g_.nodes[static_cast<size_t>(anchor)];
    if (a.outputs.size() != 1 || a.outputs[0] == kNoValue) return std::nullopt;
    const graph::Value& y = g_.value(a.outputs[0]);
    if (!float_type(y.dtype) || !y.shape_static()) return std::nullopt;
    if (a.kind == OpKind::kConv ? y.shape.size() < 3 : a.kind == OpKind::kGemm ? y.shape.size() != 2 : y.shape.empty())
      return std::nullopt;
    const size_t axis = a.kind == OpKind::kConv ? 1 : y.shape.size() - 1;
    Fusion f;
    f.anchor = anchor;
    f.nodes = {anchor};
    ValueId cur = a.outputs[0];
    auto same_as_y = [&](ValueId v) { return g_.value(v).dtype == y.dtype && g_.value(v).shape == y.shape; };

    // Bias Adds.
    for (int n; bias_foldable(g_, a) && (n = ix_.sole_reader(cur)) >= 0 && ix_.node(n).kind == OpKind::kAdd;) {
      const Node& add = ix_.node(n);
      const ValueId c = add.inputs[0] == cur ? add.inputs[1] : add.inputs[0];
      const std::vector<double> per_channel = channel_values(g_.value(c), y.shape, axis);
      if (per_channel.empty() || !same_as_y(add.outputs[0])) break;
      if (f.bias.empty()) f.bias.assign(per_channel.size(), 0.0);
      for (size_t k = 0; k < per_channel.size(); ++k) f.bias[k] += per_channel[k];
      f.nodes.push_back(n);
      cur = add.outputs[0];
    }
    // activation, residual, activation
    f.act1 = match_activation(ix_, cur);
    if (f.act1) {
      f.nodes.insert(f.nodes.end(), f.act1->nodes.begin(), f.act1->nodes.end());
      cur = f.act1->out;
    }
    if (const int n = ix_.sole_reader(cur); n >= 0 && ix_.node(n).kind == OpKind::kAdd) {
      const Node& add = ix_.node(n);
      const ValueId z = add.inputs[0] == cur ? add.inputs[1] : add.inputs[0];
      if (z != cur && same_as_y(z) && same_as_y(add.outputs[0])) {
        f.z = z;
        f.nodes.push_back(n);
        cur = add.outputs[0];
        f.act2 = match_activation(ix_, cur);
        if (f.act2) {
          f.nodes.insert(f.nodes.end(), f.act2->nodes.begin(), f.act2->nodes.end());
          cur = f.act2->out;
        }
      }
    }
    if (f.nodes.size() == 1) return std::nullopt;
    f.out = cur;
    return f;
  }
};

void set_epilogue(EpilogueAttrs& e, const Fusion& f) {
  if (f.act1) {
    e.activation = f.act1->activation;
    e.activation_alpha = f.act1->alpha;
    e.activation_beta = f.act1->beta;
  }
  if (f.act2) {
    e.activation2 = f.act2->activation;
    e.activation2_alpha = f.act2->alpha;
    e.activation2_beta = f.act2->beta;
  }
}

// The anchor's bias input after the fold: Conv's B + bias, Gemm's beta * C + bias (beta becomes
// 1; a full [M, N] C stays full), MatMul's bias.
ValueId folded_bias(graph::Graph& g, Node& a, const Fusion& f) {
  const ValueId old = a.inputs.size() > 2 ? a.inputs[2] : kNoValue;
  if (f.bias.empty()) return old;
  const DataType t = g.value(a.outputs[0]).dtype;
  const auto n = static_cast<int64_t>(f.bias.size());
  std::vector<double> values = f.bias;
  std::vector<int64_t> shape{n};
  if (old != kNoValue && g.value(old).view().numel() > 0) {
    const graph::Value& b = g.value(old);
    const std::vector<double> bv = read_doubles(b);
    if (a.kind == OpKind::kConv) {
      for (size_t k = 0; k < values.size(); ++k) values[k] += bv[k];
    } else {  // Gemm: C broadcasts to [M, N]
      auto& ga = std::get<GemmAttrs>(a.attrs);
      const int64_t rows = b.shape.size() == 2 ? b.shape[0] : 1, cols = b.shape.empty() ? 1 : b.shape.back();
      shape = rows == 1 ? std::vector<int64_t>{n} : std::vector<int64_t>{rows, n};
      values.assign(static_cast<size_t>(rows * n), 0.0);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < n; ++c)
          values[static_cast<size_t>(r * n + c)] =
              ga.beta * bv[static_cast<size_t>(r * cols + (cols == 1 ? 0 : c))] + f.bias[static_cast<size_t>(c)];
    }
  }
  if (a.kind == OpKind::kGemm) std::get<GemmAttrs>(a.attrs).beta = 1.0f;
  const std::string base = old != kNoValue ? g.value(old).name : a.name + ".bias";
  return g.add_constant(g.unique_name(base + "_fused"), t, shape, write_as(t, values));
}

// "Conv+bias+Relu+residual+Relu": what -v reports per fusion.
std::string signature(const Node& a, const Fusion& f) {
  std::string s(op_name(a.kind));
  if (!f.bias.empty()) s += "+bias";
  if (f.act1) s += "+" + std::string(kEnumNames<Activation>[static_cast<size_t>(f.act1->activation)]);
  if (f.z != kNoValue) s += "+residual";
  if (f.act2) s += "+" + std::string(kEnumNames<Activation>[static_cast<size_t>(f.act2->activation)]);
  return s;
}

// n becomes the fused twin of `a` (FusedConv from Conv, FusedGemm from Gemm): a's attributes plus
// the epilogue.
template <class Fused, class Base>
void with_epilogue(Node& n, const Node& a, const Fusion& f, OpKind kind) {
  Fused fa;
  static_cast<Base&>(fa) = std::get<Base>(a.attrs);
  set_epilogue(fa, f);
  n.kind = kind;
  n.attrs = fa;
}

Node fused_node(graph::Graph& g, const Fusion& f) {
  Node a = g.nodes[static_cast<size_t>(f.anchor)];
  const ValueId bias = folded_bias(g, a, f);
  Node n;
  n.name = a.name;
  std::vector<int> order = f.nodes;
  std::sort(order.begin(), order.end());
  for (int i : order) n.origin += (n.origin.empty() ? "" : " + ") + origin_of(g.nodes[static_cast<size_t>(i)]);
  n.inputs = {a.inputs[0], a.inputs[1], bias, f.z};
  n.outputs = {f.out};
  n.kind = a.kind;  // a Conv or Gemm with only its bias folded stays what it was
  n.attrs = a.attrs;
  const bool epilogue = f.act1 || f.z != kNoValue;
  switch (a.kind) {
    case OpKind::kConv:
      if (epilogue) with_epilogue<FusedConvAttrs, ConvAttrs>(n, a, f, OpKind::kFusedConv);
      break;
    case OpKind::kGemm:
      if (epilogue) with_epilogue<FusedGemmAttrs, GemmAttrs>(n, a, f, OpKind::kFusedGemm);
      break;
    default: {
      EpilogueAttrs ea;
      set_epilogue(ea, f);
      n.kind = OpKind::kFusedMatMul;
      n.attrs = ea;
    }
  }
  while (!n.inputs.empty() && n.inputs.back() == kNoValue) n.inputs.pop_back();
  return n;
}

}  // namespace

PassResult fuse_epilogue(graph::Graph& g, const BuildOptions&) {
  PassResult r;
  std::vector<Fusion> fusions = Matcher(g).run();
  if (fusions.empty()) return r;
  std::map<std::string, int> kinds;
  std::vector<char> removed(g.nodes.size(), 0);
  std::vector<std::pair<size_t, Node>> placed;  // the fused node and the index it takes
  for (const Fusion& f : fusions) {
    kinds[signature(g.nodes[static_cast<size_t>(f.anchor)], f)]++;
    const int last = *std::max_element(f.nodes.begin(), f.nodes.end());
    for (int n : f.nodes) removed[static_cast<size_t>(n)] = 1;
    placed.emplace_back(static_cast<size_t>(last), fused_node(g, f));
  }
  for (auto& [index, node] : placed) {
    g.nodes[index] = std::move(node);
    removed[index] = 0;
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!removed[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  r.changes = static_cast<int>(fusions.size());
  for (const auto& [sig, count] : kinds)
    r.detail += (r.detail.empty() ? "" : ", ") + sig + " x" + std::to_string(count);
  return r;
}

}  // namespace kiln::passes
