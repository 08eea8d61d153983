#include "build/row_independence.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/tensor.h"

namespace kiln::build {
namespace {

using graph::Graph;
using graph::Node;
using graph::Value;
using graph::ValueId;

constexpr int kNone = -1;  // the value does not vary from row to row

int64_t product(const std::vector<int64_t>& s, size_t from, size_t to) {
  return std::accumulate(s.begin() + static_cast<std::ptrdiff_t>(from), s.begin() + static_cast<std::ptrdiff_t>(to),
                         int64_t{1}, std::multiplies<>());
}

// A constant's slices along `axis` all hold the same bytes.
bool rows_equal(const Value& v, int axis) {
  if (!v.is_constant()) return false;
  const int64_t rows = v.shape[static_cast<size_t>(axis)];
  const size_t inner =
      static_cast<size_t>(product(v.shape, static_cast<size_t>(axis) + 1, v.shape.size())) * dtype_size(v.dtype);
  const int64_t outer = product(v.shape, 0, static_cast<size_t>(axis));
  const uint8_t* d = v.data->data();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t r = 1; r < rows; ++r)
      if (std::memcmp(d + (o * rows + r) * inner, d + o * rows * inner, inner) != 0) return false;
  return true;
}

// The constant axes list of input `i` (normalized to `rank`), or false if it is not constant.
bool constant_axes(const Graph& g, const Node& n, size_t i, int64_t rank, std::vector<int64_t>* axes) {
  axes->clear();
  if (i >= n.inputs.size() || n.inputs[i] == graph::kNoValue) return true;
  const Value& v = g.value(n.inputs[i]);
  if (!v.is_constant() || v.dtype != DataType::kInt64) return false;
  const auto* p = reinterpret_cast<const int64_t*>(v.data->data());
  for (size_t k = 0; k < v.data->size() / sizeof(int64_t); ++k) axes->push_back(normalize_axis(p[k], rank));
  return true;
}

class Analysis {
 public:
  Analysis(const Graph& g, const std::map<ValueId, int>& axes) : g_(g), axis_(g.values.size(), kNone) {
    for (const auto& [id, a] : axes) axis_[static_cast<size_t>(id)] = a;
  }

  RowAxes run() {
    RowAxes r;
    for (const Node& n : g_.nodes) {
      why_.clear();
      if (!visit(n)) {
        r.why_not = "node '" + n.name + "' (" + std::string(op_name(n.kind)) + "): " + why_;
        return r;
      }
    }
    for (ValueId o : g_.outputs) r.outputs[o] = axis(o);
    return r;
  }

 private:
  int& axis(ValueId v) { return axis_[static_cast<size_t>(v)]; }
  int rank(ValueId v) const { return static_cast<int>(g_.value(v).shape.size()); }
  const std::vector<int64_t>& shape(ValueId v) const { return g_.value(v).shape; }

