#include "core/shape_infer.h"

#include <algorithm>
#include <array>
#include <string>

namespace kiln {

namespace {

struct FamilyEntries {
  OpFamily family;
  std::span<const InferEntry> entries;
};

struct InferTable {
  std::array<InferFn, kOpCount> fns{};
  std::array<int, kOpCount> count{};
  std::string misplaced;  // the entries a family registers for an op of another family
  InferTable() {
    // The op families, one explicit list in OpFamily order.
    const FamilyEntries families[] = {
        {OpFamily::kElementwise, elementwise_infer_entries()},
        {OpFamily::kReduce, reduce_infer_entries()},
        {OpFamily::kNorm, norm_infer_entries()},
        {OpFamily::kConv, conv_infer_entries()},
        {OpFamily::kGemm, gemm_infer_entries()},
        {OpFamily::kPool, pool_infer_entries()},
        {OpFamily::kResize, resize_infer_entries()},
        {OpFamily::kTensor, tensor_infer_entries()},
        {OpFamily::kRnn, rnn_infer_entries()},
        {OpFamily::kQuant, quant_infer_entries()},
        {OpFamily::kLoss, loss_infer_entries()},
    };
    static_assert(sizeof(families) / sizeof(families[0]) == kOpFamilyCount, "one entry list per op family");
    for (const FamilyEntries& f : families) {
      for (const InferEntry& e : f.entries) {
        fns[static_cast<size_t>(e.kind)] = e.fn;
        ++count[static_cast<size_t>(e.kind)];
        const OpFamily own = op_info(e.kind).family;
        if (own != f.family)
          misplaced += std::string(op_name(e.kind)) + " is registered by the " + std::string(family_name(f.family)) +
                       " family but belongs to the " + std::string(family_name(own)) + " family; ";
      }
    }
  }
};

const InferTable& table() {
  static const InferTable t;
  return t;
}

}  // namespace

bool infer_table_complete(std::string* missing) {
  bool ok = true;
  for (size_t i = 0; i < kOpCount; ++i) {
    if (table().count[i] != 1) {
      ok = false;
      if (missing) *missing += std::string(kOpTable[i].name) + "(" + std::to_string(table().count[i]) + ") ";
    }
  }
  if (!table().misplaced.empty()) {
    ok = false;
    if (missing) *missing += table().misplaced;
  }
  return ok;
}

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
  InferFn fn = table().fns[static_cast<size_t>(kind)];
  if (!fn) throw Error(std::string(info.name) + " has no shape inference");
  std::vector<OutputType> out = fn(kind, attrs, inputs, num_outputs);
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
