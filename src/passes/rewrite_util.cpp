// Helpers shared by the rewrite passes (rewrite_util.h).
#include "passes/rewrite_util.h"

#include <cstring>

#include "core/half.h"

namespace kiln::passes {

bool float_type(DataType t) { return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16; }

std::vector<double> read_doubles(const graph::Value& v) {
  std::vector<double> out;
  if (!v.is_constant() || !float_type(v.dtype)) return out;
  const uint8_t* p = v.data->data();
  out.resize(v.data->size() / dtype_size(v.dtype));
  if (v.dtype == DataType::kFloat64) {
    if (!out.empty()) std::memcpy(out.data(), p, out.size() * 8);
  } else if (v.dtype == DataType::kFloat32) {
    for (size_t i = 0; i < out.size(); ++i) {
      float f;
      std::memcpy(&f, p + i * 4, 4);
      out[i] = f;
    }
  } else {
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, p + i * 2, 2);
      out[i] = Half::to_float(h);
    }
  }
  return out;
}

std::vector<uint8_t> write_as(DataType t, const std::vector<double>& v) {
  std::vector<uint8_t> b(v.size() * dtype_size(t));
  if (t == DataType::kFloat64) {
    if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  } else if (t == DataType::kFloat32) {
    for (size_t i = 0; i < v.size(); ++i) {
      auto f = static_cast<float>(v[i]);
      std::memcpy(b.data() + i * 4, &f, 4);
    }
  } else {
    for (size_t i = 0; i < v.size(); ++i) {
      uint16_t h = Half::from_float(static_cast<float>(v[i]));
      std::memcpy(b.data() + i * 2, &h, 2);
    }
  }
  return b;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string origin_of(const graph::Node& n) { return n.origin.empty() ? n.name : n.origin; }

std::string joined_origin(const graph::Node& first, const graph::Node& second) {
  return origin_of(first) + " + " + origin_of(second);
}

std::vector<TensorView> input_views(const graph::Graph& g, const graph::Node& n) {
  std::vector<TensorView> views;
  for (graph::ValueId id : n.inputs) views.push_back(id == graph::kNoValue ? absent_tensor() : g.value(id).view());
  return views;
}

int GraphFacts::only_reader(const graph::Graph& g, graph::ValueId v) const {
  if (!only_read_once(g, v)) return -1;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (graph::ValueId in : g.nodes[i].inputs)
      if (in == v) return static_cast<int>(i);
  return -1;
}

const graph::Node* GraphFacts::producer_of(const graph::Graph& g, graph::ValueId v, OpKind k) const {
  if (v == graph::kNoValue) return nullptr;
  const int p = producer[static_cast<size_t>(v)];
  return p >= 0 && g.nodes[static_cast<size_t>(p)].kind == k ? &g.nodes[static_cast<size_t>(p)] : nullptr;
}

bool scalar_constant(const graph::Value& v, double& out) {
  if (!v.is_constant() || v.dtype == DataType::kBool || v.view().numel() != 1) return false;
  std::vector<double> d = v.view().to_double();
  out = d[0];
  return true;
}

void remove_node(graph::Graph& g, size_t i, std::vector<char>& removed) {
  removed[i] = 1;
  g.nodes[i].inputs.clear();
  g.nodes[i].outputs.clear();
}

int rewrite_until_done(graph::Graph& g, const RewriteFn& rewrite) {
  std::vector<char> removed(g.nodes.size(), 0);
  int changes = 0;
  for (bool changed = true; changed;) {
    changed = false;
    GraphFacts facts(g);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (removed[i] || !rewrite(g, i, facts, removed)) continue;
      ++changes;
      changed = true;
      facts = GraphFacts(g);
    }
  }
  std::vector<graph::Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!removed[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  return changes;
}

namespace {

void replace_uses(graph::Graph& g, graph::ValueId from, graph::ValueId to) {
  for (graph::Node& n : g.nodes)
    for (graph::ValueId& v : n.inputs)
      if (v == from) v = to;
}

}  // namespace

bool bypass(graph::Graph& g, size_t i, graph::ValueId in, graph::ValueId out, const GraphFacts& facts,
            std::vector<char>& removed) {
  if (!g.is_graph_output(out)) {
    remove_node(g, i, removed);
    replace_uses(g, out, in);
    return true;
  }
  int p = facts.producer[static_cast<size_t>(in)];
  if (p < 0 || g.is_graph_output(in)) return false;
  remove_node(g, i, removed);
  for (graph::ValueId& v : g.nodes[static_cast<size_t>(p)].outputs)
    if (v == in) v = out;
  replace_uses(g, in, out);
  return true;
}

std::vector<int64_t> resolved_perm(const TransposeAttrs& a, size_t rank) {
  if (!a.perm.empty()) return a.perm;
  std::vector<int64_t> perm;
  for (size_t i = rank; i-- > 0;) perm.push_back(static_cast<int64_t>(i));
  return perm;
}

bool perm_keeps_order(const std::vector<int64_t>& perm, const std::vector<int64_t>& in_shape) {
  int64_t last = -1;
  for (int64_t a : perm) {
    if (in_shape[static_cast<size_t>(a)] == 1) continue;
    if (a < last) return false;
    last = a;
  }
  return true;
}

std::string Tally::str() const {
  std::string s;
  for (const auto& [label, n] : counts_) s += (s.empty() ? "" : ", ") + label + " " + std::to_string(n);
  return s;
}

}  // namespace kiln::passes
