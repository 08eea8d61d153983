// How an engine is served: its tensors in KServe v2 terms (datatype names, shapes with -1 for a
// dimension that takes a range) and its batch axis. Shared by `kiln serve` and the Triton backend.
#pragma once

#include <kiln/engine.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::serve {

// KServe v2 / Triton datatype names: "FP32", "INT64", "BOOL", ... ; nullopt for a name Kiln has no
// element type for (e.g. "BYTES").
std::string_view kserve_datatype(DataType t);
std::optional<DataType> from_kserve_datatype(std::string_view name);

struct ServedTensor {
  std::string name;
  DataType dtype = DataType::kFloat32;
  // Without the batch axis when the model is batched; -1 where the engine takes a range.
  std::vector<int64_t> dims;
  // The same with the engine's own sizes at the top of every range (the largest request).
  std::vector<int64_t> max_dims;
  // For each entry of dims: its range's [lo, hi] (lo == hi for a fixed dimension).
  std::vector<std::pair<int64_t, int64_t>> bounds;
};

struct Signature {
  // > 0: every input and output has a leading batch axis whose rows are independent (the engine's
  // range [min_batch, max_batch_size], padded between buckets), so requests can be merged along it;
  // dims above leave it out. 0: no such axis; a request is run alone with its full shape.
  int64_t max_batch_size = 0;
  int64_t min_batch = 1;
  // The batch sizes the engine has plans for, ascending; a size between them runs padded to the next.
  std::vector<int64_t> buckets;
  // Why an engine is not batched (for the log): "", or e.g. "output boxes has a data-dependent size".
  std::string why_not_batched;
  std::vector<ServedTensor> inputs, outputs;
};

Signature signature(const Engine& engine);

// Checks a request's tensor against the signature: dtype, rank and every dimension in its bounds
// (batched models: `shape` includes the batch axis, 1..max_batch_size). Returns "" or what is wrong,
// e.g. "input 'x' has datatype INT64, the model takes FP32".
std::string check_tensor(const Signature& sig, const ServedTensor& t, std::string_view datatype,
                         const std::vector<int64_t>& shape);

// Checks a request's inputs against the engine's ranges, which check_tensor sees one tensor at a
// time: the dimensions of one range take one size (set_input_shape makes the others follow it,
// unbinding the inputs given at the other size, and the run fails), and a range without padded rows
// one of its buckets. `shape_of` gives an input's shape in the request with every axis of the
// engine's (nullptr: not given). Returns "" or what is wrong, e.g. "input 'mask' has 50 on
// dimension 1 (range 'seq'), input 'ids' has 100: the dimensions of a range take one size".
std::string check_ranges(const Engine& engine,
                         const std::function<const std::vector<int64_t>*(const std::string&)>& shape_of);

}  // namespace kiln::serve
