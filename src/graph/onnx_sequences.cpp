// Sequences whose length and elements are known when the model is imported: SequenceConstruct,
// SequenceEmpty, SequenceInsert/Erase at constant positions, SplitToSequence of a static shape.
// Each sequence becomes the list of its elements' tensor names, and the ops that read one become
// tensor ops: SequenceAt an Identity, SequenceLength a constant, ConcatFromSequence a Concat
// (after Unsqueezes with new_axis), SplitToSequence a Split (and Squeezes without keepdims). What
// depends on the data (a position computed at run time, a sequence the graph takes as an input)
// is left to the importer's usual message for an op type it does not run, or gets one naming the
// node and what would have to be constant.
#include <cstring>
#include <set>

#include "graph/onnx_import_internal.h"
#include "kiln/types.h"

namespace kiln::graph::detail {

namespace {

bool sequence_op(const std::string& op) {
  static const std::set<std::string> ops{"SequenceEmpty",      "SequenceConstruct", "SequenceInsert",
                                         "SequenceErase",      "SequenceAt",        "SequenceLength",
                                         "ConcatFromSequence", "SplitToSequence",   "SequenceMap"};
  return ops.contains(op);
}

int64_t int_attr(const onnx::NodeProto& n, const std::string& name, int64_t fallback) {
  const onnx::AttributeProto* a = find_attr(n, name);
  return a ? a->i() : fallback;
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

}  // namespace

bool StaticSequences::handles(const onnx::NodeProto& np) const {
  if (!default_domain(np.domain())) return false;
  const std::string& op = np.op_type();
  if (sequence_op(op) || op == "Optional" || op == "OptionalHasElement" || op == "OptionalGetElement") return true;
  return op == "Identity" && np.input_size() > 0 && (seqs_.contains(np.input(0)) || optionals_.contains(np.input(0)));
}

bool StaticSequences::is_sequence(const std::string& name) const { return seqs_.contains(name); }

std::vector<SourceNode> StaticSequences::lower(const SourceNode& sn, const Graph& g) {
  const onnx::NodeProto& np = sn.proto;
  const std::string& op = np.op_type();
  Lowering out(sn, g, counter_);
  // A constant position (a scalar) in input `slot`, or `fallback` where the input is absent.
  auto position = [&](int slot, int64_t fallback) -> int64_t {
    if (np.input_size() <= slot || np.input(slot).empty()) return fallback;
    const std::optional<std::vector<int64_t>> v = constant_ints(g, np.input(slot));
    if (!v || v->size() != 1)
      throw Error("its position " + quoted(np.input(slot)) +
                  " is computed at run time; Kiln lowers sequences at import and needs it constant");
    return (*v)[0];
  };
  auto element = [&](const std::vector<std::string>& seq, int64_t pos) -> const std::string& {
    const auto n = static_cast<int64_t>(seq.size());
    if (pos < -n || pos >= n)
      throw Error("position " + std::to_string(pos) + " is outside the sequence of " + std::to_string(n) +
                  " element(s)");
    const std::string& e = seq[static_cast<size_t>(pos < 0 ? pos + n : pos)];
    if (e.empty())
      throw Error(
          "reads an element of a sequence split at run-time sizes (SplitToSequence with a split "
          "input that is not constant): its shape depends on the data");
    return e;
  };
  auto output = [&]() -> const std::string& {
    if (np.output_size() < 1 || np.output(0).empty()) throw Error("has no output");
    return np.output(0);
  };
  const std::string in0 = np.input_size() > 0 ? np.input(0) : "";
  if (op == "Optional") {
    optionals_[output()] = in0;
    return {};
  }
  if (op == "Identity" && optionals_.contains(in0)) {
    optionals_[output()] = optionals_.at(in0);
    return {};
  }
  if (op == "OptionalHasElement" || op == "OptionalGetElement") {
    // Without an optional, the input itself (a tensor or sequence, from opset 18), or none.
    const std::string held = optionals_.contains(in0) ? optionals_.at(in0) : in0;
    if (op == "OptionalHasElement") {
      onnx::TensorProto t;
      t.set_data_type(onnx::TensorProto_DataType_BOOL);
      t.add_int32_data(held.empty() ? 0 : 1);
      out.constant(t, output());
    } else if (held.empty()) {
      throw Error("reads " + quoted(in0) + ", an optional that holds no value");
    } else if (seqs_.contains(held)) {
      seqs_[output()] = seqs_.at(held);
    } else {
      out.emit("Identity", {held}, {output()});
    }
    return out.take();
  }
  if (op != "SequenceEmpty" && op != "SequenceConstruct" && op != "SplitToSequence" &&
      (np.input_size() < 1 || !seqs_.contains(np.input(0))))
    throw Error("reads " + quoted(np.input_size() ? np.input(0) : "") +
                ", which is not a sequence known at import (Kiln lowers sequences made in the graph by "
                "SequenceConstruct, SequenceEmpty or SplitToSequence; not sequence inputs or sequences from "
                "control flow)");

  if (op == "SequenceEmpty") {
    seqs_[output()] = {};
  } else if (op == "SequenceConstruct") {
    std::vector<std::string> seq(np.input().begin(), np.input().end());
    for (const std::string& e : seq)
      if (e.empty()) throw Error("has an empty input name; every element must be a tensor");
    seqs_[output()] = std::move(seq);
  } else if (op == "Identity") {
    seqs_[output()] = seqs_.at(np.input(0));
  } else if (op == "SequenceInsert") {
    std::vector<std::string> seq = seqs_.at(np.input(0));
    if (np.input_size() < 2 || np.input(1).empty()) throw Error("needs the tensor to insert (input 1)");
    const auto n = static_cast<int64_t>(seq.size());
    int64_t pos = position(2, n);
    if (pos < -n || pos > n)
      throw Error("position " + std::to_string(pos) + " is outside [-" + std::to_string(n) + ", " + std::to_string(n) +
                  "]");
    if (pos < 0) pos += n;
    seq.insert(seq.begin() + pos, np.input(1));
    seqs_[output()] = std::move(seq);
  } else if (op == "SequenceErase") {
    std::vector<std::string> seq = seqs_.at(np.input(0));
    const auto n = static_cast<int64_t>(seq.size());
    int64_t pos = position(1, -1);
    if (pos < -n || pos >= n)
      throw Error("position " + std::to_string(pos) + " is outside the sequence of " + std::to_string(n) +
                  " element(s)");
    if (pos < 0) pos += n;
    seq.erase(seq.begin() + pos);
    seqs_[output()] = std::move(seq);
  } else if (op == "SequenceAt") {
    if (np.input_size() < 2 || np.input(1).empty()) throw Error("needs a position (input 1)");
    out.emit("Identity", {element(seqs_.at(np.input(0)), position(1, 0))}, {output()});
  } else if (op == "SequenceLength") {
    out.constant(int64_tensor({static_cast<int64_t>(seqs_.at(np.input(0)).size())}, true), output());
  } else if (op == "ConcatFromSequence") {
    const std::vector<std::string>& seq = seqs_.at(np.input(0));
    if (!find_attr(np, "axis")) throw Error("needs attribute 'axis'");
    if (seq.empty()) throw Error("concatenates an empty sequence; ONNX defines no result for it");
    const int64_t axis = int_attr(np, "axis", 0);
    std::vector<std::string> parts;
    for (size_t i = 0; i < seq.size(); ++i) {
      const std::string& e = element(seq, static_cast<int64_t>(i));
      if (int_attr(np, "new_axis", 0) == 0) {
        parts.push_back(e);
        continue;
      }
      const std::string u = out.fresh("unsqueezed");
      out.ints_operand(out.emit("Unsqueeze", {e}, {u}), "axes", {axis});
      parts.push_back(u);
    }
    Lowering::set_int(out.emit("Concat", parts, {output()}), "axis", axis);
  } else if (op == "SplitToSequence") {
    if (np.input_size() < 1 || np.input(0).empty()) throw Error("needs the tensor to split (input 0)");
    const std::string& x = np.input(0);
    const ValueId xid = g.find(x);
    int64_t axis = int_attr(np, "axis", 0);
    const bool keepdims = int_attr(np, "keepdims", 1) != 0;
    const Value* xv = xid == kNoValue ? nullptr : &g.value(xid);
    const bool ranked = xv && xv->has_shape;
    if (ranked) {
      const auto r = static_cast<int64_t>(xv->shape.size());
      if (axis < -r || axis >= r)
        throw Error("axis " + std::to_string(axis) + " is outside the rank " + std::to_string(r) + " of " + quoted(x));
      if (axis < 0) axis += r;
    }
    const int64_t dim = ranked && axis >= 0 ? xv->shape[static_cast<size_t>(axis)] : -1;
    const bool has_split = np.input_size() > 1 && !np.input(1).empty();
    std::vector<int64_t> sizes;
    if (has_split) {
      const std::optional<std::vector<int64_t>> split = constant_ints(g, np.input(1));
      const ValueId sid = g.find(np.input(1));
      if (!split) {
        const Value* sv = sid == kNoValue ? nullptr : &g.value(sid);
        if (sv && sv->has_shape && sv->shape.size() == 1 && sv->shape[0] >= 0) {
          seqs_[output()] = std::vector<std::string>(static_cast<size_t>(sv->shape[0]));  // length only
          return {};
        }
        throw Error("its split " + quoted(np.input(1)) +
                    " is computed at run time, so the number of elements depends on the data");
      }
      if (sid != kNoValue && g.value(sid).shape.empty()) {  // a scalar: chunks of that size
        const int64_t s = split->at(0);
        if (s <= 0) throw Error("split size " + std::to_string(s) + " must be positive");
        if (dim < 0) throw Error("splits " + quoted(x) + " in chunks, which needs its size along the axis known");
        for (int64_t left = dim; left > 0; left -= s) sizes.push_back(std::min(s, left));
      } else {
        sizes = *split;
      }
    } else {
      if (dim < 0)
        throw Error("splits " + quoted(x) + " into one element per index, which needs its size along axis " +
                    std::to_string(axis) + " known at import (declare the shape, or export with static shapes)");
      sizes.assign(static_cast<size_t>(dim), 1);
    }
    if (sizes.empty()) {
      seqs_[output()] = {};
      return {};
    }
    std::vector<std::string> parts;
    for (size_t i = 0; i < sizes.size(); ++i) parts.push_back(out.fresh("part"));
    onnx::NodeProto& split = out.emit("Split", {x}, parts);
    Lowering::set_int(split, "axis", axis);
    out.ints_operand(split, "split", sizes);
    if (!has_split && !keepdims) {
      if (!ranked) throw Error("drops the split axis of " + quoted(x) + ", whose rank is not known at import");
      for (std::string& p : parts) {
        const std::string q = out.fresh("squeezed");
        out.ints_operand(out.emit("Squeeze", {p}, {q}), "axes", {axis});
        p = q;
      }
    }
    seqs_[output()] = std::move(parts);
  } else if (op == "SequenceMap") {
    // A copy of the body per element of the first input: sequence inputs give it their element,
    // tensor inputs themselves; each output collects the copies' results into a sequence.
    const onnx::AttributeProto* body_attr = find_attr(np, "body");
    if (!body_attr || !body_attr->has_g()) throw Error("needs attribute 'body' (a graph)");
    const onnx::GraphProto& body = body_attr->g();
    if (body.input_size() != np.input_size())
      throw Error("its body takes " + std::to_string(body.input_size()) + " inputs for the node's " +
                  std::to_string(np.input_size()));
    const auto length = static_cast<int64_t>(seqs_.at(np.input(0)).size());
    for (int k = 1; k < np.input_size(); ++k)
      if (seqs_.contains(np.input(k)) && static_cast<int64_t>(seqs_.at(np.input(k)).size()) != length)
        throw Error("its input sequences " + quoted(np.input(0)) + " and " + quoted(np.input(k)) +
                    " differ in length (" + std::to_string(length) + " and " +
                    std::to_string(seqs_.at(np.input(k)).size()) + ")");
    std::map<std::string, std::string> constants;
    for (const onnx::TensorProto& t : body.initializer()) constants[t.name()] = out.fresh_constant(t, "body_constant");
    std::vector<std::vector<std::string>> results(static_cast<size_t>(np.output_size()));
    for (int64_t i = 0; i < length; ++i) {
      std::map<std::string, std::string> names = constants;
      for (int k = 0; k < np.input_size(); ++k)
        names[body.input(k).name()] = seqs_.contains(np.input(k)) ? element(seqs_.at(np.input(k)), i) : np.input(k);
      const std::string scope = "element" + std::to_string(i);
      for (const onnx::NodeProto& bn : body.node())
        out.copy_body_node(bn, sn.name + "/" + scope + "/" + bn.name(), scope, names);
      for (int o = 0; o < np.output_size() && o < body.output_size(); ++o) {
        const auto it = names.find(body.output(o).name());
        results[static_cast<size_t>(o)].push_back(it != names.end() ? it->second : body.output(o).name());
      }
    }
    if (body.output_size() < np.output_size())
      throw Error("its body gives " + std::to_string(body.output_size()) + " outputs for the node's " +
                  std::to_string(np.output_size()));
    for (int o = 0; o < np.output_size(); ++o)
      if (!np.output(o).empty()) seqs_[np.output(o)] = std::move(results[static_cast<size_t>(o)]);
  }
  return out.take();
}

}  // namespace kiln::graph::detail
