// Data set layouts (see dataset.h): detection, CIFAR-10 binary batches and numpy arrays.
#include "data/dataset.h"

#include <algorithm>
#include <cstring>
#include <fstream>

#include "kiln/types.h"

namespace kiln::data {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kCifarSide = 32, kCifarRecord = 1 + 3 * kCifarSide * kCifarSide;
constexpr int32_t kMaxClasses = 1000;

bool has_idx(const fs::path& dir, const std::string& split) {
  for (const char* ext : {"", ".gz"})
    if (fs::exists(dir / (split + "-images-idx3-ubyte" + ext))) return true;
  return false;
}

// The folder holding the CIFAR-10 batches, or empty.
fs::path cifar_dir(const fs::path& dir) {
  for (const fs::path& d : {dir, dir / "cifar-10-batches-bin"})
    if (fs::exists(d / "data_batch_1.bin") || fs::exists(d / "test_batch.bin")) return d;
  return {};
}

void check_labels(const LabelledImages& set, const std::string& where) {
  for (size_t i = 0; i < set.labels.size(); ++i)
    if (set.labels[i] < 0 || set.labels[i] >= kMaxClasses)
      throw Error(where + ": label " + std::to_string(set.labels[i]) + " of sample " + std::to_string(i) +
                  " is outside [0, " + std::to_string(kMaxClasses) + ")");
}

LabelledImages finish(LabelledImages set, const std::string& where) {
  check_labels(set, where);
  if (set.labels.empty()) throw Error(where + ": the data set is empty");
  set.num_classes = 1 + *std::max_element(set.labels.begin(), set.labels.end());
  return set;
}

}  // namespace

Layout detect_layout(const fs::path& dir) {
  if (!fs::is_directory(dir)) throw Error("--data " + dir.string() + ": not a folder");
  if (has_idx(dir, "train") || has_idx(dir, "t10k")) return Layout::kIdx;
  if (!cifar_dir(dir).empty()) return Layout::kCifar10;
  if (fs::exists(dir / "x_train.npy") || fs::exists(dir / "x_test.npy")) return Layout::kNumpy;
  throw Error(dir.string() +
              ": no data set found; expected MNIST IDX files (train-images-idx3-ubyte[.gz], ...), CIFAR-10 "
              "binary batches (data_batch_1.bin ... test_batch.bin) or numpy arrays (x_train.npy, y_train.npy, "
              "x_test.npy, y_test.npy)");
}

std::string layout_name(Layout l) {
  switch (l) {
    case Layout::kIdx: return "IDX";
    case Layout::kCifar10: return "CIFAR-10 binary";
    case Layout::kNumpy: return "numpy";
  }
  return "?";
}

LabelledImages read_cifar10(const std::vector<fs::path>& files) {
  std::vector<std::vector<uint8_t>> contents;
  int64_t records = 0;
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) throw Error(f.string() + ": cannot open");
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.empty() || bytes.size() % kCifarRecord != 0)
      throw Error(f.string() + ": " + std::to_string(bytes.size()) + " bytes is not a whole number of CIFAR-10 " +
                  "records (1 label byte + 3x32x32 pixel bytes = 3073); the file is truncated or not a CIFAR-10 " +
                  "binary batch");
    for (size_t r = 0; r < bytes.size(); r += kCifarRecord)
      if (bytes[r] > 9)
        throw Error(f.string() + ": record " + std::to_string(r / kCifarRecord) + " has label " +
                    std::to_string(bytes[r]) + "; CIFAR-10 labels are 0 to 9 (is this CIFAR-100?)");
    records += static_cast<int64_t>(bytes.size()) / kCifarRecord;
    contents.push_back(std::move(bytes));
  }
  LabelledImages set;
  set.images.name = "cifar10";
  set.images.dtype = DataType::kFloat32;
  set.images.shape = {records, 3, kCifarSide, kCifarSide};
  set.images.data.resize(static_cast<size_t>(records * (kCifarRecord - 1)) * sizeof(float));
  auto* dst = reinterpret_cast<float*>(set.images.data.data());
  for (const std::vector<uint8_t>& bytes : contents)
    for (size_t r = 0; r < bytes.size(); r += kCifarRecord) {
      set.labels.push_back(bytes[r]);
      for (int64_t i = 1; i < kCifarRecord; ++i) *dst++ = bytes[r + i] / 255.0f;
    }
  return finish(std::move(set), files.empty() ? std::string("CIFAR-10") : files[0].parent_path().string());
}

