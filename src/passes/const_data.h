// Reading and writing the data of float constants in double, for passes that fold numbers
// (fold-batchnorm, fuse-epilogue). Computing in double and rounding once keeps folded weights as
// close to the exact result as their type allows.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace kiln::passes {

bool is_float_type(DataType t);  // float32, float64 or float16: the types the folds read and write
// A float constant's elements as doubles; empty if v is not a constant of one of those types.
std::vector<double> read_doubles(const graph::Value& v);
// The bytes of values stored as type t (one of those types).
std::vector<uint8_t> encode_doubles(DataType t, const std::vector<double>& values);

}  // namespace kiln::passes
