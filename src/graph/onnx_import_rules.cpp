// Opset-specific import rules: each rewrites an older form of an op into the form of opset 21
// (attributes that became inputs turn into constant inputs), or resolves a default that depends on
// the opset. One table, keyed by ONNX op type.
#include <set>

#include "graph/onnx_import_internal.h"

namespace kiln::graph::detail {

namespace {

std::vector<int64_t> ints_attr(const onnx::AttributeProto& a) { return {a.ints().begin(), a.ints().end()}; }

// Moves attribute `name` (a list of ints) into input slot `slot` as an int64 constant.
void attr_to_input(Importer& im, ImportNode& n, const std::string& name, size_t slot) {
  const onnx::AttributeProto* a = im.attr(n.proto, name);
  if (!a) return;
  n.consumed.push_back(name);
  if (n.inputs.size() <= slot) n.inputs.resize(slot + 1, kNoValue);
  n.inputs[slot] = im.const_i64(n.proto.name() + "_" + name, ints_attr(*a));
}

void softmax_rule(Importer& im, ImportNode& n) {
  if (n.opset >= 13) return;
  auto& a = std::get<SoftmaxAttrs>(n.attrs);
  if (!im.attr(n.proto, "axis")) a.axis = 1;
  a.coerce_2d = 1;
}

// ReduceSum took axes as an input from opset 13, the other reductions from 18.
LegacyFn reduce_rule(int64_t input_since) {
  return [input_since](Importer& im, ImportNode& n) {
    if (n.opset < input_since) attr_to_input(im, n, "axes", 1);
  };
}

void squeeze_rule(Importer& im, ImportNode& n) {
  if (n.opset < 13) attr_to_input(im, n, "axes", 1);
}

void split_rule(Importer& im, ImportNode& n) {
  if (n.opset < 13) attr_to_input(im, n, "split", 1);
  auto& a = std::get<SplitAttrs>(n.attrs);
  // Before opset 18 (and whenever num_outputs is absent) an unsized split divides equally among
  // the node's outputs.
  if (a.num_outputs == 0 && (n.inputs.size() < 2 || n.inputs[1] == kNoValue)) a.num_outputs = n.proto.output_size();
}

void pad_rule(Importer& im, ImportNode& n) {
  if (n.opset >= 11) return;
  const char* pads_name = im.attr(n.proto, "pads") ? "pads" : "paddings";
  attr_to_input(im, n, pads_name, 1);
  if (const onnx::AttributeProto* v = im.attr(n.proto, "value")) {
    n.consumed.push_back("value");
    if (v->f() != 0.0f) {
      n.inputs.resize(3, kNoValue);
      n.inputs[2] = im.const_f32(n.proto.name() + "_value", {v->f()}, true);
    }
  }
}

void clip_rule(Importer& im, ImportNode& n) {
  if (n.opset >= 11) return;
  for (auto [name, slot] : {std::pair{"min", size_t{1}}, std::pair{"max", size_t{2}}}) {
    const onnx::AttributeProto* a = im.attr(n.proto, name);
    if (!a) continue;
    n.consumed.push_back(name);
    if (n.inputs.size() <= slot) n.inputs.resize(slot + 1, kNoValue);
    n.inputs[slot] = im.const_f32(n.proto.name() + "_" + name, {a->f()}, true);
  }
}

void slice_rule(Importer& im, ImportNode& n) {
  if (n.opset >= 10) return;
  attr_to_input(im, n, "starts", 1);
  attr_to_input(im, n, "ends", 2);
  attr_to_input(im, n, "axes", 3);
}

void topk_rule(Importer& im, ImportNode& n) {
  if (n.opset >= 10) return;
  if (const onnx::AttributeProto* k = im.attr(n.proto, "k")) {
    n.consumed.push_back("k");
    n.inputs.resize(2, kNoValue);
    n.inputs[1] = im.const_i64(n.proto.name() + "_k", {k->i()});
  }
}

// Upsample (opsets 7-9) and Resize-10 scale by `scales` with asymmetric coordinates and floor
// rounding for nearest: they become Resize(X, roi = none, scales).
void upsample_rule(Importer& im, ImportNode& n) {
  auto& a = std::get<ResizeAttrs>(n.attrs);
  a.coordinate_transformation_mode = CoordinateTransform::kAsymmetric;
  a.nearest_mode = NearestMode::kFloor;
  ValueId scales = n.inputs.size() > 1 ? n.inputs[1] : kNoValue;
  if (const onnx::AttributeProto* s = im.attr(n.proto, "scales")) {  // Upsample-7
    n.consumed.push_back("scales");
    scales = im.const_f32(n.proto.name() + "_scales", {s->floats().begin(), s->floats().end()});
  }
  n.inputs = {n.inputs.at(0), kNoValue, scales};
}

void resize_rule(Importer& im, ImportNode& n) {
  if (n.opset < 11) {
    upsample_rule(im, n);
    return;
  }
  // Exporters write empty tensors for "not given" roi/scales; treat them as omitted.
  for (size_t i = 1; i < n.inputs.size(); ++i) {
    ValueId v = n.inputs[i];
    if (v != kNoValue && im.g.value(v).is_constant() && im.g.value(v).view().numel() == 0) n.inputs[i] = kNoValue;
  }
  while (!n.inputs.empty() && n.inputs.back() == kNoValue) n.inputs.pop_back();
}

// Appends `trailing` size-1 dimensions to value v with an Unsqueeze node (or in place, for a
// constant), so that numpy-style broadcasting aligns it where a legacy `axis` said.
ValueId append_unit_dims(Importer& im, ImportNode& n, ValueId v, int64_t trailing) {
  Value& b = im.g.value(v);
  if (trailing == 0) return v;
  auto rank = static_cast<int64_t>(b.shape.size());
  if (b.is_constant()) {
    ValueId c = im.g.add_constant(im.g.unique_name(b.name), b.dtype, b.shape, *b.data);
    for (int64_t i = 0; i < trailing; ++i) im.g.value(c).shape.push_back(1);
    return c;
  }
  std::vector<int64_t> axes;
  for (int64_t i = 0; i < trailing; ++i) axes.push_back(rank + i);
  const std::string name = b.name;  // adding values below moves the graph's values, b with them
  ValueId ax = im.const_i64(n.proto.name() + "_axes", axes);
  Value out;
  out.name = im.g.unique_name(name + "_aligned");
  ValueId id = im.g.add_value(std::move(out));
  im.g.nodes.push_back(Node{n.proto.name() + "_align", OpKind::kUnsqueeze, NoAttrs{}, {v, ax}, {id}, n.proto.name()});
  return id;
}

// Before opset 7, binary ops broadcast only with broadcast=1, aligning B at `axis` of A.
void legacy_broadcast_rule(Importer& im, ImportNode& n) {
  if (n.opset >= 7) return;
  n.consumed.push_back("broadcast");
  const onnx::AttributeProto* axis = im.attr(n.proto, "axis");
  if (!axis) return;  // numpy-style suffix alignment, as today
  n.consumed.push_back("axis");
  if (n.inputs.size() < 2) return;
  const Value& a = im.g.value(n.inputs[0]);
  const Value& b = im.g.value(n.inputs[1]);
  if (!a.has_shape || !b.has_shape)
    throw Error("legacy broadcast with axis needs the ranks of both inputs; re-export at opset 7 or newer");
  int64_t axis_v = axis->i() < 0 ? axis->i() + static_cast<int64_t>(a.shape.size()) : axis->i();
  int64_t trailing = static_cast<int64_t>(a.shape.size()) - axis_v - static_cast<int64_t>(b.shape.size());
  if (trailing < 0) throw Error("legacy broadcast axis is out of range");
  n.inputs[1] = append_unit_dims(im, n, n.inputs[1], trailing);
}

// PRelu before opset 7 applied a 1-D slope of size C along the channel axis (1).
void prelu_rule(Importer& im, ImportNode& n) {
  if (n.opset >= 7) return;
  const Value& x = im.g.value(n.inputs.at(0));
  const Value& slope = im.g.value(n.inputs.at(1));
  if (!x.has_shape || !slope.has_shape || slope.shape.size() != 1 || x.shape.size() < 3) return;
  if (slope.shape[0] == 1 || x.shape[1] != slope.shape[0]) return;
  n.inputs[1] = append_unit_dims(im, n, n.inputs[1], static_cast<int64_t>(x.shape.size()) - 2);
}

void gemm_rule(Importer&, ImportNode& n) {
  if (n.opset < 7) n.consumed.push_back("broadcast");
}

void castlike_rule(Importer& im, ImportNode& n) {
  // The target type is input 1's; known here for inputs and constants, and resolved again once
  // types are inferred (passes/infer_shapes).
  std::get<CastAttrs>(n.attrs).to = im.g.value(n.inputs.at(1)).dtype;
}

void eyelike_rule(Importer& im, ImportNode& n) {
  if (!im.attr(n.proto, "dtype")) std::get<EyeLikeAttrs>(n.attrs).dtype = im.g.value(n.inputs.at(0)).dtype;
}

void batchnorm_rule(Importer& im, ImportNode& n) {
  if (const onnx::AttributeProto* s = im.attr(n.proto, "spatial"); s && s->i() == 0)
    throw Error("BatchNormalization with spatial = 0 is not supported; re-export at opset 9 or newer");
}

// Attention (opset 23): the key/value cache inputs and the outputs beside Y are not supported;
// packed_qkv and mask_period are Kiln's own attributes (fuse-attention's), not a model's.
void attention_rule(Importer& im, ImportNode& n) {
  for (const char* own : {"packed_qkv", "mask_period"})
    if (im.attr(n.proto, own))
      throw Error(std::string("Attention's attribute ") + own + " is Kiln's own, not ONNX's; remove it from the model");
  if (n.inputs.size() > 4 && std::any_of(n.inputs.begin() + 4, n.inputs.end(), [](ValueId v) { return v != kNoValue; }))
    throw Error(
        "Attention with past_key / past_value (a key-value cache) is not supported; export the model "
        "without the cache (the whole sequence at once)");
  n.inputs.resize(std::min<size_t>(n.inputs.size(), 4));
  for (int i = 1; i < n.proto.output_size(); ++i)
    if (!n.proto.output(i).empty())
      throw Error(
          "Attention's outputs present_key, present_value and qk_matmul_output are not supported; "
          "use only its first output");
}

}  // namespace

const std::map<std::string, LegacyFn>& import_rules() {
  static const std::map<std::string, LegacyFn> rules = [] {
    std::map<std::string, LegacyFn> r = {
        {"Softmax", softmax_rule},   {"LogSoftmax", softmax_rule},
        {"Hardmax", softmax_rule},   {"ReduceSum", reduce_rule(13)},
        {"Squeeze", squeeze_rule},   {"Unsqueeze", squeeze_rule},
        {"Split", split_rule},       {"Pad", pad_rule},
        {"Clip", clip_rule},         {"Slice", slice_rule},
        {"TopK", topk_rule},         {"Upsample", upsample_rule},
        {"Resize", resize_rule},     {"Gemm", gemm_rule},
        {"CastLike", castlike_rule}, {"EyeLike", eyelike_rule},
        {"PRelu", prelu_rule},       {"BatchNormalization", batchnorm_rule},
    };
    r["Attention"] = attention_rule;
    for (const char* op : {"ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
                           "ReduceMin", "ReduceProd", "ReduceSumSquare"})
      r[op] = reduce_rule(18);
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater", "Less"})
      r[op] = legacy_broadcast_rule;
    return r;
  }();
  return rules;
}

std::optional<OpKind> renamed_op(const std::string& op_type) {
  if (op_type == "Upsample") return OpKind::kResize;
  if (op_type == "Scatter") return OpKind::kScatterElements;  // Scatter (opsets 9-10) was renamed
  return std::nullopt;
}

}  // namespace kiln::graph::detail
