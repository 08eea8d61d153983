// Layers without windows: activations, BatchNorm, Dropout, Flatten, residual Add and Concat.
#include <string>

#include "train/export.h"
#include "train/layers.h"
#include "train/random.h"

namespace kiln::train {

namespace {

class ActivationLayer final : public Layer {
 public:
  ActivationLayer(std::string name, Activation a, float alpha) : Layer(std::move(name)), a_(a), alpha_(alpha) {}

  Shape output_shape(std::span<const Shape> in) const override { return in[0]; }

  void forward(const StepContext& ctx, std::span<const Tensor> x, const Tensor& y) override {
    ctx.be.activation_forward(a_, alpha_, x[0], y);
  }

  void backward(const StepContext& ctx, std::span<const Tensor> x, const Tensor& y, const Tensor& dy,
                std::span<const Tensor> dx) override {
    if (dx[0].defined()) ctx.be.activation_backward(a_, alpha_, x[0], y, dy, dx[0]);
  }

  std::string export_onnx(OnnxBuilder& b, std::span<const std::string> inputs) const override {
    switch (a_) {
      case Activation::kRelu: return b.node(OpKind::kRelu, NoAttrs{}, name(), {inputs[0]});
      case Activation::kLeakyRelu: return b.node(OpKind::kLeakyRelu, AlphaAttrs{alpha_}, name(), {inputs[0]});
      case Activation::kSigmoid: return b.node(OpKind::kSigmoid, NoAttrs{}, name(), {inputs[0]});
      case Activation::kTanh: return b.node(OpKind::kTanh, NoAttrs{}, name(), {inputs[0]});
      case Activation::kGelu: return b.node(OpKind::kGelu, GeluAttrs{}, name(), {inputs[0]});
    }
    throw Error("unknown activation");
  }

 private:
  Activation a_;
  float alpha_;
};

class BatchNorm final : public Layer {
 public:
  BatchNorm(std::string name, double momentum, double eps) : Layer(std::move(name)), momentum_(momentum), eps_(eps) {}

  Shape output_shape(std::span<const Shape> in) const override {
    if (in[0].size() != 2 && in[0].size() != 4)
      throw Error("batch norm takes [N,C] or [N,C,H,W], got " + shape_string(in[0]));
    if (!(momentum_ > 0 && momentum_ <= 1)) throw Error("momentum must be in (0, 1]");
    if (!(eps_ > 0)) throw Error("eps must be positive");
    return in[0];
  }

  void setup(Backend& be, DataType dtype, std::span<const Shape> in) override {
    const int64_t c = in[0][1];
    for (auto [suffix, fill] : {std::pair{".scale", Param::Fill::kOne}, std::pair{".bias", Param::Fill::kZero}}) {
      Param p;
      p.name = name() + suffix;
      p.value = be.alloc(master_dtype(dtype), {c});
      p.grad = be.alloc(master_dtype(dtype), {c});
      p.fill = fill;
      params_.push_back(std::move(p));
    }
    running_mean_ = be.alloc(master_dtype(dtype), {c});
    running_var_ = be.alloc(master_dtype(dtype), {c});
    be.fill(running_mean_, 0);
    be.fill(running_var_, 1);
    saved_mean_ = be.alloc(master_dtype(dtype), {c});
    saved_inv_std_ = be.alloc(master_dtype(dtype), {c});
  }

  void forward(const StepContext& ctx, std::span<const Tensor> x, const Tensor& y) override {
    if (ctx.training)
      ctx.be.batchnorm_forward_train(x[0], params_[0].value, params_[1].value, y, running_mean_, running_var_,
                                     saved_mean_, saved_inv_std_, momentum_, eps_);
    else
      ctx.be.batchnorm_forward_infer(x[0], params_[0].value, params_[1].value, running_mean_, running_var_, y, eps_);
  }

  void backward(const StepContext& ctx, std::span<const Tensor> x, const Tensor& y, const Tensor& dy,
                std::span<const Tensor> dx) override {
    // The input gradient comes out of the same sums as the parameters' (cuDNN computes them
    // together too); a batch norm on the network's input writes it to scratch.
    ctx.be.batchnorm_backward(x[0], dy, params_[0].value, saved_mean_, saved_inv_std_, dx[0], params_[0].grad,
                              params_[1].grad);
  }

  std::vector<std::pair<std::string, Tensor>> buffers() const override {
    return {{name() + ".running_mean", running_mean_}, {name() + ".running_var", running_var_}};
  }

  std::string export_onnx(OnnxBuilder& b, std::span<const std::string> inputs) const override {
    BatchNormAttrs a;
    a.epsilon = static_cast<float>(eps_);
    return b.node(
        OpKind::kBatchNormalization, a, name(),
        {inputs[0], b.constant(params_[0].name, params_[0].value), b.constant(params_[1].name, params_[1].value),
         b.constant(name() + ".running_mean", running_mean_), b.constant(name() + ".running_var", running_var_)});
  }

  bool writes_all_input_grads() const override { return true; }

 private:
  double momentum_, eps_;
  Tensor running_mean_, running_var_, saved_mean_, saved_inv_std_;
};

class Dropout final : public Layer {
 public:
  Dropout(std::string name, float p, int64_t index) : Layer(std::move(name)), p_(p), index_(index) {}

  Shape output_shape(std::span<const Shape> in) const override {
    if (!(p_ >= 0 && p_ < 1)) throw Error("the drop probability must be in [0, 1)");
    return in[0];
  }

  void setup(Backend& be, DataType dtype, std::span<const Shape> in) override { mask_ = be.alloc_batch(dtype, in[0]); }

