// The training loop, checkpoints and resume (see trainer.h). Everything that decides the weights
// is a function of (seed, global step): the batch order (seed, epoch), dropout masks (seed, step),
// the learning rate and Adam's step count; a checkpoint therefore needs only the tensors, the
// global step and the running metrics to continue bit for bit.
#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "train/checkpoint.h"

namespace kiln::train {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string short_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// What must match for a checkpoint to continue this run.
json run_signature(const NetDescription& desc, const TrainingData& data, const TrainConfig& c) {
  const SolverConfig& s = c.solver;
  json sig = {{"net", desc.text},
              {"data", data.fingerprint()},
              {"batch", c.batch},
              {"seed", c.seed},
              {"solver",
               {{"kind", solver_name(s.kind)},
                {"lr", s.lr},
                {"momentum", s.momentum},
                {"weight_decay", s.weight_decay},
                {"beta1", s.beta1},
                {"beta2", s.beta2},
                {"eps", s.eps},
                {"schedule", schedule_name(s.schedule)},
                {"warmup_steps", s.warmup_steps},
                {"step_size", s.step_size},
                {"gamma", s.gamma},
                {"min_lr", s.min_lr}}}};
  // A cosine schedule spans the whole run, so its length must match too; other schedules let a
  // resumed run add epochs.
  if (s.schedule == ScheduleKind::kCosine) sig["solver"]["cosine_steps"] = c.epochs * (data.train_size() / c.batch);
  return sig;
}

// JSON has no NaN: nlohmann writes null, which reads back as NaN here.
double number(const json& j) { return j.is_null() ? std::nan("") : j.get<double>(); }

json to_json(const History& h) {
  json steps = json::array(), epochs = json::array();
  for (const StepRecord& s : h.steps) steps.push_back({s.step, s.epoch, s.loss, s.accuracy, s.lr});
  for (const EpochRecord& e : h.epochs)
    epochs.push_back(
        {e.epoch, e.train_loss, e.train_accuracy, e.val_loss, e.val_accuracy, e.lr, e.seconds, e.images_per_s});
  return {{"steps", steps}, {"epochs", epochs}};
}

History history_from_json(const json& j) {
  History h;
  for (const json& s : j.at("steps"))
    h.steps.push_back({s.at(0).get<int64_t>(), number(s.at(1)), number(s.at(2)), number(s.at(3)), number(s.at(4))});
  for (const json& e : j.at("epochs"))
    h.epochs.push_back({e.at(0).get<int64_t>(), number(e.at(1)), number(e.at(2)), number(e.at(3)), number(e.at(4)),
                        number(e.at(5)), number(e.at(6)), number(e.at(7))});
  return h;
}

// The differences between two run signatures, as "key: checkpoint vs this run" lines.
std::string differences(const json& saved, const json& now, const std::string& prefix = "") {
  std::string out;
  for (auto it = now.begin(); it != now.end(); ++it) {
    const std::string key = prefix + it.key();
    if (!saved.contains(it.key())) {
      out += "  " + key + ": missing in the checkpoint\n";
    } else if (it->is_object()) {
      out += differences(saved.at(it.key()), *it, key + ".");
    } else if (saved.at(it.key()) != *it) {
      if (it.key() == "net")
        out += "  the network description differs\n";
      else if (it.key() == "data")
        out += "  the data differs (other files, --limit or --val-split)\n";
      else
        out += "  " + key + ": " + saved.at(it.key()).dump() + " in the checkpoint, " + it->dump() + " now\n";
    }
  }
  return out;
}

}  // namespace

Trainer::Trainer(const NetDescription& desc, const TrainingData& data, Backend& be, const TrainConfig& config)
    : desc_(desc), data_(data), be_(be), config_(config) {
  if (config.batch < 1) throw Error("--batch must be at least 1");
  if (config.epochs < 1) throw Error("--epochs must be at least 1");
  if (config.batch > data.train_size())
    throw Error("--batch " + std::to_string(config.batch) + " is larger than the training set (" +
                std::to_string(data.train_size()) + " samples)");
  if (config.log_every < 1) throw Error("the logging interval must be at least 1 step");
  if (config.checkpoint_every > 0 && config.checkpoint_dir.empty())
    throw Error("--checkpoint-every needs --checkpoint DIR");
  net_ = std::make_unique<Network>(desc, NetworkConfig{data.image_shape(), data.classes(), config.batch}, be,
                                   be.compute_dtype());
  net_->init_params(config.seed);
  solver_ = std::make_unique<Solver>(config.solver, be, net_->params());
  metrics_ = be.alloc(DataType::kFloat64, {kMetricsSize});
  be.upload(interval_start_, metrics_);
  steps_per_epoch_ = data.train_size() / config.batch;  // the last partial batch is left out
  total_steps_ = steps_per_epoch_ * config.epochs;
  const size_t sample = static_cast<size_t>(numel_of(data.image_shape()));
  host_images_.resize(sample * static_cast<size_t>(config.batch));
  host_labels_.resize(static_cast<size_t>(config.batch));
}

