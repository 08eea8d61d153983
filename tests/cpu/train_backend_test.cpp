// CPU training backend: optimizer steps against their formulas, dropout masks, metrics (with the
// first non-finite step), float32 against float64 on the same layers, and bit-identical results
// for 1 and 2 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "train/cpu_backend.h"
#include "train/network.h"
#include "train/random.h"

namespace kiln::train {
namespace {

template <class T>
std::vector<T> get(Backend& be, const Tensor& t) {
  std::vector<T> v(static_cast<size_t>(t.numel()));
  be.download(t, v.data());
  return v;
}

template <class T>
Tensor put(Backend& be, DataType dtype, Shape shape, const std::vector<T>& v) {
  Tensor t = be.alloc(dtype, std::move(shape));
  be.upload(v.data(), t);
  return t;
}

TEST(TrainBackend, SgdMomentumAndWeightDecay) {
  CpuBackend be(1);
  const auto f64 = DataType::kFloat64;
  ParamSlot p{put<double>(be, f64, {2}, {1.0, -2.0}), put<double>(be, f64, {2}, {0.5, 0.25}),
              put<double>(be, f64, {2}, {0.1, 0.2}), Tensor(), true};
  be.sgd_step({&p, 1}, {0.1f, 0.9f, 0.01f});
  // m = 0.9 m + g + wd w; w -= lr m.
  std::vector<double> m = {0.9 * 0.1 + 0.5 + 0.01 * 1.0, 0.9 * 0.2 + 0.25 + 0.01 * -2.0};
  std::vector<double> w = {1.0 - 0.1 * m[0], -2.0 - 0.1 * m[1]};
  auto gm = get<double>(be, p.m), gw = get<double>(be, p.value);
  for (int i = 0; i < 2; ++i) {
    EXPECT_NEAR(gm[i], m[i], 1e-7);
    EXPECT_NEAR(gw[i], w[i], 1e-7);
  }
}

TEST(TrainBackend, AdamAndAdamW) {
  for (bool decoupled : {false, true}) {
    CpuBackend be(1);
    const auto f64 = DataType::kFloat64;
    ParamSlot p{put<double>(be, f64, {1}, {2.0}), put<double>(be, f64, {1}, {0.5}), put<double>(be, f64, {1}, {0.1}),
                put<double>(be, f64, {1}, {0.01}), true};
    AdamStep s{0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, decoupled, 3};
    be.adam_step({&p, 1}, s);
    double w = 2.0, g = 0.5, b1 = 0.9, b2 = 0.999, lr = 0.01, wd = 0.1;
    if (decoupled)
      w -= lr * wd * w;
    else
      g += wd * w;
    double m = b1 * 0.1 + (1 - b1) * g, v = b2 * 0.01 + (1 - b2) * g * g;
    double mhat = m / (1 - std::pow(b1, 3)), vhat = v / (1 - std::pow(b2, 3));
    w -= lr * mhat / (std::sqrt(vhat) + 1e-8);
    EXPECT_NEAR(get<double>(be, p.value)[0], w, 1e-7) << decoupled;
    EXPECT_NEAR(get<double>(be, p.m)[0], m, 1e-7);
    EXPECT_NEAR(get<double>(be, p.v)[0], v, 1e-7);
  }
}

TEST(TrainBackend, DropoutMaskIsAFunctionOfKeyAndIndex) {
  CpuBackend be(2);
  const int64_t n = 100000;
  Tensor x = be.alloc(DataType::kFloat32, {n}), y = be.alloc(DataType::kFloat32, {n});
  Tensor m1 = be.alloc(DataType::kFloat32, {n}), m2 = be.alloc(DataType::kFloat32, {n});
  be.fill(x, 1.0);
  be.dropout_forward(x, m1, y, 0.25f, 77, 0);
  be.dropout_forward(x, m2, y, 0.25f, 77, 0);
  auto a = get<float>(be, m1), b = get<float>(be, m2);
  EXPECT_EQ(a, b);
  int64_t dropped = 0;
  for (int64_t i = 0; i < n; ++i) {
    dropped += a[i] == 0;
    ASSERT_TRUE(a[i] == 0 || a[i] == 1.0f / 0.75f);
    ASSERT_EQ(a[i] == 0, dropout_uniform(77, i) < 0.25f);
  }
  EXPECT_NEAR(static_cast<double>(dropped) / n, 0.25, 0.01);
  be.dropout_forward(x, m2, y, 0.25f, 78, 0);
  EXPECT_NE(a, get<float>(be, m2));
  // A replica starting at element 1000 draws the single-device mask from there on.
  Tensor tx = be.alloc(DataType::kFloat32, {n - 1000}), tail = be.alloc(DataType::kFloat32, {n - 1000});
  Tensor ty = be.alloc(DataType::kFloat32, {n - 1000});
  be.fill(tx, 1.0);
  be.dropout_forward(tx, tail, ty, 0.25f, 77, 1000);
  EXPECT_EQ(get<float>(be, tail), std::vector<float>(a.begin() + 1000, a.end()));
}

TEST(TrainBackend, MetricsCountHitsAndTheFirstBadStep) {
  CpuBackend be(1);
  const auto f32 = DataType::kFloat32;
  Tensor probs = put<float>(be, f32, {3, 2}, {0.9f, 0.1f, 0.2f, 0.8f, 0.6f, 0.4f});
  Tensor labels = put<int32_t>(be, DataType::kInt32, {3}, {0, 1, 1});
  Tensor metrics = be.alloc(DataType::kFloat64, {kMetricsSize});
  be.fill(metrics, 0);
  std::vector<double> init = {0, 0, 0, -1};
  be.upload(init.data(), metrics);
  be.accumulate_metrics(put<float>(be, f32, {1}, {0.5f}), probs, labels, 4, metrics);
  be.accumulate_metrics(put<float>(be, f32, {1}, {std::numeric_limits<float>::infinity()}), probs, labels, 5, metrics);
  be.accumulate_metrics(put<float>(be, f32, {1}, {std::nanf("")}), probs, labels, 6, metrics);
  auto m = get<double>(be, metrics);
  EXPECT_EQ(m[kCorrect], 6);
  EXPECT_EQ(m[kCount], 9);
  EXPECT_EQ(m[kFirstBadStep], 5);
}

// A small CNN with every kind of layer, run in float32 and float64 from the same parameters.
std::vector<std::unique_ptr<Layer>> cnn(std::vector<std::vector<int>>& inputs) {
  std::vector<std::unique_ptr<Layer>> l;
  l.push_back(make_conv2d("conv1", 6, {{3, 3}, {1, 1}, {1, 1}, {1, 1}, 1}, true, InitKind::kHe));
  l.push_back(make_batchnorm("bn1", 0.1, 1e-5));
  l.push_back(make_activation("relu1", Activation::kRelu, 0));
  l.push_back(make_conv2d("conv2", 6, {{3, 3}, {1, 1}, {1, 1}, {1, 1}, 2}, false, InitKind::kHe));
  l.push_back(make_add("add"));
  l.push_back(make_pool2d("pool", {PoolKind::kMax, {2, 2}, {2, 2}, {0, 0}}));
  l.push_back(make_dropout("drop", 0.2f, 6));
  l.push_back(make_flatten("flat"));
  l.push_back(make_linear("fc", 10, true, InitKind::kXavier));
  inputs = {{0}, {1}, {2}, {3}, {4, 3}, {5}, {6}, {7}, {8}};
  return l;
}

struct StepResult {
  std::vector<double> loss;
  std::vector<std::vector<double>> grads;
};

StepResult run_cnn(int threads, DataType dtype) {
  CpuBackend be(threads);
  std::vector<std::vector<int>> inputs;
  auto layers = cnn(inputs);
  Network net("cnn", std::move(layers), inputs, {{3, 12, 12}, 10, 64}, be, dtype);
  net.init_params(1);
  std::vector<double> x(static_cast<size_t>(net.images().numel()));
  for (size_t i = 0; i < x.size(); ++i) x[i] = uniform_open(2, i) - 0.5;
  std::vector<int32_t> labels(64);
  for (int i = 0; i < 64; ++i) labels[i] = i % 10;
  if (dtype == DataType::kFloat64) {
    be.upload(x.data(), net.images());
  } else {
    std::vector<float> f(x.begin(), x.end());
    be.upload(f.data(), net.images());
  }
  be.upload(labels.data(), net.labels());
  StepResult r;
  net.forward(64, true, 9, 0);
  const Tensor& loss = net.loss(0, Tensor());
  net.backward(9, 0);
  auto to_double = [&](const Tensor& t) {
    if (t.dtype() == DataType::kFloat64) return get<double>(be, t);
    auto f = get<float>(be, t);
    return std::vector<double>(f.begin(), f.end());
  };
  r.loss = to_double(loss);
  for (Param* p : net.params()) r.grads.push_back(to_double(p->grad));
  return r;
}

TEST(TrainBackend, Float32AgreesWithFloat64) {
  StepResult f = run_cnn(2, DataType::kFloat32), d = run_cnn(2, DataType::kFloat64);
  EXPECT_NEAR(f.loss[0], d.loss[0], 1e-5 * std::fabs(d.loss[0]));
  ASSERT_EQ(f.grads.size(), d.grads.size());
  for (size_t k = 0; k < f.grads.size(); ++k) {
    double scale = 0, err = 0;
    for (size_t i = 0; i < f.grads[k].size(); ++i) {
      scale = std::max(scale, std::fabs(d.grads[k][i]));
      err = std::max(err, std::fabs(f.grads[k][i] - d.grads[k][i]));
    }
    EXPECT_LE(err, 1e-4 * scale + 1e-6) << "parameter " << k;  // conv1.bias: 0 in exact arithmetic (batch norm follows)
  }
}

TEST(TrainBackend, OneAndTwoThreadsGiveTheSameBits) {
  StepResult a = run_cnn(1, DataType::kFloat32), b = run_cnn(2, DataType::kFloat32);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.grads, b.grads);
}

}  // namespace
}  // namespace kiln::train
