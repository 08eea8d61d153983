// Helpers shared by tests that build ONNX models in C++: typed node attributes, and importing a
// ModelProto held in memory.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

#include "graph/onnx_import.h"

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

}  // namespace kiln::test
