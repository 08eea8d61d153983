// Calibration data sources (calib/data_source.h, calib/image.h): .npy folders (samples and stacks,
// several inputs), Fashion-MNIST's IDX files, PNG and JPEG images with resizing, cropping,
// normalization, channel order and layout; and the errors, each naming the file: an empty folder,
// arrays of the wrong shape or dtype, damaged or foreign images, bad --calib-preprocess items.
#include <cstddef>
#include <cstdio>
#include <fstream>

// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>
#include <png.h>

#include "calib/data_source.h"
#include "calib/image.h"
#include "data/idx.h"
#include "int8_test_util.h"

namespace kiln::calib {
namespace {

using namespace kiln::test;
namespace fs = std::filesystem;

std::vector<std::vector<float>> read_all(DataSource& src, const std::vector<InputSpec>& specs) {
  std::vector<std::vector<float>> out;
  for (;;) {
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<std::span<uint8_t>> spans;
    for (const InputSpec& s : specs) bufs.emplace_back(static_cast<size_t>(s.sample_bytes()));
    for (auto& b : bufs) spans.emplace_back(b);
    if (!src.next(spans)) return out;
    for (auto& b : bufs) {
      out.emplace_back(b.size() / 4);
      std::memcpy(out.back().data(), b.data(), b.size());
    }
  }
}

std::string open_error(const fs::path& p, const std::vector<InputSpec>& specs, const std::string& pre = "") {
  try {
    auto src = open_data_source(p, specs, pre);
    read_all(*src, specs);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const std::vector<InputSpec> kOne = {{"x", DataType::kFloat32, {4, 2, 3}}};

TEST(CalibData, NpySamplesAndStacksInFileOrder) {
  TempDir dir;
  write_tensor_file(dir.path() / "b.npy", float_tensor({3, 2, 3}, std::vector<float>(18, 2.0f)));  // 3 samples
  write_tensor_file(dir.path() / "a.npy", float_tensor({2, 3}, {1, 1, 1, 1, 1, 1}));               // 1 sample
  auto src = open_data_source(dir.path(), kOne, "");
  EXPECT_EQ(src->size(), -1);
  const auto samples = read_all(*src, kOne);
  ASSERT_EQ(samples.size(), 4u);
  EXPECT_EQ(samples[0], std::vector<float>(6, 1.0f));
  EXPECT_EQ(samples[3], std::vector<float>(6, 2.0f));
}

TEST(CalibData, NpyOfTheWrongShapeOrTypeNamesTheFile) {
  TempDir dir;
  write_tensor_file(dir.path() / "a.npy", float_tensor({2, 4}, std::vector<float>(8, 0)));
  std::string e = open_error(dir.path(), kOne);
  EXPECT_TRUE(has(e,
                  "a.npy: array of shape [2, 4] does not fit model input 'x': expected one sample [2, 3] or a "
                  "stack [K, 2, 3]"))
      << e;
  HostTensor d = float_tensor({2, 3}, std::vector<float>(6, 0));
  d.dtype = DataType::kInt32;
  write_tensor_file(dir.path() / "a.npy", d);
  e = open_error(dir.path(), kOne);
  EXPECT_TRUE(has(e, "a.npy: holds int32 data, but model input 'x' takes float32")) << e;
}

TEST(CalibData, EmptyOrMissingFolder) {
  TempDir dir;
  EXPECT_TRUE(has(open_error(dir.path(), kOne), "no calibration data in this folder"));
  EXPECT_TRUE(has(open_error(dir.path() / "nope", kOne), "nope: no such calibration folder or file"));
  std::ofstream(dir.path() / "notes.txt") << "x";
  EXPECT_TRUE(has(open_error(dir.path() / "notes.txt", kOne), "--calib takes a folder"));
}

TEST(CalibData, SeveralInputsReadSubFolders) {
  TempDir dir;
  const std::vector<InputSpec> two = {{"a", DataType::kFloat32, {1, 2}}, {"b", DataType::kFloat32, {1, 1}}};
  fs::create_directories(dir.path() / "0");
  write_tensor_file(dir.path() / "0" / "a.npy", float_tensor({2, 2}, {1, 2, 3, 4}));
  write_tensor_file(dir.path() / "0" / "b.npy", float_tensor({2, 1}, {5, 6}));
  auto src = open_data_source(dir.path(), two, "");
  const auto s = read_all(*src, two);
  ASSERT_EQ(s.size(), 4u);  // two samples of two inputs
  EXPECT_EQ(s[2], (std::vector<float>{3, 4}));
  EXPECT_EQ(s[3], (std::vector<float>{6}));
  fs::remove(dir.path() / "0" / "b.npy");
  EXPECT_TRUE(has(open_error(dir.path(), two), "no b.npy for model input 'b'"));
  EXPECT_TRUE(has(open_error(dir.path() / "0", two),
                  "the model has 2 inputs; calibration data for it is a folder of "
                  "sub-folders"));
}

const fs::path kFashion = "/usr/share/datasets/fashion-mnist";

TEST(CalibData, FashionMnistIdx) {
  if (!fs::exists(kFashion)) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const std::vector<InputSpec> mlp = {{"x", DataType::kFloat32, {8, 784}}};
  auto src = open_data_source(kFashion, mlp, "mean=0.5 std=0.25");
  EXPECT_EQ(src->size(), 60000);  // the train split is preferred
  std::vector<uint8_t> buf(784 * 4);
  std::vector<std::span<uint8_t>> spans = {buf};
  ASSERT_TRUE(src->next(spans));
  const HostTensor raw = data::read_idx(kFashion / "train-images-idx3-ubyte.gz");
  const auto* got = reinterpret_cast<const float*>(buf.data());
  for (int i = 0; i < 784; ++i) ASSERT_FLOAT_EQ(got[i], static_cast<float>((raw.data[i] / 255.0 - 0.5) / 0.25)) << i;
  const std::vector<InputSpec> wrong = {{"x", DataType::kFloat32, {8, 3, 28, 28}}};
  EXPECT_TRUE(has(open_error(kFashion, wrong), "holds 28x28 images, but model input 'x' takes float32 [3, 28, 28]"));
  EXPECT_TRUE(has(open_error(kFashion, mlp, "resize=32"), "resize= is for image folders"));
}

// ---- images ------------------------------------------------------------------------------------

void write_png(const fs::path& p, int w, int h, const std::vector<uint8_t>& rgb) {
  png_image img;
  std::memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(w);
  img.height = static_cast<png_uint_32>(h);
  img.format = PNG_FORMAT_RGB;
  ASSERT_TRUE(png_image_write_to_file(&img, p.c_str(), 0, rgb.data(), 0, nullptr)) << img.message;
}

void write_jpeg(const fs::path& p, int w, int h, const std::vector<uint8_t>& rgb) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  FILE* f = std::fopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  jpeg_stdio_dest(&c, f);
  c.image_width = static_cast<JDIMENSION>(w);
  c.image_height = static_cast<JDIMENSION>(h);
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 100, TRUE);
  jpeg_start_compress(&c, TRUE);
  for (int y = 0; y < h; ++y) {
    JSAMPROW row = const_cast<uint8_t*>(rgb.data()) + y * w * 3;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::fclose(f);
}

// An 8 x 4 image whose pixel (x, y) is (10 x, 20 y, 7).
std::vector<uint8_t> gradient() {
  std::vector<uint8_t> rgb;
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 8; ++x) rgb.insert(rgb.end(), {uint8_t(10 * x), uint8_t(20 * y), 7});
  return rgb;
}

TEST(CalibImages, PngDecodesExactly) {
  TempDir dir;
  write_png(dir.path() / "g.png", 8, 4, gradient());
  const Image img = decode_image(dir.path() / "g.png");
  EXPECT_EQ(img.width, 8);
  EXPECT_EQ(img.height, 4);
  EXPECT_EQ(img.rgb, gradient());
}

TEST(CalibImages, JpegDecodesClosely) {
  TempDir dir;
  const std::vector<uint8_t> flat(16 * 16 * 3, 120);
  write_jpeg(dir.path() / "f.jpg", 16, 16, flat);
  const Image img = decode_image(dir.path() / "f.jpg");
  ASSERT_EQ(img.rgb.size(), flat.size());
  for (uint8_t v : img.rgb) EXPECT_NEAR(v, 120, 2);
}

// Same size: no resampling. Values (v / 255 - mean) / std per channel, NCHW, RGB.
TEST(CalibImages, NormalizedNchw) {
  TempDir dir;
  write_png(dir.path() / "g.png", 8, 4, gradient());
  const std::vector<InputSpec> in = {{"img", DataType::kFloat32, {1, 3, 4, 8}}};
  auto src = open_data_source(dir.path(), in, "mean=0.5,0.25,0 std=0.5,0.5,1");
  const auto s = read_all(*src, in);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_FLOAT_EQ(s[0][0 * 32 + 2 * 8 + 5], static_cast<float>((50 / 255.0 - 0.5) / 0.5));   // R of (5, 2)
  EXPECT_FLOAT_EQ(s[0][1 * 32 + 3 * 8 + 0], static_cast<float>((60 / 255.0 - 0.25) / 0.5));  // G of (0, 3)
  EXPECT_FLOAT_EQ(s[0][2 * 32 + 0], static_cast<float>(7 / 255.0));                          // B
}

TEST(CalibImages, BgrNhwcGrayAndCrop) {
  TempDir dir;
  write_png(dir.path() / "g.png", 8, 4, gradient());
  const Image img = decode_image(dir.path() / "g.png");
  std::vector<float> out(4 * 8 * 3);
  Preprocess p = parse_preprocess("layout=nhwc color=bgr scale=1");
  ImageShape s = image_shape({4, 8, 3}, p, "img");
  EXPECT_TRUE(s.nhwc);
  preprocess_image(img, p, s, out.data());
  EXPECT_EQ(out[(2 * 8 + 5) * 3 + 0], 7.0f);   // B first
  EXPECT_EQ(out[(2 * 8 + 5) * 3 + 2], 50.0f);  // R last
  // One channel: luma. resize=4 keeps the 4-pixel side; the centre 4 x 4 crop is columns 2..5.
  p = parse_preprocess("resize=4 scale=1");
  s = image_shape({1, 4, 4}, p, "img");
  out.assign(16, 0);
  preprocess_image(img, p, s, out.data());
  EXPECT_NEAR(out[1 * 4 + 0], 0.299 * 20 + 0.587 * 20 + 0.114 * 7, 1e-4);  // pixel (2, 1)
  EXPECT_NEAR(out[3 * 4 + 3], 0.299 * 50 + 0.587 * 60 + 0.114 * 7, 1e-4);  // pixel (5, 3)
}

TEST(CalibImages, BadFilesNameTheFile) {
  TempDir dir;
  std::ofstream(dir.path() / "text.png") << "hello, not a picture";
  const std::vector<InputSpec> in = {{"img", DataType::kFloat32, {1, 3, 4, 8}}};
  EXPECT_TRUE(has(open_error(dir.path(), in), "text.png: not a PNG or JPEG image")) << open_error(dir.path(), in);
  fs::remove(dir.path() / "text.png");
  write_png(dir.path() / "g.png", 8, 4, gradient());
  std::string bytes;
  {
    std::ifstream f(dir.path() / "g.png", std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  std::ofstream(dir.path() / "g.png", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  EXPECT_TRUE(has(open_error(dir.path(), in), "g.png: damaged PNG image")) << open_error(dir.path(), in);
  fs::remove(dir.path() / "g.png");
  std::ofstream(dir.path() / "h.jpg", std::ios::binary) << std::string("\xFF\xD8\xFF\xE0garbage", 11);
  EXPECT_TRUE(has(open_error(dir.path(), in), "h.jpg: damaged JPEG image")) << open_error(dir.path(), in);
}

TEST(CalibImages, ModelInputThatIsNoImage) {
  TempDir dir;
  write_png(dir.path() / "g.png", 8, 4, gradient());
  EXPECT_TRUE(has(open_error(dir.path(), {{"v", DataType::kFloat32, {1, 10}}}), "input 'v' takes samples of shape 10"));
  EXPECT_TRUE(has(open_error(dir.path(), {{"v", DataType::kFloat32, {1, 5, 4, 4}}}), "neither 1 nor 3 channels"));
  EXPECT_TRUE(has(open_error(dir.path(), {{"v", DataType::kUInt8, {1, 3, 4, 4}}}), "float32 inputs only"));
  EXPECT_TRUE(
      has(open_error(dir.path(), {{"v", DataType::kFloat32, {1, 3, 4, 4}}}, "resize=2"), "resize must be at least 4"));
  EXPECT_TRUE(has(open_error(dir.path(), {{"v", DataType::kFloat32, {1, 3, 4, 4}}}, "mean=1,2"),
                  "mean and std need 1 or 3 values"));
}

TEST(CalibImages, PreprocessSpecErrors) {
  auto err = [](const std::string& spec) {
    try {
      parse_preprocess(spec);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(err("resize=256; mean=0.485,0.456,0.406 std=0.229,0.224,0.225 layout=nchw color=rgb scale=1/255"), "");
  EXPECT_TRUE(has(err("size=3"), "unknown key 'size'"));
  EXPECT_TRUE(has(err("mean"), "'mean' is not KEY=VALUE"));
  EXPECT_TRUE(has(err("std=1,0"), "a standard deviation of 0"));
  EXPECT_TRUE(has(err("scale=1/0"), "expected a number"));
  EXPECT_TRUE(has(err("layout=chw"), "expected nchw or nhwc"));
  EXPECT_TRUE(has(err("mean=a,b"), "expected numbers separated by commas"));
  EXPECT_FLOAT_EQ(static_cast<float>(parse_preprocess("scale=1/255").scale), 1.0f / 255);
}

}  // namespace
}  // namespace kiln::calib
