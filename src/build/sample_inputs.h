// Deterministic data for timing: `kiln bench`'s inputs, the builder's INT8-or-float choice
// (build/engine_timing.cpp) and its per-layer tactic timing (build/choose_tactics.cpp) all run on
// it, so that what the builder measures is what bench reports. Zeros are not neutral on a GPU:
// ResNet-50's FP16 engine ran 5.65 ms on zeros and 6.03 ms on this data, its INT8 engine 5.72 and
// 5.76, which flipped the INT8-or-float choice.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/engine.h"

namespace kiln::build {

// numel values of dtype dt: floats (64, 32, 16 and bfloat16) uniform in [-1, 1], int8 and uint8
// values uniform over their range, other integers and bools zero (safe as indices). Fixed seed.
std::vector<uint8_t> sample_values(DataType dt, size_t numel, uint32_t seed = 1234);

// One buffer per engine input, in order (sample_values, input k with seed 1234 + k).
std::vector<std::vector<uint8_t>> sample_inputs(const Engine& e);
// The same for inputs of other shapes (a range engine's inputs in range).
std::vector<std::vector<uint8_t>> sample_inputs(const std::vector<TensorInfo>& inputs);

}  // namespace kiln::build
