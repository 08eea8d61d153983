// Engine loading: every byte of the file is untrusted. The order of checks matters: header and
// checksum first (cheap, catches damage), then the flatbuffer verifier, then the meaning of the
// contents (indices, sizes, offsets), and last shape inference re-run on every step, so that the
// kernels can trust the shapes they are given.
#include <engine_schema_generated.h>

#include <limits>
#include <set>

#include "core/attrs_codec.h"
#include "core/shape_infer.h"
#include "runtime/engine_format.h"
#include "runtime/engine_impl.h"

namespace kiln::detail {

namespace {

constexpr int64_t kMaxDim = int64_t{1} << 40;
constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 44;

[[noreturn]] void fail(const std::string& origin, const std::string& what) { throw Error(origin + ": " + what); }

uint64_t tensor_bytes(const std::vector<int64_t>& shape, DataType dtype, const std::string& origin,
                      const std::string& name) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || d > kMaxDim) fail(origin, "tensor '" + name + "' has an invalid dimension " + std::to_string(d));
    if (d != 0 && n > kMaxTensorBytes / static_cast<uint64_t>(d))
      fail(origin, "tensor '" + name + "' is implausibly large");
    n *= static_cast<uint64_t>(d);
  }
  if (n > kMaxTensorBytes / 8) fail(origin, "tensor '" + name + "' is implausibly large");
  return n * dtype_size(dtype);
}

void check_header(const std::vector<uint8_t>& file, const std::string& origin, format::EngineHeader& h) {
  if (file.size() < sizeof(format::EngineHeader))
    fail(origin, "file is too short to be a Kiln engine (" + std::to_string(file.size()) + " bytes); truncated?");
  std::memcpy(&h, file.data(), sizeof h);
  if (std::memcmp(h.magic, format::kMagic, sizeof h.magic) != 0)
    fail(origin, "not a Kiln engine file (bad magic). Build one with `kiln optimize MODEL.onnx`");
  if (h.format_version > format::kVersion)
    fail(origin, "engine format version " + std::to_string(h.format_version) + " is newer than this runtime reads (" +
                     std::to_string(format::kVersion) + "); upgrade Kiln or rebuild the engine with this version");
  if (h.format_version < 1) fail(origin, "engine format version 0 is invalid");
  if (h.header_bytes != sizeof(format::EngineHeader)) fail(origin, "unexpected header size");
  uint64_t size = file.size();
  if (h.toc_offset != sizeof(format::EngineHeader) || h.toc_bytes > size - h.toc_offset ||
      h.weights_offset < h.toc_offset + h.toc_bytes || h.weights_offset > size ||
      h.weights_bytes > size - h.weights_offset || h.weights_offset % format::kWeightAlign != 0)
    fail(origin, "file is truncated or its section table is damaged (expected " +
                     std::to_string(h.weights_offset + h.weights_bytes) + " bytes, found " + std::to_string(size) +
                     ")");
  if (h.weights_offset + h.weights_bytes != size) fail(origin, "file has trailing bytes after the weights");
  if (h.reserved != 0) fail(origin, "header has non-zero reserved bytes: the file is damaged or from another tool");
  uint64_t sum = format::checksum(file);
  if (sum != h.checksum) fail(origin, "checksum mismatch: the file is damaged; rebuild or copy it again");
}

}  // namespace

