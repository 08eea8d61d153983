// Calibration data: samples for the model's inputs, read from
//   - a folder of .npy files (sorted by name). A model with one input: each file holds one sample
//     (the input's shape without its leading batch dimension) or a stack of samples [K, ...].
//     A model with several inputs: each sub-folder holds NAME.npy for every input NAME. A file
//     labels.npy holds class labels (for --validate), not samples.
//   - an IDX image file (MNIST layout, e.g. train-images-idx3-ubyte.gz) or a folder holding one
//     (the train split preferred): uint8 [N, H, W] scaled to [0, 1], then mean/std.
//   - a folder of PNG or JPEG images, decoded and preprocessed (image.h) to the input's shape.
// A sample is one tensor per model input, shaped like the input without its batch dimension; the
// caller stacks them into batches. Every mismatch (empty folder, wrong shape or dtype, an
// unreadable file) is a kiln::Error naming the file and what the model expects.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/types.h"

namespace kiln::calib {

// One model input as the engine has it; shape[0] is the batch dimension.
struct InputSpec {
  std::string name;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  int64_t sample_bytes() const;  // bytes of one sample: the shape without shape[0]
};

class DataSource {
 public:
  virtual ~DataSource() = default;
  // Writes the next sample's bytes for input i to sample[i] (sample_bytes() each, already sized by
  // the caller). False when the data is exhausted.
  virtual bool next(std::span<const std::span<uint8_t>> sample) = 0;
  // Samples available, or -1 when only known after reading them all (.npy stacks).
  virtual int64_t size() const = 0;
  virtual std::string describe() const = 0;  // "folder x of 20 .npy files", for messages
  // Class labels of the samples in order, where the data has them (an IDX split's label file, a
  // labels.npy next to .npy files); empty otherwise.
  virtual std::vector<int64_t> labels() const { return {}; }
};

// Reads up to `batch` samples into buffers (one per input, resized to batch * sample_bytes()),
// stacked along the batch dimension; returns how many were read (fewer at the end of the data).
int64_t next_batch(DataSource& source, std::span<const InputSpec> inputs, int64_t batch,
                   std::vector<std::vector<uint8_t>>& buffers);

// Opens the data at `path` for a model with `inputs`; `preprocess` is --calib-preprocess (images and
// IDX; an empty string takes the defaults). An IDX folder gives its `idx_split` split if it has
// one, else the other ("train" for calibration, "t10k" for validation).
std::unique_ptr<DataSource> open_data_source(const std::filesystem::path& path, std::span<const InputSpec> inputs,
                                             const std::string& preprocess, const std::string& idx_split = "train");

}  // namespace kiln::calib
