// The network (see network.h): shapes and memory at build time, forward, loss and backward.
#include "train/network.h"

#include <cmath>

#include "train/random.h"

namespace kiln::train {

Network::Network(const NetDescription& desc, const NetworkConfig& config, Backend& be, DataType dtype)
    : name_(desc.net.name().empty() ? "net" : desc.net.name()), be_(be), dtype_(dtype), config_(config), desc_(desc) {
  LayerList list = build_layers(desc, config.classes);
  layers_ = std::move(list.layers);
  inputs_ = std::move(list.inputs);
  build();
}

Network::Network(std::string name, std::vector<std::unique_ptr<Layer>> layers, std::vector<std::vector<int>> inputs,
                 const NetworkConfig& config, Backend& be, DataType dtype)
    : name_(std::move(name)),
      be_(be),
      dtype_(dtype),
      config_(config),
      layers_(std::move(layers)),
      inputs_(std::move(inputs)) {
  build();
}

std::string Network::where(size_t layer) const {
  if (!desc_.layer_lines.empty()) return desc_.where(layer);
  return "layer '" + layers_[layer]->name() + "'";
}

void Network::build() {
  if (layers_.empty()) throw Error("network '" + name_ + "' has no layers");
  if (config_.max_batch < 1) throw Error("the batch size must be at least 1");
  const size_t nv = num_values();
  Shape data = {config_.max_batch};
  data.insert(data.end(), config_.image.begin(), config_.image.end());
  shapes_.assign(1, data);
  std::vector<int> consumers(nv, 0);
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = *layers_[i];
    std::vector<Shape> in;
    for (int v : inputs_[i]) {
      if (v < 0 || static_cast<size_t>(v) > i) throw Error(where(i) + ": reads a value that is not defined before it");
      in.push_back(shapes_[v]);
      ++consumers[v];
    }
    const int arity = l.arity();
    if (arity >= 0 && in.size() != static_cast<size_t>(arity))
      throw Error(where(i) + ": takes " + std::to_string(arity) + " input(s), got " + std::to_string(in.size()));
    if (arity < 0 && in.size() < 2) throw Error(where(i) + ": takes two or more inputs");
    try {
      shapes_.push_back(l.output_shape(in));
      l.setup(be_, dtype_, in);
    } catch (const Error& e) {
      throw Error(where(i) + ": " + e.what());
    }
  }
  const Shape& out = shapes_.back();
  if (out.size() != 2 || out[1] != config_.classes)
    throw Error(where(layers_.size() - 1) + ": the last layer gives " + shape_string(out) + ", but the loss needs [" +
                std::to_string(config_.max_batch) + "," + std::to_string(config_.classes) +
                "] (one logit per class); end with a linear layer");
  for (size_t v = 1; v + 1 < nv; ++v)
    if (consumers[v] == 0)
      throw Error(where(v - 1) + ": its output is never used (only the last layer's output may be left unread)");

  // Outputs and gradients. A reshape layer whose input has no other reader shares its memory.
  aliased_.assign(layers_.size(), false);
  act_.assign(nv, Tensor());
  grads_.assign(nv, Tensor());
  act_[0] = be_.alloc_batch(dtype_, shapes_[0]);
  // A float16 network takes float32 images and casts them at the start of forward().
  images_ = master_dtype(dtype_) == dtype_ ? act_[0] : be_.alloc_batch(master_dtype(dtype_), shapes_[0]);
  if (config_.input_grad) grads_[0] = be_.alloc_batch(dtype_, shapes_[0]);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const size_t v = i + 1;
    const int in = inputs_[i][0];
    aliased_[i] = layers_[i]->is_reshape() && consumers[in] == 1;
    act_[v] = aliased_[i] ? act_[in].view(shapes_[v]) : be_.alloc_batch(dtype_, shapes_[v]);
    grads_[v] = aliased_[i] && grads_[in].defined() ? grads_[in].view(shapes_[v]) : be_.alloc_batch(dtype_, shapes_[v]);
  }

  // The backward plan, in backward order: the first layer to reach a value writes its gradient.
  plan_.assign(layers_.size(), {});
  std::vector<bool> written(nv, false);
  for (size_t i = layers_.size(); i-- > 0;) {
    plan_[i].resize(inputs_[i].size());
    if (aliased_[i]) {
      written[inputs_[i][0]] = true;  // through the shared memory
      continue;
    }
    for (size_t j = 0; j < inputs_[i].size(); ++j) {
      const int v = inputs_[i][j];
      InputGrad& ig = plan_[i][j];
      if (grads_[v].defined() && !written[v]) {
        ig.to_grad = true;
        written[v] = true;
      } else if (grads_[v].defined()) {
        ig.accumulate = true;
        ig.scratch = be_.alloc_batch(dtype_, shapes_[v]);
      } else if (layers_[i]->writes_all_input_grads()) {
        ig.scratch = be_.alloc_batch(dtype_, shapes_[v]);
      }
    }
  }
  labels_ = be_.alloc_batch(DataType::kInt32, {config_.max_batch});
  probs_ = be_.alloc_batch(master_dtype(dtype_), shapes_.back());
  loss_ = be_.alloc(master_dtype(dtype_), {1});
}

