// Products (Mul trees) are matched by their leaves: a Mul's operand that is the unclaimed, singly
// read output of another Mul is expanded, scalar constants are multiplied into one scale, and the
// rest are leaves, compared as a multiset. Which Mul is the root is not known from below, so the
// candidates are tried from the lowest up (the Mul chain above the first one).
#include "passes/activation_match.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln::passes {

namespace {

using graph::kNoValue;
using graph::Node;
using graph::ValueId;

constexpr double kSqrt2 = 1.4142135623730951;
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kGeluTanhCubic = 0.044715;

struct Matcher {
  const GraphIndex& ix;
  ValueId x;
  double tol;

  ValueId out_of(int n) const { return ix.node(n).outputs.empty() ? kNoValue : ix.node(n).outputs[0]; }

  // The input of binary node n that is not v (v must be one of them), else kNoValue.
  ValueId other_input(int n, ValueId v) const {
    const Node& node = ix.node(n);
    if (node.inputs.size() != 2) return kNoValue;
    if (node.inputs[0] == v) return node.inputs[1];
    if (node.inputs[1] == v) return node.inputs[0];
    return kNoValue;
  }
  bool scalar_near(ValueId v, double want) const {
    const std::optional<double> s = ix.scalar(v);
    return s && near(*s, want, tol);
  }
  // The sole reader of v if it is of `kind`, else -1.
  int next(ValueId v, OpKind kind) const {
    const int n = ix.sole_reader(v);
    return n >= 0 && ix.node(n).kind == kind ? n : -1;
  }
  // Add(v, 1) read from v: its output, else kNoValue.
  ValueId plus_one(ValueId v, std::vector<int>& nodes) const {
    const int a = next(v, OpKind::kAdd);
    if (a < 0 || !scalar_near(other_input(a, v), 1.0)) return kNoValue;
    nodes.push_back(a);
    return out_of(a);
  }

  struct Product {
    std::vector<ValueId> leaves;
    double scale = 1.0;
    std::vector<int> nodes;
  };
  void flatten(int n, Product& p) const {
    p.nodes.push_back(n);
    for (ValueId v : ix.node(n).inputs) {
      if (v == x) {
        p.leaves.push_back(v);
      } else if (const std::optional<double> c = ix.scalar(v)) {
        p.scale *= *c;
      } else if (const int m = ix.producer_of_kind(v, OpKind::kMul); m >= 0 && ix.sole_reader(v) == n) {
        flatten(m, p);
      } else {
        p.leaves.push_back(v);
      }
    }
  }
  // Pow(x, 3) leaves become three x leaves.
  void expand_cubes(Product& p) const {
    std::vector<ValueId> leaves;
    for (ValueId v : p.leaves) {
      const int pw = ix.producer_of_kind(v, OpKind::kPow);
      if (pw >= 0 && ix.node(pw).inputs.size() == 2 && ix.node(pw).inputs[0] == x &&
          scalar_near(ix.node(pw).inputs[1], 3.0)) {
        leaves.insert(leaves.end(), {x, x, x});
        p.nodes.push_back(pw);
      } else {
        leaves.push_back(v);
      }
    }
    p.leaves = std::move(leaves);
  }
  bool leaves_are(Product& p, std::vector<ValueId> want, double scale) const {
    std::sort(p.leaves.begin(), p.leaves.end());
    std::sort(want.begin(), want.end());
    return p.leaves == want && near(p.scale, scale, tol);
  }
  // The product with these leaves and scale whose lowest Mul is `first` (or one of the Muls
  // above it): its output, its nodes appended; else kNoValue.
  ValueId product(int first, const std::vector<ValueId>& want, double scale, std::vector<int>& nodes) const {
    for (int root = first; root >= 0 && ix.node(root).kind == OpKind::kMul; root = ix.sole_reader(out_of(root))) {
      Product p;
      flatten(root, p);
      if (leaves_are(p, want, scale)) {
        nodes.insert(nodes.end(), p.nodes.begin(), p.nodes.end());
        return out_of(root);
      }
    }
    return kNoValue;
  }
  // 0.5 * x * t read from t: its output, else kNoValue.
  ValueId half_x_times(ValueId t, std::vector<int>& nodes) const {
    if (t == kNoValue) return kNoValue;
    return product(next(t, OpKind::kMul), {x, t}, 0.5, nodes);
  }

