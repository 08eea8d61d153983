// The quantize-int8 pass's plan (which nodes get INT8 inputs and weights, and the activations'
// ranges), shared with the accuracy guard, which builds engines with subsets of it.
#pragma once

#include <string>
#include <vector>

#include "build/build.h"
#include "passes/pass.h"

namespace kiln::build {

// The quantize-int8 pass (--int8): calibrates and inserts Q/DQ nodes around the planned targets.
passes::PassResult quantize_int8(graph::Graph& g, const BuildOptions& options);

struct Int8Target {
  size_t node;  // index in the graph's nodes
  graph::ValueId x, w;
  int axis;  // W's output-channel axis
};

// A residual branch's convolution output (ResNet's downsampling shortcut): quantized at its
// producer, so that the block's other convolution reads it as an int8 residual (fuse-qresidual)
// instead of a float32 one, four times the bytes. Only where both convolutions stay INT8.
struct Int8Residual {
  size_t tensor;             // index in tensors (the convolution's output)
  size_t producer, partner;  // the targets computing it and the Add's other input
};

struct Int8Plan {
  std::vector<Int8Target> targets;      // in node order
  std::vector<graph::ValueId> tensors;  // the activations read by targets, each once, then the residuals
  std::vector<size_t> tensor_of;        // per target: its activation's index in tensors
  std::vector<Int8Residual> residuals;
  std::vector<double> amax;             // per tensor: the calibrated range
  // Convolutions' weights as even values in [-126, 126] (7 bits, doubled): a CPU target without
  // VNNI, where oneDNN's AVX2 kernels halve int8 weights and sum pairs of products in 16 bits
  // (runtime/cpu/onednn.h, int8_even_weights).
  bool even_conv_weights = false;
};

// Inserts Q/DQ nodes into g, the graph the plan was made for, around the targets whose keep entry
// is non-zero.
void insert_qdq(graph::Graph& g, const Int8Plan& plan, const std::vector<char>& keep);

// The accuracy guard (--accuracy-budget, --validate): which targets stay INT8 so that top-1 on the
// validation data (or agreement with the float engine, without labels) drops by at most the budget.
// Prints the per-layer table through options.calib.report (or options.log).
// `allowed`: the targets the target device runs in INT8 at all (the others stay float throughout).
std::vector<char> guard_int8_layers(const graph::Graph& g, const Int8Plan& plan, const std::vector<char>& allowed,
                                    const BuildOptions& options, std::string* detail);

}  // namespace kiln::build
