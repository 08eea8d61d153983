// Calibration data sources (see data_source.h). .npy files and images are read one at a time, so
// a large calibration set never sits in memory whole; an IDX file is read at once (MNIST-sized).
#include "calib/data_source.h"

#include <algorithm>
#include <cstring>

#include "calib/image.h"
#include "data/idx.h"
#include "graph/tensor_file.h"

namespace kiln::calib {

namespace {

namespace fs = std::filesystem;

std::string dims_string(std::span<const int64_t> d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

std::vector<int64_t> sample_shape(const InputSpec& in) { return {in.shape.begin() + 1, in.shape.end()}; }

std::string lower_ext(const fs::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return e;
}

bool is_image(const fs::path& p) {
  const std::string e = lower_ext(p);
  return e == ".png" || e == ".jpg" || e == ".jpeg";
}

std::vector<fs::path> sorted_entries(const fs::path& dir, bool (*keep)(const fs::directory_entry&)) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (keep(*it)) out.push_back(it->path());
  if (ec) throw Error(dir.string() + ": cannot list the calibration folder (" + ec.message() + ")");
  std::sort(out.begin(), out.end());
  return out;
}

// K samples of `in` from one array: its shape is the sample shape, or [K] + the sample shape.
int64_t samples_in(const HostTensor& t, const InputSpec& in, const fs::path& file) {
  const std::vector<int64_t> s = sample_shape(in);
  if (t.dtype != in.dtype)
    throw Error(file.string() + ": holds " + std::string(dtype_name(t.dtype)) + " data, but model input '" + in.name +
                "' takes " + std::string(dtype_name(in.dtype)) + "; convert the array (e.g. numpy's astype)");
  if (t.shape == s) return 1;
  if (t.shape.size() == s.size() + 1 && std::equal(s.begin(), s.end(), t.shape.begin() + 1)) return t.shape[0];
  throw Error(file.string() + ": array of shape " + dims_string(t.shape) + " does not fit model input '" + in.name +
              "': expected one sample " + dims_string(s) + " or a stack [K, " + dims_string(s).substr(1));
}

// labels.npy (integers, one label per sample); empty if there is none.
std::vector<int64_t> read_labels(const fs::path& file) {
  if (!fs::exists(file)) return {};
  HostTensor t = read_tensor_file(file);
  const bool integer = t.dtype != DataType::kFloat32 && t.dtype != DataType::kFloat64 &&
                       t.dtype != DataType::kFloat16 && t.dtype != DataType::kBFloat16 && t.dtype != DataType::kBool;
  if (t.shape.size() != 1 || !integer)
    throw Error(file.string() + ": labels must be a 1-D array of integers, got " + std::string(dtype_name(t.dtype)) +
                " " + dims_string(t.shape));
  const std::vector<double> v = t.view().to_double();
  return {v.begin(), v.end()};
}

// A folder of .npy files (one input) or of sub-folders with NAME.npy per input.
class NpySource : public DataSource {
 public:
  NpySource(fs::path dir, std::vector<fs::path> items, std::span<const InputSpec> inputs, bool folders)
      : dir_(std::move(dir)), items_(std::move(items)), inputs_(inputs.begin(), inputs.end()), folders_(folders) {}

  bool next(std::span<const std::span<uint8_t>> sample) override {
    while (pos_ >= count_) {
      if (item_ == items_.size()) return false;
      load(items_[item_++]);
    }
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const size_t n = static_cast<size_t>(inputs_[i].sample_bytes());
      std::memcpy(sample[i].data(), arrays_[i].data.data() + static_cast<size_t>(pos_) * n, n);
    }
    ++pos_;
    return true;
  }
  int64_t size() const override { return -1; }
  std::string describe() const override {
    return "folder " + dir_.string() + " (" + std::to_string(items_.size()) +
           (folders_ ? " sub-folders)" : " .npy files)");
  }
  std::vector<int64_t> labels() const override { return read_labels(dir_ / "labels.npy"); }

