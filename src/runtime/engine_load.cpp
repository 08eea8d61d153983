// Engine loading: every byte of the file is untrusted. The order of checks matters: header and
// checksum first (cheap, catches damage), then the flatbuffer verifier, then the meaning of the
// contents (indices, sizes, offsets, views), and last shape inference re-run on every step, so that
// the kernels can trust the shapes they are given.
//
// Views (format 2) share their base's memory. Which bytes hold a value is then tracked per root (a
// tensor that is not a view): every byte of a root is written by at most one step, and a step reads
// a tensor only when all its bytes have been written. This is the single-assignment rule of format
// 1 (each tensor written once, before it is read) extended to tensors that share memory.
//
// Range engines (format 5) hold one plan per bucket, each checked the same way against the one
// weight blob, and then against the engine: the same inputs and outputs by name and type, at the
// bucket's sizes on the ranged axes, and a plan for every combination of the ranges' sizes.
#include <engine_schema_generated.h>

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <set>

#include "core/attrs_codec.h"
#include "core/shape_infer.h"
#include "runtime/cpu/kernels.h"
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
  if (h.format_version < format::kVersion)
    fail(origin, "engine format version " + std::to_string(h.format_version) + " is older than this runtime reads (" +
                     std::to_string(format::kVersion) + "); rebuild the engine with `kiln optimize`");
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

// The byte ranges of each root that steps have written so far, merged where they touch.
class WrittenBytes {
 public:
  explicit WrittenBytes(size_t tensors) : ranges_(tensors), touched_(tensors, 0) {}

  // Records that [lo, hi) of root r is written; false if part of it was written before.
  bool write(size_t r, uint64_t lo, uint64_t hi) {
    touched_[r] = 1;
    if (lo == hi) return true;
    std::map<uint64_t, uint64_t>& m = ranges_[r];
    auto next = m.upper_bound(lo);
    if (next != m.end() && next->first < hi) return false;
    if (next != m.begin() && std::prev(next)->second > lo) return false;
    if (next != m.end() && next->first == hi) {
      hi = next->second;
      next = m.erase(next);
    }
    if (next != m.begin() && std::prev(next)->second == lo) {
      std::prev(next)->second = hi;
      return true;
    }
    m.emplace(lo, hi);
    return true;
  }

  // All of [lo, hi) of root r is written (an empty range: once anything of r is).
  bool covered(size_t r, uint64_t lo, uint64_t hi) const {
    if (!touched_[r]) return false;
    if (lo == hi) return true;
    auto it = ranges_[r].upper_bound(lo);
    return it != ranges_[r].begin() && std::prev(it)->second >= hi;
  }

 private:
  std::vector<std::map<uint64_t, uint64_t>> ranges_;
  std::vector<char> touched_;
};

// Checks each view against its base: they run against the whole table, so after it is read.
void check_views(EngineImpl& e, const std::string& origin) {
  const auto n = static_cast<int32_t>(e.tensors.size());
  for (int32_t i = 0; i < n; ++i) {
    const TensorRec& t = e.tensors[static_cast<size_t>(i)];
    if (t.base == -1) continue;
    const std::string what = "tensor '" + t.name + "'";
    if (t.base < 0 || t.base >= n)
      fail(origin, what + " is a view of tensor " + std::to_string(t.base) + ", which does not exist");
    const TensorRec& b = e.tensors[static_cast<size_t>(t.base)];
    if (t.kind != TensorKind::kActivation)
      fail(origin, what + " is a view but not an activation: inputs, outputs and weights have memory of their own");
    if (b.kind != TensorKind::kActivation && b.kind != TensorKind::kOutput)
      fail(origin, what + " is a view of '" + b.name + "', which is not an activation or output");
    if (b.base != -1)
      fail(origin, what + " is a view of '" + b.name + "', which is a view itself; a view names the tensor " +
                       "that owns the memory");
    if (t.dtype != b.dtype)
      fail(origin, what + " is " + std::string(dtype_name(t.dtype)) + " but its base '" + b.name + "' is " +
                       std::string(dtype_name(b.dtype)) + "; a view has its base's element type");
    if (t.offset % dtype_size(t.dtype) != 0)
      fail(origin, what + " lies at byte " + std::to_string(t.offset) + " of '" + b.name +
                       "', which is not a multiple of its element size");
    if (t.offset > b.bytes || t.bytes > b.bytes - t.offset)
      fail(origin, what + " lies outside its base '" + b.name + "' (bytes " + std::to_string(t.offset) + " to " +
                       std::to_string(t.offset + t.bytes) + " of " + std::to_string(b.bytes) + ")");
    e.view_ids.push_back(i);
  }
}

