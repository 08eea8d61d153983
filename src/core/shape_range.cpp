#include "core/shape_range.h"

#include <charconv>
#include <system_error>

#include "kiln/types.h"

namespace kiln {
namespace {

// A whole non-negative decimal number, or -1.
int64_t parse_size(std::string_view s) {
  int64_t v = -1;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < 0) return -1;
  return v;
}

}  // namespace

DimRange parse_dim_range(std::string_view text, std::string_view what) {
  const size_t dots = text.find("..");
  if (dots == std::string_view::npos) {
    const int64_t n = parse_size(text);
    if (n < 0) throw Error(std::string(what) + ": '" + std::string(text) + "' is not a size or a range like 1..64");
    return {n, n};
  }
  const int64_t lo = parse_size(text.substr(0, dots)), hi = parse_size(text.substr(dots + 2));
  if (lo < 0 || hi < 0)
    throw Error(std::string(what) + ": '" + std::string(text) + "' is not a range like 1..64 (LO..HI, whole numbers)");
  if (lo < 1) throw Error(std::string(what) + ": the range " + std::string(text) + " must start at 1 or more");
  if (lo > hi) throw Error(std::string(what) + ": the range " + std::string(text) + " ends before it starts");
  return {lo, hi};
}

ShapeRange parse_shape_range(std::string_view text, std::string_view what) {
  ShapeRange dims;
  size_t pos = 0;
  while (true) {
    const size_t x = text.find('x', pos);
    dims.push_back(
        parse_dim_range(text.substr(pos, x == std::string_view::npos ? std::string_view::npos : x - pos), what));
    if (x == std::string_view::npos) return dims;
    pos = x + 1;
  }
}

std::string range_string(const DimRange& r) {
  return r.fixed() ? std::to_string(r.lo) : std::to_string(r.lo) + ".." + std::to_string(r.hi);
}

std::string range_string(const ShapeRange& r) {
  std::string s;
  for (size_t i = 0; i < r.size(); ++i) s += (i ? "x" : "") + range_string(r[i]);
  return s;
}

std::vector<int64_t> default_buckets(const DimRange& r) {
  std::vector<int64_t> b{r.lo};
  for (int64_t p = 1; p < r.hi && p <= (int64_t{1} << 61); p *= 2)
    if (p > r.lo) b.push_back(p);
  if (r.hi > r.lo) b.push_back(r.hi);
  return b;
}

std::vector<int64_t> checked_buckets(const DimRange& r, const std::vector<int64_t>& given, std::string_view what) {
  const std::string range = range_string(r);
  if (given.empty()) throw Error(std::string(what) + ": no buckets given for the range " + range);
  for (size_t i = 0; i < given.size(); ++i) {
    if (!r.contains(given[i]))
      throw Error(std::string(what) + ": bucket " + std::to_string(given[i]) + " is outside the range " + range);
    if (i > 0 && given[i] <= given[i - 1])
      throw Error(std::string(what) + ": buckets must be listed in ascending order without repeats (" +
                  std::to_string(given[i - 1]) + " then " + std::to_string(given[i]) + ")");
  }
  if (given.back() != r.hi)
    throw Error(std::string(what) + ": the last bucket must be " + std::to_string(r.hi) + ", the end of the range " +
                range + ", so that every size in range has a bucket");
  return given;
}

std::vector<int64_t> parse_buckets(std::string_view text, std::string_view what) {
  std::vector<int64_t> b;
  size_t pos = 0;
  while (true) {
    const size_t comma = text.find(',', pos);
    const std::string_view part =
        text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    const int64_t n = parse_size(part);
    if (n < 1) throw Error(std::string(what) + ": '" + std::string(text) + "' is not a list of sizes like 1,8,32,64");
    b.push_back(n);
    if (comma == std::string_view::npos) return b;
    pos = comma + 1;
  }
}

size_t bucket_for(const std::vector<int64_t>& buckets, const DimRange& r, int64_t n, std::string_view what) {
  if (!r.contains(n))
    throw Error(std::string(what) + ": size " + std::to_string(n) + " is outside the engine's range " +
                range_string(r) + " (rebuild the engine with a range that holds it)");
  for (size_t i = 0; i < buckets.size(); ++i)
    if (buckets[i] >= n) return i;
  throw Error(std::string(what) + ": no bucket holds size " + std::to_string(n) +
              " (the buckets end before the range)");
}

std::string buckets_string(const std::vector<int64_t>& buckets) {
  std::string r;
  for (int64_t b : buckets) {
    if (!r.empty()) r += ',';
    r += std::to_string(b);
  }
  return r;
}

}  // namespace kiln