 private:
  void load(const fs::path& item) {
    arrays_.clear();
    count_ = -1;
    for (const InputSpec& in : inputs_) {
      const fs::path file = folders_ ? item / (in.name + ".npy") : item;
      if (folders_ && !fs::exists(file))
        throw Error(item.string() + ": no " + in.name + ".npy for model input '" + in.name +
                    "' (a model with several inputs needs NAME.npy for each input in every sub-folder)");
      arrays_.push_back(read_tensor_file(file));
      const int64_t k = samples_in(arrays_.back(), in, file);
      if (count_ >= 0 && k != count_)
        throw Error(file.string() + ": holds " + std::to_string(k) + " samples, the other inputs' files in " +
                    item.string() + " hold " + std::to_string(count_));
      count_ = k;
    }
    pos_ = 0;
  }

  fs::path dir_;
  std::vector<fs::path> items_;
  std::vector<InputSpec> inputs_;
  bool folders_;
  size_t item_ = 0;
  std::vector<HostTensor> arrays_;
  int64_t count_ = 0, pos_ = 0;
};

// Images [N, H, W] from an IDX file, scaled and normalized, as float samples of N * H * W values.
class IdxSource : public DataSource {
 public:
  IdxSource(const fs::path& file, const InputSpec& in, const Preprocess& p) : file_(file) {
    if (p.resize > 0)
      throw Error("--calib-preprocess resize= is for image folders, not IDX data (" + file.string() + ")");
    if (p.mean.size() != 1 || p.stdev.size() != 1)
      throw Error("--calib-preprocess: IDX images have one channel; give one mean and one std value");
    images_ = data::read_idx(file);
    if (images_.dtype != DataType::kUInt8 || images_.shape.size() != 3)
      throw Error(file.string() + ": expected uint8 images [N, H, W] in an IDX image file, got " +
                  std::string(dtype_name(images_.dtype)) + " " + dims_string(images_.shape));
    pixels_ = images_.shape[1] * images_.shape[2];
    const std::vector<int64_t> s = sample_shape(in);
    int64_t numel = 1;
    for (int64_t d : s) numel *= d;
    if (in.dtype != DataType::kFloat32 || numel != pixels_)
      throw Error(file.string() + ": holds " + std::to_string(images_.shape[1]) + "x" +
                  std::to_string(images_.shape[2]) + " images, but model input '" + in.name + "' takes " +
                  std::string(dtype_name(in.dtype)) + " " + dims_string(s) +
                  " per sample (IDX images need float32 with " + std::to_string(pixels_) + " values)");
    scale_ = p.scale;
    mean_ = p.mean[0];
    std_ = p.stdev[0];
  }
  bool next(std::span<const std::span<uint8_t>> sample) override {
    if (pos_ >= images_.shape[0]) return false;
    auto* out = reinterpret_cast<float*>(sample[0].data());
    const uint8_t* px = images_.data.data() + pos_ * pixels_;
    for (int64_t i = 0; i < pixels_; ++i) out[i] = static_cast<float>((px[i] * scale_ - mean_) / std_);
    ++pos_;
    return true;
  }
  int64_t size() const override { return images_.shape[0]; }
  std::string describe() const override { return "IDX file " + file_.string(); }
  // The split's label file: "...-images-idx3-ubyte[.gz]" -> "...-labels-idx1-ubyte[.gz]".
  std::vector<int64_t> labels() const override {
    std::string name = file_.filename().string();
    const size_t at = name.find("-images-idx3-ubyte");
    if (at == std::string::npos) return {};
    name.replace(at, 18, "-labels-idx1-ubyte");
    const fs::path f = file_.parent_path() / name;
    if (!fs::exists(f)) return {};
    const HostTensor t = data::read_idx(f);
    if (t.dtype != DataType::kUInt8 || t.shape.size() != 1 || t.shape[0] != images_.shape[0])
      throw Error(f.string() + ": expected " + std::to_string(images_.shape[0]) + " uint8 labels for " +
                  file_.string());
    return {t.data.begin(), t.data.end()};
  }

 private:
  fs::path file_;
  HostTensor images_;
  int64_t pixels_ = 0, pos_ = 0;
  double scale_ = 1, mean_ = 0, std_ = 1;
};

class ImageSource : public DataSource {
 public:
  ImageSource(fs::path dir, std::vector<fs::path> files, const InputSpec& in, const Preprocess& p)
      : dir_(std::move(dir)), files_(std::move(files)), p_(p), shape_(image_shape(sample_shape(in), p, in.name)) {
    if (in.dtype != DataType::kFloat32)
      throw Error("model input '" + in.name + "' takes " + std::string(dtype_name(in.dtype)) +
                  "; calibration images are given to float32 inputs only");
  }
  bool next(std::span<const std::span<uint8_t>> sample) override {
    if (pos_ >= files_.size()) return false;
    const Image img = decode_image(files_[pos_++]);
    preprocess_image(img, p_, shape_, reinterpret_cast<float*>(sample[0].data()));
    return true;
  }
  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  std::string describe() const override {
    return "folder " + dir_.string() + " (" + std::to_string(files_.size()) + " images)";
  }

