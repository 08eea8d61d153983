// Helpers shared by the INT8 passes (quantize-int8, fuse-qdq): who reads a value, constants'
// values, and QuantizeLinear / DequantizeLinear parameters.
#pragma once

#include <optional>
#include <vector>

#include "graph/graph.h"

namespace kiln::passes::qdq {

// Producer node of each value (-1: input or constant) and the nodes reading it (a node reading it
// twice is listed twice).
struct Uses {
  std::vector<int> producer;
  std::vector<std::vector<int>> readers;
};
Uses uses_of(const graph::Graph& g);

// True if v is read by exactly one node input and is not a graph output.
bool single_use(const graph::Graph& g, const Uses& u, graph::ValueId v);
// The node producing v, if it is of `kind`.
const graph::Node* produced_by(const graph::Graph& g, const Uses& u, graph::ValueId v, OpKind kind);
// The only reader of v (see single_use), if it is of `kind`; its index in *index.
graph::Node* only_reader(graph::Graph& g, const Uses& u, graph::ValueId v, OpKind kind, int* index = nullptr);

// A constant's elements as doubles (any numeric type); nullopt if v is absent or not a constant.
std::optional<std::vector<double>> constant_values(const graph::Graph& g, graph::ValueId v);

// Per-tensor quantization parameters of a QuantizeLinear or DequantizeLinear node: constant scalar
// float32 scale and (optional) zero point. type: the integer type (Q's output, DQ's input).
struct QParams {
  float scale = 1;
  int32_t zero = 0;
  DataType type = DataType::kUInt8;
  bool operator==(const QParams&) const = default;
};
std::optional<QParams> per_tensor(const graph::Graph& g, const graph::Node& q_or_dq);

bool is_q8(DataType t);

// Adds a constant scalar / vector of type float32, int8 or uint8.
graph::ValueId add_f32(graph::Graph& g, const std::string& name, std::vector<int64_t> shape,
                       const std::vector<float>& v);
graph::ValueId add_q8(graph::Graph& g, const std::string& name, DataType t, std::vector<int64_t> shape,
                      const std::vector<int32_t>& v);

// fuse-qdq's compute-op fusion (fuse_qdq_compute.cpp): Conv, MatMul and Gemm between
// DequantizeLinear inputs (and an optional activation and QuantizeLinear after them) become
// kiln.QConv / kiln.QMatMul. Returns the number of each made.
struct ComputeFusions {
  int convs = 0, matmuls = 0;
};
ComputeFusions fuse_compute_ops(graph::Graph& g);

}  // namespace kiln::passes::qdq