// The values computed from data-dependent shapes at their upper bound (decision 56), which the
// steps whose shapes they give were planned at: a step that reads a tensor of data-dependent shape
// or value, all of whose inputs have values here (weights, these) or that reads only a shape
// (Shape, Size), with outputs of a shape's size, is evaluated with its CPU kernel, as the
// builder's infer-and-fold did. An If's condition is not given: its outputs' bound is the larger
// branch's.
class BoundValues {
 public:
  explicit BoundValues(const EngineImpl& e) : e_(e), dynamic_(e.tensors.size(), 0), values_(e.tensors.size()) {}

  // Before inferring st: the bound values of its inputs.
  void give(const StepRec& st, std::vector<TensorView>& ins) const {
    static int64_t nothing = 0;  // data for a value without elements
    for (size_t j = 0; j < st.inputs.size(); ++j) {
      const int32_t i = st.inputs[j];
      if (i < 0 || !values_[static_cast<size_t>(i)] || (st.kind == OpKind::kSelectBranch && j == 0)) continue;
      const std::vector<uint8_t>& v = *values_[static_cast<size_t>(i)];
      ins[j].data = v.empty() ? static_cast<void*>(&nothing) : const_cast<uint8_t*>(v.data());
    }
  }

  // After inferring st: which of its outputs depend on the data, and their bound values.
  void take(const StepRec& st, const std::vector<TensorView>& ins) {
    bool reads = false, known = true;
    for (size_t j = 0; j < st.inputs.size(); ++j) {
      const int32_t i = st.inputs[j];
      if (i < 0) continue;
      reads |= dynamic_[static_cast<size_t>(i)] != 0;
      known &= ins[j].data != nullptr || ((st.kind == OpKind::kShape || st.kind == OpKind::kSize) && j == 0);
    }
    const bool source = has_trait(st.kind, kDataDependent);
    uint64_t out_bytes = 0;
    for (size_t k = 0; k < st.outputs.size(); ++k) {
      const TensorRec& t = e_.tensors[static_cast<size_t>(st.outputs[k])];
      dynamic_[static_cast<size_t>(st.outputs[k])] = reads || has_trait(st.kind, kShapeFromData) || (source && k == 0);
      out_bytes += t.bytes;
    }
    if (!reads || !known || source || out_bytes > kBoundValueBytes || !cpu::cpu_kernel(st.kind)) return;
    std::vector<TensorView> outs;
    std::vector<std::shared_ptr<std::vector<uint8_t>>> made;
    for (int32_t o : st.outputs) {
      const TensorRec& t = e_.tensors[static_cast<size_t>(o)];
      made.push_back(std::make_shared<std::vector<uint8_t>>(t.bytes));
      outs.push_back(TensorView{t.dtype, t.shape, made.back()->data(), true});
    }
    cpu::KernelEnv env{};
    cpu::cpu_kernel(st.kind)(st.kind, st.attrs, ins, outs, env);
    for (size_t k = 0; k < st.outputs.size(); ++k) values_[static_cast<size_t>(st.outputs[k])] = made[k];
  }

 private:
  static constexpr uint64_t kBoundValueBytes = 4096;  // as infer-and-fold's
  const EngineImpl& e_;
  std::vector<char> dynamic_;
  std::vector<std::shared_ptr<std::vector<uint8_t>>> values_;
};

