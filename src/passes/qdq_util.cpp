#include "passes/qdq_util.h"

#include <cmath>
#include <cstring>

namespace kiln::passes::qdq {

Uses uses_of(const graph::Graph& g) {
  Uses u;
  u.producer = g.producers();
  u.readers.resize(g.values.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (graph::ValueId v : g.nodes[i].inputs)
      if (v != graph::kNoValue) u.readers[static_cast<size_t>(v)].push_back(static_cast<int>(i));
  return u;
}

bool single_use(const graph::Graph& g, const Uses& u, graph::ValueId v) {
  return v != graph::kNoValue && u.readers[static_cast<size_t>(v)].size() == 1 && !g.is_graph_output(v);
}

const graph::Node* produced_by(const graph::Graph& g, const Uses& u, graph::ValueId v, OpKind kind) {
  if (v == graph::kNoValue) return nullptr;
  const int p = u.producer[static_cast<size_t>(v)];
  if (p < 0 || g.nodes[static_cast<size_t>(p)].kind != kind) return nullptr;
  return &g.nodes[static_cast<size_t>(p)];
}

graph::Node* only_reader(graph::Graph& g, const Uses& u, graph::ValueId v, OpKind kind, int* index) {
  if (!single_use(g, u, v)) return nullptr;
  const int r = u.readers[static_cast<size_t>(v)][0];
  if (g.nodes[static_cast<size_t>(r)].kind != kind) return nullptr;
  if (index) *index = r;
  return &g.nodes[static_cast<size_t>(r)];
}

std::optional<std::vector<double>> constant_values(const graph::Graph& g, graph::ValueId v) {
  if (v == graph::kNoValue || !g.value(v).is_constant() || g.value(v).dtype == DataType::kBool) return std::nullopt;
  return g.value(v).view().to_double();
}

bool is_q8(DataType t) { return t == DataType::kInt8 || t == DataType::kUInt8; }

std::optional<QParams> per_tensor(const graph::Graph& g, const graph::Node& n) {
  if (n.kind != OpKind::kQuantizeLinear && n.kind != OpKind::kDequantizeLinear) return std::nullopt;
  if (std::get<QuantizeAttrs>(n.attrs).block_size != 0 || n.inputs.size() < 2) return std::nullopt;
  const graph::Value& s = g.value(n.inputs[1]);
  if (!s.is_constant() || s.dtype != DataType::kFloat32 || s.view().numel() != 1) return std::nullopt;
  QParams p;
  std::memcpy(&p.scale, s.data->data(), 4);
  if (!(p.scale > 0) || !std::isfinite(p.scale)) return std::nullopt;
  const graph::ValueId z = n.inputs.size() > 2 ? n.inputs[2] : graph::kNoValue;
  if (z != graph::kNoValue) {
    std::optional<std::vector<double>> zv = constant_values(g, z);
    if (!zv || zv->size() != 1 || !is_q8(g.value(z).dtype)) return std::nullopt;
    p.zero = static_cast<int32_t>((*zv)[0]);
  }
  p.type = n.kind == OpKind::kQuantizeLinear ? g.value(n.outputs[0]).dtype : g.value(n.inputs[0]).dtype;
  if (!is_q8(p.type)) return std::nullopt;
  return p;
}

graph::ValueId add_f32(graph::Graph& g, const std::string& name, std::vector<int64_t> shape,
                       const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return g.add_constant(g.unique_name(name), DataType::kFloat32, std::move(shape), std::move(b));
}

graph::ValueId add_q8(graph::Graph& g, const std::string& name, DataType t, std::vector<int64_t> shape,
                      const std::vector<int32_t>& v) {
  std::vector<uint8_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    b[i] = static_cast<uint8_t>(t == DataType::kInt8 ? int8_t(v[i]) : uint8_t(v[i]));
  return g.add_constant(g.unique_name(name), t, std::move(shape), std::move(b));
}

}  // namespace kiln::passes::qdq