  void forward(const StepContext& ctx, std::span<const Tensor> x, const Tensor& y) override {
    if (!ctx.training) return ctx.be.copy(x[0], y);
    uint64_t key = derive_key(ctx.seed, kStreamDropout, static_cast<uint64_t>(index_), static_cast<uint64_t>(ctx.step));
    const uint64_t first = static_cast<uint64_t>(ctx.first_sample * (x[0].numel() / x[0].dim(0)));
    ctx.be.dropout_forward(x[0], mask_.with_batch(x[0].dim(0)), y, p_, key, first);
  }

  void backward(const StepContext& ctx, std::span<const Tensor> x, const Tensor& y, const Tensor& dy,
                std::span<const Tensor> dx) override {
    if (dx[0].defined()) ctx.be.mul(dy, mask_.with_batch(dy.dim(0)), dx[0]);
  }

  std::string export_onnx(OnnxBuilder&, std::span<const std::string> inputs) const override { return inputs[0]; }

 private:
  float p_;
  int64_t index_;
  Tensor mask_;
};

class Flatten final : public Layer {
 public:
  using Layer::Layer;

  Shape output_shape(std::span<const Shape> in) const override {
    int64_t f = 1;
    for (size_t i = 1; i < in[0].size(); ++i) f *= in[0][i];
    return {in[0][0], f};
  }

  bool is_reshape() const override { return true; }

  // Forward and backward run only when the network cannot alias (the input feeds other layers too).
  void forward(const StepContext& ctx, std::span<const Tensor> x, const Tensor& y) override { ctx.be.copy(x[0], y); }

  void backward(const StepContext& ctx, std::span<const Tensor> x, const Tensor& y, const Tensor& dy,
                std::span<const Tensor> dx) override {
    if (dx[0].defined()) ctx.be.copy(dy, dx[0]);
  }

  std::string export_onnx(OnnxBuilder& b, std::span<const std::string> inputs) const override {
    return b.node(OpKind::kFlatten, AxisAttrs{1}, name(), {inputs[0]});
  }
};

class Add final : public Layer {
 public:
  using Layer::Layer;
  int arity() const override { return -1; }

  Shape output_shape(std::span<const Shape> in) const override {
    for (const Shape& s : in)
      if (s != in[0])
        throw Error("add takes inputs of one shape, got " + shape_string(in[0]) + " and " + shape_string(s));
    return in[0];
  }

  void forward(const StepContext& ctx, std::span<const Tensor> x, const Tensor& y) override {
    ctx.be.add(x[0], x[1], y);
    for (size_t i = 2; i < x.size(); ++i) ctx.be.add(y, x[i], y);
  }

  void backward(const StepContext& ctx, std::span<const Tensor> x, const Tensor& y, const Tensor& dy,
                std::span<const Tensor> dx) override {
    for (const Tensor& d : dx)
      if (d.defined()) ctx.be.copy(dy, d);
  }

  std::string export_onnx(OnnxBuilder& b, std::span<const std::string> inputs) const override {
    std::string acc = inputs[0];
    for (size_t i = 1; i < inputs.size(); ++i)
      acc = b.node(OpKind::kAdd, NoAttrs{}, i + 1 == inputs.size() ? name() : name() + "_" + std::to_string(i),
                   {acc, inputs[i]});
    return acc;
  }
};

class Concat final : public Layer {
 public:
  using Layer::Layer;
  int arity() const override { return -1; }

  Shape output_shape(std::span<const Shape> in) const override {
    Shape y = in[0];
    if (y.size() < 2) throw Error("concat joins along axis 1 and needs inputs of rank 2 or more");
    for (size_t i = 1; i < in.size(); ++i) {
      const Shape& s = in[i];
      bool ok = s.size() == y.size() && s[0] == y[0];
      for (size_t d = 2; ok && d < s.size(); ++d) ok = s[d] == y[d];
      if (!ok)
        throw Error("concat's inputs must agree in every dimension but the channels, got " + shape_string(in[0]) +
                    " and " + shape_string(s));
      y[1] += s[1];
    }
    return y;
  }

  void forward(const StepContext& ctx, std::span<const Tensor> x, const Tensor& y) override { ctx.be.concat(x, y); }

  void backward(const StepContext& ctx, std::span<const Tensor> x, const Tensor& y, const Tensor& dy,
                std::span<const Tensor> dx) override {
    ctx.be.split(dy, dx);
  }

  bool writes_all_input_grads() const override { return true; }

  std::string export_onnx(OnnxBuilder& b, std::span<const std::string> inputs) const override {
    return b.node(OpKind::kConcat, AxisAttrs{1}, name(), {inputs.begin(), inputs.end()});
  }
};

}  // namespace

std::unique_ptr<Layer> make_activation(std::string name, Activation a, float alpha) {
  return std::make_unique<ActivationLayer>(std::move(name), a, alpha);
}

std::unique_ptr<Layer> make_batchnorm(std::string name, double momentum, double eps) {
  return std::make_unique<BatchNorm>(std::move(name), momentum, eps);
}

std::unique_ptr<Layer> make_dropout(std::string name, float p, int64_t index) {
  return std::make_unique<Dropout>(std::move(name), p, index);
}

std::unique_ptr<Layer> make_flatten(std::string name) { return std::make_unique<Flatten>(std::move(name)); }
std::unique_ptr<Layer> make_add(std::string name) { return std::make_unique<Add>(std::move(name)); }
std::unique_ptr<Layer> make_concat(std::string name) { return std::make_unique<Concat>(std::move(name)); }

}  // namespace kiln::train
