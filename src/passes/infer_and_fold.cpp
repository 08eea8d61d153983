// infer-and-fold: walks the nodes in order, infers each node's output types and shapes, and
// evaluates (folds) every node whose inputs are all constant with the CPU reference kernels. Shape
// and Size only need their input's shape, so they always fold. Folding a node whose output is much
// larger than its inputs (ConstantOfShape of a big shape) is skipped so the engine stays small.
// DequantizeLinear is left for fuse-qdq, which needs the quantized weights it reads.
//
// Data-dependent shapes (decision 56): a data-dependent op (NonZero) never folds, and nothing that
// reads its result does. The shape of such a value is an upper bound, and so the values computed
// from it (Shape, then Gather, Concat, ReduceMin...) are evaluated at that bound, without folding,
// so that the ops whose shapes they give (Reshape, TopK, ConstantOfShape) get upper bounds too;
// the runtime evaluates them again from each run's shapes. An If's branch whose condition folds
// to the other value is dropped uninferred, and its SelectBranch becomes Identity nodes.
#include <set>
#include <unordered_map>

#include "core/shape_infer.h"
#include "passes/dynamism.h"
#include "passes/pass.h"
#include "runtime/cpu/kernels.h"

namespace kiln::passes {

namespace {

constexpr size_t kFoldGrowthLimit = size_t{1} << 20;  // bytes an expanding fold may produce

std::vector<uint8_t> shape_value(const std::vector<int64_t>& dims) {
  std::vector<uint8_t> b(dims.size() * 8);
  if (!b.empty()) std::memcpy(b.data(), dims.data(), b.size());
  return b;
}

// The value of Shape or Size n from its input's (static or bound) shape.
std::vector<uint8_t> shape_op_value(const graph::Graph& g, const graph::Node& n) {
  const graph::Value& in = g.value(n.inputs[0]);
  if (n.kind == OpKind::kSize) return shape_value({in.view().numel()});
  const auto& a = std::get<ShapeAttrs>(n.attrs);
  auto r = static_cast<int64_t>(in.shape.size());
  auto clamp = [&](int64_t x) { return std::clamp(x < 0 ? x + r : x, int64_t{0}, r); };
  int64_t s = clamp(a.start), e = clamp(a.end);
  std::vector<int64_t> dims;
  for (int64_t i = s; i < e; ++i) dims.push_back(in.shape[static_cast<size_t>(i)]);
  return shape_value(dims);
}

bool is_shape_op(const graph::Node& n) { return n.kind == OpKind::kSize || n.kind == OpKind::kShape; }

// Values computed from data-dependent shapes are evaluated at the bound up to this size (shapes,
// counts, conditions: the runtime evaluates the same ones on the host).
constexpr size_t kBoundValueBytes = 4096;

// Runs n's CPU kernel on `ins` (which all have data) into fresh buffers of `types`.
std::vector<std::vector<uint8_t>> evaluate(const graph::Node& n, const std::vector<TensorView>& ins,
                                           const std::vector<OutputType>& types) {
  std::vector<std::vector<uint8_t>> bufs(types.size());
  std::vector<TensorView> outs;
  for (size_t k = 0; k < types.size(); ++k) {
    TensorView v{types[k].dtype, types[k].shape, nullptr, true};
    bufs[k].resize(v.bytes());
    v.data = bufs[k].data();
    outs.push_back(v);
  }
  cpu::KernelEnv env{};
  cpu::cpu_kernel(n.kind)(n.kind, n.attrs, ins, outs, env);
  return bufs;
}

// Whether Where can give output k of SelectBranch n, its condition known only at run time: both
// branches' values have the same static shape and element type, neither is data-dependent, and
// the one-element condition broadcasts to nothing larger.
template <class IsDd>
bool where_can_pick(const graph::Graph& g, const graph::Node& n, size_t k, const IsDd& is_dd) {
  const graph::ValueId c = n.inputs.at(0);
  const graph::Value& cond = g.value(c);
  const size_t outs = n.outputs.size();
  if (cond.is_constant() || is_dd(c) || !cond.shape_static() || cond.dtype != DataType::kBool ||
      cond.view().numel() != 1 || n.inputs.size() != 1 + 2 * outs || n.outputs[k] == graph::kNoValue)
    return false;
  const graph::ValueId a = n.inputs[1 + k], b = n.inputs[1 + outs + k];
  if (a == graph::kNoValue || b == graph::kNoValue || is_dd(a) || is_dd(b)) return false;
  const graph::Value &x = g.value(a), &y = g.value(b);
  return x.shape_static() && y.shape_static() && x.dtype == y.dtype && x.shape == y.shape &&
         cond.shape.size() <= x.shape.size();
}

}  // namespace

std::vector<std::string> shape_determining_inputs(const graph::Graph& g) {
  std::vector<int> producer = g.producers();
  std::set<graph::ValueId> need;
  std::vector<graph::ValueId> work;
  for (const graph::Node& n : g.nodes) {
    uint32_t mask = op_info(n.kind).const_inputs;
    for (size_t i = 0; i < n.inputs.size() && i < 32; ++i)
      if ((mask >> i & 1u) && n.inputs[i] != graph::kNoValue) work.push_back(n.inputs[i]);
  }
  std::set<graph::ValueId> seen;
  while (!work.empty()) {
    graph::ValueId v = work.back();
    work.pop_back();
    if (!seen.insert(v).second || g.value(v).is_constant()) continue;
    int p = producer[static_cast<size_t>(v)];
    if (p < 0) {
      need.insert(v);
      continue;
    }
    const graph::Node& n = g.nodes[static_cast<size_t>(p)];
    if (n.kind == OpKind::kShape || n.kind == OpKind::kSize) continue;  // only the input's shape matters
    for (graph::ValueId in : n.inputs)
      if (in != graph::kNoValue) work.push_back(in);
  }
  std::vector<std::string> names;
  for (graph::ValueId in : g.inputs)
    if (need.count(in)) names.push_back(g.value(in).name);
  return names;
}

PassResult infer_and_fold(graph::Graph& g, const BuildOptions&) {
  PassResult r;
  auto set_type = [&](graph::ValueId id, DataType dtype, const std::vector<int64_t>& shape) -> graph::Value& {
    graph::Value& v = g.value(id);
    v.dtype = dtype;
    v.shape = shape;
    v.has_shape = true;
    v.dim_params.clear();
    return v;
  };
  std::vector<graph::Node> kept;
  std::vector<bool> dd(g.values.size(), false);                    // see Graph::data_dependent()
  std::unordered_map<graph::ValueId, std::vector<uint8_t>> bound;  // values at the bound of dd shapes
  auto is_dd = [&](graph::ValueId v) { return v != graph::kNoValue && dd[static_cast<size_t>(v)]; };
  Dynamism dynamism(g, dd);  // which of those are the same in every run after all
  // Whether n lies in an If branch that its condition, folded, does not take.
  auto untaken = [&](graph::Node& n) {
    auto it = g.branches.find(n.name);
    if (it == g.branches.end()) return false;
    for (const auto& [cond, then] : it->second) {
      const graph::Value& c = g.value(cond);
      if (c.is_constant() && !c.data->empty() && ((*c.data)[0] != 0) != then) return true;
    }
    return false;
  };
  for (graph::Node& n : g.nodes) {
    std::string where = "node '" + n.name + "' (" + std::string(op_name(n.kind)) + ")";
    if (untaken(n)) {
      ++r.changes;
      continue;
    }
    if (n.kind == OpKind::kSelectBranch && g.value(n.inputs.at(0)).is_constant()) {
      // The condition folded: the chosen branch's values, as they are.
      const graph::Value& c = g.value(n.inputs[0]);
      const size_t first = !c.data->empty() && (*c.data)[0] != 0 ? 1 : 1 + n.outputs.size();
      for (size_t k = 0; k < n.outputs.size(); ++k) {
        const graph::ValueId from = n.inputs.at(first + k), to = n.outputs[k];
        if (to == graph::kNoValue) continue;
        const graph::Value& v = g.value(from);
        if (!v.shape_static()) throw Error(where + ": the chosen branch's output '" + v.name + "' has no known shape");
        graph::Value& out = set_type(to, v.dtype, v.shape);
        if (v.is_constant()) out.data = v.data;
        dd[static_cast<size_t>(to)] = is_dd(from);
        if (auto b = bound.find(from); b != bound.end()) bound[to] = b->second;
        if (!v.is_constant())
          kept.push_back(
              graph::Node{n.name + "/" + std::to_string(k), OpKind::kIdentity, NoAttrs{}, {from}, {to}, n.origin});
      }
      ++r.changes;
      continue;
    }
    if (n.kind == OpKind::kSelectBranch && !g.value(n.inputs.at(0)).is_constant()) {
      // Outputs whose branches give the same static shape: Where picks on the device, and their
      // shapes do not depend on the condition (no read-back of it, nothing after them dynamic).
      const size_t outs = n.outputs.size();
      std::vector<graph::ValueId> then, other, rest;
      for (size_t k = 0; k < outs; ++k) {
        const graph::ValueId a = n.inputs.at(1 + k), b = n.inputs.at(1 + outs + k), to = n.outputs[k];
        if (!where_can_pick(g, n, k, is_dd)) {
          then.push_back(a), other.push_back(b), rest.push_back(to);
          continue;
        }
        set_type(to, g.value(a).dtype, g.value(a).shape);
        kept.push_back(graph::Node{
            n.name + "/" + std::to_string(k), OpKind::kWhere, NoAttrs{}, {n.inputs[0], a, b}, {to}, n.origin});
      }
      if (rest.size() < outs) {
        ++r.changes;
        if (rest.empty()) continue;
        n.inputs.resize(1);  // the condition
        n.inputs.insert(n.inputs.end(), then.begin(), then.end());
        n.inputs.insert(n.inputs.end(), other.begin(), other.end());
        n.outputs = rest;
      }
    }
    if (n.kind == OpKind::kSqueeze && (n.inputs.size() < 2 || n.inputs[1] == graph::kNoValue) && is_dd(n.inputs.at(0)))
      throw Error(where + ": squeezes '" + g.value(n.inputs[0]).name +
                  "' without axes, but its shape depends on the data, so which dimensions are 1 (and the result's "
                  "rank) would too; give Squeeze its axes");
    std::vector<TensorView> ins;
    bool all_const = true, reads_dd = false, all_known = true;
    size_t in_bytes = 0;
    for (graph::ValueId id : n.inputs) {
      if (id == graph::kNoValue) {
        ins.push_back(absent_tensor());
        continue;
      }
      const graph::Value& v = g.value(id);
      if (!v.shape_static()) throw Error(where + ": input '" + v.name + "' has no known shape");
      ins.push_back(v.view());
      all_const &= v.is_constant();
      reads_dd |= is_dd(id);
      in_bytes += v.is_constant() ? v.data->size() : 0;
      // The bound's value where there is one, except for an If's condition: its outputs' bound is
      // the larger of the branches', whichever the bound's value would pick.
      static int64_t nothing = 0;  // data for a value without elements
      auto b = bound.find(id);
      if (!v.is_constant() && b != bound.end() && !(n.kind == OpKind::kSelectBranch && ins.size() == 1))
        ins.back().data = b->second.empty() ? static_cast<void*>(&nothing) : b->second.data();
      all_known &= ins.back().data != nullptr;
    }
    if (n.kind == OpKind::kCastLike) std::get<CastAttrs>(n.attrs).to = ins.at(1).dtype;
    std::vector<OutputType> types;
    try {
      types = infer_shapes(n.kind, n.attrs, ins, n.outputs.size());
    } catch (const Error& e) {
      std::string msg = where + ": " + e.what();
      std::vector<std::string> frozen = shape_determining_inputs(g);
      const bool needs_value = std::string(e.what()).find("must be a constant") != std::string::npos;
      if (needs_value && reads_dd) {
        msg +=
            ". It reads a value computed from data-dependent shapes (after a NonZero, NonMaxSuppression or "
            "If) that Kiln could not evaluate at their upper bound";
      } else if (needs_value && !frozen.empty()) {
        msg += ". It depends on the model input(s):";
        for (const std::string& f : frozen) msg += " " + f;
        msg += "; give their values at build time with --const NAME=FILE (.npy or .pb)";
      }
      throw Error(msg);
    }
    size_t out_bytes = 0;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      if (n.outputs[k] == graph::kNoValue) continue;
      graph::Value& v = set_type(n.outputs[k], types[k].dtype, types[k].shape);
      out_bytes += v.view().bytes();
      const bool source = has_trait(n.kind, kDataDependent) && k == 0;
      dd[static_cast<size_t>(n.outputs[k])] = reads_dd || source || has_trait(n.kind, kShapeFromData);
    }
    if (is_shape_op(n) && !n.outputs.empty() && n.outputs[0] != graph::kNoValue) {
      if (!reads_dd) {
        g.value(n.outputs[0]).data = std::make_shared<const std::vector<uint8_t>>(shape_op_value(g, n));
        ++r.changes;
        continue;
      }
      bound[n.outputs[0]] = shape_op_value(g, n);  // the shape's value at the bound; the node stays
    } else if (reads_dd && all_known && out_bytes <= kBoundValueBytes && cpu::cpu_kernel(n.kind) &&
               !has_trait(n.kind, kDataDependent)) {
      std::vector<std::vector<uint8_t>> values;
      try {
        values = evaluate(n, ins, types);
      } catch (const Error& e) {
        throw Error(where +
                    ": evaluating it at the upper bound of its inputs' data-dependent shapes failed: " + e.what());
      }
      for (size_t k = 0; k < n.outputs.size(); ++k)
        if (n.outputs[k] != graph::kNoValue) bound[n.outputs[k]] = std::move(values[k]);
    }
    if (reads_dd || has_trait(n.kind, kDataDependent) || has_trait(n.kind, kShapeFromData)) {
      // A value that comes out the same in every run (a static dimension's size, and what is
      // computed from such) is a constant: the bound's value is its value.
      size_t folded = 0, outputs = 0;
      for (graph::ValueId o : dynamism.update(n, ins, types, bound)) {
        g.value(o).data = std::make_shared<const std::vector<uint8_t>>(std::move(bound[o]));
        bound.erase(o);
        dd[static_cast<size_t>(o)] = false;
        ++folded;
      }
      for (graph::ValueId o : n.outputs) outputs += o != graph::kNoValue;
      if (folded > 0 && folded == outputs) {
        ++r.changes;
        continue;
      }
    }
    // DequantizeLinear of constant weights stays a node: fuse-qdq reads the integer weights and
    // their scales from it (and folds the ones it does not fuse).
    // A data-dependent op's kernel packs its result below the bound: it runs in the engine.
    bool fold = all_const && cpu::cpu_kernel(n.kind) && n.kind != OpKind::kDequantizeLinear &&
                !has_trait(n.kind, kDataDependent) && (out_bytes <= kFoldGrowthLimit || out_bytes <= in_bytes);
    if (!fold) {
      kept.push_back(std::move(n));
      continue;
    }
    // Evaluate the node now; unused optional outputs still need a buffer for the kernel.
    std::vector<std::vector<uint8_t>> bufs;
    try {
      bufs = evaluate(n, ins, types);
    } catch (const Error& e) {
      throw Error(where + ": evaluating it on constant inputs failed: " + e.what());
    }
    for (size_t k = 0; k < n.outputs.size(); ++k)
      if (n.outputs[k] != graph::kNoValue)
        g.value(n.outputs[k]).data = std::make_shared<const std::vector<uint8_t>>(std::move(bufs[k]));
    ++r.changes;
  }
  r.detail = std::to_string(r.changes) + " node(s) folded into constants";
  g.nodes = std::move(kept);
  g.branches.clear();
  return r;
}

}  // namespace kiln::passes
