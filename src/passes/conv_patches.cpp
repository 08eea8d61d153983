// conv-patches: a 2-D Conv whose kernel tiles its input (kernel = stride, no padding, no dilation,
// one group: a vision transformer's patch embedding) is a matrix product of the patches:
//   X [n, C, H, W] -> Reshape [n, C, OH, kh, OW, kw] -> Transpose [n, OH, OW, C, kh, kw]
//     -> Reshape [n, OH * OW, C * kh * kw] -> MatMul(W [CO, C * kh * kw] transposed once)
//     [-> Add(B)] -> [n, OH * OW, CO]
// then, as the Conv's readers need it: read as ViT does (Reshape [n, CO, OH * OW] and
// Transpose(0, 2, 1)), the product is that value and both nodes go; read as Swin does (Transpose(0,
// 2, 3, 1)), a Reshape to [n, OH, OW, CO] replaces the Transpose; else Reshape and Transpose back to
// Y [n, CO, OH, OW]. One copy of X instead of the convolution: cuDNN's kernels for 3 input channels
// ran ViT-B/16's 16x16 patches at 2.7 TFLOP/s (86 us at batch 1 on an H200); the GEMM runs on
// tensor cores, and fuse-epilogue joins the bias.
// Guards (the Conv stays): a kernel of one pixel (1x1 Convs are GEMMs already), H or W not a
// multiple of the kernel (the Conv would drop the rest), weights or bias not constant, types other
// than float32, float16 and bfloat16, auto_pad other than NOTSET or VALID.
// Position: after the folds (the weights are final, a BatchNorm after the Conv folded into it) and
// before quantize-int8 and fuse-epilogue.
#include <cstring>
#include <set>

#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {

namespace {

using graph::ValueId;

bool all_are(const std::vector<int64_t>& v, int64_t x) {
  for (int64_t e : v)
    if (e != x) return false;
  return true;
}

struct Patches {
  int64_t n, c, h, w, co, kh, kw, oh, ow;
};

// The Conv at node i as patches, or nothing.
std::optional<Patches> patches_of(const graph::Graph& g, const graph::Node& conv) {
  if (conv.kind != OpKind::kConv || conv.inputs.size() < 2) return std::nullopt;
  const auto& a = std::get<ConvAttrs>(conv.attrs);
  const graph::Value &x = g.value(conv.inputs[0]), &w = g.value(conv.inputs[1]);
  if (x.shape.size() != 4 || w.shape.size() != 4 || !w.is_constant() || a.group != 1 ||
      (a.auto_pad != AutoPad::kNotSet && a.auto_pad != AutoPad::kValid) || !all_are(a.pads, 0) ||
      !all_are(a.dilations, 1) || w.dtype != x.dtype ||
      (x.dtype != DataType::kFloat32 && x.dtype != DataType::kFloat16 && x.dtype != DataType::kBFloat16))
    return std::nullopt;
  if (has_input(conv, 2) && !g.value(conv.inputs[2]).is_constant()) return std::nullopt;
  Patches p{x.shape[0], x.shape[1], x.shape[2], x.shape[3], w.shape[0], w.shape[2], w.shape[3], 0, 0};
  const std::vector<int64_t> kernel{p.kh, p.kw};
  if ((!a.kernel_shape.empty() && a.kernel_shape != kernel) || a.strides != kernel || p.kh * p.kw == 1 ||
      w.shape[1] != p.c || p.h % p.kh != 0 || p.w % p.kw != 0)
    return std::nullopt;
  p.oh = p.h / p.kh;
  p.ow = p.w / p.kw;
  return p;
}

}  // namespace

