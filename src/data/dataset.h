// Labelled image sets for training and evaluation, read from a folder in one of three layouts:
//   - MNIST IDX: SPLIT-images-idx3-ubyte and SPLIT-labels-idx1-ubyte, optionally gzipped, with
//     SPLIT "train" or "t10k" (Fashion-MNIST, MNIST; idx.h);
//   - CIFAR-10 binary: data_batch_1.bin .. data_batch_5.bin and test_batch.bin, in the folder or in
//     its cifar-10-batches-bin subfolder; records of 1 label byte and 3x32x32 pixel bytes;
//   - numpy: x_train.npy / y_train.npy and x_test.npy / y_test.npy. Images are uint8 (scaled to
//     [0, 1]) or float32/float64 (taken as they are), [N, H, W], [N, C, H, W] or [N, H, W, C] (taken
//     for channels-last when the last dimension is 1 or 3 and the second is neither); labels are
//     any integer type, [N].
// Every malformed file gives a kiln::Error naming the file and what is wrong.
#pragma once

#include <filesystem>
#include <string>

#include "data/idx.h"

namespace kiln::data {

enum class Split { kTrain, kTest };
enum class Layout { kIdx, kCifar10, kNumpy };

// Which layout `dir` holds; throws naming the three layouts if none.
Layout detect_layout(const std::filesystem::path& dir);
std::string layout_name(Layout l);

// Reads one split. Labels must lie in [0, 1000); num_classes is 1 + the largest label.
LabelledImages load_labelled_images(const std::filesystem::path& dir, Split split);

// CIFAR-10 binary batch files, concatenated in order.
LabelledImages read_cifar10(const std::vector<std::filesystem::path>& files);

// x and y .npy files as described above.
LabelledImages read_npy_images(const std::filesystem::path& images, const std::filesystem::path& labels);

}  // namespace kiln::data
