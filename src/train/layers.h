// Layers of a trainable network. A layer computes its output shape, creates its parameters and
// scratch tensors through the backend, and runs forward and backward as calls of Backend ops; it
// never touches memory itself, so every layer runs on every backend. Shapes include the batch as
// the leading dimension; tensors are allocated for the largest batch and a smaller batch (the last
// one of an evaluation) is a view of its leading rows (Tensor::with_batch).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "train/backend.h"

namespace kiln::train {

class OnnxBuilder;  // export.h

enum class InitKind { kHe, kXavier };

// A learned tensor. Its initial values: He (normal, std sqrt(2 / fan_in)) or Xavier (uniform in
// +-sqrt(6 / (fan_in + fan_out))) for weights, constants for biases and batch-norm scales.
struct Param {
  enum class Fill { kHe, kXavier, kZero, kOne };
  std::string name;  // "conv1.weight", "conv1.bias", "bn1.scale", ...
  Tensor value, grad;
  Fill fill = Fill::kZero;
  int64_t fan_in = 1, fan_out = 1;
  bool decay = false;  // weight decay applies
};

// What a layer needs to know about the step it runs in.
struct StepContext {
  Backend& be;
  bool training = true;
  uint64_t seed = 0;  // the run's seed (dropout masks derive from it)
  int64_t step = 0;   // global step, from 0
  // Data parallel: the position of this replica's first sample in the global batch, so that its
  // dropout masks are its rows of the single-device masks.
  int64_t first_sample = 0;
};

class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  // Number of inputs the layer takes; -1 means two or more.
  virtual int arity() const { return 1; }
  // Checks the input shapes and returns the output shape; throws kiln::Error saying what is wrong
  // (the network adds the layer's name and line).
  virtual Shape output_shape(std::span<const Shape> in) const = 0;
  // Allocates parameters and scratch for inputs of these shapes (batch = the largest batch).
  virtual void setup(Backend& be, DataType dtype, std::span<const Shape> in) {}
  virtual void forward(const StepContext& ctx, std::span<const Tensor> x, const Tensor& y) = 0;
  // Writes the input gradients dx (an undefined dx[i] needs none) and overwrites the parameters'
  // gradients. y is the output of the forward pass of the same step.
  virtual void backward(const StepContext& ctx, std::span<const Tensor> x, const Tensor& y, const Tensor& dy,
                        std::span<const Tensor> dx) = 0;
  // True when the output is the input with another shape (Flatten): the network then makes the
  // output a view of the input's memory and skips forward and backward.
  virtual bool is_reshape() const { return false; }
  // True when backward writes every dx[i] (batch norm, concat): the network then gives scratch
  // tensors for inputs that need no gradient, instead of undefined ones.
  virtual bool writes_all_input_grads() const { return false; }
  std::vector<Param>& params() { return params_; }
  // State that is saved and exported but not learned (batch norm's running statistics).
  virtual std::vector<std::pair<std::string, Tensor>> buffers() const { return {}; }
  // Adds the layer's inference form to an ONNX graph; returns the name of its output value.
  virtual std::string export_onnx(OnnxBuilder& b, std::span<const std::string> inputs) const = 0;

 protected:
  std::vector<Param> params_;

 private:
  std::string name_;
};

// ---- the layers (layers.cpp, layers_misc.cpp)

std::unique_ptr<Layer> make_conv2d(std::string name, int64_t out_channels, const ConvGeometry& g, bool bias,
                                   InitKind init);
std::unique_ptr<Layer> make_linear(std::string name, int64_t out_features, bool bias, InitKind init);
std::unique_ptr<Layer> make_pool2d(std::string name, const PoolGeometry& g);
std::unique_ptr<Layer> make_global_avg_pool(std::string name);
std::unique_ptr<Layer> make_activation(std::string name, Activation a, float alpha);
std::unique_ptr<Layer> make_batchnorm(std::string name, double momentum, double eps);
// index: the layer's position in the network, which keeps each dropout layer's masks distinct.
std::unique_ptr<Layer> make_dropout(std::string name, float p, int64_t index);
std::unique_ptr<Layer> make_flatten(std::string name);
std::unique_ptr<Layer> make_add(std::string name);
std::unique_ptr<Layer> make_concat(std::string name);

}  // namespace kiln::train
