// Network description -> layers: one translation per kind of the Layer oneof in net.proto. Every
// problem found is reported together, each with its file, line and layer.
#include <map>

#include "train/net_description.h"

namespace kiln::train {

namespace {

// A size given as one value (both axes) or two (height, width); `fallback` when absent.
void sizes(const google::protobuf::RepeatedField<int64_t>& f, const int64_t fallback[2], int64_t out[2],
           const char* what) {
  if (f.empty()) {
    out[0] = fallback[0], out[1] = fallback[1];
  } else if (f.size() == 1) {
    out[0] = out[1] = f[0];
  } else if (f.size() == 2) {
    out[0] = f[0], out[1] = f[1];
  } else {
    throw Error(std::string(what) + " takes one value or two (height, width), got " + std::to_string(f.size()));
  }
}

InitKind init_of(const pb::Net& net, const pb::Layer& l) {
  pb::InitKind k = l.has_init() ? l.init() : net.init();
  return k == pb::XAVIER ? InitKind::kXavier : InitKind::kHe;
}

std::unique_ptr<Layer> make_layer(const pb::Net& net, const pb::Layer& l, int64_t index, int64_t classes) {
  const std::string& name = l.name();
  static constexpr int64_t kOnes[2] = {1, 1}, kZeros[2] = {0, 0};
  switch (l.kind_case()) {
    case pb::Layer::kConv: {
      const pb::Conv& c = l.conv();
      if (!c.has_out_channels()) throw Error("conv needs out_channels");
      if (c.kernel().empty()) throw Error("conv needs kernel");
      ConvGeometry g;
      sizes(c.kernel(), kOnes, g.kernel, "kernel");
      sizes(c.stride(), kOnes, g.stride, "stride");
      sizes(c.pad(), kZeros, g.pad, "pad");
      sizes(c.dilation(), kOnes, g.dilation, "dilation");
      g.groups = c.groups();
      return make_conv2d(name, c.out_channels(), g, c.bias(), init_of(net, l));
    }
    case pb::Layer::kLinear:
      return make_linear(name, l.linear().has_out_features() ? l.linear().out_features() : classes, l.linear().bias(),
                         init_of(net, l));
    case pb::Layer::kMaxPool:
    case pb::Layer::kAvgPool: {
      const pb::Pool& p = l.has_max_pool() ? l.max_pool() : l.avg_pool();
      if (p.kernel().empty()) throw Error("pooling needs kernel");
      PoolGeometry g;
      g.kind = l.has_max_pool() ? PoolKind::kMax : PoolKind::kAverage;
      sizes(p.kernel(), kOnes, g.kernel, "kernel");
      sizes(p.stride(), g.kernel, g.stride, "stride");
      sizes(p.pad(), kZeros, g.pad, "pad");
      return make_pool2d(name, g);
    }
    case pb::Layer::kGlobalAvgPool: return make_global_avg_pool(name);
    case pb::Layer::kRelu: return make_activation(name, Activation::kRelu, 0);
    case pb::Layer::kLeakyRelu: return make_activation(name, Activation::kLeakyRelu, l.leaky_relu().alpha());
    case pb::Layer::kSigmoid: return make_activation(name, Activation::kSigmoid, 0);
    case pb::Layer::kTanh: return make_activation(name, Activation::kTanh, 0);
    case pb::Layer::kGelu: return make_activation(name, Activation::kGelu, 0);
    case pb::Layer::kBatchNorm: return make_batchnorm(name, l.batch_norm().momentum(), l.batch_norm().eps());
    case pb::Layer::kDropout: return make_dropout(name, l.dropout().p(), index);
    case pb::Layer::kFlatten: return make_flatten(name);
    case pb::Layer::kAdd: return make_add(name);
    case pb::Layer::kConcat: return make_concat(name);
    case pb::Layer::KIND_NOT_SET:
      throw Error(
          "no layer kind: give one of conv, linear, max_pool, avg_pool, global_avg_pool, relu, leaky_relu, "
          "sigmoid, tanh, gelu, batch_norm, dropout, flatten, add, concat");
  }
  throw Error("unknown layer kind");
}

}  // namespace

LayerList build_layers(const NetDescription& desc, int64_t classes) {
  LayerList out;
  std::string problems;
  std::map<std::string, int> values = {{"data", 0}};
  const pb::Net& net = desc.net;
  if (net.layer_size() == 0) throw Error(desc.source + ": the network has no layers");
  for (int i = 0; i < net.layer_size(); ++i) {
    const pb::Layer& l = net.layer(i);
    const std::string where = desc.where(static_cast<size_t>(i));
    try {
      if (l.name().empty()) throw Error("every layer needs a name");
      if (values.count(l.name()))
        throw Error(l.name() == "data" ? "'data' names the network's input" : "another layer has this name");
      std::vector<int> inputs;
      if (l.input().empty()) inputs.push_back(i);  // the previous layer's output, or the images
      for (const std::string& in : l.input()) {
        auto it = values.find(in);
        if (it == values.end()) throw Error("input '" + in + "' is not 'data' or an earlier layer's name");
        inputs.push_back(it->second);
      }
      out.layers.push_back(make_layer(net, l, i, classes));
      out.inputs.push_back(std::move(inputs));
    } catch (const Error& e) {
      problems += where + ": " + e.what() + "\n";
      out.layers.push_back(nullptr);
      out.inputs.push_back({});
    }
    values.emplace(l.name(), i + 1);
  }
  if (!problems.empty()) {
    problems.pop_back();  // the last newline
    throw Error("the network description has errors:\n" + problems);
  }
  return out;
}

}  // namespace kiln::train
