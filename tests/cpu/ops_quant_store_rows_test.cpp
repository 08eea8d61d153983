// The vectorized channels-last epilogue of the CPU INT8 kernels (runtime/cpu/quant/vectorized.cpp)
// against the scalar one it must equal bit for bit (quant_internal.h's store_one, which the
// channels-first kernels and the tests' references use): every activation, output type and
// residual kind, channel counts that are not a multiple of the vector width (and few enough that
// rows are grouped), row ranges that do not start at 0, sums at int32's extremes, and scales that
// saturate.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "runtime/cpu/quant/quant_internal.h"

namespace kiln::cpu::quant {
namespace {

class QuantStoreRows : public testing::TestWithParam<int64_t> {};

// Channel counts: few (rows grouped into longer ones), odd, and more than a group.
TEST_P(QuantStoreRows, EqualsStoreOneForEveryEpilogue) {
  std::mt19937 rng(11);
  const int64_t rows = 23, m_count = GetParam(), n = rows * m_count;
  std::vector<int32_t> sums(static_cast<size_t>(n));
  std::uniform_int_distribution<int32_t> s(-40000, 40000);
  for (int32_t& v : sums) v = s(rng);
  sums[0] = std::numeric_limits<int32_t>::max();
  sums[1] = std::numeric_limits<int32_t>::min();
  std::vector<int8_t> z8(static_cast<size_t>(n));
  std::vector<uint8_t> zu8(static_cast<size_t>(n));
  std::vector<float> zf(static_cast<size_t>(n));
  std::uniform_int_distribution<int> b(0, 255);
  std::uniform_real_distribution<float> f(-3, 3);
  for (int64_t i = 0; i < n; ++i) {
    zu8[static_cast<size_t>(i)] = static_cast<uint8_t>(b(rng));
    z8[static_cast<size_t>(i)] = static_cast<int8_t>(b(rng) - 128);
    zf[static_cast<size_t>(i)] = f(rng);
  }
  const int64_t shape[] = {rows, m_count};
  int checked = 0;
  for (int act = 0; act < 4; ++act)
    for (DataType out : {DataType::kFloat32, DataType::kInt8, DataType::kUInt8})
      for (int zk = 0; zk < 4; ++zk)
        for (float y_scale : {0.05f, 7e-4f}) {  // the second saturates most outputs
          Channels c;
          c.alpha.resize(static_cast<size_t>(m_count));
          c.bias.resize(static_cast<size_t>(m_count));
          c.w_zero.assign(static_cast<size_t>(m_count), 0);
          for (int64_t m = 0; m < m_count; ++m) {
            c.alpha[static_cast<size_t>(m)] = 1e-4f * (1 + static_cast<float>(m % 7));
            c.bias[static_cast<size_t>(m)] = f(rng);
          }
          c.epi.act = act;
          c.epi.act_alpha = act == 2 ? -0.5f : 0.1f;
          c.epi.act_beta = 2.5f;
          c.epi.quantize = out != DataType::kFloat32;
          c.epi.y_scale = y_scale;
          c.epi.y_zero = out == DataType::kUInt8 ? 128.0f : 3.0f;
          c.epi.qmin = out == DataType::kUInt8 ? 0.0f : -128.0f;
          c.epi.qmax = out == DataType::kUInt8 ? 255.0f : 127.0f;
          c.epi.z_scale = 0.02f;
          c.epi.z_zero = zk == 2 ? 128 : -2;
          TensorView z;
          if (zk == 1) z = TensorView{DataType::kInt8, shape, z8.data(), true};
          if (zk == 2) z = TensorView{DataType::kUInt8, shape, zu8.data(), true};
          if (zk == 3) z = TensorView{DataType::kFloat32, shape, zf.data(), true};
          if (zk) c.z = &z;
          const size_t bytes = static_cast<size_t>(n) * dtype_size(out);
          std::vector<uint8_t> got(bytes, 0xAB), want(bytes, 0xCD);
          const TensorView yg{out, shape, got.data(), true}, yw{out, shape, want.data(), true};
          store_rows(c, sums.data(), 0, 7, m_count, yg);  // two ranges, as parallel() splits them
          store_rows(c, sums.data(), 7, rows, m_count, yg);
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t m = 0; m < m_count; ++m)
              store_one(c, m, static_cast<uint32_t>(sums[static_cast<size_t>(r * m_count + m)]), yw, r * m_count + m);
          EXPECT_EQ(0, std::memcmp(got.data(), want.data(), bytes))
              << "act " << act << " out " << dtype_name(out) << " residual " << zk << " y_scale " << y_scale;
          ++checked;
        }
  EXPECT_EQ(checked, 96);
}

INSTANTIATE_TEST_SUITE_P(Channels, QuantStoreRows, testing::Values(6, 37, 70));

}  // namespace
}  // namespace kiln::cpu::quant
