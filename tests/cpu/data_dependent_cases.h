// Data-dependent shapes (decision 56): the models and checks that tests/cpu/data_dependent_test.cpp
// runs on the CPU and tests/gpu/data_dependent_gpu_test.cpp on a GPU. One context runs many times:
// the actual shapes follow each run's data (more results after fewer, none, then some again) and
// the steps after NonZero or NonMaxSuppression run at them, shapes taken as values (TopK's K) follow,
// and an If on the data takes each branch in turn. Values come from hand-computed
// references (NonMaxSuppression: onnx's suppress_by_IOU example); tests/python/
// data_dependent_test.py compares whole models with onnxruntime.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "build/build.h"
#include "kiln/engine.h"
#include "onnx_model_util.h"

namespace kiln::test {

// Builds for `target` ("cpu" or a GPU architecture).
inline std::shared_ptr<const Engine> build_for(const OnnxModel& m, const std::string& target) {
  graph::Graph g = m.import();
  build::BuildOptions o;
  o.target = target;
  return Engine::from_bytes(build::build_engine(g, o), m.m.graph().name());
}

inline std::vector<int64_t> ints(std::span<const std::byte> b) {
  std::vector<int64_t> v(b.size() / 8);
  if (!v.empty()) std::memcpy(v.data(), b.data(), b.size());
  return v;
}

// x [3, 4] -> NonZero -> Transpose -> [n, 2], and NonZero -> Reshape([-1]) -> Unsqueeze(0) -> [1, 2n]
// (a chain merge-transpose-reshape must not fix at the bound).
inline OnnxModel nonzero_model() {
  OnnxModel m("nonzero");
  m.input("x", {3, 4});
  m.init_i64("flat", {1}, {-1});
  m.init_i64("axis0", {1}, {0});
  m.node("NonZero", "nz", {"x"}, {"idx"});
  m.node("Transpose", "t", {"idx"}, {"coords"});
  m.node("Reshape", "r", {"idx", "flat"}, {"flat_idx"});
  m.node("Unsqueeze", "u", {"flat_idx", "axis0"}, {"row"});
  m.output("coords");
  m.output("row");
  return m;
}

// Five runs of one context on NonZero counts 1, 3, 0, 5 and 1.
inline void check_nonzero_runs(const Engine& e, const ContextOptions& o = {.cpu_threads = 1}) {
  EXPECT_EQ(e.outputs()[0].shape, (std::vector<int64_t>{12, 2}));  // the bound
  EXPECT_EQ(e.summary().bounded_outputs, (std::vector<std::string>{"coords", "row"}));
  auto ctx = e.create_context(o);
  for (const std::vector<int>& hits : std::vector<std::vector<int>>{{5}, {0, 6, 11}, {}, {1, 2, 3, 4, 9}, {7}}) {
    std::vector<float> x(12, 0.f);
    for (int i : hits) x[static_cast<size_t>(i)] = 1.5f;
    ctx->set_input("x", x.data(), x.size() * 4);
    ctx->run();
    const auto n = static_cast<int64_t>(hits.size());
    ASSERT_EQ(ctx->output_shape("coords"), (std::vector<int64_t>{n, 2}));
    ASSERT_EQ(ctx->output_shape("row"), (std::vector<int64_t>{1, 2 * n}));
    std::vector<int64_t> coords, row(static_cast<size_t>(2 * n));
    for (size_t k = 0; k < hits.size(); ++k) {
      coords.insert(coords.end(), {hits[k] / 4, hits[k] % 4});
      row[k] = hits[k] / 4;
      row[hits.size() + k] = hits[k] % 4;
    }
    EXPECT_EQ(ints(ctx->output("coords")), coords);
    EXPECT_EQ(ints(ctx->output("row")), row);
  }
}

inline OnnxModel nms_model() {
  OnnxModel m("nms");
  m.input("boxes", {1, 6, 4});
  m.input("scores", {1, 1, 6});
  m.input("max_out", {1}, onnx::TensorProto::INT64);
  m.init_f("iou", {1}, {0.5f});
  m.init_f("score", {1}, {0.0f});
  m.init_i64("two", {1}, {2});
  m.node("NonMaxSuppression", "nms", {"boxes", "scores", "max_out", "iou", "score"}, {"selected"});
  m.node("Gather", "g", {"selected", "two"}, {"box_index"})->add_attribute()->set_name("axis");
  auto* a = m.g()->mutable_node(1)->mutable_attribute(0);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(1);
  m.output("selected");
  m.output("box_index");
  return m;
}

// Runs with max_output_boxes_per_class 1, 3, 0, 2 and 10, the selection in a bound-sized buffer.
inline void check_nms_runs(const Engine& e, const ContextOptions& o = {.cpu_threads = 1}) {
  EXPECT_EQ(e.outputs()[0].shape, (std::vector<int64_t>{6, 3}));
  auto ctx = e.create_context(o);
  const std::vector<float> boxes = {0, 0,  1, 1,  0, 0.1f,  1, 1.1f,  0, -0.1f, 1, 0.9f,
                                    0, 10, 1, 11, 0, 10.1f, 1, 11.1f, 0, 100,   1, 101};
  const std::vector<float> scores = {0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f};
  const std::vector<int64_t> order = {3, 0, 5};  // onnx's expected selection
  ctx->set_input("boxes", boxes.data(), boxes.size() * 4);
  ctx->set_input("scores", scores.data(), scores.size() * 4);
  // The bound-sized buffer takes the packed rows.
  std::vector<int64_t> selected(18, -7);
  ctx->set_output("selected", selected.data(), selected.size() * 8);
  for (int64_t max_out : {1, 3, 0, 2, 10}) {
    ctx->set_input("max_out", &max_out, 8);
    ctx->run();
    const int64_t k = std::min<int64_t>(max_out, 3);
    ASSERT_EQ(ctx->output_shape("selected"), (std::vector<int64_t>{k, 3})) << "max_out " << max_out;
    ASSERT_EQ(ctx->output_shape("box_index"), (std::vector<int64_t>{k, 1}));
    std::vector<int64_t> rows, index;
    for (int64_t r = 0; r < k; ++r) {
      rows.insert(rows.end(), {0, 0, order[static_cast<size_t>(r)]});
      index.push_back(order[static_cast<size_t>(r)]);
    }
    EXPECT_EQ(ints(ctx->output("selected")), rows);
    EXPECT_EQ(std::vector<int64_t>(selected.begin(), selected.begin() + 3 * k), rows);
    EXPECT_EQ(ints(ctx->output("box_index")), index);
  }
}

// Shapes as values: x [3, 4] -> NonZero -> Shape -> [2, n]; n (Slice of it) and 2 -> ReduceMin -> K;
// TopK of x's 12 values with that K, and the shape itself as an output.
inline OnnxModel shape_value_model() {
  OnnxModel m("shape_value");
  m.input("x", {3, 4});
  m.init_i64("flat", {1}, {-1});
  m.init_i64("one", {1}, {1});
  m.init_i64("two", {1}, {2});
  m.node("NonZero", "nz", {"x"}, {"idx"});
  m.node("Shape", "shape", {"idx"}, {"s"});
  m.node("Slice", "count", {"s", "one", "two"}, {"n"});
  m.node("Concat", "both", {"n", "two"}, {"n_and_two"});
  attr_int(m.g()->mutable_node(3), "axis", 0);
  m.node("ReduceMin", "k", {"n_and_two"}, {"k"});
  m.node("Reshape", "flat_x", {"x", "flat"}, {"xf"});
  m.node("TopK", "top", {"xf", "k"}, {"values", "positions"});
  m.output("s");
  m.output("values");
  return m;
}

// Runs with 3, 0, 1 and 7 nonzero elements: K = min(n, 2) values, the largest first.
inline void check_shape_value_runs(const Engine& e) {
  auto ctx = e.create_context(1);
  for (int n : {3, 0, 1, 7}) {
    std::vector<float> x(12, 0.f);
    for (int i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i + 1);
    ctx->set_input("x", x.data(), x.size() * 4);
    ctx->run();
    EXPECT_EQ(ints(ctx->output("s")), (std::vector<int64_t>{2, n}));
    const int k = std::min(n, 2);
    ASSERT_EQ(ctx->output_shape("values"), (std::vector<int64_t>{k})) << n << " nonzero";
    std::vector<float> values(static_cast<size_t>(k));
    std::memcpy(values.data(), ctx->output("values").data(), values.size() * 4);
    for (int i = 0; i < k; ++i) EXPECT_EQ(values[static_cast<size_t>(i)], static_cast<float>(n - i));
  }
}

// If on the data: x [6] -> ReduceMax > 1 -> then x * 2 [6], else x[0:2] [2] (different shapes).
inline OnnxModel if_on_data_model() {
  OnnxModel m("if_on_data");
  m.input("x", {6});
  m.init_f("one_f", {}, {1.f});
  m.init_f("two_f", {}, {2.f});
  m.init_i64("start", {1}, {0});
  m.init_i64("end", {1}, {2});
  m.node("ReduceMax", "max", {"x"}, {"top"});
  attr_int(m.g()->mutable_node(0), "keepdims", 0);
  m.node("Greater", "big", {"top", "one_f"}, {"cond"});
  onnx::NodeProto* n = m.node("If", "if", {"cond"}, {"y"});
  auto branch = [&](const char* attr, const char* op, std::vector<std::string> ins, const char* out) {
    onnx::GraphProto* b = new_attr(n, attr, onnx::AttributeProto::GRAPH)->mutable_g();
    b->set_name(attr);
    onnx::NodeProto* bn = b->add_node();
    bn->set_op_type(op);
    for (const std::string& i : ins) bn->add_input(i);
    bn->add_output(out);
    auto* o = b->add_output();
    o->set_name(out);
    o->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  };
  branch("then_branch", "Mul", {"x", "two_f"}, "doubled");
  branch("else_branch", "Slice", {"x", "start", "end"}, "head");
  m.output("y");
  return m;
}

// Runs that take each branch in turn on one context.
inline void check_if_on_data_runs(const Engine& e) {
  auto ctx = e.create_context(1);
  for (float peak : {3.f, 0.5f, 2.f, -1.f}) {
    const std::vector<float> x = {0.25f, peak, -0.5f, 0.75f, 0.f, 1.f};
    ctx->set_input("x", x.data(), x.size() * 4);
    ctx->run();
    std::vector<float> want;
    if (peak > 1.f)
      for (float v : x) want.push_back(2 * v);
    else
      want = {x[0], x[1]};
    ASSERT_EQ(ctx->output_shape("y"), (std::vector<int64_t>{static_cast<int64_t>(want.size())})) << "peak " << peak;
    std::vector<float> y(want.size());
    std::memcpy(y.data(), ctx->output("y").data(), y.size() * 4);
    EXPECT_EQ(y, want) << "peak " << peak;
  }
}

}  // namespace kiln::test
