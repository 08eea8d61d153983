#include "graph/onnx_import.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <sstream>

#include "graph/onnx_import_internal.h"
#include "graph/tensor_file.h"

namespace kiln::graph {

namespace {

using detail::default_domain;
using detail::Importer;
using detail::ImportNode;

std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

// ---- attributes: one parse routine per field type, chosen by overload --------------------------

void expect_type(const onnx::AttributeProto& a, onnx::AttributeProto::AttributeType t, const char* what) {
  if (a.type() != t && !(a.type() == onnx::AttributeProto::UNDEFINED))
    throw Error("attribute " + in_quotes(a.name()) + " should be " + what);
}

void parse_attr(const onnx::AttributeProto& a, int64_t& out, const std::filesystem::path&) {
  expect_type(a, onnx::AttributeProto::INT, "an int");
  out = a.i();
}
void parse_attr(const onnx::AttributeProto& a, float& out, const std::filesystem::path&) {
  if (a.type() == onnx::AttributeProto::INT) {
    out = static_cast<float>(a.i());
    return;
  }
  expect_type(a, onnx::AttributeProto::FLOAT, "a float");
  out = a.f();
}
void parse_attr(const onnx::AttributeProto& a, std::vector<int64_t>& out, const std::filesystem::path&) {
  expect_type(a, onnx::AttributeProto::INTS, "a list of ints");
  out.assign(a.ints().begin(), a.ints().end());
}
void parse_attr(const onnx::AttributeProto& a, std::string& out, const std::filesystem::path&) {
  expect_type(a, onnx::AttributeProto::STRING, "a string");
  out = a.s();
}
void parse_attr(const onnx::AttributeProto& a, DataType& out, const std::filesystem::path&) {
  expect_type(a, onnx::AttributeProto::INT, "an element type code");
  if (a.i() < 0 || !dtype_valid(static_cast<uint32_t>(a.i())))
    throw Error("attribute " + in_quotes(a.name()) + " names element type " + std::to_string(a.i()) +
                ", which Kiln does not support (supported: float32/64/16, bfloat16, int8-64, uint8-64, bool)");
  out = static_cast<DataType>(a.i());
}
void parse_attr(const onnx::AttributeProto& a, Scalar& out, const std::filesystem::path& base) {
  expect_type(a, onnx::AttributeProto::TENSOR, "a tensor");
  HostTensor t = tensor_from_proto(a.t(), base, "attribute " + in_quotes(a.name()));
  if (t.numel() != 1) throw Error("attribute " + in_quotes(a.name()) + " must hold exactly one value");
  out.dtype = t.dtype;
  out.bytes = {};
  std::copy(t.data.begin(), t.data.end(), out.bytes.begin());
}
template <AttrEnum E>
void parse_attr(const onnx::AttributeProto& a, E& out, const std::filesystem::path&) {
  expect_type(a, onnx::AttributeProto::STRING, "a string");
  const auto& names = kEnumNames<E>;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == a.s()) {
      out = static_cast<E>(i);
      return;
    }
  }
  std::string allowed;
  for (auto n : names) allowed += (allowed.empty() ? "" : ", ") + std::string(n);
  throw Error("attribute " + in_quotes(a.name()) + " = \"" + a.s() +
              "\" is not supported (expected one of: " + allowed + ")");
}

void parse_attr(const onnx::AttributeProto& a, std::vector<float>& out, const std::filesystem::path&) {
  expect_type(a, onnx::AttributeProto::FLOATS, "a list of floats");
  out.assign(a.floats().begin(), a.floats().end());
}
template <AttrEnum E>
void parse_attr(const onnx::AttributeProto& a, std::vector<E>& out, const std::filesystem::path& base) {
  expect_type(a, onnx::AttributeProto::STRINGS, "a list of strings");
  out.clear();
  auto same = [](std::string_view x, std::string_view y) {  // onnxruntime reads RNN activations case-insensitively
    return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin(), [](char p, char q) {
             return std::tolower(static_cast<unsigned char>(p)) == std::tolower(static_cast<unsigned char>(q));
           });
  };
  for (const std::string& s : a.strings()) {
    const auto& names = kEnumNames<E>;
    auto it = std::find_if(names.begin(), names.end(), [&](std::string_view n) { return same(n, s); });
    if (it != names.end()) {
      out.push_back(static_cast<E>(it - names.begin()));
      continue;
    }
    onnx::AttributeProto one;  // reuse the single-string parser for its error message
    one.set_name(a.name());
    one.set_type(onnx::AttributeProto::STRING);
    one.set_s(s);
    parse_attr(one, out.emplace_back(), base);
  }
}

