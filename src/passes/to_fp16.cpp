// to-fp16 (kiln optimize --fp16): float32 tensors inside the graph become float16. Kernels load
// float16, compute and accumulate in float32 (cuDNN/cuBLASLt: float accumulation) and store
// float16, so this halves memory traffic and enables tensor cores.
//
// A node computes in float16 unless its op has the trait kKeepsFloat32 (op_kind.h): ops whose float
// inputs are not the data (quantization, losses), whose results overflow float16's range easily
// (sums of squares, products), or recurrent nets, whose error compounds over time.
// Shape-determining inputs (Resize scales, ...) keep their type. Casts are inserted where a float16
// value meets a float32 reader and vice versa, one per value; constants read in float16 are
// converted once. A reduction of a float32 tensor not yet converted (an INT8 layer's float output)
// stays float32, and its smaller result is what gets cast. QuantizeLinear reads a float16 x without
// a Cast (its kernels convert to float32 exactly). The graph's inputs and outputs keep their types:
// the user's data does not change.
//
// Float32 that the engine keeps (a reduction's result, an INT8 layer's float output) passes
// through views (Flatten, Reshape, Squeeze, Unsqueeze) as it is, and a matrix-vector product that
// reads it (a Gemm of 1 to 8 rows, B transposed, K a multiple of 8: a classifier at small batch)
// becomes a FusedGemm with float16 weights and everything else float32 (core/infer/gemm/gemm.cpp).
// The product is bound by reading its weights, which float16 halves, and no Cast runs before or
// after it: ResNet-50's GlobalAveragePool -> Cast -> Gemm -> Cast at batch 1 becomes
// GlobalAveragePool -> FusedGemm.
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "core/half.h"
#include "core/shape_infer.h"
#include "passes/pass.h"

