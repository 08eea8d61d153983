// The view stages (view_plan.h). Values are grouped under roots: a root owns memory (an arena slot,
// or the caller's buffer for an engine output) and its members lie at fixed offsets in it. Making a
// view means moving one root, with all its members, into another: "x lies at y + delta". The rules
// that keep every view exact:
//   - Engine inputs, constants and engine outputs never move (the caller or the weight blob decides
//     where they are); inputs and constants host nothing (the loader accepts only activations and
//     outputs as bases). An output may host: the contexts re-resolve views after a binding.
//   - Every byte of a root is written by at most one step: a move that would make written ranges
//     overlap is refused. This is what refuses a value read twice by one Concat (it cannot lie in two
//     slices; the second one is copied), a producer already placed elsewhere in a conflicting way, or
//     a root that would spill over a slice another producer writes. No Kiln step runs in place today
//     (every step writes values distinct from the ones it reads), so a step never writes bytes it
//     reads; the loader checks the same rule on every engine.
//   - A value's bytes are written before the step that made it (the Reshape, Concat or Split now
//     gone), and that step came before every reader, so the graph's order still puts writers first.
//   - Offsets are multiples of view_alignment, and a view has its root's element type.
// An eliminated Concat or Split may leave one slice to copy (an engine input or output, a value
// already placed elsewhere): an Identity step into (or out of) that slice. With two or more, the
// node stays as it is: k copy launches would cost more than the one launch they replace saves.
#include "build/view_plan.h"

#include <algorithm>
#include <set>

#include "passes/rewrite_util.h"

namespace kiln::build {

using passes::perm_keeps_order;
using passes::resolved_perm;

namespace {

using graph::kNoValue;
using graph::ValueId;

class Layout {
 public:
  Layout(const graph::Graph& g, const std::string& target) : g_(g), target_(target) {
    for (size_t v = 0; v < g.values.size(); ++v) add(static_cast<ValueId>(v));
    for (ValueId v : g.inputs) {
      fixed_[idx(v)] = 1;
      hosts_[idx(v)] = 0;
    }
    for (ValueId v : g.outputs) fixed_[idx(v)] = 1;
    for (const graph::Node& n : g.nodes)
      for (ValueId o : n.outputs)
        if (o != kNoValue) written_[idx(o)] = 1;
  }

  // Registers value v (the next id of the graph): its own root, written by no step yet.
  void add(ValueId v) {
    const graph::Value& val = g_.value(v);
    root_.push_back(v);
    offset_.push_back(0);
    members_.push_back({v});
    bytes_.push_back(val.has_shape ? static_cast<uint64_t>(val.view().bytes()) : 0);
    written_.push_back(0);
    fixed_.push_back(val.is_constant());
    hosts_.push_back(!val.is_constant());
  }

  ValueId root(ValueId v) const { return root_[idx(v)]; }
  uint64_t offset(ValueId v) const { return offset_[idx(v)]; }
  uint64_t bytes(ValueId v) const { return bytes_[idx(v)]; }
  const std::vector<ValueId>& roots() const { return root_; }
  const std::vector<uint64_t>& offsets() const { return offset_; }

  // Marks whether a step of the program writes v.
  void set_written(ValueId v, bool w) {
    journal_.push_back({Entry::kWritten, v, kNoValue, 0, written_[idx(v)] != 0});
    written_[idx(v)] = w;
  }

  // Makes x lie at y + delta bytes, moving x's root into y's or y's into x's; `narrow`: only x's
  // root into y's, and only when it is no larger than x. False (changing nothing) when the rules in
  // the file comment forbid it.
  bool coincide(ValueId x, ValueId y, uint64_t delta, bool narrow = false) {
    const ValueId a = root(x), b = root(y);
    const int64_t at = static_cast<int64_t>(offset(y) + delta) - static_cast<int64_t>(offset(x));
    if (a == b) return at == 0;
    if (narrow && bytes(a) != bytes(x)) return false;
    if (at >= 0 && move(a, b, static_cast<uint64_t>(at))) return true;
    return !narrow && at <= 0 && move(b, a, static_cast<uint64_t>(-at));
  }