// Parses every attribute of `proto` that names a field of attrs; returns the names it did not know.
std::vector<std::string> parse_known_attrs(const onnx::NodeProto& proto, Attrs& attrs,
                                           const std::filesystem::path& base) {
  std::vector<std::string> unknown;
  for (const auto& a : proto.attribute()) {
    bool found = false;
    std::visit(
        [&](auto& s) {
          for_each_field(s, [&](const char* name, auto& member) {
            if (!found && a.name() == name) {
              parse_attr(a, member, base);
              found = true;
            }
          });
        },
        attrs);
    if (!found) unknown.push_back(a.name());
  }
  return unknown;
}

// ONNX defaults that differ between ops sharing one attribute struct.
void set_op_defaults(OpKind kind, Attrs& attrs) {
  switch (kind) {
    case OpKind::kLeakyRelu: std::get<AlphaAttrs>(attrs).alpha = 0.01f; break;
    case OpKind::kFlatten: std::get<AxisAttrs>(attrs).axis = 1; break;
    default: break;
  }
}

// Attributes of old opsets that carry no meaning for inference and are accepted silently.
bool ignorable_attr(OpKind kind, const std::string& name) {
  static const std::set<std::string> kAlways = {"consumed_inputs", "is_test"};
  if (kAlways.count(name)) return true;
  if (kind == OpKind::kBatchNormalization && name == "spatial") return true;
  if (kind == OpKind::kDropout && (name == "seed" || name == "ratio")) return true;
  return false;
}

DataType type_from_proto(int32_t elem_type, const std::string& what) {
  if (elem_type <= 0 || !dtype_valid(static_cast<uint32_t>(elem_type)))
    throw Error(what + " has element type " + std::to_string(elem_type) +
                " (ONNX TensorProto code), which Kiln does not support");
  return static_cast<DataType>(elem_type);
}

void apply_type(const onnx::TypeProto& type, Value& v, const std::string& what) {
  if (!type.has_tensor_type()) throw Error(what + " is not a tensor (sequences, maps and optionals are not supported)");
  const auto& tt = type.tensor_type();
  if (tt.elem_type() != 0) v.dtype = type_from_proto(tt.elem_type(), what);
  if (!tt.has_shape()) return;
  v.has_shape = true;
  v.shape.clear();
  v.dim_params.clear();
  bool symbolic = false;
  for (const auto& d : tt.shape().dim()) {
    if (d.has_dim_value()) {
      if (d.dim_value() < 0) throw Error(what + " has a negative dimension");
      v.shape.push_back(d.dim_value());
      v.dim_params.emplace_back();
    } else {
      v.shape.push_back(-1);
      v.dim_params.push_back(d.has_dim_param() ? d.dim_param() : "?");
      symbolic = true;
    }
  }
  if (!symbolic) v.dim_params.clear();
}

// Checked before any import rule runs, so that rules may index the inputs an op requires. Rules
// that move an old attribute into an input slot add inputs; the verifier checks the final arity.
void check_input_arity(const onnx::NodeProto& np, const ImportNode& n) {
  const OpInfo& info = op_info(n.kind);
  auto count = static_cast<int>(n.inputs.size());
  // Ops whose required inputs were attributes before opset 13 (the rules move them).
  bool legacy_attr_inputs = n.opset < 13 && (n.kind == OpKind::kPad || n.kind == OpKind::kSlice ||
                                             n.kind == OpKind::kTopK || n.kind == OpKind::kUnsqueeze);
  int min_inputs = legacy_attr_inputs ? 1 : info.min_inputs;
  if (count < min_inputs || (info.max_inputs >= 0 && count > info.max_inputs))
    throw Error("has " + std::to_string(count) + " inputs; " + np.op_type() + " takes " +
                std::to_string(info.min_inputs) +
                (info.max_inputs < 0 ? " or more" : " to " + std::to_string(info.max_inputs)));
  for (int i = 0; i < min_inputs && i < count; ++i)
    if (n.inputs[static_cast<size_t>(i)] == kNoValue)
      throw Error("required input " + std::to_string(i) + " of " + np.op_type() + " is empty");
}

