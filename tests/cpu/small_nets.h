// Small ONNX networks of the kind the whole-network GPU kernel runs (runtime/cuda/whole_net_plan.h),
// shared by its CPU plan test and its GPU test: LeNet-5, an MLP, two CNNs of odd shapes, and two
// that it must refuse. Also ResNet's bottleneck, whose downsample runs on a side stream
// (runtime/side_steps.h). Weights are uniform in +-1/sqrt(fan_in), so that activations stay near 1.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "onnx_model_util.h"

namespace kiln::test {

struct SmallNet : OnnxModel {
  using OnnxModel::OnnxModel;
  // A weight [dims], uniform in +-1/sqrt(fan_in).
  void weight(const std::string& name, const I64s& dims, int64_t fan_in) {
    const float r = 1.0f / std::sqrt(static_cast<float>(fan_in));
    init_rand(name, dims, -r, r);
  }
  void scalar(const std::string& name, float v) {
    auto* t = g()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_float_data(v);
  }
  onnx::NodeProto* conv(const std::string& name, const std::string& x, const std::string& y, int64_t c_in,
                        int64_t c_out, I64s kernel, int64_t group = 1) {
    weight(name + ".w", {c_out, c_in / group, kernel[0], kernel[1]}, c_in / group * kernel[0] * kernel[1]);
    init_rand(name + ".b", {c_out}, -0.1f, 0.1f);
    onnx::NodeProto* n = node("Conv", name, {x, name + ".w", name + ".b"}, {y});
    if (group != 1) attr_int(n, "group", group);
    return n;
  }
  onnx::NodeProto* pool(const std::string& op, const std::string& name, const std::string& x, const std::string& y,
                        I64s kernel, I64s strides) {
    onnx::NodeProto* n = node(op, name, {x}, {y});
    attr_ints(n, "kernel_shape", kernel);
    attr_ints(n, "strides", strides);
    return n;
  }
  // Gemm with W [out, in] (transB = 1, as PyTorch exports nn.Linear) and a bias [out].
  void linear(const std::string& name, const std::string& x, const std::string& y, int64_t in, int64_t out) {
    weight(name + ".w", {out, in}, in);
    init_rand(name + ".b", {out}, -0.1f, 0.1f);
    attr_int(node("Gemm", name, {x, name + ".w", name + ".b"}, {y}), "transB", 1);
  }
};

// LeNet-5: x[N,1,32,32] -> conv 6@5x5 -> relu -> maxpool 2 -> conv 16@5x5 -> relu -> maxpool 2 ->
// flatten -> fc 120 -> relu -> fc 84 -> relu -> fc 10.
inline SmallNet lenet5(int64_t batch) {
  SmallNet m("lenet5");
  m.input("x", {batch, 1, 32, 32});
  m.output("y");
  m.conv("conv1", "x", "c1", 1, 6, {5, 5});
  m.node("Relu", "relu1", {"c1"}, {"r1"});
  m.pool("MaxPool", "pool1", "r1", "p1", {2, 2}, {2, 2});
  m.conv("conv2", "p1", "c2", 6, 16, {5, 5});
  m.node("Relu", "relu2", {"c2"}, {"r2"});
  m.pool("MaxPool", "pool2", "r2", "p2", {2, 2}, {2, 2});
  m.node("Flatten", "flatten", {"p2"}, {"f"});
  m.linear("fc1", "f", "h1", 400, 120);
  m.node("Relu", "relu3", {"h1"}, {"a1"});
  m.linear("fc2", "a1", "h2", 120, 84);
  m.node("Relu", "relu4", {"h2"}, {"a2"});
  m.linear("fc3", "a2", "y", 84, 10);
  return m;
}

// x[N,64] -> Linear 128 -> relu -> MatMul [128,96] + bias -> sigmoid -> Gemm (W [96,1100], transB 0,
// alpha 0.5, beta 2, C [1100]) -> tanh -> Gemm (W [1100,10], transB 0, C [1,10]): both layouts of W,
// a wide layer (more columns than the kernel has threads) and a long one (K 1100, few columns).
inline SmallNet mlp(int64_t batch) {
  SmallNet m("mlp");
  m.input("x", {batch, 64});
  m.output("y");
  m.linear("fc1", "x", "h1", 64, 128);
  m.node("Relu", "relu1", {"h1"}, {"a1"});
  m.weight("mm.w", {128, 96}, 128);
  m.init_rand("mm.b", {96}, -0.1f, 0.1f);
  m.node("MatMul", "mm", {"a1", "mm.w"}, {"h2"});
  m.node("Add", "mm.add", {"h2", "mm.b"}, {"h2b"});
  m.node("Sigmoid", "sig", {"h2b"}, {"a2"});
  m.weight("wide.w", {96, 1100}, 96);
  m.init_rand("wide.c", {1100}, -0.1f, 0.1f);
  onnx::NodeProto* wide = m.node("Gemm", "wide", {"a2", "wide.w", "wide.c"}, {"h3"});
  attr_float(wide, "alpha", 0.5f);
  attr_float(wide, "beta", 2.0f);
  m.node("Tanh", "tanh", {"h3"}, {"a3"});
  m.weight("long.w", {1100, 10}, 1100);
  m.init_rand("long.c", {1, 10}, -0.1f, 0.1f);
  m.node("Gemm", "long", {"a3", "long.w", "long.c"}, {"y"});
  return m;
}

// Odd shapes: x[N,3,13,11] -> conv 5@3x3 stride 2, asymmetric pads -> Clip(0, 6) -> depthwise conv
// 5@3x2 dilations (2,1) -> HardSwish -> AveragePool 3x3 stride 2 pads 1 count_include_pad ceil_mode
// -> conv 7@1x1 -> LeakyRelu -> MaxPool 2x2 stride 1 dilations (1,2) -> GlobalAveragePool ->
// flatten -> fc 3.
inline SmallNet odd_cnn(int64_t batch) {
  SmallNet m("odd_cnn");
  m.input("x", {batch, 3, 13, 11});
  m.output("y");
  onnx::NodeProto* a = m.conv("conv_a", "x", "ca", 3, 5, {3, 3});
  attr_ints(a, "strides", {2, 2});
  attr_ints(a, "pads", {1, 0, 2, 1});
  m.scalar("clip.min", 0.0f);
  m.scalar("clip.max", 6.0f);
  m.node("Clip", "clip", {"ca", "clip.min", "clip.max"}, {"ra"});
  onnx::NodeProto* b = m.conv("conv_b", "ra", "cb", 5, 5, {3, 2}, /*group=*/5);
  attr_ints(b, "dilations", {2, 1});
  attr_ints(b, "pads", {2, 1, 2, 1});
  m.node("HardSwish", "hswish", {"cb"}, {"rb"});
  onnx::NodeProto* ap = m.pool("AveragePool", "avg", "rb", "pa", {3, 3}, {2, 2});
  attr_ints(ap, "pads", {1, 1, 1, 1});
  attr_int(ap, "count_include_pad", 1);
  attr_int(ap, "ceil_mode", 1);
  m.conv("conv_c", "pa", "cc", 5, 7, {1, 1});
  attr_float(m.node("LeakyRelu", "lrelu", {"cc"}, {"rc"}), "alpha", 0.1f);
  attr_ints(m.pool("MaxPool", "max", "rc", "pm", {2, 2}, {1, 1}), "dilations", {1, 2});
  m.node("GlobalAveragePool", "gap", {"pm"}, {"g"});
  m.node("Flatten", "flatten", {"g"}, {"f"});
  m.linear("fc", "f", "y", 7, 3);
  return m;
}

// x[N,4,9,9] -> grouped conv 6@3x3 pad 1 (group 2) -> Sigmoid -> AveragePool 3x3 stride 2 pad 1 (padding
// not counted) -> conv 8@3x3 -> Tanh -> GlobalMaxPool -> flatten -> fc 5 -> HardSigmoid.
inline SmallNet odd_cnn2(int64_t batch) {
  SmallNet m("odd_cnn2");
  m.input("x", {batch, 4, 9, 9});
  m.output("y");
  attr_ints(m.conv("conv_a", "x", "ca", 4, 6, {3, 3}, /*group=*/2), "pads", {1, 1, 1, 1});
  m.node("Sigmoid", "sig", {"ca"}, {"ra"});
  attr_ints(m.pool("AveragePool", "avg", "ra", "pa", {3, 3}, {2, 2}), "pads", {1, 1, 1, 1});
  m.conv("conv_b", "pa", "cb", 6, 8, {3, 3});
  m.node("Tanh", "tanh", {"cb"}, {"rb"});
  m.node("GlobalMaxPool", "gmp", {"rb"}, {"g"});
  m.node("Flatten", "flatten", {"g"}, {"f"});
  m.linear("fc", "f", "h", 8, 5);
  m.node("HardSigmoid", "hsig", {"h"}, {"y"});
  return m;
}

// NaN paths: x[N,4,8,8] -> Relu (passes NaN) -> MaxPool 2x2 stride 2 (a number wins over NaN) ->
// GlobalMaxPool (NaN wins). With NaN inputs the output is NaN exactly for the planes where a whole
// MaxPool window was NaN.
inline SmallNet nan_pools(int64_t batch) {
  SmallNet m("nan_pools");
  m.input("x", {batch, 4, 8, 8});
  m.output("y");
  m.node("Relu", "relu", {"x"}, {"r"});
  m.pool("MaxPool", "max", "r", "p", {2, 2}, {2, 2});
  m.node("GlobalMaxPool", "gmp", {"p"}, {"y"});
  return m;
}

// x for nan_pools: NaN at every fifth element (never a whole 2x2 window) and in the whole top-left
// window of sample 0, channel 1.
inline std::vector<float> nan_pools_input(int64_t batch, uint32_t seed) {
  std::vector<float> x = random_vec(static_cast<size_t>(batch * 4 * 64), seed);
  for (size_t i = 0; i < x.size(); i += 5) x[i] = NAN;
  for (size_t i : {64, 65, 72, 73}) x[i] = NAN;
  return x;
}

// Refused: a Softmax (not a layer of the kernel) after an MLP.
inline SmallNet softmax_mlp(int64_t batch) {
  SmallNet m("softmax_mlp");
  m.input("x", {batch, 32});
  m.output("y");
  m.linear("fc1", "x", "h1", 32, 48);
  m.node("Relu", "relu", {"h1"}, {"a1"});
  m.linear("fc2", "a1", "h2", 48, 10);
  m.node("Softmax", "softmax", {"h2"}, {"y"});
  return m;
}

// Refused: activations of 1 MiB per sample (x[N,64,64,64] float32), beyond any GPU's shared memory.
inline SmallNet big_cnn(int64_t batch) {
  SmallNet m("big_cnn");
  m.input("x", {batch, 64, 64, 64});
  m.output("y");
  attr_ints(m.conv("conv", "x", "c", 64, 64, {3, 3}), "pads", {1, 1, 1, 1});
  m.node("Relu", "relu", {"c"}, {"y"});
  return m;
}

// ResNet-50's bottleneck with a downsample: 1x1 (c -> c/2), relu, 3x3 (stride s), relu, 1x1 (-> 2c),
// plus the downsample's 1x1 of x (stride s), relu, then a global pool.
inline SmallNet bottleneck(int64_t batch, int64_t c, int64_t hw, int64_t stride) {
  SmallNet m("bottleneck");
  m.input("x", {batch, c, hw, hw});
  m.output("y");
  m.conv("conv1", "x", "c1", c, c / 2, {1, 1});
  m.node("Relu", "relu1", {"c1"}, {"r1"});
  onnx::NodeProto* c2 = m.conv("conv2", "r1", "c2", c / 2, c / 2, {3, 3});
  attr_ints(c2, "pads", {1, 1, 1, 1});
  attr_ints(c2, "strides", {stride, stride});
  m.node("Relu", "relu2", {"c2"}, {"r2"});
  m.conv("conv3", "r2", "c3", c / 2, 2 * c, {1, 1});
  attr_ints(m.conv("downsample", "x", "d", c, 2 * c, {1, 1}), "strides", {stride, stride});
  m.node("Add", "add", {"c3", "d"}, {"s"});
  m.node("Relu", "relu3", {"s"}, {"r3"});
  m.node("GlobalAveragePool", "pool", {"r3"}, {"y"});
  return m;
}

}  // namespace kiln::test
