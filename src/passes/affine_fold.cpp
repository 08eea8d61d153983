// Folding a per-channel affine map into a Conv, ConvTranspose, Gemm or MatMul (affine_fold.h).
#include "passes/affine_fold.h"

namespace kiln::passes {

int64_t output_channel_axis(const graph::Graph& g, const graph::Node& p) {
  if (p.outputs.size() != 1 || p.outputs[0] == graph::kNoValue) return -1;
  const graph::Value& y = g.value(p.outputs[0]);
  if (!y.shape_static()) return -1;
  const auto rank = static_cast<int64_t>(y.shape.size());
  if (p.kind == OpKind::kConv || p.kind == OpKind::kConvTranspose) return rank >= 3 ? 1 : -1;
  if (p.kind == OpKind::kGemm) return rank == 2 ? 1 : -1;
  if (p.kind == OpKind::kMatMul) {
    const graph::Value& b = g.value(p.inputs[1]);
    return b.is_constant() && b.shape.size() == 2 && rank >= 1 ? rank - 1 : -1;
  }
  return -1;
}

bool fold_affine_into(graph::Graph& g, size_t p, const std::vector<double>& scale, const std::vector<double>& shift,
                      graph::ValueId z, const graph::Node& consumer, const GraphFacts& facts, const char* suffix) {
  const graph::Node& prod = g.nodes[p];
  const int64_t axis = output_channel_axis(g, prod);
  if (axis < 0) return false;
  const graph::ValueId y = prod.outputs[0];
  if (!facts.only_read_once(g, y)) return false;
  const graph::Value& yv = g.value(y);
  const int64_t channels = yv.shape[static_cast<size_t>(axis)];
  if (!float_type(yv.dtype) || static_cast<int64_t>(scale.size()) != channels ||
      static_cast<int64_t>(shift.size()) != channels)
    return false;
  if (prod.inputs.size() < 2 || prod.inputs[1] == graph::kNoValue) return false;
  const graph::Value& wv = g.value(prod.inputs[1]);
  if (wv.dtype != yv.dtype || !wv.shape_static()) return false;
  bool has_shift = false;
  for (double s : shift) has_shift |= s != 0.0;
  // A MatMul takes a shift only as a 2-D Gemm's bias: refused before its weights are read (GPT-2's
  // 3-D MatMul + bias pairs read 600 MB as doubles for nothing).
  if (prod.kind == OpKind::kMatMul && has_shift && (yv.shape.size() != 2 || g.value(prod.inputs[0]).shape.size() != 2)) return false;
  std::vector<double> w = read_doubles(wv);
  if (w.empty() || static_cast<int64_t>(w.size()) != numel(wv.shape)) return false;
  const graph::ValueId bid = prod.inputs.size() > 2 ? prod.inputs[2] : graph::kNoValue;
  std::vector<double> b;
  std::vector<int64_t> b_shape;
  if (bid != graph::kNoValue) {
    const graph::Value& bv = g.value(bid);
    if (bv.dtype != yv.dtype || !bv.shape_static()) return false;
    b = read_doubles(bv);
    if (!bv.is_constant() || static_cast<int64_t>(b.size()) != numel(bv.shape)) return false;
    b_shape = bv.shape;
  }
  const auto ch = static_cast<size_t>(channels);

  std::vector<double> new_b;  // stays empty when the node needs no bias
  std::vector<int64_t> new_b_shape{channels};
  bool to_gemm = false;
  float gemm_beta = 1.0f;
  if (prod.kind == OpKind::kConv || prod.kind == OpKind::kConvTranspose) {
    const auto& ca = std::get<ConvAttrs>(prod.attrs);
    if (wv.shape.size() < 2 || ca.group < 1) return false;
    const auto inner = static_cast<size_t>(numel(wv.shape) / (wv.shape[0] * wv.shape[1]));
    if (prod.kind == OpKind::kConv) {
      if (wv.shape[0] != channels) return false;
      const size_t per_out = static_cast<size_t>(wv.shape[1]) * inner;
      for (size_t i = 0; i < w.size(); ++i) w[i] *= scale[i / per_out];
    } else {
      // Input channel ci belongs to group ci / (C_in / group); its j-th filter writes output
      // channel group * (C_out / group) + j.
      const int64_t c_in = wv.shape[0], out_per_group = wv.shape[1];
      if (c_in % ca.group != 0 || out_per_group * ca.group != channels) return false;
      const int64_t in_per_group = c_in / ca.group;
      for (int64_t ci = 0; ci < c_in; ++ci)
        for (int64_t j = 0; j < out_per_group; ++j) {
          const double f = scale[static_cast<size_t>((ci / in_per_group) * out_per_group + j)];
          const size_t base = static_cast<size_t>(ci * out_per_group + j) * inner;
          for (size_t k = 0; k < inner; ++k) w[base + k] *= f;
        }
    }
    if (bid != graph::kNoValue && b.size() != ch) return false;
    if (bid != graph::kNoValue || has_shift) {
      new_b.resize(ch);
      for (size_t c = 0; c < ch; ++c) new_b[c] = (b.empty() ? 0.0 : b[c]) * scale[c] + shift[c];
    }
  } else if (prod.kind == OpKind::kGemm) {
    // Y = alpha * A' B' + beta * C, Y [M, N], the channel is N.
    const auto& ga = std::get<GemmAttrs>(prod.attrs);
    if ((ga.transB != 0 && ga.transB != 1) || wv.shape.size() != 2) return false;
    const int64_t m = yv.shape[0], n = channels;
    if (ga.transB == 0) {  // B [K, N]
      if (wv.shape[1] != n) return false;
      for (size_t i = 0; i < w.size(); ++i) w[i] *= scale[i % ch];
    } else {  // B [N, K]
      if (wv.shape[0] != n) return false;
      const auto k = static_cast<size_t>(wv.shape[1]);
      for (size_t i = 0; i < w.size(); ++i) w[i] *= scale[i / k];
    }
    // C broadcasts to [M, N] (unidirectionally). Keep a per-row C as [M, N]; otherwise [N].
    int64_t cm = 1, cn = 1;
    if (bid != graph::kNoValue) {
      if (b_shape.size() > 2) return false;
      if (b_shape.size() == 2) cm = b_shape[0];
      if (!b_shape.empty()) cn = b_shape.back();
      if ((cm != 1 && cm != m) || (cn != 1 && cn != n)) return false;
    }
    if (bid != graph::kNoValue || has_shift) {
      const auto beta = static_cast<double>(ga.beta);
      new_b.resize(static_cast<size_t>(cm * n));
      for (int64_t r = 0; r < cm; ++r)
        for (int64_t c = 0; c < n; ++c) {
          const double cval = b.empty() ? 0.0 : b[static_cast<size_t>(r * cn + (cn == 1 ? 0 : c))];
          new_b[static_cast<size_t>(r * n + c)] =
              beta * cval * scale[static_cast<size_t>(c)] + shift[static_cast<size_t>(c)];
        }
      new_b_shape = cm == 1 ? std::vector<int64_t>{n} : std::vector<int64_t>{m, n};
    } else {
      gemm_beta = ga.beta;
    }
  } else {  // MatMul with a constant B [K, N]
    if (wv.shape[1] != channels) return false;
    for (size_t i = 0; i < w.size(); ++i) w[i] *= scale[i % ch];
    if (has_shift) {
      // Only Gemm has a bias, and Gemm is 2-D.
      if (yv.shape.size() != 2 || g.value(prod.inputs[0]).shape.size() != 2) return false;
      to_gemm = true;
      new_b = shift;
    }
  }

  // Rewrite. add_constant may reallocate g.values: copy what is needed first.
  const DataType t = yv.dtype;
  const std::vector<int64_t> w_shape = wv.shape;
  const std::string w_name = g.unique_name(wv.name + "_" + suffix);
  const std::string b_base = bid != graph::kNoValue ? g.value(bid).name : prod.name + ".bias";
  const std::string origin = joined_origin(prod, consumer);
  const graph::ValueId new_w = g.add_constant(w_name, t, w_shape, write_as(t, w));
  graph::ValueId new_bias = graph::kNoValue;
  if (!new_b.empty())
    new_bias = g.add_constant(g.unique_name(b_base + "_" + suffix), t, new_b_shape, write_as(t, new_b));
  graph::Node& pn = g.nodes[p];
  pn.inputs[1] = new_w;
  if (new_bias != graph::kNoValue) {
    pn.inputs.resize(3, graph::kNoValue);
    pn.inputs[2] = new_bias;
  }
  if (to_gemm) {
    pn.kind = OpKind::kGemm;
    pn.attrs = GemmAttrs{};
  } else if (pn.kind == OpKind::kGemm) {
    std::get<GemmAttrs>(pn.attrs).beta = gemm_beta;
  }
  pn.outputs[0] = z;
  pn.origin = origin;
  return true;
}

}  // namespace kiln::passes
