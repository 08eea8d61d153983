// fuse-layernorm: the layer normalization that exporters spell out before opset 17,
//   mean = ReduceMean(x, axes)   d = Sub(x, mean)   p = Pow(d, 2) or Mul(d, d)
//   var = ReduceMean(p, axes)    n = Div(d, Sqrt(Add(var, eps)))
//   [m = Mul(n, gamma)]          [y = Add(m, beta)]        (Mul and Add operands in either order)
// becomes LayerNormalization(x, gamma, beta) with axis = the first of axes and epsilon = eps; a
// missing gamma becomes ones. The kernel accumulates the statistics in double precision where the
// spelled-out form rounds every step to float32: results agree to float32 rounding.
// Guards (nothing changes): x not float32; ReduceMean axes that are not the trailing axes [k, rank)
// of x, that differ between the two, or keepdims 0; an exponent other than 2; eps not a constant
// scalar, negative or not finite; gamma or beta not constant, varying along an axis that is not
// normalized, or broadcasting x to a larger shape (the Mul or Add is then left out of the match); any
// value inside the pattern read elsewhere or a graph output. The fused node is named after all of
// the nodes it replaces, first to last.
// Position: after remove-noop and the merges (a gamma of ones or a beta of zeros is gone by then,
// which the optional Mul and Add allow for), before the folds that rewrite Mul and Add by constants.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {

namespace {

// The sorted axes a ReduceMean averages over its input of rank r; empty unless it keeps the
// reduced dims and its axes are constant.
std::vector<int64_t> mean_axes(const graph::Graph& g, const graph::Node& n, int64_t r) {
  const auto& a = std::get<ReduceAttrs>(n.attrs);
  if (a.keepdims != 1) return {};
  std::vector<int64_t> axes;
  if (n.inputs.size() > 1 && n.inputs[1] != graph::kNoValue) {
    const graph::Value& av = g.value(n.inputs[1]);
    if (!av.is_constant() || (av.dtype != DataType::kInt64 && av.dtype != DataType::kInt32)) return {};
    axes = av.view().to_int64();
  }
  if (axes.empty()) {
    if (a.noop_with_empty_axes != 0) return {};
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  }
  for (int64_t& x : axes) {
    if (x < -r || x >= r) return {};
    if (x < 0) x += r;
  }
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) return {};
  return axes;
}

// c as a LayerNormalization parameter of x normalized from axis k: kNoValue unless c is a constant
// of x's type that varies along the normalized axes only and does not broadcast x larger. A c with
// more dims than the normalized ones (leading 1s) is replaced by a copy without them.
graph::ValueId norm_param(graph::Graph& g, graph::ValueId c, const std::vector<int64_t>& x_shape, size_t k) {
  const graph::Value& cv = g.value(c);
  if (!cv.is_constant() || cv.dtype != DataType::kFloat32 || cv.shape.size() > x_shape.size()) return graph::kNoValue;
  const size_t off = x_shape.size() - cv.shape.size();
  for (size_t j = 0; j < cv.shape.size(); ++j) {
    const int64_t d = cv.shape[j];
    if (d != 1 && (off + j < k || d != x_shape[off + j])) return graph::kNoValue;
  }
  const size_t norm_rank = x_shape.size() - k;
  if (cv.shape.size() <= norm_rank) return c;
  std::vector<int64_t> shape(cv.shape.end() - static_cast<std::ptrdiff_t>(norm_rank), cv.shape.end());
  std::vector<uint8_t> bytes = *cv.data;
  return g.add_constant(g.unique_name(cv.name + "_ln"), cv.dtype, shape, std::move(bytes));
}

// The operand of binary node n that is not `v` (n reads v once), or kNoValue.
graph::ValueId other_operand(const graph::Node& n, graph::ValueId v) {
  if (n.inputs[0] == v && n.inputs[1] != v) return n.inputs[1];
  if (n.inputs[1] == v && n.inputs[0] != v) return n.inputs[0];
  return graph::kNoValue;
}

