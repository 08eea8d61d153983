// fold-pad: a constant-mode Pad of zeros on the spatial axes whose output only a Conv reads (or an
// AveragePool that counts padded elements, count_include_pad = 1) becomes part of that node's own
// pads: begin pad of spatial axis k += the Pad's begin on axis 2 + k, likewise the end. Conv pads
// with zeros and such a pool counts its pads as zeros, so the result is exact. Named "pad1 + conv1".
// Guards (the Pad stays): a mode other than constant; a pad value that is not a constant zero;
// padding of the N or C axes; negative pads (they crop); a Conv with auto_pad SAME_* (VALID means
// pads 0, which become explicit); an AveragePool with count_include_pad 0, with ceil_mode (its
// last-window rule looks at the unpadded size), or whose pads would reach the kernel's extent; any
// other consumer (MaxPool pads with -inf, not 0); the Pad's output read twice or a graph output.
// Position: after the merges and before fold-scale-shift, so that x * s -> Pad -> Conv becomes
// x * s -> Conv, whose scale fold-scale-shift then moves into the weights.
#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln {
namespace tensor_plan {
// Defined in src/core/infer/tensor/layout.cpp: Pad's pads as inference resolves them (axes input included).
void pad_plan(std::span<const int64_t> shape, std::span<const TensorView> in, std::vector<int64_t>& begin,
              std::vector<int64_t>& end);
}  // namespace tensor_plan

namespace passes {

namespace {

constexpr int64_t kMaxPad = int64_t{1} << 31;  // the largest pad shape inference accepts

// The consumer's spatial pads [b_0 .. b_{n-1}, e_0 .. e_{n-1}] with the Pad's added, or empty.
std::vector<int64_t> add_pads(AutoPad auto_pad, const std::vector<int64_t>& own, const std::vector<int64_t>& begin,
                              const std::vector<int64_t>& end) {
  const size_t n = begin.size() - 2;
  if (auto_pad != AutoPad::kNotSet && auto_pad != AutoPad::kValid) return {};
  std::vector<int64_t> pads = own;
  if (auto_pad == AutoPad::kValid || pads.empty()) pads.assign(2 * n, 0);
  if (pads.size() != 2 * n) return {};
  for (size_t k = 0; k < n; ++k) {
    pads[k] += begin[2 + k];
    pads[n + k] += end[2 + k];
    if (pads[k] > kMaxPad || pads[n + k] > kMaxPad) return {};
  }
  return pads;
}

bool fold_at(graph::Graph& g, size_t i, const GraphFacts& facts, std::vector<char>& removed, Tally& tally) {
  graph::Node& consumer = g.nodes[i];
  if (consumer.kind != OpKind::kConv && consumer.kind != OpKind::kAveragePool) return false;
  const graph::ValueId padded = consumer.inputs[0];
  const int p = facts.producer[static_cast<size_t>(padded)];
  if (p < 0) return false;
  const graph::Node& pad = g.nodes[static_cast<size_t>(p)];
  if (pad.kind != OpKind::kPad || !facts.only_read_once(g, padded)) return false;
  if (std::get<PadAttrs>(pad.attrs).mode != PadMode::kConstant) return false;
  if (pad.inputs.size() > 2 && pad.inputs[2] != graph::kNoValue) {
    const graph::Value& value = g.value(pad.inputs[2]);
    if (!value.is_constant()) return false;
    for (double v : value.view().to_double())
      if (v != 0.0) return false;
  }
  const graph::ValueId x = pad.inputs[0];
  const std::vector<int64_t>& x_shape = g.value(x).shape;
  if (!g.value(x).shape_static() || x_shape.size() < 3) return false;
  std::vector<int64_t> begin, end;
  tensor_plan::pad_plan(x_shape, input_views(g, pad), begin, end);
  if (begin[0] != 0 || begin[1] != 0 || end[0] != 0 || end[1] != 0) return false;
  for (size_t k = 0; k < begin.size(); ++k)
    if (begin[k] < 0 || end[k] < 0) return false;

  if (consumer.kind == OpKind::kConv) {
    auto& a = std::get<ConvAttrs>(consumer.attrs);
    std::vector<int64_t> pads = add_pads(a.auto_pad, a.pads, begin, end);
    if (pads.empty()) return false;
    a.auto_pad = AutoPad::kNotSet;
    a.pads = pads;
  } else {
    auto& a = std::get<PoolAttrs>(consumer.attrs);
    if (a.count_include_pad != 1 || a.ceil_mode != 0) return false;
    std::vector<int64_t> pads = add_pads(a.auto_pad, a.pads, begin, end);
    const size_t n = x_shape.size() - 2;
    if (pads.empty() || a.kernel_shape.size() != n || (!a.dilations.empty() && a.dilations.size() != n)) return false;
    for (size_t k = 0; k < n; ++k) {
      const int64_t extent = (a.kernel_shape[k] - 1) * (a.dilations.empty() ? 1 : a.dilations[k]) + 1;
      if (pads[k] >= extent || pads[n + k] >= extent) return false;  // a window of padding only
    }
    a.auto_pad = AutoPad::kNotSet;
    a.pads = pads;
  }
  tally.add("Pad + " + std::string(op_name(consumer.kind)));
  consumer.inputs[0] = x;
  consumer.origin = joined_origin(pad, consumer);
  remove_node(g, static_cast<size_t>(p), removed);
  return true;
}

}  // namespace

PassResult fold_pad(graph::Graph& g, const BuildOptions&) {
  Tally tally;
  PassResult r;
  r.changes = rewrite_until_done(g, [&](graph::Graph& gr, size_t i, const GraphFacts& f, std::vector<char>& removed) {
    return fold_at(gr, i, f, removed, tally);
  });
  r.detail = tally.str();
  return r;
}

}  // namespace passes
}  // namespace kiln