// Constant nodes become constant values.
void import_constant(Importer& im, const onnx::NodeProto& n, const std::filesystem::path& base) {
  if (n.output_size() != 1 || n.attribute_size() != 1)
    throw Error("Constant node " + in_quotes(n.name()) + " must have one output and one value attribute");
  const auto& a = n.attribute(0);
  const std::string& out = n.output(0);
  HostTensor t;
  if (a.name() == "value") {
    t = tensor_from_proto(a.t(), base, "Constant node " + in_quotes(n.name()));
  } else if (a.name() == "value_float" || a.name() == "value_floats") {
    std::vector<float> v = a.name() == "value_float" ? std::vector<float>{a.f()}
                                                     : std::vector<float>(a.floats().begin(), a.floats().end());
    t.dtype = DataType::kFloat32;
    if (a.name() == "value_floats") t.shape = {static_cast<int64_t>(v.size())};
    t.data.resize(v.size() * 4);
    if (!v.empty()) std::memcpy(t.data.data(), v.data(), t.data.size());
  } else if (a.name() == "value_int" || a.name() == "value_ints") {
    std::vector<int64_t> v =
        a.name() == "value_int" ? std::vector<int64_t>{a.i()} : std::vector<int64_t>(a.ints().begin(), a.ints().end());
    t.dtype = DataType::kInt64;
    if (a.name() == "value_ints") t.shape = {static_cast<int64_t>(v.size())};
    t.data.resize(v.size() * 8);
    if (!v.empty()) std::memcpy(t.data.data(), v.data(), t.data.size());
  } else {
    throw Error("Constant node " + in_quotes(n.name()) + " uses attribute " + in_quotes(a.name()) +
                ", which Kiln does not support (sparse and string constants)");
  }
  if (im.g.find(out) != kNoValue) throw Error("value " + in_quotes(out) + " is defined twice");
  im.g.add_constant(out, t.dtype, t.shape, std::move(t.data));
}

// The op kind of a node of the default domain whose op type Kiln imports as a node; none for
// other domains, unknown and internal op types, and Constant (imported as a value).
std::optional<OpKind> node_kind(const onnx::NodeProto& np) {
  if (!default_domain(np.domain()) || np.op_type() == "Constant") return std::nullopt;
  std::optional<OpKind> kind = detail::renamed_op(np.op_type());
  if (!kind) kind = op_kind_from_name(np.op_type());
  if (kind && is_internal_op(*kind)) return std::nullopt;
  return kind;
}

// How an unsupported node's op type is listed ("domain::Op" outside the default domain); empty
// where Kiln imports it, and for a node without an op type (reported as a problem of its own).
std::string unsupported_key(const onnx::NodeProto& np) {
  if (!default_domain(np.domain())) return np.domain() + "::" + np.op_type();
  if (np.op_type().empty() || np.op_type() == "Constant" || node_kind(np) || lowered_op_types().contains(np.op_type()))
    return "";
  return np.op_type();
}

}  // namespace

namespace detail {

const onnx::AttributeProto* Importer::attr(const onnx::NodeProto& n, const std::string& name) const {
  return find_attr(n, name);
}

ValueId Importer::const_i64(const std::string& hint, const std::vector<int64_t>& v, bool scalar) {
  std::vector<uint8_t> bytes(v.size() * 8);
  if (!bytes.empty()) std::memcpy(bytes.data(), v.data(), bytes.size());
  std::vector<int64_t> shape;
  if (!scalar) shape = {static_cast<int64_t>(v.size())};
  return g.add_constant(g.unique_name(hint), DataType::kInt64, shape, std::move(bytes));
}

ValueId Importer::const_f32(const std::string& hint, const std::vector<float>& v, bool scalar) {
  std::vector<uint8_t> bytes(v.size() * 4);
  if (!bytes.empty()) std::memcpy(bytes.data(), v.data(), bytes.size());
  std::vector<int64_t> shape;
  if (!scalar) shape = {static_cast<int64_t>(v.size())};
  return g.add_constant(g.unique_name(hint), DataType::kFloat32, shape, std::move(bytes));
}

}  // namespace detail

std::map<std::string, std::vector<std::string>> function_op_types() {
  auto native = [](const std::string& op) {
    onnx::NodeProto np;
    np.set_op_type(op);
    return op == "Constant" || node_kind(np).has_value();
  };
  std::map<std::string, std::vector<std::string>> bodies;  // function op -> its body's op types
  for (const std::string& type : detail::function_op_type_names())
    if (!native(type)) bodies[type] = detail::function_body_op_types(type, kMaxOpset);
  // A body may call other functions (STFT calls DFT): their ops take their place, until every op
  // left is native, or not importable at all.
  std::map<std::string, std::vector<std::string>> out;
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& [type, body] : bodies) {
      if (out.contains(type) || body.empty()) continue;
      std::vector<std::string> flat;
      bool importable = true;
      for (const std::string& op : body) {
        const std::vector<std::string>* inner = nullptr;
        if (auto it = out.find(op); it != out.end()) inner = &it->second;
        if (!native(op) && inner == nullptr) importable = false;
        for (const std::string& o : inner ? *inner : std::vector<std::string>{op})
          if (std::find(flat.begin(), flat.end(), o) == flat.end()) flat.push_back(o);
      }
      if (importable) {
        out[type] = std::move(flat);
        changed = true;
      }
    }
  }
  return out;
}

