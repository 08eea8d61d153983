// fuse-qdq: turns QuantizeLinear/DequantizeLinear (Q/DQ) pairs into INT8 kernels, so that INT8
// tensors flow from layer to layer. It serves models quantized by quantize-int8 (--int8) and models
// that arrive with Q/DQ nodes (onnxruntime's quantizer, NVIDIA ModelOpt) alike. In order:
//   1. A per-tensor Q after an op that only moves values or takes maxima (MaxPool, Reshape,
//      Flatten, Squeeze, Unsqueeze, Transpose, Identity, Concat) moves above it: rounding is
//      monotonic, so Q(P(x)) == P(Q(x)) exactly, and the op then runs on int8 data. This brings the
//      Q next to the Conv/Gemm that produced x, where step 3 fuses it.
//   2. DQ -> P -> Q around such an op with the same scale and zero point becomes P on the int8
//      values (onnxruntime writes these around MaxPool and Reshape), and Q(DQ(x)) with the same
//      parameters becomes x. These run before step 1, whose moves would hide them.
//   3. Conv / MatMul / Gemm reading DequantizeLinear'd activations and weights, with an optional
//      bias, activation (Relu, Clip, LeakyRelu) and QuantizeLinear after them, become one
//      kiln.QConv / kiln.QMatMul (fuse_qdq_compute.cpp). Without a Q after it the op outputs float.
//   4. DequantizeLinear of constants that still have readers fold into float constants
//      (infer-and-fold leaves them for this pass).
//   5. A Q after a float Conv (and activations: a stem whose Conv has no INT8 kernel), which step 1
//      moved above a strided MaxPool and step 3 could not fuse, moves back below it: quantizing
//      the pooled tensor touches a quarter of the values (ResNet-50's stem: 0.44 ms of
//      QuantizeLinear at batch 256).
// Q -> DQ pairs on paths without an INT8 kernel stay: they are the rounding the model asks for.
#include "passes/pass.h"
#include "passes/qdq_util.h"
#include "runtime/cpu/kernels.h"