  // Could a new value of `bytes` bytes of type t lie at `at` in root r (written by a step, or not)?
  bool slot_free(ValueId r, uint64_t at, uint64_t bytes, DataType t, bool written) const {
    if (!hosts_[idx(r)] || g_.value(r).dtype != t || at > bytes_[idx(r)] || bytes > bytes_[idx(r)] - at) return false;
    if (bytes > 0 && at % view_alignment(target_, t) != 0) return false;
    if (!written) return true;
    for (ValueId w : members_[idx(r)])
      if (written_[idx(w)] && overlap(at, bytes, offset(w), bytes_[idx(w)])) return false;
    return true;
  }

  // A point to roll back to, and the rollback.
  size_t mark() const { return journal_.size(); }
  void rollback(size_t mark) {
    while (journal_.size() > mark) {
      const Entry e = journal_.back();
      journal_.pop_back();
      if (e.kind == Entry::kWritten) {
        written_[idx(e.a)] = e.was_written;
        continue;
      }
      std::vector<ValueId>& to = members_[idx(e.b)];
      for (size_t k = e.count; k-- > 0;) {
        const ValueId m = to[to.size() - 1 - k];
        root_[idx(m)] = e.a;
        offset_[idx(m)] -= e.at;
        members_[idx(e.a)].push_back(m);
      }
      to.resize(to.size() - e.count);
    }
  }
  void commit() { journal_.clear(); }

 private:
  struct Entry {
    enum Kind { kMove, kWritten } kind;
    ValueId a, b;  // kMove: root a went into root b at `at`, `count` members; kWritten: value a
    uint64_t at;
    bool was_written;
    size_t count = 0;
  };

  static size_t idx(ValueId v) { return static_cast<size_t>(v); }
  static bool overlap(uint64_t a, uint64_t an, uint64_t b, uint64_t bn) {
    return an > 0 && bn > 0 && a < b + bn && b < a + an;
  }

  // Root a, with its members, into root b at byte `at`.
  bool move(ValueId a, ValueId b, uint64_t at) {
    if (fixed_[idx(a)] || !hosts_[idx(b)]) return false;
    if (at > bytes_[idx(b)] || bytes_[idx(a)] > bytes_[idx(b)] - at) return false;
    const DataType t = g_.value(b).dtype;
    for (ValueId m : members_[idx(a)]) {
      if (g_.value(m).dtype != t) return false;
      if (bytes_[idx(m)] > 0 && (at + offset(m)) % view_alignment(target_, t) != 0) return false;
      if (!written_[idx(m)]) continue;
      for (ValueId w : members_[idx(b)])
        if (written_[idx(w)] && overlap(at + offset(m), bytes_[idx(m)], offset(w), bytes_[idx(w)])) return false;
    }
    std::vector<ValueId>& from = members_[idx(a)];
    for (ValueId m : from) {
      root_[idx(m)] = b;
      offset_[idx(m)] += at;
      members_[idx(b)].push_back(m);
    }
    journal_.push_back({Entry::kMove, a, b, at, false, from.size()});
    from.clear();
    return true;
  }

  const graph::Graph& g_;
  const std::string& target_;
  std::vector<ValueId> root_;
  std::vector<uint64_t> offset_;
  std::vector<std::vector<ValueId>> members_;  // of each root, in the order they joined
  std::vector<uint64_t> bytes_;
  std::vector<char> written_, fixed_, hosts_;
  std::vector<Entry> journal_;
};

// Walks the nodes once, turning each into views where its stage is enabled and allows it.
class Planner {
 public:
  Planner(EngineProgram& p, const BuildOptions& o)
      : p_(p), g_(p.graph), layout_(p.graph, o.target), emitted_(p.graph.nodes.size()) {
    const std::set<std::string> off(o.disabled_passes.begin(), o.disabled_passes.end());
    reshapes_ = !off.count(kViewStages[0]);
    concat_ = !off.count(kViewStages[1]);
    split_ = !off.count(kViewStages[2]);
  }