namespace kiln::passes {

namespace {

// Reductions that stay float32 when their data arrives in float32 (reduce_in_float32).
const std::set<OpKind> kReductions = {OpKind::kReduceMean, OpKind::kReduceMax,         OpKind::kReduceMin,
                                      OpKind::kReduceSum,  OpKind::kGlobalAveragePool, OpKind::kGlobalMaxPool};

// The rows of a matrix-vector product with float16 weights: the GPU's GEMV takes up to 8
// (runtime/cuda/nn_internal.cuh, kGemvMaxM); above that the product is not bound by its weights.
constexpr int64_t kVectorRows = 8;

bool shape_input(OpKind kind, size_t slot) { return slot < 32 && (op_info(kind).const_inputs >> slot & 1u); }

// A float32 constant in float16, keeping what a float32 graph relies on: a non-zero value below
// float16's smallest subnormal (2^-24) becomes that subnormal, not 0, and a finite value beyond
// 65504 becomes +-65504, not infinity. The epsilon of F.normalize (x / max(|x|, 1e-12)) flushed to
// 0 made 0 / 0 = NaN of the zero-padded windows of Swin-V2; a -1e9 attention mask became -inf,
// and a row masked entirely then gives NaN in Softmax.
uint16_t to_half_kept(float f) {
  uint16_t h = Half::from_float(f);
  const bool negative = std::signbit(f);
  if ((h & 0x7fffu) == 0 && f != 0.0f) h = negative ? 0x8001u : 0x0001u;               // underflow: +-2^-24
  if ((h & 0x7fffu) == 0x7c00u && std::isfinite(f)) h = negative ? 0xfbffu : 0x7bffu;  // overflow: +-65504
  return h;
}

std::vector<uint8_t> to_half(const std::vector<uint8_t>& f32) {
  std::vector<uint8_t> out(f32.size() / 2);
  for (size_t i = 0; i < f32.size() / 4; ++i) {
    float f;
    std::memcpy(&f, f32.data() + 4 * i, 4);
    const uint16_t h = to_half_kept(f);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

}  // namespace

PassResult to_fp16(graph::Graph& g, const BuildOptions& options) {
  PassResult r;
  if (!options.fp16) return r;
  using graph::ValueId;
  std::vector<graph::Node> out;
  std::map<ValueId, ValueId> half_of, float_of;    // cached conversions of a value
  std::vector<char> now_half(g.values.size(), 0);  // values whose dtype this pass changed to float16
  int casts = 0, converted = 0, constants = 0;

  // A Cast node from `from` to the new value `to` (of type to_type).
  auto emit_cast = [&](ValueId from, ValueId to, DataType to_type, const std::string& why) {
    graph::Node c;
    c.name = g.unique_name("cast_" + why);
    c.kind = OpKind::kCast;
    CastAttrs a;
    a.to = to_type;
    c.attrs = a;
    c.inputs = {from};
    c.outputs = {to};
    c.origin = "fp16 cast";
    out.push_back(std::move(c));
    ++casts;
  };
  // `why` by value: callers pass a value's name, which add_value below may move.
  auto cast = [&](ValueId v, DataType to, std::string why) {
    graph::Value nv = g.value(v);
    nv.name = g.unique_name(g.value(v).name + (to == DataType::kFloat16 ? "_fp16" : "_fp32"));
    nv.dtype = to;
    nv.data = nullptr;
    const ValueId id = g.add_value(std::move(nv));
    now_half.resize(g.values.size(), 0);
    emit_cast(v, id, to, why);
    return id;
  };
  auto as_half = [&](ValueId v) {
    if (now_half[static_cast<size_t>(v)]) return v;
    if (auto it = half_of.find(v); it != half_of.end()) return it->second;
    ValueId h;
    if (g.value(v).is_constant()) {
      const graph::Value& c = g.value(v);
      h = g.add_constant(g.unique_name(c.name + "_fp16"), DataType::kFloat16, c.shape, to_half(*c.data));
      now_half.resize(g.values.size(), 0);
      ++constants;
    } else {
      h = cast(v, DataType::kFloat16, g.value(v).name);
    }
    now_half[static_cast<size_t>(h)] = 1;
    return half_of[v] = h;
  };
  auto as_float = [&](ValueId v) {
    if (!now_half[static_cast<size_t>(v)]) return v;
    if (auto it = float_of.find(v); it != float_of.end()) return it->second;
    return float_of[v] = cast(v, DataType::kFloat32, g.value(v).name);
  };

  // A reduction whose input is a float32 tensor not yet converted (an INT8 convolution's float
  // output before a global pooling, a graph input) reads it as it is: casting the reduced result
  // costs a pass over far fewer values than casting the input would.
  auto reduce_in_float32 = [&](const graph::Node& n) {
    if (!kReductions.count(n.kind) || n.inputs.empty() || n.outputs.size() != 1) return false;
    const ValueId x = n.inputs[0];
    if (x == graph::kNoValue) return false;
    const graph::Value& xv = g.value(x);
    const int64_t out = g.value(n.outputs[0]).view().numel();
    return xv.dtype == DataType::kFloat32 && !now_half[static_cast<size_t>(x)] && !half_of.count(x) &&
           !xv.is_constant() && out >= 0 && out < xv.view().numel();
  };

  // Values the engine keeps in float32 (reduce_in_float32's results, float outputs of the ops in
  // kKeepsFloat32) and views of them. Graph outputs are left out: a caller may bind them to memory of
  // any alignment, which the GEMV cannot read (it would refuse to run).
  std::set<ValueId> kept_float;
  const std::set<ValueId> graph_outputs(g.outputs.begin(), g.outputs.end());
  auto keep_float = [&](ValueId v) {
    if (v != graph::kNoValue && g.value(v).dtype == DataType::kFloat32 && !graph_outputs.count(v)) kept_float.insert(v);
  };
  auto keeps_float = [&](ValueId v) { return kept_float.count(v) > 0; };
  // A view of kept float32: stays float32.
  auto view_of_kept = [&](const graph::Node& n) {
    return has_trait(n.kind, kReshapeLike) && !n.inputs.empty() && keeps_float(n.inputs[0]) && n.outputs.size() == 1;
  };
  // A Gemm or FusedGemm of 1 to kVectorRows rows reading kept float32 with constant float32 weights
  // (B transposed, K a multiple of 8) and no residual: float16 weights, float32 everything else.
  auto vector_product = [&](const graph::Node& n) {
    if ((n.kind != OpKind::kGemm && n.kind != OpKind::kFusedGemm) || n.inputs.size() < 2 || n.inputs.size() > 3 ||
        !keeps_float(n.inputs[0]))
      return false;
    const GemmAttrs& a = n.kind == OpKind::kGemm ? std::get<GemmAttrs>(n.attrs) : std::get<FusedGemmAttrs>(n.attrs);
    const graph::Value &x = g.value(n.inputs[0]), &w = g.value(n.inputs[1]);
    if (a.transA != 0 || a.transB != 1 || x.shape.size() != 2 || !w.is_constant() || w.dtype != DataType::kFloat32 ||
        w.shape.size() != 2 || x.shape[0] < 1 || x.shape[0] > kVectorRows || x.shape[1] % 8 != 0)
      return false;
    if (n.inputs.size() == 3 && n.inputs[2] != graph::kNoValue) {
      const graph::Value& c = g.value(n.inputs[2]);
      if (c.dtype != DataType::kFloat32) return false;
    }
    return true;
  };
  int products = 0;
  // Nodes that read or write values of data-dependent shape keep float32 (decision 56): their
  // shapes were inferred at the bound, with values this pass cannot infer again, and the ones that
  // compute shapes or boxes must keep float32's values.
  const std::vector<bool> dd = g.data_dependent();
  auto touches_dd = [&](const graph::Node& n) {
    for (const std::vector<ValueId>* vs : {&n.inputs, &n.outputs})
      for (ValueId v : *vs)
        if (v != graph::kNoValue && static_cast<size_t>(v) < dd.size() && dd[static_cast<size_t>(v)]) return true;
    return false;
  };

  for (graph::Node& n : g.nodes) {
    if (vector_product(n)) {
      n.inputs[1] = as_half(n.inputs[1]);
      if (n.kind == OpKind::kGemm) {
        FusedGemmAttrs f;
        static_cast<GemmAttrs&>(f) = std::get<GemmAttrs>(n.attrs);
        n.kind = OpKind::kFusedGemm;
        n.attrs = f;
      }
      ++products;
      keep_float(n.outputs[0]);  // the next small product of a classifier's head reads it as it is
      out.push_back(std::move(n));
      continue;
    }
    const bool float_view = view_of_kept(n) || touches_dd(n);
    const bool float_reduction = reduce_in_float32(n);
    bool half = !has_trait(n.kind, kKeepsFloat32) && !float_reduction && !float_view;
    if (half) {
      bool any_float = false;
      for (size_t i = 0; i < n.inputs.size(); ++i)
        if (n.inputs[i] != graph::kNoValue && !shape_input(n.kind, i))
          any_float |= g.value(n.inputs[i]).dtype == DataType::kFloat32 || now_half[static_cast<size_t>(n.inputs[i])];
      half = any_float;
    }
    if (!half) {
      // QuantizeLinear reads a float16 x as it is: its kernels convert x to float32 first (exact), so
      // a Cast before it would only cost a pass over the tensor.
      for (size_t i = 0; i < n.inputs.size(); ++i)
        if (n.inputs[i] != graph::kNoValue && !(n.kind == OpKind::kQuantizeLinear && i == 0))
          n.inputs[i] = as_float(n.inputs[i]);
      if (float_view || float_reduction || has_trait(n.kind, kKeepsFloat32))
        for (ValueId o : n.outputs) keep_float(o);
      out.push_back(std::move(n));
      continue;
    }
    std::vector<TensorView> views;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      ValueId& v = n.inputs[i];
      if (v == graph::kNoValue) {
        views.push_back(absent_tensor());
        continue;
      }
      if (!shape_input(n.kind, i) && g.value(v).dtype == DataType::kFloat32) v = as_half(v);
      views.push_back(g.value(v).view());
    }
    // The outputs' types follow from the new input types.
    std::vector<OutputType> types;
    try {
      types = infer_shapes(n.kind, n.attrs, views, n.outputs.size());
    } catch (const Error& e) {
      throw Error("to-fp16: node '" + n.name + "' (" + std::string(op_name(n.kind)) + "): " + e.what());
    }
    for (size_t j = 0; j < n.outputs.size(); ++j) {
      const ValueId o = n.outputs[j];
      if (o == graph::kNoValue) continue;
      graph::Value& ov = g.value(o);
      if (ov.dtype == DataType::kFloat32 && types[j].dtype == DataType::kFloat16) {
        ov.dtype = DataType::kFloat16;
        now_half[static_cast<size_t>(o)] = 1;
      }
    }
    ++converted;
    out.push_back(std::move(n));
  }
  // Graph outputs keep their float32 type and their names: the float16 value is renamed and a
  // Cast writes the output.
  for (ValueId& o : g.outputs) {
    if (!now_half[static_cast<size_t>(o)]) continue;
    const std::string name = g.value(o).name;
    g.rename(o, g.unique_name(name + "_fp16"));
    graph::Value fv = g.value(o);
    fv.name = name;
    fv.dtype = DataType::kFloat32;
    const ValueId f = g.add_value(std::move(fv));
    emit_cast(o, f, DataType::kFloat32, name);
    o = f;
  }
  g.nodes = std::move(out);
  r.changes = converted + products;
  r.detail = std::to_string(converted) + " nodes in float16, " + std::to_string(casts) + " casts, " +
             std::to_string(constants) + " constants converted";
  if (products > 0)
    r.detail += ", " + std::to_string(products) + " matrix-vector product" + (products == 1 ? "" : "s") +
                " with float16 weights";
  return r;
}

}  // namespace kiln::passes
