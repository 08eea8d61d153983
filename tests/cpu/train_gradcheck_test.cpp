// Gradient checks of every training layer and of the loss, in float64 on the CPU backend: the
// backward pass against central finite differences of the loss, for the inputs and for every
// parameter. Kinks are kept away: inputs of ReLU-like layers are at least 0.1 from zero, and max
// pooling sees distinct values at least 0.01 apart (the step is 1e-5).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "train/cpu_backend.h"
#include "train/net_description.h"
#include "train/network.h"
#include "train/random.h"

namespace kiln::train {
namespace {

constexpr double kStep = 1e-5;

// Inputs: uniform in +-[0.1, 1] (away from ReLU's kink), or a shuffled ramp of distinct values.
enum class Inputs { kAwayFromZero, kDistinct };

std::vector<double> make_inputs(int64_t n, Inputs kind, uint64_t seed) {
  std::vector<double> v(static_cast<size_t>(n));
  if (kind == Inputs::kDistinct) {
    for (int64_t i = 0; i < n; ++i) v[i] = -1 + 0.01 * static_cast<double>(i);
    for (int64_t i = n - 1; i > 0; --i) std::swap(v[i], v[random_bits(seed, i) % static_cast<uint64_t>(i + 1)]);
    return v;
  }
  for (int64_t i = 0; i < n; ++i) {
    double u = uniform_open(seed, i);
    v[i] = (u < 0.5 ? -1 : 1) * (0.1 + 0.9 * std::fabs(2 * u - 1));
  }
  return v;
}

class GradChecker {
 public:
  GradChecker(std::vector<std::unique_ptr<Layer>> layers, std::vector<std::vector<int>> inputs, Shape sample,
              int64_t batch, int64_t classes, Inputs kind = Inputs::kAwayFromZero)
      : be_(2) {
    NetworkConfig config{sample, classes, batch, true};
    net_ =
        std::make_unique<Network>("gradcheck", std::move(layers), std::move(inputs), config, be_, DataType::kFloat64);
    net_->init_params(7);
    // Parameters away from their initial constants (batch norm's scale 1 and shift 0, zero
    // biases), so that every term of the gradient is exercised.
    for (Param* p : net_->params()) {
      std::vector<double> v = download(p->value);
      std::vector<double> noise = make_inputs(p->value.numel(), Inputs::kAwayFromZero, 11 + v.size());
      for (size_t i = 0; i < v.size(); ++i) v[i] += 0.3 * noise[i];
      be_.upload(v.data(), p->value);
    }
    x_ = make_inputs(net_->images().numel(), kind, 3);
    be_.upload(x_.data(), net_->images());
    std::vector<int32_t> labels(static_cast<size_t>(batch));
    for (int64_t i = 0; i < batch; ++i) labels[i] = static_cast<int32_t>(random_bits(5, i) % classes);
    be_.upload(labels.data(), net_->labels());
  }

  // Checks the images' gradient and up to `per_tensor` elements of each parameter's.
  void check(int per_tensor = 1 << 30) {
    net_->forward(batch(), true, kSeed, kStepIndex);
    net_->loss(kStepIndex, Tensor());
    net_->backward(kSeed, kStepIndex);
    std::vector<double> dx = download(net_->input_grad());
    check_tensor("images", net_->images(), dx, per_tensor);
    for (Param* p : net_->params()) check_tensor(p->name, p->value, download(p->grad), per_tensor);
  }

 private:
  static constexpr uint64_t kSeed = 42;
  static constexpr int64_t kStepIndex = 3;

  int64_t batch() const { return net_->max_batch(); }

  std::vector<double> download(const Tensor& t) {
    std::vector<double> v(static_cast<size_t>(t.numel()));
    be_.download(t, v.data());
    return v;
  }

  double loss() {
    net_->forward(batch(), true, kSeed, kStepIndex);
    double l = 0;
    be_.download(net_->loss(kStepIndex, Tensor()), &l);
    return l;
  }

