// Parsing network descriptions (see net_description.h). The zoo's texts come from zoo_data.cpp,
// which CMake generates from src/train/zoo/*.prototxt (cmake/embed_text.cmake).
#include "train/net_description.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "kiln/types.h"

namespace kiln::train {

// Defined in the generated zoo_data.cpp: {name, text} for each zoo description.
extern const std::vector<std::pair<std::string, std::string>> kZooTexts;

namespace {

// Collects the parser's messages with 1-based lines, so that all of them are reported at once.
class Collector : public google::protobuf::io::ErrorCollector {
 public:
  explicit Collector(std::string source) : source_(std::move(source)) {}
  void AddError(int line, int column, const std::string& message) override {
    errors_ += source_ + ":" + std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": " + message + "\n";
  }
  void AddWarning(int line, int column, const std::string& message) override { AddError(line, column, message); }
  const std::string& errors() const { return errors_; }

 private:
  std::string source_;
  std::string errors_;
};

}  // namespace

std::string NetDescription::where(size_t layer) const {
  std::string s = source;
  if (layer < layer_lines.size()) s += ':' + std::to_string(layer_lines[layer]);
  s += ": layer '";
  if (layer < static_cast<size_t>(net.layer_size())) s += net.layer(static_cast<int>(layer)).name();
  return s + "'";
}

NetDescription parse_net_description(const std::string& text, const std::string& source) {
  NetDescription d;
  d.source = source;
  d.text = text;
  google::protobuf::TextFormat::Parser parser;
  Collector errors(source);
  parser.RecordErrorsTo(&errors);
  google::protobuf::TextFormat::ParseInfoTree tree;
  parser.WriteLocationsTo(&tree);
  if (!parser.ParseFromString(text, &d.net))
    throw Error("cannot parse the network description:\n" + errors.errors() +
                "(the schema is src/train/net.proto; examples are in src/train/zoo)");
  const auto* field = pb::Net::descriptor()->FindFieldByName("layer");
  for (int i = 0; i < d.net.layer_size(); ++i) d.layer_lines.push_back(tree.GetLocation(field, i).line + 1);
  return d;
}

NetDescription load_net_description(const std::string& name_or_path) {
  for (const auto& [name, text] : kZooTexts)
    if (name == name_or_path) return parse_net_description(text, "zoo:" + name);
  std::ifstream in(name_or_path, std::ios::binary);
  if (!in) {
    std::string zoo;
    for (const std::string& n : zoo_names()) zoo += (zoo.empty() ? "" : ", ") + n;
    throw Error("--net " + name_or_path + ": neither a zoo network (" + zoo + ") nor a readable description file");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_net_description(ss.str(), name_or_path);
}

std::vector<std::string> zoo_names() {
  std::vector<std::string> names;
  for (const auto& entry : kZooTexts) names.push_back(entry.first);
  return names;
}

}  // namespace kiln::train
