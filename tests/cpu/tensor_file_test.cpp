// Tests for src/graph/tensor_file: .npy and .pb reading/writing, TensorProto fields, external
// data, and the errors that untrusted files must produce.
#include "graph/tensor_file.h"

#include <gtest/gtest.h>
#include <onnx/onnx-data.pb.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

namespace kiln {
namespace {

namespace fs = std::filesystem;

// Exact bytes of files written by numpy 2.4 (np.save, or np.lib.format.write_array for the
// explicit versions), so the reader is checked against the real producer without running Python.
// (1, 0) dtype('float32') (2, 3)
const uint8_t kNpyF32[] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63, 0x72, 0x27, 0x3a,
    0x20, 0x27, 0x3c, 0x66, 0x34, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74, 0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72,
    0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73, 0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65,
    0x27, 0x3a, 0x20, 0x28, 0x32, 0x2c, 0x20, 0x33, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a, 0x00, 0x00, 0x80, 0xbf, 0x00,
    0x00, 0x00, 0xbf, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x3f, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0xc0, 0x3f,
};
// (1, 0) dtype('int64') ()
const uint8_t kNpyI64Scalar[] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63, 0x72,
    0x27, 0x3a, 0x20, 0x27, 0x3c, 0x69, 0x38, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74, 0x72, 0x61,
    0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73, 0x65, 0x2c, 0x20,
    0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a, 0xf9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
};
// (1, 0) dtype('bool') (3,)
const uint8_t kNpyBool[] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63, 0x72, 0x27, 0x3a,
    0x20, 0x27, 0x7c, 0x62, 0x31, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74, 0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72,
    0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73, 0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65,
    0x27, 0x3a, 0x20, 0x28, 0x33, 0x2c, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a, 0x01, 0x00, 0x01,
};
// (1, 0) dtype('float16') (3,)
const uint8_t kNpyF16[] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63, 0x72,
    0x27, 0x3a, 0x20, 0x27, 0x3c, 0x66, 0x32, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74, 0x72, 0x61,
    0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73, 0x65, 0x2c, 0x20,
    0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x33, 0x2c, 0x29, 0x2c, 0x20, 0x7d, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a, 0x00, 0x3c, 0x00, 0xc1, 0xff, 0x7b,
};
// (2, 0) dtype('uint16') (3,)
const uint8_t kNpyU16V2[] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x02, 0x00, 0x74, 0x00, 0x00, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73,
    0x63, 0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x75, 0x32, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73, 0x65,
    0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x33, 0x2c, 0x29, 0x2c, 0x20,
    0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a, 0x00, 0x00, 0x01, 0x00, 0xff, 0xff,
};
// (3, 0) dtype('int8') (1, 2)
const uint8_t kNpyI8V3[] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x03, 0x00, 0x74, 0x00, 0x00, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63, 0x72,
    0x27, 0x3a, 0x20, 0x27, 0x7c, 0x69, 0x31, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74, 0x72, 0x61, 0x6e, 0x5f,
    0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73, 0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61,
    0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x31, 0x2c, 0x20, 0x32, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a, 0x80, 0x7f,
};
// (1, 0) dtype('float64') (0, 3)
const uint8_t kNpyF64Empty[] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63, 0x72, 0x27, 0x3a,
    0x20, 0x27, 0x3c, 0x66, 0x38, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74, 0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72,
    0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73, 0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65,
    0x27, 0x3a, 0x20, 0x28, 0x30, 0x2c, 0x20, 0x33, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
};
// (1, 0) dtype('float32') (2, 3)
const uint8_t kNpyFortran[] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63, 0x72, 0x27, 0x3a,
    0x20, 0x27, 0x3c, 0x66, 0x34, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74, 0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72,
    0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x54, 0x72, 0x75, 0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27,
    0x3a, 0x20, 0x28, 0x32, 0x2c, 0x20, 0x33, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x40, 0x40, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x80, 0x40, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0xa0, 0x40,
};
// (1, 0) dtype('complex64') (1,)
const uint8_t kNpyComplex[] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63, 0x72,
    0x27, 0x3a, 0x20, 0x27, 0x3c, 0x63, 0x38, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74, 0x72, 0x61,
    0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73, 0x65, 0x2c, 0x20,
    0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x31, 0x2c, 0x29, 0x2c, 0x20, 0x7d, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40,
};

class TensorFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_tensor_file_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& name, const void* bytes, size_t n) {
    fs::path p = dir_ / name;
    std::ofstream out(p, std::ios::binary);
    out.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(n));
    return p;
  }
  fs::path write(const std::string& name, const std::string& bytes) { return write(name, bytes.data(), bytes.size()); }
  template <size_t N>
  fs::path write(const std::string& name, const uint8_t (&bytes)[N]) {
    return write(name, bytes, N);
  }

  // Expects read_tensor_file(p) to throw kiln::Error naming the file and containing `needle`.
  void expect_read_error(const fs::path& p, const std::string& needle) {
    try {
      read_tensor_file(p);
      ADD_FAILURE() << "no error for " << p << " (expected '" << needle << "')";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(p.string()), std::string::npos) << "message does not name the file: " << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << "message lacks '" << needle << "': " << msg;
    }
  }

  fs::path dir_;
};

template <class T>
std::vector<T> values(const HostTensor& t) {
  EXPECT_EQ(t.data.size() % sizeof(T), 0u);
  std::vector<T> out(t.data.size() / sizeof(T));
  std::memcpy(out.data(), t.data.data(), t.data.size());
  return out;
}

template <class T>
HostTensor make(DataType dt, std::vector<int64_t> shape, const std::vector<T>& v, std::string name = "t") {
  HostTensor t;
  t.name = std::move(name);
  t.dtype = dt;
  t.shape = std::move(shape);
  const auto* bytes = reinterpret_cast<const uint8_t*>(v.data());
  t.data.assign(bytes, bytes + v.size() * sizeof(T));
  return t;
}

