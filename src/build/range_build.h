// Range engines (docs/decisions/55-shape-ranges.md): `--batch 1..64` or `--shape NAME=1..8x...`
// builds one plan per bucket, each as a fixed build of that shape would be (rewrites, precision,
// tactics timed at the bucket's shape), sharing one timing cache, and writes them as one engine
// whose weights are stored once (by content).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "build/build.h"

namespace kiln::build {

// One ranged dimension of the inputs.
struct RangeSpec {
  std::string name;  // "batch", the model's name for the dimension, or "INPUT[AXIS]"
  DimRange range;
  std::vector<int64_t> buckets;
  std::vector<std::pair<std::string, int>> inputs;  // the inputs that carry it, and where
};

// True when the options ask for a range engine.
bool has_ranges(const BuildOptions& o);

// The ranged dimensions of g under o: those --shape ranges (grouped by the model's dimension names,
// joined by the inputs no --shape gives that carry the same name) and --batch's. Throws kiln::Error
// for ranges that conflict, fixed dimensions given a range, bad --buckets, or more than 64 plans.
std::vector<RangeSpec> resolve_ranges(const graph::Graph& g, const BuildOptions& o);

// The fixed build of one bucket: o with the ranges replaced by `sizes` (one per range).
BuildOptions bucket_options(const BuildOptions& o, const std::vector<RangeSpec>& ranges,
                            const std::vector<int64_t>& sizes);

// Builds every bucket and writes the range engine. g is left as the largest bucket's build.
std::vector<uint8_t> build_range_engine(graph::Graph& g, const BuildOptions& o, BuildReport* report);

}  // namespace kiln::build
