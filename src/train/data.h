// Training data in host memory: the training split of a data set (data/dataset.h), normalized per
// channel with the training part's mean and standard deviation, and split into a training part and
// a held-out validation part. The split uses a fixed key, so every seed validates on the same
// samples; the training order of each epoch is a permutation drawn from (seed, epoch), so a resumed
// run sees the same batches.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "data/idx.h"
#include "train/tensor.h"

namespace kiln::train {

// Per-channel input normalization: x' = (x - mean) / std.
struct Normalization {
  std::vector<float> mean, std;
};

struct DataOptions {
  double val_fraction = 0.1;  // share of the samples held out for validation
  int64_t limit = 0;          // use only the first `limit` samples of the split (0: all)
};

class TrainingData {
 public:
  TrainingData(data::LabelledImages set, const DataOptions& options);

  Shape image_shape() const { return {shape_[1], shape_[2], shape_[3]}; }  // [C, H, W]
  int64_t classes() const { return classes_; }
  const Normalization& normalization() const { return norm_; }
  int64_t train_size() const { return static_cast<int64_t>(train_.size()); }
  int64_t val_size() const { return static_cast<int64_t>(val_.size()); }
  // Identifies the samples, labels and split (checkpoints refuse to resume on other data).
  uint64_t fingerprint() const { return fingerprint_; }

  // The training samples in the order of epoch `epoch`.
  std::vector<int64_t> epoch_order(uint64_t seed, int64_t epoch) const;
  const std::vector<int64_t>& validation() const { return val_; }
  // Copies samples `idx` (normalized) into images [n, C, H, W] and their labels into labels [n].
  void gather(std::span<const int64_t> idx, float* images, int32_t* labels) const;

 private:
  std::vector<int64_t> shape_;  // [N, C, H, W]
  std::vector<float> pixels_;   // normalized
  std::vector<int32_t> labels_;
  int64_t classes_ = 0;
  Normalization norm_;
  std::vector<int64_t> train_, val_;
  uint64_t fingerprint_ = 0;
};

}  // namespace kiln::train