namespace kiln::passes {

namespace {

using graph::ValueId;

// Ops that only move values or take their maximum (all inputs after the first are constants that
// shape the result); MaxPool without its Indices output.
bool moves_values(const graph::Node& n) {
  if (has_trait(n.kind, kReshapeLike)) return true;
  switch (n.kind) {
    case OpKind::kMaxPool: return n.outputs.size() == 1;
    case OpKind::kTranspose:
    case OpKind::kIdentity:
    case OpKind::kConcat: return true;
    default: return false;
  }
}

// The data inputs of a value-moving op: all of Concat's, the first of the others.
size_t data_inputs(const graph::Node& n) { return n.kind == OpKind::kConcat ? n.inputs.size() : 1; }

// One step-1 rewrite, if any applies; true if the graph changed.
bool hoist_one(graph::Graph& g) {
  const qdq::Uses u = qdq::uses_of(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!moves_values(g.nodes[i]) || g.nodes[i].outputs.size() != 1) continue;
    int qi = -1;
    graph::Node* q = qdq::only_reader(g, u, g.nodes[i].outputs[0], OpKind::kQuantizeLinear, &qi);
    if (!q || q->inputs[0] != g.nodes[i].outputs[0] || !qdq::per_tensor(g, *q)) continue;
    const size_t k = data_inputs(g.nodes[i]);
    bool ok = true;
    for (size_t j = 0; j < k && ok; ++j) {
      const ValueId x = g.nodes[i].inputs[j];
      ok = x != graph::kNoValue && qdq::single_use(g, u, x) && g.value(x).dtype == DataType::kFloat32;
    }
    if (!ok) continue;
    // One Q per data input, placed before the op; the op then writes the old Q's output.
    graph::Node quantize = *q;
    std::vector<graph::Node> qs;
    for (size_t j = 0; j < k; ++j) {
      const ValueId x = g.nodes[i].inputs[j];
      graph::Value xq = g.value(x);
      xq.name = g.unique_name(xq.name + "_int8");
      xq.dtype = g.value(q->outputs[0]).dtype;
      xq.data = nullptr;
      const ValueId xqv = g.add_value(std::move(xq));
      graph::Node qj = quantize;
      qj.name = k == 1 ? quantize.name : g.unique_name(quantize.name);
      qj.inputs[0] = x;
      qj.outputs = {xqv};
      qs.push_back(std::move(qj));
      g.nodes[i].inputs[j] = xqv;
    }
    g.nodes[i].outputs[0] = quantize.outputs[0];
    g.nodes.erase(g.nodes.begin() + qi);  // qi > i: Q reads the op's output
    g.nodes.insert(g.nodes.begin() + static_cast<std::ptrdiff_t>(i), qs.begin(), qs.end());
    return true;
  }
  return false;
}

// One step-2 rewrite, if any applies.
bool drop_one(graph::Graph& g) {
  const qdq::Uses u = qdq::uses_of(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    graph::Node& p = g.nodes[i];
    if (!moves_values(p) || p.outputs.size() != 1) continue;
    int qi = -1;
    const graph::Node* q = qdq::only_reader(g, u, p.outputs[0], OpKind::kQuantizeLinear, &qi);
    const std::optional<qdq::QParams> qp = q ? qdq::per_tensor(g, *q) : std::nullopt;
    if (!qp || q->inputs[0] != p.outputs[0]) continue;
    const size_t k = data_inputs(p);
    std::vector<ValueId> ints;
    for (size_t j = 0; j < k; ++j) {
      const ValueId d = p.inputs[j];
      const graph::Node* dq = qdq::produced_by(g, u, d, OpKind::kDequantizeLinear);
      if (!dq || !qdq::single_use(g, u, d) || qdq::per_tensor(g, *dq) != qp) break;
      ints.push_back(dq->inputs[0]);
    }
    if (ints.size() != k) continue;
    for (size_t j = 0; j < k; ++j) p.inputs[j] = ints[j];
    p.outputs[0] = q->outputs[0];
    g.nodes.erase(g.nodes.begin() + qi);  // the DQs are now unread: remove-dead-nodes drops them
    return true;
  }
  return false;
}

// Q(DQ(x)) with the same parameters is x: the readers of the Q's output read x instead.
bool cancel_one(graph::Graph& g) {
  const qdq::Uses u = qdq::uses_of(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& q = g.nodes[i];
    if (q.kind != OpKind::kQuantizeLinear || g.is_graph_output(q.outputs[0])) continue;
    const graph::Node* dq = qdq::produced_by(g, u, q.inputs[0], OpKind::kDequantizeLinear);
    const std::optional<qdq::QParams> qp = qdq::per_tensor(g, q);
    if (!dq || !qp || qdq::per_tensor(g, *dq) != qp) continue;
    const ValueId from = q.outputs[0], to = dq->inputs[0];
    for (int reader : u.readers[static_cast<size_t>(from)])
      for (ValueId& v : g.nodes[static_cast<size_t>(reader)].inputs)
        if (v == from) v = to;
    g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(i));
    return true;
  }
  return false;
}

// Whether v comes from a float Conv, through activations only (the stem: Conv -> Relu). Other
// producers keep their Q: fuse-qresidual, next, fuses a QConv's residual Add with the Q after it.
bool from_float_conv(const graph::Graph& g, const qdq::Uses& u, ValueId v) {
  for (;;) {
    const int p = u.producer[static_cast<size_t>(v)];
    if (p < 0) return false;
    const graph::Node& n = g.nodes[static_cast<size_t>(p)];
    switch (n.kind) {
      case OpKind::kConv: return true;
      case OpKind::kRelu:
      case OpKind::kClip:
      case OpKind::kLeakyRelu:
      case OpKind::kSigmoid:
      case OpKind::kHardSigmoid:
      case OpKind::kHardSwish: v = n.inputs[0]; break;
      default: return false;
    }
  }
}