void Network::set_batch(int64_t n) {
  if (n < 1 || n > config_.max_batch)
    throw Error("batch of " + std::to_string(n) + " samples; the network was built for 1 to " +
                std::to_string(config_.max_batch));
  if (n == batch_) return;
  batch_ = n;
  act_view_.clear();
  grad_view_.clear();
  for (const Tensor& t : act_) act_view_.push_back(t.with_batch(n));
  for (const Tensor& t : grads_) grad_view_.push_back(t.defined() ? t.with_batch(n) : Tensor());
  scratch_view_.assign(layers_.size(), {});
  for (size_t i = 0; i < layers_.size(); ++i)
    for (size_t j = 0; j < plan_[i].size(); ++j) {
      const InputGrad& ig = plan_[i][j];
      if (ig.to_grad)
        scratch_view_[i].push_back(grad_view_[inputs_[i][j]]);
      else
        scratch_view_[i].push_back(ig.scratch.defined() ? ig.scratch.with_batch(n) : Tensor());
    }
}

void Network::init_params(uint64_t seed) {
  std::vector<Param*> ps = params();
  for (size_t k = 0; k < ps.size(); ++k) {
    const Param& p = *ps[k];
    const uint64_t key = derive_key(seed, kStreamInit, k);
    std::vector<double> v(static_cast<size_t>(p.value.numel()));
    for (size_t i = 0; i < v.size(); ++i) {
      switch (p.fill) {
        case Param::Fill::kZero: v[i] = 0; break;
        case Param::Fill::kOne: v[i] = 1; break;
        case Param::Fill::kHe: {  // Box-Muller on two uniforms per element
          double u1 = uniform_open(key, 2 * i), u2 = uniform_open(key, 2 * i + 1);
          v[i] = std::sqrt(2.0 / p.fan_in) * std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
          break;
        }
        case Param::Fill::kXavier: {
          double a = std::sqrt(6.0 / static_cast<double>(p.fan_in + p.fan_out));
          v[i] = a * (2 * uniform_open(key, i) - 1);
          break;
        }
      }
    }
    if (p.value.dtype() == DataType::kFloat64) {
      be_.upload(v.data(), p.value);
    } else {
      std::vector<float> f(v.begin(), v.end());
      be_.upload(f.data(), p.value);
    }
  }
}

void Network::forward(int64_t n, bool training, uint64_t seed, int64_t step) {
  set_batch(n);
  if (!images_.same_memory(act_[0])) be_.cast(images_.with_batch(n), act_view_[0]);
  StepContext ctx{be_, training, seed, step};
  std::vector<Tensor> x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (aliased_[i]) continue;
    x.clear();
    for (int v : inputs_[i]) x.push_back(act_view_[v]);
    layers_[i]->forward(ctx, x, act_view_[i + 1]);
  }
}

Tensor Network::logits() const { return act_view_.back(); }

const Tensor& Network::loss(int64_t step, const Tensor& metrics) {
  Tensor labels = labels_.with_batch(batch_), probs = probs_.with_batch(batch_);
  be_.softmax_cross_entropy_forward(act_view_.back(), labels, probs, loss_);
  if (metrics.defined()) be_.accumulate_metrics(loss_, probs, labels, step, metrics);
  return loss_;
}

void Network::backward(uint64_t seed, int64_t step, float loss_scale) {
  be_.softmax_cross_entropy_backward(probs_.with_batch(batch_), labels_.with_batch(batch_), loss_scale,
                                     grad_view_.back());
  StepContext ctx{be_, true, seed, step};
  std::vector<Tensor> x;
  for (size_t i = layers_.size(); i-- > 0;) {
    if (aliased_[i]) continue;
    x.clear();
    for (int v : inputs_[i]) x.push_back(act_view_[v]);
    layers_[i]->backward(ctx, x, act_view_[i + 1], grad_view_[i + 1], scratch_view_[i]);
    for (size_t j = 0; j < plan_[i].size(); ++j)
      if (plan_[i][j].accumulate) {
        const Tensor& g = grad_view_[inputs_[i][j]];
        be_.add(g, scratch_view_[i][j], g);
      }
  }
}

std::vector<Param*> Network::params() {
  std::vector<Param*> ps;
  for (auto& l : layers_)
    for (Param& p : l->params()) ps.push_back(&p);
  return ps;
}

int64_t Network::num_parameters() const {
  int64_t n = 0;
  for (const auto& l : layers_)
    for (const Param& p : l->params()) n += p.value.numel();
  return n;
}

std::vector<std::pair<std::string, Tensor>> Network::state() const {
  std::vector<std::pair<std::string, Tensor>> s;
  for (const auto& l : layers_) {
    for (const Param& p : l->params()) s.emplace_back(p.name, p.value);
    for (auto& b : l->buffers()) s.push_back(std::move(b));
  }
  return s;
}

}  // namespace kiln::train