void Trainer::load_batch(const std::vector<int64_t>& order, int64_t first, int64_t n) {
  data_.gather(std::span<const int64_t>(order).subspan(static_cast<size_t>(first), static_cast<size_t>(n)),
               host_images_.data(), host_labels_.data());
  be_.upload(host_images_.data(), net_->images().with_batch(n));
  be_.upload(host_labels_.data(), net_->labels().with_batch(n));
}

void Trainer::read_metrics(double out[kMetricsSize]) {
  be_.download(metrics_, out);
  if (out[kFirstBadStep] >= 0) {
    const int64_t step = static_cast<int64_t>(out[kFirstBadStep]);
    throw Error("the training loss became NaN or Inf at step " + std::to_string(step + 1) + " (epoch " +
                std::to_string(step / steps_per_epoch_ + 1) + ", batch " + std::to_string(step % steps_per_epoch_ + 1) +
                " of " + std::to_string(steps_per_epoch_) + ") with learning rate " +
                short_number(learning_rate(config_.solver, step, total_steps_)) +
                "; training stopped. Lower --lr, add --warmup, or check the data");
  }
}

Evaluation Trainer::evaluate(const std::vector<int64_t>& idx) {
  Evaluation e;
  if (idx.empty()) return e;
  Tensor m = be_.alloc(DataType::kFloat64, {kMetricsSize});
  const double zero[kMetricsSize] = {0, 0, 0, -1};
  be_.upload(zero, m);
  const int64_t n = static_cast<int64_t>(idx.size());
  for (int64_t first = 0; first < n; first += config_.batch) {
    const int64_t k = std::min(config_.batch, n - first);
    load_batch(idx, first, k);
    net_->forward(k, false);
    net_->loss(0, m);
  }
  double v[kMetricsSize];
  be_.download(m, v);
  e.count = static_cast<int64_t>(v[kCount]);
  e.loss = v[kLossSum] / v[kCount];
  e.accuracy = v[kCorrect] / v[kCount];
  return e;
}