  void run() {
    const size_t n = g_.nodes.size();
    // A value of data-dependent shape is packed at its run's shape, so offsets planned at its bound
    // would be wrong: its nodes stay steps, which the runtime re-infers (decision 56).
    const std::vector<bool> dd = g_.data_dependent();
    for (size_t i = 0; i < n; ++i) {
      const OpKind k = g_.nodes[i].kind;
      bool gone = false;
      const bool bounded = std::any_of(g_.nodes[i].outputs.begin(), g_.nodes[i].outputs.end(), [&](graph::ValueId v) {
        return v != graph::kNoValue && dd[static_cast<size_t>(v)];
      });
      if (bounded) {
        emitted_[i].push_back(g_.nodes[i]);
        layout_.commit();
        continue;
      }
      if (reshapes_ && is_reshape_like(g_.nodes[i])) gone = view_reshape(i);
      if (concat_ && k == OpKind::kConcat) gone = eliminate_concat(i);
      if (split_ && k == OpKind::kSplit) gone = eliminate_split(i);
      if (!gone) emitted_[i].push_back(g_.nodes[i]);
      layout_.commit();
    }
    std::vector<graph::Node> steps;
    for (auto& list : emitted_)
      for (graph::Node& s : list) steps.push_back(std::move(s));
    g_.nodes = std::move(steps);
    p_.root = layout_.roots();
    p_.offset = layout_.offsets();
    if (reshapes_) p_.stages.push_back({kViewStages[0], reshape_views_, ""});
    if (concat_) p_.stages.push_back({kViewStages[1], concats_, slices_detail(concat_views_, concat_copies_)});
    if (split_) p_.stages.push_back({kViewStages[2], splits_, slices_detail(split_views_, split_copies_)});
  }

 private:
  // A Transpose that keeps the order of the axes longer than 1 (channels-last [N, 1, 1, C] back to
  // [N, C, 1, 1] after a global pool, say) moves no bytes either.
  bool is_reshape_like(const graph::Node& n) const {
    const OpKind k = n.kind;
    if (k == OpKind::kTranspose && !n.inputs.empty() && n.inputs[0] != kNoValue) {
      const std::vector<int64_t>& shape = g_.value(n.inputs[0]).shape;
      const std::vector<int64_t> perm = resolved_perm(std::get<TransposeAttrs>(n.attrs), shape.size());
      if (perm.size() != shape.size()) return false;
      for (int64_t a : perm)
        if (a < 0 || a >= static_cast<int64_t>(shape.size())) return false;
      return perm_keeps_order(perm, shape);
    }
    return has_trait(k, kReshapeLike) || k == OpKind::kIdentity;
  }
  static std::string slices_detail(int views, int copies) {
    if (views + copies == 0) return "";
    return std::to_string(views) + " slice(s) written in place, " + std::to_string(copies) + " copied";
  }

  bool view_reshape(size_t i) {
    const graph::Node& n = g_.nodes[i];
    if (n.outputs.size() != 1 || n.inputs.empty() || n.inputs[0] == kNoValue) return false;
    const ValueId x = n.inputs[0], r = n.outputs[0];
    if (layout_.bytes(x) != layout_.bytes(r)) return false;
    const size_t mark = layout_.mark();
    layout_.set_written(r, false);
    if (!layout_.coincide(r, x, 0)) {
      layout_.rollback(mark);
      return false;
    }
    ++reshape_views_;
    return true;
  }

  // Byte offset of each part in the whole (parts laid end to end); the parts and the whole share
  // one element type, so the offsets are multiples of its size.
  std::vector<uint64_t> part_offsets(const std::vector<ValueId>& parts) const {
    std::vector<uint64_t> at;
    uint64_t pos = 0;
    for (ValueId v : parts) {
      at.push_back(pos);
      pos += layout_.bytes(v);
    }
    return at;
  }

  // A new value for a slice that an Identity step copies into or out of, lying at whole + at.
  ValueId add_slice(ValueId like, ValueId whole, uint64_t at, bool written) {
    graph::Value s;
    s.name = g_.unique_name(g_.value(whole).name + "_slice");
    s.dtype = g_.value(like).dtype;
    s.shape = g_.value(like).shape;
    s.has_shape = true;
    const ValueId id = g_.add_value(std::move(s));
    layout_.add(id);
    layout_.set_written(id, written);
    layout_.coincide(id, whole, at);  // checked by slot_free before
    return id;
  }

