// Training data (see data.h). Statistics are summed sequentially in double, so they are the same
// on every run.
#include "train/data.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "train/random.h"

namespace kiln::train {

namespace {

constexpr uint64_t kSplitKey = 0x5EED;  // the validation split does not depend on the seed

void shuffle(std::vector<int64_t>& v, uint64_t key) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[random_bits(key, i) % i]);
}

}  // namespace

TrainingData::TrainingData(data::LabelledImages set, const DataOptions& options) {
  if (set.images.dtype != DataType::kFloat32 || set.images.shape.size() != 4)
    throw Error("training data must be float32 images [N, C, H, W]");
  shape_ = set.images.shape;
  int64_t n = shape_[0];
  if (options.limit > 0) n = std::min(n, options.limit);
  if (!(options.val_fraction >= 0 && options.val_fraction < 1))
    throw Error("the validation fraction must be in [0, 1), got " + std::to_string(options.val_fraction));
  shape_[0] = n;
  const int64_t sample = shape_[1] * shape_[2] * shape_[3];
  pixels_.resize(static_cast<size_t>(n * sample));
  std::memcpy(pixels_.data(), set.images.data.data(), pixels_.size() * sizeof(float));
  labels_.assign(set.labels.begin(), set.labels.begin() + n);
  classes_ = 1 + *std::max_element(labels_.begin(), labels_.end());
  if (classes_ < 2) throw Error("the data set has only one class");

  const int64_t n_val = static_cast<int64_t>(std::llround(static_cast<double>(n) * options.val_fraction));
  if (n - n_val < 2) throw Error("too few training samples (" + std::to_string(n - n_val) + ") after the split");
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  shuffle(order, derive_key(kSplitKey, kStreamSplit));
  val_.assign(order.end() - n_val, order.end());
  train_.assign(order.begin(), order.end() - n_val);
  std::sort(val_.begin(), val_.end());
  std::sort(train_.begin(), train_.end());

  XXH64_state_t* h = XXH64_createState();
  XXH64_reset(h, 0);
  XXH64_update(h, shape_.data(), shape_.size() * sizeof(int64_t));
  XXH64_update(h, pixels_.data(), pixels_.size() * sizeof(float));
  XXH64_update(h, labels_.data(), labels_.size() * sizeof(int32_t));
  XXH64_update(h, val_.data(), val_.size() * sizeof(int64_t));
  fingerprint_ = XXH64_digest(h);
  XXH64_freeState(h);

  // Per-channel statistics of the training part, then normalization of every sample with them.
  const int64_t c = shape_[1], plane = shape_[2] * shape_[3];
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0, sq = 0;
    for (int64_t i : train_) {
      const float* p = pixels_.data() + (i * c + ch) * plane;
      for (int64_t k = 0; k < plane; ++k) sum += p[k], sq += static_cast<double>(p[k]) * p[k];
    }
    const double count = static_cast<double>(train_.size() * plane);
    const double mean = sum / count, var = std::max(sq / count - mean * mean, 0.0);
    norm_.mean.push_back(static_cast<float>(mean));
    norm_.std.push_back(static_cast<float>(std::max(std::sqrt(var), 1e-6)));
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch) {
      float* p = pixels_.data() + (i * c + ch) * plane;
      const float m = norm_.mean[ch], inv = 1.0f / norm_.std[ch];
      for (int64_t k = 0; k < plane; ++k) p[k] = (p[k] - m) * inv;
    }
}

std::vector<int64_t> TrainingData::epoch_order(uint64_t seed, int64_t epoch) const {
  std::vector<int64_t> order = train_;
  shuffle(order, derive_key(seed, kStreamShuffle, static_cast<uint64_t>(epoch)));
  return order;
}

void TrainingData::gather(std::span<const int64_t> idx, float* images, int32_t* labels) const {
  const size_t sample = static_cast<size_t>(shape_[1] * shape_[2] * shape_[3]);
  for (size_t k = 0; k < idx.size(); ++k) {
    std::memcpy(images + k * sample, pixels_.data() + static_cast<size_t>(idx[k]) * sample, sample * sizeof(float));
    labels[k] = labels_[static_cast<size_t>(idx[k])];
  }
}

}  // namespace kiln::train
