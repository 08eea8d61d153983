#include "graph/onnx_export.h"

#include <onnx/onnx_pb.h>

#include <cstring>
#include <fstream>
#include <set>
#include <tuple>

#include "graph/tensor_file.h"

namespace kiln::graph {

namespace {

std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

// ---- attributes: one write routine per field type, chosen by overload --------------------------

void write_attr(onnx::AttributeProto* a, int64_t v) {
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
void write_attr(onnx::AttributeProto* a, float v) {
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
void write_attr(onnx::AttributeProto* a, const std::vector<int64_t>& v) {
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
void write_attr(onnx::AttributeProto* a, const std::string& v) {
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}
void write_attr(onnx::AttributeProto* a, DataType v) {  // DataType codes are ONNX's
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(static_cast<int64_t>(v));
}
void write_attr(onnx::AttributeProto* a, const Scalar& v) {
  // ONNX wants a one-element tensor (ConstantOfShape: "One-element tensor").
  HostTensor t;
  t.dtype = v.dtype;
  t.shape = {1};
  size_t n = dtype_size(v.dtype);
  if (n == 0 || n > v.bytes.size()) throw Error("scalar attribute has an invalid element type");
  t.data.assign(v.bytes.begin(), v.bytes.begin() + static_cast<std::ptrdiff_t>(n));
  a->set_type(onnx::AttributeProto::TENSOR);
  tensor_to_proto(t, a->mutable_t());
}
template <AttrEnum E>
void write_attr(onnx::AttributeProto* a, E v) {
  auto i = static_cast<size_t>(v);
  if (i >= kEnumNames<E>.size()) throw Error("attribute '" + a->name() + "' holds an invalid enumerator");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(std::string(kEnumNames<E>[i]));
}
void write_attr(onnx::AttributeProto* a, const std::vector<float>& v) {
  a->set_type(onnx::AttributeProto::FLOATS);
  for (float x : v) a->add_floats(x);
}
template <AttrEnum E>
void write_attr(onnx::AttributeProto* a, const std::vector<E>& v) {
  a->set_type(onnx::AttributeProto::STRINGS);
  for (E e : v) {
    auto i = static_cast<size_t>(e);
    if (i >= kEnumNames<E>.size()) throw Error("attribute '" + a->name() + "' holds an invalid enumerator");
    a->add_strings(std::string(kEnumNames<E>[i]));
  }
}

// The op's ONNX defaults. Structs shared by several ops hold one default; where an op's ONNX default
// differs (the importer sets these too), the comparison must use the op's.
Attrs onnx_defaults(OpKind kind) {
  Attrs a = default_attrs(kind);
  switch (kind) {
    case OpKind::kLeakyRelu: std::get<AlphaAttrs>(a).alpha = 0.01f; break;
    case OpKind::kFlatten: std::get<AxisAttrs>(a).axis = 1; break;
    default: break;
  }
  return a;
}

// Attributes written even at their default: required by ONNX, or (data types) where the struct's
// default does not mean what an absent ONNX attribute means (EyeLike's dtype defaults to the
// input's type in ONNX). Writing an attribute the op defines is always valid.
bool always_written(OpKind kind, std::string_view field) {
  switch (kind) {
    case OpKind::kCast: return field == "to";
    case OpKind::kConcat: return field == "axis";
    case OpKind::kConstantOfShape: return field == "value";
    case OpKind::kDepthToSpace:
    case OpKind::kSpaceToDepth: return field == "blocksize";
    case OpKind::kBitShift: return field == "direction";
    case OpKind::kEinsum: return field == "equation";
    case OpKind::kLRN: return field == "size";
    case OpKind::kEyeLike: return field == "dtype";
    // Shared structs whose default is the op's only by the importer's per-op override: written
    // always, so that no reader depends on which default the struct held.
    case OpKind::kFlatten:
    case OpKind::kGather:
    case OpKind::kGatherElements: return field == "axis";
    case OpKind::kCelu:
    case OpKind::kElu:
    case OpKind::kLeakyRelu:
    case OpKind::kThresholdedRelu: return field == "alpha";
    default: return false;
  }
}

// Fields of a shared struct that the op does not define in ONNX, or that are Kiln-internal; they
// are never written (ONNX rejects attributes an op does not define).
bool never_written(const Node& n, std::string_view field) {
  if (field == "coerce_2d") return true;  // handled by export_legacy_softmax
  switch (n.kind) {
    case OpKind::kCastLike: return field == "to";  // the second input's type
    case OpKind::kSpaceToDepth: return field == "mode";
    case OpKind::kConv: return field == "output_padding" || field == "output_shape";
    case OpKind::kAveragePool: return field == "storage_order";
    case OpKind::kMaxPool: return field == "count_include_pad";
    case OpKind::kScatterND: return field == "axis";
    case OpKind::kDequantizeLinear: return field == "saturate";
    // Split takes either the `split` sizes input or num_outputs, never both.
    case OpKind::kSplit: return field == "num_outputs" && n.inputs.size() > 1 && n.inputs[1] != kNoValue;
    default: return false;
  }
}

template <class S, class F>
void write_field(const Node& n, const S& attrs, const S& def, const F& field, onnx::NodeProto* np) {
  const auto& v = attrs.*(field.member);
  if (never_written(n, field.name)) return;
  if (!(v != def.*(field.member)) && !always_written(n.kind, field.name)) return;
  onnx::AttributeProto* a = np->add_attribute();
  a->set_name(field.name);
  write_attr(a, v);
}

void write_attrs(const Node& n, onnx::NodeProto* np) {
  const Attrs defaults = onnx_defaults(n.kind);
  if (n.attrs.index() != defaults.index())
    throw Error("node " + in_quotes(n.name) + " (" + std::string(op_name(n.kind)) +
                ") holds attributes of the wrong kind for its op");
  std::visit(
      [&](const auto& attrs) {
        using S = std::decay_t<decltype(attrs)>;
        const S& def = std::get<S>(defaults);
        std::apply([&](const auto&... f) { (write_field(n, attrs, def, f, np), ...); }, S::kFields);
      },
      n.attrs);
}

// ---- the model ---------------------------------------------------------------------------------

class Exporter {
 public:
  explicit Exporter(const Graph& g) : g_(g) {
    for (const Value& v : g.values) used_names_.insert(v.name);
    for (const Node& n : g.nodes) used_names_.insert(n.name);
  }

  onnx::ModelProto run() {
    onnx::ModelProto model;
    model.set_ir_version(kExportIrVersion);
    model.set_producer_name("kiln");
    onnx::OperatorSetIdProto* opset = model.add_opset_import();
    opset->set_domain("");
    opset->set_version(kExportOpset);
    gp_ = model.mutable_graph();
    gp_->set_name(g_.name.empty() ? "kiln" : g_.name);

    for (ValueId id : g_.inputs) write_value_info(g_.value(id), gp_->add_input());
    write_initializers();
    for (const Node& n : g_.nodes) {
      if (n.kind == OpKind::kSelectBranch) {
        export_select_branch(n);
        continue;
      }
      if (is_internal_op(n.kind))
        throw Error("node " + in_quotes(n.name) + " is a " + std::string(op_name(n.kind)) +
                    ", an internal op of Kiln's passes that ONNX does not define; export the graph before "
                    "optimizing it");
      // fuse-attention's forms: ONNX's Attention reads neither a packed input nor a repeated mask.
      if (const auto* at = std::get_if<AttentionAttrs>(&n.attrs); at && (at->packed_qkv || at->mask_period))
        throw Error("node " + in_quotes(n.name) + " is an Attention with Kiln's own " +
                    (at->packed_qkv ? "packed_qkv" : "mask_period") +
                    " form, which ONNX does not define; export the graph before optimizing it");
      bool legacy_softmax = std::holds_alternative<SoftmaxAttrs>(n.attrs) && std::get<SoftmaxAttrs>(n.attrs).coerce_2d;
      if (legacy_softmax) {
        export_legacy_softmax(n);
        continue;
      }
      onnx::NodeProto* np = add_node(n.name, op_name(n.kind));
      for (ValueId v : n.inputs) np->add_input(name_of(v));
      // A data-dependent op's extent slot is Kiln's (the importer adds it): ONNX's op has one output.
      const size_t outputs = has_trait(n.kind, kDataDependent) ? 1 : n.outputs.size();
      for (size_t k = 0; k < outputs; ++k) np->add_output(name_of(n.outputs[k]));
      write_attrs(n, np);
    }
    for (ValueId id : g_.outputs) write_value_info(g_.value(id), gp_->add_output());
    return model;
  }

 private:
  const Graph& g_;
  onnx::GraphProto* gp_ = nullptr;
  std::set<std::string> used_names_;
  std::set<std::string> node_names_;
  int64_t counter_ = 0;

  std::string name_of(ValueId v) const { return v == kNoValue ? std::string() : g_.value(v).name; }

  // A value or node name no value or node of the graph uses.
  std::string fresh_name(const std::string& base) {
    std::string n;
    do {
      n = base + "__export" + std::to_string(counter_++);
    } while (used_names_.count(n));
    used_names_.insert(n);
    return n;
  }

  // Node names need not be unique in Kiln (several nodes may come from one ONNX node), but tools
  // key on them, so duplicates get a suffix.
  onnx::NodeProto* add_node(const std::string& name, std::string_view op_type) {
    onnx::NodeProto* np = gp_->add_node();
    std::string unique = name;
    if (unique.empty() || node_names_.count(unique)) unique = fresh_name(name.empty() ? std::string(op_type) : name);
    node_names_.insert(unique);
    np->set_name(unique);
    np->set_op_type(std::string(op_type));
    return np;
  }

  static void write_value_info(const Value& v, onnx::ValueInfoProto* vi) {
    vi->set_name(v.name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(static_cast<int32_t>(v.dtype));
    if (!v.has_shape) return;
    auto* shape = tt->mutable_shape();
    for (size_t i = 0; i < v.shape.size(); ++i) {
      auto* d = shape->add_dim();
      if (v.shape[i] >= 0) {
        d->set_dim_value(v.shape[i]);
      } else {
        const std::string* p = i < v.dim_params.size() ? &v.dim_params[i] : nullptr;
        d->set_dim_param(p && !p->empty() ? *p : "?");
      }
    }
  }

  // Constants that some node or graph output reads; ones left behind by rewrites are dropped.
  void write_initializers() {
    std::vector<int> uses = g_.use_counts();
    for (size_t i = 0; i < g_.values.size(); ++i) {
      const Value& v = g_.values[i];
      if (!v.is_constant() || uses[i] == 0) continue;
      HostTensor t;
      t.name = v.name;
      t.dtype = v.dtype;
      t.shape = v.shape;
      int64_t numel = 1;
      for (int64_t d : v.shape) numel *= d;
      if (numel < 0 || v.data->size() != static_cast<size_t>(numel) * dtype_size(v.dtype))
        throw Error("constant " + in_quotes(v.name) + " holds " + std::to_string(v.data->size()) +
                    " bytes, which does not match its shape " + shape_string(v.shape));
      t.data = *v.data;
      tensor_to_proto(t, gp_->add_initializer());
    }
  }

  std::string add_i64_initializer(const std::string& base, const std::vector<int64_t>& values) {
    HostTensor t;
    t.name = fresh_name(base);
    t.dtype = DataType::kInt64;
    t.shape = {static_cast<int64_t>(values.size())};
    t.data.resize(values.size() * sizeof(int64_t));
    std::memcpy(t.data.data(), values.data(), t.data.size());
    tensor_to_proto(t, gp_->add_initializer());
    return t.name;
  }

  // An imported If (graph/onnx_if.cpp) has its branches' nodes inline: an If again whose branches
  // pass the chosen side's values through.
  void export_select_branch(const Node& n) {
    onnx::NodeProto* np = add_node(n.name, "If");
    np->add_input(name_of(n.inputs.at(0)));
    for (ValueId v : n.outputs) np->add_output(name_of(v));
    const size_t k = n.outputs.size();
    for (size_t b = 0; b < 2; ++b) {
      onnx::AttributeProto* a = np->add_attribute();
      a->set_name(b == 0 ? "then_branch" : "else_branch");
      a->set_type(onnx::AttributeProto_AttributeType_GRAPH);
      onnx::GraphProto* sub = a->mutable_g();
      sub->set_name(np->name() + (b == 0 ? "_then" : "_else"));
      for (size_t i = 0; i < k; ++i) {
        const ValueId from = n.inputs.at(1 + b * k + i);
        const std::string out = fresh_name(name_of(n.outputs[i]));
        onnx::NodeProto* pass = sub->add_node();
        pass->set_op_type("Identity");
        pass->add_input(name_of(from));
        pass->add_output(out);
        onnx::ValueInfoProto* vi = sub->add_output();
        write_value_info(g_.value(from), vi);
        vi->set_name(out);
      }
    }
  }

  // Softmax, LogSoftmax and Hardmax before opset 13 flattened the input to 2-D at `axis` and
  // worked along the second dimension. Opset 21 has no such form, so it becomes
  // Flatten(axis) -> op(axis = 1) -> Reshape(original shape). The shape is a constant when the
  // input's shape is known, else taken at run time with Shape.
  void export_legacy_softmax(const Node& n) {
    if (n.inputs.size() != 1 || n.outputs.size() != 1 || n.inputs[0] == kNoValue)
      throw Error("node " + in_quotes(n.name) + " (" + std::string(op_name(n.kind)) +
                  ") with legacy 2-D semantics needs exactly one input and one output");
    const Value& x = g_.value(n.inputs[0]);
    const auto& a = std::get<SoftmaxAttrs>(n.attrs);

    std::string flat = fresh_name(x.name + "_2d");
    onnx::NodeProto* f = add_node(n.name + "_flatten", "Flatten");
    f->add_input(x.name);
    f->add_output(flat);
    Node flatten_node{n.name, OpKind::kFlatten, AxisAttrs{a.axis}, {}, {}, ""};
    write_attrs(flatten_node, f);

    std::string out2d = fresh_name(name_of(n.outputs[0]) + "_2d");
    onnx::NodeProto* s = add_node(n.name, op_name(n.kind));
    s->add_input(flat);
    s->add_output(out2d);
    onnx::AttributeProto* axis = s->add_attribute();
    axis->set_name("axis");
    write_attr(axis, int64_t{1});

    std::string shape;
    if (x.shape_static()) {
      shape = add_i64_initializer(x.name + "_shape", x.shape);
    } else {
      shape = fresh_name(x.name + "_shape");
      onnx::NodeProto* sh = add_node(n.name + "_shape", "Shape");
      sh->add_input(x.name);
      sh->add_output(shape);
    }
    onnx::NodeProto* r = add_node(n.name + "_reshape", "Reshape");
    r->add_input(out2d);
    r->add_input(shape);
    r->add_output(name_of(n.outputs[0]));
  }
};

}  // namespace

std::string export_onnx_bytes(const Graph& g) {
  onnx::ModelProto model = Exporter(g).run();
  std::string bytes;
  if (!model.SerializeToString(&bytes))
    throw Error("graph " + in_quotes(g.name) +
                ": cannot serialize the ONNX model (protobuf limits a model to 2 GiB; larger weights need "
                "external data, which the exporter does not write)");
  return bytes;
}

void export_onnx(const Graph& g, const std::filesystem::path& path) {
  std::string bytes = export_onnx_bytes(g);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(path.string() + ": cannot open for writing: " + std::strerror(errno));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw Error(path.string() + ": write failed (disk full?): " + std::strerror(errno));
}

}  // namespace kiln::graph