const std::map<std::string, std::string>& lowered_op_types() {
  static const std::map<std::string, std::string> ops = [] {
    std::map<std::string, std::string> m;
    for (const char* op : {"SequenceEmpty", "SequenceConstruct", "SequenceInsert", "SequenceErase", "SequenceAt",
                           "SequenceLength", "ConcatFromSequence", "SplitToSequence"})
      m[op] =
          "static sequence: lowered at import to Identity, Split, Squeeze, Unsqueeze, Concat or a constant (the "
          "length and positions must be known then)";
    m["If"] =
        "lowered at import: both branches inline, then SelectBranch; a condition that folds drops the other "
        "branch, else both run and the condition picks";
    m["Compress"] = "lowered at import: NonZero of the condition, then Gather (data-dependent shape)";
    m["Unique"] =
        "lowered at import: every pair of elements (or slices) compared, NonZero of the first occurrences, TopK "
        "(data-dependent shape; the input's shape must be known then)";
    m["Det"] =
        "lowered at import: Gaussian elimination with partial pivoting unrolled over the columns (the matrix "
        "size must be known then, at most 64)";
    m["Loop"] =
        "unrolled at import: a copy of the body per iteration up to the trip count (a constant of the model), "
        "each guarded by the condition";
    for (const char* op : {"Optional", "OptionalHasElement", "OptionalGetElement"})
      m[op] =
          "static optional: lowered at import to a constant or an Identity (whether it holds a value must be known "
          "then)";
    m["SequenceMap"] = "static sequence: a copy of the body per element, at import (the length must be known then)";
    m["Scan"] =
        "unrolled at import: a copy of the body per step, Gather, Unsqueeze, Concat (the scan length must be known "
        "then)";
    return m;
  }();
  return ops;
}

std::vector<std::string> importable_op_types() {
  std::vector<std::string> ops = {"Constant", "Scatter", "Upsample"};
  for (size_t i = 0; i < kOnnxOpCount; ++i) ops.emplace_back(kOpTable[i].name);
  for (const auto& [type, body] : function_op_types()) ops.push_back(type);
  for (const auto& [type, how] : lowered_op_types()) ops.push_back(type);
  std::sort(ops.begin(), ops.end());
  return ops;
}

