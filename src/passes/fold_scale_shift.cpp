// fold-scale-shift: elementwise arithmetic with a constant that is the same along all but the
// channel axis (a per-channel vector, or a scalar) folds into the weights of a neighbouring
// Conv, ConvTranspose, Gemm, or MatMul with a constant 2-D B.
//   After the node, y = P(x) read only by the arithmetic:  y * c, c * y, y / c, y + c, c + y, y - c,
//     c - y are y * scale + shift per output channel; fold_affine_into (affine_fold.h) rewrites P's
//     weights and bias, and P writes the arithmetic's output ("conv1 + mul1").
//   Before a Conv or ConvTranspose, on its input, per input channel ("mul1 + conv1"):
//     x * c, c * x, x / c: the weights of input channel ci take the factor. Exact: padding zeros
//     scaled stay zeros.
//     x + c, c + x, x - c: the bias takes sum over the window of W * c. Only for a Conv without
//     padding (explicit pads all 0, or auto_pad VALID): with padding the border windows would
//     add c where the original adds the zero padding.
// Guards (nothing changes): the value between the two nodes read by another node or a graph output;
// non-float types or a constant of another type than the data; a non-constant operand; a constant
// that varies along another axis or would broadcast the data to a larger shape; a zero divisor, a
// non-finite constant; c / x; Add or Sub before a padded Conv or any ConvTranspose; weights or bias
// not constant. Chains (Conv -> Mul -> Add, x - mean -> / std -> Conv) fold one step at a time.
// Position: after fold-batchnorm, so that Conv -> BN -> Mul -> Add (Caffe's BatchNorm + Scale)
// folds completely (a Mul between the Conv and a BN leaves that BN in place); after fold-pad, so that
// x * s -> Pad -> Conv has become x * s -> Conv.
#include <cmath>

#include "passes/affine_fold.h"
#include "passes/pass.h"

