// The calibration cache (`--calib-cache FILE`): the clipping range of every calibrated tensor, so a
// rebuild needs no data and gives the same engine. A human-readable JSON file:
//   {"format": "kiln calibration cache", "version": 1, "kiln": "0.1.0", "model": "resnet18",
//    "graph_hash": "7f0c...", "method": "entropy", "samples": 512,
//    "tensors": {"input": {"amax": 2.64, "scale": 0.0208, "min": -2.1, "max": 2.64}, ...}}
// amax is what is used (scale = amax / 127 is written for people reading the file). The graph hash
// covers the graph the INT8 pass sees (ops, attributes, wiring, weights), not the batch size, so
// a cache serves every batch size of one model but no other model; a cache of another model, of
// another format version or made by another method is refused with a message.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "calib/calib.h"
#include "graph/graph.h"

namespace kiln::calib {

inline constexpr int kCacheVersion = 1;

struct TensorRange {
  double amax = 0;
  double min = 0, max = 0;  // observed, for the reader
};

struct Cache {
  std::string model;       // the graph's name, for the reader
  std::string graph_hash;  // graph_hash() of the graph it was made for
  Method method = Method::kEntropy;
  int64_t samples = 0;
  std::map<std::string, TensorRange> tensors;
};

// 16 hex digits: XXH64 over the nodes' op kinds, encoded attributes and value names, every
// constant's dtype, shape and bytes, and the inputs' and outputs' names and dtypes.
std::string graph_hash(const graph::Graph& g);

void write_cache(const std::filesystem::path& path, const Cache& cache);
// Reads and checks the file; throws kiln::Error naming it when it is malformed or of another version.
Cache read_cache(const std::filesystem::path& path);
// Throws kiln::Error naming the file when `cache` was made for another graph or by another method.
void check_cache(const std::filesystem::path& path, const Cache& cache, const std::string& graph_hash, Method method);

}  // namespace kiln::calib
