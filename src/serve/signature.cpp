#include "serve/signature.h"

#include <algorithm>
#include <array>

namespace kiln::serve {

namespace {

constexpr std::array<std::pair<DataType, std::string_view>, 13> kNames{{
    {DataType::kFloat32, "FP32"},
    {DataType::kFloat16, "FP16"},
    {DataType::kBFloat16, "BF16"},
    {DataType::kFloat64, "FP64"},
    {DataType::kInt8, "INT8"},
    {DataType::kInt16, "INT16"},
    {DataType::kInt32, "INT32"},
    {DataType::kInt64, "INT64"},
    {DataType::kUInt8, "UINT8"},
    {DataType::kUInt16, "UINT16"},
    {DataType::kUInt32, "UINT32"},
    {DataType::kUInt64, "UINT64"},
    {DataType::kBool, "BOOL"},
}};

std::string dims_string(const std::vector<int64_t>& d) { return shape_string(d); }

// The range that can be a batch axis: rows independent (padded between buckets), axis 0 of every
// input and every output. nullptr and why not otherwise.
const ShapeRangeInfo* batch_range(const Engine& e, std::string& why) {
  const auto& ranges = e.ranges();
  if (ranges.empty()) {
    why = "the engine has one fixed shape (build it with --batch LO..HI to batch requests)";
    return nullptr;
  }
  const EngineSummary s = e.summary();
  if (!s.bounded_outputs.empty()) {
    why = "output '" + s.bounded_outputs.front() + "' has a data-dependent size";
    return nullptr;
  }
  for (const ShapeRangeInfo& r : ranges) {
    auto axis0 = [](const std::vector<std::pair<std::string, int>>& v, const std::string& name) {
      return std::any_of(v.begin(), v.end(), [&](const auto& p) { return p.first == name && p.second == 0; });
    };
    if (!r.pad_rows) continue;
    bool all = true;
    for (const TensorInfo& t : e.inputs()) all = all && axis0(r.inputs, t.name);
    for (const TensorInfo& t : e.outputs()) all = all && axis0(r.outputs, t.name);
    if (all) return &r;
  }
  why = "no range of the engine is a leading axis of independent rows of every input and output";
  if (ranges.size() == 1 && !ranges[0].pad_rows && !ranges[0].why_exact.empty())
    why += " (" + ranges[0].why_exact + ")";
  return nullptr;
}

ServedTensor served(const TensorInfo& t, bool batched) {
  ServedTensor s;
  s.name = t.name;
  s.dtype = t.dtype;
  s.max_dims.assign(t.shape.begin() + (batched ? 1 : 0), t.shape.end());
  s.dims = s.max_dims;
  for (int64_t d : s.max_dims) s.bounds.emplace_back(d, d);
  return s;
}

void mark_range(ServedTensor& s, int axis, bool batched, int64_t lo, int64_t hi) {
  const int a = axis - (batched ? 1 : 0);
  if (a < 0 || a >= static_cast<int>(s.dims.size())) return;
  s.dims[a] = -1;
  s.bounds[a] = {lo, hi};
}

}  // namespace

std::string_view kserve_datatype(DataType t) {
  for (const auto& [d, n] : kNames)
    if (d == t) return n;
  return "INVALID";
}

std::optional<DataType> from_kserve_datatype(std::string_view name) {
  for (const auto& [d, n] : kNames)
    if (n == name) return d;
  return std::nullopt;
}

Signature signature(const Engine& engine) {
  Signature sig;
  const ShapeRangeInfo* batch = batch_range(engine, sig.why_not_batched);
  if (batch) {
    sig.max_batch_size = batch->hi;
    sig.min_batch = batch->lo;
    sig.buckets = batch->buckets;
    sig.why_not_batched.clear();
  }
  const bool batched = batch != nullptr;
  for (const TensorInfo& t : engine.inputs()) sig.inputs.push_back(served(t, batched));
  for (const TensorInfo& t : engine.outputs()) sig.outputs.push_back(served(t, batched));
  const EngineSummary summary = engine.summary();
  for (const ShapeRangeInfo& r : engine.ranges()) {
    if (&r == batch) continue;
    for (const auto& [name, axis] : r.inputs)
      for (ServedTensor& s : sig.inputs)
        if (s.name == name) mark_range(s, axis, batched, r.lo, r.hi);
    for (const auto& [name, axis] : r.outputs)
      for (ServedTensor& s : sig.outputs)
        if (s.name == name) mark_range(s, axis, batched, r.lo, r.hi);
    // Without padded rows the engine does not say which output dimensions follow the range: every
    // dimension of the range's top size may.
    if (!r.pad_rows)
      for (ServedTensor& s : sig.outputs)
        for (size_t a = 0; a < s.dims.size(); ++a)
          if (s.max_dims[a] == r.hi) mark_range(s, static_cast<int>(a) + (batched ? 1 : 0), batched, 0, r.hi);
  }
  // Data-dependent outputs: any size up to the bound.
  for (const std::string& name : summary.bounded_outputs)
    for (ServedTensor& s : sig.outputs)
      if (s.name == name)
        for (size_t a = 0; a < s.dims.size(); ++a) mark_range(s, static_cast<int>(a), false, 0, s.max_dims[a]);
  return sig;
}

std::string check_tensor(const Signature& sig, const ServedTensor& t, std::string_view datatype,
                         const std::vector<int64_t>& shape) {
  const std::string what = "input '" + t.name + "'";
  const auto dt = from_kserve_datatype(datatype);
  if (!dt || *dt != t.dtype)
    return what + " has datatype " + std::string(datatype) + ", the model takes " +
           std::string(kserve_datatype(t.dtype));
  const bool batched = sig.max_batch_size > 0;
  const size_t rank = t.dims.size() + (batched ? 1 : 0);
  std::vector<int64_t> expected = t.dims;
  if (batched) expected.insert(expected.begin(), -1);
  if (shape.size() != rank)
    return what + " has shape " + dims_string(shape) + ", the model takes " + dims_string(expected) + " (rank " +
           std::to_string(rank) + ")";
  if (batched && (shape[0] < 1 || shape[0] > sig.max_batch_size))
    return what + " has a batch of " + std::to_string(shape[0]) + ", the model takes 1 to " +
           std::to_string(sig.max_batch_size) + " (split the request)";
  for (size_t a = 0; a < t.dims.size(); ++a) {
    const int64_t d = shape[a + (batched ? 1 : 0)];
    const auto [lo, hi] = t.bounds[a];
    if (d < lo || d > hi)
      return what + " has shape " + dims_string(shape) + ", the model takes " + dims_string(expected) +
             (lo == hi ? ""
                       : " with dimension " + std::to_string(a + (batched ? 1 : 0)) + " in " + std::to_string(lo) +
                             ".." + std::to_string(hi));
  }
  return "";
}

std::string check_ranges(const Engine& engine,
                         const std::function<const std::vector<int64_t>*(const std::string&)>& shape_of) {
  for (const ShapeRangeInfo& r : engine.ranges()) {
    std::string first;
    int64_t size = -1;
    for (const auto& [name, axis] : r.inputs) {
      const std::vector<int64_t>* shape = shape_of(name);
      if (!shape || axis < 0 || static_cast<size_t>(axis) >= shape->size()) continue;
      const int64_t d = (*shape)[static_cast<size_t>(axis)];
      if (size < 0) {
        size = d;
        first = name;
      } else if (d != size) {
        return "input '" + name + "' has " + std::to_string(d) + " on dimension " + std::to_string(axis) + " (range '" +
               r.name + "'), input '" + first + "' has " + std::to_string(size) +
               ": the dimensions of a range take one size";
      }
    }
    if (size >= 0 && !r.pad_rows && std::find(r.buckets.begin(), r.buckets.end(), size) == r.buckets.end()) {
      std::string sizes;
      for (int64_t b : r.buckets) {
        if (!sizes.empty()) sizes += ',';
        sizes += std::to_string(b);
      }
      return "input '" + first + "' has " + std::to_string(size) + " on its dimension of range '" + r.name +
             "', which the engine runs only at the sizes it was built for (" + sizes + ")";
    }
  }
  return "";
}

}  // namespace kiln::serve
