// Static shape and type inference for every OpKind. Used by the builder (src/passes) to type the
// graph, and by the runtime when it loads an engine, to check that every recorded shape is what the
// op computes, so a crafted engine cannot make a kernel read or write out of bounds.
#pragma once

#include <span>
#include <vector>

#include "core/op_kind.h"
#include "core/tensor.h"

namespace kiln {

struct OutputType {
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
};

// Infers the outputs of one op. `inputs` holds one view per input slot (exists = false for an
// omitted optional input); a view's data is non-null only when its value is a build-time constant.
// Inputs flagged in OpInfo::const_inputs always have data when they exist: the builder guarantees
// it and reports the node otherwise. Throws kiln::Error describing the problem (the caller adds the
// node name). Returns one OutputType per output the node has (num_outputs).
using InferFn = std::vector<OutputType> (*)(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs,
                                            size_t num_outputs);

struct InferEntry {
  OpKind kind;
  InferFn fn;
};

// Each op family (OpInfo::family) lists its entries, in core/infer/<family>/; infer_shapes() finds
// the entry by kind.
std::span<const InferEntry> elementwise_infer_entries();
std::span<const InferEntry> reduce_infer_entries();
std::span<const InferEntry> norm_infer_entries();
std::span<const InferEntry> conv_infer_entries();
std::span<const InferEntry> gemm_infer_entries();
std::span<const InferEntry> pool_infer_entries();
std::span<const InferEntry> resize_infer_entries();
std::span<const InferEntry> tensor_infer_entries();
std::span<const InferEntry> rnn_infer_entries();
std::span<const InferEntry> quant_infer_entries();
std::span<const InferEntry> loss_infer_entries();

// Checks arity against OpInfo, then runs the op's InferFn.
std::vector<OutputType> infer_shapes(OpKind kind, const Attrs& attrs, std::span<const TensorView> inputs,
                                     size_t num_outputs);
// True if every OpKind has exactly one InferEntry, registered by its own family's function
// (OpInfo::family) (checked by a unit test). Otherwise appends to *missing each op without exactly
// one entry, as "Name(count) ", and each op a family registers that is not of it, naming both families.
bool infer_table_complete(std::string* missing);

// The inputs of a channels-last op (NhwcConv, NhwcQConv, NhwcMaxPool, NhwcAveragePool) stored
// channels-last: the data, the convolutions' weights and their residual.
inline std::vector<size_t> nhwc_permuted_inputs(OpKind kind) {
  if (kind == OpKind::kNhwcConv) return {0, 1, 3};
  if (kind == OpKind::kNhwcQConv) return {0, 3, 9};
  return {0};
}

// Numpy-style broadcast of two shapes; throws kiln::Error naming both shapes if incompatible.
std::vector<int64_t> broadcast_shapes(std::span<const int64_t> a, std::span<const int64_t> b);

template <class A>
const A& attrs_as(const Attrs& attrs) {
  return std::get<A>(attrs);
}

}  // namespace kiln
