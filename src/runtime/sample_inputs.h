// Deterministic inputs for timing an engine: `kiln bench` and the builder's INT8-or-float choice
// (passes/int8_choice.cpp) feed the same data, so that the choice measures what bench reports.
// Zeros are not neutral on a GPU: ResNet-50's FP16 engine ran 5.65 ms on zeros and 6.03 ms on
// these, its INT8 engine 5.72 and 5.76, which flipped the choice.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/engine.h"

namespace kiln {

// One buffer per engine input, in order: floats uniform in [-1, 1] (fixed seed), integers and bools
// zero (safe as indices).
std::vector<std::vector<uint8_t>> sample_inputs(const Engine& e);

}  // namespace kiln
