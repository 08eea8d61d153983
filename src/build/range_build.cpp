// The plans of a range engine are built one by one, each exactly as `kiln optimize` builds a fixed
// engine of that shape, so that a bucket's rows equal its fixed engine's bit for bit. The fixed
// engine files are then merged: their tables are copied into one file as bucket plans, and their
// weights enter one blob by content (XXH64 of the bytes, then compared), so identical weights, which
// is all of them unless a precision choice or INT8 calibration differs per shape, are stored once.
#include "build/range_build.h"

#include <engine_schema_generated.h>
#include <fmt/format.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "build/engine_writer.h"
#include "build/row_independence.h"
#include "build/scratch_file.h"
#include "kiln/engine.h"
#include "passes/pass.h"
#include "runtime/engine_format.h"

namespace kiln::build {

namespace {

// A plan's tables, copied out of a fixed engine file, its weight offsets already into the merged blob.
struct Plan {
  std::vector<int64_t> sizes;
  std::string producer, target, model_name;
  int cuda_version = 0, cudnn_version = 0, cublaslt_version = 0, kernel_arch = 0;
  struct Tensor {
    std::string name;
    uint8_t dtype;
    std::vector<int64_t> shape;
    fb::TensorKind kind;
    uint64_t offset;
    int32_t base;
  };
  struct Step {
    uint16_t op;
    std::string name;
    std::vector<int32_t> inputs, outputs;
    std::vector<uint8_t> attrs;
    int32_t tactic;
  };
  std::vector<Tensor> tensors;
  std::vector<Step> steps;
  std::vector<int32_t> inputs, outputs;
  uint64_t arena_bytes = 0;
};

// The merged weight blob: each distinct run of bytes once, 64-byte aligned.
class WeightBlob {
 public:
  uint64_t add(const uint8_t* p, size_t n) {
    const uint64_t h = XXH64(p, n, 0);
    for (auto [it, end] = by_hash_.equal_range(h); it != end; ++it)
      if (sizes_[it->second] == n && std::memcmp(bytes_.data() + it->second, p, n) == 0) return it->second;
    bytes_.resize(format::align_up(bytes_.size(), format::kTensorAlign), 0);
    const uint64_t at = bytes_.size();
    bytes_.insert(bytes_.end(), p, p + n);
    by_hash_.emplace(h, at);
    sizes_[at] = n;
    return at;
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
  std::multimap<uint64_t, uint64_t> by_hash_;  // hash -> offset
  std::map<uint64_t, size_t> sizes_;           // offset -> bytes
};

// Copies a fixed engine file's tables (written by write_engine moments ago) into a Plan.
Plan read_plan(const std::vector<uint8_t>& file, std::vector<int64_t> sizes, WeightBlob& blob) {
  format::EngineHeader h;
  std::memcpy(&h, file.data(), sizeof h);
  const uint8_t* toc = file.data() + h.toc_offset;
  flatbuffers::Verifier verifier(toc, h.toc_bytes, 16, 10'000'000);
  if (!fb::VerifyEngineBuffer(verifier)) throw Error("internal: a bucket's engine does not verify");
  const fb::Engine* e = fb::GetEngine(toc);
  auto str = [](const flatbuffers::String* s) { return s ? s->str() : std::string(); };
  Plan p;
  p.sizes = std::move(sizes);
  p.producer = str(e->producer());
  p.target = str(e->target());
  p.model_name = str(e->model_name());
  p.cuda_version = e->cuda_version();
  p.cudnn_version = e->cudnn_version();
  p.cublaslt_version = e->cublaslt_version();
  p.kernel_arch = e->kernel_arch();
  p.arena_bytes = e->arena_bytes();
  const uint8_t* weights = file.data() + h.weights_offset;
  for (const fb::Tensor* t : *e->tensors()) {
    Plan::Tensor x{str(t->name()), t->dtype(), format::read_longs(t->shape()), t->kind(), t->offset(), t->base()};
    if (x.kind == fb::TensorKind::Weight) {
      uint64_t n = dtype_size(static_cast<DataType>(x.dtype));
      for (int64_t d : x.shape) n *= static_cast<uint64_t>(d);
      x.offset = blob.add(weights + x.offset, n);
    }
    p.tensors.push_back(std::move(x));
  }
  if (e->steps())
    for (const fb::Step* s : *e->steps()) {
      Plan::Step x{s->op(), str(s->name()), {}, {}, {}, s->tactic()};
      if (s->inputs()) x.inputs.assign(s->inputs()->begin(), s->inputs()->end());
      if (s->outputs()) x.outputs.assign(s->outputs()->begin(), s->outputs()->end());
      if (s->attrs()) x.attrs.assign(s->attrs()->begin(), s->attrs()->end());
      p.steps.push_back(std::move(x));
    }
  p.inputs.assign(e->inputs()->begin(), e->inputs()->end());
  p.outputs.assign(e->outputs()->begin(), e->outputs()->end());
  return p;
}

bool int8_steps(const Plan& p) {
  for (const Plan::Step& s : p.steps) {
    const auto k = static_cast<OpKind>(s.op);
    if (k == OpKind::kQConv || k == OpKind::kNhwcQConv || k == OpKind::kQMatMul) return true;
  }
  return false;
}

flatbuffers::Offset<fb::Engine> write_plan(
    flatbuffers::FlatBufferBuilder& fbb, const Plan& p,
    flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::Range>>> ranges,
    flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::Bucket>>> buckets) {
  std::vector<flatbuffers::Offset<fb::Tensor>> tensors;
  for (const Plan::Tensor& t : p.tensors)
    tensors.push_back(
        fb::CreateTensor(fbb, fbb.CreateString(t.name), t.dtype, fbb.CreateVector(t.shape), t.kind, t.offset, t.base));
  std::vector<flatbuffers::Offset<fb::Step>> steps;
  for (const Plan::Step& s : p.steps)
    steps.push_back(fb::CreateStep(fbb, s.op, fbb.CreateString(s.name), fbb.CreateVector(s.inputs),
                                   fbb.CreateVector(s.outputs), fbb.CreateVector(s.attrs), s.tactic));
  return fb::CreateEngine(fbb, fbb.CreateString(p.producer), fbb.CreateString(p.target), fbb.CreateString(p.model_name),
                          fbb.CreateVector(tensors), fbb.CreateVector(steps), fbb.CreateVector(p.inputs),
                          fbb.CreateVector(p.outputs), p.arena_bytes, ranges, buckets, p.cuda_version, p.cudnn_version,
                          p.cublaslt_version, p.kernel_arch);
}

// Where each range may be padded (build/row_independence.h), from the graph bound at the largest
// bucket and at the range's bottom (folded, before the rewrites: the analysis knows ONNX's ops).
struct Rows {
  bool pad = false;
  std::string why_not;
  std::map<std::string, int> outputs;  // output name -> its axis of rows
};

std::vector<Rows> analyse_rows(const graph::Graph& g, const BuildOptions& o, const std::vector<RangeSpec>& ranges,
                               const std::vector<int64_t>& top) {
  auto bound_at = [&](const std::vector<int64_t>& sizes) {
    const BuildOptions b = bucket_options(o, ranges, sizes);
    graph::Graph x = g;
    passes::bind_inputs(x, b);
    passes::infer_and_fold(x, b);
    return x;
  };
  const graph::Graph big = bound_at(top);
  std::vector<Rows> r;
  for (size_t k = 0; k < ranges.size(); ++k) {
    const RangeSpec& range = ranges[k];
    // The same graph with this range at its bottom, for the constants that vary along it.
    std::vector<int64_t> sizes = top;
    sizes[k] = range.range.lo;
    const graph::Graph small = bound_at(sizes);
    std::map<graph::ValueId, int> axes;
    for (const auto& [name, axis] : range.inputs) axes[big.find(name)] = axis;
    RowAxes a = row_axes(big, axes, &small, range.range.lo);
    Rows x;
    x.pad = a.why_not.empty();
    x.why_not = a.why_not;
    for (const auto& [id, axis] : a.outputs) x.outputs[big.value(id).name] = axis;
    r.push_back(std::move(x));
  }
  return r;
}

}  // namespace

bool has_ranges(const BuildOptions& o) {
  if (!o.batch_range.fixed()) return true;
  for (const auto& [name, shape] : o.shape_ranges)
    for (const DimRange& d : shape)
      if (!d.fixed()) return true;
  return false;
}

std::vector<RangeSpec> resolve_ranges(const graph::Graph& g, const BuildOptions& o) {
  std::vector<RangeSpec> ranges;
  std::map<std::string, std::string> given_by;  // a range's name -> the --shape that gave it
  auto input = [&](const std::string& name) -> const graph::Value& {
    const graph::ValueId id = g.find(name);
    if (id == graph::kNoValue || std::find(g.inputs.begin(), g.inputs.end(), id) == g.inputs.end())
      throw Error("--shape " + name + ": the model has no input of that name");
    return g.value(id);
  };
  auto named = [](const graph::Value& v, size_t a) {
    return v.has_shape && a < v.shape.size() && v.shape[a] < 0 && a < v.dim_params.size() && !v.dim_params[a].empty();
  };
  auto find = [&](const std::string& name) {
    for (RangeSpec& r : ranges)
      if (r.name == name) return &r;
    return static_cast<RangeSpec*>(nullptr);
  };
  std::set<std::string> given_names;  // dimension names a --shape sizes, fixed or ranged
  for (const auto& [name, shape] : o.shape_ranges) {
    const graph::Value& v = input(name);
    if (v.has_shape && v.shape.size() != shape.size())
      throw Error("--shape " + name + "=" + range_string(shape) + " has rank " + std::to_string(shape.size()) +
                  "; the model's input has rank " + std::to_string(v.shape.size()));
    for (size_t a = 0; a < shape.size(); ++a) {
      if (named(v, a)) given_names.insert(v.dim_params[a]);
      if (shape[a].fixed()) continue;
      if (v.has_shape && v.shape[a] >= 0)
        throw Error("--shape " + name + "=" + range_string(shape) + ": dimension " + std::to_string(a) +
                    " is fixed at " + std::to_string(v.shape[a]) + " in the model and cannot take a range");
      const std::string key = named(v, a) ? v.dim_params[a] : name + "[" + std::to_string(a) + "]";
      RangeSpec* r = find(key);
      if (r && !(r->range == shape[a]))
        throw Error("--shape " + name + " gives dimension '" + key + "' the range " + range_string(shape[a]) +
                    " but --shape " + given_by[key] + " gives it " + range_string(r->range));
      if (!r) {
        ranges.push_back({key, shape[a], {}, {}});
        given_by[key] = name;
        r = &ranges.back();
      }
      r->inputs.emplace_back(name, static_cast<int>(a));
    }
  }
  for (const auto& [name, shape] : o.input_shapes) {
    const graph::ValueId id = g.find(name);
    if (id == graph::kNoValue) continue;  // bind-inputs says so
    const graph::Value& v = g.value(id);
    for (size_t a = 0; a < shape.size(); ++a)
      if (named(v, a)) given_names.insert(v.dim_params[a]);
  }
  // Inputs no --shape gives: named dimensions join their range; a leading symbolic one takes --batch.
  const bool batch = !o.batch_range.fixed();
  if (batch && find("batch"))
    throw Error("--batch " + range_string(o.batch_range) + " and --shape " + given_by["batch"] +
                " both give a range to dimension 'batch'; give it once");
  if (batch) ranges.push_back({"batch", o.batch_range, {}, {}});
  for (graph::ValueId id : g.inputs) {
    const graph::Value& v = g.value(id);
    if (o.shape_ranges.count(v.name) || o.input_shapes.count(v.name) || o.constant_inputs.count(v.name)) continue;
    if (!v.has_shape) continue;  // bind-inputs asks for a --shape
    for (size_t a = 0; a < v.shape.size(); ++a) {
      if (v.shape[a] >= 0) continue;
      if (named(v, a)) {
        if (RangeSpec* r = find(v.dim_params[a]); r && r->name != "batch") {
          r->inputs.emplace_back(v.name, static_cast<int>(a));
          continue;
        }
        if (given_names.count(v.dim_params[a])) continue;  // a fixed --shape sizes it
      }
      if (a == 0 && batch) ranges.back().inputs.emplace_back(v.name, 0);
    }
  }
  if (batch && ranges.back().inputs.empty())
    throw Error("--batch " + range_string(o.batch_range) +
                ": no input has a symbolic leading (batch) dimension that no --shape gives; give the range with "
                "--shape NAME=LO..HIx...");
  if (ranges.size() > 8) throw Error("more than 8 ranged dimensions; fix some of them");
  size_t plans = 1;
  for (RangeSpec& r : ranges) {
    r.buckets = o.buckets.empty() ? default_buckets(r.range) : checked_buckets(r.range, o.buckets, "--buckets");
    plans *= r.buckets.size();
  }
  if (plans > 64) {
    std::string dims;
    for (const RangeSpec& r : ranges)
      dims += (dims.empty() ? "" : " x ") + r.name + " (" + std::to_string(r.buckets.size()) + " buckets)";
    throw Error("the ranges make " + std::to_string(plans) + " plans, more than 64: " + dims +
                "; choose fewer with --buckets, or fix a dimension");
  }
  if (!o.buckets.empty() && ranges.size() > 1)
    throw Error("--buckets applies to one range, and there are " + std::to_string(ranges.size()) +
                "; leave it out to take each range's default buckets");
  return ranges;
}

BuildOptions bucket_options(const BuildOptions& o, const std::vector<RangeSpec>& ranges,
                            const std::vector<int64_t>& sizes) {
  BuildOptions b = o;
  b.batch_range = {1, 1};
  b.shape_ranges.clear();
  b.buckets.clear();
  for (size_t k = 0; k < ranges.size(); ++k)
    if (ranges[k].name == "batch") b.batch = sizes[k];
  for (const auto& [name, shape] : o.shape_ranges) {
    std::vector<int64_t> dims;
    for (const DimRange& d : shape) dims.push_back(d.lo);
    for (size_t k = 0; k < ranges.size(); ++k)
      for (const auto& [in, axis] : ranges[k].inputs)
        if (in == name) dims[static_cast<size_t>(axis)] = sizes[k];
    b.input_shapes[name] = dims;
  }
  return b;
}

std::vector<uint8_t> build_range_engine(graph::Graph& g, const BuildOptions& o, BuildReport* report) {
  const std::vector<RangeSpec> ranges = resolve_ranges(g, o);
  // Every combination of the ranges' buckets, the largest (every range at hi) first: errors show
  // early, and its timings fill the shared cache.
  std::vector<std::vector<int64_t>> all{{}};
  for (const RangeSpec& r : ranges) {
    std::vector<std::vector<int64_t>> next;
    for (const auto& prefix : all)
      for (int64_t b : r.buckets) {
        next.push_back(prefix);
        next.back().push_back(b);
      }
    all = std::move(next);
  }
  std::reverse(all.begin(), all.end());
  const std::vector<Rows> rows = analyse_rows(g, o, ranges, all.front());

  const ScratchFile cache(o.timing_cache, "kiln-range");
  WeightBlob blob;
  std::vector<Plan> plans;
  graph::Graph top;
  for (size_t b = 0; b < all.size(); ++b) {
    BuildOptions bo = bucket_options(o, ranges, all[b]);
    bo.timing_cache = cache.path;
    // A GPU INT8 build decides INT8 or float once, at the largest bucket, for every bucket: one
    // precision (and one set of weights) whatever the size of a request.
    if (b > 0 && o.int8 && o.target != "cpu" && !o.force_int8) {
      if (int8_steps(plans.front()))
        bo.force_int8 = true;
      else
        bo.int8 = false;
    }
    std::string label;
    for (size_t k = 0; k < ranges.size(); ++k)
      label += (label.empty() ? "" : ", ") + ranges[k].name + " " + std::to_string(all[b][k]);
    const std::string prefix = fmt::format("bucket {}/{} ({})", b + 1, all.size(), label);
    if (o.log) bo.log = [&](const std::string& m) { o.log(prefix + ": " + m); };
    if (o.progress) {
      auto stage = std::make_shared<std::string>();
      bo.progress = [&o, prefix, stage](const BuildProgress& p) {
        *stage = prefix + ", " + p.stage;
        o.progress(BuildProgress{stage->c_str(), p.done, p.total, p.step});
      };
    }
    graph::Graph gb = g;
    BuildReport r;
    std::vector<uint8_t> file = build_engine(gb, bo, &r);
    plans.push_back(read_plan(file, all[b], blob));
    if (b == 0) {
      top = std::move(gb);
      if (report) *report = std::move(r);
      if (report && !report->precision_choice.empty())
        report->precision_choice += "; every bucket takes the largest one's choice";
    }
  }
  g = std::move(top);

  flatbuffers::FlatBufferBuilder fbb(1 << 16);
  fbb.ForceDefaults(true);
  std::vector<flatbuffers::Offset<fb::Range>> range_tables;
  const Plan& p0 = plans.front();
  auto io_name = [&](int32_t t) { return p0.tensors[static_cast<size_t>(t)].name; };
  for (size_t k = 0; k < ranges.size(); ++k) {
    std::vector<int32_t> in_axes, out_axes;
    for (int32_t t : p0.inputs) {
      int axis = -1;
      for (const auto& [name, a] : ranges[k].inputs)
        if (name == io_name(t)) axis = a;
      in_axes.push_back(axis);
    }
    for (int32_t t : p0.outputs) {
      auto it = rows[k].outputs.find(io_name(t));
      out_axes.push_back(rows[k].pad && it != rows[k].outputs.end() ? it->second : -1);
    }
    range_tables.push_back(fb::CreateRange(fbb, fbb.CreateString(ranges[k].name), ranges[k].range.lo,
                                           ranges[k].range.hi, fbb.CreateVector(in_axes), fbb.CreateVector(out_axes),
                                           rows[k].pad, fbb.CreateString(rows[k].why_not)));
  }
  std::vector<const Plan*> rest;
  for (size_t b = 1; b < plans.size(); ++b) rest.push_back(&plans[b]);
  std::sort(rest.begin(), rest.end(), [](const Plan* a, const Plan* b) { return a->sizes < b->sizes; });
  std::vector<flatbuffers::Offset<fb::Bucket>> buckets;
  for (const Plan* p : rest) {
    auto plan = write_plan(fbb, *p, 0, 0);
    buckets.push_back(fb::CreateBucket(fbb, fbb.CreateVector(p->sizes), plan));
  }
  auto root = write_plan(fbb, p0, fbb.CreateVector(range_tables), fbb.CreateVector(buckets));
  fbb.Finish(root);
  std::vector<uint8_t> file =
      engine_file(std::span<const uint8_t>(fbb.GetBufferPointer(), fbb.GetSize()), blob.bytes());
  if (report) {
    report->engine_bytes = file.size();
    report->weight_bytes = blob.bytes().size();
    report->plans = plans.size();
    for (size_t k = 0; k < ranges.size(); ++k)
      report->ranges.push_back(fmt::format(
          "{} {}: buckets {}; {}", ranges[k].name, range_string(ranges[k].range), buckets_string(ranges[k].buckets),
          rows[k].pad ? "sizes between them run padded with zero rows"
                      : "only these sizes run (rows not independent: " + rows[k].why_not + ")"));
  }
  return file;
}

}  // namespace kiln::build