namespace {

// A file mapped read-only: protobuf parses the page cache's bytes, where a copy into a buffer first
// cost GPT-2-small's 656 MB model a second of page clearing before the parse.
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw Error(path.string() + ": cannot open the file (does it exist, is it readable?)");
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw Error(path.string() + ": not a regular file; give the path of an .onnx model");
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ == 0) return;
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    if (p == MAP_FAILED) {
      ::close(fd_);
      throw Error(path.string() + ": cannot read the file (mmap failed)");
    }
    data_ = static_cast<const uint8_t*>(p);
    ::madvise(p, size_, MADV_SEQUENTIAL);
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    ::close(fd_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::span<const uint8_t> bytes() const { return {data_, size_}; }

 private:
  int fd_ = -1;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace

std::string sequence_element(const std::string& sequence, int64_t i) {
  return sequence + "[" + std::to_string(i) + "]";
}

namespace {

// Whether an If's branches give a sequence or an optional (they must then be chosen at import).
bool if_gives_sequences(const onnx::NodeProto& np) {
  for (const onnx::AttributeProto& a : np.attribute())
    if (a.has_g())
      for (const auto& o : a.g().output())
        if (o.type().has_sequence_type() || o.type().has_optional_type()) return true;
  return false;
}

// ImportOptions::input_values: the graph inputs that the top-level nodes need at import, directly
// or through the nodes that compute what they need, become constants of the given values.
void freeze_import_decisions(const onnx::GraphProto& gp, const std::map<std::string, HostTensor>& values, Graph& g,
                             std::vector<std::string>& problems) {
  std::set<std::string> needed;
  for (const onnx::NodeProto& np : gp.node()) {
    if (!default_domain(np.domain())) continue;
    auto need = [&](int slot) {
      if (np.input_size() > slot && !np.input(slot).empty()) needed.insert(np.input(slot));
    };
    const std::string& op = np.op_type();
    if (op == "Loop") need(0), need(1);
    if (op == "If" && if_gives_sequences(np)) need(0);  // or optionals
    if (op == "SequenceInsert") need(2);
    if (op == "SequenceErase" || op == "SequenceAt") need(1);
  }
  // And what those are computed from by the graph's nodes (Range's body computes a Loop's trip
  // count from its inputs).
  std::map<std::string, const onnx::NodeProto*> producer;
  for (const onnx::NodeProto& np : gp.node())
    for (const std::string& o : np.output()) producer[o] = &np;
  std::vector<std::string> work(needed.begin(), needed.end());
  while (!work.empty() && needed.size() < 256) {
    const auto p = producer.find(work.back());
    work.pop_back();
    if (p == producer.end()) continue;
    for (const std::string& in : p->second->input())
      if (!in.empty() && needed.insert(in).second) work.push_back(in);
  }
  for (const std::string& name : needed) {
    const auto given = values.find(name);
    const auto at =
        std::find_if(g.inputs.begin(), g.inputs.end(), [&](ValueId id) { return g.value(id).name == name; });
    if (given == values.end() || at == g.inputs.end()) continue;
    Value& v = g.value(*at);
    const HostTensor& t = given->second;
    if (t.dtype != v.dtype) {
      problems.push_back("input " + in_quotes(name) + " is " + std::string(dtype_name(v.dtype)) + ", its value " +
                         std::string(dtype_name(t.dtype)));
      continue;
    }
    v.shape = t.shape;
    v.has_shape = true;
    v.dim_params.clear();
    v.data = std::make_shared<const std::vector<uint8_t>>(t.data);
    g.inputs.erase(at);
  }
}

}  // namespace

namespace {

void parse_model(std::span<const uint8_t> bytes, const std::string& origin, onnx::ModelProto& model) {
  if (bytes.empty()) throw Error(origin + ": the file is empty (0 bytes); is the export complete?");
  if (bytes.size() > static_cast<size_t>(INT32_MAX) ||
      !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    throw Error(origin + ": not a valid ONNX model (the protobuf does not parse; is the file complete?)");
}

std::filesystem::path base_dir_of(const std::filesystem::path& path) {
  return path.parent_path().empty() ? "." : path.parent_path();
}

Graph import_model(onnx::ModelProto& model, const std::string& origin, const std::filesystem::path& base_dir,
                   const ImportOptions& options);

}  // namespace

Graph import_onnx(const std::filesystem::path& path, const ImportOptions& options) {
  return OnnxFile(path).import(options);
}

OnnxFile::OnnxFile(const std::filesystem::path& path) : path_(path), model_(std::make_unique<onnx::ModelProto>()) {
  const MappedFile f(path);
  parse_model(f.bytes(), path.string(), *model_);
  std::set<std::string> inits;
  for (const auto& t : model_->graph().initializer()) inits.insert(t.name());
  auto value = [](const onnx::ValueInfoProto& v) {
    const bool optional = v.type().has_optional_type();
    const onnx::TypeProto& held = optional ? v.type().optional_type().elem_type() : v.type();
    return OnnxIoValue{v.name(), held.has_sequence_type(), optional};
  };
  for (const auto& v : model_->graph().input())
    if (!inits.contains(v.name())) io_.inputs.push_back(value(v));
  for (const auto& v : model_->graph().output()) io_.outputs.push_back(value(v));
}

OnnxFile::~OnnxFile() = default;

Graph OnnxFile::import(const ImportOptions& options) {
  if (!model_) throw Error(path_.string() + ": imported twice from one OnnxFile (internal error)");
  const std::unique_ptr<onnx::ModelProto> model = std::move(model_);
  return import_model(*model, path_.string(), base_dir_of(path_), options);
}

Graph import_onnx_bytes(std::span<const uint8_t> bytes, const std::string& origin,
                        const std::filesystem::path& base_dir, const ImportOptions& options) {
  onnx::ModelProto model;
  parse_model(bytes, origin, model);
  return import_model(model, origin, base_dir, options);
}

namespace {

Graph import_model(onnx::ModelProto& model, const std::string& origin, const std::filesystem::path& base_dir,
                   const ImportOptions& options) {
  int64_t opset = -1;
  for (const auto& o : model.opset_import())
    if (default_domain(o.domain())) opset = o.version();
  if (opset < 0 && model.opset_import_size() == 0) opset = 1;  // IR version 1 models: opset 1
  // Only other domains imported (ai.onnx.preview.training's tests): no node of the default domain
  // may appear, and Kiln's function bodies bring their own opset.
  if (opset < 0) {
    for (const auto& np : model.graph().node())
      if (default_domain(np.domain()))
        throw Error(origin + ": node '" + np.name() + "' is a " + np.op_type() +
                    " of the default ONNX domain, but the model imports no opset of it (opset_import)");
    opset = kMaxOpset;
  }
  if (opset < kMinOpset || opset > kMaxOpset)
    throw Error(origin + ": opset " + std::to_string(opset) +
                " of the default ONNX domain is not supported (Kiln reads " + std::to_string(kMinOpset) + " to " +
                std::to_string(kMaxOpset) + "); convert the model with onnx.version_converter");

  Graph g;
  const onnx::GraphProto& gp = model.graph();
  g.name = gp.name().empty() ? std::filesystem::path(origin).stem().string() : gp.name();
  Importer im(g, origin);
  std::vector<std::string> problems;
  std::map<std::string, std::vector<std::string>> unsupported;  // op type -> node names

  for (int i = 0; i < gp.initializer_size(); ++i) {
    const onnx::TensorProto& init = gp.initializer(i);
    try {
      HostTensor t = tensor_from_proto(init, base_dir, "initializer " + in_quotes(init.name()) + " in " + origin);
      if (g.find(init.name()) != kNoValue) throw Error("initializer " + in_quotes(init.name()) + " is defined twice");
      g.add_constant(init.name(), t.dtype, t.shape, std::move(t.data));
    } catch (const Error& e) {
      problems.push_back(e.what());
    }
    // The bytes are the graph's now: free the proto's copy (a model's weights are held twice at
    // most one initializer at a time).
    if (init.has_raw_data()) std::string().swap(*model.mutable_graph()->mutable_initializer(i)->mutable_raw_data());
  }
  if (gp.sparse_initializer_size() > 0) problems.push_back("sparse initializers are not supported");
  // The inputs and node outputs that could not be imported (unsupported, or a problem already
  // reported): the nodes that read them are skipped without a message of their own, so that one
  // problem gets one message and not one per node downstream of it.
  std::set<std::string> failed_values;
  std::vector<std::pair<std::string, std::vector<std::string>>> sequence_inputs;  // name, elements
  std::vector<std::pair<std::string, bool>> optional_inputs;                      // name, present
  for (const auto& in : gp.input()) {
    if (g.find(in.name()) != kNoValue) continue;  // IR < 4 lists initializers as inputs too
    try {
      const bool optional = in.type().has_optional_type();
      const onnx::TypeProto& type = optional ? in.type().optional_type().elem_type() : in.type();
      if (optional) {  // the tensor or sequence it holds, or nothing
        const auto present = options.optional_present.find(in.name());
        if (present == options.optional_present.end())
          throw Error("input " + in_quotes(in.name()) +
                      " is optional; whether it holds a value Kiln needs when it builds: `kiln run` takes it from "
                      "the input's data (an OptionalProto file); the API from ImportOptions::optional_present");
        optional_inputs.emplace_back(in.name(), present->second);
        if (!present->second) continue;
      }
      if (type.has_sequence_type()) {  // as many tensor inputs as the sequence has elements
        const auto length = options.sequence_lengths.find(in.name());
        if (length == options.sequence_lengths.end())
          throw Error("input " + in_quotes(in.name()) +
                      " is a sequence, whose length Kiln needs when it builds: `kiln run` takes it from the "
                      "input's data (a SequenceProto file); the API from ImportOptions::sequence_lengths");
        const onnx::TypeProto& elem = type.sequence_type().elem_type();
        std::vector<std::string> elements;
        for (int64_t k = 0; k < length->second; ++k) {
          Value v;
          v.name = sequence_element(in.name(), k);
          apply_type(elem, v, "element " + std::to_string(k) + " of input " + in_quotes(in.name()));
          for (std::string& p : v.dim_params)  // each element's own: elements differ in shape
            if (!p.empty()) p = v.name + "." + p;
          elements.push_back(v.name);
          g.inputs.push_back(g.add_value(std::move(v)));
        }
        sequence_inputs.emplace_back(in.name(), std::move(elements));
        continue;
      }
      Value v;
      v.name = in.name();
      apply_type(type, v, "input " + in_quotes(in.name()));
      g.inputs.push_back(g.add_value(std::move(v)));
    } catch (const Error& e) {
      problems.push_back(e.what());
      failed_values.insert(in.name());
    }
  }
  if (!options.input_values.empty()) freeze_import_decisions(gp, options.input_values, g, problems);
  std::map<std::string, const onnx::TypeProto*> declared;
  for (const auto& vi : gp.value_info()) declared[vi.name()] = &vi.type();
  for (const auto& vi : gp.output()) declared[vi.name()] = &vi.type();

  auto fail_outputs = [&](const onnx::NodeProto& np) {
    for (const std::string& out : np.output())
      if (!out.empty()) failed_values.insert(out);
  };
  std::vector<detail::SourceNode> nodes;
  try {
    nodes = detail::expand_functions(model, opset, [](const onnx::NodeProto& np) {
      return default_domain(np.domain()) && (np.op_type() == "Constant" || node_kind(np));
    });
  } catch (const Error& e) {
    throw Error(origin + ": cannot import the model: " + e.what());
  }
  detail::StaticSequences sequences;
  for (auto& [name, elements] : sequence_inputs) sequences.define(name, std::move(elements));
  for (const auto& [name, present] : optional_inputs) sequences.define_optional(name, present ? name : "");
  int unrolled = 0;  // names made by unroll_scan, unroll_loop and lower_if
  detail::IfBranches if_branches;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const detail::SourceNode& sn = nodes[i];
    const onnx::NodeProto& np = sn.proto;
    const std::string& node_name = sn.name;
    std::string where = "node " + in_quotes(node_name) + " (" + np.op_type() + ")";
    if (!sn.in_function.empty()) where += " in the function body of " + sn.in_function;
    const bool downstream = std::any_of(np.input().begin(), np.input().end(),
                                        [&](const std::string& in) { return failed_values.contains(in); });
    const std::string unsupported_as = unsupported_key(np);
    if (downstream) {  // still named if its own op type is unsupported; nothing else is reported
      fail_outputs(np);
      if (!unsupported_as.empty()) unsupported[unsupported_as].push_back(node_name);
      continue;
    }
    try {
      if (np.op_type().empty()) throw Error("has no op_type; every node needs one (Relu, Conv, ...)");
      if (default_domain(np.domain()) && np.op_type() == "If" && !detail::is_lowered_if(np)) {
        std::vector<detail::SourceNode> lowered = detail::lower_if(sn, g, unrolled, if_branches);
        nodes.insert(nodes.begin() + static_cast<std::ptrdiff_t>(i) + 1, std::make_move_iterator(lowered.begin()),
                     std::make_move_iterator(lowered.end()));
        continue;
      }
      const bool scan = default_domain(np.domain()) && np.op_type() == "Scan";
      const bool loop = default_domain(np.domain()) && np.op_type() == "Loop";
      const bool compress = default_domain(np.domain()) && np.op_type() == "Compress";
      const bool det = default_domain(np.domain()) && np.op_type() == "Det";
      const bool unique = default_domain(np.domain()) && np.op_type() == "Unique";
      if (scan || loop || compress || det || unique || sequences.handles(np)) {
        std::vector<detail::SourceNode> lowered = scan       ? detail::unroll_scan(sn, g, unrolled)
                                                  : loop     ? detail::unroll_loop(sn, g, unrolled)
                                                  : compress ? detail::lower_compress(sn, g, unrolled)
                                                  : det      ? detail::lower_det(sn, g, unrolled)
                                                  : unique   ? detail::lower_unique(sn, g, unrolled)
                                                             : sequences.lower(sn, g);
        if (auto b = if_branches.find(node_name); b != if_branches.end())  // in a branch, as its source
          for (const detail::SourceNode& l : lowered) if_branches.emplace(l.name, b->second);
        nodes.insert(nodes.begin() + static_cast<std::ptrdiff_t>(i) + 1, std::make_move_iterator(lowered.begin()),
                     std::make_move_iterator(lowered.end()));
        continue;
      }
      if (!unsupported_as.empty()) {
        unsupported[unsupported_as].push_back(node_name);
        fail_outputs(np);
        continue;
      }
      if (np.op_type() == "Constant") {
        import_constant(im, np, base_dir);
        continue;
      }
      const std::optional<OpKind> found = detail::is_lowered_if(np) ? OpKind::kSelectBranch : node_kind(np);
      if (!found) throw Error("is not an op type Kiln imports");  // unsupported_key lists every other case
      const OpKind kind = *found;
      ImportNode n{np, sn.opset, kind, default_attrs(kind), {}, {}, {}};
      set_op_defaults(kind, n.attrs);
      std::vector<std::string> unknown = parse_known_attrs(np, n.attrs, base_dir);
      for (const std::string& in : np.input()) {
        if (in.empty()) {
          n.inputs.push_back(kNoValue);
          continue;
        }
        ValueId id = g.find(in);
        if (id == kNoValue && sequences.is_sequence(in))
          throw Error("reads the sequence " + in_quotes(in) +
                      "; Kiln lowers sequences at import, for the sequence "
                      "ops only (SequenceAt or ConcatFromSequence make tensors of one)");
        if (id == kNoValue)
          throw Error("reads " + in_quotes(in) + ", which no earlier node, input or initializer defines");
        n.inputs.push_back(id);
      }
      while (!n.inputs.empty() && n.inputs.back() == kNoValue) n.inputs.pop_back();
      check_input_arity(np, n);
      auto rule = detail::import_rules().find(np.op_type());
      if (rule != detail::import_rules().end()) rule->second(im, n);
      for (const std::string& a : unknown) {
        if (ignorable_attr(n.kind, a) || kind == OpKind::kSelectBranch) continue;  // its lowering's mark
        if (std::find(n.consumed.begin(), n.consumed.end(), a) != n.consumed.end()) continue;
        throw Error("has attribute " + in_quotes(a) + ", which Kiln does not support for " + np.op_type() +
                    " at opset " + std::to_string(sn.opset));
      }
      for (int k = 0; k < np.output_size(); ++k) {
        const std::string& out = np.output(k);
        if (out.empty()) {
          // Engine steps address outputs by position, so an unused optional output before a used
          // one (RNN's Y in RNN(...) -> ("", Y_h)) gets a value of its own; trailing ones are dropped.
          bool later_used = false;
          for (int j = k + 1; j < np.output_size(); ++j) later_used |= !np.output(j).empty();
          // (SelectBranch's outputs pair with its inputs: each keeps a value.)
          if (!later_used && kind != OpKind::kSelectBranch) {
            n.outputs.push_back(kNoValue);
            continue;
          }
          Value v;
          v.name = g.unique_name(node_name + "_unused_output" + std::to_string(k));
          n.outputs.push_back(g.add_value(std::move(v)));
          continue;
        }
        if (g.find(out) != kNoValue) throw Error("writes " + in_quotes(out) + ", which is defined already");
        Value v;
        v.name = out;
        auto d = declared.find(out);
        if (d != declared.end()) apply_type(*d->second, v, "value " + in_quotes(out));
        n.outputs.push_back(g.add_value(std::move(v)));
      }
      while (!n.outputs.empty() && n.outputs.back() == kNoValue) n.outputs.pop_back();
      if (has_trait(n.kind, kDataDependent)) {  // its extent slot (OpTrait kDataDependent)
        n.outputs.resize(1, kNoValue);
        Value v;
        v.name = g.unique_name(node_name + "_extent");
        n.outputs.push_back(g.add_value(std::move(v)));
      }
      if (auto b = if_branches.find(node_name); b != if_branches.end())
        for (const auto& [cond, then] : b->second)
          if (ValueId c = g.find(cond); c != kNoValue) g.branches[node_name].emplace_back(c, then);
      g.nodes.push_back(
          Node{node_name, n.kind, std::move(n.attrs), std::move(n.inputs), std::move(n.outputs), node_name});
    } catch (const Error& e) {
      problems.push_back(where + ": " + e.what());
      fail_outputs(np);
    }
  }
  if (gp.output_size() == 0) problems.push_back("the graph has no outputs, so there is nothing to compute");
  for (const auto& out : gp.output()) {
    ValueId id = g.find(out.name());
    if (id == kNoValue) {
      if (failed_values.contains(out.name())) continue;
      // An optional output: what it holds, or no output at all.
      const std::string held = sequences.is_optional(out.name()) ? sequences.optional_value(out.name()) : out.name();
      auto output_as = [&](const std::string& element, const std::string& name) {
        const ValueId from = g.find(element);
        if (from != kNoValue && element == name) {  // a sequence input's element, passed through
          g.outputs.push_back(from);
          return true;
        }
        Value v;
        v.name = name;
        if (from == kNoValue || g.find(name) != kNoValue) {
          problems.push_back("graph output " + in_quotes(out.name()) + ": " +
                             (from == kNoValue ? "its value " + in_quotes(element) + " is known only at run time"
                                               : "the name " + in_quotes(name) + " is taken by another value"));
          return false;
        }
        const ValueId to = g.add_value(std::move(v));
        g.nodes.push_back(Node{name, OpKind::kIdentity, NoAttrs{}, {from}, {to}, out.name()});
        g.outputs.push_back(to);
        return true;
      };
      if (held.empty()) continue;
      if (sequences.is_sequence(held)) {  // its elements, each a graph output of its own
        const std::vector<std::string>& elements = sequences.elements(held);
        for (size_t k = 0; k < elements.size(); ++k)
          if (!output_as(elements[k], sequence_element(out.name(), static_cast<int64_t>(k)))) break;
      } else if (held != out.name()) {
        output_as(held, out.name());
      } else {
        problems.push_back("graph output " + in_quotes(out.name()) + " is never computed");
      }
      continue;
    }
    g.outputs.push_back(id);
  }

  if (!unsupported.empty()) {
    std::ostringstream m;
    m << "unsupported op types (" << unsupported.size() << "):";
    for (const auto& [op, nodes] : unsupported) {
      m << "\n  - " << op << ": " << nodes.size() << " node" << (nodes.size() > 1 ? "s" : "") << " (";
      for (size_t i = 0; i < nodes.size() && i < 5; ++i) m << (i ? ", " : "") << nodes[i];
      if (nodes.size() > 5) m << ", ...";
      m << ")";
    }
    m << "\n  docs/operators.md lists what Kiln supports.";
    problems.insert(problems.begin(), m.str());
  }
  if (!problems.empty()) {
    std::ostringstream m;
    m << origin << ": cannot import the model:";
    for (const std::string& p : problems) m << "\n" << p;
    throw Error(m.str());
  }
  verify(g, false);
  return g;
}

}  // namespace

}  // namespace kiln::graph
