// Network descriptions: protobuf text files with the schema in net.proto, and the built-in zoo
// (src/train/zoo/*.prototxt, compiled into the library). Syntax errors name the file, line and
// column; later errors about a layer name the file, the layer's line and the layer.
#pragma once

#include <string>
#include <vector>

#include "train/layers.h"
#include "train/net.pb.h"

namespace kiln::train {

struct NetDescription {
  std::string source;  // the file, or "zoo:lenet5"
  std::string text;    // what was parsed (checkpoints keep it)
  pb::Net net;
  std::vector<int> layer_lines;  // 1-based line of each layer

  // "FILE:LINE: layer 'NAME'" for messages about layer i.
  std::string where(size_t layer) const;
};

// Parses description text; `source` names it in messages.
NetDescription parse_net_description(const std::string& text, const std::string& source);
// A zoo name (mlp, lenet5, resnet8) or the path of a description file.
NetDescription load_net_description(const std::string& name_or_path);
std::vector<std::string> zoo_names();

// The layers of a description and the values each reads (0: the images, k: layer k - 1's output);
// `classes` sizes a linear layer without out_features. Errors name the file, line and layer.
struct LayerList {
  std::vector<std::unique_ptr<Layer>> layers;
  std::vector<std::vector<int>> inputs;
};
LayerList build_layers(const NetDescription& desc, int64_t classes);

}  // namespace kiln::train