  // The distinct unclaimed nodes reading x; empty if one is claimed.
  std::vector<int> readers() const {
    std::vector<int> r = ix.readers[static_cast<size_t>(x)];
    std::sort(r.begin(), r.end());
    r.erase(std::unique(r.begin(), r.end()), r.end());
    for (int n : r)
      if (ix.claimed[static_cast<size_t>(n)]) return {};
    return r;
  }

  std::optional<ActivationMatch> single_op(int n) const {
    const Node& node = ix.node(n);
    if (node.inputs.empty() || node.inputs[0] != x) return std::nullopt;
    ActivationMatch m;
    switch (node.kind) {
      case OpKind::kRelu: m.activation = Activation::kRelu; break;
      case OpKind::kSigmoid: m.activation = Activation::kSigmoid; break;
      case OpKind::kTanh: m.activation = Activation::kTanh; break;
      case OpKind::kHardSwish: m.activation = Activation::kHardSwish; break;
      case OpKind::kLeakyRelu:
        m.activation = Activation::kLeakyRelu;
        m.alpha = std::get<AlphaAttrs>(node.attrs).alpha;
        break;
      case OpKind::kHardSigmoid:
        m.activation = Activation::kHardSigmoid;
        m.alpha = std::get<HardSigmoidAttrs>(node.attrs).alpha;
        m.beta = std::get<HardSigmoidAttrs>(node.attrs).beta;
        break;
      case OpKind::kGelu:
        m.activation = std::get<GeluAttrs>(node.attrs).approximate == GeluApproximation::kTanh ? Activation::kGeluTanh
                                                                                               : Activation::kGelu;
        break;
      case OpKind::kClip: {
        m.activation = Activation::kClip;
        m.alpha = -std::numeric_limits<float>::infinity();
        m.beta = std::numeric_limits<float>::infinity();
        for (size_t i = 1; i < node.inputs.size(); ++i) {
          if (node.inputs[i] == kNoValue) continue;
          const std::optional<double> b = ix.scalar(node.inputs[i]);
          if (!b) return std::nullopt;
          (i == 1 ? m.alpha : m.beta) = static_cast<float>(*b);
        }
        break;
      }
      default: return std::nullopt;
    }
    m.nodes = {n};
    m.out = out_of(n);
    return m;
  }

  // x * Sigmoid(x) (SiLU) or x * HardSigmoid(x) with alpha 1/6, beta 1/2 (HardSwish).
  std::optional<ActivationMatch> gated(const std::vector<int>& r) const {
    if (r.size() != 2) return std::nullopt;
    for (int k = 0; k < 2; ++k) {
      const int gate = r[static_cast<size_t>(k)], mul = r[static_cast<size_t>(1 - k)];
      const Node& gn = ix.node(gate);
      if (ix.node(mul).kind != OpKind::kMul || gn.inputs.empty() || gn.inputs[0] != x) continue;
      if (ix.sole_reader(out_of(gate)) != mul || other_input(mul, x) != out_of(gate)) continue;
      ActivationMatch m;
      if (gn.kind == OpKind::kSigmoid) {
        m.activation = Activation::kSilu;
      } else if (gn.kind == OpKind::kHardSigmoid && near(std::get<HardSigmoidAttrs>(gn.attrs).alpha, 1.0 / 6.0, tol) &&
                 near(std::get<HardSigmoidAttrs>(gn.attrs).beta, 0.5, tol)) {
        m.activation = Activation::kHardSwish;
      } else {
        continue;
      }
      m.nodes = {gate, mul};
      m.out = out_of(mul);
      return m;
    }
    return std::nullopt;
  }

