// pad-gemm-columns (GPU targets): a MatMul or FusedMatMul with constant weights B [K, N] whose N is
// not a multiple of 8 gets B (and FusedMatMul's bias) padded with zero columns to the next
// multiple, a wider output, and a Slice back to the N columns it had. cuBLASLt's tensor-core
// kernels need 16-byte aligned rows of B and of the output; with N odd (GPT-2's LM head: 50,257
// columns) it falls back to kernels that reached 126 TFLOP/s on an H200 for [4096, 768] x
// [768, 50257], half of GPT-2-small's time at batch 32. The Slice reads the wide output once and
// writes the narrow one. Only where N is at least kMinColumns: below that the GEMM is small and
// the Slice a step of its own for little gain.
// Guards: B not a 2-D constant; a bias that is not a constant of N elements; a residual Z (it
// would need padding too); N a multiple of 8; CPU targets (its GEMM has no such alignment need).
// After fuse-siblings (widths final), before to-fp16 (the padded constants convert with the rest).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {

namespace {

constexpr int64_t kAlign = 8;  // columns: 16-byte rows in float16 (and in float32)
constexpr int64_t kMinColumns = 1024;

// `bytes` of a row-major [rows, n] constant as [rows, wide], zeros in the added columns.
std::vector<uint8_t> pad_rows(const std::vector<uint8_t>& bytes, int64_t rows, int64_t n, int64_t wide,
                              size_t element) {
  std::vector<uint8_t> out(static_cast<size_t>(rows * wide) * element, 0);
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(bytes.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(r * n) * element),
                static_cast<size_t>(n) * element,
                out.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(r * wide) * element));
  return out;
}

bool pad_at(graph::Graph& g, size_t i, Tally& tally, std::vector<graph::Node>& slices) {
  graph::Node& n = g.nodes[i];
  if ((n.kind != OpKind::kMatMul && n.kind != OpKind::kFusedMatMul) || n.inputs.size() < 2 ||
      n.outputs.size() != 1)
    return false;
  if (n.inputs.size() > 3 && n.inputs[3] != graph::kNoValue) return false;  // a residual Z
  const graph::Value& b = g.value(n.inputs[1]);
  if (!b.is_constant() || b.shape.size() != 2) return false;
  const int64_t k = b.shape[0], cols = b.shape[1], wide = (cols + kAlign - 1) / kAlign * kAlign;
  if (cols % kAlign == 0 || cols < kMinColumns) return false;
  const graph::ValueId y = n.outputs[0];
  const std::vector<int64_t> y_shape = g.value(y).shape;
  if (y_shape.empty() || y_shape.back() != cols) return false;
  const bool has_bias = n.inputs.size() > 2 && n.inputs[2] != graph::kNoValue;
  if (has_bias && (!g.value(n.inputs[2]).is_constant() || numel(g.value(n.inputs[2]).shape) != cols)) return false;
  // Values are copied out before add_constant grows the value table.
  const DataType b_type = b.dtype;
  std::vector<uint8_t> b_bytes = pad_rows(*b.data, k, cols, wide, dtype_size(b_type));
  const std::string b_name = b.name;
  n.inputs[1] = g.add_constant(g.unique_name(b_name + "_padded"), b_type, {k, wide}, std::move(b_bytes));
  if (has_bias) {
    const graph::Value& bias = g.value(n.inputs[2]);
    const DataType bias_type = bias.dtype;
    std::vector<uint8_t> bias_bytes = pad_rows(*bias.data, 1, cols, wide, dtype_size(bias_type));
    const std::string bias_name = bias.name;
    n.inputs[2] = g.add_constant(g.unique_name(bias_name + "_padded"), bias_type, {wide}, std::move(bias_bytes));
  }
  graph::Value wide_y;
  wide_y.name = g.unique_name(g.value(y).name + "_padded");
  wide_y.dtype = g.value(y).dtype;
  wide_y.shape = y_shape;
  wide_y.shape.back() = wide;
  wide_y.has_shape = true;
  const graph::ValueId wide_id = g.add_value(std::move(wide_y));
  g.nodes[i].outputs = {wide_id};
  auto i64 = [&](const std::string& name, int64_t v) {
    std::vector<uint8_t> bytes(sizeof v);
    std::memcpy(bytes.data(), &v, sizeof v);
    return g.add_constant(g.unique_name(g.nodes[i].name + name), DataType::kInt64, {1}, std::move(bytes));
  };
  const graph::ValueId starts = i64("_slice_starts", 0), ends = i64("_slice_ends", cols), axes = i64("_slice_axes", -1);
  slices.push_back(graph::Node{g.nodes[i].name + "_columns", OpKind::kSlice, NoAttrs{}, {wide_id, starts, ends, axes},
                               {y}, g.nodes[i].origin});
  tally.add(std::string(op_name(g.nodes[i].kind)));
  return true;
}

}  // namespace

PassResult pad_gemm_columns(graph::Graph& g, const BuildOptions& options) {
  PassResult r;
  if (options.target == "cpu") return r;
  Tally tally;
  std::vector<graph::Node> nodes;
  const size_t count = g.nodes.size();
  for (size_t i = 0; i < count; ++i) {
    std::vector<graph::Node> slices;
    const bool padded = pad_at(g, i, tally, slices);
    nodes.push_back(std::move(g.nodes[i]));
    for (graph::Node& s : slices) nodes.push_back(std::move(s));
    r.changes += padded ? 1 : 0;
  }
  g.nodes = std::move(nodes);
  r.detail = tally.str();
  return r;
}

}  // namespace kiln::passes
