// Helpers shared by tests that build ONNX models in C++: typed node attributes, and importing a
// ModelProto held in memory.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "graph/onnx_import.h"
#include "kiln/engine.h"

namespace kiln::test {

inline onnx::AttributeProto* new_attr(onnx::NodeProto* n, const std::string& name,
                                      onnx::AttributeProto::AttributeType t) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(t);
  return a;
}
inline void attr_int(onnx::NodeProto* n, const std::string& name, int64_t v) {
  new_attr(n, name, onnx::AttributeProto::INT)->set_i(v);
}
inline void attr_float(onnx::NodeProto* n, const std::string& name, float v) {
  new_attr(n, name, onnx::AttributeProto::FLOAT)->set_f(v);
}
inline void attr_string(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  new_attr(n, name, onnx::AttributeProto::STRING)->set_s(v);
}
inline void attr_ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = new_attr(n, name, onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
inline void attr_floats(onnx::NodeProto* n, const std::string& name, const std::vector<float>& v) {
  auto* a = new_attr(n, name, onnx::AttributeProto::FLOATS);
  for (float x : v) a->add_floats(x);
}

// Serializes m and imports it as "<graph name>.onnx" (no base dir: external data is refused).
inline graph::Graph import_model(const onnx::ModelProto& m) {
  std::string s;
  m.SerializeToString(&s);
  std::vector<uint8_t> b(s.begin(), s.end());
  return graph::import_onnx_bytes(b, m.graph().name() + ".onnx", "");
}

using I64s = std::vector<int64_t>;

// A float model under construction: inputs, outputs, nodes and random initializers.
struct OnnxModel {
  onnx::ModelProto m;
  std::mt19937 rng{1234};
  explicit OnnxModel(const std::string& name, int64_t opset = 17) {
    m.set_ir_version(8);
    m.add_opset_import()->set_version(opset);
    m.mutable_graph()->set_name(name);
  }
  onnx::GraphProto* g() { return m.mutable_graph(); }
  void input(const std::string& name, const I64s& dims, int elem_type = onnx::TensorProto::FLOAT) {
    auto* vi = g()->add_input();
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem_type);
    for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  }
  // A float32 input whose leading dimension is the symbol `batch` (a range engine's), then `dims`.
  void input_batched(const std::string& name, const std::string& batch, const I64s& dims) {
    auto* t = g()->add_input();
    t->set_name(name);
    auto* tt = t->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param(batch);
    for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  }
  void output(const std::string& name) {
    auto* vi = g()->add_output();
    vi->set_name(name);
    vi->mutable_type()->mutable_tensor_type();
  }
  onnx::NodeProto* node(const std::string& op, const std::string& name, const std::vector<std::string>& ins,
                        const std::vector<std::string>& outs) {
    auto* n = g()->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : ins) n->add_input(i);
    for (const auto& o : outs) n->add_output(o);
    return n;
  }
  // A random float initializer with values in [lo, hi).
  void init_rand(const std::string& name, const I64s& dims, float lo = -1.f, float hi = 1.f) {
    auto* t = g()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    int64_t n = 1;
    for (int64_t d : dims) {
      t->add_dims(d);
      n *= d;
    }
    std::uniform_real_distribution<float> u(lo, hi);
    for (int64_t i = 0; i < n; ++i) t->add_float_data(u(rng));
  }
  // Initializers with given values.
  void init_i64(const std::string& name, const I64s& dims, const I64s& v) {
    auto* t = g()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    for (int64_t d : dims) t->add_dims(d);
    for (int64_t x : v) t->add_int64_data(x);
  }
  void init_f(const std::string& name, const I64s& dims, const std::vector<float>& v) {
    auto* t = g()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    for (float x : v) t->add_float_data(x);
  }
  graph::Graph import() const { return import_model(m); }
};

// Runs an engine on float inputs; returns the named float outputs.
inline std::map<std::string, std::vector<float>> run_engine(const std::vector<uint8_t>& engine,
                                                            const std::map<std::string, std::vector<float>>& inputs,
                                                            const std::vector<std::string>& outputs) {
  auto e = Engine::from_bytes(engine);
  auto ctx = e->create_context(1);
  for (const auto& [name, x] : inputs) ctx->set_input(name, x.data(), x.size() * 4);
  ctx->run();
  std::map<std::string, std::vector<float>> res;
  for (const std::string& o : outputs) {
    auto bytes = ctx->output(o);
    std::vector<float> y(bytes.size() / 4);
    std::memcpy(y.data(), bytes.data(), bytes.size());
    res[o] = y;
  }
  return res;
}

// Runs ctx on float input `input` = x; returns float output `output` (its bytes after the run).
inline std::vector<float> run_floats(Context& ctx, const std::string& input, const std::vector<float>& x,
                                     const std::string& output) {
  ctx.set_input(input, x.data(), x.size() * 4);
  ctx.run();
  auto bytes = ctx.output(output);
  std::vector<float> y(bytes.size() / 4);
  std::memcpy(y.data(), bytes.data(), bytes.size());
  return y;
}

inline std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

}  // namespace kiln::test
