// Shape ranges (docs/decisions/55-shape-ranges.md): a dimension given as LO..HI, the buckets the
// builder plans inside it, and the bucket that holds a size at run time. `what` names the option
// or input in error messages ("--batch", "--shape input_ids").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

// One dimension: LO..HI, or a fixed size (lo == hi).
struct DimRange {
  int64_t lo = 1, hi = 1;
  bool fixed() const { return lo == hi; }
  bool contains(int64_t n) const { return n >= lo && n <= hi; }
  bool operator==(const DimRange&) const = default;
};
using ShapeRange = std::vector<DimRange>;

// "8" or "1..64": sizes from 1 (0 only as a fixed size), LO <= HI.
DimRange parse_dim_range(std::string_view text, std::string_view what);
// Dimensions separated by 'x': "1..8x3x224x224".
ShapeRange parse_shape_range(std::string_view text, std::string_view what);
// "1..64", or "8" for a fixed size.
std::string range_string(const DimRange& r);
std::string range_string(const ShapeRange& r);  // "1..8x3x224x224"

// The powers of two strictly inside the range, and both ends: 1..64 gives 1, 2, 4, ..., 64;
// 5..512 gives 5, 8, 16, ..., 256, 512; a fixed size itself.
std::vector<int64_t> default_buckets(const DimRange& r);
// Buckets a user lists (--buckets 1,8,32,64), checked against the range: ascending, inside it,
// and the last one at HI so that every size in range has a bucket. Throws kiln::Error otherwise.
std::vector<int64_t> checked_buckets(const DimRange& r, const std::vector<int64_t>& given, std::string_view what);
// "1,8,32,64" as a list of sizes, and back.
std::vector<int64_t> parse_buckets(std::string_view text, std::string_view what);
std::string buckets_string(const std::vector<int64_t>& buckets);

// The index of the smallest bucket that holds n (buckets ascending, ending at r.hi). Throws
// kiln::Error naming `what` and the range when n is outside it.
size_t bucket_for(const std::vector<int64_t>& buckets, const DimRange& r, int64_t n, std::string_view what);

}  // namespace kiln
