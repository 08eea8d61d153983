// The analysis follows the ranged dimension through the graph, node by node. Every value records
// the axes that carry it (the rows of a batch; for a sequence, the positions, and after Q·Kᵀ the
// keys too) and, per axis, what the padded positions hold when the inputs are padded with zeros:
// a known constant (the padding of a mask input, and what elementwise ops make of it), "masked"
// (finite plus a large negative constant: an additive attention mask), or only "finite". The rows
// of the valid region then equal those of the exact shape as long as no op mixes the padded
// positions into them: a Softmax may reduce along an axis whose padding is masked (it becomes 0),
// a MatMul may contract along one whose padding is 0 on one side; everything else that works
// along a carried axis is refused, naming the node.
#include "build/row_independence.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>

#include "core/tensor.h"

namespace kiln::build {
namespace {

using graph::Graph;
using graph::Node;
using graph::Value;
using graph::ValueId;

// A padded position at or below this value, added to a finite score, is masked: exp() of it is 0.
constexpr double kMaskedBelow = -1000;

// What the padded positions along an axis hold. kAny: possibly infinite or NaN (a division by
// a padded 0), which no contraction may take in, even multiplied by 0.
enum class Pad : uint8_t { kFinite, kConst, kMasked, kAny };
enum class Sign : uint8_t { kUnknown, kNonNegative, kPositive };  // of kFinite padding

struct Carry {
  int axis;
  Pad pad = Pad::kFinite;
  double c = 0;  // kConst: the value
  Sign sign = Sign::kUnknown;
};
using Carries = std::vector<Carry>;

int64_t product(const std::vector<int64_t>& s, size_t from, size_t to) {
  return std::accumulate(s.begin() + static_cast<std::ptrdiff_t>(from), s.begin() + static_cast<std::ptrdiff_t>(to),
                         int64_t{1}, std::multiplies<>());
}

std::vector<double> values_of(const Value& v) {
  return TensorView{v.dtype, v.shape, const_cast<uint8_t*>(v.data->data()), true}.to_double();
}

// A constant's slices along `axis` all hold the same bytes.
bool rows_equal(const Value& v, int axis) {
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

// The constant's axes list of input `i` (normalized to `rank`), or false if it is not constant.
bool constant_axes(const Graph& g, const Node& n, size_t i, int64_t rank, std::vector<int64_t>* axes) {
  axes->clear();
  if (i >= n.inputs.size() || n.inputs[i] == graph::kNoValue) return true;
  const Value& v = g.value(n.inputs[i]);
  if (!v.is_constant() || v.dtype != DataType::kInt64) return false;
  const auto* p = reinterpret_cast<const int64_t*>(v.data->data());
  for (size_t k = 0; k < v.data->size() / sizeof(int64_t); ++k) axes->push_back(normalize_axis(p[k], rank));
  return true;
}

// An elementwise op on scalars, where Kiln knows it; nullopt otherwise.
std::optional<double> eval(const Node& n, const std::vector<double>& x) {
  auto b = [](bool v) { return v ? 1.0 : 0.0; };
  switch (n.kind) {
    case OpKind::kIdentity:
    case OpKind::kDropout: return x[0];
    case OpKind::kCast: {
      const DataType to = std::get<CastAttrs>(n.attrs).to;
      if (to == DataType::kBool) return b(x[0] != 0);
      if (to == DataType::kFloat32 || to == DataType::kFloat16 || to == DataType::kFloat64 || to == DataType::kBFloat16)
        return x[0];
      return std::trunc(x[0]);
    }
    case OpKind::kNeg: return -x[0];
    case OpKind::kNot: return b(x[0] == 0);
    case OpKind::kRelu: return std::max(x[0], 0.0);
    case OpKind::kAbs: return std::fabs(x[0]);
    case OpKind::kExp: return std::exp(x[0]);
    case OpKind::kSqrt: return std::sqrt(x[0]);
    case OpKind::kAdd: return x[0] + x[1];
    case OpKind::kSub: return x[0] - x[1];
    case OpKind::kMul: return x[0] * x[1];
    case OpKind::kDiv: return x[1] == 0 ? std::optional<double>() : x[0] / x[1];
    case OpKind::kPow: return std::pow(x[0], x[1]);
    case OpKind::kMax: return *std::max_element(x.begin(), x.end());
    case OpKind::kMin: return *std::min_element(x.begin(), x.end());
    case OpKind::kSum: return std::accumulate(x.begin(), x.end(), 0.0);
    case OpKind::kMean: return std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(x.size());
    case OpKind::kEqual: return b(x[0] == x[1]);
    case OpKind::kLess: return b(x[0] < x[1]);
    case OpKind::kGreater: return b(x[0] > x[1]);
    case OpKind::kLessOrEqual: return b(x[0] <= x[1]);
    case OpKind::kGreaterOrEqual: return b(x[0] >= x[1]);
    case OpKind::kAnd: return b(x[0] != 0 && x[1] != 0);
    case OpKind::kOr: return b(x[0] != 0 || x[1] != 0);
    case OpKind::kWhere: return x[0] != 0 ? x[1] : x[2];
    default: return std::nullopt;
  }
}

bool masking(const Carry& c) { return c.pad == Pad::kMasked || (c.pad == Pad::kConst && c.c <= kMaskedBelow); }
// Finite and not itself a large negative: what may be added to a mask and leave it a mask.
bool modest(const Carry& c, double most) {
  return c.pad == Pad::kFinite || (c.pad == Pad::kConst && std::isfinite(c.c) && std::fabs(c.c) <= most);
}
bool non_negative(const Carry& c) {
  return (c.pad == Pad::kFinite && c.sign != Sign::kUnknown) || (c.pad == Pad::kConst && c.c >= 0);
}
bool positive(const Carry& c) {
  return (c.pad == Pad::kFinite && c.sign == Sign::kPositive) || (c.pad == Pad::kConst && c.c > 0);
}
// Elementwise ops whose output is finite where their inputs are (overflow aside: padded values are
// the model's own activations, not extremes).
bool keeps_finite(OpKind k) {
  switch (k) {
    case OpKind::kAdd:
    case OpKind::kSub:
    case OpKind::kMul:
    case OpKind::kNeg:
    case OpKind::kAbs:
    case OpKind::kRelu:
    case OpKind::kLeakyRelu:
    case OpKind::kPRelu:
    case OpKind::kElu:
    case OpKind::kClip:
    case OpKind::kSigmoid:
    case OpKind::kHardSigmoid:
    case OpKind::kTanh:
    case OpKind::kErf:
    case OpKind::kGelu:
    case OpKind::kSoftplus:
    case OpKind::kExp:
    case OpKind::kWhere:
    case OpKind::kMax:
    case OpKind::kMin:
    case OpKind::kSum:
    case OpKind::kMean:
    case OpKind::kCast:
    case OpKind::kIdentity:
    case OpKind::kDropout:
    case OpKind::kExpand:
    case OpKind::kEqual:
    case OpKind::kLess:
    case OpKind::kGreater:
    case OpKind::kLessOrEqual:
    case OpKind::kGreaterOrEqual:
    case OpKind::kAnd:
    case OpKind::kOr:
    case OpKind::kNot:
    case OpKind::kSign:
    case OpKind::kFloor:
    case OpKind::kCeil:
    case OpKind::kRound:
    case OpKind::kSin:
    case OpKind::kCos: return true;
    default: return false;
  }
}
// A padded value after a reduction, a normalization or a product along other axes: finite where
// the input is, its sign kept where `keep_sign`.
Carry reduced(const Carry& c, int axis, bool keep_sign) {
  if (c.pad == Pad::kAny) return {axis, Pad::kAny};
  Sign sign = Sign::kUnknown;
  if (keep_sign && positive(c))
    sign = Sign::kPositive;
  else if (keep_sign && non_negative(c))
    sign = Sign::kNonNegative;
  return {axis, Pad::kFinite, 0, sign};
}

class Analysis {
 public:
  Analysis(const Graph& g, const std::map<ValueId, int>& axes, const Graph* smaller, int64_t lo)
      : g_(g), smaller_(smaller), lo_(lo), carry_(g.values.size()), unstable_(g.values.size()) {
    for (const auto& [id, a] : axes) carry_[static_cast<size_t>(id)] = {{a, Pad::kConst, 0.0}};  // zero padding
    if (smaller_) seed_constants();
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
    for (ValueId o : g_.outputs) {
      const Carries& c = carry(o);
      if (c.size() > 1) {
        r.why_not = "output '" + g_.value(o).name + "' carries the dimension on " + std::to_string(c.size()) + " axes";
        return r;
      }
      r.outputs[o] = c.empty() ? -1 : c[0].axis;
    }
    return r;
  }

 private:
  Carries& carry(ValueId v) { return carry_[static_cast<size_t>(v)]; }
  int rank(ValueId v) const { return static_cast<int>(g_.value(v).shape.size()); }
  const std::vector<int64_t>& shape(ValueId v) const { return g_.value(v).shape; }
  static const Carry* find(const Carries& c, int axis) {
    for (const Carry& x : c)
      if (x.axis == axis) return &x;
    return nullptr;
  }

  bool fail(std::string why) {
    why_ = std::move(why);
    return false;
  }
  void set_outputs(const Node& n, const Carries& c) {
    for (ValueId o : n.outputs)
      if (o != graph::kNoValue) carry(o) = c;
  }
  // The same axes after an op along other axes: finite padding stays finite, kAny stays kAny.
  static Carries finite(const Carries& c, bool keep_sign = false) {
    Carries r;
    for (const Carry& x : c) r.push_back(reduced(x, x.axis, keep_sign));
    return r;
  }
  static bool any_nonfinite(const Carries& c) {
    return std::any_of(c.begin(), c.end(), [](const Carry& x) { return x.pad == Pad::kAny; });
  }
  // The one input that carries the dimension (its index), or false if several do.
  bool single_carrier(const Node& n, size_t* index) {
    bool found = false;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i] == graph::kNoValue || carry(n.inputs[i]).empty()) continue;
      if (found) return fail("two inputs carry the rows");
      *index = i;
      found = true;
    }
    return true;
  }
  // The carrier's one axis; false if it carries several.
  bool one_axis(ValueId v, int* a) {
    if (carry(v).size() != 1) return fail("its input carries the dimension on several axes");
    *a = carry(v)[0].axis;
    return true;
  }