bool fuse_at(graph::Graph& g, size_t i, const GraphFacts& f, std::vector<char>& removed, Tally& tally) {
  const graph::Node& div = g.nodes[i];
  if (div.kind != OpKind::kDiv) return false;
  const graph::ValueId d = div.inputs[0];
  auto index_of = [&](graph::ValueId v) { return static_cast<size_t>(f.producer[static_cast<size_t>(v)]); };
  // Backwards from n = d / sqrt(var + eps).
  const graph::Node* sqrt = f.producer_of(g, div.inputs[1], OpKind::kSqrt);
  if (!sqrt || !f.only_read_once(g, div.inputs[1])) return false;
  const graph::Node* add_eps = f.producer_of(g, sqrt->inputs[0], OpKind::kAdd);
  if (!add_eps || !f.only_read_once(g, sqrt->inputs[0])) return false;
  double eps = 0.0;
  graph::ValueId var = graph::kNoValue;
  for (size_t s = 0; s < 2 && var == graph::kNoValue; ++s)
    if (scalar_constant(g.value(add_eps->inputs[1 - s]), eps)) var = add_eps->inputs[s];
  if (var == graph::kNoValue || !(eps >= 0.0) || !std::isfinite(static_cast<float>(eps))) return false;
  const graph::Node* var_mean = f.producer_of(g, var, OpKind::kReduceMean);
  if (!var_mean || !f.only_read_once(g, var)) return false;
  const graph::ValueId sq = var_mean->inputs[0];
  const int sq_p = f.producer[static_cast<size_t>(sq)];
  if (sq_p < 0 || !f.only_read_once(g, sq)) return false;
  const graph::Node& square = g.nodes[static_cast<size_t>(sq_p)];
  double exponent = 0.0;
  const bool is_pow = square.kind == OpKind::kPow && square.inputs[0] == d &&
                      scalar_constant(g.value(square.inputs[1]), exponent) && exponent == 2.0;
  const bool is_mul = square.kind == OpKind::kMul && square.inputs[0] == d && square.inputs[1] == d;
  if (!is_pow && !is_mul) return false;
  // d is read by the square (once or twice) and the Div only.
  if (f.uses[static_cast<size_t>(d)] != (is_mul ? 3 : 2) || g.is_graph_output(d)) return false;
  const graph::Node* sub = f.producer_of(g, d, OpKind::kSub);
  if (!sub) return false;
  const graph::ValueId x = sub->inputs[0], mean = sub->inputs[1];
  const graph::Node* x_mean = f.producer_of(g, mean, OpKind::kReduceMean);
  if (!x_mean || x_mean->inputs[0] != x || !f.only_read_once(g, mean)) return false;

  // Types and axes.
  const std::vector<int64_t> x_shape = g.value(x).shape;
  const auto r = static_cast<int64_t>(x_shape.size());
  if (g.value(x).dtype != DataType::kFloat32 || !g.value(x).shape_static() || r == 0) return false;
  for (graph::ValueId v : {mean, d, sq, var, sqrt->inputs[0], div.inputs[1], div.outputs[0]})
    if (g.value(v).dtype != DataType::kFloat32) return false;
  if (g.value(div.outputs[0]).shape != x_shape) return false;
  const std::vector<int64_t> axes = mean_axes(g, *x_mean, r);
  if (axes.empty() || axes != mean_axes(g, *var_mean, r) || axes.back() != r - 1 ||
      axes.back() - axes.front() + 1 != static_cast<int64_t>(axes.size()))
    return false;
  const auto k = static_cast<size_t>(axes.front());

  // Forwards: optional n * gamma, then optional + beta.
  std::vector<size_t> nodes{index_of(mean),
                            index_of(d),
                            static_cast<size_t>(sq_p),
                            index_of(var),
                            index_of(sqrt->inputs[0]),
                            index_of(div.inputs[1]),
                            i};
  graph::ValueId gamma = graph::kNoValue, beta = graph::kNoValue, y = div.outputs[0];
  for (OpKind kind : {OpKind::kMul, OpKind::kAdd}) {
    const int j = f.only_reader(g, y);
    if (j < 0 || g.nodes[static_cast<size_t>(j)].kind != kind) continue;
    const graph::Node& n = g.nodes[static_cast<size_t>(j)];
    const graph::ValueId c = other_operand(n, y);
    if (c == graph::kNoValue || g.value(n.outputs[0]).shape != x_shape) continue;
    const graph::ValueId param = norm_param(g, c, x_shape, k);
    if (param == graph::kNoValue) continue;
    (kind == OpKind::kMul ? gamma : beta) = param;
    y = g.nodes[static_cast<size_t>(j)].outputs[0];
    nodes.push_back(static_cast<size_t>(j));
  }
  if (gamma == graph::kNoValue) {
    std::vector<int64_t> norm_shape(x_shape.begin() + static_cast<std::ptrdiff_t>(k), x_shape.end());
    std::vector<float> ones(static_cast<size_t>(numel(norm_shape)), 1.0f);
    std::vector<uint8_t> bytes(ones.size() * 4);
    std::memcpy(bytes.data(), ones.data(), bytes.size());
    gamma = g.add_constant(g.unique_name(g.nodes[i].name + ".scale"), DataType::kFloat32, norm_shape, std::move(bytes));
  }

  // Rewrite: the last node computes y; the others go.
  std::string origin;
  for (size_t n : nodes) origin += (origin.empty() ? "" : " + ") + origin_of(g.nodes[n]);
  const size_t last = nodes.back();
  for (size_t n : nodes)
    if (n != last) remove_node(g, n, removed);
  graph::Node& ln = g.nodes[last];
  ln.kind = OpKind::kLayerNormalization;
  ln.attrs = LayerNormAttrs{static_cast<int64_t>(k), static_cast<float>(eps), 1};
  ln.inputs = {x, gamma};
  if (beta != graph::kNoValue) ln.inputs.push_back(beta);
  ln.outputs = {y};
  ln.origin = origin;
  tally.add("LayerNormalization");
  return true;
}

}  // namespace

PassResult fuse_layernorm(graph::Graph& g, const BuildOptions&) {
  Tally tally;
  PassResult r;
  r.changes = rewrite_until_done(g, [&](graph::Graph& gr, size_t i, const GraphFacts& f, std::vector<char>& removed) {
    return fuse_at(gr, i, f, removed, tally);
  });
  r.detail = tally.str();
  return r;
}

}  // namespace kiln::passes
