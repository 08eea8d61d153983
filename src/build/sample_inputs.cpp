#include "build/sample_inputs.h"

#include <random>

#include "core/half.h"

namespace kiln::build {

namespace {

template <class T, class Gen>
void fill(std::vector<uint8_t>& b, size_t n, Gen&& gen) {
  for (size_t i = 0; i < n; ++i) reinterpret_cast<T*>(b.data())[i] = gen();
}

}  // namespace

std::vector<uint8_t> sample_values(DataType dt, size_t numel, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> b(numel * dtype_size(dt), 0);
  switch (dt) {
    case DataType::kFloat32: fill<float>(b, numel, [&] { return u(rng); }); break;
    case DataType::kFloat64: fill<double>(b, numel, [&] { return static_cast<double>(u(rng)); }); break;
    case DataType::kFloat16: fill<uint16_t>(b, numel, [&] { return Half(u(rng)).bits; }); break;
    case DataType::kBFloat16: fill<uint16_t>(b, numel, [&] { return BFloat16(u(rng)).bits; }); break;
    case DataType::kInt8:
    case DataType::kUInt8: fill<uint8_t>(b, numel, [&] { return static_cast<uint8_t>(byte(rng)); }); break;
    default: break;
  }
  return b;
}

std::vector<std::vector<uint8_t>> sample_inputs(const std::vector<TensorInfo>& inputs) {
  std::vector<std::vector<uint8_t>> r;
  uint32_t seed = 1234;
  for (const TensorInfo& t : inputs) r.push_back(sample_values(t.dtype, static_cast<size_t>(t.numel()), seed++));
  return r;
}

std::vector<std::vector<uint8_t>> sample_inputs(const Engine& e) { return sample_inputs(e.inputs()); }

}  // namespace kiln::build