// One plan: the tensors and steps of `root` (an engine, or a bucket's plan of a range engine),
// checked as described at the top. e.weights and e.weights_bytes are set.
void parse_plan(const fb::Engine* root, EngineImpl* e, const std::string& origin) {
  auto str = [](const flatbuffers::String* s) { return s ? s->str() : std::string(); };
  e->producer = str(root->producer());
  e->target = str(root->target());
  e->model_name = str(root->model_name());
  e->cuda_version = root->cuda_version();
  e->cudnn_version = root->cudnn_version();
  e->cublaslt_version = root->cublaslt_version();
  e->kernel_arch = root->kernel_arch();
  if (e->kernel_arch != 0 && (e->kernel_arch < 50 || e->kernel_arch > 200))
    fail(origin, "kernel architecture " + std::to_string(e->kernel_arch) + " is not a GPU's");
  if (e->kernel_arch != 0 && e->target == "cpu")
    fail(origin, "a CPU engine records GPU kernels (sm_" + std::to_string(e->kernel_arch) + ")");
  e->arena_bytes = root->arena_bytes();
  if (e->arena_bytes > kMaxTensorBytes) fail(origin, "activation arena size is implausible");
  const uint64_t weights_bytes = e->weights_bytes;

  if (!root->tensors()) fail(origin, "engine has no tensor table");
  for (const fb::Tensor* t : *root->tensors()) {
    TensorRec r;
    r.name = str(t->name());
    if (!dtype_valid(t->dtype())) fail(origin, "tensor '" + r.name + "' has an invalid element type");
    r.dtype = static_cast<DataType>(t->dtype());
    r.shape = format::read_longs(t->shape());
    if (r.shape.size() > 16) fail(origin, "tensor '" + r.name + "' has rank above 16");
    r.bytes = tensor_bytes(r.shape, r.dtype, origin, r.name);
    auto kind = static_cast<uint8_t>(t->kind());
    if (kind > static_cast<uint8_t>(TensorKind::kActivation))
      fail(origin, "tensor '" + r.name + "' has an invalid kind");
    r.kind = static_cast<TensorKind>(kind);
    r.offset = t->offset();
    r.base = t->base();
    uint64_t limit = r.kind == TensorKind::kWeight ? weights_bytes : e->arena_bytes;
    const bool own_memory = r.kind != TensorKind::kInput && r.base == -1;  // views are checked below
    if (own_memory && (r.offset > limit || r.bytes > limit - r.offset))
      fail(origin, "tensor '" + r.name + "' lies outside its memory region");
    if (own_memory && r.offset % format::kTensorAlign != 0)
      fail(origin, "tensor '" + r.name + "' is not aligned to " + std::to_string(format::kTensorAlign) + " bytes");
    e->tensors.push_back(std::move(r));
  }
  check_views(*e, origin);
  const auto ntensors = static_cast<int32_t>(e->tensors.size());
  auto check_index = [&](int32_t i, bool optional, const std::string& what) {
    if ((optional && i == -1) || (i >= 0 && i < ntensors)) return;
    fail(origin, what + " refers to tensor " + std::to_string(i) + ", which does not exist");
  };

  // Engine inputs and outputs. `defined`: the tensor was written (by a step, or before the run for
  // inputs and weights); `bytes`: which bytes of each root hold values.
  std::vector<char> defined(e->tensors.size(), 0);
  WrittenBytes bytes(e->tensors.size());
  auto root_of = [&](size_t i) { return e->tensors[i].base == -1 ? i : static_cast<size_t>(e->tensors[i].base); };
  auto place = [&](size_t i) {
    const TensorRec& t = e->tensors[i];
    const uint64_t lo = t.base == -1 ? 0 : t.offset;
    return std::pair{lo, lo + t.bytes};
  };
  auto readable = [&](size_t i) {
    auto [lo, hi] = place(i);
    return bytes.covered(root_of(i), lo, hi);
  };
  for (size_t i = 0; i < e->tensors.size(); ++i)
    if (e->tensors[i].kind == TensorKind::kWeight) {
      defined[i] = 1;
      bytes.write(i, 0, e->tensors[i].bytes);
    }
  if (!root->inputs() || !root->outputs()) fail(origin, "engine lists no inputs or outputs");
  for (int32_t i : *root->inputs()) {
    check_index(i, false, "engine input");
    TensorRec& t = e->tensors[static_cast<size_t>(i)];
    if (t.kind != TensorKind::kInput || defined[static_cast<size_t>(i)])
      fail(origin, "engine input '" + t.name + "' is not an input tensor");
    defined[static_cast<size_t>(i)] = 1;
    bytes.write(static_cast<size_t>(i), 0, t.bytes);
    for (const TensorInfo& in : e->inputs)  // Context::set_input finds inputs by name
      if (in.name == t.name) fail(origin, "two engine inputs are named '" + t.name + "'");
    e->input_ids.push_back(i);
    e->inputs.push_back({t.name, t.dtype, t.shape});
  }
  for (int32_t i : *root->outputs()) {
    check_index(i, false, "engine output");
    const TensorRec& t = e->tensors[static_cast<size_t>(i)];
    if (t.kind != TensorKind::kOutput) fail(origin, "engine output '" + t.name + "' is not an output tensor");
    for (int32_t o : e->output_ids)
      if (o == i) fail(origin, "engine output '" + t.name + "' is listed twice");
    for (const TensorInfo& out : e->outputs)  // Context::output finds outputs by name
      if (out.name == t.name) fail(origin, "two engine outputs are named '" + t.name + "'");
    e->output_ids.push_back(i);
    e->outputs.push_back({t.name, t.dtype, t.shape});
  }

  // Steps: decode, check indices and single definition, then re-infer shapes. Values computed
  // from data-dependent shapes are evaluated at their bound, as the builder did (BoundValues).
  BoundValues bounds(*e);
  if (root->steps()) {
    for (const fb::Step* s : *root->steps()) {
      StepRec st;
      st.name = str(s->name());
      if (s->op() >= kOpCount) fail(origin, "step '" + st.name + "' has unknown op code " + std::to_string(s->op()));
      st.kind = static_cast<OpKind>(s->op());
      std::string where = step_name(st);
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
        if (!readable(static_cast<size_t>(i)))
          fail(origin, where + " reads '" + e->tensors[static_cast<size_t>(i)].name + "' before it is written");
        const TensorRec& t = e->tensors[static_cast<size_t>(i)];
        TensorView v{t.dtype, t.shape, nullptr, true};
        if (t.kind == TensorKind::kWeight) v.data = const_cast<uint8_t*>(e->weight_data(t));
        ins.push_back(v);
      }
      bounds.give(st, ins);
      for (int32_t o : st.outputs) {
        check_index(o, false, where);
        TensorRec& t = e->tensors[static_cast<size_t>(o)];
        if (defined[static_cast<size_t>(o)] || (t.kind != TensorKind::kActivation && t.kind != TensorKind::kOutput))
          fail(origin, where + " writes '" + t.name + "', which is an input, a weight or written twice");
        defined[static_cast<size_t>(o)] = 1;
        auto [lo, hi] = place(static_cast<size_t>(o));
        if (!bytes.write(root_of(static_cast<size_t>(o)), lo, hi))
          fail(origin, where + " writes '" + t.name + "', whose bytes in '" +
                           e->tensors[root_of(static_cast<size_t>(o))].name + "' another step already wrote");
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
      try {
        bounds.take(st, ins);
      } catch (const Error& err) {
        fail(origin, where + ": evaluating it at the bound of its data-dependent inputs failed: " + err.what());
      }
      e->steps.push_back(std::move(st));
    }
  }
  for (int32_t o : e->output_ids)
    if (!readable(static_cast<size_t>(o)))
      fail(origin, "engine output '" + e->tensors[static_cast<size_t>(o)].name + "' is never computed");
}

