// Export of a trained network to ONNX in inference form, through kiln_graph's IR and exporter:
// batch norm keeps its running statistics, dropout disappears, and the input normalization
// ((image - mean) / std per channel) becomes the graph's first nodes, so the model takes images
// as the data loader reads them (float32 in [0, 1]). The output is the logits.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/tensor_file.h"
#include "train/data.h"
#include "train/tensor.h"

namespace kiln::train {

class Backend;
class Network;

// Builds a graph::Graph, one node at a time; layers call it from Layer::export_onnx.
class OnnxBuilder {
 public:
  OnnxBuilder(Backend& be, graph::Graph& g) : be_(be), g_(g) {}
  // An initializer named `name` holding t's values as float32 (the network may train in float64).
  std::string constant(const std::string& name, const Tensor& t);
  std::string constant(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values);
  // A node of kind `kind` named `name` with one output value, also named `name`; returns it.
  std::string node(OpKind kind, Attrs attrs, const std::string& name, std::vector<std::string> inputs);

 private:
  Backend& be_;
  graph::Graph& g_;
};

// The inference graph of `net`: input "image" [batch, C, H, W] (symbolic batch), output "logits".
graph::Graph inference_graph(const Network& net, const Normalization& norm);
void export_onnx(const Network& net, const Normalization& norm, const std::filesystem::path& path);

// Up to n validation images (training images if there is no validation part) as the exported
// model takes them (float32 [n, C, H, W] in [0, 1]) and the logits of the network's inference
// forward pass on them: a check for the exported model (ONNX test-data layout, `kiln run
// --inputs DIR --expect DIR`).
struct ExampleBatch {
  HostTensor images, logits;
};
ExampleBatch example_batch(Network& net, const TrainingData& data, int64_t n);

}  // namespace kiln::train
