// Every op of the GPU training backend against the CPU backend on the same random inputs: several
// shapes per op (odd sizes, groups, strides, dilation, padding), float32 with tight tolerances,
// float16 activations against float32 with loose ones. Outputs are poisoned with NaN first, so an
// element the GPU leaves unwritten fails the comparison.
#include <functional>
#include <memory>

#include "train/cpu_backend.h"
#include "train/cuda_backend.h"
#include "train_gpu_harness.h"

namespace kiln::train {
namespace {

using gpu_test::get;
using gpu_test::poisoned;
using gpu_test::put;
using gpu_test::put_labels;
using gpu_test::random_values;

using Op = std::function<void(Backend&, const std::vector<Tensor>& in, const std::vector<Tensor>& out)>;

struct Input {
  Shape shape;
  std::vector<float> values;
  bool gpu_half = false;  // float16 on the GPU (activations of a mixed-precision network)
};

Input random_input(Shape shape, uint64_t seed, bool half = false, float lo = -1, float hi = 1) {
  return {shape, random_values(numel_of(shape), seed, lo, hi), half};
}

struct ConvCase {
  int64_t n, c, h, w, o;
  ConvGeometry g;
  bool bias;
};

class TrainGpuOps : public ::testing::Test {
 protected:
  void SetUp() override {
    KILN_SKIP_WITHOUT_GPU();
    gpu_ = std::make_unique<CudaBackend>(0, false);
  }

  // Runs op on both backends; outputs[k] is float16 on the GPU where half_out[k]. Inputs marked
  // gpu_half go to the GPU as float16 and to the CPU as the same values rounded to half. Returns the
  // CPU's outputs and the GPU's.
  std::pair<std::vector<std::vector<float>>, std::vector<std::vector<float>>> run(
      const std::vector<Input>& inputs, const std::vector<Shape>& outputs, const Op& op,
      const std::vector<bool>& half_out = {}) {
    std::vector<std::vector<float>> want, got;
    for (Backend* be : {static_cast<Backend*>(&cpu_), static_cast<Backend*>(gpu_.get())}) {
      const bool gpu = be == gpu_.get();
      std::vector<Tensor> in, out;
      for (const Input& i : inputs) {
        std::vector<float> v = i.values;
        if (i.gpu_half)
          for (float& f : v) f = static_cast<float>(Half(f));
        in.push_back(put(*be, i.shape, v, gpu && i.gpu_half ? DataType::kFloat16 : DataType::kFloat32));
      }
      for (size_t k = 0; k < outputs.size(); ++k)
        out.push_back(poisoned(*be, outputs[k],
                               gpu && k < half_out.size() && half_out[k] ? DataType::kFloat16 : DataType::kFloat32));
      op(*be, in, out);
      auto& dst = gpu ? got : want;
      for (const Tensor& t : out) dst.push_back(get(*be, t));
    }
    return {want, got};
  }

  // Forward, backward data and backward filter (+ bias) of one convolution; half: float16
  // activations on the GPU, float32 weights and weight gradients.
  void check_conv(const ConvCase& k, bool half, double tol);