 private:
  fs::path dir_;
  std::vector<fs::path> files_;
  Preprocess p_;
  ImageShape shape_;
  size_t pos_ = 0;
};

bool is_idx_name(const fs::path& p) { return p.filename().string().find("-idx") != std::string::npos; }

std::unique_ptr<DataSource> open_idx(const fs::path& file, std::span<const InputSpec> inputs, const Preprocess& p) {
  if (inputs.size() != 1)
    throw Error(file.string() + ": IDX images calibrate models with one input; this one has " +
                std::to_string(inputs.size()));
  return std::make_unique<IdxSource>(file, inputs[0], p);
}

}  // namespace

int64_t next_batch(DataSource& source, std::span<const InputSpec> inputs, int64_t batch,
                   std::vector<std::vector<uint8_t>>& buffers) {
  buffers.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) buffers[i].resize(static_cast<size_t>(inputs[i].sample_bytes() * batch));
  std::vector<std::span<uint8_t>> sample(inputs.size());
  for (int64_t got = 0; got < batch; ++got) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto n = static_cast<size_t>(inputs[i].sample_bytes());
      sample[i] = std::span<uint8_t>(buffers[i].data() + static_cast<size_t>(got) * n, n);
    }
    if (!source.next(sample)) return got;
  }
  return batch;
}

int64_t InputSpec::sample_bytes() const {
  int64_t n = static_cast<int64_t>(dtype_size(dtype));
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

std::unique_ptr<DataSource> open_data_source(const fs::path& path, std::span<const InputSpec> inputs,
                                             const std::string& preprocess, const std::string& idx_split) {
  for (const InputSpec& in : inputs)
    if (in.shape.empty())
      throw Error("model input '" + in.name + "' is a scalar; calibration needs a leading batch dimension");
  const Preprocess p = parse_preprocess(preprocess);
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    if (is_idx_name(path)) return open_idx(path, inputs, p);
    throw Error(path.string() +
                ": --calib takes a folder (of .npy files or images) or an IDX image file "
                "(e.g. train-images-idx3-ubyte.gz)");
  }
  if (!fs::is_directory(path, ec)) throw Error(path.string() + ": no such calibration folder or file");

  for (const std::string& split : {idx_split, std::string(idx_split == "train" ? "t10k" : "train")})
    for (const char* ext : {"", ".gz"}) {
      const fs::path f = path / (split + "-images-idx3-ubyte" + ext);
      if (fs::exists(f)) return open_idx(f, inputs, p);
    }
  std::vector<fs::path> npy = sorted_entries(path, [](const fs::directory_entry& e) {
    return e.is_regular_file() && lower_ext(e.path()) == ".npy" && e.path().filename() != "labels.npy";
  });
  std::vector<fs::path> images =
      sorted_entries(path, [](const fs::directory_entry& e) { return e.is_regular_file() && is_image(e.path()); });
  std::vector<fs::path> dirs = sorted_entries(path, [](const fs::directory_entry& e) { return e.is_directory(); });
  if (inputs.size() > 1) {
    if (dirs.empty())
      throw Error(path.string() + ": the model has " + std::to_string(inputs.size()) +
                  " inputs; calibration data for it is a folder of sub-folders, each with NAME.npy for every input");
    return std::make_unique<NpySource>(path, std::move(dirs), inputs, true);
  }
  if (!npy.empty() && !images.empty())
    throw Error(path.string() + ": holds both .npy files and images; put the calibration data of one kind in a folder");
  if (!npy.empty()) return std::make_unique<NpySource>(path, std::move(npy), inputs, false);
  if (!images.empty()) return std::make_unique<ImageSource>(path, std::move(images), inputs[0], p);
  throw Error(path.string() +
              ": no calibration data in this folder (expected .npy files, PNG/JPEG images or an "
              "MNIST-layout IDX file)");
}

}  // namespace kiln::calib
