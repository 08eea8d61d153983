// Recognises an activation function applied to a value, written as one ONNX op or as the subgraph
// that exporters emit for it, so that fuse-epilogue can fold it into a fused op's epilogue.
#pragma once

#include <optional>
#include <vector>

#include "passes/pattern.h"

namespace kiln::passes {

struct ActivationMatch {
  Activation activation = Activation::kNone;
  float alpha = 0.0f, beta = 0.0f;  // EpilogueAttrs' parameters
  std::vector<int> nodes;           // the nodes that compute it
  graph::ValueId out = graph::kNoValue;
};

// The activation that the readers of x compute from x, if they compute nothing else (x and every
// intermediate read only inside the pattern, no graph outputs, no claimed node) and the result has
// x's shape. Forms:
//   Relu, LeakyRelu, Sigmoid, Tanh, HardSigmoid, HardSwish, Gelu (both approximations), and Clip
//   with constant or absent bounds (ReLU6 is Clip(0, 6));
//   SiLU: x * Sigmoid(x); HardSwish: x * HardSigmoid(x) with alpha 1/6 and beta 0.5;
//   GELU (erf): 0.5 * x * (1 + Erf(x / sqrt(2))), the division also as a product with 1/sqrt(2);
//   GELU (tanh): 0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), x^3 as Pow(x, 3) or x*x*x;
// the products in any order and association, their constants scalars within a relative 1e-6
// (1e-3 for float16) of the exact value.
std::optional<ActivationMatch> match_activation(const GraphIndex& ix, graph::ValueId x);

}  // namespace kiln::passes
