// Helpers shared by the shape inference and the CPU kernels of RNN, GRU and LSTM.
#pragma once

#include <vector>

#include "core/op_kind.h"

namespace kiln {

// One gate function with its parameters.
struct RnnGateFn {
  RnnActivation act = RnnActivation::kTanh;
  float alpha = 0.0f;
  float beta = 0.0f;
};

// Weight blocks per direction: RNN 1 (i), GRU 3 (z, r, h), LSTM 4 (i, o, f, c).
int rnn_gate_blocks(OpKind kind);
// Activation slots per direction: RNN 1 (f), GRU 2 (f, g), LSTM 3 (f, g, h).
int rnn_activation_slots(OpKind kind);

// The gate functions of every direction, direction-major (num_directions * slots entries). Empty
// activations give the op's defaults. alpha / beta are consumed in list order by the activations
// that take them, as onnxruntime does (Affine, ScaledTanh, HardSigmoid: alpha and beta;
// LeakyRelu, ThresholdedRelu, Elu: alpha); one missing takes the default (LeakyRelu 0.01,
// HardSigmoid 0.2 / 0.5, Elu 1, else 0). A bidirectional op given one direction's list uses it for
// both. Leftover alpha / beta values are ignored (as onnxruntime does). Throws kiln::Error on a
// wrong number of activations or an invalid enumerator.
std::vector<RnnGateFn> rnn_gate_functions(OpKind kind, const RnnAttrs& a);

}  // namespace kiln
