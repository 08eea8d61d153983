#include "passes/dynamism.h"

#include <algorithm>

#include "runtime/cpu/kernels.h"

namespace kiln::tensor_plan {
void shape_bounds(int64_t start, int64_t end, int64_t rank, int64_t& s, int64_t& e);
}

namespace kiln::passes {

namespace {

constexpr int64_t kSmall = 4096;  // elements: masks of larger values are not kept

bool all_set(const std::vector<char>& m) {
  return std::all_of(m.begin(), m.end(), [](char c) { return c != 0; });
}

bool maskable(DataType t) {
  return t == DataType::kInt64 || t == DataType::kInt32 || t == DataType::kBool || t == DataType::kFloat32 ||
         t == DataType::kFloat64;
}

// A tensor shaped as `like` holding 1 where mask is set, else 0.
TensorView mask_view(const TensorView& like, const std::vector<char>& mask, std::vector<uint8_t>& storage) {
  TensorView v = like;
  storage.assign(std::max<size_t>(1, v.bytes()), 0);
  v.data = storage.data();
  dispatch_all(v.dtype, "mask", [&]<class T>(Tag<T>) {
    for (size_t i = 0; i < mask.size(); ++i) v.as<T>()[i] = mask[i] ? T(1) : T(0);
  });
  return v;
}

std::vector<char> read_mask(const TensorView& v) {
  std::vector<char> m;
  for (double x : v.to_double()) m.push_back(x != 0);
  return m;
}

// Per output element of a numpy broadcast of `shapes` to `out`: whether every input's element
// that it reads is set in that input's mask.
std::vector<char> broadcast_and(const std::vector<std::vector<int64_t>>& shapes,
                                const std::vector<std::vector<char>>& masks, const std::vector<int64_t>& out) {
  int64_t n = 1;
  for (int64_t d : out) n *= d;
  std::vector<char> r(static_cast<size_t>(n), 1);
  const auto rank = static_cast<int64_t>(out.size());
  for (size_t j = 0; j < shapes.size(); ++j) {
    const std::vector<int64_t>& s = shapes[j];
    const auto off = rank - static_cast<int64_t>(s.size());
    for (int64_t i = 0; i < n; ++i) {
      int64_t rest = i, idx = 0, stride = 1;
      for (int64_t d = rank - 1; d >= 0; --d) {
        const int64_t c = rest % out[static_cast<size_t>(d)];
        rest /= out[static_cast<size_t>(d)];
        if (d < off) continue;
        const int64_t dim = s[static_cast<size_t>(d - off)];
        idx += (dim == 1 ? 0 : c) * stride;
        stride *= dim;
      }
      r[static_cast<size_t>(i)] &= masks[j][static_cast<size_t>(idx)];
    }
  }
  return r;
}

// The constant integer values of input i of n (a constant, or every element known), else empty
// with ok = false.
std::vector<int64_t> ints_of(const TensorView& t, bool known, bool& ok) {
  ok = known && t.data && (t.dtype == DataType::kInt64 || t.dtype == DataType::kInt32);
  return ok ? t.to_int64() : std::vector<int64_t>{};
}

}  // namespace

std::vector<char> Dynamism::dims(graph::ValueId v) const {
  const size_t rank = g_.value(v).shape.size();
  if (!dd_[static_cast<size_t>(v)]) return std::vector<char>(rank, 0);
  auto it = dims_.find(v);
  return it != dims_.end() && it->second.size() == rank ? it->second : std::vector<char>(rank, 1);
}

std::vector<char> Dynamism::known(graph::ValueId v) const {
  const graph::Value& x = g_.value(v);
  const auto n = static_cast<size_t>(x.view().numel());
  if (x.is_constant()) return std::vector<char>(n, 1);
  auto it = known_.find(v);
  return it != known_.end() && it->second.size() == n ? it->second : std::vector<char>(n, 0);
}

bool Dynamism::fully_known(graph::ValueId v) const {
  if (v == graph::kNoValue) return true;
  if (g_.value(v).is_constant()) return true;
  const std::vector<char> d = dims(v);
  if (std::count(d.begin(), d.end(), 1) > 0) return false;  // its size varies
  auto it = known_.find(v);
  return it != known_.end() && all_set(it->second);
}

std::vector<char> Dynamism::out_dims(const graph::Node& n, const std::vector<TensorView>& ins, size_t k,
                                     size_t rank) const {
  const std::vector<char> all(rank, 1);
  if (n.inputs.empty() || n.inputs[0] == graph::kNoValue) return all;
  const std::vector<char> in = dims(n.inputs[0]);
  const auto in_rank = static_cast<int64_t>(in.size());
  bool ok = false;
  auto axes_of = [&](size_t i, int64_t r) {
    std::vector<int64_t> a = i < ins.size() ? ints_of(ins[i], fully_known(n.inputs[i]), ok) : std::vector<int64_t>{};
    for (int64_t& x : a) x = x < 0 ? x + r : x;
    return a;
  };
  std::vector<char> out;
  switch (n.kind) {
    case OpKind::kNonZero: out = {0, 1}; break;
    case OpKind::kNonMaxSuppression: out = {1, 0}; break;
    case OpKind::kShape:
    case OpKind::kSize: out.assign(rank, 0); break;
    case OpKind::kTranspose: {
      std::vector<int64_t> perm = std::get<TransposeAttrs>(n.attrs).perm;
      if (perm.empty())
        for (int64_t i = in_rank; i-- > 0;) perm.push_back(i);
      for (int64_t p : perm) out.push_back(p >= 0 && p < in_rank ? in[static_cast<size_t>(p)] : 1);
      break;
    }
    case OpKind::kUnsqueeze: {
      const std::vector<int64_t> axes = axes_of(1, static_cast<int64_t>(rank));
      if (!ok) return all;
      size_t j = 0;
      for (size_t d = 0; d < rank; ++d)
        out.push_back(std::count(axes.begin(), axes.end(), static_cast<int64_t>(d)) ? 0
                                                                                    : (j < in.size() ? in[j++] : 1));
      break;
    }
    case OpKind::kSqueeze: {
      const std::vector<int64_t> axes = axes_of(1, in_rank);
      if (!ok) return all;
      for (int64_t d = 0; d < in_rank; ++d)
        if (!std::count(axes.begin(), axes.end(), d)) out.push_back(in[static_cast<size_t>(d)]);
      break;
    }
    case OpKind::kGather: {
      const int64_t axis = std::get<AxisAttrs>(n.attrs).axis < 0 ? std::get<AxisAttrs>(n.attrs).axis + in_rank
                                                                 : std::get<AxisAttrs>(n.attrs).axis;
      if (axis < 0 || axis >= in_rank) return all;
      const std::vector<char> idx = dims(n.inputs[1]);
      out.assign(in.begin(), in.begin() + axis);
      out.insert(out.end(), idx.begin(), idx.end());
      out.insert(out.end(), in.begin() + axis + 1, in.end());
      break;
    }
    case OpKind::kConcat:
      out = in;
      for (size_t i = 1; i < n.inputs.size(); ++i) {
        const std::vector<char> o = dims(n.inputs[i]);
        for (size_t d = 0; d < out.size() && d < o.size(); ++d) out[d] |= o[d];
      }
      break;
    case OpKind::kSlice: {
      bool params = true;
      for (size_t i = 1; i < n.inputs.size(); ++i) params &= fully_known(n.inputs[i]);
      out = in;  // constant starts and ends keep a static dimension static
      if (!params) {
        const std::vector<int64_t> axes = n.inputs.size() > 3 ? axes_of(3, in_rank) : std::vector<int64_t>{};
        if (n.inputs.size() > 3 && !ok) return all;
        for (int64_t d = 0; d < in_rank; ++d)
          if (n.inputs.size() <= 3 || std::count(axes.begin(), axes.end(), d)) out[static_cast<size_t>(d)] = 1;
      }
      break;
    }
    case OpKind::kReshape: {
      const std::vector<int64_t> target = ins.size() > 1 && ins[1].data ? ins[1].to_int64() : std::vector<int64_t>{};
      if (target.size() != rank) return all;
      const std::vector<char> elem = known(n.inputs[1]);
      // -1 is numel(x) over the other entries' product: it varies with any of them.
      const bool any = std::count(in.begin(), in.end(), 1) > 0 || std::count(elem.begin(), elem.end(), 0) > 0;
      const bool copy_zero = std::get<ReshapeAttrs>(n.attrs).allowzero == 0;  // 0: the input's dimension
      for (size_t d = 0; d < rank; ++d) {
        if (!elem[d] || target[d] == -1)
          out.push_back(!elem[d] || any);
        else if (target[d] == 0 && copy_zero)
          out.push_back(d < in.size() ? in[d] : 1);
        else
          out.push_back(0);
      }
      break;
    }
    case OpKind::kFlatten: {
      const int64_t a = std::get<AxisAttrs>(n.attrs).axis < 0 ? std::get<AxisAttrs>(n.attrs).axis + in_rank
                                                              : std::get<AxisAttrs>(n.attrs).axis;
      out = {0, 0};
      for (int64_t d = 0; d < in_rank; ++d) out[d < a ? 0 : 1] |= in[static_cast<size_t>(d)];
      break;
    }
    case OpKind::kSplit: {
      out = in;
      const int64_t a = std::get<SplitAttrs>(n.attrs).axis < 0 ? std::get<SplitAttrs>(n.attrs).axis + in_rank
                                                               : std::get<SplitAttrs>(n.attrs).axis;
      if (n.inputs.size() > 1 && n.inputs[1] != graph::kNoValue && !fully_known(n.inputs[1])) {
        if (a < 0 || a >= in_rank) return all;
        out[static_cast<size_t>(a)] = 1;  // sizes computed from shapes
      }
      break;
    }
    case OpKind::kIdentity:
    case OpKind::kCast: out = in; break;
    case OpKind::kTopK: {
      const int64_t axis = std::get<TopKAttrs>(n.attrs).axis < 0 ? std::get<TopKAttrs>(n.attrs).axis + in_rank
                                                                 : std::get<TopKAttrs>(n.attrs).axis;
      out = in;
      if (axis >= 0 && axis < in_rank) out[static_cast<size_t>(axis)] = !fully_known(n.inputs[1]);
      break;
    }
    case OpKind::kConstantOfShape: {
      const std::vector<char> elem = known(n.inputs[0]);
      for (char c : elem) out.push_back(!c);
      break;
    }
    case OpKind::kSelectBranch: {
      const size_t m = n.outputs.size();
      const std::vector<char> a = dims(n.inputs[1 + k]), b = dims(n.inputs[1 + m + k]);
      const std::vector<int64_t>&sa = g_.value(n.inputs[1 + k]).shape, &sb = g_.value(n.inputs[1 + m + k]).shape;
      if (a.size() != rank || b.size() != rank) return all;
      for (size_t d = 0; d < rank; ++d) out.push_back(a[d] || b[d] || sa[d] != sb[d]);
      break;
    }
    default:
      if (has_trait(n.kind, kPerElement)) {
        out = in;
      } else if (has_trait(n.kind, kBroadcast)) {
        out.assign(rank, 0);
        for (graph::ValueId v : n.inputs) {
          if (v == graph::kNoValue) continue;
          const std::vector<char> o = dims(v);
          const size_t off = rank - std::min(rank, o.size());
          for (size_t d = 0; d < o.size() && d < rank; ++d) out[off + d] |= o[d];
        }
      } else if (std::holds_alternative<ReduceAttrs>(n.attrs)) {
        const bool keep = std::get<ReduceAttrs>(n.attrs).keepdims != 0;
        std::vector<int64_t> axes;
        if (n.inputs.size() > 1 && n.inputs[1] != graph::kNoValue) {
          axes = axes_of(1, in_rank);
          if (!ok) return all;
        }
        if (axes.empty() && std::get<ReduceAttrs>(n.attrs).noop_with_empty_axes) return in;
        for (int64_t d = 0; d < in_rank; ++d) {
          const bool reduced = axes.empty() || std::count(axes.begin(), axes.end(), d);
          if (!reduced)
            out.push_back(in[static_cast<size_t>(d)]);
          else if (keep)
            out.push_back(0);
        }
      } else {
        return all;
      }
  }
  return out.size() == rank ? out : all;
}

std::vector<char> Dynamism::out_known(const graph::Node& n, const std::vector<TensorView>& ins, size_t k,
                                      const std::vector<OutputType>& types) const {
  const OutputType& type = types[k];
  int64_t numel = 1;
  for (int64_t d : type.shape) numel *= d;
  const std::vector<char> none(static_cast<size_t>(numel), 0), every(static_cast<size_t>(numel), 1);
  auto small = [&](graph::ValueId v) {
    return v == graph::kNoValue || g_.value(v).is_constant() || g_.value(v).view().numel() <= kSmall;
  };
  for (graph::ValueId v : n.inputs)
    if (!small(v) && !(n.kind == OpKind::kShape || n.kind == OpKind::kSize)) return none;
  bool all_known = true;
  for (graph::ValueId v : n.inputs) all_known &= fully_known(v);
  if (all_known && n.kind != OpKind::kShape && n.kind != OpKind::kSize) return every;
  switch (n.kind) {
    case OpKind::kShape: {
      const std::vector<char> d = dims(n.inputs[0]);
      int64_t s = 0, e = 0;
      tensor_plan::shape_bounds(std::get<ShapeAttrs>(n.attrs).start, std::get<ShapeAttrs>(n.attrs).end,
                                static_cast<int64_t>(d.size()), s, e);
      std::vector<char> r;
      for (int64_t i = s; i < e; ++i) r.push_back(!d[static_cast<size_t>(i)]);
      return r.size() == every.size() ? r : none;
    }
    case OpKind::kSize: {
      const std::vector<char> d = dims(n.inputs[0]);
      return std::count(d.begin(), d.end(), 1) == 0 ? every : none;
    }
    case OpKind::kReshape:
    case OpKind::kFlatten:
    case OpKind::kSqueeze:
    case OpKind::kUnsqueeze:
    case OpKind::kIdentity:
    case OpKind::kCast: {  // the same elements in the same order
      std::vector<char> r = known(n.inputs[0]);
      return r.size() == every.size() ? r : none;
    }
    case OpKind::kGather:
    case OpKind::kSlice:
    case OpKind::kConcat:
    case OpKind::kTranspose:
    case OpKind::kSplit:
    case OpKind::kExpand:
    case OpKind::kTile: {
      // Elements moved, not computed: the op itself on the masks. Inputs past the data (indices,
      // starts, repeats) must be known: they decide which elements go where.
      const bool all_data = n.kind == OpKind::kConcat;
      for (size_t i = all_data ? n.inputs.size() : 1; i < n.inputs.size(); ++i)
        if (!fully_known(n.inputs[i])) return none;
      std::vector<std::vector<uint8_t>> storage(ins.size()), outs_storage(n.outputs.size());
      std::vector<TensorView> mins = ins;
      for (size_t i = 0; i < (all_data ? ins.size() : 1); ++i) {
        if (!ins[i].exists) continue;
        if (!maskable(ins[i].dtype)) return none;
        mins[i] = mask_view(ins[i], known(n.inputs[i]), storage[i]);
      }
      std::vector<TensorView> outs;  // every output at its type, from the node's inference
      for (size_t j = 0; j < types.size(); ++j) {
        TensorView v{types[j].dtype, types[j].shape, nullptr, true};
        outs_storage[j].assign(std::max<size_t>(1, v.bytes()), 0);
        v.data = outs_storage[j].data();
        outs.push_back(v);
      }
      cpu::KernelEnv env{};
      try {
        cpu::cpu_kernel(n.kind)(n.kind, n.attrs, mins, outs, env);
      } catch (const Error&) {
        return none;
      }
      std::vector<char> r = read_mask(outs[k]);
      return r.size() == every.size() ? r : none;
    }
    default: break;
  }
  if (has_trait(n.kind, kPerElement) || has_trait(n.kind, kBroadcast)) {
    std::vector<std::vector<int64_t>> shapes;
    std::vector<std::vector<char>> masks;
    for (graph::ValueId v : n.inputs) {
      if (v == graph::kNoValue) continue;
      shapes.push_back(g_.value(v).shape);
      masks.push_back(known(v));
    }
    return broadcast_and(shapes, masks, type.shape);
  }
  if (std::holds_alternative<ReduceAttrs>(n.attrs)) {  // every reduced element known: ReduceMin of the mask
    if (n.inputs.size() > 1 && !fully_known(n.inputs[1])) return none;
    std::vector<uint8_t> storage, out_storage(static_cast<size_t>(std::max<int64_t>(1, numel)) * 8);
    TensorView like = ins[0];
    like.dtype = DataType::kInt64;
    std::vector<TensorView> mins = ins;
    mins[0] = mask_view(like, known(n.inputs[0]), storage);
    TensorView out{DataType::kInt64, type.shape, out_storage.data(), true};
    cpu::KernelEnv env{};
    try {
      cpu::cpu_kernel(OpKind::kReduceMin)(OpKind::kReduceMin, n.attrs, mins, std::span<const TensorView>(&out, 1), env);
    } catch (const Error&) {
      return none;
    }
    return read_mask(out);
  }
  return none;
}

std::vector<graph::ValueId> Dynamism::update(const graph::Node& n, const std::vector<TensorView>& ins,
                                             const std::vector<OutputType>& types,
                                             const std::unordered_map<graph::ValueId, std::vector<uint8_t>>& values) {
  std::vector<graph::ValueId> constant;
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    const graph::ValueId o = n.outputs[k];
    if (o == graph::kNoValue) continue;
    if (dd_[static_cast<size_t>(o)]) dims_[o] = out_dims(n, ins, k, types[k].shape.size());
    if (!values.contains(o) || has_trait(n.kind, kDataDependent)) continue;
    // Masks hold positions at the bound's shape: a value whose shape varies keeps none, since the
    // same position may hold another element in a run.
    const std::vector<char> d = dims(o);
    if (std::count(d.begin(), d.end(), 1) > 0) {
      known_[o].assign(static_cast<size_t>(g_.value(o).view().numel()), 0);
      continue;
    }
    std::vector<char> m = out_known(n, ins, k, types);
    if (all_set(m)) constant.push_back(o);
    known_[o] = std::move(m);
  }
  return constant;
}

}  // namespace kiln::passes
