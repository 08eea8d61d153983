// Layers with parameters or windows: Conv2d, Linear, MaxPool/AvgPool and GlobalAvgPool.
#include "train/layers.h"

#include <string>

#include "train/export.h"

namespace kiln::train {

namespace {

std::string dims(const Shape& s) { return shape_string(s); }

Param make_param(Backend& be, DataType dtype, std::string name, Shape shape, Param::Fill fill, int64_t fan_in,
                 int64_t fan_out, bool decay) {
  Param p;
  p.name = std::move(name);
  p.value = be.alloc(master_dtype(dtype), shape);
  p.grad = be.alloc(master_dtype(dtype), shape);
  p.fill = fill;
  p.fan_in = fan_in;
  p.fan_out = fan_out;
  p.decay = decay;
  return p;
}

Param::Fill weight_fill(InitKind k) { return k == InitKind::kHe ? Param::Fill::kHe : Param::Fill::kXavier; }

int64_t window_out(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

void check_geometry(const int64_t kernel[2], const int64_t stride[2], const int64_t pad[2]) {
  for (int i = 0; i < 2; ++i) {
    if (kernel[i] < 1) throw Error("kernel sizes must be at least 1");
    if (stride[i] < 1) throw Error("strides must be at least 1");
    if (pad[i] < 0) throw Error("padding must not be negative");
  }
}

class Conv2d final : public Layer {
 public:
  Conv2d(std::string name, int64_t out, const ConvGeometry& g, bool bias, InitKind init)
      : Layer(std::move(name)), out_(out), g_(g), bias_(bias), init_(init) {}

  Shape output_shape(std::span<const Shape> in) const override {
    const Shape& x = in[0];
    if (x.size() != 4) throw Error("a convolution takes images [N,C,H,W], got " + dims(x));
    check_geometry(g_.kernel, g_.stride, g_.pad);
    if (g_.dilation[0] < 1 || g_.dilation[1] < 1) throw Error("dilations must be at least 1");
    if (out_ < 1) throw Error("out_channels must be at least 1");
    if (g_.groups < 1 || x[1] % g_.groups || out_ % g_.groups)
      throw Error("groups (" + std::to_string(g_.groups) + ") must divide the input channels (" + std::to_string(x[1]) +
                  ") and out_channels (" + std::to_string(out_) + ")");
    Shape y = {x[0], out_, window_out(x[2], g_.kernel[0], g_.stride[0], g_.pad[0], g_.dilation[0]),
               window_out(x[3], g_.kernel[1], g_.stride[1], g_.pad[1], g_.dilation[1])};
    if (y[2] < 1 || y[3] < 1) throw Error("the kernel is larger than the padded input " + dims(x));
    return y;
  }

  void setup(Backend& be, DataType dtype, std::span<const Shape> in) override {
    const int64_t cg = in[0][1] / g_.groups, taps = g_.kernel[0] * g_.kernel[1];
    params_.push_back(make_param(be, dtype, name() + ".weight", {out_, cg, g_.kernel[0], g_.kernel[1]},
                                 weight_fill(init_), cg * taps, out_ * taps / g_.groups, true));
    if (bias_) params_.push_back(make_param(be, dtype, name() + ".bias", {out_}, Param::Fill::kZero, 1, 1, false));
  }

  void forward(const StepContext& ctx, std::span<const Tensor> x, const Tensor& y) override {
    ctx.be.conv2d_forward(x[0], params_[0].value, bias_ ? params_[1].value : Tensor(), y, g_);
  }

  void backward(const StepContext& ctx, std::span<const Tensor> x, const Tensor& y, const Tensor& dy,
                std::span<const Tensor> dx) override {
    ctx.be.conv2d_backward_filter(x[0], dy, params_[0].grad, bias_ ? params_[1].grad : Tensor(), g_);
    if (dx[0].defined()) ctx.be.conv2d_backward_data(dy, params_[0].value, dx[0], g_);
  }

  std::string export_onnx(OnnxBuilder& b, std::span<const std::string> inputs) const override {
    ConvAttrs a;
    a.kernel_shape = {g_.kernel[0], g_.kernel[1]};
    a.strides = {g_.stride[0], g_.stride[1]};
    a.pads = {g_.pad[0], g_.pad[1], g_.pad[0], g_.pad[1]};
    a.dilations = {g_.dilation[0], g_.dilation[1]};
    a.group = g_.groups;
    std::vector<std::string> ins = {inputs[0], b.constant(params_[0].name, params_[0].value)};
    if (bias_) ins.push_back(b.constant(params_[1].name, params_[1].value));
    return b.node(OpKind::kConv, a, name(), ins);
  }

 private:
  int64_t out_;
  ConvGeometry g_;
  bool bias_;
  InitKind init_;
};

class Linear final : public Layer {
 public:
  Linear(std::string name, int64_t out, bool bias, InitKind init)
      : Layer(std::move(name)), out_(out), bias_(bias), init_(init) {}

  Shape output_shape(std::span<const Shape> in) const override {
    if (in[0].size() != 2)
      throw Error("a linear layer takes features [N,F], got " + dims(in[0]) + "; put a flatten layer before it");
    if (out_ < 1) throw Error("out_features must be at least 1");
    return {in[0][0], out_};
  }

  void setup(Backend& be, DataType dtype, std::span<const Shape> in) override {
    const int64_t k = in[0][1];
    params_.push_back(make_param(be, dtype, name() + ".weight", {out_, k}, weight_fill(init_), k, out_, true));
    if (bias_) params_.push_back(make_param(be, dtype, name() + ".bias", {out_}, Param::Fill::kZero, 1, 1, false));
  }

  void forward(const StepContext& ctx, std::span<const Tensor> x, const Tensor& y) override {
    ctx.be.linear_forward(x[0], params_[0].value, bias_ ? params_[1].value : Tensor(), y);
  }

  void backward(const StepContext& ctx, std::span<const Tensor> x, const Tensor& y, const Tensor& dy,
                std::span<const Tensor> dx) override {
    ctx.be.linear_backward_weights(x[0], dy, params_[0].grad, bias_ ? params_[1].grad : Tensor());
    if (dx[0].defined()) ctx.be.linear_backward_data(dy, params_[0].value, dx[0]);
  }

  std::string export_onnx(OnnxBuilder& b, std::span<const std::string> inputs) const override {
    GemmAttrs a;
    a.transB = 1;
    std::vector<std::string> ins = {inputs[0], b.constant(params_[0].name, params_[0].value)};
    if (bias_) ins.push_back(b.constant(params_[1].name, params_[1].value));
    return b.node(OpKind::kGemm, a, name(), ins);
  }

 private:
  int64_t out_;
  bool bias_;
  InitKind init_;
};

// Max or average pooling; a global average pool is an average pool whose window is the whole
// image, fixed in setup once the input size is known.
class Pool2d final : public Layer {
 public:
  Pool2d(std::string name, const PoolGeometry& g, bool global) : Layer(std::move(name)), g_(g), global_(global) {}

  Shape output_shape(std::span<const Shape> in) const override {
    const Shape& x = in[0];
    if (x.size() != 4) throw Error("pooling takes images [N,C,H,W], got " + dims(x));
    if (global_) return {x[0], x[1], 1, 1};
    check_geometry(g_.kernel, g_.stride, g_.pad);
    if (g_.pad[0] >= g_.kernel[0] || g_.pad[1] >= g_.kernel[1])
      throw Error("padding must be smaller than the window, or some windows would see only padding");
    Shape y = {x[0], x[1], window_out(x[2], g_.kernel[0], g_.stride[0], g_.pad[0], 1),
               window_out(x[3], g_.kernel[1], g_.stride[1], g_.pad[1], 1)};
    if (y[2] < 1 || y[3] < 1) throw Error("the window is larger than the padded input " + dims(x));
    return y;
  }

  void setup(Backend&, DataType, std::span<const Shape> in) override {
    if (!global_) return;
    g_ = PoolGeometry{PoolKind::kAverage, {in[0][2], in[0][3]}, {1, 1}, {0, 0}};
  }

  void forward(const StepContext& ctx, std::span<const Tensor> x, const Tensor& y) override {
    ctx.be.pool2d_forward(x[0], y, g_);
  }

  void backward(const StepContext& ctx, std::span<const Tensor> x, const Tensor& y, const Tensor& dy,
                std::span<const Tensor> dx) override {
    if (dx[0].defined()) ctx.be.pool2d_backward(x[0], y, dy, dx[0], g_);
  }

  std::string export_onnx(OnnxBuilder& b, std::span<const std::string> inputs) const override {
    if (global_) return b.node(OpKind::kGlobalAveragePool, NoAttrs{}, name(), {inputs[0]});
    PoolAttrs a;
    a.kernel_shape = {g_.kernel[0], g_.kernel[1]};
    a.strides = {g_.stride[0], g_.stride[1]};
    a.pads = {g_.pad[0], g_.pad[1], g_.pad[0], g_.pad[1]};
    return b.node(g_.kind == PoolKind::kMax ? OpKind::kMaxPool : OpKind::kAveragePool, a, name(), {inputs[0]});
  }

 private:
  PoolGeometry g_;
  bool global_;
};

}  // namespace

std::unique_ptr<Layer> make_conv2d(std::string name, int64_t out_channels, const ConvGeometry& g, bool bias,
                                   InitKind init) {
  return std::make_unique<Conv2d>(std::move(name), out_channels, g, bias, init);
}

std::unique_ptr<Layer> make_linear(std::string name, int64_t out_features, bool bias, InitKind init) {
  return std::make_unique<Linear>(std::move(name), out_features, bias, init);
}

std::unique_ptr<Layer> make_pool2d(std::string name, const PoolGeometry& g) {
  return std::make_unique<Pool2d>(std::move(name), g, false);
}

std::unique_ptr<Layer> make_global_avg_pool(std::string name) {
  return std::make_unique<Pool2d>(std::move(name), PoolGeometry{PoolKind::kAverage}, true);
}

}  // namespace kiln::train