// One step-5 rewrite, if any applies: x -> Q -> MaxPool becomes x -> MaxPool -> Q.
bool sink_one(graph::Graph& g) {
  const qdq::Uses u = qdq::uses_of(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& q = g.nodes[i];
    if (q.kind != OpKind::kQuantizeLinear) continue;
    const std::optional<qdq::QParams> qp = qdq::per_tensor(g, q);
    const ValueId x = q.inputs[0];
    if (!qp || g.value(x).dtype != DataType::kFloat32 || !from_float_conv(g, u, x)) continue;
    int pi = -1;
    graph::Node* p = qdq::only_reader(g, u, q.outputs[0], OpKind::kMaxPool, &pi);
    if (!p || p->outputs.size() != 1 || p->inputs[0] != q.outputs[0]) continue;
    const auto& strides = std::get<PoolAttrs>(p->attrs).strides;
    if (std::none_of(strides.begin(), strides.end(), [](int64_t s) { return s > 1; })) continue;
    // The pool now reads x and writes a float tensor of its output's shape, which Q quantizes.
    graph::Value pooled = g.value(p->outputs[0]);
    pooled.name = g.unique_name(g.value(x).name + "_pooled");
    pooled.dtype = DataType::kFloat32;
    pooled.data = nullptr;
    const ValueId m = g.add_value(std::move(pooled));
    graph::Node moved = g.nodes[i];
    moved.inputs[0] = m;
    moved.outputs[0] = p->outputs[0];
    p->inputs[0] = x;
    p->outputs[0] = m;
    g.nodes.insert(g.nodes.begin() + pi + 1, std::move(moved));  // pi > i: the pool reads Q's output
    g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(i));
    return true;
  }
  return false;
}

// Step 4: DequantizeLinear nodes with constant inputs and readers become constants.
int fold_constant_dq(graph::Graph& g) {
  const std::vector<int> uses = g.use_counts();
  int folded = 0;
  std::vector<graph::Node> kept;
  cpu::KernelEnv env{};
  for (graph::Node& n : g.nodes) {
    bool fold = n.kind == OpKind::kDequantizeLinear && uses[static_cast<size_t>(n.outputs[0])] > 0;
    std::vector<TensorView> ins;
    for (ValueId v : n.inputs) {
      ins.push_back(v == graph::kNoValue ? absent_tensor() : g.value(v).view());
      fold = fold && (v == graph::kNoValue || g.value(v).is_constant());
    }
    if (!fold) {
      kept.push_back(std::move(n));
      continue;
    }
    graph::Value& out = g.value(n.outputs[0]);
    auto bytes = std::make_shared<std::vector<uint8_t>>(out.view().bytes());
    TensorView ov = out.view();
    ov.data = bytes->data();
    cpu::cpu_kernel(n.kind)(n.kind, n.attrs, ins, {&ov, 1}, env);
    out.data = std::move(bytes);
    ++folded;
  }
  g.nodes = std::move(kept);
  return folded;
}

}  // namespace

PassResult fuse_qdq(graph::Graph& g, const BuildOptions&) {
  PassResult r;
  int hoisted = 0, dropped = 0;
  // Dropping first: a Q hoisted above an op that reads a DQ would hide the DQ -> op -> Q pattern.
  for (;;) {
    if (drop_one(g) || cancel_one(g))
      ++dropped;
    else if (hoist_one(g))
      ++hoisted;
    else
      break;
  }
  const qdq::ComputeFusions f = qdq::fuse_compute_ops(g);
  const int folded = fold_constant_dq(g);
  int sunk = 0;
  while (sink_one(g)) ++sunk;
  r.changes = hoisted + dropped + f.convs + f.matmuls + folded + sunk;
  if (r.changes)
    r.detail = std::to_string(f.convs) + " kiln.QConv, " + std::to_string(f.matmuls) + " kiln.QMatMul, " +
               std::to_string(hoisted) + " Q moved up, " + std::to_string(dropped) + " Q/DQ pairs removed, " +
               std::to_string(folded) + " constant DQ folded" +
               (sunk ? ", " + std::to_string(sunk) + " Q moved below a MaxPool" : "");
  return r;
}

}  // namespace kiln::passes