void Trainer::run(const std::function<void(const Progress&)>& progress) {
  const Clock::time_point start = Clock::now();
  const int64_t first_step = global_step_;
  const bool read_every_step = be_.device() == Device::kCpu;  // reading host memory costs nothing
  for (int64_t e = global_step_ / steps_per_epoch_; e < config_.epochs; ++e) {
    const std::vector<int64_t> order = data_.epoch_order(config_.seed, e);
    const int64_t first = global_step_ - e * steps_per_epoch_;
    if (first == 0) {
      const double zero[kMetricsSize] = {0, 0, 0, -1};
      be_.upload(zero, metrics_);
      std::copy(zero, zero + kMetricsSize, interval_start_);
    }
    const Clock::time_point epoch_start = Clock::now();
    for (int64_t s = first; s < steps_per_epoch_; ++s) {
      load_batch(order, s * config_.batch, config_.batch);
      const double lr = learning_rate(config_.solver, global_step_, total_steps_);
      net_->forward(config_.batch, true, config_.seed, global_step_);
      net_->loss(global_step_, metrics_);
      net_->backward(config_.seed, global_step_);
      solver_->step(global_step_, lr);
      ++global_step_;

      const bool log = global_step_ % config_.log_every == 0, epoch_end = s + 1 == steps_per_epoch_;
      const bool checkpoint = config_.checkpoint_every > 0 && global_step_ % config_.checkpoint_every == 0;
      const bool stop = config_.stop_after > 0 && global_step_ >= config_.stop_after;
      if (!(read_every_step || log || epoch_end || checkpoint || stop)) continue;
      double m[kMetricsSize];
      read_metrics(m);
      if (log) {
        const double count = m[kCount] - interval_start_[kCount];
        history_.steps.push_back({global_step_, static_cast<double>(global_step_) / steps_per_epoch_,
                                  (m[kLossSum] - interval_start_[kLossSum]) / count,
                                  (m[kCorrect] - interval_start_[kCorrect]) / count, lr});
        std::copy(m, m + kMetricsSize, interval_start_);
      }
      Progress p;
      p.epoch = e + 1;
      p.epochs = config_.epochs;
      p.step_in_epoch = s + 1;
      p.steps_per_epoch = steps_per_epoch_;
      p.global_step = global_step_;
      p.total_steps = total_steps_;
      p.loss = m[kLossSum] / m[kCount];
      p.accuracy = m[kCorrect] / m[kCount];
      p.lr = lr;
      const double epoch_seconds = seconds_since(epoch_start);
      p.images_per_s = static_cast<double>((s + 1 - first) * config_.batch) / std::max(epoch_seconds, 1e-9);
      const double rate = static_cast<double>(global_step_ - first_step) / std::max(seconds_since(start), 1e-9);
      p.eta_seconds = static_cast<double>(total_steps_ - global_step_) / rate;
      EpochRecord record;
      if (epoch_end) {
        record.epoch = e + 1;
        record.train_loss = p.loss;
        record.train_accuracy = p.accuracy;
        record.lr = lr;
        record.seconds = epoch_seconds;
        record.images_per_s = p.images_per_s;
        record.val_loss = record.val_accuracy = std::nan("");
        if (data_.val_size() > 0) {
          Evaluation v = evaluate(data_.validation());
          record.val_loss = v.loss;
          record.val_accuracy = v.accuracy;
        }
        history_.epochs.push_back(record);
        p.epoch_end = &history_.epochs.back();
      }
      // After the epoch's record, so that a checkpoint at an epoch's end includes it.
      if (checkpoint) write_checkpoint();
      p.checkpoint_written = checkpoint;
      if (progress) progress(p);
      if (stop) return;
    }
  }
  if (config_.checkpoint_every > 0) write_checkpoint();
}

void Trainer::write_checkpoint() {
  double m[kMetricsSize];
  read_metrics(m);  // never save a run whose loss went bad
  json header = {{"format", "kiln-train-checkpoint"},
                 {"run", run_signature(desc_, data_, config_)},
                 {"epochs", config_.epochs},
                 {"global_step", global_step_},
                 {"metrics", std::vector<double>(m, m + kMetricsSize)},
                 {"interval_start", std::vector<double>(interval_start_, interval_start_ + kMetricsSize)},
                 {"history", to_json(history_)},
                 {"normalization", {{"mean", data_.normalization().mean}, {"std", data_.normalization().std}}}};
  std::vector<std::pair<std::string, Tensor>> tensors = net_->state();
  for (auto& t : solver_->state()) tensors.push_back(std::move(t));
  train::write_checkpoint(config_.checkpoint_dir, header.dump(), be_, tensors);
}

void Trainer::resume(const std::filesystem::path& dir) {
  const std::string where = checkpoint_path(dir).string();
  Checkpoint c = read_checkpoint(dir);
  json header;
  try {
    header = json::parse(c.header);
    if (header.at("format") != "kiln-train-checkpoint") throw Error("not a training checkpoint");
    const std::string diff = differences(header.at("run"), run_signature(desc_, data_, config_));
    if (!diff.empty())
      throw Error("the checkpoint belongs to another run:\n" + diff +
                  "resume with the same network, data, --batch, --seed and solver options");
    const int64_t step = header.at("global_step").get<int64_t>();
    if (step > total_steps_)
      throw Error("the checkpoint is at step " + std::to_string(step) + ", past the " + std::to_string(total_steps_) +
                  " steps of " + std::to_string(config_.epochs) + " epochs; give more --epochs");
    std::vector<std::pair<std::string, Tensor>> tensors = net_->state();
    for (auto& t : solver_->state()) tensors.push_back(std::move(t));
    load_tensors(c, be_, tensors, where);
    const std::vector<double> m = header.at("metrics").get<std::vector<double>>();
    const std::vector<double> interval = header.at("interval_start").get<std::vector<double>>();
    if (m.size() != kMetricsSize || interval.size() != kMetricsSize) throw Error("bad metrics");
    be_.upload(m.data(), metrics_);
    std::copy(interval.begin(), interval.end(), interval_start_);
    history_ = history_from_json(header.at("history"));
    global_step_ = step;
  } catch (const json::exception& e) {
    throw Error(where + ": damaged checkpoint header (" + e.what() + ")");
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
}

}  // namespace kiln::train
