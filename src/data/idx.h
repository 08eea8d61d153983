// IDX files, the layout of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/): a magic
// number (two zero bytes, an element-type code, the number of dimensions), big-endian int32
// dimensions, then big-endian elements. Files may be gzip-compressed (".gz"), as Debian ships them.
// Files are untrusted: every malformed one becomes a kiln::Error naming the file, and nothing is
// allocated before the size in the header has been checked against the bytes present.
#pragma once

#include <filesystem>
#include <string>

#include "graph/tensor_file.h"

namespace kiln::data {

// Reads an IDX file into a host tensor (uint8, int8, int16, int32, float32 or float64), converted
// to little-endian. The tensor's name is the file's stem.
HostTensor read_idx(const std::filesystem::path& path);

// The image and label files of one split ("train" or "t10k") in an MNIST-layout folder:
// SPLIT-images-idx3-ubyte and SPLIT-labels-idx1-ubyte, each with or without ".gz".
struct IdxSplit {
  std::filesystem::path images;
  std::filesystem::path labels;
};
IdxSplit find_idx_split(const std::filesystem::path& dir, const std::string& split);

// A labelled image set: images as float32 [N, 1, H, W] scaled to [0, 1], labels as int32 [N].
struct LabelledImages {
  HostTensor images;
  std::vector<int32_t> labels;
  int num_classes = 0;  // 1 + the largest label
};

// Reads an IDX image file (uint8 [N, H, W]) and its label file (uint8 [N]); the counts must match.
LabelledImages read_idx_images(const IdxSplit& split);

}  // namespace kiln::data
