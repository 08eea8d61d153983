// Shape ranges (core/shape_range.h): the LO..HI grammar and its errors, the default buckets, user
// buckets, and the bucket a size runs in.
#include <gtest/gtest.h>

#include "core/shape_range.h"
#include "kiln/types.h"

namespace kiln {
namespace {

using Sizes = std::vector<int64_t>;

TEST(ShapeRange, ParsesSizesAndRanges) {
  EXPECT_EQ(parse_dim_range("8", "--batch"), (DimRange{8, 8}));
  EXPECT_EQ(parse_dim_range("0", "--batch"), (DimRange{0, 0}));  // a fixed empty dimension
  EXPECT_EQ(parse_dim_range("1..64", "--batch"), (DimRange{1, 64}));
  EXPECT_EQ(parse_dim_range("5..5", "--batch"), (DimRange{5, 5}));
  EXPECT_TRUE(parse_dim_range("5..5", "--batch").fixed());
  const ShapeRange r = parse_shape_range("1..8x3x224x224", "--shape x");
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0], (DimRange{1, 8}));
  EXPECT_EQ(r[3], (DimRange{224, 224}));
  EXPECT_EQ(range_string(r), "1..8x3x224x224");
  EXPECT_EQ(range_string(parse_shape_range("2x5..512", "--shape ids")), "2x5..512");
}

// Every malformed form is refused with the option's name and the text.
TEST(ShapeRange, RefusesMalformedRanges) {
  for (const char* bad : {"", "..", "1..", "..8", "a..b", "1...8", "1..8..9", "-1", "-1..4", "8..1", "0..4", "1.5",
                          "1..x", "99999999999999999999", "1..99999999999999999999", " 1..8"}) {
    try {
      (void)parse_dim_range(bad, "--batch");
      ADD_FAILURE() << "'" << bad << "' should be refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--batch"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW((void)parse_shape_range("1..8xx3", "--shape x"), Error);
  EXPECT_THROW((void)parse_shape_range("1..8x", "--shape x"), Error);
}

TEST(ShapeRange, DefaultBucketsArePowersOfTwoAndTheEnds) {
  EXPECT_EQ(default_buckets({1, 64}), (Sizes{1, 2, 4, 8, 16, 32, 64}));
  EXPECT_EQ(default_buckets({5, 512}), (Sizes{5, 8, 16, 32, 64, 128, 256, 512}));
  EXPECT_EQ(default_buckets({3, 3}), (Sizes{3}));
  EXPECT_EQ(default_buckets({6, 7}), (Sizes{6, 7}));
  EXPECT_EQ(default_buckets({1, 100}), (Sizes{1, 2, 4, 8, 16, 32, 64, 100}));
  EXPECT_EQ(default_buckets({4, 8}), (Sizes{4, 8}));
  // Every size in range has a bucket no larger than twice itself.
  for (const DimRange& r : {DimRange{1, 64}, DimRange{5, 512}, DimRange{3, 1000}}) {
    const Sizes b = default_buckets(r);
    for (int64_t n = r.lo; n <= r.hi; ++n) {
      const int64_t got = b[bucket_for(b, r, n, "test")];
      EXPECT_GE(got, n);
      EXPECT_LE(got, std::max<int64_t>(2 * n, r.lo)) << range_string(r) << " size " << n;
    }
  }
}

TEST(ShapeRange, UserBucketsAreChecked) {
  EXPECT_EQ(parse_buckets("1,8,32,64", "--buckets"), (Sizes{1, 8, 32, 64}));
  EXPECT_EQ(buckets_string(parse_buckets("1,8,32,64", "--buckets")), "1,8,32,64");
  EXPECT_EQ(checked_buckets({1, 64}, {1, 8, 32, 64}, "--buckets"), (Sizes{1, 8, 32, 64}));
  EXPECT_EQ(checked_buckets({1, 64}, {64}, "--buckets"), (Sizes{64}));
  EXPECT_THROW((void)checked_buckets({1, 64}, {}, "--buckets"), Error);
  EXPECT_THROW((void)checked_buckets({1, 64}, {8, 4, 64}, "--buckets"), Error);   // not ascending
  EXPECT_THROW((void)checked_buckets({1, 64}, {8, 8, 64}, "--buckets"), Error);   // repeated
  EXPECT_THROW((void)checked_buckets({1, 64}, {1, 8, 128}, "--buckets"), Error);  // outside
  try {
    (void)checked_buckets({1, 64}, {1, 8, 32}, "--buckets");
    ADD_FAILURE() << "a last bucket below the range's end should be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be 64"), std::string::npos) << e.what();
  }
  for (const char* bad : {"", "1,,8", "1,8,", "0,8", "a", "1;8"})
    EXPECT_THROW((void)parse_buckets(bad, "--buckets"), Error);
}

TEST(ShapeRange, BucketForPicksTheSmallestThatHolds) {
  const Sizes b{1, 8, 32, 64};
  const DimRange r{1, 64};
  EXPECT_EQ(bucket_for(b, r, 1, "batch"), 0u);
  EXPECT_EQ(bucket_for(b, r, 2, "batch"), 1u);
  EXPECT_EQ(bucket_for(b, r, 8, "batch"), 1u);
  EXPECT_EQ(bucket_for(b, r, 9, "batch"), 2u);
  EXPECT_EQ(bucket_for(b, r, 64, "batch"), 3u);
  for (int64_t n : {0, 65, -1}) {
    try {
      (void)bucket_for(b, r, n, "input 'x' dimension 0");
      ADD_FAILURE() << n << " should be outside the range";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("outside the engine's range 1..64"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("input 'x'"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace kiln
