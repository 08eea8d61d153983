// fuse-gelu: GELU as exporters spell it out before opset 20 becomes one Gelu node.
//   exact:  e = Erf(x / sqrt(2))  (or Erf(x * 1/sqrt(2)))
//   tanh:   e = Tanh(sqrt(2/pi) * (x + 0.044715 * Pow(x, 3)))            -> approximate = "tanh"
//   then    y = x * 0.5 * (e + 1), the two Muls associated in any of the three ways exporters use:
//           (x * (e + 1)) * 0.5,  x * ((e + 1) * 0.5),  (x * 0.5) * (e + 1)
// x^3 must be Pow(x, 3) (x * x * x is not matched). Operands of Add and Mul in either order. sqrt(2), 1/sqrt(2),
// sqrt(2/pi) and 0.044715 match to a relative 1e-6 (a float32 constant is within 6e-8 of the real number); 0.5, 1 and 3
// exactly. Guards (nothing changes): x not float32 or float64; a constant that is not a scalar or not the value above;
// a value inside the pattern read elsewhere or a graph output; any value of another shape than x's (a constant that
// broadcasts x). The Gelu is named after all the nodes it replaces. Position: with fuse-layernorm, before the folds
// that rewrite Mul and Add by constants.
#include <cmath>
#include <numbers>

#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {

namespace {

bool near(double v, double want) { return std::fabs(v - want) <= 1e-6 * std::fabs(want); }

// Lookups of "a node of this kind whose other operand is a scalar constant of this value", the
// step every part of the pattern takes. Indices are -1 when the lookup fails.
struct Match {
  const graph::Graph& g;
  const GraphFacts& f;