  // 0.5 * x * (1 + Erf(x / sqrt(2))), starting from the reader that scales x for the Erf.
  std::optional<ActivationMatch> gelu_erf(int u) const {
    const Node& un = ix.node(u);
    const bool div =
        un.kind == OpKind::kDiv && un.inputs.size() == 2 && un.inputs[0] == x && scalar_near(un.inputs[1], kSqrt2);
    const bool mul = un.kind == OpKind::kMul && scalar_near(other_input(u, x), 1.0 / kSqrt2);
    if (!div && !mul) return std::nullopt;
    std::vector<int> nodes{u};
    const int e = next(out_of(u), OpKind::kErf);
    if (e < 0) return std::nullopt;
    nodes.push_back(e);
    const ValueId out = half_x_times(plus_one(out_of(e), nodes), nodes);
    if (out == kNoValue) return std::nullopt;
    return ActivationMatch{Activation::kGelu, 0.0f, 0.0f, nodes, out};
  }

  // 0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), starting from the Add of x and the
  // cubic term.
  std::optional<ActivationMatch> gelu_tanh(int a) const {
    if (ix.node(a).kind != OpKind::kAdd) return std::nullopt;
    const ValueId cubic = other_input(a, x);
    const int root = cubic == kNoValue ? -1 : ix.producer_of_kind(cubic, OpKind::kMul);
    if (root < 0 || ix.sole_reader(cubic) != a) return std::nullopt;
    Product p;
    flatten(root, p);
    expand_cubes(p);
    if (!leaves_are(p, {x, x, x}, kGeluTanhCubic)) return std::nullopt;
    std::vector<int> nodes = p.nodes;
    nodes.push_back(a);
    const ValueId inner = out_of(a);
    const ValueId scaled = product(next(inner, OpKind::kMul), {inner}, kSqrt2OverPi, nodes);
    if (scaled == kNoValue) return std::nullopt;
    const int th = next(scaled, OpKind::kTanh);
    if (th < 0) return std::nullopt;
    nodes.push_back(th);
    const ValueId out = half_x_times(plus_one(out_of(th), nodes), nodes);
    if (out == kNoValue) return std::nullopt;
    return ActivationMatch{Activation::kGeluTanh, 0.0f, 0.0f, nodes, out};
  }

  std::optional<ActivationMatch> any() const {
    const std::vector<int> r = readers();
    if (r.empty()) return std::nullopt;
    if (r.size() == 1)
      if (std::optional<ActivationMatch> m = single_op(r[0])) return m;
    if (std::optional<ActivationMatch> m = gated(r)) return m;
    for (int n : r) {
      if (std::optional<ActivationMatch> m = gelu_erf(n)) return m;
      if (std::optional<ActivationMatch> m = gelu_tanh(n)) return m;
    }
    return std::nullopt;
  }
};

}  // namespace

std::optional<ActivationMatch> match_activation(const GraphIndex& ix, ValueId x) {
  if (x == kNoValue || ix.g.is_graph_output(x)) return std::nullopt;
  const graph::Value& xv = ix.g.value(x);
  const Matcher matcher{ix, x, xv.dtype == DataType::kFloat16 ? 1e-3 : 1e-6};
  std::optional<ActivationMatch> m = matcher.any();
  if (!m || m->out == kNoValue) return std::nullopt;
  std::sort(m->nodes.begin(), m->nodes.end());
  if (std::adjacent_find(m->nodes.begin(), m->nodes.end()) != m->nodes.end()) return std::nullopt;
  const graph::Value& ov = ix.g.value(m->out);
  if (ov.dtype != xv.dtype || ov.shape != xv.shape || !self_contained(ix, m->nodes, x, m->out)) return std::nullopt;
  return m;
}

}  // namespace kiln::passes
