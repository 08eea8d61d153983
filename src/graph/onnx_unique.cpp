// Unique, lowered at import to tensor ops with data-dependent shapes (decision 56). The input is
// seen as d rows of r elements (the slices along `axis`, or the flattened elements, r = 1). Every
// pair of rows is compared at once: E[i, j] says rows i and j are equal, and row i sorts before row
// j where they first differ by less. A row is a first occurrence where no earlier row equals it
// (NonZero of those, so the number of unique rows is data-dependent); sorted, they are ordered by
// how many rows sort before them (TopK, its K that number, a shape taken as a value). Y gathers the
// rows, `indices` are those first occurrences, each row's inverse index is the unique row it
// equals, and the counts sum E. Quadratic in d, so d * d * r is bounded. A NaN equals nothing, so
// each row holding one is unique of its own (numpy before 1.24 does the same; later numpy merges
// NaNs); nothing sorts before a NaN, so NaNs come first among the values they tie with (numpy
// puts them last).
#include "graph/onnx_import_internal.h"
#include "kiln/types.h"

namespace kiln::graph::detail {

namespace {

constexpr int64_t kMaxPairs = int64_t{1} << 24;  // d * d * r, the pairwise comparisons

}  // namespace

std::vector<SourceNode> lower_unique(const SourceNode& sn, const Graph& g, int& counter) {
  const onnx::NodeProto& np = sn.proto;
  if (np.input_size() != 1 || np.input(0).empty()) throw Error("takes one input");
  const std::string& x = np.input(0);
  const ValueId xv = g.find(x);
  if (xv == kNoValue || !g.value(xv).has_shape)
    throw Error("needs the shape of its input '" + x +
                "' at import (Kiln compares every pair of its elements): declare it in the model's value_info "
                "or export with static shapes");
  const std::vector<int64_t>& shape = g.value(xv).shape;
  for (int64_t s : shape)
    if (s < 0) throw Error("needs the shape of its input '" + x + "' at import, got " + shape_string(shape));
  const auto rank = static_cast<int64_t>(shape.size());
  const onnx::AttributeProto* axis_attr = find_attr(np, "axis");
  const onnx::AttributeProto* sorted_attr = find_attr(np, "sorted");
  const bool sorted = !sorted_attr || sorted_attr->i() != 0;
  int64_t axis = axis_attr ? axis_attr->i() : 0;
  if (axis_attr && (axis < -rank || axis >= rank))
    throw Error("has axis " + std::to_string(axis) + " for an input of rank " + std::to_string(rank));
  if (axis < 0) axis += rank;
  int64_t d = 1, r = 1;
  for (int64_t i = 0; i < rank; ++i) {
    if (!axis_attr || i == axis)
      d *= shape[static_cast<size_t>(i)];
    else
      r *= shape[static_cast<size_t>(i)];
  }
  if (d == 0) throw Error("takes an empty input; ONNX gives its outputs no shape then");
  if (r == 0)
    throw Error("takes slices with no elements (shape " + shape_string(shape) + " along axis " + std::to_string(axis) +
                "), all alike");
  if (d > kMaxPairs / d / std::max<int64_t>(r, 1))
    throw Error("compares " + std::to_string(d) + " rows of " + std::to_string(r) +
                " elements pairwise, more than Kiln's limit of " + std::to_string(kMaxPairs) + " comparisons");

  Lowering out(sn, g, counter);
  auto as_float = [&](const std::string& t, const std::string& label) {
    return out.op("Cast", {t}, label, {{"to", onnx::TensorProto_DataType_FLOAT}});
  };
  auto sum = [&](const std::string& t, int64_t along, const std::string& label) {
    const std::string y = out.fresh(label);
    onnx::NodeProto& n = out.emit("ReduceSum", {t}, {y}, label);
    Lowering::set_int(n, "keepdims", 0);
    out.ints_operand(n, "axes", {along});
    return y;
  };
  auto unsqueeze = [&](const std::string& t, int64_t at, const std::string& label) {
    const std::string y = out.fresh(label);
    out.ints_operand(out.emit("Unsqueeze", {t}, {y}, label), "axes", {at});
    return y;
  };

  // The rows: [d, r].
  std::string rows = x;
  if (axis_attr && axis != 0) {
    std::vector<int64_t> perm{axis};
    for (int64_t i = 0; i < rank; ++i)
      if (i != axis) perm.push_back(i);
    const std::string t = out.fresh("axis_first");
    onnx::NodeProto& n = out.emit("Transpose", {x}, {t}, "axis_first");
    onnx::AttributeProto* a = n.add_attribute();
    a->set_name("perm");
    a->set_type(onnx::AttributeProto_AttributeType_INTS);
    for (int64_t p : perm) a->add_ints(p);
    rows = t;
  }
  rows = out.op("Reshape", {rows, out.ints({d, r}, "rows_shape")}, "rows");
  if (g.value(xv).dtype == DataType::kBool)  // compared as numbers (Less takes no bool)
    rows = out.op("Cast", {rows}, "rows_int", {{"to", onnx::TensorProto_DataType_INT32}});
  const std::string left = unsqueeze(rows, 1, "left"), right = unsqueeze(rows, 0, "right");  // [d,1,r], [1,d,r]
  const std::string differ = as_float(out.op("Not", {out.op("Equal", {left, right}, "equal")}, "differ"), "differ_f");
  const std::string different = sum(differ, 2, "differences");  // [d, d]
  const std::string zero = out.fresh_constant(float_tensor({0.0}, {}, DataType::kFloat32), "zero");
  // E, [d, d]: rows equal, and each row itself (a NaN equals nothing, not even itself).
  std::vector<double> eye(static_cast<size_t>(d * d), 0.0), earlier(eye);
  for (int64_t i = 0; i < d; ++i) {
    eye[static_cast<size_t>(i * d + i)] = 1.0;
    for (int64_t j = 0; j < i; ++j) earlier[static_cast<size_t>(j * d + i)] = 1.0;  // row j before column i
  }
  const std::string same = out.op("Max",
                                  {as_float(out.op("Equal", {different, zero}, "same"), "same_f"),
                                   out.fresh_constant(float_tensor(eye, {d, d}, DataType::kFloat32), "itself")},
                                  "same_or_itself");
  // First occurrences: no earlier row equals them.
  const std::string repeats =
      sum(out.op("Mul", {same, out.fresh_constant(float_tensor(earlier, {d, d}, DataType::kFloat32), "earlier")},
                 "earlier_equal"),
          0, "repeats");  // [d]
  const std::string firsts =
      out.op("Reshape",
             {out.op("NonZero", {out.op("Equal", {repeats, zero}, "is_first")}, "firsts_2d"), out.ints({-1}, "flat")},
             "firsts");  // [k], data-dependent
  std::string picked = firsts;
  if (sorted) {  // by how many rows sort before each
    // Row i sorts before row j: they differ, and where they first do, row i's element is less.
    const std::string first = out.op("ArgMax", {differ}, "first_difference", {{"axis", 2}, {"keepdims", 1}});
    const std::string less =
        out.op("GatherElements", {as_float(out.op("Less", {left, right}, "less"), "less_f"), first}, "less_there",
               {{"axis", 2}});  // [d, d, 1]
    const std::string before = out.op(
        "Mul",
        {out.op("Reshape", {less, out.ints({d, d}, "pairs")}, "less_2d"),
         out.op("Sub", {out.fresh_constant(float_tensor({1.0}, {}, DataType::kFloat32), "one"), same}, "not_same")},
        "before");  // [d, d]
    const std::string keys = out.op("Gather", {sum(before, 0, "rank"), firsts}, "keys");
    const std::string count = out.op("Shape", {keys}, "count");
    const std::string order = out.fresh("order");
    onnx::NodeProto& topk = out.emit("TopK", {keys, count}, {out.fresh("ordered_keys"), order}, "order");
    Lowering::set_int(topk, "largest", 0);
    Lowering::set_int(topk, "sorted", 1);
    picked = out.op("Gather", {firsts, order}, "sorted_firsts");
  }
  auto output = [&](int i) { return np.output_size() > i ? np.output(i) : std::string(); };
  const std::string flat = axis_attr ? x : out.op("Reshape", {x, out.ints({-1}, "flat_input")}, "flat_input");
  if (!output(0).empty())
    Lowering::set_int(out.emit("Gather", {flat, picked}, {output(0)}, "y"), "axis", axis_attr ? axis : 0);
  if (!output(1).empty()) out.emit("Identity", {picked}, {output(1)}, "indices");
  const std::string equals = out.op("Gather", {same, picked}, "equals");  // [k, d]
  if (!output(2).empty()) {
    onnx::NodeProto& n = out.emit("ArgMax", {equals}, {output(2)}, "inverse_indices");
    Lowering::set_int(n, "axis", 0);
    Lowering::set_int(n, "keepdims", 0);
  }
  if (!output(3).empty())
    Lowering::set_int(out.emit("Cast", {sum(equals, 1, "counts_f")}, {output(3)}, "counts"), "to",
                      onnx::TensorProto_DataType_INT64);
  return out.take();
}

}  // namespace kiln::graph::detail
