// Training data: the three layouts (IDX on Debian's Fashion-MNIST, CIFAR-10 binary and numpy files
// written here), malformed data sets with clear errors, the validation split, normalization and
// per-epoch shuffling; learning-rate schedules; He and Xavier initialization from a seed.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <numeric>
#include <set>

#include "data/dataset.h"
#include "train/cpu_backend.h"
#include "train/data.h"
#include "train/network.h"
#include "train/solver.h"

namespace kiln::train {
namespace {

namespace fs = std::filesystem;
using data::Split;

const fs::path kFashion = "/usr/share/datasets/fashion-mnist";

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("kiln_train_data_test_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write_bytes(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<uint8_t> cifar_records(int n, uint8_t first_label) {
  std::vector<uint8_t> b;
  for (int r = 0; r < n; ++r) {
    b.push_back(static_cast<uint8_t>((first_label + r) % 10));
    for (int i = 0; i < 3072; ++i) b.push_back(static_cast<uint8_t>((r + i) % 256));
  }
  return b;
}

template <class T>
void write_npy(const fs::path& p, DataType dt, std::vector<int64_t> shape, const std::vector<T>& v) {
  HostTensor t;
  t.dtype = dt;
  t.shape = std::move(shape);
  t.data.resize(v.size() * sizeof(T));
  std::memcpy(t.data.data(), v.data(), t.data.size());
  write_tensor_file(p, t);
}

TEST(TrainData, FashionMnistThroughTheLayoutDetection) {
  if (!fs::exists(kFashion)) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  EXPECT_EQ(data::detect_layout(kFashion), data::Layout::kIdx);
  data::LabelledImages test = data::load_labelled_images(kFashion, Split::kTest);
  EXPECT_EQ(test.images.shape, (std::vector<int64_t>{10000, 1, 28, 28}));
  EXPECT_EQ(test.num_classes, 10);
}

TEST(TrainData, Cifar10Batches) {
  fs::path d = fresh_dir("cifar") / "cifar-10-batches-bin";
  fs::create_directories(d);
  write_bytes(d / "data_batch_1.bin", cifar_records(3, 0));
  write_bytes(d / "data_batch_2.bin", cifar_records(2, 7));
  write_bytes(d / "test_batch.bin", cifar_records(4, 9));
  fs::path root = d.parent_path();
  EXPECT_EQ(data::detect_layout(root), data::Layout::kCifar10);
  data::LabelledImages train = data::load_labelled_images(root, Split::kTrain);
  EXPECT_EQ(train.images.shape, (std::vector<int64_t>{5, 3, 32, 32}));
  EXPECT_EQ(train.labels, (std::vector<int32_t>{0, 1, 2, 7, 8}));
  EXPECT_EQ(train.num_classes, 9);
  const float* px = reinterpret_cast<const float*>(train.images.data.data());
  EXPECT_EQ(px[3072 + 5], 6 / 255.0f);  // record 1, pixel 5 = (1 + 5) / 255
  EXPECT_EQ(data::load_labelled_images(root, Split::kTest).labels.size(), 4u);

  std::vector<uint8_t> cut = cifar_records(2, 0);
  cut.resize(cut.size() - 100);
  write_bytes(d / "data_batch_2.bin", cut);
  std::string e = error_of([&] { data::load_labelled_images(root, Split::kTrain); });
  EXPECT_NE(e.find("data_batch_2.bin"), std::string::npos) << e;
  EXPECT_NE(e.find("3073"), std::string::npos) << e;
  std::vector<uint8_t> bad = cifar_records(1, 0);
  bad[0] = 42;
  write_bytes(d / "data_batch_2.bin", bad);
  e = error_of([&] { data::load_labelled_images(root, Split::kTrain); });
  EXPECT_NE(e.find("label 42"), std::string::npos) << e;
  fs::remove(d / "test_batch.bin");
  e = error_of([&] { data::load_labelled_images(root, Split::kTest); });
  EXPECT_NE(e.find("test_batch.bin"), std::string::npos) << e;
}

TEST(TrainData, NumpyArrays) {
  fs::path d = fresh_dir("npy");
  // uint8 [N, H, W] with int64 labels.
  write_npy<uint8_t>(d / "x_train.npy", DataType::kUInt8, {2, 2, 3}, {0, 51, 102, 153, 204, 255, 1, 2, 3, 4, 5, 6});
  write_npy<int64_t>(d / "y_train.npy", DataType::kInt64, {2}, {3, 1});
  data::LabelledImages s = data::load_labelled_images(d, Split::kTrain);
  EXPECT_EQ(s.images.shape, (std::vector<int64_t>{2, 1, 2, 3}));
  EXPECT_EQ(reinterpret_cast<const float*>(s.images.data.data())[1], 0.2f);
  EXPECT_EQ(s.num_classes, 4);
  // float32 channels-last [N, H, W, 3] becomes [N, 3, H, W].
  std::vector<float> hwc(2 * 2 * 2 * 3);
  std::iota(hwc.begin(), hwc.end(), 0.0f);
  write_npy<float>(d / "x_test.npy", DataType::kFloat32, {2, 2, 2, 3}, hwc);
  write_npy<int32_t>(d / "y_test.npy", DataType::kInt32, {2}, {0, 1});
  s = data::load_labelled_images(d, Split::kTest);
  EXPECT_EQ(s.images.shape, (std::vector<int64_t>{2, 3, 2, 2}));
  const float* px = reinterpret_cast<const float*>(s.images.data.data());
  EXPECT_EQ(px[4], 1.0f);  // channel 1, pixel 0 of sample 0 = hwc[1]

  write_npy<int32_t>(d / "y_test.npy", DataType::kInt32, {3}, {0, 1, 1});
  std::string e = error_of([&] { data::load_labelled_images(d, Split::kTest); });
  EXPECT_NE(e.find("3 labels for 2 images"), std::string::npos) << e;
  write_npy<float>(d / "x_test.npy", DataType::kFloat32, {2, 12}, std::vector<float>(24));
  e = error_of([&] { data::load_labelled_images(d, Split::kTest); });
  EXPECT_NE(e.find("x_test.npy: images must be"), std::string::npos) << e;
  write_npy<float>(d / "y_train.npy", DataType::kFloat32, {2}, {1, 0});
  e = error_of([&] { data::load_labelled_images(d, Split::kTrain); });
  EXPECT_NE(e.find("labels must be integers"), std::string::npos) << e;
}

// The errors the issue names: bad IDX magic, label count mismatch, wrong image size; and folders
// with no data set.
TEST(TrainData, MalformedIdxDataSets) {
  fs::path d = fresh_dir("idx");
  auto idx = [](uint8_t dims, std::vector<uint32_t> shape, size_t payload, uint8_t magic0 = 0) {
    std::vector<uint8_t> b = {magic0, 0, 0x08, dims};
    for (uint32_t s : shape) b.insert(b.end(), {uint8_t(s >> 24), uint8_t(s >> 16), uint8_t(s >> 8), uint8_t(s)});
    b.resize(b.size() + payload, 1);
    return b;
  };
  write_bytes(d / "train-images-idx3-ubyte", idx(3, {4, 5, 5}, 100, 0x1F));
  write_bytes(d / "train-labels-idx1-ubyte", idx(1, {4}, 4));
  std::string e = error_of([&] { data::load_labelled_images(d, Split::kTrain); });
  EXPECT_NE(e.find("train-images-idx3-ubyte: not an IDX file (bad magic number"), std::string::npos) << e;

  write_bytes(d / "train-images-idx3-ubyte", idx(3, {4, 5, 5}, 100));
  write_bytes(d / "train-labels-idx1-ubyte", idx(1, {3}, 3));
  e = error_of([&] { data::load_labelled_images(d, Split::kTrain); });
  EXPECT_NE(e.find("3 labels for 4 images"), std::string::npos) << e;

  // The header says 5x5 images, the file holds 4x4 ones.
  write_bytes(d / "train-images-idx3-ubyte", idx(3, {4, 5, 5}, 64));
  write_bytes(d / "train-labels-idx1-ubyte", idx(1, {4}, 4));
  e = error_of([&] { data::load_labelled_images(d, Split::kTrain); });
  EXPECT_NE(e.find("train-images-idx3-ubyte: IDX header says 100 bytes of data, the file has 64"), std::string::npos)
      << e;

  e = error_of([&] { data::detect_layout(fresh_dir("empty")); });
  EXPECT_NE(e.find("no data set found"), std::string::npos) << e;
}

data::LabelledImages synthetic(int64_t n, int64_t c) {
  data::LabelledImages s;
  s.images.dtype = DataType::kFloat32;
  s.images.shape = {n, c, 2, 2};
  s.images.data.resize(static_cast<size_t>(n * c * 4) * sizeof(float));
  auto* px = reinterpret_cast<float*>(s.images.data.data());
  for (int64_t i = 0; i < n * c * 4; ++i) px[i] = static_cast<float>((i * 37) % 101) / 50.0f + (i % c);
  for (int64_t i = 0; i < n; ++i) s.labels.push_back(static_cast<int32_t>(i % 3));
  s.num_classes = 3;
  return s;
}

TEST(TrainData, SplitNormalizationAndShuffling) {
  TrainingData d(synthetic(200, 2), {0.25, 0});
  EXPECT_EQ(d.train_size(), 150);
  EXPECT_EQ(d.val_size(), 50);
  EXPECT_EQ(d.classes(), 3);
  EXPECT_EQ(d.image_shape(), (Shape{2, 2, 2}));
  // Train and validation parts are disjoint and cover the set.
  std::vector<int64_t> order = d.epoch_order(1, 0);
  std::set<int64_t> all(order.begin(), order.end());
  for (int64_t v : d.validation()) EXPECT_TRUE(all.insert(v).second);
  EXPECT_EQ(all.size(), 200u);
  // Normalized training pixels have mean 0 and deviation 1 per channel.
  std::vector<float> px(150 * 8);
  std::vector<int32_t> labels(150);
  d.gather(order, px.data(), labels.data());
  for (int ch = 0; ch < 2; ++ch) {
    double sum = 0, sq = 0;
    for (int i = 0; i < 150; ++i)
      for (int k = 0; k < 4; ++k)
        sum += px[(i * 2 + ch) * 4 + k], sq += px[(i * 2 + ch) * 4 + k] * px[(i * 2 + ch) * 4 + k];
    EXPECT_NEAR(sum / 600, 0, 1e-5);
    EXPECT_NEAR(sq / 600, 1, 1e-4);
  }
  // Orders: a function of (seed, epoch).
  EXPECT_EQ(d.epoch_order(1, 0), order);
  EXPECT_NE(d.epoch_order(1, 1), order);
  EXPECT_NE(d.epoch_order(2, 0), order);
  // The split does not depend on the seed; a limit changes the set (and its fingerprint).
  TrainingData limited(synthetic(200, 2), {0.25, 100});
  EXPECT_EQ(limited.train_size() + limited.val_size(), 100);
  EXPECT_NE(limited.fingerprint(), d.fingerprint());
  EXPECT_EQ(TrainingData(synthetic(200, 2), {0.25, 0}).fingerprint(), d.fingerprint());
  EXPECT_NE(error_of([] { TrainingData(synthetic(10, 1), {1.5, 0}); }).find("[0, 1)"), std::string::npos);
}

TEST(TrainSolver, LearningRateSchedules) {
  SolverConfig c;
  c.lr = 0.1;
  c.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(learning_rate(c, 0, 100), 0.025);
  EXPECT_DOUBLE_EQ(learning_rate(c, 3, 100), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(c, 50, 100), 0.1);
  c.schedule = ScheduleKind::kStep;
  c.step_size = 10;
  c.gamma = 0.5;
  EXPECT_DOUBLE_EQ(learning_rate(c, 13, 100), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(c, 14, 100), 0.05);
  EXPECT_DOUBLE_EQ(learning_rate(c, 34, 100), 0.0125);
  c.schedule = ScheduleKind::kCosine;
  c.min_lr = 0.001;
  EXPECT_DOUBLE_EQ(learning_rate(c, 4, 100), 0.1);
  EXPECT_NEAR(learning_rate(c, 4 + 95 / 2.0, 100), (0.1 + 0.001) / 2, 2e-3);
  EXPECT_DOUBLE_EQ(learning_rate(c, 99, 100), 0.001);
  EXPECT_EQ(parse_solver("adamw"), SolverKind::kAdamW);
  EXPECT_NE(error_of([] { parse_solver("lbfgs"); }).find("sgd, adam or adamw"), std::string::npos);
}

TEST(TrainInit, HeAndXavierFromTheSeed) {
  CpuBackend be(1);
  auto net = [&](uint64_t seed) {
    std::vector<std::unique_ptr<Layer>> l;
    l.push_back(make_linear("he", 400, true, InitKind::kHe));
    l.push_back(make_linear("xavier", 10, true, InitKind::kXavier));
    auto n = std::make_unique<Network>("init", std::move(l), std::vector<std::vector<int>>{{0}, {1}},
                                       NetworkConfig{{300}, 10, 2}, be, DataType::kFloat32);
    n->init_params(seed);
    return n;
  };
  auto values = [&](Network& n, size_t k) {
    const Tensor& t = n.params()[k]->value;
    std::vector<float> v(static_cast<size_t>(t.numel()));
    be.download(t, v.data());
    return v;
  };
  auto a = net(5);
  std::vector<float> he = values(*a, 0), xavier = values(*a, 2);
  double sq = 0;
  for (float v : he) sq += v * v;
  EXPECT_NEAR(std::sqrt(sq / he.size()), std::sqrt(2.0 / 300), 0.01 * std::sqrt(2.0 / 300));
  const double bound = std::sqrt(6.0 / (400 + 10));
  double xsq = 0;
  for (float v : xavier) {
    EXPECT_LE(std::fabs(v), bound);
    xsq += v * v;
  }
  EXPECT_NEAR(std::sqrt(xsq / xavier.size()), bound / std::sqrt(3.0), 0.03 * bound);
  for (float v : values(*a, 1)) EXPECT_EQ(v, 0.0f);  // biases
  EXPECT_EQ(values(*net(5), 0), he);
  EXPECT_NE(values(*net(6), 0), he);
}

}  // namespace
}  // namespace kiln::train
