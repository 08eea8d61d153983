// Helpers shared by the INT8 tests (quantize-int8, fuse-qdq, calibration): scratch folders,
// calibration batches written as .npy files, integer initializers, building an engine and counting
// its steps by op.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "graph/tensor_file.h"
#include "kiln/engine.h"
#include "onnx_model_util.h"
#include "build/build.h"

namespace kiln::test {

// A fresh folder under the system temp dir, removed with the object.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("kiln_int8_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline HostTensor float_tensor(std::vector<int64_t> shape, const std::vector<float>& v, const std::string& name = "") {
  HostTensor t;
  t.name = name;
  t.dtype = DataType::kFloat32;
  t.shape = std::move(shape);
  t.data.resize(v.size() * 4);
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

// `files` .npy files of `shape` (a stack of samples) with values uniform in [lo, hi), in `dir`.
inline void write_batches(const std::filesystem::path& dir, int files, const std::vector<int64_t>& shape, float lo,
                          float hi, uint32_t seed = 7) {
  std::filesystem::create_directories(dir);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  for (int f = 0; f < files; ++f) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = u(rng);
    char name[32];
    std::snprintf(name, sizeof name, "batch_%03d.npy", f);
    write_tensor_file(dir / name, float_tensor(shape, v));
  }
}

// An int8 / uint8 / int32 initializer from values.
inline void init_ints(OnnxModel& m, const std::string& name, const std::vector<int64_t>& dims,
                      const std::vector<int32_t>& v, int elem_type) {
  auto* t = m.g()->add_initializer();
  t->set_name(name);
  t->set_data_type(elem_type);
  for (int64_t d : dims) t->add_dims(d);
  for (int32_t x : v) t->add_int32_data(x);
}
inline void init_floats(OnnxModel& m, const std::string& name, const std::vector<int64_t>& dims,
                        const std::vector<float>& v) {
  auto* t = m.g()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  for (float x : v) t->add_float_data(x);
}

struct Built {
  std::vector<uint8_t> engine;
  std::vector<std::string> ops;                // the engine's steps by op name
  std::map<std::string, std::string> details;  // pass name -> what it did
  graph::Graph graph;                          // after the passes
  int count(const std::string& op) const { return static_cast<int>(std::count(ops.begin(), ops.end(), op)); }
};

inline Built build_model(const OnnxModel& m, const build::BuildOptions& o) {
  Built b;
  b.graph = m.import();
  build::BuildReport r;
  b.engine = build::build_engine(b.graph, o, &r);
  for (const build::PassReport& p : r.passes) b.details[p.name] = p.detail;
  for (const StepInfo& s : Engine::from_bytes(b.engine)->summary().steps) b.ops.push_back(s.op);
  return b;
}

inline std::string build_error(const OnnxModel& m, const build::BuildOptions& o) {
  try {
    build_model(m, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// max |a - b| / max |b|.
inline double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return scale > 0 ? err / scale : err;
}

}  // namespace kiln::test
