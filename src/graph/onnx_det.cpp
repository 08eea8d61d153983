// Det, lowered at import to tensor ops: Gaussian elimination with partial pivoting (LAPACK's getrf,
// which numpy's det calls), unrolled over the M columns of the [..., M, M] input. Step k picks the
// row at or below k with the largest |A[i, k]| (the first of equal ones), swaps it with row k
// (GatherElements of a permutation; the sign flips), multiplies the determinant by the pivot and
// subtracts multiples of row k from the rows below it. A zero pivot makes the determinant zero
// (its division goes through 1 instead). The matrix size must be known at import.
#include "graph/onnx_import_internal.h"
#include "kiln/types.h"

namespace kiln::graph::detail {

namespace {

constexpr int64_t kMaxDetSize = 64;  // columns unrolled, at most

}  // namespace

std::vector<SourceNode> lower_det(const SourceNode& sn, const Graph& g, int& counter) {
  const onnx::NodeProto& np = sn.proto;
  if (np.input_size() != 1 || np.input(0).empty() || np.output_size() != 1)
    throw Error("takes one input and gives one output");
  const std::string& x = np.input(0);
  const ValueId xv = g.find(x);
  if (xv == kNoValue || !g.value(xv).has_shape || g.value(xv).shape.size() < 2)
    throw Error("needs the shape of its input '" + x +
                "' at import (Kiln unrolls the elimination over its columns): declare it in the model's value_info "
                "or export with static shapes");
  const Value& v = g.value(xv);
  const int64_t m = v.shape.back();
  if (m < 1 || v.shape[v.shape.size() - 2] != m)
    throw Error("takes square matrices [..., M, M], got " + shape_string(v.shape));
  if (m > kMaxDetSize)
    throw Error("takes " + std::to_string(m) + " x " + std::to_string(m) + " matrices; Kiln unrolls up to " +
                std::to_string(kMaxDetSize) + " columns");
  if (v.dtype != DataType::kFloat32 && v.dtype != DataType::kFloat64)
    throw Error("takes float32 or float64 matrices, got " + std::string(dtype_name(v.dtype)));

  Lowering out(sn, g, counter);
  auto scalar_int = [&](int64_t value, const std::string& hint) {
    return out.fresh_constant(int64_tensor({value}, true), hint);
  };
  auto floats = [&](const std::vector<double>& values, const std::vector<int64_t>& dims, const std::string& hint) {
    return out.fresh_constant(float_tensor(values, dims, v.dtype), hint);
  };
  auto slice = [&](const std::string& t, int64_t from, int64_t to, int64_t axis, const std::string& label) {
    return out.op("Slice", {t, out.ints({from}, "from"), out.ints({to}, "to"), out.ints({axis}, "axis")}, label);
  };
  auto bools = [&](const std::vector<bool>& values, const std::string& hint) {
    onnx::TensorProto t;
    t.set_data_type(onnx::TensorProto_DataType_BOOL);
    t.add_dims(static_cast<int64_t>(values.size()));
    for (bool b : values) t.add_int32_data(b ? 1 : 0);
    return out.fresh_constant(t, hint);
  };

  std::vector<int64_t> rows(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) rows[static_cast<size_t>(i)] = i;
  const std::string row_index = out.ints(rows, "rows");                                  // [M]
  std::string a = out.op("Reshape", {x, out.ints({-1, m, m}, "matrices")}, "matrices");  // [N, M, M]
  std::string det = floats({1.0}, {1, 1}, "one");                                        // [N, 1], by broadcasting
  const std::string minus_one = floats({-1.0}, {}, "minus_one"), zero = floats({0.0}, {}, "zero");
  const std::string one = floats({1.0}, {}, "unit"), no_swap = out.ints({0}, "no_swap");
  for (int64_t k = 0; k < m; ++k) {
    const std::string step = "column" + std::to_string(k);
    // The pivot row p: the first largest |A[i, k]| for i >= k (rows above k masked to -1).
    std::vector<bool> above(static_cast<size_t>(m), false);
    std::vector<int64_t> at_k(static_cast<size_t>(m), 0);
    std::vector<double> below(static_cast<size_t>(m), 0.0);
    for (int64_t i = 0; i < m; ++i) {
      above[static_cast<size_t>(i)] = i < k;
      at_k[static_cast<size_t>(i)] = i == k;
      below[static_cast<size_t>(i)] = i > k ? 1.0 : 0.0;
    }
    const std::string column = out.op("Gather", {a, scalar_int(k, "k")}, step + "/column", {{"axis", 2}});
    const std::string candidates = out.op(
        "Where", {bools(above, "above"), minus_one, out.op("Abs", {column}, step + "/abs")}, step + "/candidates");
    const std::string p = out.op("ArgMax", {candidates}, step + "/pivot_row", {{"axis", 1}, {"keepdims", 1}});
    // Rows k and p swapped: the permutation r + [r == k] (p - k) + [r == p] (k - p).
    const std::string d = out.op("Sub", {p, out.ints({k}, "k")}, step + "/distance");  // [N, 1]
    const std::string is_p = out.op("Cast", {out.op("Equal", {row_index, p}, step + "/is_p")}, step + "/is_p_int",
                                    {{"to", onnx::TensorProto_DataType_INT64}});
    const std::string perm = out.op(
        "Add",
        {out.op("Add", {row_index, out.op("Mul", {out.ints(at_k, "at_k"), d}, step + "/to_p")}, step + "/partial"),
         out.op("Mul", {is_p, out.op("Neg", {d}, step + "/back")}, step + "/to_k")},
        step + "/permutation");  // [N, M]
    std::string lifted = out.fresh(step + "/lifted");
    out.ints_operand(out.emit("Unsqueeze", {perm}, {lifted}, step + "/lift"), "axes", {2});
    const std::string index = out.op("Expand", {lifted, out.op("Shape", {a}, step + "/shape")}, step + "/index");
    a = out.op("GatherElements", {a, index}, step + "/swapped", {{"axis", 1}});
    const std::string swapped = out.op("Not", {out.op("Equal", {d, no_swap}, step + "/same")}, step + "/moved");
    det = out.op("Mul", {det, out.op("Where", {swapped, minus_one, one}, step + "/sign")}, step + "/signed");
    const std::string row = slice(a, k, k + 1, 1, step + "/row");        // [N, 1, M]
    const std::string pivot = slice(row, k, k + 1, 2, step + "/pivot");  // [N, 1, 1]
    det = out.op("Mul", {det, out.op("Reshape", {pivot, out.ints({-1, 1}, "pivots")}, step + "/pivot_2d")},
                 step + "/det");
    if (k + 1 == m) break;
    const std::string safe =
        out.op("Where", {out.op("Equal", {pivot, zero}, step + "/zero_pivot"), one, pivot}, step + "/divisor");
    const std::string factors =
        out.op("Mul",
               {out.op("Div", {slice(a, k, k + 1, 2, step + "/below_k"), safe}, step + "/ratios"),
                floats(below, {m, 1}, "below")},
               step + "/factors");  // [N, M, 1]
    a = out.op("Sub", {a, out.op("Mul", {factors, row}, step + "/multiples")}, step + "/eliminated");
  }
  const auto rank = static_cast<int64_t>(v.shape.size());
  const std::string batch = slice(out.op("Shape", {x}, "input_shape"), 0, rank - 2, 0, "batch_shape");
  out.emit("Reshape", {det, batch}, {np.output(0)}, "determinant");
  return out.take();
}

}  // namespace kiln::graph::detail
