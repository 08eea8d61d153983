// Kiln's own function bodies (onnx_kiln_bodies.cpp holds the table; onnx_bodies_<kind>.cpp the
// bodies, by kind of op): what the files share. Internal to src/graph.
#pragma once

#include <onnx/defs/function.h>

#include <string>
#include <vector>

#include "graph/onnx_import_internal.h"

namespace kiln::graph::detail {

// Attributes of the node a body is built for, with their defaults.
int64_t attr_i(const onnx::NodeProto& n, const std::string& name, int64_t dflt);
std::vector<int64_t> attr_ints(const onnx::NodeProto& n, const std::string& name);
float attr_f(const onnx::NodeProto& n, const std::string& name, float dflt);
// A float as ONNX's text syntax reads it back exactly ("1e-08", not to_string's "0.000000"),
// whatever the locale, and always as a float ("1.0": a bare "1" parses as an int).
std::string num_text(float v);
std::string ints_text(const std::vector<int64_t>& v);
bool has_input(const onnx::NodeProto& n, int i);
// Fills f: op's body with these inputs and outputs, from ONNX text at kKilnBodyOpset.
void make_body(onnx::FunctionProto& f, const std::string& op, const std::vector<std::string>& inputs,
               const std::vector<std::string>& outputs, const std::string& text);

// The bodies (BodyBuilder), by file.
void reverse_sequence_body(const onnx::NodeProto& n, int64_t opset, onnx::FunctionProto& f);
void max_unpool_body(const onnx::NodeProto& n, int64_t opset, onnx::FunctionProto& f);
void dft_body(const onnx::NodeProto& n, int64_t opset, onnx::FunctionProto& f);
void stft_body(const onnx::NodeProto& n, int64_t opset, onnx::FunctionProto& f);
void mel_weight_matrix_body(const onnx::NodeProto& n, int64_t opset, onnx::FunctionProto& f);
void grid_sample_body(const onnx::NodeProto& n, int64_t opset, onnx::FunctionProto& f);
void roi_align_body(const onnx::NodeProto& n, int64_t opset, onnx::FunctionProto& f);
void adagrad_body(const onnx::NodeProto& n, int64_t opset, onnx::FunctionProto& f);
void momentum_body(const onnx::NodeProto& n, int64_t opset, onnx::FunctionProto& f);
void adam_body(const onnx::NodeProto& n, int64_t opset, onnx::FunctionProto& f);
void tfidf_body(const onnx::NodeProto& n, int64_t opset, onnx::FunctionProto& f);

}  // namespace kiln::graph::detail