  // Each output's shape at the range's bottom: its carried axes at the bottom's size, the others
  // as at the top. A shape that moves otherwise follows the size where the analysis did not see it
  // (a Reshape whose target equals the size by coincidence).
  bool check_sizes(const Node& n) {
    if (!smaller_) return true;
    for (ValueId o : n.outputs) {
      if (o == graph::kNoValue) continue;
      const graph::ValueId sid = smaller_->find(g_.value(o).name);
      if (sid == graph::kNoValue || smaller_->value(sid).shape.size() != shape(o).size()) continue;
      const std::vector<int64_t>& small = smaller_->value(sid).shape;
      for (size_t a = 0; a < small.size(); ++a) {
        const bool carried = find(carry(o), static_cast<int>(a)) != nullptr;
        if (carried ? small[a] == lo_ : small[a] == shape(o)[a]) continue;
        return fail("output '" + g_.value(o).name + "' has " + std::to_string(small[a]) + " on axis " +
                    std::to_string(a) + " at the range's bottom, which does not follow the rows");
      }
    }
    return true;
  }

  bool visit(const Node& n) { return visit_op(n) && check_sizes(n); }

  bool visit_op(const Node& n) {
    const uint32_t shape_inputs = op_info(n.kind).const_inputs;  // may depend on the size: shapes only
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const ValueId v = n.inputs[i];
      if (v != graph::kNoValue && !unstable_[static_cast<size_t>(v)].empty() && !((shape_inputs >> i) & 1))
        return fail(unstable_[static_cast<size_t>(v)]);
    }
    bool any = false;
    for (ValueId v : n.inputs) any = any || (v != graph::kNoValue && !carry(v).empty());
    if (!any) {
      set_outputs(n, {});
      return true;
    }
    const OpKind k = n.kind;
    if (has_trait(k, kPerElement) || has_trait(k, kBroadcast) || k == OpKind::kCast || k == OpKind::kIdentity ||
        k == OpKind::kDropout || k == OpKind::kExpand)
      return broadcast(n);
    if (has_trait(k, kReshapeLike)) return reshape(n);
    switch (k) {
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
      case OpKind::kSpaceToDepth:
      case OpKind::kAttention: return leading_only(n);
      case OpKind::kLayerNormalization: {
        const int r = rank(n.inputs[0]);
        return along_other(n, static_cast<int>(normalize_axis(std::get<LayerNormAttrs>(n.attrs).axis, r)), true);
      }
      case OpKind::kSoftmax:
      case OpKind::kLogSoftmax:
      case OpKind::kHardmax: return softmax(n);
      case OpKind::kGemm: return gemm(n);
      case OpKind::kMatMul: return matmul(n);
      case OpKind::kTranspose: return transpose(n);
      case OpKind::kConcat: return concat(n);
      case OpKind::kSplit: {
        const int r = rank(n.inputs[0]);
        return along_other(n, static_cast<int>(normalize_axis(std::get<SplitAttrs>(n.attrs).axis, r)), false);
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
        size_t c = 0;
        int ax = 0;
        if (!single_carrier(n, &c) || !one_axis(n.inputs[c], &ax)) return false;
        const int op = static_cast<int>(normalize_axis(a.axis, rank(n.inputs[0])));
        if (ax == op) return fail("reduces along the rows");
        set_outputs(n, {{ax - (a.keepdims == 0 && op < ax ? 1 : 0)}});
        return true;
      }
      default: return fail("Kiln has no rule for whether this op keeps rows apart");
    }
  }

  // Constants that change with the size (folded from the input's shape: position ids, a padding
  // of zeros, a causal mask) carry the dimension on the axes where the graph folded at the range's
  // bottom has them smaller. They must be the same at every size (the smaller one the larger
  // one's leading corner); each axis's padding is what the constant holds where that axis is past
  // the valid size and its other ranged axes are not.
  void seed_constants() {
    for (size_t v = 0; v < g_.values.size(); ++v) {
      const Value& big = g_.values[v];
      if (!big.is_constant() || !carry_[v].empty()) continue;
      const graph::ValueId sid = smaller_->find(big.name);
      if (sid == graph::kNoValue) continue;
      const Value& small = smaller_->value(sid);
      if (!small.is_constant() || small.shape.size() != big.shape.size() || small.dtype != big.dtype) continue;
      if (small.shape == big.shape) {  // the same shape: it must hold the same values, or feed only shapes
        if (*small.data != *big.data)
          unstable_[v] = "constant '" + big.name + "' depends on the size (folded at two sizes, its values differ)";
        continue;
      }
      std::vector<int> axes;
      for (size_t a = 0; a < big.shape.size(); ++a) {
        if (big.shape[a] == small.shape[a]) continue;
        if (big.shape[a] < small.shape[a]) {
          unstable_[v] = "constant '" + big.name + "' shrinks as the size grows";
          break;
        }
        axes.push_back(static_cast<int>(a));
      }
      if (!unstable_[v].empty()) continue;
      const std::vector<double> bv = values_of(big), sv = values_of(small);
      const size_t rank = big.shape.size();
      std::vector<int64_t> idx(rank, 0);
      auto unflatten = [&](size_t e, const std::vector<int64_t>& shape) {
        auto rest = static_cast<int64_t>(e);
        for (size_t k = rank; k-- > 0;) {
          idx[k] = rest % shape[k];
          rest /= shape[k];
        }
      };
      for (size_t e = 0; e < sv.size() && unstable_[v].empty(); ++e) {
        unflatten(e, small.shape);
        int64_t f = 0;
        for (size_t k = 0; k < rank; ++k) f = f * big.shape[k] + idx[k];
        const double x = bv[static_cast<size_t>(f)], y = sv[e];
        if (!(x == y || (std::isnan(x) && std::isnan(y))))
          unstable_[v] = "constant '" + big.name +
                         "' is not the same at every size (folded at two sizes, their "
                         "common part differs)";
      }
      if (!unstable_[v].empty()) continue;
      Carries c;
      for (int mine : axes) {
        bool all_equal = true, all_masked = true, first = true, nonfinite = false;
        double value = 0;
        for (size_t e = 0; e < bv.size(); ++e) {
          unflatten(e, big.shape);
          int64_t other = -1;
          for (int k : axes)
            if (k != mine) other = std::max(other, idx[static_cast<size_t>(k)]);
          if (idx[static_cast<size_t>(mine)] < std::max(lo_, other + 1)) continue;  // valid at every size
          if (first) value = bv[e];
          all_equal = all_equal && bv[e] == value;
          all_masked = all_masked && bv[e] <= kMaskedBelow;
          nonfinite = nonfinite || std::isnan(bv[e]) || bv[e] == HUGE_VAL;
          first = false;
        }
        if (nonfinite) {
          c.push_back({mine, Pad::kAny});
          continue;
        }
        c.push_back(all_equal ? Carry{mine, Pad::kConst, value}
                              : Carry{mine, all_masked ? Pad::kMasked : Pad::kFinite, 0});
      }
      carry_[v] = c;
    }
  }

  // Per-element and broadcasting ops: the carried axes of every input, aligned; inputs that do not
  // carry an axis must not vary along it (size 1, or a constant the same at every size). The
  // padding follows the op: constants are computed, a finite value plus a large negative constant
  // is masked.
  bool broadcast(const Node& n) {
    const ValueId out = n.outputs[0];
    const int out_rank = rank(out);
    const size_t data_inputs = n.kind == OpKind::kExpand ? 1 : n.inputs.size();
    Carries axes;  // output axes carried, in order
    for (size_t i = 0; i < data_inputs; ++i) {
      const ValueId v = n.inputs[i];
      if (v == graph::kNoValue) continue;
      for (const Carry& c : carry(v)) {
        const int a = c.axis + out_rank - rank(v);
        if (!find(axes, a)) axes.push_back({a});
      }
    }
    if (n.kind == OpKind::kExpand && !carry(n.inputs[1]).empty()) return fail("its shape input carries the rows");
    std::sort(axes.begin(), axes.end(), [](const Carry& x, const Carry& y) { return x.axis < y.axis; });
    Carries result;
    for (const Carry& a : axes) {
      std::vector<Carry> in;  // per input: its padding along a
      for (size_t i = 0; i < data_inputs; ++i) {
        const ValueId v = n.inputs[i];
        if (v == graph::kNoValue) {
          in.push_back({a.axis, Pad::kFinite, 0});
          continue;
        }
        const int offset = rank(v) - out_rank;
        if (const Carry* c = find(carry(v), a.axis + offset)) {
          if (shape(v)[static_cast<size_t>(a.axis + offset)] != shape(out)[static_cast<size_t>(a.axis)])
            return fail("changes the number of rows");
          in.push_back(*c);
          continue;
        }
        const int mine = a.axis + offset;
        const Value& val = g_.value(v);
        if (mine < 0 || val.shape[static_cast<size_t>(mine)] == 1) {  // the same at every position along a
          if (val.is_constant() && product(val.shape, 0, val.shape.size()) == 1)
            in.push_back({a.axis, Pad::kConst, values_of(val)[0]});
          else
            in.push_back({a.axis, Pad::kFinite, 0});
          continue;
        }
        if (!val.is_constant() || !rows_equal(val, mine))
          return fail("input '" + val.name + "' differs from row to row");
        in.push_back({a.axis, Pad::kFinite, 0});
      }
      result.push_back(combine(n, a.axis, in));
    }
    set_outputs(n, result);
    return true;
  }

  static Carry combine(const Node& n, int axis, const std::vector<Carry>& in) {
    const OpKind k = n.kind;
    if (std::any_of(in.begin(), in.end(), [](const Carry& c) { return c.pad == Pad::kAny; })) return {axis, Pad::kAny};
    bool all_const = true;
    std::vector<double> x;
    for (const Carry& c : in) {
      all_const = all_const && c.pad == Pad::kConst;
      x.push_back(c.c);
    }
    if (all_const) {
      std::optional<double> r = eval(n, x);
      if (r && std::isfinite(*r)) return {axis, Pad::kConst, *r};
      if (r || !keeps_finite(k)) return {axis, Pad::kAny};
    }
    // A finite score plus a large negative constant is masked, and stays so through a modest
    // shift, a scale of 1 or more, and float casts.
    if (in.size() == 2) {
      const Carry &p = in[0], &q = in[1];
      if (k == OpKind::kAdd && ((masking(p) && modest(q, 500)) || (masking(q) && modest(p, 500))))
        return {axis, Pad::kMasked};
      if (k == OpKind::kSub && masking(p) && (q.pad == Pad::kFinite || (q.pad == Pad::kConst && q.c >= -500)))
        return {axis, Pad::kMasked};
      if (k == OpKind::kSub && modest(p, 500) && q.pad == Pad::kConst && q.c >= -kMaskedBelow)
        return {axis, Pad::kMasked};
      if (k == OpKind::kMul &&
          ((masking(p) && q.pad == Pad::kConst && q.c >= 1) || (masking(q) && p.pad == Pad::kConst && p.c >= 1)))
        return {axis, Pad::kMasked};
      if (k == OpKind::kDiv && masking(p) && q.pad == Pad::kConst && q.c > 0 && q.c <= 1) return {axis, Pad::kMasked};
    }
    if (in.size() == 1 && (k == OpKind::kIdentity || k == OpKind::kDropout)) return in[0];
    if (k == OpKind::kCast) {
      const DataType to = std::get<CastAttrs>(n.attrs).to;
      if (to == DataType::kFloat32 || to == DataType::kFloat16 || to == DataType::kBFloat16 || to == DataType::kFloat64)
        return in[0].pad == Pad::kConst ? Carry{axis, Pad::kConst, in[0].c} : Carry{axis, in[0].pad, 0, in[0].sign};
      return reduced(in[0], axis, false);
    }
    // Finite results, with what is known of their sign (a spelled-out LayerNorm divides by
    // Sqrt(ReduceMean(Pow(x - mean, 2)) + eps), which is positive).
    Sign sign = Sign::kUnknown;
    switch (k) {
      case OpKind::kDiv:
        if (!(in[1].pad == Pad::kConst && in[1].c != 0) && !positive(in[1])) return {axis, Pad::kAny};
        break;
      case OpKind::kReciprocal:
      case OpKind::kLog:
        if (!positive(in[0])) return {axis, Pad::kAny};
        return {axis, Pad::kFinite, 0, k == OpKind::kReciprocal ? Sign::kPositive : Sign::kUnknown};
      case OpKind::kSqrt:
        if (!non_negative(in[0])) return {axis, Pad::kAny};
        return {axis, Pad::kFinite, 0, positive(in[0]) ? Sign::kPositive : Sign::kNonNegative};
      case OpKind::kPow:
        if (in[1].pad == Pad::kConst && in[1].c >= 0 && std::floor(in[1].c) == in[1].c)
          return {axis, Pad::kFinite, 0, std::fmod(in[1].c, 2.0) == 0 ? Sign::kNonNegative : Sign::kUnknown};
        if (!positive(in[0])) return {axis, Pad::kAny};
        return {axis, Pad::kFinite, 0, Sign::kPositive};
      case OpKind::kAdd:
        if (non_negative(in[0]) && non_negative(in[1]))
          sign = positive(in[0]) || positive(in[1]) ? Sign::kPositive : Sign::kNonNegative;
        break;
      case OpKind::kMul:
        if (non_negative(in[0]) && non_negative(in[1]))
          sign = positive(in[0]) && positive(in[1]) ? Sign::kPositive : Sign::kNonNegative;
        break;
      case OpKind::kRelu:
      case OpKind::kAbs: sign = Sign::kNonNegative; break;
      case OpKind::kSigmoid:
      case OpKind::kExp:
      case OpKind::kSoftplus: sign = Sign::kPositive; break;
      default:
        if (!keeps_finite(k)) return {axis, Pad::kAny};
    }
    return {axis, Pad::kFinite, 0, sign};
  }

  // Ops over N, C, spatial...: the rows must be axis 0 of input 0, the other inputs constant
  // (weights, scales) and not carrying rows.
  bool leading_only(const Node& n) {
    size_t i = 0;
    int a = 0;
    if (!single_carrier(n, &i) || !one_axis(n.inputs[i], &a)) return false;
    if (i != 0 || a != 0) return fail("the rows are not its batch axis");
    if (shape(n.outputs[0])[0] != shape(n.inputs[0])[0]) return fail("changes the number of rows");
    set_outputs(n, {reduced(carry(n.inputs[0])[0], 0, false)});
    return true;
  }

  // An op along `op_axis` of input 0 (or along every axis from it, from_axis): fine unless that
  // takes in a carried axis.
  bool along_other(const Node& n, int op_axis, bool from_axis) {
    size_t c = 0;
    if (!single_carrier(n, &c)) return false;
    if (c != 0) return fail("a parameter carries the rows");
    for (const Carry& x : carry(n.inputs[0]))
      if (x.axis == op_axis || (from_axis && x.axis > op_axis)) return fail("works along the rows");
    set_outputs(n, finite(carry(n.inputs[0])));
    return true;
  }

  // Softmax along a carried axis whose padding is masked: the padded positions get 0 and the
  // others what the exact shape gives them.
  bool softmax(const Node& n) {
    const auto& a = std::get<SoftmaxAttrs>(n.attrs);
    const int r = rank(n.inputs[0]);
    const int op = static_cast<int>(normalize_axis(a.axis, r));
    size_t c = 0;
    if (!single_carrier(n, &c)) return false;
    if (c != 0) return fail("a parameter carries the rows");
    Carries out = finite(carry(n.inputs[0]));
    for (const Carry& x : carry(n.inputs[0])) {
      const bool along = x.axis == op || (a.coerce_2d != 0 && x.axis > op);
      if (!along) continue;
      if (n.kind != OpKind::kSoftmax || a.coerce_2d != 0 || !masking(x))
        return fail("works along the rows, and their padding is not masked (an additive mask of -1000 or less)");
      for (Carry& y : out)
        if (y.axis == x.axis) y = {x.axis, Pad::kConst, 0.0};
    }
    set_outputs(n, out);
    return true;
  }

  // Reshape, Flatten, Squeeze, Unsqueeze: each carried axis stays whole if the output has an axis
  // of the same size with the same number of elements before it (row-major order keeps each row's
  // elements together and in order).
  bool reshape(const Node& n) {
    size_t c = 0;
    if (!single_carrier(n, &c)) return false;
    if (c != 0) return fail("its shape input carries the rows");
    const std::vector<int64_t>& in = shape(n.inputs[0]);
    const std::vector<int64_t>& out = shape(n.outputs[0]);
    Carries r;
    for (const Carry& x : carry(n.inputs[0])) {
      const int64_t before = product(in, 0, static_cast<size_t>(x.axis));
      bool kept = false;
      for (size_t k = 0; k < out.size() && !kept; ++k)
        if (out[k] == in[static_cast<size_t>(x.axis)] && product(out, 0, k) == before) {
          r.push_back({static_cast<int>(k), x.pad, x.c});
          kept = true;
        }
      if (!kept) return fail("merges the rows with another axis");
    }
    set_outputs(n, r);
    return true;
  }

  bool gemm(const Node& n) {
    size_t c = 0;
    int a = 0;
    if (!single_carrier(n, &c) || !one_axis(n.inputs[c], &a)) return false;
    const auto& attrs = std::get<GemmAttrs>(n.attrs);
    if (c == 0 && a == (attrs.transA ? 1 : 0)) {
      set_outputs(n, {reduced(carry(n.inputs[c])[0], 0, false)});
      return true;
    }
    if (c == 1 && a == (attrs.transB ? 0 : 1)) {
      set_outputs(n, {reduced(carry(n.inputs[c])[0], 1, false)});
      return true;
    }
    return fail("contracts along the rows");
  }

  // A[..., M, K] · B[..., K, N]: carried batch, M and N axes pass through; a carried K is
  // contracted, which is fine where one side's padding along it is 0.
  bool matmul(const Node& n) {
    const ValueId av = n.inputs[0], bv = n.inputs[1];
    const int ra = rank(av), rb = rank(bv), ro = rank(n.outputs[0]);
    if (ra < 2 || rb < 2) return fail("a vector product along the rows");
    Carries out;
    auto add = [&](int axis) {
      if (!find(out, axis)) out.push_back({axis});
    };
    const Carry *ka = find(carry(av), ra - 1), *kb = find(carry(bv), rb - 2);
    const bool nonfinite = any_nonfinite(carry(av)) || any_nonfinite(carry(bv));
    if (ka || kb) {
      // 0 on one side takes nothing of the other's padding, as long as that is finite (0 * inf is NaN).
      const bool zero = (ka && ka->pad == Pad::kConst && ka->c == 0) || (kb && kb->pad == Pad::kConst && kb->c == 0);
      if (!zero || nonfinite)
        return fail("contracts along the rows, and neither side's padding there is 0 (with the other's finite)");
    }
    for (const Carry& x : carry(av))
      if (x.axis != ra - 1) add(x.axis + ro - ra);
    for (const Carry& x : carry(bv))
      if (x.axis != rb - 2) add(x.axis == rb - 1 ? ro - 1 : x.axis + ro - rb);
    if (nonfinite)
      for (Carry& x : out) x.pad = Pad::kAny;
    std::sort(out.begin(), out.end(), [](const Carry& x, const Carry& y) { return x.axis < y.axis; });
    set_outputs(n, out);
    return true;
  }

  bool transpose(const Node& n) {
    const int r = rank(n.inputs[0]);
    std::vector<int64_t> perm = std::get<TransposeAttrs>(n.attrs).perm;
    if (perm.empty())
      for (int i = r - 1; i >= 0; --i) perm.push_back(i);
    Carries out;
    for (const Carry& x : carry(n.inputs[0])) {
      const auto it = std::find(perm.begin(), perm.end(), x.axis);
      out.push_back({static_cast<int>(it - perm.begin()), x.pad, x.c});
    }
    std::sort(out.begin(), out.end(), [](const Carry& x, const Carry& y) { return x.axis < y.axis; });
    set_outputs(n, out);
    return true;
  }

  bool concat(const Node& n) {
    const int r = rank(n.outputs[0]);
    const int ax = static_cast<int>(normalize_axis(std::get<AxisAttrs>(n.attrs).axis, r));
    std::vector<int> axes;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const ValueId v = n.inputs[i];
      std::vector<int> mine;
      for (const Carry& c : carry(v)) mine.push_back(c.axis);
      if (mine.empty()) return fail("joins rows with '" + g_.value(v).name + "', which has none");
      if (i > 0 && mine != axes) return fail("its inputs carry the rows on different axes");
      axes = mine;
    }
    if (std::find(axes.begin(), axes.end(), ax) != axes.end()) return fail("joins along the rows");
    set_outputs(n, finite(carry(n.inputs[0])));
    return true;
  }

  // Gather: the data gathered along another axis; the indices' rows (an embedding); or positions
  // along a carried axis that every size in the range has (BERT's pooler reads position 0).
  bool gather(const Node& n) {
    size_t c = 0;
    if (!single_carrier(n, &c)) return false;
    const int r = rank(n.inputs[0]);
    const int ax = static_cast<int>(normalize_axis(std::get<AxisAttrs>(n.attrs).axis, r));
    const int ri = rank(n.inputs[1]);
    Carries out;
    if (c == 1) {
      for (const Carry& x : carry(n.inputs[1])) out.push_back({ax + x.axis});
      set_outputs(n, out);
      return true;
    }
    for (const Carry& x : carry(n.inputs[0])) {
      if (x.axis == ax) {
        const Value& idx = g_.value(n.inputs[1]);
        if (!idx.is_constant()) return fail("gathers along the rows");
        for (double i : values_of(idx))
          if (i < 0 || i >= static_cast<double>(lo_))
            return fail("gathers position " + std::to_string(static_cast<int64_t>(i)) +
                        " along the rows, which not every size in the range has");
        continue;  // the gathered positions are valid: the axis is gone
      }
      out.push_back(reduced(x, x.axis < ax ? x.axis : x.axis - 1 + ri, true));
    }
    set_outputs(n, out);
    return true;
  }

  // Slice and Pad: fine where the carried axes are neither sliced nor padded.
  bool untouched_axis(const Node& n) {
    size_t c = 0;
    if (!single_carrier(n, &c)) return false;
    if (c != 0) return fail("a parameter carries the rows");
    for (const Carry& x : carry(n.inputs[0]))
      if (shape(n.outputs[0])[static_cast<size_t>(x.axis)] != shape(n.inputs[0])[static_cast<size_t>(x.axis)])
        return fail("cuts or pads the rows");
    set_outputs(n, finite(carry(n.inputs[0])));
    return true;
  }

  bool reduce(const Node& n) {
    const int r = rank(n.inputs[0]);
    const auto& attrs = std::get<ReduceAttrs>(n.attrs);
    std::vector<int64_t> axes;
    if (n.inputs.size() > 1 && n.inputs[1] != graph::kNoValue && !carry(n.inputs[1]).empty())
      return fail("its axes carry the rows");
    if (!constant_axes(g_, n, 1, r, &axes)) return fail("its axes are not constant");
    if (axes.empty()) {
      if (attrs.noop_with_empty_axes) {
        set_outputs(n, carry(n.inputs[0]));
        return true;
      }
      return fail("reduces every axis, the rows too");
    }
    Carries out;
    for (const Carry& x : carry(n.inputs[0])) {
      if (std::find(axes.begin(), axes.end(), x.axis) != axes.end()) {
        if (n.kind == OpKind::kReduceSum && x.pad == Pad::kConst && x.c == 0 && !any_nonfinite(carry(n.inputs[0])))
          continue;  // adds zeros
        return fail("reduces along the rows");
      }
      const int before =
          static_cast<int>(std::count_if(axes.begin(), axes.end(), [&](int64_t y) { return y < x.axis; }));
      const bool keeps_sign = n.kind == OpKind::kReduceSum || n.kind == OpKind::kReduceMean ||
                              n.kind == OpKind::kReduceMax || n.kind == OpKind::kReduceMin;
      out.push_back(reduced(x, attrs.keepdims ? x.axis : x.axis - before, keeps_sign));
    }
    set_outputs(n, out);
    return true;
  }

  const Graph& g_;
  const Graph* smaller_;
  int64_t lo_;
  std::vector<Carries> carry_;
  std::vector<std::string> unstable_;  // per value: why a constant that changes with the size cannot be padded
  std::string why_;
};

}  // namespace

RowAxes row_axes(const Graph& g, const std::map<ValueId, int>& inputs, const Graph* smaller, int64_t lo) {
  return Analysis(g, inputs, smaller, lo).run();
}

}  // namespace kiln::build