PassResult conv_patches(graph::Graph& g, const BuildOptions&) {
  PassResult r;
  Tally tally;
  const GraphFacts f(g);
  std::set<size_t> drop;  // the Conv's readers that the product replaces
  std::vector<graph::Node> out;
  out.reserve(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (drop.count(i)) continue;
    const std::optional<Patches> found = patches_of(g, g.nodes[i]);
    if (!found) {
      out.push_back(std::move(g.nodes[i]));
      continue;
    }
    const Patches p = *found;
    const graph::Node conv = g.nodes[i];
    const ValueId y = conv.outputs[0];
    const DataType t = g.value(y).dtype;
    const std::string base = conv.name.empty() ? g.value(y).name : conv.name;
    auto value = [&](const std::string& suffix, std::vector<int64_t> shape) {
      graph::Value v;
      v.name = g.unique_name(base + suffix);
      v.dtype = t;
      v.shape = std::move(shape);
      v.has_shape = true;
      return g.add_value(std::move(v));
    };
    auto shape_constant = [&](const std::string& suffix, const std::vector<int64_t>& s) {
      std::vector<uint8_t> bytes(s.size() * sizeof(int64_t));
      std::memcpy(bytes.data(), s.data(), bytes.size());
      return g.add_constant(g.unique_name(base + suffix), DataType::kInt64, {static_cast<int64_t>(s.size())},
                            std::move(bytes));
    };
    auto node = [&](OpKind kind, Attrs attrs, const std::string& suffix, std::vector<ValueId> in, ValueId o) {
      graph::Node n;
      n.name = base + suffix;
      n.kind = kind;
      n.attrs = std::move(attrs);
      n.inputs = std::move(in);
      n.outputs = {o};
      n.origin = origin_of(conv);
      out.push_back(std::move(n));
    };
    // How the Conv's output is read: ViT's flatten(2).transpose(1, 2), Swin's permute(0, 2, 3, 1).
    ValueId result = graph::kNoValue;  // where the [n, OH * OW, CO] product can go directly
    ValueId nhwc = graph::kNoValue;    // or [n, OH, OW, CO]
    if (const int ri = f.only_reader(g, y); ri >= 0) {
      const graph::Node& rd = g.nodes[static_cast<size_t>(ri)];
      if (rd.kind == OpKind::kReshape && rd.inputs[0] == y &&
          g.value(rd.outputs[0]).shape == std::vector<int64_t>{p.n, p.co, p.oh * p.ow}) {
        const int ti = f.only_reader(g, rd.outputs[0]);
        if (ti >= 0 && g.nodes[static_cast<size_t>(ti)].kind == OpKind::kTranspose &&
            resolved_perm(std::get<TransposeAttrs>(g.nodes[static_cast<size_t>(ti)].attrs), 3) ==
                std::vector<int64_t>{0, 2, 1}) {
          result = g.nodes[static_cast<size_t>(ti)].outputs[0];
          drop.insert(static_cast<size_t>(ri));
          drop.insert(static_cast<size_t>(ti));
        }
      } else if (rd.kind == OpKind::kTranspose &&
                 resolved_perm(std::get<TransposeAttrs>(rd.attrs), 4) == std::vector<int64_t>{0, 2, 3, 1}) {
        nhwc = rd.outputs[0];
        drop.insert(static_cast<size_t>(ri));
      }
    }
    // W [CO, C, kh, kw] as [C * kh * kw, CO].
    const graph::Value& wv = g.value(conv.inputs[1]);
    const size_t es = dtype_size(t), k = static_cast<size_t>(p.c * p.kh * p.kw), co = static_cast<size_t>(p.co);
    std::vector<uint8_t> wt(wv.data->size());
    for (size_t o = 0; o < co; ++o)
      for (size_t e = 0; e < k; ++e) std::memcpy(&wt[(e * co + o) * es], &(*wv.data)[(o * k + e) * es], es);
    const std::string w_name = g.unique_name(wv.name + "_patches");
    const ValueId w2 = g.add_constant(w_name, t, {static_cast<int64_t>(k), p.co}, std::move(wt));

    const ValueId x6 = value("_tiles", {p.n, p.c, p.oh, p.kh, p.ow, p.kw});
    node(OpKind::kReshape, ReshapeAttrs{}, "/tiles",
         {conv.inputs[0], shape_constant("_tiles_shape", g.value(x6).shape)}, x6);
    const ValueId x6t = value("_patch_order", {p.n, p.oh, p.ow, p.c, p.kh, p.kw});
    node(OpKind::kTranspose, TransposeAttrs{{0, 2, 4, 1, 3, 5}}, "/patch_order", {x6}, x6t);
    const ValueId rows = value("_patches", {p.n, p.oh * p.ow, static_cast<int64_t>(k)});
    node(OpKind::kReshape, ReshapeAttrs{}, "/patches", {x6t, shape_constant("_patches_shape", g.value(rows).shape)},
         rows);
    const bool bias = has_input(conv, 2);
    const bool direct = result != graph::kNoValue;
    const ValueId prod = direct && !bias ? result : value("_product", {p.n, p.oh * p.ow, p.co});
    node(OpKind::kMatMul, NoAttrs{}, "/product", {rows, w2}, prod);
    ValueId last = prod;
    if (bias) {
      last = direct ? result : value("_biased", {p.n, p.oh * p.ow, p.co});
      node(OpKind::kAdd, NoAttrs{}, "/bias", {prod, conv.inputs[2]}, last);
    }
    if (nhwc != graph::kNoValue) {
      node(OpKind::kReshape, ReshapeAttrs{}, "/nhwc", {last, shape_constant("_nhwc_shape", {p.n, p.oh, p.ow, p.co})},
           nhwc);
    } else if (!direct) {
      const ValueId r4 = value("_nhwc", {p.n, p.oh, p.ow, p.co});
      node(OpKind::kReshape, ReshapeAttrs{}, "/nhwc", {last, shape_constant("_nhwc_shape", g.value(r4).shape)}, r4);
      node(OpKind::kTranspose, TransposeAttrs{{0, 3, 1, 2}}, "/nchw", {r4}, y);
    }
    tally.add(direct ? "Conv (patches, as read)" : nhwc != graph::kNoValue ? "Conv (patches, NHWC)" : "Conv (patches)");
    ++r.changes;
  }
  g.nodes = std::move(out);
  r.detail = tally.str();
  return r;
}

}  // namespace kiln::passes
