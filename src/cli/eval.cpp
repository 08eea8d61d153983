// kiln eval: top-1 accuracy and the confusion matrix of a classifier (.onnx built in memory, or a
// .kiln engine) on a labelled data set, so that FP32, FP16 and INT8 engines of one model can be
// compared on the same images. The model takes images as the data loader reads them (float32
// [batch, C, H, W] in [0, 1], as `kiln train` exports them) and gives one score per class; the
// last batch is padded with zeros and its padding ignored.
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "data/dataset.h"
#include "graph/onnx_import.h"

namespace kiln::cli {

namespace {

std::string confusion_table(const std::vector<std::vector<int64_t>>& m) {
  const size_t k = m.size();
  std::string s = fmt::format("confusion matrix (rows: true class, columns: predicted class)\n{:>6}", "");
  for (size_t j = 0; j < k; ++j) s += fmt::format(" {:>6}", j);
  s += fmt::format("  {:>7}\n", "recall");
  for (size_t i = 0; i < k; ++i) {
    int64_t row = 0;
    for (int64_t v : m[i]) row += v;
    s += fmt::format("{:>6}", i);
    for (size_t j = 0; j < k; ++j) s += fmt::format(" {:>6}", m[i][j]);
    s += row ? fmt::format("  {:>6.2f}%\n", 100.0 * static_cast<double>(m[i][i]) / static_cast<double>(row))
             : fmt::format("  {:>7}\n", "-");
  }
  return s;
}

}  // namespace

int run_eval(const EvalOptions& o) {
  const std::filesystem::path model = o.model;
  if (o.split != "test" && o.split != "train") throw Error("--split " + o.split + ": expected test or train");
  data::LabelledImages set =
      data::load_labelled_images(o.data, o.split == "test" ? data::Split::kTest : data::Split::kTrain);
  int64_t n = set.images.shape[0];
  if (o.limit > 0) n = std::min(n, o.limit);

  std::shared_ptr<const Engine> engine;
  if (is_onnx(model)) {
    graph::Graph g = graph::import_onnx(model);
    build::BuildReport report;
    std::vector<uint8_t> bytes = build::build_engine(g, build_options(o.build), &report);
    if (!report.precision_choice.empty()) fmt::print(stderr, "{}\n", report.precision_choice);
    engine = Engine::from_bytes(bytes, model.string());
  } else {
    engine = load_engine(model, o.build);
  }
  if (engine->inputs().size() != 1 || engine->outputs().empty())
    throw Error(model.string() +
                ": kiln eval takes a classifier with one input (images) and scores as its first output");
  const TensorInfo& in = engine->inputs()[0];
  const TensorInfo& out = engine->outputs()[0];
  const std::vector<int64_t>& img = set.images.shape;  // [N, C, H, W]
  if (in.dtype != DataType::kFloat32 || in.shape.size() != 4)
    throw Error(fmt::format("{}: input '{}' is {}{}; kiln eval feeds float32 images [batch, C, H, W]", model.string(),
                            in.name, dtype_name(in.dtype), shape_string(in.shape)));
  if (in.shape[1] != img[1] || in.shape[2] != img[2] || in.shape[3] != img[3])
    throw Error(fmt::format("wrong image size: {} takes {}x{}x{} images, {} holds {}x{}x{} ones", model.string(),
                            in.shape[1], in.shape[2], in.shape[3], o.data, img[1], img[2], img[3]));
  const int64_t batch = in.shape[0];
  if (out.shape.size() != 2 || out.shape[0] != batch || out.dtype != DataType::kFloat32)
    throw Error(fmt::format("{}: output '{}' is {}{}; kiln eval expects float32 scores [batch, classes]",
                            model.string(), out.name, dtype_name(out.dtype), shape_string(out.shape)));
  const int64_t classes = out.shape[1];
  for (int64_t i = 0; i < n; ++i)
    if (set.labels[i] >= classes)
      throw Error(
          fmt::format("{}: label {} of image {}, but the model scores {} classes", o.data, set.labels[i], i, classes));

  std::unique_ptr<Context> ctx = engine->create_context(o.threads);
  const int64_t sample = img[1] * img[2] * img[3];
  std::vector<float> buffer(static_cast<size_t>(batch * sample));
  const auto* pixels = reinterpret_cast<const float*>(set.images.data.data());
  std::vector<std::vector<int64_t>> confusion(static_cast<size_t>(classes), std::vector<int64_t>(classes, 0));
  int64_t correct = 0;
  for (int64_t first = 0; first < n; first += batch) {
    const int64_t k = std::min(batch, n - first);
    std::fill(buffer.begin(), buffer.end(), 0.0f);
    std::copy(pixels + first * sample, pixels + (first + k) * sample, buffer.begin());
    ctx->set_input(in.name, buffer.data(), buffer.size() * sizeof(float));
    ctx->run();
    const auto* scores = reinterpret_cast<const float*>(ctx->output(out.name).data());
    for (int64_t i = 0; i < k; ++i) {
      const float* row = scores + i * classes;
      const int64_t predicted = std::max_element(row, row + classes) - row;
      const int32_t label = set.labels[first + i];
      ++confusion[label][predicted];
      correct += predicted == label;
    }
  }
  const double accuracy = static_cast<double>(correct) / static_cast<double>(n);
  fmt::print("{} on {} ({} split, {} images): top-1 accuracy {:.2f}% ({} correct)\n", model.string(), o.data, o.split,
             n, 100 * accuracy, correct);
  if (classes <= 20)
    fmt::print("{}", confusion_table(confusion));
  else
    fmt::print("({} classes: the confusion matrix is in --json)\n", classes);
  if (!o.json.empty()) {
    nlohmann::json j = {{"model", model.string()}, {"data", o.data},       {"split", o.split},      {"images", n},
                        {"correct", correct},      {"accuracy", accuracy}, {"confusion", confusion}};
    std::ofstream f(o.json);
    if (!f || !(f << j.dump(1) << "\n")) throw Error(o.json + ": cannot write");
  }
  return kExitOk;
}

}  // namespace kiln::cli