  // The only reader of v, when it is a `kind` node whose other operand is a scalar with test(c).
  template <class Test>
  int reader_with_constant(graph::ValueId v, OpKind kind, Test test) const {
    const int j = f.only_reader(g, v);
    if (j < 0) return -1;
    const graph::Node& n = g.nodes[static_cast<size_t>(j)];
    return n.kind == kind && constant_operand(n, v, test) ? j : -1;
  }
  // v's producer, when it is a `kind` node of some value and a scalar with test(c); sets `from`.
  template <class Test>
  int producer_with_constant(graph::ValueId v, OpKind kind, Test test, graph::ValueId& from) const {
    const int p = f.producer[static_cast<size_t>(v)];
    if (p < 0 || !f.only_read_once(g, v)) return -1;
    const graph::Node& n = g.nodes[static_cast<size_t>(p)];
    if (n.kind != kind) return -1;
    for (size_t s = 0; s < 2; ++s) {
      double c = 0.0;
      if (scalar_constant(g.value(n.inputs[1 - s]), c) && test(c, s)) {
        from = n.inputs[s];
        return p;
      }
    }
    return -1;
  }
  template <class Test>
  bool constant_operand(const graph::Node& n, graph::ValueId v, Test test) const {
    double c = 0.0;
    if (n.inputs[0] == v && n.inputs[1] != v) return scalar_constant(g.value(n.inputs[1]), c) && test(c);
    if (n.inputs[1] == v && n.inputs[0] != v) return scalar_constant(g.value(n.inputs[0]), c) && test(c);
    return false;
  }
};

// The nodes computing e from x (e = the Erf or Tanh at node i); empty when they do not match.
std::vector<size_t> inner_nodes(const graph::Graph& g, size_t i, const Match& m, graph::ValueId& x) {
  const graph::Node& n = g.nodes[i];
  if (n.kind == OpKind::kErf) {
    // x / sqrt(2) or x * (1 / sqrt(2)) (Mul in either order).
    int p = m.producer_with_constant(
        n.inputs[0], OpKind::kDiv, [](double c, size_t s) { return s == 0 && near(c, std::sqrt(2.0)); }, x);
    if (p < 0)
      p = m.producer_with_constant(
          n.inputs[0], OpKind::kMul, [](double c, size_t) { return near(c, std::sqrt(0.5)); }, x);
    if (p < 0) return {};
    return {static_cast<size_t>(p), i};
  }
  if (n.kind != OpKind::kTanh) return {};
  // sqrt(2/pi) * (x + 0.044715 * x^3).
  graph::ValueId inner = graph::kNoValue;
  const int scale = m.producer_with_constant(
      n.inputs[0], OpKind::kMul, [](double c, size_t) { return near(c, std::sqrt(2.0 / std::numbers::pi)); }, inner);
  if (scale < 0) return {};
  const int add = m.f.producer[static_cast<size_t>(inner)];
  if (add < 0 || !m.f.only_read_once(g, inner) || g.nodes[static_cast<size_t>(add)].kind != OpKind::kAdd) return {};
  const graph::Node& sum = g.nodes[static_cast<size_t>(add)];
  for (size_t s = 0; s < 2; ++s) {
    graph::ValueId cube = graph::kNoValue, base = graph::kNoValue;
    const int cubic = m.producer_with_constant(
        sum.inputs[1 - s], OpKind::kMul, [](double c, size_t) { return near(c, 0.044715); }, cube);
    if (cubic < 0) continue;
    const int pow = m.producer_with_constant(
        cube, OpKind::kPow, [](double c, size_t k) { return k == 0 && c == 3.0; }, base);
    if (pow < 0 || base != sum.inputs[s]) continue;
    x = base;
    return {static_cast<size_t>(pow), static_cast<size_t>(cubic), static_cast<size_t>(add), static_cast<size_t>(scale),
            i};
  }
  return {};
}

bool fuse_at(graph::Graph& g, size_t i, const GraphFacts& f, std::vector<char>& removed, Tally& tally) {
  const Match m{g, f};
  graph::ValueId x = graph::kNoValue;
  std::vector<size_t> nodes = inner_nodes(g, i, m, x);
  if (nodes.empty()) return false;
  const bool tanh_form = g.nodes[i].kind == OpKind::kTanh;
  // e + 1.
  const int plus_one = m.reader_with_constant(g.nodes[i].outputs[0], OpKind::kAdd, [](double c) { return c == 1.0; });
  if (plus_one < 0) return false;
  nodes.push_back(static_cast<size_t>(plus_one));
  const graph::ValueId a = g.nodes[static_cast<size_t>(plus_one)].outputs[0];
  // The product x * 0.5 * a.
  const int r = f.only_reader(g, a);
  if (r < 0 || g.nodes[static_cast<size_t>(r)].kind != OpKind::kMul) return false;
  const graph::Node& mul = g.nodes[static_cast<size_t>(r)];
  const graph::ValueId other = mul.inputs[0] == a ? mul.inputs[1] : mul.inputs[0];
  auto is_half = [](double c) { return c == 0.5; };
  double c = 0.0;
  int last = -1;
  if (other == x) {  // (x * a) * 0.5
    nodes.push_back(static_cast<size_t>(r));
    last = m.reader_with_constant(mul.outputs[0], OpKind::kMul, is_half);
  } else if (scalar_constant(g.value(other), c) && c == 0.5) {  // x * (a * 0.5)
    nodes.push_back(static_cast<size_t>(r));
    const int j = f.only_reader(g, mul.outputs[0]);
    if (j >= 0 && g.nodes[static_cast<size_t>(j)].kind == OpKind::kMul) {
      const graph::Node& outer = g.nodes[static_cast<size_t>(j)];
      const bool reads_x = outer.inputs[0] == x || outer.inputs[1] == x;
      const bool reads_h = outer.inputs[0] == mul.outputs[0] || outer.inputs[1] == mul.outputs[0];
      if (reads_x && reads_h) last = j;
    }
  } else {  // (x * 0.5) * a
    graph::ValueId from = graph::kNoValue;
    const int half = m.producer_with_constant(
        other, OpKind::kMul, [](double v, size_t) { return v == 0.5; }, from);
    if (half >= 0 && from == x) {
      nodes.push_back(static_cast<size_t>(half));
      last = r;
    }
  }
  if (last < 0) return false;
  if (nodes.back() != static_cast<size_t>(last)) nodes.push_back(static_cast<size_t>(last));

  // Types and shapes: every value of the pattern is x's.
  const graph::Value& xv = g.value(x);
  if ((xv.dtype != DataType::kFloat32 && xv.dtype != DataType::kFloat64) || !xv.shape_static()) return false;
  for (size_t n : nodes)
    for (graph::ValueId v : g.nodes[n].outputs)
      if (g.value(v).dtype != xv.dtype || g.value(v).shape != xv.shape) return false;

  std::string origin;
  for (size_t n : nodes) origin += (origin.empty() ? "" : " + ") + origin_of(g.nodes[n]);
  const graph::ValueId y = g.nodes[static_cast<size_t>(last)].outputs[0];
  for (size_t n : nodes)
    if (n != static_cast<size_t>(last)) remove_node(g, n, removed);
  graph::Node& gelu = g.nodes[static_cast<size_t>(last)];
  gelu.kind = OpKind::kGelu;
  gelu.attrs = GeluAttrs{tanh_form ? GeluApproximation::kTanh : GeluApproximation::kNone};
  gelu.inputs = {x};
  gelu.outputs = {y};
  gelu.origin = origin;
  tally.add(tanh_form ? "Gelu tanh" : "Gelu");
  return true;
}

}  // namespace

PassResult fuse_gelu(graph::Graph& g, const BuildOptions&) {
  Tally tally;
  PassResult r;
  r.changes = rewrite_until_done(g, [&](graph::Graph& gr, size_t i, const GraphFacts& f, std::vector<char>& removed) {
    return fuse_at(gr, i, f, removed, tally);
  });
  r.detail = tally.str();
  return r;
}

}  // namespace kiln::passes
