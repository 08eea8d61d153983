#include "core/shape_infer.h"

#include <algorithm>
#include <array>
#include <string>

#include "core/op_registry.h"

namespace kiln {

namespace {

const OpRegistry<InferEntry>& table() {
  static const OpRegistry<InferEntry> t({elementwise_infer_entries(), reduce_infer_entries(), norm_infer_entries(),
                                         conv_infer_entries(), gemm_infer_entries(), pool_infer_entries(),
                                         resize_infer_entries(), tensor_infer_entries(), rnn_infer_entries(),
                                         quant_infer_entries(), loss_infer_entries()});
  return t;
}

}  // namespace

bool infer_table_complete(std::string* missing) { return table().check(true, missing); }

std::vector<OutputType> infer_shapes(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs,
                                     size_t num_outputs) {
  const OpInfo& info = op_info(kind);
  if (static_cast<int>(inputs.size()) < info.min_inputs ||
      (info.max_inputs >= 0 && static_cast<int>(inputs.size()) > info.max_inputs))
    throw Error(std::string(info.name) + " takes " + std::to_string(info.min_inputs) + " to " +
                (info.max_inputs < 0 ? std::string("any number of") : std::to_string(info.max_inputs)) +
                " inputs, got " + std::to_string(inputs.size()));
  for (int i = 0; i < info.min_inputs; ++i)
    if (!inputs[i].exists) throw Error(std::string(info.name) + " input " + std::to_string(i) + " is required");
  if (static_cast<int>(num_outputs) < info.min_outputs ||
      (info.max_outputs >= 0 && static_cast<int>(num_outputs) > info.max_outputs))
    throw Error(std::string(info.name) + " cannot have " + std::to_string(num_outputs) + " outputs");
  if (attrs.index() != info.attrs_index) throw Error(std::string(info.name) + ": attributes of the wrong kind");
  for (size_t i = 0; i < inputs.size() && i < 32; ++i)
    if ((info.const_inputs >> i & 1u) && inputs[i].exists && !inputs[i].data)
      throw Error(std::string(info.name) + " input " + std::to_string(i) +
                  " determines the output shape and must be a constant when the engine is built");
  const InferEntry* entry = table().find(kind);
  if (!entry) throw Error(std::string(info.name) + " has no shape inference");
  std::vector<OutputType> out = entry->fn(kind, attrs, inputs, num_outputs);
  if (out.size() != num_outputs) throw Error(std::string(info.name) + ": internal: wrong output count from inference");
  for (const OutputType& o : out)
    for (int64_t d : o.shape)
      if (d < 0) throw Error(std::string(info.name) + ": inferred a negative dimension");
  return out;
}

std::vector<int64_t> broadcast_shapes(std::span<const int64_t> a, std::span<const int64_t> b) {
  size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      throw Error("shapes " + shape_string({a.begin(), a.end()}) + " and " + shape_string({b.begin(), b.end()}) +
                  " cannot be broadcast together");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace kiln
