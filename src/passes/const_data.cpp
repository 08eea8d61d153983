#include "passes/const_data.h"

#include <cstring>

#include "core/half.h"

namespace kiln::passes {

bool is_float_type(DataType t) { return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16; }

std::vector<double> read_doubles(const graph::Value& v) {
  std::vector<double> out;
  if (!v.is_constant() || !is_float_type(v.dtype)) return out;
  const uint8_t* p = v.data->data();
  const size_t n = v.data->size() / dtype_size(v.dtype);
  out.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (v.dtype == DataType::kFloat32) {
      float f;
      std::memcpy(&f, p + i * 4, 4);
      out[i] = f;
    } else if (v.dtype == DataType::kFloat64) {
      std::memcpy(&out[i], p + i * 8, 8);
    } else {
      uint16_t h;
      std::memcpy(&h, p + i * 2, 2);
      out[i] = Half::to_float(h);
    }
  }
  return out;
}

std::vector<uint8_t> encode_doubles(DataType t, const std::vector<double>& values) {
  std::vector<uint8_t> b(values.size() * dtype_size(t));
  for (size_t i = 0; i < values.size(); ++i) {
    if (t == DataType::kFloat32) {
      const auto f = static_cast<float>(values[i]);
      std::memcpy(b.data() + i * 4, &f, 4);
    } else if (t == DataType::kFloat64) {
      std::memcpy(b.data() + i * 8, &values[i], 8);
    } else {
      const uint16_t h = Half::from_float(static_cast<float>(values[i]));
      std::memcpy(b.data() + i * 2, &h, 2);
    }
  }
  return b;
}

}  // namespace kiln::passes