  graph::Node copy_node(const graph::Node& of, ValueId from, ValueId to) const {
    return graph::Node{
        of.name + "_copy", OpKind::kIdentity, NoAttrs{}, {from}, {to}, of.origin.empty() ? of.name : of.origin};
  }

  // Two attempts: the first lets an input bring along the root it already lies in (a DenseNet
  // Concat whose first inputs are the previous Concat: that one moves in whole); when that leaves
  // more than one slice to copy (the root spilled over another input's slice), the second moves
  // only inputs that lie alone in their root, and copies the others.
  bool eliminate_concat(size_t i) {
    for (bool narrow : {false, true})
      if (eliminate_concat(i, narrow)) return true;
    return false;
  }

  bool eliminate_concat(size_t i, bool narrow) {
    const graph::Node n = g_.nodes[i];
    const ValueId c = n.outputs[0];
    const int64_t rank = static_cast<int64_t>(g_.value(c).shape.size());
    if (rank == 0 || !contiguous_slices(g_.value(c).shape, normalize_axis(std::get<AxisAttrs>(n.attrs).axis, rank)))
      return false;
    const std::vector<uint64_t> at = part_offsets(n.inputs);
    const size_t mark = layout_.mark();
    layout_.set_written(c, false);
    int views = 0;
    std::vector<size_t> copies;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (layout_.bytes(n.inputs[k]) == 0) continue;
      if (layout_.coincide(n.inputs[k], c, at[k], narrow))
        ++views;
      else
        copies.push_back(k);
    }
    bool ok = views > 0 && copies.size() <= 1;
    for (size_t k : copies)
      ok = ok && layout_.slot_free(layout_.root(c), layout_.offset(c) + at[k], layout_.bytes(n.inputs[k]),
                                   g_.value(c).dtype, true);
    if (!ok) {
      layout_.rollback(mark);
      return false;
    }
    for (size_t k : copies) emitted_[i].push_back(copy_node(n, n.inputs[k], add_slice(n.inputs[k], c, at[k], true)));
    ++concats_;
    concat_views_ += views;
    concat_copies_ += static_cast<int>(copies.size());
    return true;
  }

  bool eliminate_split(size_t i) {
    const graph::Node n = g_.nodes[i];
    const ValueId x = n.inputs[0];
    const int64_t rank = static_cast<int64_t>(g_.value(x).shape.size());
    if (rank == 0 || !contiguous_slices(g_.value(x).shape, normalize_axis(std::get<SplitAttrs>(n.attrs).axis, rank)))
      return false;
    for (ValueId y : n.outputs)
      if (y == kNoValue) return false;
    const std::vector<uint64_t> at = part_offsets(n.outputs);
    const size_t mark = layout_.mark();
    int views = 0;
    std::vector<size_t> copies;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      layout_.set_written(n.outputs[k], false);
      if (layout_.coincide(n.outputs[k], x, at[k]))
        ++views;
      else
        copies.push_back(k);
    }
    bool ok = views > 0 && copies.size() <= 1;
    for (size_t k : copies)
      ok = ok && layout_.slot_free(layout_.root(x), layout_.offset(x) + at[k], layout_.bytes(n.outputs[k]),
                                   g_.value(x).dtype, false);
    if (!ok) {
      layout_.rollback(mark);
      return false;
    }
    for (size_t k : copies) {
      layout_.set_written(n.outputs[k], true);
      emitted_[i].push_back(copy_node(n, add_slice(n.outputs[k], x, at[k], false), n.outputs[k]));
    }
    ++splits_;
    split_views_ += views;
    split_copies_ += static_cast<int>(copies.size());
    return true;
  }

  EngineProgram& p_;
  graph::Graph& g_;
  Layout layout_;
  std::vector<std::vector<graph::Node>> emitted_;  // per original node: the steps it becomes
  bool reshapes_ = true, concat_ = true, split_ = true;
  int reshape_views_ = 0, concats_ = 0, concat_views_ = 0, concat_copies_ = 0;
  int splits_ = 0, split_views_ = 0, split_copies_ = 0;
};

}  // namespace

EngineProgram plan_views(const graph::Graph& g, const BuildOptions& options) {
  EngineProgram p;
  p.graph = g;
  Planner(p, options).run();
  return p;
}

}  // namespace kiln::build
