// fuse-qresidual: the residual Add of an INT8 block moves into the kiln.QConv before it, so that
// the block's output is computed in one step from int8 data:
//   q = kiln.QConv(...) -> P (float) -> Add(P, R) -> S [-> Relu] -> T -> QuantizeLinear -> Y
// becomes
//   kiln.QConv(..., y_scale, y_zero, z = Rq, z_scale, z_zero; activation relu if the Relu was there) -> Y
// where Rq is R's quantized form: the input of the per-tensor DequantizeLinear producing R, or the
// output of a per-tensor QuantizeLinear reading R. The Add uses that quantized value of R instead
// of the float one (as TensorRT does; docs/decisions/30-quantized-downsample-shortcut.md). Where R
// has no quantized form (a float tensor nothing quantizes; quantize-int8 quantizes ResNet's
// downsampling shortcuts for this pass), z is R itself, in float32. Other readers of T (the next
// block's Add, a pooling, a graph output) read T = DequantizeLinear(Y) instead: one DQ node writing the
// same value, so graph outputs keep their names, and the next block then finds its R produced by
// that DQ. Matches are taken in topological order, with the use facts recomputed after each.
// Where no per-tensor QuantizeLinear reads T (ResNet's last block, before the pooling), the fused
// kiln.QConv has no y_scale and writes T itself in float32: the Add and the Relu still go.
// Guards (the nodes stay): the QConv already has a quantized output, an activation or a residual;
// P has another reader or is a graph output; the Add broadcasts; R is not float32; the fused node's
// inferred type is not Y's.
// Afterwards, a QConv or QMatMul whose float output is then read only by a per-tensor Q (a shortcut
// R that the Add read in float) takes that Q, as fuse-qdq would have had the Add not been there.
// Nodes are appended while the pass runs and put back in topological order at the end (a stable
// sort keeping the original order where the data allows: Rq's QuantizeLinear may come after q).
#include <functional>
#include <queue>

#include "core/shape_infer.h"
#include "passes/pass.h"
#include "passes/qdq_util.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {

namespace {

using graph::kNoValue;
using graph::ValueId;

// R's quantized form: R == scale * (q - zero) (zero: kNoValue for 0).
struct Quantized {
  ValueId q = kNoValue, scale = kNoValue, zero = kNoValue;
};

ValueId zero_of(const graph::Node& n) { return n.inputs.size() > 2 ? n.inputs[2] : kNoValue; }

std::optional<Quantized> quantized_form(const graph::Graph& g, const qdq::Uses& u, ValueId r) {
  // A DQ'd int8 tensor is exactly R; prefer it over re-quantizing R.
  if (const graph::Node* dq = qdq::produced_by(g, u, r, OpKind::kDequantizeLinear); dq && qdq::per_tensor(g, *dq))
    return Quantized{dq->inputs[0], dq->inputs[1], zero_of(*dq)};
  for (int k : u.readers[static_cast<size_t>(r)]) {
    const graph::Node& q = g.nodes[static_cast<size_t>(k)];
    if (q.kind == OpKind::kQuantizeLinear && q.inputs[0] == r && qdq::per_tensor(g, q))
      return Quantized{q.outputs[0], q.inputs[1], zero_of(q)};
  }
  return std::nullopt;
}

struct Match {
  size_t conv = 0;
  int add = -1, relu = -1, quant = -1;
  ValueId t = kNoValue;  // the block's float output, T
  Quantized z;
};

std::optional<Match> match(graph::Graph& g, const qdq::Uses& u, size_t i) {
  const graph::Node& c = g.nodes[i];
  if (c.kind != OpKind::kQConv || c.outputs.size() != 1) return std::nullopt;
  if (std::get<QConvAttrs>(c.attrs).activation != QActivation::kNone || has_input(c, 7) || has_input(c, 9))
    return std::nullopt;
  Match m;
  m.conv = i;
  const ValueId p = c.outputs[0];
  const graph::Node* add = qdq::only_reader(g, u, p, OpKind::kAdd, &m.add);
  if (!add || g.value(p).dtype != DataType::kFloat32) return std::nullopt;
  const ValueId r = add->inputs[0] == p ? add->inputs[1] : add->inputs[0];
  const std::vector<int64_t>& shape = g.value(p).shape;
  if (g.value(r).dtype != DataType::kFloat32 || g.value(r).shape != shape || g.value(add->outputs[0]).shape != shape)
    return std::nullopt;
  m.t = add->outputs[0];
  if (const graph::Node* relu = qdq::only_reader(g, u, m.t, OpKind::kRelu, &m.relu)) m.t = relu->outputs[0];
  for (int k : u.readers[static_cast<size_t>(m.t)]) {
    const graph::Node& q = g.nodes[static_cast<size_t>(k)];
    if (q.kind == OpKind::kQuantizeLinear && q.inputs[0] == m.t && qdq::per_tensor(g, q)) {
      m.quant = k;
      break;
    }
  }
  m.z = quantized_form(g, u, r).value_or(Quantized{r, kNoValue, kNoValue});
  return m;
}

// Gives f (a kiln.QConv or kiln.QMatMul, with at least 9 input slots) q's scale and zero point as
// y_scale and y_zero. May add a constant: Q's zero point when Q has none (QuantizeLinear then means
// uint8, the fused ops int8).
void take_quantizer(graph::Graph& g, graph::Node& f, const graph::Node& q) {
  ValueId y_zero = zero_of(q);
  if (y_zero == kNoValue) y_zero = qdq::add_q8(g, "y_zero", g.value(q.outputs[0]).dtype, {}, {0});
  f.inputs[7] = q.inputs[1];
  f.inputs[8] = y_zero;
}

// Whether f's inferred output has y's type and shape.
bool infers_as(const graph::Graph& g, const graph::Node& f, ValueId y) {
  try {
    const std::vector<OutputType> t = infer_shapes(f.kind, f.attrs, input_views(g, f), 1);
    return t[0].dtype == g.value(y).dtype && t[0].shape == g.value(y).shape;
  } catch (const Error&) {
    return false;
  }
}

// The fused node for m, or nullopt when its inferred output type is not Y's.
std::optional<graph::Node> fused_node(graph::Graph& g, const Match& m) {
  ValueId y = m.t;  // without a QuantizeLinear, the fused node writes T itself, in float32
  graph::Node f = g.nodes[m.conv];
  f.inputs.resize(12, kNoValue);
  if (m.quant >= 0) {
    const graph::Node& q = g.nodes[static_cast<size_t>(m.quant)];
    y = q.outputs[0];
    take_quantizer(g, f, q);
  }
  f.inputs[9] = m.z.q;
  f.inputs[10] = m.z.scale;
  f.inputs[11] = m.z.zero;
  while (f.inputs.back() == kNoValue) f.inputs.pop_back();
  f.outputs = {y};
  if (m.relu >= 0) std::get<QConvAttrs>(f.attrs).activation = QActivation::kRelu;
  f.origin = joined_origin(f, g.nodes[static_cast<size_t>(m.add)]);
  if (m.relu >= 0) f.origin += " + " + origin_of(g.nodes[static_cast<size_t>(m.relu)]);
  if (!infers_as(g, f, y)) return std::nullopt;
  return f;
}

// Puts g.nodes back in topological order, taking among the ready nodes the one with the smallest
// key (ties: the lower index), so that nodes keep their places where the data allows.
void sort_nodes(graph::Graph& g, const std::vector<double>& key) {
  const size_t n = g.nodes.size();
  const std::vector<int> producer = g.producers();
  std::vector<int> waiting(n, 0);
  std::vector<std::vector<size_t>> next(n);
  for (size_t i = 0; i < n; ++i)
    for (ValueId v : g.nodes[i].inputs) {
      const int p = v == kNoValue ? -1 : producer[static_cast<size_t>(v)];
      if (p < 0) continue;
      ++waiting[i];
      next[static_cast<size_t>(p)].push_back(i);
    }
  using Item = std::pair<double, size_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> ready;
  for (size_t i = 0; i < n; ++i)
    if (waiting[i] == 0) ready.push({key[i], i});
  std::vector<graph::Node> sorted;
  sorted.reserve(n);
  while (!ready.empty()) {
    const size_t i = ready.top().second;
    ready.pop();
    sorted.push_back(std::move(g.nodes[i]));
    for (size_t k : next[i])
      if (--waiting[k] == 0) ready.push({key[k], k});
  }
  if (sorted.size() != n) throw Error("fuse-qresidual: the rewritten graph has a cycle (a bug in the pass)");
  g.nodes = std::move(sorted);
}

// After the fusions: a QConv or QMatMul whose float output is now read only by a per-tensor
// QuantizeLinear (the shortcut R of a later block, whose Add read R and now reads R's Q) takes that
// Q into its epilogue, as fuse-qdq does where the Q was the only reader from the start. Without
// this, MobileNetV2's first block of each stage writes its projection in float32 and quantizes it
// in a step of its own. Returns how many Qs moved.
int absorb_quantizers(graph::Graph& g, std::vector<char>& removed) {
  int moved = 0;
  qdq::Uses u = qdq::uses_of(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& c = g.nodes[i];
    if (removed[i] || (c.kind != OpKind::kQConv && c.kind != OpKind::kQMatMul) || c.outputs.size() != 1 ||
        has_input(c, 7) || g.value(c.outputs[0]).dtype != DataType::kFloat32)
      continue;
    int qi = -1;
    const graph::Node* q = qdq::only_reader(g, u, c.outputs[0], OpKind::kQuantizeLinear, &qi);
    if (!q || q->inputs[0] != c.outputs[0] || !qdq::per_tensor(g, *q)) continue;
    graph::Node f = c;
    if (f.inputs.size() < 9) f.inputs.resize(9, kNoValue);
    take_quantizer(g, f, *q);
    f.outputs = {q->outputs[0]};
    if (!infers_as(g, f, f.outputs[0])) continue;
    remove_node(g, static_cast<size_t>(qi), removed);
    g.nodes[i] = std::move(f);
    ++moved;
    u = qdq::uses_of(g);
  }
  return moved;
}

}  // namespace

