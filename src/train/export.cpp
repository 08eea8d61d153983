// ONNX export of trained networks (see export.h).
#include "train/export.h"

#include <algorithm>
#include <cstring>

#include "graph/onnx_export.h"
#include "train/backend.h"
#include "train/network.h"

namespace kiln::train {

std::string OnnxBuilder::constant(const std::string& name, const Tensor& t) {
  std::vector<float> values(static_cast<size_t>(t.numel()));
  if (t.dtype() == DataType::kFloat32) {
    be_.download(t, values.data());
  } else if (t.dtype() == DataType::kFloat64) {
    std::vector<double> d(values.size());
    be_.download(t, d.data());
    for (size_t i = 0; i < d.size(); ++i) values[i] = static_cast<float>(d[i]);
  } else {
    throw Error("export: tensor '" + name + "' is " + std::string(dtype_name(t.dtype())) + ", not float");
  }
  return constant(name, t.shape(), values);
}

std::string OnnxBuilder::constant(const std::string& name, std::vector<int64_t> shape,
                                  const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  graph::ValueId id = g_.add_constant(name, DataType::kFloat32, std::move(shape), std::move(bytes));
  return g_.value(id).name;
}

std::string OnnxBuilder::node(OpKind kind, Attrs attrs, const std::string& name, std::vector<std::string> inputs) {
  graph::Node n;
  n.name = name;
  n.kind = kind;
  n.attrs = std::move(attrs);
  for (const std::string& in : inputs) {
    graph::ValueId id = g_.find(in);
    if (id == graph::kNoValue) throw Error("export: node '" + name + "' reads unknown value '" + in + "'");
    n.inputs.push_back(id);
  }
  graph::Value out;
  out.name = name;
  out.dtype = DataType::kFloat32;
  graph::ValueId id = g_.add_value(std::move(out));
  n.outputs.push_back(id);
  g_.nodes.push_back(std::move(n));
  return g_.value(id).name;
}

graph::Graph inference_graph(const Network& net, const Normalization& norm) {
  graph::Graph g;
  g.name = net.name();
  const Shape& image = net.image_shape();  // [C, H, W]
  if (norm.mean.size() != static_cast<size_t>(image[0]) || norm.std.size() != norm.mean.size())
    throw Error("export: the normalization has " + std::to_string(norm.mean.size()) + " channels, the network " +
                std::to_string(image[0]));
  graph::Value in;
  in.name = "image";
  in.dtype = DataType::kFloat32;
  in.shape = {-1, image[0], image[1], image[2]};
  in.dim_params = {"batch", "", "", ""};
  in.has_shape = true;
  g.inputs.push_back(g.add_value(std::move(in)));

  OnnxBuilder b(net.backend(), g);
  // (image - mean) * (1 / std), per channel: the data loader's normalization.
  std::vector<float> inv_std;
  for (float s : norm.std) inv_std.push_back(1.0f / s);
  const Shape per_channel = {1, image[0], 1, 1};
  std::string x =
      b.node(OpKind::kSub, NoAttrs{}, "normalize_sub", {"image", b.constant("normalize.mean", per_channel, norm.mean)});
  x = b.node(OpKind::kMul, NoAttrs{}, "normalize", {x, b.constant("normalize.inv_std", per_channel, inv_std)});

  std::vector<std::string> names(net.num_values());
  names[0] = x;
  for (size_t i = 0; i < net.num_layers(); ++i) {
    std::vector<std::string> ins;
    for (int v : net.layer_inputs(i)) ins.push_back(names[static_cast<size_t>(v)]);
    names[net.layer_output(i)] = net.layer(i).export_onnx(b, ins);
  }
  graph::ValueId out = g.find(names.back());
  if (g.find("logits") == graph::kNoValue) g.rename(out, "logits");
  graph::Value& ov = g.value(out);
  ov.shape = {-1, net.num_classes()};
  ov.dim_params = {"batch", ""};
  ov.has_shape = true;
  g.outputs.push_back(out);
  graph::verify(g, false);
  return g;
}

void export_onnx(const Network& net, const Normalization& norm, const std::filesystem::path& path) {
  graph::export_onnx(inference_graph(net, norm), path);
}

ExampleBatch example_batch(Network& net, const TrainingData& data, int64_t n) {
  if (net.dtype() != DataType::kFloat32) throw Error("example batches come from float32 networks");
  std::vector<int64_t> idx = data.validation();
  if (idx.empty()) idx = data.epoch_order(0, 0);
  n = std::min({n, static_cast<int64_t>(idx.size()), net.max_batch()});
  idx.resize(static_cast<size_t>(n));
  const Shape image = net.image_shape();
  const int64_t plane = image[1] * image[2];
  std::vector<float> x(static_cast<size_t>(n * image[0] * plane));
  std::vector<int32_t> labels(static_cast<size_t>(n));
  data.gather(idx, x.data(), labels.data());
  // Back to raw pixels, then normalized again exactly as the exported graph does it (a Sub and a
  // Mul by 1 / std in float), so that both start from the same bits.
  const Normalization& norm = data.normalization();
  ExampleBatch ex;
  ex.images.name = "image";
  ex.images.dtype = DataType::kFloat32;
  ex.images.shape = {n, image[0], image[1], image[2]};
  ex.images.data.resize(x.size() * sizeof(float));
  auto* raw = reinterpret_cast<float*>(ex.images.data.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t ch = i / static_cast<size_t>(plane) % static_cast<size_t>(image[0]);
    raw[i] = x[i] * norm.std[ch] + norm.mean[ch];
    x[i] = (raw[i] - norm.mean[ch]) * (1.0f / norm.std[ch]);
  }
  Backend& be = net.backend();
  be.upload(x.data(), net.images().with_batch(n));
  net.forward(n, false);
  Tensor logits = net.logits();
  ex.logits.name = "logits";
  ex.logits.dtype = DataType::kFloat32;
  ex.logits.shape = logits.shape();
  ex.logits.data.resize(logits.bytes());
  be.download(logits, ex.logits.data.data());
  return ex;
}

}  // namespace kiln::train
