// fuse-qdq, step 3: Conv / MatMul / Gemm between Q/DQ nodes become kiln.QConv / kiln.QMatMul.
//   x_q -> DQ(s_x, z_x) -> Conv(W = DQ(w_q, s_w, z_w), B) [-> act] [-> Q(s_y, z_y)] -> y
// becomes kiln.QConv(x_q, s_x, z_x, w_q, s_w, z_w, B, s_y, z_y) with the activation in its
// attributes (runtime/qfused_math.h has the arithmetic). MatMul and Gemm become kiln.QMatMul with
// the weights transposed to [N, K]; Gemm's alpha multiplies s_w and beta * C is the bias; a MatMul
// followed by an Add of a constant [N] vector takes it as its bias. A bias may itself be a DQ of
// int32 values (onnxruntime's form): it is evaluated into float.
// Guards (the node stays as it is): x's DQ not per-tensor with constant float32 scale; weights not
// a DQ of constant int8/uint8 values, per-tensor or per output channel; a bias that is not a
// constant vector over the output channels; Gemm with transA; the activation or Q reading a value
// that something else reads too or that is a graph output (they would then be computed twice).
#include <cmath>
#include <cstring>
#include <limits>

#include "core/shape_infer.h"
#include "passes/qdq_util.h"

namespace kiln::passes::qdq {

namespace {

using graph::ValueId;

std::string origin_of(const graph::Node& n) { return n.origin.empty() ? n.name : n.origin; }

// The weights DQ(w_q, s_w, z_w) along axis `axis` of w_q (rank `rank`), channels = w_q's size there.
struct Weights {
  ValueId q = graph::kNoValue, scale = graph::kNoValue, zero = graph::kNoValue;
};
std::optional<Weights> weights_of(const graph::Graph& g, const Uses& u, ValueId w, size_t rank, int64_t axis) {
  const graph::Node* dq = produced_by(g, u, w, OpKind::kDequantizeLinear);
  if (!dq || g.value(w).dtype != DataType::kFloat32) return std::nullopt;
  const graph::Value& q = g.value(dq->inputs[0]);
  if (!q.is_constant() || !is_q8(q.dtype) || q.shape.size() < rank || (rank == 2 && q.shape.size() != 2))
    return std::nullopt;
  const auto& a = std::get<QuantizeAttrs>(dq->attrs);
  const int64_t channels = q.shape[static_cast<size_t>(axis)];
  auto per_channel_ok = [&](ValueId v, DataType t) {
    if (v == graph::kNoValue) return true;
    const graph::Value& p = g.value(v);
    if (!p.is_constant() || p.dtype != t) return false;
    if (p.view().numel() == 1 && p.shape.size() <= 1) return true;
    const int64_t ax = a.axis < 0 ? a.axis + static_cast<int64_t>(q.shape.size()) : a.axis;
    return ax == axis && p.shape.size() == 1 && p.shape[0] == channels;
  };
  const ValueId zero = dq->inputs.size() > 2 ? dq->inputs[2] : graph::kNoValue;
  if (a.block_size != 0 || !per_channel_ok(dq->inputs[1], DataType::kFloat32) || !per_channel_ok(zero, q.dtype))
    return std::nullopt;
  return Weights{dq->inputs[0], dq->inputs[1], zero};
}

// Constant float values of v: a float constant, or a DQ whose inputs are all constants.
std::optional<std::vector<double>> float_values(const graph::Graph& g, const Uses& u, ValueId v) {
  if (v == graph::kNoValue) return std::nullopt;
  if (g.value(v).is_constant()) {
    if (g.value(v).dtype != DataType::kFloat32) return std::nullopt;
    return constant_values(g, v);
  }
  const graph::Node* dq = produced_by(g, u, v, OpKind::kDequantizeLinear);
  if (!dq || std::get<QuantizeAttrs>(dq->attrs).block_size != 0) return std::nullopt;
  std::optional<std::vector<double>> q = constant_values(g, dq->inputs[0]), s = constant_values(g, dq->inputs[1]);
  std::optional<std::vector<double>> z = dq->inputs.size() > 2 && dq->inputs[2] != graph::kNoValue
                                             ? constant_values(g, dq->inputs[2])
                                             : std::vector<double>{0.0};
  if (!q || !s || !z || g.value(dq->inputs[0]).shape.size() > 1) return std::nullopt;
  if (s->size() != 1 && s->size() != q->size()) return std::nullopt;
  if (z->size() != 1 && z->size() != q->size()) return std::nullopt;
  for (size_t i = 0; i < q->size(); ++i)
    (*q)[i] = ((*q)[i] - (*z)[z->size() == 1 ? 0 : i]) * (*s)[s->size() == 1 ? 0 : i];
  return q;
}

// A bias over `n` channels: a vector of n values, or a single value repeated.
std::optional<std::vector<float>> channel_vector(const std::optional<std::vector<double>>& v, int64_t n, double k) {
  if (!v || (v->size() != 1 && static_cast<int64_t>(v->size()) != n)) return std::nullopt;
  std::vector<float> out(static_cast<size_t>(n));
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(k * (*v)[v->size() == 1 ? 0 : i]);
  return out;
}

// What follows the compute op: an activation, then a QuantizeLinear.
struct Tail {
  QActivation act = QActivation::kNone;
  float alpha = 0, beta = 0;
  ValueId out = graph::kNoValue, y_scale = graph::kNoValue, y_zero = graph::kNoValue;
  std::vector<int> absorbed;  // node indices
};

Tail follow(graph::Graph& g, const Uses& u, ValueId y) {
  Tail t;
  t.out = y;
  if (single_use(g, u, y)) {
    const int ai = u.readers[static_cast<size_t>(y)][0];
    const graph::Node& a = g.nodes[static_cast<size_t>(ai)];
    bool act = a.inputs[0] == y && a.outputs.size() == 1;
    if (act && a.kind == OpKind::kRelu) {
      t.act = QActivation::kRelu;
    } else if (act && a.kind == OpKind::kLeakyRelu) {
      t.act = QActivation::kLeakyRelu;
      t.alpha = std::get<AlphaAttrs>(a.attrs).alpha;
    } else if (act && a.kind == OpKind::kClip) {
      auto bound = [&](size_t i, float dflt) -> std::optional<float> {
        if (i >= a.inputs.size() || a.inputs[i] == graph::kNoValue) return dflt;
        std::optional<std::vector<double>> v = constant_values(g, a.inputs[i]);
        if (!v || v->size() != 1 || g.value(a.inputs[i]).dtype != DataType::kFloat32) return std::nullopt;
        return static_cast<float>((*v)[0]);
      };
      const std::optional<float> lo = bound(1, -std::numeric_limits<float>::infinity()),
                                 hi = bound(2, std::numeric_limits<float>::infinity());
      act = lo && hi && *lo <= *hi;
      if (act) {
        t.act = QActivation::kClip;
        t.alpha = *lo;
        t.beta = *hi;
      }
    } else {
      act = false;
    }
    if (act) {
      t.absorbed.push_back(ai);
      t.out = a.outputs[0];
    }
  }
  int qi = -1;
  const graph::Node* q = only_reader(g, u, t.out, OpKind::kQuantizeLinear, &qi);
  if (q && q->inputs[0] == t.out) {
    if (const std::optional<QParams> p = per_tensor(g, *q)) {
      t.absorbed.push_back(qi);
      t.out = q->outputs[0];
      t.y_scale = q->inputs[1];
      // QuantizeLinear without a zero point quantizes to uint8; the fused op needs it spelled out.
      t.y_zero = q->inputs.size() > 2 && q->inputs[2] != graph::kNoValue ? q->inputs[2]
                                                                         : add_q8(g, "y_zero", p->type, {}, {0});
    }
  }
  return t;
}

// Replaces node i by `fused` (whose output is tail.out) and marks the absorbed nodes, if the
// fused node's inferred output type is the value's; false (nothing changed) otherwise.
bool install(graph::Graph& g, size_t i, graph::Node fused, const Tail& tail, std::vector<char>& removed) {
  std::vector<TensorView> views;
  for (ValueId v : fused.inputs) views.push_back(v == graph::kNoValue ? absent_tensor() : g.value(v).view());
  try {
    const std::vector<OutputType> t = infer_shapes(fused.kind, fused.attrs, views, 1);
    const graph::Value& out = g.value(tail.out);
    if (t[0].dtype != out.dtype || t[0].shape != out.shape) return false;
  } catch (const Error&) {
    return false;
  }
  while (!fused.inputs.empty() && fused.inputs.back() == graph::kNoValue) fused.inputs.pop_back();
  for (int a : tail.absorbed) {  // the name says which layers the step computes; a Q is not one
    removed[static_cast<size_t>(a)] = 1;
    if (g.nodes[static_cast<size_t>(a)].kind != OpKind::kQuantizeLinear)
      fused.origin += " + " + origin_of(g.nodes[static_cast<size_t>(a)]);
  }
  g.nodes[i] = std::move(fused);
  return true;
}

// x's DequantizeLinear, per tensor: {x_q, s_x, z_x}.
std::optional<std::array<ValueId, 3>> input_of(const graph::Graph& g, const Uses& u, ValueId x) {
  const graph::Node* dq = produced_by(g, u, x, OpKind::kDequantizeLinear);
  if (!dq || g.value(x).dtype != DataType::kFloat32 || !per_tensor(g, *dq)) return std::nullopt;
  return std::array<ValueId, 3>{dq->inputs[0], dq->inputs[1], dq->inputs.size() > 2 ? dq->inputs[2] : graph::kNoValue};
}

bool fuse_conv(graph::Graph& g, const Uses& u, size_t i, std::vector<char>& removed) {
  const graph::Node& c = g.nodes[i];
  const auto x = input_of(g, u, c.inputs[0]);
  const auto w = x ? weights_of(g, u, c.inputs[1], 3, 0) : std::nullopt;
  if (!w || g.value(c.outputs[0]).dtype != DataType::kFloat32) return false;
  const int64_t m = g.value(w->q).shape[0];
  ValueId bias = graph::kNoValue;
  if (c.inputs.size() > 2 && c.inputs[2] != graph::kNoValue) {
    const auto b = channel_vector(float_values(g, u, c.inputs[2]), m, 1.0);
    if (!b || g.value(c.inputs[2]).shape.size() != 1) return false;
    bias = g.value(c.inputs[2]).is_constant() ? c.inputs[2] : add_f32(g, g.value(c.inputs[2]).name + "_float", {m}, *b);
  }
  const graph::Node conv = g.nodes[i];  // follow() may add values; keep a copy of the node
  const Tail t = follow(g, u, conv.outputs[0]);
  const auto& ca = std::get<ConvAttrs>(conv.attrs);
  QConvAttrs qa;
  qa.auto_pad = ca.auto_pad;
  qa.dilations = ca.dilations;
  qa.group = ca.group;
  qa.kernel_shape = ca.kernel_shape;
  qa.pads = ca.pads;
  qa.strides = ca.strides;
  qa.activation = t.act;
  qa.act_alpha = t.alpha;
  qa.act_beta = t.beta;
  graph::Node f{conv.name, OpKind::kQConv,
                qa,        {(*x)[0], (*x)[1], (*x)[2], w->q, w->scale, w->zero, bias, t.y_scale, t.y_zero},
                {t.out},   origin_of(conv)};
  return install(g, i, std::move(f), t, removed);
}

// [K, N] int8/uint8 -> [N, K].
ValueId transposed(graph::Graph& g, ValueId q) {
  const graph::Value& v = g.value(q);
  const int64_t K = v.shape[0], N = v.shape[1];
  std::vector<uint8_t> b(v.data->size());
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) b[static_cast<size_t>(n * K + k)] = (*v.data)[static_cast<size_t>(k * N + n)];
  const std::string name = g.unique_name(v.name + "_t");
  return g.add_constant(name, v.dtype, {N, K}, std::move(b));
}

bool fuse_matmul(graph::Graph& g, const Uses& u, size_t i, std::vector<char>& removed) {
  const graph::Node mm = g.nodes[i];
  const bool gemm = mm.kind == OpKind::kGemm;
  const GemmAttrs ga = gemm ? std::get<GemmAttrs>(mm.attrs) : GemmAttrs{};
  if (ga.transA != 0 || g.value(mm.outputs[0]).dtype != DataType::kFloat32) return false;
  const auto x = input_of(g, u, mm.inputs[0]);
  if (!x || g.value(mm.inputs[0]).shape.size() < 2) return false;
  const bool nk = gemm && ga.transB != 0;  // weights already [N, K]
  const auto w = weights_of(g, u, mm.inputs[1], 2, nk ? 0 : 1);
  if (!w) return false;
  const int64_t n = g.value(w->q).shape[nk ? 0 : 1];
  // Bias: Gemm's beta * C, or a MatMul's following Add of a constant [N] (or [1, ..., N]) vector.
  std::optional<std::vector<float>> bias;
  ValueId y = mm.outputs[0];
  std::vector<int> absorbed;
  auto vector_shape = [&](ValueId v) {
    for (size_t d = 0; d + 1 < g.value(v).shape.size(); ++d)
      if (g.value(v).shape[d] != 1) return false;
    return g.value(v).shape.empty() || g.value(v).shape.back() == n || g.value(v).shape.back() == 1;
  };
  if (gemm && mm.inputs.size() > 2 && mm.inputs[2] != graph::kNoValue) {
    bias = channel_vector(float_values(g, u, mm.inputs[2]), n, ga.beta);
    if (!bias || !vector_shape(mm.inputs[2])) return false;
  } else if (!gemm && single_use(g, u, y)) {
    const int ai = u.readers[static_cast<size_t>(y)][0];
    const graph::Node& add = g.nodes[static_cast<size_t>(ai)];
    const ValueId other = add.inputs[0] == y ? add.inputs[1] : add.inputs[0];
    if (add.kind == OpKind::kAdd && g.value(other).is_constant() && vector_shape(other) &&
        g.value(add.outputs[0]).shape == g.value(y).shape) {
      bias = channel_vector(float_values(g, u, other), n, 1.0);
      if (bias) {
        absorbed.push_back(ai);
        y = add.outputs[0];
      }
    }
  }
  Tail t = follow(g, u, y);
  t.absorbed.insert(t.absorbed.begin(), absorbed.begin(), absorbed.end());
  ValueId scale = w->scale;
  if (gemm && ga.alpha != 1.0f) {
    std::optional<std::vector<double>> s = constant_values(g, scale);
    std::vector<float> scaled(s->size());
    for (size_t k = 0; k < s->size(); ++k) scaled[k] = static_cast<float>((*s)[k] * ga.alpha);
    scale = add_f32(g, g.value(scale).name + "_alpha", g.value(scale).shape, scaled);
  }
  const ValueId bias_v = bias ? add_f32(g, mm.name + "_bias", {n}, *bias) : graph::kNoValue;
  QMatMulAttrs qa;
  qa.activation = t.act;
  qa.act_alpha = t.alpha;
  qa.act_beta = t.beta;
  const ValueId wq = nk ? w->q : transposed(g, w->q);
  graph::Node f{mm.name, OpKind::kQMatMul,
                qa,      {(*x)[0], (*x)[1], (*x)[2], wq, scale, w->zero, bias_v, t.y_scale, t.y_zero},
                {t.out}, origin_of(mm)};
  return install(g, i, std::move(f), t, removed);
}

}  // namespace

ComputeFusions fuse_compute_ops(graph::Graph& g) {
  ComputeFusions f;
  const Uses u = uses_of(g);
  std::vector<char> removed(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (removed[i]) continue;
    const OpKind k = g.nodes[i].kind;
    if (k == OpKind::kConv && fuse_conv(g, u, i, removed)) ++f.convs;
    if ((k == OpKind::kMatMul || k == OpKind::kGemm) && fuse_matmul(g, u, i, removed)) ++f.matmuls;
  }
  std::vector<graph::Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!removed[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  return f;
}

}  // namespace kiln::passes::qdq