// Format 5: the ranges, and each bucket's plan against the engine's (the largest bucket's).
void parse_ranges(const fb::Engine* root, EngineImpl* e) {
  const std::string& origin = e->origin;
  auto str = [](const flatbuffers::String* s) { return s ? s->str() : std::string(); };
  const size_t nin = e->inputs.size(), nout = e->outputs.size();
  if (root->ranges()) {
    for (const fb::Range* r : *root->ranges()) {
      ShapeRangeInfo info;
      info.name = str(r->name());
      const std::string what = "range '" + info.name + "'";
      info.lo = r->lo();
      info.hi = r->hi();
      if (info.lo < 1 || info.lo > info.hi || info.hi > kMaxDim)
        fail(origin, what + " has invalid bounds " + std::to_string(info.lo) + ".." + std::to_string(info.hi));
      if (!r->input_axes() || r->input_axes()->size() != nin)
        fail(origin, what + " does not give an axis for every input");
      for (size_t i = 0; i < nin; ++i) {
        const int axis = r->input_axes()->Get(static_cast<flatbuffers::uoffset_t>(i));
        if (axis == -1) continue;
        const TensorInfo& t = e->inputs[i];
        if (axis < 0 || static_cast<size_t>(axis) >= t.shape.size())
          fail(origin, what + " names axis " + std::to_string(axis) + " of input '" + t.name + "', which has rank " +
                           std::to_string(t.shape.size()));
        if (t.shape[static_cast<size_t>(axis)] != info.hi)
          fail(origin, what + " ends at " + std::to_string(info.hi) + " but input '" + t.name + "' has " +
                           std::to_string(t.shape[static_cast<size_t>(axis)]) + " on axis " + std::to_string(axis));
        for (const ShapeRangeInfo& other : e->ranges)
          for (const auto& [name, a] : other.inputs)
            if (name == t.name && a == axis)
              fail(origin, what + " and range '" + other.name + "' both range axis " + std::to_string(axis) +
                               " of input '" + t.name + "'");
        info.inputs.emplace_back(t.name, axis);
      }
      if (info.inputs.empty()) fail(origin, what + " ranges no input");
      info.pad_rows = r->pad_rows();
      info.why_exact = str(r->why_exact());
      if (info.pad_rows) {
        if (!r->output_axes() || r->output_axes()->size() != nout)
          fail(origin, what + " pads rows but does not give every output's axis of rows");
        for (size_t i = 0; i < nout; ++i) {
          const int axis = r->output_axes()->Get(static_cast<flatbuffers::uoffset_t>(i));
          const TensorInfo& t = e->outputs[i];
          if (axis != -1 && (axis < 0 || static_cast<size_t>(axis) >= t.shape.size() ||
                             t.shape[static_cast<size_t>(axis)] != info.hi))
            fail(origin, what + " names axis " + std::to_string(axis) + " of output '" + t.name + "' " +
                             shape_string(t.shape) + " as its rows, which is not an axis of size " +
                             std::to_string(info.hi));
          for (const ShapeRangeInfo& other : e->ranges)
            for (const auto& [name, a] : other.outputs)
              if (axis != -1 && name == t.name && a == axis)
                fail(origin, what + " and range '" + other.name + "' both pad axis " + std::to_string(axis) +
                                 " of output '" + t.name + "'");
          info.outputs.emplace_back(t.name, axis);
        }
      }
      // Padding and slicing (runtime/cuda/copy_corner.h) handle tensors of rank 8 or less.
      for (const auto& list : {&info.inputs, &info.outputs})
        for (const auto& [name, axis] : *list) {
          const std::vector<TensorInfo>& io = list == &info.inputs ? e->inputs : e->outputs;
          for (const TensorInfo& t : io)
            if (t.name == name && axis >= 0 && t.shape.size() > 8)
              fail(origin, what + " ranges '" + name + "', of rank " + std::to_string(t.shape.size()) +
                               "; a range engine's ranged tensors have rank 8 or less");
        }
      e->ranges.push_back(std::move(info));
      e->top_sizes.push_back(e->ranges.back().hi);
    }
  }
  const size_t nr = e->ranges.size();
  if (nr > 8) fail(origin, "engine has more than 8 ranged dimensions");
  if (!root->buckets() || root->buckets()->size() == 0) {
    for (ShapeRangeInfo& r : e->ranges) r.buckets = {r.hi};
    return;
  }
  if (nr == 0) fail(origin, "engine has bucket plans but no ranges");
  if (root->buckets()->size() > 4096) fail(origin, "engine has implausibly many bucket plans");
  std::set<std::vector<int64_t>> seen{e->top_sizes};
  std::vector<std::set<int64_t>> per_range(nr);
  for (size_t k = 0; k < nr; ++k) per_range[k].insert(e->ranges[k].hi);
  for (const fb::Bucket* b : *root->buckets()) {
    EngineImpl::BucketPlan bp;
    bp.sizes = format::read_longs(b->sizes());
    std::string where = "bucket [";
    for (size_t k = 0; k < bp.sizes.size(); ++k) {
      if (k) where += ',';
      where += std::to_string(bp.sizes[k]);
    }
    where += "]";
    if (bp.sizes.size() != nr) fail(origin, where + " does not give a size for every range");
    for (size_t k = 0; k < nr; ++k) {
      if (bp.sizes[k] < e->ranges[k].lo || bp.sizes[k] > e->ranges[k].hi)
        fail(origin, where + " is outside range '" + e->ranges[k].name + "'");
      per_range[k].insert(bp.sizes[k]);
    }
    if (!seen.insert(bp.sizes).second) fail(origin, where + " is listed twice");
    if (!e->buckets.empty() && !(e->buckets.back().sizes < bp.sizes))
      fail(origin, where + " is out of order: buckets are listed smallest first");
    if (!b->plan()) fail(origin, where + " has no plan");
    bp.plan = std::make_unique<EngineImpl>();
    EngineImpl& p = *bp.plan;
    p.origin = origin + " (" + where + ")";
    p.format_version = e->format_version;
    p.weights = e->weights;
    p.weights_bytes = e->weights_bytes;
    p.gpu_weights = e->gpu_weights;
    if (b->plan()->ranges() || b->plan()->buckets()) fail(origin, where + "'s plan has ranges or buckets of its own");
    parse_plan(b->plan(), &p, p.origin);
    if (p.target != e->target) fail(origin, where + " is for " + p.target + ", the engine for " + e->target);
    if (p.kernel_arch != e->kernel_arch) {
      auto limit = [](int a) { return a ? "sm_" + std::to_string(a) + "'s kernels" : std::string("none"); };
      fail(origin, where + " is limited to " + limit(p.kernel_arch) + ", the engine to " + limit(e->kernel_arch));
    }
    // The same inputs and outputs, at the bucket's sizes.
    auto same_io = [&](const std::vector<TensorInfo>& mine, const std::vector<TensorInfo>& top, bool inputs) {
      const char* what = inputs ? "input" : "output";
      if (mine.size() != top.size())
        fail(origin, where + " has " + std::to_string(mine.size()) + " " + what + "s, the engine " +
                         std::to_string(top.size()));
      for (size_t i = 0; i < mine.size(); ++i) {
        const TensorInfo& a = mine[i];
        const TensorInfo& t = top[i];
        if (a.name != t.name || a.dtype != t.dtype || a.shape.size() != t.shape.size())
          fail(origin, where + " " + what + " " + std::to_string(i) + " is '" + a.name + "' " +
                           std::string(dtype_name(a.dtype)) + shape_string(a.shape) + ", the engine's '" + t.name +
                           "' " + std::string(dtype_name(t.dtype)) + shape_string(t.shape));
        // Inputs: the engine's shape at the bucket's sizes. Outputs: the same on every axis a padded
        // range slices (the runtime slices them by these sizes); with a range that does not pad,
        // their other axes are the plan's own.
        std::vector<int64_t> want = t.shape;
        std::vector<char> owned(t.shape.size(), 0);
        bool exact = false;
        for (size_t k = 0; k < nr; ++k) {
          const ShapeRangeInfo& r = e->ranges[k];
          const auto& axes = inputs ? r.inputs : r.outputs;
          if (!inputs && !r.pad_rows) exact = true;
          for (const auto& [name, axis] : axes)
            if (name == t.name && axis >= 0) {
              want[static_cast<size_t>(axis)] = bp.sizes[k];
              owned[static_cast<size_t>(axis)] = 1;
            }
        }
        for (size_t x = 0; x < want.size(); ++x)
          if ((!exact || owned[x]) && a.shape[x] != want[x])
            fail(origin, where + " " + what + " '" + a.name + "' is " + shape_string(a.shape) + ", expected " +
                             shape_string(want) + (exact ? " on its ranged axes" : ""));
      }
    };
    same_io(p.inputs, e->inputs, true);
    same_io(p.outputs, e->outputs, false);
    e->buckets.push_back(std::move(bp));
  }
  size_t combinations = 1;  // stops growing past the plans there are: no overflow
  for (size_t k = 0; k < nr; ++k) {
    e->ranges[k].buckets.assign(per_range[k].begin(), per_range[k].end());
    combinations = std::min(combinations * per_range[k].size(), seen.size() + 1);
  }
  if (combinations != seen.size())
    fail(origin, "the buckets do not cover every combination of the ranges' sizes (" + std::to_string(seen.size()) +
                     " plans for " + std::to_string(combinations) + " combinations)");
}

}  // namespace

std::shared_ptr<EngineImpl> parse_engine(std::vector<uint8_t> file, std::string origin) {
  auto e = std::make_shared<EngineImpl>();
  e->origin = origin;
  format::EngineHeader h;
  check_header(file, origin, h);
  e->file = std::move(file);
  e->format_version = h.format_version;
  e->weights = e->file.data() + h.weights_offset;
  e->weights_bytes = h.weights_bytes;

  const uint8_t* toc = e->file.data() + h.toc_offset;
  flatbuffers::Verifier verifier(toc, h.toc_bytes, /*max_depth=*/16, /*max_tables=*/10'000'000);
  if (!fb::VerifyEngineBuffer(verifier)) fail(origin, "table of contents is malformed");
  const fb::Engine* root = fb::GetEngine(toc);
  parse_plan(root, e.get(), origin);
  parse_ranges(root, e.get());
  return e;
}

}  // namespace kiln::detail
