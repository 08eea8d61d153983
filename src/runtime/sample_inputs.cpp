#include "runtime/sample_inputs.h"

#include <random>

#include "core/half.h"

namespace kiln {

std::vector<std::vector<uint8_t>> sample_inputs(const Engine& e) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<std::vector<uint8_t>> r;
  for (const TensorInfo& t : e.inputs()) {
    std::vector<uint8_t> b(t.bytes(), 0);
    const size_t n = static_cast<size_t>(t.numel());
    if (t.dtype == DataType::kFloat32)
      for (size_t i = 0; i < n; ++i) reinterpret_cast<float*>(b.data())[i] = u(rng);
    if (t.dtype == DataType::kFloat16)
      for (size_t i = 0; i < n; ++i) reinterpret_cast<uint16_t*>(b.data())[i] = Half(u(rng)).bits;
    r.push_back(std::move(b));
  }
  return r;
}

}  // namespace kiln