LabelledImages read_npy_images(const fs::path& images, const fs::path& labels) {
  HostTensor x = read_tensor_file(images);
  HostTensor y = read_tensor_file(labels);
  const std::string wx = images.string(), wy = labels.string();
  if (x.shape.size() != 3 && x.shape.size() != 4)
    throw Error(wx + ": images must be [N, H, W], [N, C, H, W] or [N, H, W, C], got " + shape_string(x.shape));
  if (x.dtype != DataType::kUInt8 && x.dtype != DataType::kFloat32 && x.dtype != DataType::kFloat64)
    throw Error(wx + ": images must be uint8, float32 or float64, not " + std::string(dtype_name(x.dtype)));
  if (y.shape.size() != 1) throw Error(wy + ": labels must be [N], got " + shape_string(y.shape));
  if (y.shape[0] != x.shape[0])
    throw Error(wy + ": " + std::to_string(y.shape[0]) + " labels for " + std::to_string(x.shape[0]) + " images in " +
                wx + "; the files belong to different sets");
  std::vector<int64_t> lab;
  try {
    lab = y.view().to_int64();
  } catch (const Error&) {
    throw Error(wy + ": labels must be integers, not " + std::string(dtype_name(y.dtype)));
  }
  // Pixel i of the file as float (uint8 scaled to [0, 1]).
  auto pixel = [&x](int64_t i) -> float {
    switch (x.dtype) {
      case DataType::kUInt8: return x.data[i] / 255.0f;
      case DataType::kFloat32: return reinterpret_cast<const float*>(x.data.data())[i];
      default: return static_cast<float>(reinterpret_cast<const double*>(x.data.data())[i]);
    }
  };
  int64_t n = x.shape[0], c = 1, h = x.shape[1], w = x.shape[2];
  bool channels_last = false;
  if (x.shape.size() == 4) {
    const bool last_is_c = x.shape[3] == 1 || x.shape[3] == 3, second_is_c = x.shape[1] == 1 || x.shape[1] == 3;
    channels_last = last_is_c && !second_is_c;
    c = channels_last ? x.shape[3] : x.shape[1];
    h = channels_last ? x.shape[1] : x.shape[2];
    w = channels_last ? x.shape[2] : x.shape[3];
  }
  LabelledImages set;
  set.images.name = images.stem().string();
  set.images.dtype = DataType::kFloat32;
  set.images.shape = {n, c, h, w};
  set.images.data.resize(static_cast<size_t>(x.numel()) * sizeof(float));
  auto* dst = reinterpret_cast<float*>(set.images.data.data());
  const int64_t plane = h * w;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < plane; ++p)
        dst[(i * c + ch) * plane + p] = pixel(channels_last ? (i * plane + p) * c + ch : (i * c + ch) * plane + p);
  for (int64_t l : lab) {
    if (l < 0 || l >= kMaxClasses)
      throw Error(wy + ": label " + std::to_string(l) + " is outside [0, " + std::to_string(kMaxClasses) + ")");
    set.labels.push_back(static_cast<int32_t>(l));
  }
  return finish(std::move(set), wy);
}

LabelledImages load_labelled_images(const fs::path& dir, Split split) {
  switch (detect_layout(dir)) {
    case Layout::kIdx: {
      LabelledImages set = read_idx_images(find_idx_split(dir, split == Split::kTrain ? "train" : "t10k"));
      return finish(std::move(set), dir.string());
    }
    case Layout::kCifar10: {
      fs::path d = cifar_dir(dir);
      std::vector<fs::path> files;
      if (split == Split::kTest) {
        files.push_back(d / "test_batch.bin");
      } else {
        for (int i = 1; i <= 5; ++i)
          if (fs::exists(d / ("data_batch_" + std::to_string(i) + ".bin")))
            files.push_back(d / ("data_batch_" + std::to_string(i) + ".bin"));
      }
      for (const fs::path& f : files)
        if (!fs::exists(f)) throw Error(f.string() + ": missing from the CIFAR-10 folder");
      if (files.empty()) throw Error(d.string() + ": no data_batch_N.bin files for training");
      return read_cifar10(files);
    }
    case Layout::kNumpy: {
      const std::string s = split == Split::kTrain ? "train" : "test";
      fs::path x = dir / ("x_" + s + ".npy"), y = dir / ("y_" + s + ".npy");
      if (!fs::exists(x) || !fs::exists(y))
        throw Error(dir.string() + ": the " + s + " split needs x_" + s + ".npy and y_" + s + ".npy");
      return read_npy_images(x, y);
    }
  }
  throw Error("unknown layout");
}

}  // namespace kiln::data