  bool fail(std::string why) {
    why_ = std::move(why);
    return false;
  }
  void set_outputs(const Node& n, int a) {
    for (ValueId o : n.outputs)
      if (o != graph::kNoValue) axis(o) = a;
  }
  // The one carried input's axis, or kNone; false if several inputs carry the rows.
  bool single_carrier(const Node& n, size_t* index, int* a) {
    *a = kNone;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i] == graph::kNoValue || axis(n.inputs[i]) == kNone) continue;
      if (*a != kNone) return fail("two inputs carry the rows");
      *index = i;
      *a = axis(n.inputs[i]);
    }
    return true;
  }

  bool visit(const Node& n) {
    bool any = false;
    for (ValueId v : n.inputs) any = any || (v != graph::kNoValue && axis(v) != kNone);
    if (!any) {
      set_outputs(n, kNone);
      return true;
    }
    const OpKind k = n.kind;
    if (has_trait(k, kPerElement) || has_trait(k, kBroadcast) || k == OpKind::kWhere) return broadcast(n);
    if (has_trait(k, kReshapeLike)) return reshape(n);
    switch (k) {
      case OpKind::kCast:
      case OpKind::kIdentity:
      case OpKind::kDropout: return broadcast(n);
      case OpKind::kConv:
      case OpKind::kConvTranspose:
      case OpKind::kMaxPool:
      case OpKind::kAveragePool:
      case OpKind::kGlobalAveragePool:
      case OpKind::kGlobalMaxPool:
      case OpKind::kBatchNormalization:
      case OpKind::kInstanceNormalization:
      case OpKind::kLRN:
      case OpKind::kResize:
      case OpKind::kDepthToSpace:
      case OpKind::kSpaceToDepth: return leading_only(n);
      case OpKind::kLayerNormalization: {
        const int r = rank(n.inputs[0]);
        return along_other(n, 0, static_cast<int>(normalize_axis(std::get<LayerNormAttrs>(n.attrs).axis, r)),
                           /*from_axis=*/true);
      }
      case OpKind::kSoftmax:
      case OpKind::kLogSoftmax:
      case OpKind::kHardmax: {
        const auto& a = std::get<SoftmaxAttrs>(n.attrs);
        const int r = rank(n.inputs[0]);
        return along_other(n, 0, static_cast<int>(normalize_axis(a.axis, r)), a.coerce_2d != 0);
      }
      case OpKind::kGemm: return gemm(n);
      case OpKind::kMatMul: return matmul(n);
      case OpKind::kTranspose: return transpose(n);
      case OpKind::kConcat: return concat(n);
      case OpKind::kSplit: {
        const int r = rank(n.inputs[0]);
        return along_other(n, 0, static_cast<int>(normalize_axis(std::get<SplitAttrs>(n.attrs).axis, r)), false);
      }
      case OpKind::kGather: return gather(n);
      case OpKind::kSlice:
      case OpKind::kPad: return untouched_axis(n);
      case OpKind::kReduceSum:
      case OpKind::kReduceMean:
      case OpKind::kReduceMax:
      case OpKind::kReduceMin:
      case OpKind::kReduceProd:
      case OpKind::kReduceL1:
      case OpKind::kReduceL2:
      case OpKind::kReduceLogSum:
      case OpKind::kReduceLogSumExp:
      case OpKind::kReduceSumSquare: return reduce(n);
      case OpKind::kArgMax:
      case OpKind::kArgMin: {
        const auto& a = std::get<ArgReduceAttrs>(n.attrs);
        const int r = rank(n.inputs[0]), ax = static_cast<int>(normalize_axis(a.axis, r));
        if (axis(n.inputs[0]) == ax) return fail("reduces along the rows");
        set_outputs(n, axis(n.inputs[0]) - (a.keepdims == 0 && ax < axis(n.inputs[0]) ? 1 : 0));
        return true;
      }
      default: return fail("Kiln has no rule for whether this op keeps rows apart");
    }
  }

  // Per-element and broadcasting ops: every carried input puts the rows on the same output axis;
  // the others must not vary along it (size 1, or equal rows of a constant).
  bool broadcast(const Node& n) {
    const ValueId out = n.outputs[0];
    const int out_rank = rank(out);
    int at = kNone;
    for (ValueId v : n.inputs)
      if (v != graph::kNoValue && axis(v) != kNone) {
        const int a = axis(v) + out_rank - rank(v);
        if (at != kNone && a != at) return fail("its inputs carry the rows on different axes");
        at = a;
      }
    for (ValueId v : n.inputs) {
      if (v == graph::kNoValue || axis(v) != kNone) continue;
      const int a = at - (out_rank - rank(v));
      if (a < 0 || shape(v)[static_cast<size_t>(a)] == 1) continue;
      if (!rows_equal(g_.value(v), a)) return fail("input '" + g_.value(v).name + "' differs from row to row");
    }
    for (ValueId v : n.inputs)
      if (v != graph::kNoValue && axis(v) != kNone &&
          shape(v)[static_cast<size_t>(axis(v))] != shape(out)[static_cast<size_t>(at)])
        return fail("changes the number of rows");
    set_outputs(n, at);
    return true;
  }

  // Ops over N, C, spatial...: the rows must be axis 0 of input 0, the other inputs constant
  // (weights, scales) and not carrying rows.
  bool leading_only(const Node& n) {
    size_t i = 0;
    int a = kNone;
    if (!single_carrier(n, &i, &a)) return false;
    if (i != 0 || a != 0) return fail("the rows are not its batch axis");
    if (shape(n.outputs[0])[0] != shape(n.inputs[0])[0]) return fail("changes the number of rows");
    set_outputs(n, 0);
    return true;
  }

  // An op along `op_axis` of input `i` (or along every axis from it, from_axis): fine unless that
  // takes in the rows.
  bool along_other(const Node& n, size_t i, int op_axis, bool from_axis) {
    size_t c = 0;
    int a = kNone;
    if (!single_carrier(n, &c, &a)) return false;
    if (c != i) return fail("a parameter carries the rows");
    if (a == op_axis || (from_axis && a > op_axis)) return fail("works along the rows");
    set_outputs(n, a);
    return true;
  }

  // Reshape, Flatten, Squeeze, Unsqueeze: the rows stay whole if the output has an axis of the same
  // size with the same number of elements before it (row-major order keeps each row's elements
  // together and in order).
  bool reshape(const Node& n) {
    size_t c = 0;
    int a = kNone;
    if (!single_carrier(n, &c, &a)) return false;
    if (c != 0) return fail("its shape input carries the rows");
    const std::vector<int64_t>& in = shape(n.inputs[0]);
    const std::vector<int64_t>& out = shape(n.outputs[0]);
    const int64_t before = product(in, 0, static_cast<size_t>(a));
    for (size_t k = 0; k < out.size(); ++k)
      if (out[k] == in[static_cast<size_t>(a)] && product(out, 0, k) == before) {
        set_outputs(n, static_cast<int>(k));
        return true;
      }
    return fail("merges the rows with another axis");
  }

  bool gemm(const Node& n) {
    size_t c = 0;
    int a = kNone;
    if (!single_carrier(n, &c, &a)) return false;
    const auto& attrs = std::get<GemmAttrs>(n.attrs);
    if (c == 0 && a == (attrs.transA ? 1 : 0)) {
      set_outputs(n, 0);
      return true;
    }
    if (c == 1 && a == (attrs.transB ? 0 : 1)) {
      set_outputs(n, 1);
      return true;
    }
    return fail("contracts along the rows");
  }

  bool matmul(const Node& n) {
    size_t c = 0;
    int a = kNone;
    if (!single_carrier(n, &c, &a)) return false;
    const int ra = rank(n.inputs[0]), rb = rank(n.inputs[1]), ro = rank(n.outputs[0]);
    if (c == 0 && ra >= 2 && a != ra - 1) {  // A's rows or batch axes, not the contracted one
      set_outputs(n, a + ro - ra);
      return true;
    }
    if (c == 1 && rb >= 2 && a != rb - 2) {  // B's columns or batch axes
      set_outputs(n, a + ro - rb);
      return true;
    }
    return fail("contracts along the rows");
  }

  bool transpose(const Node& n) {
    const int r = rank(n.inputs[0]);
    std::vector<int64_t> perm = std::get<TransposeAttrs>(n.attrs).perm;
    if (perm.empty())
      for (int i = r - 1; i >= 0; --i) perm.push_back(i);
    const auto it = std::find(perm.begin(), perm.end(), axis(n.inputs[0]));
    set_outputs(n, static_cast<int>(it - perm.begin()));
    return true;
  }

  bool concat(const Node& n) {
    const int r = rank(n.outputs[0]);
    const int ax = static_cast<int>(normalize_axis(std::get<AxisAttrs>(n.attrs).axis, r));
    int a = kNone;
    for (ValueId v : n.inputs) {
      if (axis(v) == kNone) return fail("joins rows with '" + g_.value(v).name + "', which has none");
      if (a != kNone && axis(v) != a) return fail("its inputs carry the rows on different axes");
      a = axis(v);
    }
    if (a == ax) return fail("joins along the rows");
    set_outputs(n, a);
    return true;
  }

  // Gather: rows of the data gathered along another axis, or rows of the indices (an embedding).
  bool gather(const Node& n) {
    size_t c = 0;
    int a = kNone;
    if (!single_carrier(n, &c, &a)) return false;
    const int r = rank(n.inputs[0]);
    const int ax = static_cast<int>(normalize_axis(std::get<AxisAttrs>(n.attrs).axis, r));
    if (c == 1) {
      set_outputs(n, ax + a);
      return true;
    }
    if (a == ax) return fail("gathers along the rows");
    set_outputs(n, a < ax ? a : a - 1 + rank(n.inputs[1]));
    return true;
  }

  // Slice and Pad: fine where the rows' axis is neither sliced nor padded (the output keeps its size).
  bool untouched_axis(const Node& n) {
    size_t c = 0;
    int a = kNone;
    if (!single_carrier(n, &c, &a)) return false;
    if (c != 0) return fail("a parameter carries the rows");
    if (shape(n.outputs[0])[static_cast<size_t>(a)] != shape(n.inputs[0])[static_cast<size_t>(a)])
      return fail("cuts or pads the rows");
    set_outputs(n, a);
    return true;
  }

  bool reduce(const Node& n) {
    const int r = rank(n.inputs[0]);
    const int a = axis(n.inputs[0]);
    const auto& attrs = std::get<ReduceAttrs>(n.attrs);
    std::vector<int64_t> axes;
    if (n.inputs.size() > 1 && n.inputs[1] != graph::kNoValue && axis(n.inputs[1]) != kNone)
      return fail("its axes carry the rows");
    if (!constant_axes(g_, n, 1, r, &axes)) return fail("its axes are not constant");
    if (axes.empty()) {
      if (attrs.noop_with_empty_axes) {
        set_outputs(n, a);
        return true;
      }
      return fail("reduces every axis, the rows too");
    }
    if (std::find(axes.begin(), axes.end(), a) != axes.end()) return fail("reduces along the rows");
    const int before = static_cast<int>(std::count_if(axes.begin(), axes.end(), [&](int64_t x) { return x < a; }));
    set_outputs(n, attrs.keepdims ? a : a - before);
    return true;
  }

  const Graph& g_;
  std::vector<int> axis_;
  std::string why_;
};

}  // namespace

RowAxes row_axes(const Graph& g, const std::map<ValueId, int>& inputs) { return Analysis(g, inputs).run(); }

}  // namespace kiln::build
