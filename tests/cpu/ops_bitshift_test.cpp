// BitShift (elementwise family, integers only): shape inference + the CPU kernel against a 128-bit
// integer reference with broadcasting written out by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/shape_infer.h"
#include "exact_op_util.h"
#include "op_test_util.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln {
namespace {

using namespace kiln::test;  // Shape, Tensor, make, numel, random_tensor, infer, tolerance, str

// ---- BitShift ------------------------------------------------------------------------------

TEST(BitShift, MatchesReference) {
  std::mt19937 rng(3);
  cpu::ThreadPool pool(3);
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{7}, {7}}, {{2, 3, 4}, {4}}, {{3, 1, 5}, {1, 4, 1}},   {{}, {3}},
      {{5}, {}},  {{0, 3}, {3}},    {{300, 129}, {300, 129}}, {{64, 1}, {1, 513}}};
  for (DataType dt : {DataType::kUInt8, DataType::kUInt16, DataType::kUInt32, DataType::kUInt64})
    for (BitShiftDirection dir : {BitShiftDirection::kLeft, BitShiftDirection::kRight})
      for (const auto& [sa, sb] : cases) {
        const int bits = static_cast<int>(dtype_size(dt)) * 8;
        Tensor a = random_tensor(dt, sa, rng, 0, bits == 8 ? 255 : 65535);
        Tensor b = random_tensor(dt, sb, rng, 0, bits + 3);  // amounts past the width give 0
        std::vector<Tensor> out = run(OpKind::kBitShift, BitShiftAttrs{dir}, {&a, &b}, 1, &pool);
        const Shape os = broadcast_shapes(sa, sb);
        ASSERT_EQ(out[0].shape, os);
        const std::vector<double> va = a.values(), vb = b.values(), got = out[0].values();
        for (int64_t i = 0; i < numel(os); ++i) {
          // Broadcast index by hand: right-aligned, size-1 axes repeat.
          int64_t rem = i, ia = 0, ib = 0, ma = 1, mb = 1;
          for (size_t d = os.size(); d-- > 0;) {
            const int64_t idx = rem % os[d];
            rem /= os[d];
            const size_t da = d + sa.size() - os.size(), db = d + sb.size() - os.size();
            if (d + sa.size() >= os.size() && sa[da] != 1) ia += idx * ma;
            if (d + sa.size() >= os.size()) ma *= sa[da];
            if (d + sb.size() >= os.size() && sb[db] != 1) ib += idx * mb;
            if (d + sb.size() >= os.size()) mb *= sb[db];
          }
          const auto x = static_cast<unsigned __int128>(va[ia]);
          const auto s = static_cast<int>(vb[ib]);
          unsigned __int128 want = s >= bits ? 0 : dir == BitShiftDirection::kLeft ? x << s : x >> s;
          if (bits < 128) want &= (static_cast<unsigned __int128>(1) << bits) - 1;
          ASSERT_EQ(static_cast<double>(static_cast<uint64_t>(want)), got[i])
              << dtype_name(dt) << " " << str(sa) << " " << str(sb) << " at " << i;
        }
      }
}

TEST(BitShift, InferenceRejectsBadInputs) {
  Tensor a = make(DataType::kInt32, {3}, {1, 2, 3});
  Tensor u = make(DataType::kUInt32, {3}, {1, 2, 3});
  Tensor u8 = make(DataType::kUInt8, {3}, {1, 2, 3});
  Tensor u4 = make(DataType::kUInt32, {4}, {1, 2, 3, 4});
  EXPECT_THROW(infer(OpKind::kBitShift, BitShiftAttrs{}, {&a, &a}, 1), Error);
  EXPECT_THROW(infer(OpKind::kBitShift, BitShiftAttrs{}, {&u, &u8}, 1), Error);
  EXPECT_THROW(infer(OpKind::kBitShift, BitShiftAttrs{}, {&u, &u4}, 1), Error);
  EXPECT_THROW(infer(OpKind::kBitShift, BitShiftAttrs{static_cast<BitShiftDirection>(2)}, {&u, &u}, 1), Error);
}

}  // namespace
}  // namespace kiln