namespace kiln::passes {

namespace {

bool is_arithmetic(OpKind k) {
  return k == OpKind::kMul || k == OpKind::kDiv || k == OpKind::kAdd || k == OpKind::kSub;
}

// The values of constant c along `axis` of a tensor of shape `shape`, one per index, when c is a
// float constant that varies along that axis only and broadcasting it does not grow `shape`.
std::vector<double> per_channel(const graph::Value& c, const std::vector<int64_t>& shape, size_t axis) {
  if (c.shape.size() > shape.size()) return {};
  const size_t offset = shape.size() - c.shape.size();
  int64_t along = 1;
  for (size_t k = 0; k < c.shape.size(); ++k) {
    const int64_t d = c.shape[k];
    if (offset + k == axis) {
      if (d != 1 && d != shape[axis]) return {};
      along = d;
    } else if (d != 1) {
      return {};
    }
  }
  // Read only now that the shape says it is one value per channel (large constants: seconds).
  const std::vector<double> v = read_doubles(c);
  if (v.empty()) return {};
  for (double x : v)
    if (!std::isfinite(x)) return {};
  std::vector<double> out(static_cast<size_t>(shape[axis]));
  for (size_t i = 0; i < out.size(); ++i) out[i] = v[along == 1 ? 0 : i];
  return out;
}

// The arithmetic node `op` as data * scale + shift, the data being input `data_slot` and the other
// input the constant whose per-channel values are `c`. False for c / x and a zero divisor.
bool as_affine(OpKind op, size_t data_slot, const std::vector<double>& c, std::vector<double>& scale,
               std::vector<double>& shift) {
  scale.assign(c.size(), 1.0);
  shift.assign(c.size(), 0.0);
  for (size_t i = 0; i < c.size(); ++i) {
    if (op == OpKind::kMul) {
      scale[i] = c[i];
    } else if (op == OpKind::kAdd) {
      shift[i] = c[i];
    } else if (op == OpKind::kSub) {
      scale[i] = data_slot == 0 ? 1.0 : -1.0;
      shift[i] = data_slot == 0 ? -c[i] : c[i];
    } else {  // Div
      if (data_slot != 0 || c[i] == 0.0) return false;
      scale[i] = 1.0 / c[i];
    }
  }
  return true;
}

// The arithmetic at node i follows a foldable producer: fold it into the producer.
bool fold_after(graph::Graph& g, size_t i, const GraphFacts& facts, std::vector<char>& removed, Tally& tally) {
  const graph::Node& op = g.nodes[i];
  if (!is_arithmetic(op.kind)) return false;
  for (size_t slot = 0; slot < 2; ++slot) {
    const graph::ValueId y = op.inputs[slot], c = op.inputs[1 - slot], z = op.outputs[0];
    const int p = facts.producer[static_cast<size_t>(y)];
    if (p < 0 || !g.value(c).is_constant()) continue;
    const int64_t axis = output_channel_axis(g, g.nodes[static_cast<size_t>(p)]);
    const graph::Value &yv = g.value(y), &zv = g.value(z);
    if (axis < 0 || zv.shape != yv.shape || zv.dtype != yv.dtype || g.value(c).dtype != yv.dtype) continue;
    std::vector<double> scale, shift;
    std::vector<double> vals = per_channel(g.value(c), yv.shape, static_cast<size_t>(axis));
    if (vals.empty() || !as_affine(op.kind, slot, vals, scale, shift)) continue;
    const std::string label =
        std::string(op_name(g.nodes[static_cast<size_t>(p)].kind)) + " + " + std::string(op_name(op.kind));
    if (!fold_affine_into(g, static_cast<size_t>(p), scale, shift, z, op, facts, "fold")) continue;
    tally.add(label);
    remove_node(g, i, removed);
    return true;
  }
  return false;
}

bool zero_pads(const ConvAttrs& a) {
  if (a.auto_pad == AutoPad::kValid) return true;
  if (a.auto_pad != AutoPad::kNotSet) return false;
  for (int64_t p : a.pads)
    if (p != 0) return false;
  return true;
}

// The Conv or ConvTranspose at node i reads the output of arithmetic with a per-input-channel
// constant: fold the arithmetic into its weights (Mul, Div) or bias (Add, Sub; Conv without pads).
bool fold_before(graph::Graph& g, size_t i, const GraphFacts& facts, std::vector<char>& removed, Tally& tally) {
  const graph::Node& conv = g.nodes[i];
  if (conv.kind != OpKind::kConv && conv.kind != OpKind::kConvTranspose) return false;
  const graph::ValueId xs = conv.inputs[0];
  const int p = facts.producer[static_cast<size_t>(xs)];
  if (p < 0 || !is_arithmetic(g.nodes[static_cast<size_t>(p)].kind) || !facts.only_read_once(g, xs)) return false;
  const graph::Node& op = g.nodes[static_cast<size_t>(p)];
  const bool additive = op.kind == OpKind::kAdd || op.kind == OpKind::kSub;
  if (additive && (conv.kind != OpKind::kConv || !zero_pads(std::get<ConvAttrs>(conv.attrs)))) return false;
  const graph::Value& xsv = g.value(xs);
  if (!xsv.shape_static() || xsv.shape.size() < 3 || !float_type(xsv.dtype)) return false;

  // Weights and bias, constants of the data's type.
  const graph::Value& wv = g.value(conv.inputs[1]);
  if (wv.dtype != xsv.dtype || !wv.shape_static() || wv.shape.size() < 2) return false;
  std::vector<double> w = read_doubles(wv);
  if (w.empty() || static_cast<int64_t>(w.size()) != numel(wv.shape)) return false;
  const graph::ValueId bid = conv.inputs.size() > 2 ? conv.inputs[2] : graph::kNoValue;
  const int64_t c_in = xsv.shape[1], m = conv.kind == OpKind::kConv ? wv.shape[0] : 0;
  std::vector<double> b;
  if (bid != graph::kNoValue) {
    b = read_doubles(g.value(bid));
    if (g.value(bid).dtype != xsv.dtype || (additive && static_cast<int64_t>(b.size()) != m)) return false;
  }

  for (size_t slot = 0; slot < 2; ++slot) {
    const graph::ValueId x = op.inputs[slot], c = op.inputs[1 - slot];
    const graph::Value& xv = g.value(x);
    if (!g.value(c).is_constant() || g.value(c).dtype != xsv.dtype || xv.shape != xsv.shape || xv.dtype != xsv.dtype)
      continue;
    std::vector<double> scale, shift;
    std::vector<double> vals = per_channel(g.value(c), xsv.shape, 1);
    if (vals.empty() || !as_affine(op.kind, slot, vals, scale, shift)) continue;
    if (additive && scale[0] != 1.0) continue;  // c - x: the weights would change sign too
    // Input channel of each weight row: Conv W [M, C/g, k...], row (m, j) reads channel
    // (m / (M/g)) * (C/g) + j; ConvTranspose W [C, M/g, k...], row (ci, j) reads channel ci.
    const int64_t rows = wv.shape[0] * wv.shape[1];
    const auto inner = static_cast<size_t>(numel(wv.shape) / rows);
    const int64_t group = std::get<ConvAttrs>(conv.attrs).group;
    if (group < 1 || (conv.kind == OpKind::kConv && (m % group != 0 || wv.shape[1] * group != c_in))) return false;
    auto channel_of = [&](int64_t row) {
      if (conv.kind == OpKind::kConvTranspose) return row / wv.shape[1];
      const int64_t mm = row / wv.shape[1], j = row % wv.shape[1];
      return (mm / (m / group)) * wv.shape[1] + j;
    };
    std::vector<double> new_b;
    if (additive) {
      new_b = b.empty() ? std::vector<double>(static_cast<size_t>(m), 0.0) : b;
      for (int64_t r = 0; r < rows; ++r)
        for (size_t k = 0; k < inner; ++k)
          new_b[static_cast<size_t>(r / wv.shape[1])] +=
              w[static_cast<size_t>(r) * inner + k] * shift[static_cast<size_t>(channel_of(r))];
    } else {
      for (int64_t r = 0; r < rows; ++r)
        for (size_t k = 0; k < inner; ++k)
          w[static_cast<size_t>(r) * inner + k] *= scale[static_cast<size_t>(channel_of(r))];
    }

    // Rewrite. add_constant may reallocate g.values: copy what is needed first.
    const DataType t = xsv.dtype;
    const std::string label = std::string(op_name(op.kind)) + " + " + std::string(op_name(conv.kind));
    const std::string origin = joined_origin(op, conv);
    const std::string b_base = bid != graph::kNoValue ? g.value(bid).name : conv.name + ".bias";
    if (additive) {
      const graph::ValueId nb = g.add_constant(g.unique_name(b_base + "_fold"), t, {m}, write_as(t, new_b));
      g.nodes[i].inputs.resize(3, graph::kNoValue);
      g.nodes[i].inputs[2] = nb;
    } else {
      const std::vector<int64_t> w_shape = wv.shape;
      const std::string w_name = g.unique_name(wv.name + "_fold");
      g.nodes[i].inputs[1] = g.add_constant(w_name, t, w_shape, write_as(t, w));
    }
    graph::Node& cn = g.nodes[i];
    cn.inputs[0] = x;
    cn.origin = origin;
    tally.add(label);
    remove_node(g, static_cast<size_t>(p), removed);
    return true;
  }
  return false;
}

}  // namespace

PassResult fold_scale_shift(graph::Graph& g, const BuildOptions&) {
  Tally tally;
  PassResult r;
  r.changes = rewrite_until_done(g, [&](graph::Graph& gr, size_t i, const GraphFacts& f, std::vector<char>& removed) {
    return fold_after(gr, i, f, removed, tally) || fold_before(gr, i, f, removed, tally);
  });
  r.detail = tally.str();
  return r;
}

}  // namespace kiln::passes
