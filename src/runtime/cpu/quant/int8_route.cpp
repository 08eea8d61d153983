// The int8 route of kiln.QConv's and kiln.QMatMul's integer sums (quant_internal.h).
#include <cstdlib>
#include <cstring>

#include "runtime/cpu/igemm.h"
#include "runtime/cpu/quant/quant_internal.h"

namespace kiln::cpu::quant {

namespace {

enum class Route { kAuto, kInt8, kInt16 };

Route env_route() {
  static const Route r = [] {
    const char* v = std::getenv("KILN_CPU_IGEMM");
    if (v && std::strcmp(v, "int8") == 0) return Route::kInt8;
    if (v && std::strcmp(v, "int16") == 0) return Route::kInt16;
    return Route::kAuto;
  }();
  return r;
}

}  // namespace

bool int8_route(const TensorView& w, const Channels& c) {
  const Route r = env_route();
  if (r == Route::kInt16 || w.dtype != DataType::kInt8) return false;
  for (int32_t z : c.w_zero)
    if (z != 0) return false;
  return r == Route::kInt8 || igemm8_kernel_supported(Igemm8Kernel::kDot);
}

void shifted(const TensorView& t, int64_t offset, int64_t n, int8_t* out) {
  if (t.dtype == DataType::kInt8) {
    std::memcpy(out, t.as<const int8_t>() + offset, static_cast<size_t>(n));
    return;
  }
  const uint8_t* p = t.as<const uint8_t>() + offset;
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int8_t>(p[i] ^ 0x80);  // x - 128
}

std::vector<int32_t> row_sums(const int8_t* w, int64_t rows, int64_t k) {
  std::vector<int32_t> s(static_cast<size_t>(rows), 0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t q = 0; q < k; ++q) s[static_cast<size_t>(i)] += w[i * k + q];
  return s;
}

void subtract_zero_terms(uint32_t* sums, int64_t n, int32_t zs, const int32_t* wsum, int64_t per, bool rows) {
  if (zs == 0) return;
  const auto z = static_cast<uint32_t>(zs);
  for (int64_t i = 0; i < n; ++i) sums[i] -= z * static_cast<uint32_t>(wsum[rows ? i / per : i % per]);
}

}  // namespace kiln::cpu::quant