// A hand-made .npy: the given header dict (padded, newline-terminated) followed by data_bytes zeros.
std::string npy(const std::string& dict, size_t data_bytes, int major = 1) {
  std::string h = dict;
  size_t pre = major == 1 ? 10 : 12;
  while ((pre + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  for (size_t i = 0; i < pre - 8; ++i) out += static_cast<char>((h.size() >> (8 * i)) & 0xff);
  return out + h + std::string(data_bytes, '\0');
}

std::string dict(const std::string& descr, const std::string& shape, const char* fortran = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
}

// ---- files written by numpy ---------------------------------------------------------------------

TEST_F(TensorFileTest, ReadsNumpyWrittenFiles) {
  HostTensor f32 = read_tensor_file(write("f32.npy", kNpyF32));
  EXPECT_EQ(f32.name, "f32");
  EXPECT_EQ(f32.dtype, DataType::kFloat32);
  EXPECT_EQ(f32.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(values<float>(f32), (std::vector<float>{-1, -0.5f, 0, 0.5f, 1, 1.5f}));
  EXPECT_EQ(f32.view().numel(), 6);
  EXPECT_EQ(f32.view().as<float>()[5], 1.5f);

  HostTensor i64 = read_tensor_file(write("i64.npy", kNpyI64Scalar));
  EXPECT_EQ(i64.dtype, DataType::kInt64);
  EXPECT_TRUE(i64.shape.empty());
  EXPECT_EQ(i64.numel(), 1);
  EXPECT_EQ(values<int64_t>(i64), (std::vector<int64_t>{-7}));

  HostTensor b = read_tensor_file(write("b.npy", kNpyBool));
  EXPECT_EQ(b.dtype, DataType::kBool);
  EXPECT_EQ(values<uint8_t>(b), (std::vector<uint8_t>{1, 0, 1}));

  HostTensor f16 = read_tensor_file(write("f16.npy", kNpyF16));
  EXPECT_EQ(f16.dtype, DataType::kFloat16);
  std::vector<uint16_t> bits = values<uint16_t>(f16);
  ASSERT_EQ(bits.size(), 3u);
  EXPECT_EQ(Half::to_float(bits[0]), 1.0f);
  EXPECT_EQ(Half::to_float(bits[1]), -2.5f);
  EXPECT_EQ(Half::to_float(bits[2]), 65504.0f);

  HostTensor u16 = read_tensor_file(write("u16.npy", kNpyU16V2));  // format 2.0
  EXPECT_EQ(u16.dtype, DataType::kUInt16);
  EXPECT_EQ(values<uint16_t>(u16), (std::vector<uint16_t>{0, 1, 65535}));

  HostTensor i8 = read_tensor_file(write("i8.npy", kNpyI8V3));  // format 3.0
  EXPECT_EQ(i8.dtype, DataType::kInt8);
  EXPECT_EQ(i8.shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(values<int8_t>(i8), (std::vector<int8_t>{-128, 127}));

  HostTensor empty = read_tensor_file(write("empty.npy", kNpyF64Empty));
  EXPECT_EQ(empty.dtype, DataType::kFloat64);
  EXPECT_EQ(empty.shape, (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(empty.data.empty());
}

TEST_F(TensorFileTest, WritesTheSameBytesAsNumpy) {
  fs::path p = dir_ / "out.npy";
  write_tensor_file(p, make<float>(DataType::kFloat32, {2, 3}, {-1, -0.5f, 0, 0.5f, 1, 1.5f}));
  std::ifstream in(p, std::ios::binary);
  std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got, std::string(reinterpret_cast<const char*>(kNpyF32), sizeof(kNpyF32)));

  write_tensor_file(p, make<int64_t>(DataType::kInt64, {}, {-7}));
  std::ifstream in2(p, std::ios::binary);
  std::string got2((std::istreambuf_iterator<char>(in2)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got2, std::string(reinterpret_cast<const char*>(kNpyI64Scalar), sizeof(kNpyI64Scalar)));
}

// ---- round trips --------------------------------------------------------------------------------

TEST_F(TensorFileTest, RoundTripsEveryDtypeInBothFormats) {
  const DataType kAll[] = {DataType::kFloat32, DataType::kUInt8,   DataType::kInt8,   DataType::kUInt16,
                           DataType::kInt16,   DataType::kInt32,   DataType::kInt64,  DataType::kBool,
                           DataType::kFloat16, DataType::kFloat64, DataType::kUInt32, DataType::kUInt64,
                           DataType::kBFloat16};
  const std::vector<std::vector<int64_t>> kShapes = {{2, 3}, {}, {0, 4}, {5}};
  for (DataType dt : kAll) {
    for (const auto& shape : kShapes) {
      for (const char* ext : {".npy", ".pb"}) {
        if (dt == DataType::kBFloat16 && std::string(ext) == ".npy") continue;
        HostTensor t;
        t.name = "x";
        t.dtype = dt;
        t.shape = shape;
        t.data.resize(static_cast<size_t>(t.numel()) * dtype_size(dt));
        for (size_t i = 0; i < t.data.size(); ++i)
          t.data[i] = dt == DataType::kBool ? (i % 3 == 0) : static_cast<uint8_t>(i * 37 + 11);
        fs::path p = dir_ / (std::string("x") + ext);
        SCOPED_TRACE(std::string(dtype_name(dt)) + " " + shape_string(shape) + " " + ext);
        write_tensor_file(p, t);
        HostTensor r = read_tensor_file(p);
        EXPECT_EQ(r.name, "x");
        EXPECT_EQ(r.dtype, dt);
        EXPECT_EQ(r.shape, shape);
        EXPECT_EQ(r.data, t.data);
      }
    }
  }
}

TEST_F(TensorFileTest, ProtoRoundTripKeepsName) {
  HostTensor t = make<int32_t>(DataType::kInt32, {3}, {1, -2, 3}, "conv1.bias");
  onnx::TensorProto proto;
  tensor_to_proto(t, &proto);
  EXPECT_TRUE(proto.has_raw_data());
  HostTensor r = tensor_from_proto(proto, dir_, "test");
  EXPECT_EQ(r.name, "conv1.bias");
  EXPECT_EQ(values<int32_t>(r), (std::vector<int32_t>{1, -2, 3}));
  write_tensor_file(dir_ / "b.PB", t);  // extensions are case-insensitive
  EXPECT_EQ(read_tensor_file(dir_ / "b.PB").name, "conv1.bias");
}

TEST_F(TensorFileTest, BFloat16ToNpyIsRefused) {
  HostTensor t = make<uint16_t>(DataType::kBFloat16, {1}, {0x3f80});
  try {
    write_tensor_file(dir_ / "bf.npy", t);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bf.npy"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(".pb"), std::string::npos) << e.what();
  }
}

TEST_F(TensorFileTest, WriteRejectsInconsistentTensorsAndBadExtensions) {
  HostTensor t = make<float>(DataType::kFloat32, {4}, {1, 2, 3});
  EXPECT_THROW(write_tensor_file(dir_ / "a.npy", t), Error);
  EXPECT_THROW(write_tensor_file(dir_ / "a.txt", make<float>(DataType::kFloat32, {1}, {1})), Error);
  EXPECT_THROW(write_tensor_file(dir_ / "no_such_dir" / "a.npy", make<float>(DataType::kFloat32, {1}, {1})), Error);
}

// ---- TensorProto typed fields -------------------------------------------------------------------

onnx::TensorProto typed(int32_t dtype, std::vector<int64_t> dims) {
  onnx::TensorProto p;
  p.set_name("w");
  p.set_data_type(dtype);
  for (int64_t d : dims) p.add_dims(d);
  return p;
}

TEST_F(TensorFileTest, ReadsTypedFields) {
  auto p = typed(onnx::TensorProto::FLOAT, {2});
  p.add_float_data(1.5f);
  p.add_float_data(-2);
  EXPECT_EQ(values<float>(tensor_from_proto(p, dir_, "t")), (std::vector<float>{1.5f, -2}));

  p = typed(onnx::TensorProto::FLOAT16, {2});
  p.add_int32_data(Half::from_float(0.5f));
  p.add_int32_data(Half::from_float(-3));
  EXPECT_EQ(values<uint16_t>(tensor_from_proto(p, dir_, "t")),
            (std::vector<uint16_t>{Half::from_float(0.5f), Half::from_float(-3)}));

  p = typed(onnx::TensorProto::BFLOAT16, {1});
  p.add_int32_data(0x3f80);
  EXPECT_EQ(values<uint16_t>(tensor_from_proto(p, dir_, "t")), (std::vector<uint16_t>{0x3f80}));

  p = typed(onnx::TensorProto::UINT8, {3});
  for (int v : {0, 200, 255}) p.add_int32_data(v);
  EXPECT_EQ(values<uint8_t>(tensor_from_proto(p, dir_, "t")), (std::vector<uint8_t>{0, 200, 255}));

  p = typed(onnx::TensorProto::INT8, {2});
  for (int v : {-128, 127}) p.add_int32_data(v);
  EXPECT_EQ(values<int8_t>(tensor_from_proto(p, dir_, "t")), (std::vector<int8_t>{-128, 127}));

  p = typed(onnx::TensorProto::BOOL, {3});
  for (int v : {1, 0, 1}) p.add_int32_data(v);
  EXPECT_EQ(values<uint8_t>(tensor_from_proto(p, dir_, "t")), (std::vector<uint8_t>{1, 0, 1}));

  p = typed(onnx::TensorProto::INT16, {2});
  for (int v : {-32768, 32767}) p.add_int32_data(v);
  EXPECT_EQ(values<int16_t>(tensor_from_proto(p, dir_, "t")), (std::vector<int16_t>{-32768, 32767}));

  p = typed(onnx::TensorProto::UINT16, {1});
  p.add_int32_data(65535);
  EXPECT_EQ(values<uint16_t>(tensor_from_proto(p, dir_, "t")), (std::vector<uint16_t>{65535}));

  p = typed(onnx::TensorProto::INT32, {1});
  p.add_int32_data(-5);
  EXPECT_EQ(values<int32_t>(tensor_from_proto(p, dir_, "t")), (std::vector<int32_t>{-5}));

  p = typed(onnx::TensorProto::INT64, {1, 2});
  p.add_int64_data(int64_t{1} << 40);
  p.add_int64_data(-1);
  HostTensor i64 = tensor_from_proto(p, dir_, "t");
  EXPECT_EQ(i64.shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(values<int64_t>(i64), (std::vector<int64_t>{int64_t{1} << 40, -1}));

  p = typed(onnx::TensorProto::DOUBLE, {1});
  p.add_double_data(0.1);
  EXPECT_EQ(values<double>(tensor_from_proto(p, dir_, "t")), (std::vector<double>{0.1}));

  p = typed(onnx::TensorProto::UINT32, {1});
  p.add_uint64_data(4000000000u);
  EXPECT_EQ(values<uint32_t>(tensor_from_proto(p, dir_, "t")), (std::vector<uint32_t>{4000000000u}));

  p = typed(onnx::TensorProto::UINT64, {1});
  p.add_uint64_data(~uint64_t{0});
  EXPECT_EQ(values<uint64_t>(tensor_from_proto(p, dir_, "t")), (std::vector<uint64_t>{~uint64_t{0}}));

  p = typed(onnx::TensorProto::FLOAT, {0, 7});  // empty tensor with no data at all
  EXPECT_TRUE(tensor_from_proto(p, dir_, "t").data.empty());
}

// Expects tensor_from_proto to throw an Error naming `what` and containing `needle`.
void expect_proto_error(const onnx::TensorProto& p, const fs::path& base, const std::string& needle) {
  const std::string what = "initializer 'w' in model.onnx";
  try {
    tensor_from_proto(p, base, what);
    ADD_FAILURE() << "no error (expected '" << needle << "')";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << "lacks '" << needle << "': " << msg;
  }
}

TEST_F(TensorFileTest, ProtoErrors) {
  const std::pair<int, const char*> kUnsupported[] = {{8, "STRING"},        {14, "COMPLEX64"},  {15, "COMPLEX128"},
                                                      {17, "FLOAT8E4M3FN"}, {19, "FLOAT8E5M2"}, {21, "UINT4"},
                                                      {22, "INT4"},         {0, "UNDEFINED"},   {99, "99"}};
  for (auto [code, name] : kUnsupported) expect_proto_error(typed(code, {1}), dir_, name);

  auto p = typed(onnx::TensorProto::UINT8, {2});
  p.add_int32_data(1);
  p.add_int32_data(300);
  expect_proto_error(p, dir_, "out of range");

  p = typed(onnx::TensorProto::BOOL, {1});
  p.add_int32_data(2);
  expect_proto_error(p, dir_, "out of range");

  p = typed(onnx::TensorProto::INT64, {1});
  p.add_float_data(1);
  expect_proto_error(p, dir_, "int64_data");

  p = typed(onnx::TensorProto::FLOAT, {3});
  p.add_float_data(1);
  expect_proto_error(p, dir_, "float_data has 1 values");

  p = typed(onnx::TensorProto::FLOAT, {4});
  p.set_raw_data(std::string(8, '\0'));
  expect_proto_error(p, dir_, "raw_data is 8 bytes");

  p = typed(onnx::TensorProto::FLOAT, {2, -1});
  p.set_raw_data(std::string(8, '\0'));
  expect_proto_error(p, dir_, "negative");

  // 10^12 elements over 8 bytes must fail on the size check, not by allocating.
  p = typed(onnx::TensorProto::FLOAT, {1000000, 1000000});
  p.set_raw_data(std::string(8, '\0'));
  expect_proto_error(p, dir_, "raw_data is 8 bytes");
  p = typed(onnx::TensorProto::FLOAT, {1000000, 1000000});
  p.add_float_data(1);
  expect_proto_error(p, dir_, "float_data has 1 values");

  p = typed(onnx::TensorProto::FLOAT, {int64_t{1} << 40, int64_t{1} << 40});
  expect_proto_error(p, dir_, "overflows");

  p = typed(onnx::TensorProto::FLOAT, {1});
  p.set_raw_data(std::string(4, '\0'));
  p.add_float_data(1);
  expect_proto_error(p, dir_, "both");

  p = typed(onnx::TensorProto::FLOAT, {1});
  p.mutable_segment()->set_begin(0);
  expect_proto_error(p, dir_, "segment");
}

// ---- external data ------------------------------------------------------------------------------

onnx::TensorProto external(const std::string& location, const char* offset, const char* length,
                           std::vector<int64_t> dims = {3}) {
  auto p = typed(onnx::TensorProto::FLOAT, std::move(dims));
  p.set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const char* k, const char* v) {
    auto* e = p.add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  if (!location.empty()) add("location", location.c_str());
  if (offset) add("offset", offset);
  if (length) add("length", length);
  return p;
}

TEST_F(TensorFileTest, ReadsExternalData) {
  fs::create_directories(dir_ / "sub");
  const float kVals[3] = {1, 2, 3};
  std::string file(5, 'x');  // 5 bytes of other data before ours
  file.append(reinterpret_cast<const char*>(kVals), sizeof(kVals));
  write("sub/weights.bin", file);

  EXPECT_EQ(values<float>(tensor_from_proto(external("sub/weights.bin", "5", "12"), dir_, "t")),
            (std::vector<float>{1, 2, 3}));
  // Without length the data runs to the end of the file.
  EXPECT_EQ(values<float>(tensor_from_proto(external("weights.bin", "5", nullptr), dir_ / "sub", "t")),
            (std::vector<float>{1, 2, 3}));

  // A .pb file's external data is relative to the .pb's directory.
  auto p = external("weights.bin", "5", "12");
  std::string bytes = p.SerializeAsString();
  HostTensor r = read_tensor_file(write("sub/t.pb", bytes));
  EXPECT_EQ(values<float>(r), (std::vector<float>{1, 2, 3}));
}

TEST_F(TensorFileTest, ExternalDataErrors) {
  write("w.bin", std::string(12, '\0'));
  expect_proto_error(external((dir_ / "w.bin").string(), "0", "12"), dir_, "absolute");
  expect_proto_error(external("../w.bin", "0", "12"), dir_ / "sub", "'..'");
  expect_proto_error(external("a/../../w.bin", "0", "12"), dir_ / "sub", "'..'");
  expect_proto_error(external("missing.bin", "0", "12"), dir_, "missing.bin");
  expect_proto_error(external("w.bin", "4", "12"), dir_, "too short");
  expect_proto_error(external("w.bin", "20", nullptr), dir_, "past the end");
  expect_proto_error(external("w.bin", "0", "8"), dir_, "needs 12");
  expect_proto_error(external("w.bin", "4", nullptr), dir_, "needs 12");
  expect_proto_error(external("w.bin", "-1", "12"), dir_, "not a non-negative integer");
  expect_proto_error(external("w.bin", "0", "12x"), dir_, "not a non-negative integer");
  expect_proto_error(external("", "0", "12"), dir_, "location");
  // 10^12 elements against a 12-byte file fails on sizes, before any allocation.
  expect_proto_error(external("w.bin", "0", nullptr, {1000000, 1000000}), dir_, "needs 4000000000000");
  expect_proto_error(external("w.bin", "0", "99999999999999999999"), dir_, "not a non-negative integer");
  auto p = external("w.bin", "0", "12");
  p.set_raw_data(std::string(12, '\0'));
  expect_proto_error(p, dir_, "inline data");
}

// ---- .npy and .pb file errors --------------------------------------------------------------------

TEST_F(TensorFileTest, NpyErrors) {
  expect_read_error(dir_ / "missing.npy", "no such file");
  expect_read_error(write("short.npy", std::string("\x93NUMPY\x01", 7)), "too short");
  expect_read_error(write("magic.npy", npy(dict("<f4", "(1,)"), 4).replace(1, 1, "X")), "bad magic");
  expect_read_error(write("version.npy", npy(dict("<f4", "(1,)"), 4, 4)), "version 4.0");
  std::string hdr = npy(dict("<f4", "(1,)"), 4);
  expect_read_error(write("trunc_header.npy", hdr.substr(0, 40)), "truncated inside its .npy header");
  // Format 2.0 with a 4 GB header length: rejected on the length, not by reading it.
  std::string big("\x93NUMPY\x02\x00\xff\xff\xff\xff", 12);
  expect_read_error(write("big_header.npy", big + std::string(100, ' ')), "header claims");
  expect_read_error(write("trunc_data.npy", hdr.substr(0, hdr.size() - 1)), "holds 3 bytes");
  expect_read_error(write("trailing.npy", hdr + "zz"), "holds 6 bytes");
  // A header claiming 10^12 elements in a ~100-byte file fails on the size check.
  expect_read_error(write("huge.npy", npy(dict("<f4", "(1000000, 1000000)"), 0)), "4000000000000 bytes");
  expect_read_error(write("overflow.npy", npy(dict("<f8", "(4294967296, 4294967296)"), 0)), "overflows");
  expect_read_error(write("toolong.npy", npy(dict("<f4", "(99999999999999999999,)"), 0)), "too large");
  expect_read_error(write("neg.npy", npy(dict("<f4", "(2, -1)"), 0)), "negative");
  expect_read_error(write("fortran.npy", kNpyFortran), "Fortran");
  expect_read_error(write("complex.npy", kNpyComplex), "complex");
  expect_read_error(write("unicode.npy", npy(dict("<U2", "(1,)"), 8)), "string");
  expect_read_error(write("object.npy", npy(dict("|O", "(1,)"), 8)), "'|O'");
  expect_read_error(write("bigend.npy", npy(dict(">f4", "(1,)"), 4)), "big-endian");
  expect_read_error(write("void.npy", npy(dict("|V2", "(1,)"), 2)), "bfloat16");
  expect_read_error(write("struct.npy", npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", 4)),
                    "structured");
  expect_read_error(write("nokey.npy", npy("{'descr': '<f4', 'shape': (1,), }", 4)), "lacks");
  expect_read_error(write("extra.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 4)),
                    "unexpected header key");
  expect_read_error(write("garbled.npy", npy("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,)}", 4)),
                    "True or False");
  expect_read_error(write("unterminated.npy", npy("{'descr': '<f4", 4)), "unterminated");
  expect_read_error(write("empty_header.npy", npy("", 4)), "malformed");
  expect_read_error(write("data.txt", "hello"), "unknown extension");
}

TEST_F(TensorFileTest, NpyAcceptsPython2LongsAndNormalizesBools) {
  HostTensor t = read_tensor_file(write("py2.npy", npy(dict("<i4", "(2L, 1L)"), 8)));
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 1}));
  std::string b = npy(dict("|b1", "(2,)"), 0) + std::string("\x00\x07", 2);
  EXPECT_EQ(values<uint8_t>(read_tensor_file(write("b.npy", b))), (std::vector<uint8_t>{0, 1}));
}

TEST_F(TensorFileTest, PbErrors) {
  expect_read_error(write("garbage.pb", std::string("\xff\xff\xff\xff", 4)), "not a valid ONNX TensorProto");
  auto p = typed(onnx::TensorProto::FLOAT, {4});
  p.set_raw_data(std::string(8, '\0'));
  expect_read_error(write("short.pb", p.SerializeAsString()), "raw_data is 8 bytes");
  p = typed(onnx::TensorProto::STRING, {1});
  p.add_string_data("hi");
  expect_read_error(write("string.pb", p.SerializeAsString()), "STRING");
  expect_read_error(dir_ / "missing.pb", "no such file");
}

TEST_F(TensorFileTest, ReadsSequencesAndRefusesOthers) {
  onnx::SequenceProto seq;
  seq.set_elem_type(onnx::SequenceProto::TENSOR);
  auto a = typed(onnx::TensorProto::FLOAT, {2});
  a.add_float_data(1.f);
  a.add_float_data(2.f);
  auto b = typed(onnx::TensorProto::INT64, {});
  b.add_int64_data(7);
  *seq.add_tensor_values() = a;
  *seq.add_tensor_values() = b;
  std::vector<HostTensor> got = read_sequence_file(write("seq.pb", seq.SerializeAsString()));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(values<float>(got[0]), (std::vector<float>{1.f, 2.f}));
  EXPECT_EQ(got[1].dtype, DataType::kInt64);
  EXPECT_TRUE(got[1].shape.empty());

  onnx::SequenceProto empty;
  empty.set_elem_type(onnx::SequenceProto::TENSOR);
  EXPECT_TRUE(read_sequence_file(write("empty.pb", empty.SerializeAsString())).empty());

  onnx::SequenceProto nested;
  nested.set_elem_type(onnx::SequenceProto::SEQUENCE);
  *nested.add_sequence_values() = seq;
  auto expect_error = [&](const fs::path& path, const std::string& needle) {
    try {
      (void)read_sequence_file(path);
      ADD_FAILURE() << "read " << path << ", expected an error containing: " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(write("nested.pb", nested.SerializeAsString()), "holds a sequence of sequences");
  expect_error(write("garbage.pb", std::string("\xff\xff\xff\xff", 4)), "not a valid ONNX SequenceProto");
  expect_error(write("seq.npy", std::string("x")), "a sequence is read from a .pb file");
  auto bad = typed(onnx::TensorProto::FLOAT, {4});
  bad.set_raw_data(std::string(8, '\0'));
  *seq.add_tensor_values() = bad;
  expect_error(write("short.pb", seq.SerializeAsString()), "element 2");
}

TEST_F(TensorFileTest, ReadsOptionals) {
  onnx::OptionalProto opt;
  opt.set_elem_type(onnx::OptionalProto::TENSOR);
  OptionalValue none = read_optional_file(write("none.pb", opt.SerializeAsString()));
  EXPECT_FALSE(none.present);
  auto t = typed(onnx::TensorProto::FLOAT, {1});
  t.add_float_data(3.f);
  *opt.mutable_tensor_value() = t;
  OptionalValue one = read_optional_file(write("one.pb", opt.SerializeAsString()));
  ASSERT_TRUE(one.present);
  EXPECT_FALSE(one.sequence);
  ASSERT_EQ(one.values.size(), 1u);
  EXPECT_EQ(values<float>(one.values[0]), (std::vector<float>{3.f}));
  onnx::OptionalProto seq;
  seq.set_elem_type(onnx::OptionalProto::SEQUENCE);
  seq.mutable_sequence_value()->set_elem_type(onnx::SequenceProto::TENSOR);
  *seq.mutable_sequence_value()->add_tensor_values() = t;
  *seq.mutable_sequence_value()->add_tensor_values() = t;
  OptionalValue two = read_optional_file(write("seq.pb", seq.SerializeAsString()));
  EXPECT_TRUE(two.present && two.sequence);
  EXPECT_EQ(two.values.size(), 2u);
  onnx::OptionalProto nested;
  nested.set_elem_type(onnx::OptionalProto::OPTIONAL);
  *nested.mutable_optional_value() = opt;
  try {
    (void)read_optional_file(write("nested.pb", nested.SerializeAsString()));
    ADD_FAILURE() << "read a nested optional";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Kiln reads optionals of tensors and sequences"), std::string::npos)
        << e.what();
  }
}

TEST(TensorFileOnnxTestData, ReadsAbsInput) {
  const fs::path p = "/usr/share/libonnx-testdata/data/node/test_abs/test_data_set_0/input_0.pb";
  if (!fs::exists(p)) GTEST_SKIP() << p << " not installed";
  HostTensor t = read_tensor_file(p);
  EXPECT_EQ(t.dtype, DataType::kFloat32);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(t.data.size(), 60u * 4);
}

}  // namespace
}  // namespace kiln
