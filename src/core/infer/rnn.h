// Helpers shared by the shape inference and the CPU kernels of RNN, GRU and LSTM.
#pragma once

#include <span>
#include <vector>

#include "core/host_device.h"
#include "core/op_kind.h"
#include "core/tensor.h"

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

// The extents of an op (X [seq, batch, input], or [batch, seq, input] with layout 1; R [dirs,
// gates * hidden, hidden]) and where row t, b of X, Y and the states lie; the CPU and CUDA kernels
// index with the same functions.
struct RnnDims {
  int64_t seq, batch, input, hidden, dirs, gates;
  bool batch_first;
  KILN_HOST_DEVICE int64_t x_row(int64_t t, int64_t b) const { return batch_first ? b * seq + t : t * batch + b; }
  // Offset of row b of direction d in initial_h / Y_h / Y_c.
  KILN_HOST_DEVICE int64_t state_off(int64_t d, int64_t b) const {
    return (batch_first ? b * dirs + d : d * batch + b) * hidden;
  }
  KILN_HOST_DEVICE int64_t y_off(int64_t t, int64_t d, int64_t b) const {
    return (batch_first ? (b * seq + t) * dirs + d : (t * dirs + d) * batch + b) * hidden;
  }
};
RnnDims rnn_dims(OpKind kind, const RnnAttrs& a, std::span<const TensorView> in);

}  // namespace kiln
