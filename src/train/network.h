// A trainable network: layers in order over values (value 0 is the input images, value i + 1 the
// output of layer i), with softmax cross-entropy on the last layer's output. Every tensor (outputs,
// gradients, parameters, scratch) is allocated once, for the largest batch, when the network is
// built; a step allocates nothing. Gradients of a value read by several layers are summed (the
// first layer to run backward writes, the others accumulate through scratch).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "train/layers.h"
#include "train/net_description.h"

namespace kiln::train {

struct NetworkConfig {
  Shape image;          // one sample's shape: [C, H, W] for images
  int64_t classes = 0;  // logits per sample
  int64_t max_batch = 1;
  bool input_grad = false;  // also compute the gradient of the images (gradient checks)
};

class Network {
 public:
  // Builds the layers of `desc`; errors name the description's file, line and layer.
  // dtype: the activations' type (Backend::compute_dtype()); parameters, the loss and the
  // probabilities take master_dtype(dtype).
  Network(const NetDescription& desc, const NetworkConfig& config, Backend& be, DataType dtype = DataType::kFloat32);
  // A network of the given layers (tests build single layers this way). inputs[i] lists the values
  // layer i reads (0: the images, k: the output of layer k - 1).
  Network(std::string name, std::vector<std::unique_ptr<Layer>> layers, std::vector<std::vector<int>> inputs,
          const NetworkConfig& config, Backend& be, DataType dtype);

  const std::string& name() const { return name_; }
  Backend& backend() const { return be_; }
  DataType dtype() const { return dtype_; }
  const Shape& image_shape() const { return config_.image; }
  int64_t num_classes() const { return config_.classes; }
  int64_t max_batch() const { return config_.max_batch; }

  size_t num_layers() const { return layers_.size(); }
  size_t num_values() const { return layers_.size() + 1; }
  const Layer& layer(size_t i) const { return *layers_[i]; }
  const std::vector<int>& layer_inputs(size_t i) const { return inputs_[i]; }
  size_t layer_output(size_t i) const { return i + 1; }
  const Shape& value_shape(size_t v) const { return shapes_[v]; }  // at the largest batch

  // Where a step's data goes: images [max_batch, C, H, W] (of master_dtype(dtype())) and int32
  // labels [max_batch]; a batch of n uses the first n rows.
  const Tensor& images() const { return images_; }
  const Tensor& labels() const { return labels_; }

  // Draws every parameter from `seed` (Param::fill), independent of the backend and thread count.
  void init_params(uint64_t seed);

  // Forward pass over the first n images. training: batch statistics and dropout (with masks drawn
  // from seed and step).
  void forward(int64_t n, bool training, uint64_t seed = 0, int64_t step = 0);
  // The logits of the last forward pass.
  Tensor logits() const;
  // Softmax cross-entropy of the last forward pass against labels(); adds the batch to `metrics`
  // (Backend::accumulate_metrics). Returns the loss tensor [1] (on the device).
  const Tensor& loss(int64_t step, const Tensor& metrics);
  // Gradients of the mean loss (times loss_scale) with respect to every parameter; runs after loss().
  void backward(uint64_t seed, int64_t step, float loss_scale = 1.0f);
  // The images' gradient of the last backward, if NetworkConfig::input_grad.
  const Tensor& input_grad() const { return grads_[0]; }

  std::vector<Param*> params();
  int64_t num_parameters() const;
  // Parameters' values and layers' buffers by name, in a fixed order: what checkpoints save and
  // the exporter writes.
  std::vector<std::pair<std::string, Tensor>> state() const;

 private:
  void build();
  void set_batch(int64_t n);
  std::string where(size_t layer) const;

  std::string name_;
  Backend& be_;
  DataType dtype_;
  NetworkConfig config_;
  NetDescription desc_;  // for messages; empty for networks built from layers
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::vector<int>> inputs_;
  std::vector<Shape> shapes_;
  std::vector<Tensor> act_, grads_;  // per value; a grad is undefined where none is needed
  // What backward gives layer i for input j: the value's gradient, or scratch (accumulate = true:
  // added to the gradient afterwards; false: thrown away, or undefined where the layer skips it).
  struct InputGrad {
    bool to_grad = false;
    bool accumulate = false;
    Tensor scratch;
  };
  std::vector<std::vector<InputGrad>> plan_;
  std::vector<bool> aliased_;  // reshape layers whose output is a view of their input
  Tensor images_;              // act_[0], or its float32 source in a float16 network
  Tensor labels_, probs_, loss_;
  bool built_ = false;

  // Views of act_ and grads_ at the current batch.
  int64_t batch_ = -1;
  std::vector<Tensor> act_view_, grad_view_;
  std::vector<std::vector<Tensor>> scratch_view_;  // per layer: the dx tensors backward gets
};

}  // namespace kiln::train