PassResult fuse_qresidual(graph::Graph& g, const BuildOptions&) {
  std::vector<char> removed(g.nodes.size(), 0);
  std::vector<double> key(g.nodes.size());
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<double>(i);
  int fused = 0, with_relu = 0, dequantized = 0;
  qdq::Uses u = qdq::uses_of(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (removed[i]) continue;
    const std::optional<Match> m = match(g, u, i);
    if (!m) continue;
    std::optional<graph::Node> f = fused_node(g, *m);
    if (!f) continue;
    std::optional<graph::Node> dq;
    if (m->quant >= 0) {
      const graph::Node& q = g.nodes[static_cast<size_t>(m->quant)];
      dq = graph::Node{q.name + "_dq",
                       OpKind::kDequantizeLinear,
                       default_attrs(OpKind::kDequantizeLinear),
                       {q.outputs[0], f->inputs[7], f->inputs[8]},
                       {m->t},
                       origin_of(q)};
    }
    const double add_key = key[static_cast<size_t>(m->add)];
    for (int k : {m->add, m->relu, m->quant})
      if (k >= 0) remove_node(g, static_cast<size_t>(k), removed);
    g.nodes[i] = std::move(*f);
    ++fused;
    with_relu += m->relu >= 0;
    // T's remaining readers (none of the removed nodes: they were disconnected) read its DQ.
    u = qdq::uses_of(g);
    if (dq && (!u.readers[static_cast<size_t>(m->t)].empty() || g.is_graph_output(m->t))) {
      g.nodes.push_back(std::move(*dq));
      removed.push_back(0);
      key.push_back(add_key);
      ++dequantized;
      u = qdq::uses_of(g);
    }
  }
  if (fused == 0) return {};
  const int absorbed = absorb_quantizers(g, removed);
  std::vector<graph::Node> kept;
  std::vector<double> kept_key;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!removed[i]) {
      kept.push_back(std::move(g.nodes[i]));
      kept_key.push_back(key[i]);
    }
  g.nodes = std::move(kept);
  sort_nodes(g, kept_key);
  return {fused + absorbed,
          std::to_string(fused) + " residual Add(s) into kiln.QConv, " + std::to_string(with_relu) + " with Relu; " +
              std::to_string(dequantized) + " DequantizeLinear added for other readers; " + std::to_string(absorbed) +
              " QuantizeLinear into the kiln.QConv or kiln.QMatMul before it"};
}

}  // namespace kiln::passes
