// IDX reading (src/data/idx.h): Debian's Fashion-MNIST files, files written here in every element
// type, and damaged files, each of which must give an error naming the file.
#include "data/idx.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <fstream>

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

const fs::path kFashion = "/usr/share/datasets/fashion-mnist";

fs::path temp(const std::string& name) { return fs::temp_directory_path() / ("kiln_idx_test_" + name); }

void write_file(const fs::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

std::vector<uint8_t> header(uint8_t type, std::vector<uint32_t> dims) {
  std::vector<uint8_t> h = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) h.insert(h.end(), {uint8_t(d >> 24), uint8_t(d >> 16), uint8_t(d >> 8), uint8_t(d)});
  return h;
}

std::string error_of(const fs::path& p) {
  try {
    read_idx(p);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Idx, ReadsFashionMnistTestSplit) {
  if (!fs::exists(kFashion)) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  LabelledImages set = read_idx_images(find_idx_split(kFashion, "t10k"));
  ASSERT_EQ(set.images.shape, (std::vector<int64_t>{10000, 1, 28, 28}));
  ASSERT_EQ(set.labels.size(), 10000u);
  EXPECT_EQ(set.num_classes, 10);
  // Fashion-MNIST's test set is balanced: 1000 images per class.
  std::vector<int> counts(10);
  for (int32_t l : set.labels) counts.at(l)++;
  for (int c : counts) EXPECT_EQ(c, 1000);
  const float* px = reinterpret_cast<const float*>(set.images.data.data());
  float lo = 1, hi = 0;
  for (int64_t i = 0; i < set.images.numel(); ++i) lo = std::min(lo, px[i]), hi = std::max(hi, px[i]);
  EXPECT_EQ(lo, 0.0f);
  EXPECT_EQ(hi, 1.0f);
}

TEST(Idx, BigEndianElementsOfEveryTypeAndGzip) {
  // int16 [2, 3] = 0..5, then -1 at the end as a sign check; float32 and float64 scalars.
  std::vector<uint8_t> b = header(0x0B, {2, 3});
  for (int16_t v : {0, 1, 2, 3, 4, -1}) b.insert(b.end(), {uint8_t(uint16_t(v) >> 8), uint8_t(v)});
  write_file(temp("i16"), b);
  HostTensor t = read_idx(temp("i16"));
  ASSERT_EQ(t.dtype, DataType::kInt16);
  ASSERT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
  const auto* v = reinterpret_cast<const int16_t*>(t.data.data());
  EXPECT_EQ(v[4], 4);
  EXPECT_EQ(v[5], -1);

  b = header(0x0E, {1});
  double d = -2.5;
  uint64_t bits;
  std::memcpy(&bits, &d, 8);
  for (int s = 56; s >= 0; s -= 8) b.push_back(uint8_t(bits >> s));
  gzFile gz = gzopen(temp("f64.gz").c_str(), "wb");
  gzwrite(gz, b.data(), b.size());
  gzclose(gz);
  t = read_idx(temp("f64.gz"));
  ASSERT_EQ(t.dtype, DataType::kFloat64);
  double back;
  std::memcpy(&back, t.data.data(), 8);
  EXPECT_EQ(back, -2.5);
  EXPECT_EQ(t.name, "kiln_idx_test_f64");
}

TEST(Idx, DamagedFilesNameTheFile) {
  write_file(temp("magic"), {1, 2, 8, 1, 0, 0, 0, 1, 7});
  EXPECT_NE(error_of(temp("magic")).find("kiln_idx_test_magic: not an IDX file"), std::string::npos);
  write_file(temp("type"), {0, 0, 0x42, 1, 0, 0, 0, 1, 7});
  EXPECT_NE(error_of(temp("type")).find("unknown IDX element type"), std::string::npos);
  std::vector<uint8_t> b = header(0x08, {3, 2});
  b.resize(b.size() + 5);  // one byte short
  write_file(temp("short"), b);
  EXPECT_NE(error_of(temp("short")).find("truncated or damaged"), std::string::npos);
  b.resize(b.size() + 2);  // one byte long
  write_file(temp("long"), b);
  EXPECT_NE(error_of(temp("long")).find("truncated or damaged"), std::string::npos);
  write_file(temp("huge"), header(0x08, {65536, 65536, 65536}));
  EXPECT_NE(error_of(temp("huge")).find("more data than any dataset"), std::string::npos);
  write_file(temp("hdr"), {0, 0, 8, 3, 0, 0});
  EXPECT_NE(error_of(temp("hdr")).find("truncated IDX header"), std::string::npos);
  EXPECT_NE(error_of(temp("missing")).find("cannot open"), std::string::npos);
}

TEST(Idx, LabelCountMismatchAndMissingSplit) {
  fs::path dir = temp("set");
  fs::create_directories(dir);
  std::vector<uint8_t> images = header(0x08, {3, 2, 2});
  images.resize(images.size() + 12, 255);
  write_file(dir / "train-images-idx3-ubyte", images);
  std::vector<uint8_t> labels = header(0x08, {2});
  labels.insert(labels.end(), {0, 1});
  write_file(dir / "train-labels-idx1-ubyte", labels);
  try {
    read_idx_images(find_idx_split(dir, "train"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 labels for 3 images"), std::string::npos) << e.what();
  }
  try {
    find_idx_split(dir, "t10k");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no t10k-images-idx3-ubyte"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln::data