  void check_tensor(const std::string& name, const Tensor& t, const std::vector<double>& analytic, int per_tensor) {
    std::vector<double> v = download(t);
    const int64_t n = t.numel();
    const int64_t stride = std::max<int64_t>(1, n / per_tensor);
    int checked = 0;
    for (int64_t i = 0; i < n; i += stride, ++checked) {
      const double keep = v[i];
      v[i] = keep + kStep;
      be_.upload(v.data(), t);
      const double up = loss();
      v[i] = keep - kStep;
      be_.upload(v.data(), t);
      const double down = loss();
      v[i] = keep;
      be_.upload(v.data(), t);
      const double numeric = (up - down) / (2 * kStep);
      EXPECT_NEAR(analytic[i], numeric, 1e-8 + 1e-5 * std::max(std::fabs(analytic[i]), std::fabs(numeric)))
          << name << "[" << i << "]";
    }
    EXPECT_GT(checked, 0) << name;
  }

  CpuBackend be_;
  std::unique_ptr<Network> net_;
  std::vector<double> x_;
};

// One layer on images [2, C, H, W], followed by a flatten so that softmax cross-entropy over all
// its outputs is the loss.
void check_image_layer(std::unique_ptr<Layer> layer, Shape sample, Inputs kind = Inputs::kAwayFromZero) {
  CpuBackend be(1);
  Shape in = {2};
  in.insert(in.end(), sample.begin(), sample.end());
  Shape out = layer->output_shape(std::vector<Shape>{in});
  int64_t classes = numel_of(out) / 2;
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::move(layer));
  layers.push_back(make_flatten("flatten"));
  GradChecker(std::move(layers), {{0}, {1}}, sample, 2, classes, kind).check();
}

ConvGeometry conv(int64_t k, int64_t stride, int64_t pad, int64_t dilation = 1, int64_t groups = 1) {
  return {{k, k}, {stride, stride}, {pad, pad}, {dilation, dilation}, groups};
}

TEST(TrainGradCheck, Conv2d3x3Pad1) {
  check_image_layer(make_conv2d("c", 3, conv(3, 1, 1), true, InitKind::kHe), {2, 5, 4});
}

TEST(TrainGradCheck, Conv2dStrideDilationGroupsNoBias) {
  check_image_layer(make_conv2d("c", 4, conv(3, 2, 2, 2, 2), false, InitKind::kXavier), {4, 7, 6});
}

TEST(TrainGradCheck, Conv2dRectangularKernel) {
  ConvGeometry g{{2, 3}, {2, 1}, {1, 0}, {1, 1}, 1};
  check_image_layer(make_conv2d("c", 2, g, true, InitKind::kHe), {3, 5, 5});
}

TEST(TrainGradCheck, Linear) {
  for (bool bias : {true, false}) {
    std::vector<std::unique_ptr<Layer>> layers;
    layers.push_back(make_linear("fc", 4, bias, InitKind::kHe));
    GradChecker(std::move(layers), {{0}}, {6}, 3, 4).check();
  }
}

TEST(TrainGradCheck, MaxPool) {
  check_image_layer(make_pool2d("p", {PoolKind::kMax, {2, 2}, {2, 2}, {0, 0}}), {2, 4, 6}, Inputs::kDistinct);
  check_image_layer(make_pool2d("p", {PoolKind::kMax, {3, 3}, {2, 2}, {1, 1}}), {2, 5, 5}, Inputs::kDistinct);
}

TEST(TrainGradCheck, AvgPool) {
  check_image_layer(make_pool2d("p", {PoolKind::kAverage, {3, 3}, {2, 2}, {1, 1}}), {2, 5, 5});
  check_image_layer(make_pool2d("p", {PoolKind::kAverage, {2, 3}, {1, 2}, {0, 1}}), {1, 4, 5});
}

TEST(TrainGradCheck, GlobalAvgPool) { check_image_layer(make_global_avg_pool("g"), {3, 4, 5}); }

TEST(TrainGradCheck, Activations) {
  for (Activation a :
       {Activation::kRelu, Activation::kLeakyRelu, Activation::kSigmoid, Activation::kTanh, Activation::kGelu}) {
    SCOPED_TRACE(static_cast<int>(a));
    check_image_layer(make_activation("a", a, 0.1f), {2, 3, 3});
  }
}

TEST(TrainGradCheck, BatchNormImagesAndFeatures) {
  check_image_layer(make_batchnorm("bn", 0.1, 1e-5), {3, 2, 3});
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(make_batchnorm("bn", 0.1, 1e-5));
  GradChecker(std::move(layers), {{0}}, {5}, 4, 5).check();
}

TEST(TrainGradCheck, Dropout) { check_image_layer(make_dropout("d", 0.3f, 0), {2, 3, 4}); }

// Residual add, concat, and values read by several layers (gradients summed), with flattens that
// cannot share their input's memory.
TEST(TrainGradCheck, AddConcatAndFanOut) {
  std::vector<std::unique_ptr<Layer>> l;
  l.push_back(make_conv2d("conv1", 4, conv(3, 1, 1), true, InitKind::kHe));   // 1
  l.push_back(make_activation("relu1", Activation::kLeakyRelu, 0.2f));        // 2
  l.push_back(make_conv2d("conv2", 4, conv(3, 1, 1), false, InitKind::kHe));  // 3
  l.push_back(make_add("add"));                                               // 4 = 3 + 2
  l.push_back(make_batchnorm("bn", 0.1, 1e-5));                               // 5
  l.push_back(make_concat("cat"));                                            // 6 = [5, 2]
  l.push_back(make_flatten("flat_a"));                                        // 7
  l.push_back(make_flatten("flat_b"));                                        // 8
  l.push_back(make_linear("fc_a", 3, true, InitKind::kXavier));               // 9
  l.push_back(make_linear("fc_b", 3, true, InitKind::kXavier));               // 10
  l.push_back(make_add("logits"));                                            // 11
  std::vector<std::vector<int>> in = {{0}, {1}, {2}, {3, 2}, {4}, {5, 2}, {6}, {6}, {7}, {8}, {9, 10}};
  GradChecker(std::move(l), in, {3, 4, 4}, 3, 3).check(40);
}

TEST(TrainGradCheck, SameValueTwiceIntoAdd) {
  std::vector<std::unique_ptr<Layer>> l;
  l.push_back(make_linear("fc1", 4, true, InitKind::kHe));
  l.push_back(make_add("double"));
  l.push_back(make_linear("fc2", 3, true, InitKind::kHe));
  GradChecker(std::move(l), {{0}, {1, 1}, {2}}, {5}, 2, 3).check();
}

// The zoo's networks end to end, on small images (a sample of each parameter's elements).
TEST(TrainGradCheck, ZooNetworks) {
  struct Case {
    const char* name;
    Shape sample;
    int64_t batch;
  };
  for (const Case& c : {Case{"mlp", {1, 6, 6}, 3}, Case{"lenet5", {1, 16, 16}, 2}, Case{"resnet8", {3, 8, 8}, 4}}) {
    SCOPED_TRACE(c.name);
    LayerList list = build_layers(load_net_description(c.name), 4);
    GradChecker(std::move(list.layers), std::move(list.inputs), c.sample, c.batch, 4).check(12);
  }
}

// The loss alone, through the backend: d/dlogits of mean cross-entropy, with a loss scale.
TEST(TrainGradCheck, SoftmaxCrossEntropy) {
  CpuBackend be(1);
  const int64_t n = 3, c = 5;
  Tensor logits = be.alloc(DataType::kFloat64, {n, c}), probs = be.alloc(DataType::kFloat64, {n, c});
  Tensor dlogits = be.alloc(DataType::kFloat64, {n, c}), loss = be.alloc(DataType::kFloat64, {1});
  Tensor labels = be.alloc(DataType::kInt32, {n});
  std::vector<double> z = make_inputs(n * c, Inputs::kAwayFromZero, 9);
  for (double& v : z) v *= 4;
  std::vector<int32_t> lab = {0, 4, 2};
  be.upload(lab.data(), labels);
  auto eval = [&] {
    be.upload(z.data(), logits);
    be.softmax_cross_entropy_forward(logits, labels, probs, loss);
    double l;
    be.download(loss, &l);
    return l;
  };
  eval();
  be.softmax_cross_entropy_backward(probs, labels, 8.0f, dlogits);
  std::vector<double> d(n * c);
  be.download(dlogits, d.data());
  for (int64_t i = 0; i < n * c; ++i) {
    double keep = z[i];
    z[i] = keep + kStep;
    double up = eval();
    z[i] = keep - kStep;
    double down = eval();
    z[i] = keep;
    EXPECT_NEAR(d[i], 8.0 * (up - down) / (2 * kStep), 1e-8) << i;
  }
}

}  // namespace
}  // namespace kiln::train
