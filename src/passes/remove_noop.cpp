// remove-noop: nodes that, with the static shapes inference has given every value, hand their input
// on unchanged:
//   Reshape, Flatten, Squeeze, Unsqueeze, Expand, Tile  whose output shape is the input's;
//   Transpose        that keeps the order of the axes longer than 1, and the shape (identity perm);
//   Cast, CastLike   to the input's own type;
//   Slice            that takes every element in order (each axis: start 0 and step 1, or length <= 1);
//   Pad              whose pads are all zero (any mode);
//   Concat of one input, Split into one output;
//   Add / Sub of a constant 0, Mul / Div by a constant 1 (for Sub and Div the constant must be the
//                    second operand) that does not broadcast the other operand to a larger shape.
//                    x + 0 turns -0 into +0, equal as numbers; onnxruntime's noop elimination does
//                    the same.
// Nodes that read or write values of data-dependent shape stay (decision 56): their shapes are
// bounds, equal where a run's need not be.
// Every removal requires the output's dtype and shape to equal the input's. Readers of the output
// read the input instead; a graph output keeps its name through bypass (rewrite_util.h): the input's
// producer writes it, and when the input is a graph input or a constant the node stays (an engine
// output must be written by a step).
// Position: right after infer-and-fold, which gives the static shapes and constant operands this
// needs, and before the passes that match producer -> consumer pairs (merges, folds), which then
// see Conv -> BN through a removed Reshape.
#include <algorithm>

#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln {
namespace tensor_plan {
// Defined in src/core/infer/tensor/layout.cpp: the parameters of Slice and Pad as inference resolves them.
void slice_plan(std::span<const int64_t> shape, std::span<const TensorView> in, std::vector<int64_t>& start,
                std::vector<int64_t>& step, std::vector<int64_t>& count);
void pad_plan(std::span<const int64_t> shape, std::span<const TensorView> in, std::vector<int64_t>& begin,
              std::vector<int64_t>& end);
}  // namespace tensor_plan

namespace passes {

namespace {

bool all_equal_to(const graph::Value& c, double x) {
  if (!c.is_constant() || c.dtype == DataType::kBool) return false;
  for (double v : c.view().to_double())
    if (v != x) return false;
  return true;
}

// The operand of an arithmetic node that passes through unchanged, or kNoValue.
graph::ValueId arithmetic_passthrough(const graph::Graph& g, const graph::Node& n) {
  const bool add_like = n.kind == OpKind::kAdd || n.kind == OpKind::kSub;
  const double neutral = add_like ? 0.0 : 1.0;
  const bool commutes = n.kind == OpKind::kAdd || n.kind == OpKind::kMul;
  if (all_equal_to(g.value(n.inputs[1]), neutral)) return n.inputs[0];
  if (commutes && all_equal_to(g.value(n.inputs[0]), neutral)) return n.inputs[1];
  return graph::kNoValue;
}

bool slice_takes_all(const graph::Graph& g, const graph::Node& n, const std::vector<int64_t>& shape) {
  std::vector<int64_t> start, step, count;
  tensor_plan::slice_plan(shape, input_views(g, n), start, step, count);
  for (size_t i = 0; i < shape.size(); ++i)
    if (count[i] != shape[i] || (shape[i] > 1 && (start[i] != 0 || step[i] != 1))) return false;
  return true;
}

bool pads_all_zero(const graph::Graph& g, const graph::Node& n, const std::vector<int64_t>& shape) {
  std::vector<int64_t> begin, end;
  tensor_plan::pad_plan(shape, input_views(g, n), begin, end);
  for (size_t i = 0; i < shape.size(); ++i)
    if (begin[i] != 0 || end[i] != 0) return false;
  return true;
}

// Ops that hand on their first input when the checks in passthrough_input hold (and the
// reshape-like ops of the op table).
constexpr OpKind kLayoutOps[] = {OpKind::kExpand,   OpKind::kTile,      OpKind::kSplit, OpKind::kConcat, OpKind::kCast,
                                 OpKind::kCastLike, OpKind::kTranspose, OpKind::kSlice, OpKind::kPad};

// The input that node n hands on unchanged, or kNoValue when n does some work.
graph::ValueId passthrough_input(const graph::Graph& g, const graph::Node& n) {
  if (n.outputs.size() != 1 || n.outputs[0] == graph::kNoValue || n.inputs.empty()) return graph::kNoValue;
  graph::ValueId in = graph::kNoValue;
  if (n.kind == OpKind::kAdd || n.kind == OpKind::kSub || n.kind == OpKind::kMul || n.kind == OpKind::kDiv) {
    in = arithmetic_passthrough(g, n);
  } else if (has_trait(n.kind, kReshapeLike) ||
             std::find(std::begin(kLayoutOps), std::end(kLayoutOps), n.kind) != std::end(kLayoutOps)) {
    if (n.kind == OpKind::kConcat && n.inputs.size() != 1) return graph::kNoValue;
    in = n.inputs[0];
  }
  if (in == graph::kNoValue) return in;
  const graph::Value &iv = g.value(in), &ov = g.value(n.outputs[0]);
  if (!iv.shape_static() || !ov.shape_static() || iv.dtype != ov.dtype || iv.shape != ov.shape) return graph::kNoValue;
  if (n.kind == OpKind::kTranspose &&
      !perm_keeps_order(resolved_perm(std::get<TransposeAttrs>(n.attrs), iv.shape.size()), iv.shape))
    return graph::kNoValue;
  if (n.kind == OpKind::kSlice && !slice_takes_all(g, n, iv.shape)) return graph::kNoValue;
  if (n.kind == OpKind::kPad && !pads_all_zero(g, n, iv.shape)) return graph::kNoValue;
  return in;
}

}  // namespace

PassResult remove_noop(graph::Graph& g, const BuildOptions&) {
  Tally tally;
  PassResult r;
  const std::vector<bool> dd = g.data_dependent();  // the pass adds no values
  auto touches_dd = [&](const graph::Node& n) {
    for (const std::vector<graph::ValueId>* vs : {&n.inputs, &n.outputs})
      for (graph::ValueId v : *vs)
        if (v != graph::kNoValue && dd[static_cast<size_t>(v)]) return true;
    return false;
  };
  r.changes = rewrite_until_done(g, [&](graph::Graph& gr, size_t i, const GraphFacts& f, std::vector<char>& removed) {
    if (touches_dd(gr.nodes[i])) return false;
    const graph::ValueId in = passthrough_input(gr, gr.nodes[i]);
    const OpKind kind = gr.nodes[i].kind;
    if (in == graph::kNoValue || !bypass(gr, i, in, gr.nodes[i].outputs[0], f, removed)) return false;
    tally.add(std::string(op_name(kind)));
    return true;
  });
  r.detail = tally.str();
  return r;
}

}  // namespace passes
}  // namespace kiln