  CpuBackend cpu_{2};
  std::unique_ptr<CudaBackend> gpu_;
};

TEST_F(TrainGpuOps, ElementwiseConcatSplitAndCast) {
  for (bool half : {false, true}) {
    const double tol = half ? 2e-3 : 0;
    auto [want, got] = run({random_input({3, 5, 7}, 1, half), random_input({3, 5, 7}, 2, half)}, {{3, 5, 7}, {3, 5, 7}},
                           [](Backend& be, auto& in, auto& out) {
                             be.add(in[0], in[1], out[0]);
                             be.mul(in[0], in[1], out[1]);
                             be.add(out[1], in[0], out[1]);  // y may alias an input
                           },
                           {half, half});
    EXPECT_CLOSE(got[0], want[0], tol) << "add, half " << half;
    EXPECT_CLOSE(got[1], want[1], tol) << "mul, half " << half;
  }
  auto [want, got] =
      run({random_input({4, 2, 3, 3}, 3), random_input({4, 5, 3, 3}, 4), random_input({4, 1, 3, 3}, 5)},
          {{4, 8, 3, 3}, {4, 2, 3, 3}, {4, 5, 3, 3}, {4, 1, 3, 3}, {4, 8, 3, 3}}, [](Backend& be, auto& in, auto& out) {
            be.concat(in, out[0]);
            be.split(out[0], std::vector<Tensor>{out[1], out[2], out[3]});
            be.copy(out[0], out[4]);
          });
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "concat/split/copy output " << i;
  EXPECT_EQ(got[1], random_values(72, 3));

  // float32 -> float16 -> float32 rounds once to half.
  const std::vector<float> v = random_values(1000, 6, -70000, 70000);
  Tensor f = put(*gpu_, {1000}, v), h = gpu_->alloc(DataType::kFloat16, {1000}), back = poisoned(*gpu_, {1000});
  gpu_->cast(f, h);
  gpu_->cast(h, back);
  const std::vector<float> r = get(*gpu_, back);
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(r[i], static_cast<float>(Half(v[i]))) << v[i];
  gpu_->fill(f, 2.5);
  EXPECT_EQ(get(*gpu_, f), std::vector<float>(1000, 2.5f));
}

std::vector<ConvCase> conv_cases() {
  return {
      {2, 3, 9, 7, 4, {{3, 3}, {1, 1}, {1, 1}, {1, 1}, 1}, true},     // same padding, odd sizes
      {3, 4, 11, 10, 6, {{5, 5}, {2, 2}, {0, 0}, {1, 1}, 1}, false},  // strided, no padding
      {2, 4, 8, 9, 6, {{3, 2}, {1, 2}, {1, 0}, {2, 1}, 2}, true},     // groups, dilation, unequal axes
      {4, 6, 7, 7, 6, {{3, 3}, {1, 1}, {1, 1}, {1, 1}, 6}, false},    // depthwise
      {5, 8, 6, 6, 16, {{1, 1}, {2, 2}, {0, 0}, {1, 1}, 1}, true},    // resnet's strided 1x1 shortcut
      {16, 1, 28, 28, 6, {{5, 5}, {1, 1}, {2, 2}, {1, 1}, 1}, true},  // LeNet-5's first layer
  };
}

Shape conv_out(const ConvCase& k) {
  auto out = [](int64_t in, int64_t kk, int64_t s, int64_t p, int64_t d) {
    return (in + 2 * p - d * (kk - 1) - 1) / s + 1;
  };
  return {k.n, k.o, out(k.h, k.g.kernel[0], k.g.stride[0], k.g.pad[0], k.g.dilation[0]),
          out(k.w, k.g.kernel[1], k.g.stride[1], k.g.pad[1], k.g.dilation[1])};
}

void TrainGpuOps::check_conv(const ConvCase& k, bool half, double tol) {
  const Shape xs = {k.n, k.c, k.h, k.w}, ws = {k.o, k.c / k.g.groups, k.g.kernel[0], k.g.kernel[1]}, ys = conv_out(k);
  const ConvGeometry g = k.g;
  const bool bias = k.bias;
  auto [want, got] =
      run({random_input(xs, 11, half), random_input(ws, 12), random_input({k.o}, 13), random_input(ys, 14, half)},
          {ys, xs, ws, {k.o}},
          [g, bias](Backend& be, auto& in, auto& out) {
            be.conv2d_forward(in[0], in[1], bias ? in[2] : Tensor(), out[0], g);
            be.conv2d_backward_data(in[3], in[1], out[1], g);
            be.conv2d_backward_filter(in[0], in[3], out[2], out[3], g);
          },
          {half, half, false, false});
  const std::string what = "conv x " + shape_string(xs) + " w " + shape_string(ws) + (half ? " float16" : "");
  EXPECT_CLOSE(got[0], want[0], tol) << what << ": forward";
  EXPECT_CLOSE(got[1], want[1], tol) << what << ": backward data";
  EXPECT_CLOSE(got[2], want[2], tol) << what << ": backward filter";
  EXPECT_CLOSE(got[3], want[3], tol) << what << ": bias gradient";
}

TEST_F(TrainGpuOps, Conv2dForwardAndBackward) {
  for (const ConvCase& k : conv_cases()) check_conv(k, false, 5e-5);
}

TEST_F(TrainGpuOps, Conv2dFloat16AgainstFloat32) {
  for (const ConvCase& k : conv_cases()) check_conv(k, true, 2e-2);
}

TEST_F(TrainGpuOps, LinearForwardAndBackward) {
  struct Case {
    int64_t n, k, m;
    bool bias;
  };
  for (bool half : {false, true})
    for (const Case& c :
         {Case{5, 7, 3, true}, Case{64, 400, 120, true}, Case{33, 84, 10, false}, Case{1, 17, 1, true}}) {
      const bool bias = c.bias;
      auto [want, got] = run({random_input({c.n, c.k}, 21, half), random_input({c.m, c.k}, 22), random_input({c.m}, 23),
                              random_input({c.n, c.m}, 24, half)},
                             {{c.n, c.m}, {c.n, c.k}, {c.m, c.k}, {c.m}},
                             [bias](Backend& be, auto& in, auto& out) {
                               be.linear_forward(in[0], in[1], bias ? in[2] : Tensor(), out[0]);
                               be.linear_backward_data(in[3], in[1], out[1]);
                               be.linear_backward_weights(in[0], in[3], out[2], out[3]);
                             },
                             {half, half, false, false});
      const double tol = half ? 2e-2 : 1e-5;
      const std::string what = "linear " + std::to_string(c.n) + "x" + std::to_string(c.k) + "->" +
                               std::to_string(c.m) + (half ? " float16" : "");
      for (size_t i = 0; i < want.size(); ++i) EXPECT_CLOSE(got[i], want[i], tol) << what << ", output " << i;
    }
}

TEST_F(TrainGpuOps, PoolingForwardAndBackward) {
  struct Case {
    Shape x;
    PoolGeometry g;
  };
  const std::vector<Case> cases = {
      {{3, 2, 28, 28}, {PoolKind::kMax, {2, 2}, {2, 2}, {0, 0}}},
      {{2, 3, 7, 7}, {PoolKind::kMax, {2, 2}, {2, 2}, {0, 0}}},  // the last row and column are left out
      {{2, 3, 9, 8}, {PoolKind::kMax, {3, 3}, {2, 2}, {1, 1}}},  // overlapping, padded
      {{2, 3, 9, 8}, {PoolKind::kAverage, {3, 3}, {2, 2}, {1, 1}}},
      {{2, 2, 5, 5}, {PoolKind::kAverage, {2, 2}, {1, 1}, {0, 0}}},
      {{4, 5, 6, 5}, {PoolKind::kAverage, {6, 5}, {1, 1}, {0, 0}}},  // global average
  };
  for (bool half : {false, true})
    for (const Case& c : cases) {
      auto out = [](int64_t in, int64_t k, int64_t s, int64_t p) { return (in + 2 * p - k) / s + 1; };
      const Shape ys = {c.x[0], c.x[1], out(c.x[2], c.g.kernel[0], c.g.stride[0], c.g.pad[0]),
                        out(c.x[3], c.g.kernel[1], c.g.stride[1], c.g.pad[1])};
      const PoolGeometry g = c.g;
      // Forward first, then backward with the GPU's own y (the op reads x only, but keep it honest).
      auto [want, got] = run({random_input(c.x, 31, half), random_input(ys, 32, half)}, {ys, c.x},
                             [g](Backend& be, auto& in, auto& out) {
                               be.pool2d_forward(in[0], out[0], g);
                               be.pool2d_backward(in[0], out[0], in[1], out[1], g);
                             },
                             {half, half});
      const std::string what = "pool " + shape_string(c.x) + (g.kind == PoolKind::kMax ? " max" : " average");
      // float32 pooling sums in the CPU's order: the same bits.
      const double tol = half ? 2e-3 : 0;
      EXPECT_CLOSE(got[0], want[0], tol) << what << ": forward";
      EXPECT_CLOSE(got[1], want[1], tol) << what << ": backward";
    }
}

TEST_F(TrainGpuOps, BatchNormTrainingInferenceAndBackward) {
  for (bool half : {false, true})
    for (const Shape& x : {Shape{4, 3, 5, 7}, Shape{16, 10}, Shape{64, 16, 8, 8}}) {
      const int64_t c = x[1];
      Input xin = random_input(x, 41, half, 2, 5);  // a mean far from zero
      auto [want, got] =
          run({xin, random_input({c}, 42, false, 0.5f, 1.5f), random_input({c}, 43), random_input(x, 44, half),
               random_input({c}, 45), random_input({c}, 46, false, 0.5f, 2)},
              {x, {c}, {c}, {c}, {c}, x, x, {c}, {c}},
              [](Backend& be, auto& in, auto& out) {
                // out: y, running mean, running var, saved mean, saved inv std, inference y, dx, dgamma, dbeta
                be.copy(in[4], out[1]);
                be.copy(in[5], out[2]);
                be.batchnorm_forward_train(in[0], in[1], in[2], out[0], out[1], out[2], out[3], out[4], 0.1, 1e-5);
                be.batchnorm_forward_infer(in[0], in[1], in[2], out[1], out[2], out[5], 1e-5);
                be.batchnorm_backward(in[0], in[3], in[1], out[3], out[4], out[6], out[7], out[8]);
              },
              {half, false, false, false, false, half, half, false, false});
      const char* names[] = {"y",           "running mean", "running var", "saved mean", "saved inv std",
                             "inference y", "dx",           "dgamma",      "dbeta"};
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_CLOSE(got[i], want[i], half ? 1e-2 : 1e-5) << "batch norm " << shape_string(x) << ": " << names[i];
    }
}

TEST_F(TrainGpuOps, Activations) {
  for (bool half : {false, true})
    for (Activation a :
         {Activation::kRelu, Activation::kLeakyRelu, Activation::kSigmoid, Activation::kTanh, Activation::kGelu}) {
      auto [want, got] =
          run({random_input({7, 333}, 51, half, -4, 4), random_input({7, 333}, 52, half)}, {{7, 333}, {7, 333}},
              [a](Backend& be, auto& in, auto& out) {
                be.activation_forward(a, 0.1f, in[0], out[0]);
                be.activation_backward(a, 0.1f, in[0], out[0], in[1], out[1]);
              },
              {half, half});
      EXPECT_CLOSE(got[0], want[0], half ? 2e-3 : 1e-5) << "activation " << static_cast<int>(a) << " forward";
      EXPECT_CLOSE(got[1], want[1], half ? 2e-3 : 1e-5) << "activation " << static_cast<int>(a) << " backward";
    }
}

TEST_F(TrainGpuOps, DropoutDrawsTheCpuMask) {
  auto [want, got] =
      run({random_input({3, 1001}, 61)}, {{3, 1001}, {3, 1001}, {3, 1001}}, [](Backend& be, auto& in, auto& out) {
        be.dropout_forward(in[0], out[0], out[1], 0.3f, 1234, 77);
        be.mul(in[0], out[0], out[2]);  // the backward pass's product
      });
  EXPECT_EQ(got[0], want[0]) << "mask";
  EXPECT_EQ(got[1], want[1]) << "y";
  EXPECT_EQ(got[2], want[2]) << "dx";
}

TEST_F(TrainGpuOps, SoftmaxCrossEntropyAndMetrics) {
  const int64_t n = 37, c = 13;
  std::vector<int32_t> labels(n);
  for (int64_t i = 0; i < n; ++i) labels[i] = static_cast<int32_t>(i * 7 % c);
  std::vector<std::vector<float>> out[2];
  Backend* bes[2] = {&cpu_, gpu_.get()};
  for (int b = 0; b < 2; ++b) {
    Backend& be = *bes[b];
    Tensor logits = put(be, {n, c}, random_values(n * c, 71, -4, 4)), lab = put_labels(be, labels);
    Tensor probs = poisoned(be, {n, c}), loss = poisoned(be, {1}), d = poisoned(be, {n, c});
    Tensor metrics = be.alloc(DataType::kFloat64, {kMetricsSize});
    const double init[kMetricsSize] = {0, 0, 0, -1};
    be.upload(init, metrics);
    be.softmax_cross_entropy_forward(logits, lab, probs, loss);
    be.softmax_cross_entropy_backward(probs, lab, 1.5f, d);
    be.accumulate_metrics(loss, probs, lab, 4, metrics);
    be.accumulate_metrics(loss, probs, lab, 5, metrics);
    be.fill(loss, std::nan(""));
    be.accumulate_metrics(loss, probs, lab, 9, metrics);
    be.accumulate_metrics(loss, probs, lab, 10, metrics);
    out[b] = {get(be, probs), get(be, loss), get(be, d), get(be, metrics)};
  }
  EXPECT_CLOSE(out[1][0], out[0][0], 1e-6) << "probs";
  EXPECT_CLOSE(out[1][2], out[0][2], 1e-6) << "dlogits";
  EXPECT_TRUE(std::isnan(out[1][1][0]));
  EXPECT_EQ(out[1][3][1], out[0][3][1]) << "hits";
  EXPECT_EQ(out[1][3][2], 4 * n) << "count";
  EXPECT_EQ(out[1][3][3], 9) << "first bad step";
  EXPECT_TRUE(std::isnan(out[1][3][0])) << "the loss sum takes the NaN";
  // The loss itself, before the NaN: from a fresh forward pass.
  Tensor logits = put(*gpu_, {n, c}, random_values(n * c, 71, -4, 4)), lab = put_labels(*gpu_, labels);
  Tensor probs = gpu_->alloc(DataType::kFloat32, {n, c}), loss = poisoned(*gpu_, {1});
  gpu_->softmax_cross_entropy_forward(logits, lab, probs, loss);
  Tensor cl = cpu_.alloc(DataType::kFloat32, {1}), cp = cpu_.alloc(DataType::kFloat32, {n, c});
  cpu_.softmax_cross_entropy_forward(put(cpu_, {n, c}, random_values(n * c, 71, -4, 4)), put_labels(cpu_, labels), cp,
                                     cl);
  EXPECT_CLOSE(get(*gpu_, loss), get(cpu_, cl), 1e-6) << "loss";
}

TEST_F(TrainGpuOps, SgdAndAdamUpdateEveryParameterInOneStep) {
  const std::vector<int64_t> sizes = {1, 17, 9000, 20000};  // 9000 and 20000 span several chunks
  for (int kind = 0; kind < 3; ++kind) {                    // SGD, Adam, AdamW
    std::vector<std::vector<float>> result[2];
    Backend* bes[2] = {&cpu_, gpu_.get()};
    for (int b = 0; b < 2; ++b) {
      Backend& be = *bes[b];
      std::vector<ParamSlot> slots;
      for (size_t i = 0; i < sizes.size(); ++i) {
        const int64_t n = sizes[i];
        slots.push_back({put(be, {n}, random_values(n, 81 + i)), put(be, {n}, random_values(n, 91 + i)),
                         put(be, {n}, random_values(n, 101 + i, -0.1f, 0.1f)),
                         put(be, {n}, random_values(n, 111 + i, 0, 0.01f)), i % 2 == 1});
      }
      for (int64_t t = 1; t <= 2; ++t) {
        if (kind == 0)
          be.sgd_step(slots, {0.1f, 0.9f, 0.01f});
        else
          be.adam_step(slots, {1e-2f, 0.9f, 0.999f, 1e-8f, 0.05f, kind == 2, t});
      }
      for (const ParamSlot& p : slots)
        for (const Tensor* t : {&p.value, &p.m, &p.v}) result[b].push_back(get(be, *t));
    }
    for (size_t i = 0; i < result[0].size(); ++i)
      EXPECT_CLOSE(result[1][i], result[0][i], 1e-6) << "solver " << kind << ", tensor " << i;
  }
}

}  // namespace
}  // namespace kiln::train