std::shared_ptr<EngineImpl> parse_engine(std::vector<uint8_t> file, std::string origin) {
  auto e = std::make_shared<EngineImpl>();
  e->origin = origin;
  format::EngineHeader h;
  check_header(file, origin, h);
  e->file = std::move(file);
  e->format_version = h.format_version;
  e->weights_offset = h.weights_offset;
  e->weights_bytes = h.weights_bytes;

  const uint8_t* toc = e->file.data() + h.toc_offset;
  flatbuffers::Verifier verifier(toc, h.toc_bytes, /*max_depth=*/16, /*max_tables=*/10'000'000);
  if (!fb::VerifyEngineBuffer(verifier)) fail(origin, "table of contents is malformed");
  const fb::Engine* root = fb::GetEngine(toc);
  auto str = [](const flatbuffers::String* s) { return s ? s->str() : std::string(); };
  e->producer = str(root->producer());
  e->target = str(root->target());
  e->model_name = str(root->model_name());
  e->arena_bytes = root->arena_bytes();
  if (e->arena_bytes > kMaxTensorBytes) fail(origin, "activation arena size is implausible");

  if (!root->tensors()) fail(origin, "engine has no tensor table");
  for (const fb::Tensor* t : *root->tensors()) {
    TensorRec r;
    r.name = str(t->name());
    if (!dtype_valid(t->dtype())) fail(origin, "tensor '" + r.name + "' has an invalid element type");
    r.dtype = static_cast<DataType>(t->dtype());
    if (t->shape()) {
      // The verifier only guarantees 4-byte alignment for vectors, so int64 elements are copied
      // byte-wise rather than read in place.
      const uint8_t* p = t->shape()->Data();
      r.shape.resize(t->shape()->size());
      if (!r.shape.empty()) std::memcpy(r.shape.data(), p, r.shape.size() * sizeof(int64_t));
    }
    if (r.shape.size() > 16) fail(origin, "tensor '" + r.name + "' has rank above 16");
    r.bytes = tensor_bytes(r.shape, r.dtype, origin, r.name);
    auto kind = static_cast<uint8_t>(t->kind());
    if (kind > static_cast<uint8_t>(TensorKind::kActivation))
      fail(origin, "tensor '" + r.name + "' has an invalid kind");
    r.kind = static_cast<TensorKind>(kind);
    r.offset = t->offset();
    uint64_t limit = r.kind == TensorKind::kWeight ? h.weights_bytes : e->arena_bytes;
    if (r.kind != TensorKind::kInput && (r.offset > limit || r.bytes > limit - r.offset))
      fail(origin, "tensor '" + r.name + "' lies outside its memory region");
    if (r.kind != TensorKind::kInput && r.offset % format::kTensorAlign != 0)
      fail(origin, "tensor '" + r.name + "' is not aligned to " + std::to_string(format::kTensorAlign) + " bytes");
    e->tensors.push_back(std::move(r));
  }
  const auto ntensors = static_cast<int32_t>(e->tensors.size());
  auto check_index = [&](int32_t i, bool optional, const std::string& what) {
    if ((optional && i == -1) || (i >= 0 && i < ntensors)) return;
    fail(origin, what + " refers to tensor " + std::to_string(i) + ", which does not exist");
  };

  // Engine inputs and outputs.
  std::vector<char> defined(e->tensors.size(), 0);
  for (size_t i = 0; i < e->tensors.size(); ++i)
    if (e->tensors[i].kind == TensorKind::kWeight) defined[i] = 1;
  if (!root->inputs() || !root->outputs()) fail(origin, "engine lists no inputs or outputs");
  for (int32_t i : *root->inputs()) {
    check_index(i, false, "engine input");
    TensorRec& t = e->tensors[static_cast<size_t>(i)];
    if (t.kind != TensorKind::kInput || defined[static_cast<size_t>(i)])
      fail(origin, "engine input '" + t.name + "' is not an input tensor");
    defined[static_cast<size_t>(i)] = 1;
    e->input_ids.push_back(i);
    e->inputs.push_back({t.name, t.dtype, t.shape});
  }
  for (int32_t i : *root->outputs()) {
    check_index(i, false, "engine output");
    const TensorRec& t = e->tensors[static_cast<size_t>(i)];
    if (t.kind != TensorKind::kOutput) fail(origin, "engine output '" + t.name + "' is not an output tensor");
    for (int32_t o : e->output_ids)
      if (o == i) fail(origin, "engine output '" + t.name + "' is listed twice");
    e->output_ids.push_back(i);
    e->outputs.push_back({t.name, t.dtype, t.shape});
  }

  // Steps: decode, check indices and single definition, then re-infer shapes.
  if (root->steps()) {
    for (const fb::Step* s : *root->steps()) {
      StepRec st;
      st.name = str(s->name());
      if (s->op() >= kOpCount) fail(origin, "step '" + st.name + "' has unknown op code " + std::to_string(s->op()));
      st.kind = static_cast<OpKind>(s->op());
      std::string where = "step '" + st.name + "' (" + std::string(op_name(st.kind)) + ")";
      try {
        st.attrs = decode_attrs(st.kind, s->attrs() ? std::span<const uint8_t>(s->attrs()->data(), s->attrs()->size())
                                                    : std::span<const uint8_t>());
      } catch (const Error& err) {
        fail(origin, where + ": " + err.what());
      }
      if (s->inputs()) st.inputs.assign(s->inputs()->begin(), s->inputs()->end());
      if (s->outputs()) st.outputs.assign(s->outputs()->begin(), s->outputs()->end());
      st.tactic = s->tactic();
      std::vector<TensorView> ins;
      for (int32_t i : st.inputs) {
        check_index(i, true, where);
        if (i == -1) {
          ins.push_back(absent_tensor());
          continue;
        }
        if (!defined[static_cast<size_t>(i)])
          fail(origin, where + " reads '" + e->tensors[static_cast<size_t>(i)].name + "' before it is written");
        const TensorRec& t = e->tensors[static_cast<size_t>(i)];
        TensorView v{t.dtype, t.shape, nullptr, true};
        if (t.kind == TensorKind::kWeight) v.data = const_cast<uint8_t*>(e->weight_data(t));
        ins.push_back(v);
      }
      for (int32_t o : st.outputs) {
        check_index(o, false, where);
        TensorRec& t = e->tensors[static_cast<size_t>(o)];
        if (defined[static_cast<size_t>(o)] || (t.kind != TensorKind::kActivation && t.kind != TensorKind::kOutput))
          fail(origin, where + " writes '" + t.name + "', which is an input, a weight or written twice");
        defined[static_cast<size_t>(o)] = 1;
      }
      std::vector<OutputType> inferred;
      try {
        inferred = infer_shapes(st.kind, st.attrs, ins, st.outputs.size());
      } catch (const Error& err) {
        fail(origin, where + " is inconsistent: " + err.what());
      }
      for (size_t k = 0; k < st.outputs.size(); ++k) {
        const TensorRec& t = e->tensors[static_cast<size_t>(st.outputs[k])];
        if (inferred[k].dtype != t.dtype || inferred[k].shape != t.shape)
          fail(origin, where + " output '" + t.name + "' is recorded as " + std::string(dtype_name(t.dtype)) +
                           shape_string(t.shape) + " but the op computes " +
                           std::string(dtype_name(inferred[k].dtype)) + shape_string(inferred[k].shape));
      }
      e->steps.push_back(std::move(st));
    }
  }
  for (int32_t o : e->output_ids)
    if (!defined[static_cast<size_t>(o)])
      fail(origin, "engine output '" + e->tensors[static_cast<size_t>(o)].name + "' is never computed");
  return e;
}

}  // namespace kiln::detail
