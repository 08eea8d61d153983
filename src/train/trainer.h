// The training loop: epochs of shuffled batches through forward, loss, backward and a solver step;
// metrics read from the device only every `log_every` steps (every step on the CPU, where reading
// is free); validation after each epoch; atomic checkpoints every `checkpoint_every` steps and at
// the end; resume from a checkpoint reaching the same weights as an uninterrupted run. A NaN or
// Inf loss stops training with an error naming the step. The library prints nothing: progress
// goes to a callback.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include "train/data.h"
#include "train/network.h"
#include "train/solver.h"

namespace kiln::train {

struct TrainConfig {
  int64_t epochs = 10;
  int64_t batch = 64;
  uint64_t seed = 1;
  SolverConfig solver;
  int64_t log_every = 50;        // steps per StepRecord (and per metrics read on a GPU)
  int64_t checkpoint_every = 0;  // steps; 0: no checkpoints
  std::filesystem::path checkpoint_dir;
  int64_t stop_after = 0;  // stop after this many global steps without a final checkpoint (0: never)
};

// Training metrics averaged over `log_every` steps.
struct StepRecord {
  int64_t step = 0;  // global steps done
  double epoch = 0;  // fractional epochs done
  double loss = 0, accuracy = 0, lr = 0;
};

struct EpochRecord {
  int64_t epoch = 0;  // from 1
  double train_loss = 0, train_accuracy = 0;
  double val_loss = 0, val_accuracy = 0;  // NaN without a validation part
  double lr = 0;                          // at the epoch's last step
  double seconds = 0, images_per_s = 0;   // of this run (not saved in checkpoints' sense of equality)
};

struct History {
  std::vector<StepRecord> steps;
  std::vector<EpochRecord> epochs;
};

struct Progress {
  int64_t epoch = 0, epochs = 0;                   // epoch from 1
  int64_t step_in_epoch = 0, steps_per_epoch = 0;  // steps done in this epoch
  int64_t global_step = 0, total_steps = 0;
  double loss = 0, accuracy = 0;  // running averages over the epoch so far
  double lr = 0, images_per_s = 0, eta_seconds = 0;
  const EpochRecord* epoch_end = nullptr;  // set once per epoch, after validation
  bool checkpoint_written = false;
};

struct Evaluation {
  double loss = 0, accuracy = 0;
  int64_t count = 0;
};

class Trainer {
 public:
  Trainer(const NetDescription& desc, const TrainingData& data, Backend& be, const TrainConfig& config);

  // Continues from the checkpoint in `dir`; throws if it was written by a run with another
  // network, data, batch, seed or solver.
  void resume(const std::filesystem::path& dir);
  // Trains to the last epoch (or to stop_after steps).
  void run(const std::function<void(const Progress&)>& progress = {});

  Network& network() { return *net_; }
  const History& history() const { return history_; }
  int64_t global_step() const { return global_step_; }
  // Loss and accuracy (inference mode) on samples `idx` of the training data.
  Evaluation evaluate(const std::vector<int64_t>& idx);

 private:
  void load_batch(const std::vector<int64_t>& order, int64_t first, int64_t n);
  // Reads the device metrics; throws if a step's loss was not finite.
  void read_metrics(double out[kMetricsSize]);
  void write_checkpoint();

  NetDescription desc_;
  const TrainingData& data_;
  Backend& be_;
  TrainConfig config_;
  std::unique_ptr<Network> net_;
  std::unique_ptr<Solver> solver_;
  Tensor metrics_;  // this epoch's running metrics (kMetricsSize doubles)
  int64_t steps_per_epoch_ = 0, total_steps_ = 0;
  int64_t global_step_ = 0;
  double interval_start_[kMetricsSize] = {0, 0, 0, -1};  // metrics at the last StepRecord
  History history_;
  std::vector<float> host_images_;
  std::vector<int32_t> host_labels_;
};

}  // namespace kiln::train
